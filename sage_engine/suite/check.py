"""`sage suite check`: every task's reference evaluated as its own candidate.

The candidate is the reference's `Model` and only what it needs, renamed
`ModelNew` (`source.self_candidate`), run through the normal harness:
seeded correctness trials on every case, then alternating timing. A sound
task comes back correct with a self-speedup near 1.0; anything else is a
task an agent should not be pointed at yet, and the check says why
(`report/causes.py`). The task's `forbid` list is lifted for this candidate only:
the reference calls exactly the operators a candidate may not.

Each sound task is then given two candidates that do nothing: zeros of the
output's shape, and a constant (the output's mean for other inputs). Either
passing marks the task `degenerate` with the reason: it cannot tell a
kernel from a constant, and nothing credited on it means anything. Every
evaluation compares small outputs relative to their scale, so zeros fail
where outputs are merely tiny (a softmax over 393216 values); what is left
is tasks whose output hardly depends on the input.

`jobs` evaluations run at once through one Harness with that many worker
slots: their correctness phases overlap, while timing takes turns and the
others stand still meanwhile (`host/pool.py`), so a GPU host's cores build
inputs and compile in parallel without disturbing what is timed. With
`rows`, each task's row is appended to that file (JSON lines) as soon as it
is checked, and with `report` an HTML page of the rows so far is rewritten
(`report/suite_page.py`): a run cut short keeps what it measured.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import os
import queue
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from sage_engine.config import Config
from sage_engine.models import ProgressCallback
from sage_engine.errors import BackendUnavailable, InvalidInput, SageError
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host.tasks import Task
from sage_engine.report import roofline, suite_page
from sage_engine.report import causes
from sage_engine.suite import randomness, source
from sage_engine import syntax

# The bar a sound suite clears on the cpu backend (docs/suite.md).
GOAL_CORRECT_PCT = 99.0  # of the tasks that can run on the backend
GOAL_SPEEDUP = (0.95, 1.05)  # median self-speedup: timing treats both sides alike
GOAL_TASK_S = 60.0  # slowest task's check, at CPU scale
MAX_JOBS = 16
# Device backends time on the device and build inputs there: half a GPU
# host's cores overlap correctness phases (compiles, input builders) while one
# timing runs at a time; the CPU backends time on the very cores jobs would
# share, so they check one task at a time unless asked.
DEVICE_BACKENDS = ("cuda", "npu")
DEVICE_JOBS_MAX = 8


def default_jobs(backend: str) -> int:
    if backend in DEVICE_BACKENDS:
        return max(1, min(DEVICE_JOBS_MAX, (os.cpu_count() or 2) // 2))
    return 1


@dataclass
class TaskCheck:
    id: str
    benchmark: str
    status: str  # "correct", "failed" or "cannot_run"
    cause: str | None = None
    detail: str = ""
    speedup: float | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    seconds: float = 0.0
    cases: int = 0
    variants: list[dict[str, str]] = field(default_factory=list)  # name, status, at, reason
    degenerate: str | None = None  # why a do-nothing candidate passes, when one does
    nulls: dict[str, str] = field(default_factory=dict)  # what each do-nothing candidate got
    bound: str | None = None  # the binding limit, where profiled
    share: float | None = None  # of that limit
    roofline: dict[str, Any] | None = None  # the chart of its point (`report.roofline.Chart`)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class SuiteCheck:
    backend: str
    jobs: int
    started: str
    wall_s: float
    load: dict[str, Any]
    tasks: list[TaskCheck] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    benchmarks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "jobs": self.jobs,
            "started": self.started,
            "wall_s": self.wall_s,
            "load": self.load,
            "summary": self.summary,
            "benchmarks": self.benchmarks,
            "tasks": [t.as_dict() for t in self.tasks],
        }


def check_suite(
    tasks: list[Task],
    config: Config,
    *,
    backend: str | None = None,
    jobs: int | None = None,
    trials: int | None = None,
    progress: ProgressCallback | None = None,
    rows: Path | None = None,
    report: Path | None = None,
) -> SuiteCheck:
    """Self-check `tasks` on `backend` with `jobs` evaluations at a time (`default_jobs` when None);
    with `report`, an HTML page of the rows so far is rewritten as each arrives."""
    backend = backend or config.backend
    jobs = default_jobs(backend) if jobs is None else jobs
    if not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise InvalidInput(f"jobs must be an integer from 1 to {MAX_JOBS}, got {jobs!r}")
    if not tasks:
        raise InvalidInput("no tasks to check; point --suite at a folder of task directories")
    with Harness(config) as probe:
        status = probe.backend_status(backend)
    if not status.ready:
        raise BackendUnavailable(f"backend {backend!r} is not ready: {status.reason}. {status.setup}".strip())
    started, begin, load_before = time.strftime("%Y-%m-%d %H:%M:%S"), time.monotonic(), _load()
    results: list[TaskCheck | None] = [None] * len(tasks)
    work: queue.Queue[int] = queue.Queue()
    for i in range(len(tasks)):
        work.put(i)
    done_lock, done = threading.Lock(), [0]
    errors: list[BaseException] = []
    out = open(rows, "a", encoding="utf-8") if rows is not None else None  # noqa: SIM115 - closed below
    page = suite_page.SuitePage(report, kind="check", backend=backend, total=len(tasks)) if report else None

    def worker(harness: Harness) -> None:
        while not errors:
            try:
                index = work.get_nowait()
            except queue.Empty:
                return
            task = tasks[index]
            try:
                checked = results[index] = check_task(harness, task, backend=backend, trials=trials)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(exc)
                return
            with done_lock:
                done[0] += 1
                if page is not None:  # first, so a row in the rows file is on the page too
                    page.add(suite_page.row_from_check(checked.as_dict()))
                if out is not None:
                    out.write(json.dumps(checked.as_dict()) + "\n")
                    out.flush()  # in the file as soon as it is known: a killed run keeps it
                if progress:
                    progress(done[0], len(tasks), task.id)

    try:
        with Harness(config.replace(eval_workers=max(config.eval_workers, jobs))) as harness:
            threads = [
                threading.Thread(target=worker, args=(harness,), name=f"suite-check-{n}", daemon=True) for n in range(min(jobs, len(tasks)))
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        if out is not None:
            out.close()
    if errors:
        raise errors[0]
    if page is not None:
        page.finish()
    checks = [r for r in results if r is not None]
    suite = SuiteCheck(backend, jobs, started, round(time.monotonic() - begin, 1), {"before": load_before, "after": _load()}, checks)
    suite.summary = summarize(checks)
    for name in sorted({c.benchmark for c in checks}):
        suite.benchmarks[name] = summarize([c for c in checks if c.benchmark == name])
    return suite


def select_tasks(suite_dir: Path | None = None, task_ids: Sequence[str] | None = None) -> list[Task]:
    """The bundled suite, or every task directory in `suite_dir`; only `task_ids` when given."""
    from sage_engine.errors import NotFound
    from sage_engine.evaluation.host.tasks import list_suite

    if suite_dir is not None and not Path(suite_dir).is_dir():
        raise InvalidInput(f"suite folder {suite_dir} does not exist")
    tasks = list_suite(Path(suite_dir) if suite_dir is not None else None)
    if task_ids:
        unknown = sorted(set(task_ids) - {t.id for t in tasks})
        if unknown:
            raise NotFound(f"unknown task ids {unknown}; `sage suite list` lists the suite's tasks")
        tasks = [t for t in tasks if t.id in set(task_ids)]
    return tasks


def check_task(harness: Harness, task: Task, *, backend: str, trials: int | None = None) -> TaskCheck:
    """One task's reference against itself."""
    benchmark = str(task.origin.get("benchmark") or ("bundled" if _bundled(task) else "local"))
    base = functools.partial(TaskCheck, id=task.id, benchmark=benchmark, cases=len(task.case_rows))
    requires = list(task.origin.get("requires") or _requirements(task))
    blocked = causes.blocking_requirement(requires, backend)
    if blocked:
        return base(status="cannot_run", cause=blocked[0], detail=blocked[1])
    try:
        candidate = self_candidate(task)
    except (SyntaxError, ValueError) as exc:
        return base(status="failed", cause="no Model class", detail=str(exc))
    start = time.monotonic()
    try:
        result = harness.evaluate(dataclasses.replace(task, forbid=()), candidate, backend=backend, trials=trials)
    except BackendUnavailable:
        raise
    except SageError as exc:
        return base(status="failed", cause="not evaluable", detail=str(exc), seconds=round(time.monotonic() - start, 2))
    timed = functools.partial(
        base,
        reference_ms=result.reference_timing.median_ms if result.reference_timing else None,
        candidate_ms=result.candidate_timing.median_ms if result.candidate_timing else None,
        seconds=round(result.duration_s, 2),
        variants=[v.model_dump() for v in result.variants],
    )
    if result.status == "correct":
        nulls, degenerate = null_checks(harness, task, backend=backend, trials=trials)
        bound, share = suite_page.point_of(result)
        chart = roofline.chart_for(result).model_dump(mode="json") if result.profile is not None else None
        return timed(
            status="correct",
            speedup=result.speedup,
            detail=result.message,
            nulls=nulls,
            degenerate=result.degenerate or degenerate,
            bound=bound,
            share=share,
            roofline=chart,
        )
    cause, detail = causes.classify(result)
    if cause == "not reproducible":
        tree = syntax.parse(task.reference_source)
        if randomness.random_in_forward(tree):
            cause = "not reproducible: random numbers in forward"
    status = "cannot_run" if causes.cannot_run(cause) else "failed"
    return timed(status=status, cause=cause, detail=detail)


