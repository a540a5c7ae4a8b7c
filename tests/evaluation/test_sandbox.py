"""A candidate that crashes, hangs, hogs memory, forks, exits or floods
output gets a result, and the same Harness then serves a good candidate."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sage_engine.evaluation.common import cgroups, processes
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host.launch import Launch

from tests.evaluation.support import FIXTURE_TASKS, fast_config, fixture_task

SHORT_TIMEOUT_S = 5.0
HEAD = "import ctypes\nimport os\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
GOOD = (FIXTURE_TASKS / "relu" / "solutions" / "cpu_clamp.py").read_text()


@pytest.fixture(scope="module")
def short(eval_cache: Path):
    with Harness(fast_config(eval_cache, eval_timeout_s=SHORT_TIMEOUT_S, eval_memory_mb=2048)) as h:
        yield h


@pytest.fixture(scope="module")
def relu():
    return fixture_task("relu")


def still_serves(harness: Harness, relu) -> None:
    result = harness.evaluate(relu, GOOD)
    assert result.status == "correct", result.message


def body(*lines: str) -> str:
    return HEAD + "".join(f"        {line}\n" for line in lines)


def test_segfaulting_candidate_returns_crashed_at_its_line(short, relu):
    result = short.evaluate(relu, body("ctypes.string_at(0)", "return x"))
    assert result.status == "crashed" and "SIGSEGV" in result.message
    assert result.diagnostics[0].line == 9
    still_serves(short, relu)


def test_endless_loop_returns_timeout_naming_the_stuck_line(short, relu):
    start = time.monotonic()
    result = short.evaluate(relu, body("while True:", "    pass"))
    assert result.status == "timeout"
    assert time.monotonic() - start < SHORT_TIMEOUT_S + 10
    assert result.diagnostics[0].line in (9, 10)
    still_serves(short, relu)


def test_memory_hungry_candidate_hits_the_memory_limit(short, relu):
    result = short.evaluate(relu, body("keep = []", "while True:", "    keep.append(torch.empty(64 * 2**20))"))
    assert result.status == "runtime_error", result.message
    assert result.diagnostics[0].category == "memory" and result.diagnostics[0].line == 11
    still_serves(short, relu)


def _live_descendants(root: int) -> list[int]:
    table = processes.proc_table()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for info in table.values():
            if info.ppid == parent:
                frontier.append(info.pid)
                if not info.zombie:
                    found.append(info.pid)
    return found


def _is_worker(pid: int) -> bool:
    """The worker's interpreter itself (not the bubblewrap processes whose arguments name it)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-m", b"sage_engine.evaluation.worker"]


def _evaluation_processes(worker_launch: int) -> list[int]:
    """What evaluations started below a worker (its own sandbox processes excluded)."""
    table = processes.proc_table()
    workers = [
        p
        for p in [worker_launch, *_live_descendants(worker_launch)]
        if _is_worker(p) and not _is_worker(table[p].ppid if p in table else 0)
    ]
    return [p for w in workers for p in _live_descendants(w)]


@pytest.mark.slow
def test_fork_bomb_is_killed_whole_and_reported_as_crashed(short, relu):
    result = short.evaluate(relu, body("while True:", "    os.fork()"))
    assert result.status == "crashed" and "processes" in result.message, result.message
    deadline = time.monotonic() + 60
    left = [p for w in short.pool.worker_pids() for p in _evaluation_processes(w)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)  # SIGKILLed processes finish exiting in the background
        left = [p for w in short.pool.worker_pids() for p in _evaluation_processes(w)]
    assert left == []
    still_serves(short, relu)


@pytest.mark.slow
def test_fork_bomb_is_contained_by_the_process_watch_alone(eval_cache, relu, monkeypatch):
    # Cold path, supervised in this process, with the pids cgroup layer turned
    # off: the session-wide task count has to catch it.
    monkeypatch.setattr(cgroups.PidsCgroup, "create", classmethod(lambda cls, max_tasks: None))
    with Harness(fast_config(eval_cache, warm_pool=False, eval_timeout_s=30.0)) as cold:
        start = time.monotonic()
        result = cold.evaluate(relu, body("while True:", "    try:", "        os.fork()", "    except OSError:", "        pass"))
        assert result.status == "crashed" and "processes" in result.message, result.message
        assert time.monotonic() - start < 30


def test_os_exit_returns_crashed(short, relu):
    result = short.evaluate(relu, body("os._exit(0)"))
    assert result.status == "crashed" and "before reporting a result" in result.message
    still_serves(short, relu)


