"""A host fault is never the kernel's fault (docs/reliability.md): the real
confined harness, its workers killed from outside or unable to start.

A worker that cannot start, or is lost where the candidate cannot reach it
(it is PID 1 of the sandbox), gives `host_error`, retried once on a fresh
worker first; a candidate cannot kill its worker, and one that kills itself
is still `crashed`.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from sage_engine.evaluation.backends.base import CpuBackend
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.host.tasks import load_task

from tests.evaluation.support import fast_config
from tests.evaluation.hostile_support import RELU

GOOD = (RELU / "solutions" / "cpu_clamp.py").read_text()
FORWARD = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"


def doing(first_line: str) -> str:
    """GOOD whose forward starts with `first_line`."""
    return "import os\nimport time\n" + GOOD.replace(FORWARD, FORWARD + f"        {first_line}\n", 1)


# Its first call (in correctness) sleeps long enough for a kill from outside
# to land mid-run; the rest, timing's dozens, run at the kernel's speed.
SLOW = doing("SLEPT.append(time.sleep(1.5)) if not SLEPT else None").replace("import time\n", "import time\nSLEPT = []\n", 1)
# Through getattr: a friendly static check would refuse `os.kill` before the sandbox is tested.
KILLS_ITS_WORKER = doing('getattr(os, "ki" + "ll")(os.getppid(), 9)')
KILLS_ITSELF = doing('getattr(os, "ki" + "ll")(os.getpid(), 9)')


class MovableInterpreter(CpuBackend):
    """The cpu backend with an interpreter path the test can take away, as a
    virtualenv rebuilt under a running server does."""

    python: str | None = None

    def launch(self) -> Launch:
        return Launch(python=self.python) if self.python else Launch()


@pytest.fixture
def harness(tmp_path):
    h = Harness(fast_config(tmp_path, correctness_trials=2, eval_timeout_s=60.0))
    if not h.confinement.confined:
        h.close()
        pytest.skip(f"needs bubblewrap: {h.confinement.describe()}")
    yield h
    h.close()


def workers_inside(pool) -> list[int]:
    """Each sandbox's worker process (its PID 1), as seen from here."""
    return [p for outer in pool.worker_pids() for p in _descendants(outer) if _is_worker(p)]


def _descendants(pid: int) -> list[int]:
    children = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.exists(f"/proc/{pid}/task") else []:
        try:
            children += [int(c) for c in open(f"/proc/{pid}/task/{task}/children").read().split()]
        except OSError:
            pass
    return children + [d for c in children for d in _descendants(c)]


def _is_worker(pid: int) -> bool:
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return False
    return b"sage_engine.evaluation.worker" in argv and not argv[0].endswith(b"bwrap")


def kill_busy_workers(pool, times: int, stop: threading.Event) -> list[int]:
    """SIGKILL, from outside, the worker running an evaluation, `times` times, each mid-evaluation."""
    killed: list[int] = []

    def run():
        while len(killed) < times and not stop.is_set():
            busy = [w for w in list(pool.workers) if id(w) in pool.busy and w.alive()]
            inside = [p for w in busy if w.proc for p in _descendants(w.proc.pid) if _is_worker(p)]
            if inside and inside[0] not in killed:
                time.sleep(0.8)  # inside the candidate's forward
                try:
                    os.kill(inside[0], signal.SIGKILL)
                    killed.append(inside[0])
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    threading.Thread(target=run, daemon=True).start()
    return killed


def test_a_worker_that_cannot_start_is_a_host_error_after_one_retry(tmp_path):
    backend = MovableInterpreter(fast_config(tmp_path, correctness_trials=1, eval_timeout_s=60.0))
    backend.python = str(tmp_path / "gone" / "bin" / "python")  # its virtualenv was rebuilt elsewhere
    try:
        result = backend.evaluate(load_task(str(RELU)), GOOD, trials=1)
    finally:
        backend.close()
    assert result.status == "host_error" and not result.correct, (result.status, result.message)
    assert "not of the kernel" in result.message and "gone/bin/python" in result.message
    assert "retried once" in result.message
    assert result.diagnostics[0].category == "host"


