"""`sage suite import PATH`: public benchmark tasks as SAGE task directories.

Three layouts, as their repositories publish them:

- NPUKernelBench task directories (`tasks/levelN/<Category>/<Op>/validation/...`),
  see `npukernelbench.py`;
- MultiKernelBench's NPU files with JSON input groups
  (`reference/npukernelbench_levelN/N_name.py` + `.json`), see `multikernelbench.py`;
- KernelBench-convention files: KernelBench's `KernelBench/levelN/N_Name.py`
  and MultiKernelBench's category folders, see `kernelbench.py`.

Every task gets `origin` in task.json (benchmark, path inside it, commit when
the checkout is a git work tree) and, from the reference's code, what it
needs beyond a CPU (`origin.requires`). With `scale="cpu"` each task's sizes
are then chosen for a CPU in the sandbox (`scaling.py`) and the originals
recorded. Levels map onto SAGE's 1..3 (level 0 -> 1, level 4 -> 3);
tolerances stay SAGE's (`tolerance_mode = "npukernelbench"` is that
benchmark's rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sage_engine.errors import InvalidInput
from sage_engine.models import ProgressCallback
from sage_engine.evaluation.host.tasks import DEFAULT_SEED
from sage_engine.suite import kernelbench, multikernelbench, npukernelbench
from sage_engine.suite import source as src
from sage_engine.suite.common import ImportedTask, benchmark_root, git_commit, write_task
from sage_engine import syntax

SCALES = ("cpu",)


def detect_layout(path: Path) -> str | None:
    """`npukernelbench`, `multikernelbench`, `kernelbench`, or None."""
    if npukernelbench.is_task_dir(path):
        return "npukernelbench"
    if multikernelbench.is_task_file(path):
        return "multikernelbench"
    if kernelbench.is_task_file(path):
        return "kernelbench"
    return None


def find_tasks(root: Path) -> list[tuple[Path, str]]:
    """Every importable task at or under `root`, in path order."""
    root = root.expanduser().resolve()
    if not root.exists():
        raise InvalidInput(f"{root} does not exist")
    layout = detect_layout(root)
    if layout:
        return [(root, layout)]
    found: list[tuple[Path, str]] = []
    if root.is_dir():
        for module in sorted(root.rglob("validation/module.py")):
            found.append((module.parent.parent, "npukernelbench"))
        taken = {p for p, _ in found}
        for py in sorted(root.rglob("*.py")):
            if any(t in py.parents for t in taken) or _not_a_task_folder(py, root):
                continue
            kind = detect_layout(py)
            if kind in ("multikernelbench", "kernelbench"):
                found.append((py, kind))
    return found


# Folders of a checkout that hold the benchmark's own tooling and examples, not tasks
# (KernelBench's scripts/ and src/ define small Models of their own).
TOOLING_FOLDERS = ("prompts", "results", "site-packages", "scripts", "src", "notebooks", "docs")


def _not_a_task_folder(py: Path, root: Path) -> bool:
    """Skip prompt examples, caches and hidden folders inside a checkout."""
    parts = py.relative_to(root).parts[:-1]
    return any(p.startswith((".", "_")) or p in TOOLING_FOLDERS for p in parts)


def import_tasks(
    src_path: Path,
    dest: Path,
    *,
    overwrite: bool = False,
    max_cases: int | None = None,
    scale: str | None = None,
    backend: Any = None,
    progress: ProgressCallback | None = None,
) -> list[ImportedTask]:
    """Convert every task found at `src_path` into a task directory under
    `dest`. `scale="cpu"` needs `backend` (a sandbox backend) to size them."""
    if scale is not None and scale not in SCALES:
        raise InvalidInput(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if scale is not None and backend is None:
        raise InvalidInput("scaling runs the references in the sandbox: pass a backend")
    tasks = find_tasks(Path(src_path))
    if not tasks:
        raise InvalidInput(
            f"no NPUKernelBench task directory (validation/module.py) or MultiKernelBench/KernelBench "
            f"task file (class Model + get_inputs or get_input_groups) found at {src_path}"
        )
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    name, root = benchmark_root(Path(src_path).expanduser().resolve())
    commit = git_commit(root)
    taken: set[str] = set()
    out = []
    for index, (path, layout) in enumerate(tasks):
        if progress:
            progress(index, len(tasks), f"importing {path.name}")
        converted = _convert(path, layout, max_cases)
        converted.id = _unique(converted.id, path, taken)
        taken.add(converted.id)
        requires = [
            f"{r.kind}: {r.reason}" + (f" (line {r.line})" if r.line else "") for r in src.requirements(syntax.parse(converted.reference))
        ]
        origin: dict[str, Any] = {"benchmark": name or _benchmark_of(layout), "path": str(path.relative_to(root)) if root else str(path)}
        if commit:
            origin["commit"] = commit
        if requires:
            origin["requires"] = requires
        if converted.helpers:
            origin["helpers"] = sorted(converted.helpers)
        target, cases = write_task(dest, converted, overwrite=overwrite, origin=origin)
        out.append(ImportedTask(converted.id, target, path, layout, cases, list(converted.notes), origin["benchmark"], requires))
    if scale == "cpu":
        _scale_all(out, backend, progress)
    if progress:
        progress(len(tasks), len(tasks), "done")
    return out


def _convert(path: Path, layout: str, max_cases: int | None):
    if layout == "npukernelbench":
        return npukernelbench.convert(path, max_cases=max_cases, seed=DEFAULT_SEED)
    if layout == "multikernelbench":
        return multikernelbench.convert(path, max_cases=max_cases, seed=DEFAULT_SEED)
    return kernelbench.convert(path, seed=DEFAULT_SEED)


def _scale_all(tasks: list[ImportedTask], backend: Any, progress: ProgressCallback | None) -> None:
    from sage_engine.suite.scaling import scale_task

    for index, task in enumerate(tasks):
        if progress:
            progress(index, len(tasks), f"sizing {task.id} for CPU")
        if task.requires:
            task.notes.append("sizes kept: the reference needs " + task.requires[0].split(":")[0])
            continue
        report = scale_task(task.path, backend)
        if report.error:
            task.notes.append(report.error)
        elif report.scaled_cases:
            task.notes.append(f"sized for CPU: {report.scaled_cases} case(s) scaled down (originals in task.json)")
        task.notes.extend(report.notes)


def _unique(tid: str, path: Path, taken: set[str]) -> str:
    """Ids stay short (what users type); a clash in one import gets the level, then a number."""
    if tid not in taken:
        return tid
    for part in reversed(path.parts[:-1]):
        if "level" in part.lower():
            candidate = f"{tid}_l{''.join(ch for ch in part if ch.isdigit())}"
            if candidate not in taken:
                return candidate
            break
    n = 2
    while f"{tid}_{n}" in taken:
        n += 1
    return f"{tid}_{n}"


def _benchmark_of(layout: str) -> str:
    return {"npukernelbench": "NPUKernelBench", "multikernelbench": "MultiKernelBench"}.get(layout, "KernelBench")