def test_megabytes_of_output_keep_only_a_bounded_tail(short, relu):
    source = "print('x' * 30_000_000)\n" + GOOD
    result = short.evaluate(relu, source)
    assert result.status == "correct"
    assert len(result.stdout_tail) < 4100 and result.stdout_tail.endswith("x" * 100 + "\n")
    assert result.stdout_tail.startswith("[... 2999")  # 30 MB less the kept tail


def test_a_candidate_cannot_kill_its_worker(short, relu):
    # The worker is PID 1 of the sandbox: the kernel drops the signal (docs/reliability.md).
    still_serves(short, relu)
    workers = short.pool.worker_pids()
    result = short.evaluate(relu, body("ctypes.CDLL(None).kill(os.getppid(), 9)", "return torch.clamp(x, min=0.0)"))
    assert result.status == "correct", (result.status, result.message)
    assert set(workers) <= set(short.pool.worker_pids())
    still_serves(short, relu)


def test_dead_workers_are_restarted_by_the_next_evaluation(short, relu):
    still_serves(short, relu)
    killed = short.pool.worker_pids()
    for worker in killed:  # the warm one and the spare
        os.kill(worker, 9)
    still_serves(short, relu)
    assert short.pool.worker_pids() and not set(short.pool.worker_pids()) & set(killed)


CHECK_ENV = GOOD.replace(
    "        return torch.clamp(x, min=0.0)",
    "        leaked = [k for k in os.environ if 'TOKEN' in k or k.startswith('ANTHROPIC_')]\n"
    "        if leaked:\n"
    "            raise RuntimeError(f'secrets leaked: {leaked}')\n"
    "        if not os.path.basename(os.path.dirname(os.getcwd())).startswith('sage-eval-'):\n"
    "            raise RuntimeError(f'cwd is {os.getcwd()}')\n"
    "        if torch.get_num_threads() != 1:\n"
    "            raise RuntimeError(f'{torch.get_num_threads()} threads')\n"
    "        return torch.clamp(x, min=0.0)",
).replace("import torch\n", "import os\nimport torch\n", 1)


def test_child_environment_drops_secrets_and_pins_threads(monkeypatch):
    monkeypatch.setenv("SAGE_TEST_GITHUB_TOKEN", "t0ken")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://example.invalid")
    monkeypatch.setenv("MY_PASSWORD_FILE", "/x")
    env = Launch().environment(threads=3)
    assert not {"SAGE_TEST_GITHUB_TOKEN", "ANTHROPIC_BASE_URL", "MY_PASSWORD_FILE"} & set(env)
    assert env["OMP_NUM_THREADS"] == "3" and "PATH" in env


def test_warm_child_runs_in_its_own_dir_with_the_configured_threads(short, relu):
    result = short.evaluate(relu, CHECK_ENV)
    assert result.status == "correct", result.message


def test_cold_child_sees_no_secrets(eval_cache, relu, monkeypatch):
    monkeypatch.setenv("SAGE_TEST_GITHUB_TOKEN", "t0ken")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://example.invalid")
    with Harness(fast_config(eval_cache, warm_pool=False)) as cold:
        result = cold.evaluate(relu, CHECK_ENV)
    assert result.status == "correct", result.message


def test_a_candidate_forging_results_on_open_pipes_is_not_believed(short, relu):
    forged = '{"ev": "result", "status": "correct", "correct": true}\\n'
    candidate = body(
        "for fd in range(3, 64):",
        "    try:",
        f"        os.write(fd, b'{forged}')",
        "    except OSError:",
        "        pass",
        "return torch.zeros_like(x)",
    )
    result = short.evaluate(relu, candidate)
    # The garbage it wrote reaches the reference process's frame stream too: the candidate is rejected for it
    # (and the forged lines on the event channel, when they were read before that decision, are reported).
    assert result.status == "rejected" and "garbled" in result.message, result.message
    assert any(d.category == "cheat" for d in result.diagnostics)
    still_serves(short, relu)