def evaluate_killing_workers(harness, task, times: int):
    """Evaluate SLOW while its busy worker is SIGKILLed from outside `times` times."""
    stop = threading.Event()
    killed = kill_busy_workers(harness.pool, times, stop)
    try:
        result = harness.evaluate(task, SLOW, trials=1)
    finally:
        stop.set()
    assert len(killed) == times
    return result


def test_a_worker_killed_from_outside_is_retried_once_then_a_host_error(harness):
    task = load_task(str(RELU))
    # Killed once: the fresh worker's run decides, and the result says what happened first.
    result = evaluate_killing_workers(harness, task, 1)
    assert result.status == "correct", (result.status, result.message)
    assert any(d.category == "host" and "fresh worker" in d.message for d in result.diagnostics), result.diagnostics
    # Killed again on the retry: the host's fault, reported.
    result = evaluate_killing_workers(harness, task, 2)
    assert result.status == "host_error", (result.status, result.message)
    assert "not of the kernel" in result.message
    assert harness.evaluate(task, GOOD, trials=1).status == "correct"  # and the next one runs


def test_a_candidate_cannot_kill_its_worker_and_one_that_kills_itself_is_crashed(harness):
    task = load_task(str(RELU))
    assert harness.evaluate(task, GOOD, trials=1).status == "correct"
    before = workers_inside(harness.pool)
    assert before
    result = harness.evaluate(task, KILLS_ITS_WORKER, trials=1)
    assert result.status == "correct", (result.status, result.message)  # the signal never reached it
    assert all(os.path.exists(f"/proc/{p}") for p in before), "the worker survived"
    result = harness.evaluate(task, KILLS_ITSELF, trials=1)
    assert result.status == "crashed" and "SIGKILL" in result.message, (result.status, result.message)


def test_a_full_queue_answers_busy_at_once_and_runs_nothing(tmp_path):
    from sage_engine.errors import Busy

    config = fast_config(tmp_path, correctness_trials=1, eval_timeout_s=60.0, eval_workers=1, eval_queue_max=1)
    task = load_task(str(RELU))
    with Harness(config) as harness:
        results: list = []
        threads = [
            threading.Thread(target=lambda: results.append(harness.evaluate(task, SLOW, trials=1))) for _ in range(2)
        ]  # one running, one waiting: the queue is full
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(harness._active) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(Busy, match=r"1 evaluation\(s\) already wait .*\(eval_queue_max 1\).*try again in about \d+ s") as e:
            harness.evaluate(task, GOOD, trials=1)
        # Refused, not queued: a queued call would have run and returned once a worker came free.
        assert e.value.kind == "busy" and e.value.retry_after_s >= 1
        for t in threads:
            t.join(120)
        assert [r.status for r in results] == ["correct", "correct"]
        assert harness.evaluate(task, GOOD, trials=1).status == "correct"  # room again


@pytest.fixture
def small_scratch(tmp_path, monkeypatch):
    """A 512 KiB filesystem as the workers' scratch space (root only: a tmpfs mount)."""
    import subprocess
    import tempfile

    where = tmp_path / "scratch"
    where.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)], capture_output=True).returncode != 0
    ):
        pytest.skip("needs root to mount a small tmpfs")
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.slow
def test_scratch_space_full_during_a_cpp_build_is_a_host_error(tmp_path, small_scratch):
    task = load_task(str(RELU))
    source = (RELU / "solutions" / "cpu_cpp.py").read_text()
    with Harness(fast_config(tmp_path / "cache", correctness_trials=1, eval_timeout_s=300.0)) as harness:
        result = harness.evaluate(task, source, trials=1)
    assert result.status == "host_error" and not result.correct, (result.status, result.message)
    assert "scratch space" in result.message and result.diagnostics[0].category == "host"