NULL_WHY = {
    "zeros": "zeros pass: the output is zero, or within tolerance of it, for every input tried",
    "constant": "a constant passes: the output hardly depends on the input",
}


def null_checks(harness: Harness, task: Task, *, backend: str, trials: int | None) -> tuple[dict[str, str], str | None]:
    """What the two do-nothing candidates got, and why the task is degenerate when either passed."""
    got: dict[str, str] = {}
    for name, candidate in null_candidates(self_candidate(task)).items():
        try:
            result = harness.evaluate(dataclasses.replace(task, forbid=()), candidate, backend=backend, trials=trials)
        except SageError as exc:
            got[name] = f"not evaluable: {exc}"
            continue
        got[name] = result.status
    why = "; ".join(NULL_WHY[n] for n, status in got.items() if status == "correct")
    return got, why or None


def null_candidates(own: str) -> dict[str, str]:
    """Two candidates that compute nothing a kernel would: the reference
    (renamed, as `self_candidate` gives it) asked only for its output's
    shape, returning zeros; and one returning, everywhere, the mean of the
    reference's output for other inputs (each input's values permuted)."""
    inner = re.sub(r"\bModelNew\b", "_Reference", own)  # super(ModelNew, self) inside it too
    wrapper = """

def _flat(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _shaped(outputs, fill):
    done = [fill(o) if isinstance(o, torch.Tensor) else o for o in outputs]
    return done[0] if len(done) == 1 else tuple(done)


class ModelNew(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.reference = _Reference(*args, **kwargs)
        self.means = {}

    def forward(self, *inputs):
        outputs = _flat(self.reference(*inputs))
        if MODE == "zeros":
            return _shaped(outputs, torch.zeros_like)
        key = tuple(tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor))
        if key not in self.means:
            other = [x.reshape(-1)[torch.randperm(x.numel(), device=x.device)].reshape(x.shape)
                     if isinstance(x, torch.Tensor) and x.numel() else x for x in inputs]
            self.means[key] = [o.double().mean().item() if isinstance(o, torch.Tensor) and o.numel() else 0.0
                               for o in _flat(self.reference(*other))]
        means = iter(self.means[key])
        return _shaped(outputs, lambda o: torch.full_like(o, next(means)))
"""
    return {mode: f"import torch\n{inner}\nMODE = {mode!r}\n{wrapper}" for mode in ("zeros", "constant")}