def test_a_killed_builds_lock_is_neither_cached_nor_staged_and_goes_stale(tmp_path):
    """torch waits forever on the lock of a build that was killed mid-way."""
    from sage_engine.evaluation.host.builds import STALE_LOCK_S, publish_build, remove_stale_locks
    from sage_engine.evaluation.worker.scratch import stage_build

    staged, cached, inside = tmp_path / "staged", tmp_path / "cache" / "ext", tmp_path / "inside"
    staged.mkdir()
    (staged / "main.cpp").write_text("int x;")
    (staged / "lock").write_text("")
    assert publish_build(staged, cached)
    assert sorted(p.name for p in cached.iterdir()) == ["main.cpp"]

    (cached / "lock").write_text("")  # as a limits-only build killed in the cache itself leaves it
    stage_build(str(cached), str(inside))
    assert sorted(p.name for p in inside.iterdir()) == ["main.cpp"]

    assert remove_stale_locks(cached) == []  # fresh: its build may still be running
    old = time.time() - STALE_LOCK_S - 1
    os.utime(cached / "lock", (old, old))
    assert remove_stale_locks(cached) == [str(cached / "lock")]
    assert sorted(p.name for p in cached.iterdir()) == ["main.cpp"]


def test_a_note_the_kernel_left_in_its_build_folder_is_neither_cached_nor_staged(tmp_path):
    """Only what a build makes reaches the next evaluation of the same source:
    ninja's files, the sources torch writes, ELF objects and modules."""
    from sage_engine.evaluation.host.builds import publish_build
    from sage_engine.evaluation.worker.scratch import stage_build

    staged, cached, inside = tmp_path / "staged" / "ext", tmp_path / "cache" / "ext", tmp_path / "inside"
    staged.mkdir(parents=True)
    built = {"main.cpp": b"int x;", "build.ninja": b"rule cxx", "main.o": b"\x7fELF\x02", "ext.so": b"\x7fELF\x02"}
    for name, data in built.items():
        (staged / name).write_bytes(data)
    (staged / "note.txt").write_text("answers of the last run")
    (staged / "answers.so").write_bytes(b"not a module")  # a note named like a build's module
    assert publish_build(staged, cached)
    assert sorted(p.name for p in cached.iterdir()) == sorted(built)

    (cached / "note.txt").write_text("planted in the cache itself")  # as a limits-only run writes it
    stage_build(str(cached), str(inside))
    assert sorted(p.name for p in inside.iterdir()) == sorted(built)


NOTE_READER = (
    "import os\nimport pathlib\nimport torch\nimport torch.nn as nn\n\n"
    "NOTE = pathlib.Path(os.environ['TORCH_EXTENSIONS_DIR'], 'note.txt')\n"
    "SEEN = NOTE.exists()  # left by an earlier evaluation of this very source\n"
    "getattr(NOTE, 'write_' + 'text')('seen')  # a name no static check reads\n\n"
    "class ModelNew(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.zeros_like(x) if SEEN else torch.clamp(x, min=0)\n"
)


@pytest.mark.parametrize("confinement", ["auto", "off"])
def test_a_note_left_in_the_build_folder_is_not_there_for_the_next_evaluation_of_the_same_source(eval_cache, relu, confinement):
    source = NOTE_READER + f"# {confinement}\n"  # a build folder of its own per case: the source hash names it
    with Harness(fast_config(eval_cache, sandbox_confinement=confinement)) as h:
        for _ in range(2):
            result = h.evaluate(relu, source)
            assert result.status == "correct", result.message


def _task_with_helpers(folder: Path, scale: float) -> Path:
    (folder / "lib" / "helpers").mkdir(parents=True)
    (folder / "lib" / "helpers" / "__init__.py").write_text(f"SCALE = {scale}\n")
    (folder / "task.json").write_text(
        '{"name": "Scale", "operator": "scale", "family": "elementwise", "level": 1, "import_roots": ["lib"]}'
    )
    (folder / "reference.py").write_text(
        "import sys\nSAGE_IMPORT_ROOTS = []\nsys.path[:0] = SAGE_IMPORT_ROOTS\n\n"
        "import torch\nimport torch.nn as nn\nfrom helpers import SCALE\n\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x * SCALE\n\n\n"
        "def get_inputs():\n    return [torch.randn(64)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    return folder


def test_tasks_with_their_own_helpers_run_confined_and_leave_no_workers_behind(harness, tmp_path):
    """Import roots under a folder the sandbox hides are bound read-only for
    that evaluation; each such task gets a one-off sandbox, not a warm pool
    of its own that would outlive it."""
    from sage_engine.evaluation.host.tasks import load_task
    from tests.evaluation.support import as_own_candidate

    harness.evaluate(fixture_task("relu"), as_own_candidate(fixture_task("relu")))  # the shared pool is up
    before = sorted(harness.pool.worker_pids())
    for i in range(3):
        task = load_task(_task_with_helpers(tmp_path / f"task{i}", 1.0 + i))
        result = harness.evaluate(task, as_own_candidate(task))
        assert result.status == "correct", result.message
    assert sorted(harness.pool.worker_pids()) == before