def self_candidate(task: Task) -> str:
    """The reference's Model as ModelNew; with the task's import roots on the
    path when the model imports from them."""
    plain = source.self_candidate(task.reference_source)
    if task.import_roots and _imports_from(plain, task.import_roots):
        return source.self_candidate(task.reference_source, import_roots=task.import_roots)
    return plain


def summarize(checks: list[TaskCheck]) -> dict[str, Any]:
    """Correct share, self-speedup median and spread, slowest task, causes, goals."""
    runnable = [c for c in checks if c.status != "cannot_run"]
    correct = [c for c in runnable if c.status == "correct"]
    speedups = sorted(c.speedup for c in correct if c.speedup)
    pct = round(100.0 * len(correct) / len(runnable), 2) if runnable else None
    spread: dict[str, Any] = {"n": len(speedups)}
    if speedups:
        q1, median, q3 = _quartiles(speedups)
        spread.update(
            median=round(median, 4),
            q1=round(q1, 4),
            q3=round(q3, 4),
            iqr=round(q3 - q1, 4),
            p10=round(_tenth(speedups), 4),
            under_0_9=sum(1 for v in speedups if v < 0.9),
            min=round(speedups[0], 4),
            max=round(speedups[-1], 4),
        )
    slowest = max(checks, key=lambda c: c.seconds, default=None)
    goals = {
        "correct_pct": {"goal": f">= {GOAL_CORRECT_PCT}", "value": pct, "met": pct is not None and pct >= GOAL_CORRECT_PCT},
        "median_self_speedup": {
            "goal": f"{GOAL_SPEEDUP[0]}..{GOAL_SPEEDUP[1]}",
            "value": spread.get("median"),
            "met": "median" in spread and GOAL_SPEEDUP[0] <= spread["median"] <= GOAL_SPEEDUP[1],
        },
        "slowest_task_s": {
            "goal": f"<= {GOAL_TASK_S}",
            "value": slowest.seconds if slowest else None,
            "met": slowest is not None and slowest.seconds <= GOAL_TASK_S,
        },
    }
    return {
        "tasks": len(checks),
        "runnable": len(runnable),
        "correct": len(correct),
        "correct_pct": pct,
        "self_speedup": spread,
        "slowest": {"id": slowest.id, "seconds": slowest.seconds} if slowest else None,
        "failures": _grouped([c for c in runnable if c.status != "correct"]),
        "cannot_run": _grouped([c for c in checks if c.status == "cannot_run"]),
        "degenerate": {c.id: c.degenerate for c in checks if c.degenerate},
        "variants": _variant_counts(checks),
        "goals": goals,
    }


def _variant_counts(checks: list[TaskCheck]) -> dict[str, int]:
    """Shape variants over all tasks, by what became of them (passed, failed, dropped)."""
    counts: dict[str, int] = {}
    for c in checks:
        for v in c.variants:
            counts[v["status"]] = counts.get(v["status"], 0) + 1
    return counts


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def _tenth(values: list[float]) -> float:
    """The 10th percentile of sorted `values` (how slow an honest kernel as fast as the reference may read)."""
    return values[0] if len(values) == 1 else statistics.quantiles(values, n=10, method="inclusive")[0]


def _grouped(checks: list[TaskCheck]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for c in checks:
        groups.setdefault(c.cause or "unknown", []).append(c.id)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def _requirements(task: Task) -> list[str]:
    try:
        tree = syntax.parse(task.reference_source)
    except SyntaxError:
        return []
    return [f"{r.kind}: {r.reason}" for r in source.requirements(tree)]


def _imports_from(candidate: str, roots: tuple[str, ...]) -> bool:
    names: set[str] = set()
    for node in ast.walk(syntax.parse(candidate)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return any((Path(r) / n).exists() or (Path(r) / f"{n}.py").exists() for r in roots for n in names)


def _bundled(task: Task) -> bool:
    from sage_engine.evaluation.host.tasks import default_suite_dir

    return task.reference_path is not None and default_suite_dir() in task.reference_path.parents


def _load() -> dict[str, float]:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return {}
    return {"load1": round(one, 2), "load5": round(five, 2), "cpus": os.cpu_count() or 0}
