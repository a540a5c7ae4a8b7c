"""How evaluations are confined and supervised: bubblewrap or limits-only,
said on every result; `required` refuses without it; bubblewrap failing at
run time is a `sandbox_error`; cancellation and a hung candidate hold up
only their own caller; leftovers of dead SAGE processes are swept.

The sandbox itself is real here (bubblewrap where it works); the tests that
need it skip with the reason where this host cannot confine.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sage_engine.errors import BackendUnavailable
from sage_engine.errors import Cancelled
from sage_engine.evaluation.host import results
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host import confine
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.host.launch import process_start, sweep_leftovers, torch_package
from sage_engine.evaluation.protocol import MAX_TASKS

from tests.support.parts import require
from tests.evaluation.support import fast_config, fixture_task

CONFINEMENT = confine.probe("auto")
needs_bwrap = pytest.mark.skipif(not CONFINEMENT.confined, reason=f"needs bubblewrap: {CONFINEMENT.describe()}")
RELU = fixture_task("relu")
GOOD = RELU.examples["cpu_clamp"].read_text()
HUNG = GOOD.replace("return torch.clamp(x, min=0.0)", "while True:\n            pass")
CANCEL_LIMIT_S = 1.0


def test_this_host_confines_candidates():
    """CI requires bubblewrap (SAGE_TEST_REQUIRE=bwrap): the confined tests below must not all skip there."""
    if not CONFINEMENT.confined:
        require("bwrap", f"candidates here run {CONFINEMENT.describe()}")


# ------------------------------------------------------------ the layout (pure)


def test_the_memory_folder_its_token_and_home_are_what_a_sandbox_hides(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    for d in (home, data):
        d.mkdir()
    db = data / "memory.db"
    db.write_text("")
    (data / "memory.mcp-token").write_text("t")
    dirs, files = confine.hidden_for(db, home, tmp_path / "no-config-dir")
    assert {str(home), str(data)} <= set(dirs) and str(tmp_path / "no-config-dir") not in dirs
    assert {str(db), str(data / "memory.mcp-token")} <= set(files)


def test_hidden_folders_are_covered_and_only_what_is_needed_comes_back_read_only(tmp_path):
    # Folders that exist outside /tmp wherever the checkout is (inside the
    # sandbox /tmp is a fresh tmpfs already, so nothing under it is covered):
    # the standard library stands in for a home holding SAGE's virtualenv.
    home = Path(os.__file__).parent
    venv, inner = home / "email", home / "email" / "mime"
    layout = confine.Layout(
        hidden_dirs=(str(home), str(inner)),
        hidden_files=("/etc/hostname",),
        readable=(str(venv), str(home)),
        writable=((str(tmp_path), str(tmp_path)),),
        devices=("/dev/null",),
    )
    argv = confine.bwrap_argv("bwrap", layout, ["python", "-V"])
    pairs = list(zip(argv, argv[1:]))
    at = {pair: i for i, pair in enumerate(pairs)}
    assert at[("--tmpfs", str(home))] < at[("--ro-bind", str(venv))] < at[("--tmpfs", str(inner))]
    assert ("--ro-bind", str(home)) not in pairs  # a needed path never uncovers a hidden folder whole
    assert ("--ro-bind", "/dev/null") in pairs and argv[argv.index("/etc/hostname") - 2] == "--ro-bind"
    assert ("--bind", str(tmp_path)) in pairs and ("--dev-bind", "/dev/null") in pairs
    assert ("--remount-ro", str(home)) in pairs
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop"):
        assert flag in argv
    assert argv[-3:] == ["--", "python", "-V"]


@needs_bwrap
def test_a_cpp_build_names_torch_where_every_checkout_and_virtualenv_sees_it(harness):
    """Inside the sandbox torch is also at `confine.TORCH_MOUNT`, ahead on
    the path: a build's flags name that folder, not this virtualenv's, so a
    build cached by one checkout is up to date for ninja in any other."""
    source = RELU.examples["cpu_cpp"].read_text()
    result = harness.evaluate(RELU, source)
    assert result.status == "correct", result.message
    spec = harness.backend("cpu").build_spec(source)
    assert spec is not None
    ninja = next(Path(spec.cache).rglob("build.ninja")).read_text()
    assert f"-isystem {confine.TORCH_MOUNT}/torch/include " in ninja and f"-L{confine.TORCH_MOUNT}/torch/lib " in ninja
    torch_dir = torch_package(confine.interpreter_path(sys.executable))
    assert torch_dir is not None and torch_dir not in ninja


PLANTS_ON_ITS_PATH = """import os
import torch.nn as nn

found = {}
for folder in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if folder:
        try:
            fd = getattr(os, "o" + "pen")(os.path.join(folder, "json.py"), os.O_WRONLY | os.O_CREAT, 0o644)
            found[folder] = "written"
        except OSError as exc:
            found[folder] = exc.strerror
raise RuntimeError(repr(found))


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


@needs_bwrap
def test_no_folder_on_the_workers_python_path_takes_a_module_from_a_candidate(harness):
    """Ahead of the standard library there: a `json.py` left in one would be
    imported by every later evaluation's processes of that worker."""
    result = harness.evaluate(RELU, PLANTS_ON_ITS_PATH)
    assert result.status == "compile_error", result.message
    found = ast.literal_eval(result.message[result.message.index("{") : result.message.rindex("}") + 1])
    assert confine.TORCH_MOUNT in found and len(found) >= 2, found
    assert set(found.values()) == {"Read-only file system"}, found


def test_a_missing_or_failing_bubblewrap_is_limits_only_with_the_command_that_fixes_it(tmp_path):
    missing = confine.probe("auto", str(tmp_path / "no-bwrap"))
    assert missing.mode == confine.LIMITS_ONLY and "apt-get install -y bubblewrap" in missing.fix
    failing = tmp_path / "bwrap"
    failing.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    failing.chmod(0o755)
    broken = confine.probe("auto", str(failing))
    assert broken.mode == confine.LIMITS_ONLY and "No permissions" in broken.detail and broken.fix
    off = confine.probe("off")
    assert off.mode == confine.LIMITS_ONLY and "off" in off.detail


# ------------------------------------------------------------ results and settings


@needs_bwrap
def test_every_result_says_how_its_candidate_was_confined(harness):
    result = harness.evaluate(RELU, GOOD)
    assert result.status == "correct" and result.confinement == "bubblewrap"
    assert not any(d.category == "confinement" for d in result.diagnostics)
    assert harness.backend_status("cpu").confinement.startswith("bubblewrap")


def test_without_confinement_the_result_says_limits_only_and_how_to_fix_it(eval_cache):
    with Harness(fast_config(eval_cache, sandbox_confinement="off")) as harness:
        result = harness.evaluate(RELU, GOOD)
    assert result.status == "correct" and result.confinement == "limits-only"
    (note,) = [d for d in result.diagnostics if d.category == "confinement"]
    assert "limits-only" in note.message and "Fix:" in note.message


def test_required_confinement_refuses_to_evaluate_where_bubblewrap_is_missing(eval_cache, tmp_path):
    config = fast_config(eval_cache, sandbox_confinement="required", sandbox_bwrap=str(tmp_path / "no-bwrap"))
    with Harness(config) as harness:
        with pytest.raises(BackendUnavailable, match="required.*apt-get install -y bubblewrap"):
            harness.evaluate(RELU, GOOD)
        status = harness.backend_status("cpu")
        assert not status.ready and "required" in status.reason and "bubblewrap" in status.setup


@needs_bwrap
def test_bubblewrap_failing_at_run_time_is_a_sandbox_error_with_its_message(harness):
    backend = harness.backend("cpu")
    request = backend.build_request(RELU, GOOD, 1)
    # A device node the backend would need but this host lacks: bubblewrap refuses to start.
    outcome = harness.pool.run(request, Launch(devices=("/dev/sage-no-such-device",)), lambda event: None)
    result = results.from_outcome(
        outcome,
        base=backend.base_fields(RELU, GOOD),
        timeout_s=60.0,
        max_tasks=MAX_TASKS,
        timing_representative=True,
        suspicious_speedup=harness.config.suspicious_speedup,
    )
    assert result.status == "sandbox_error" and not result.correct
    assert "bwrap:" in result.message and "sage-no-such-device" in result.message
    assert harness.evaluate(RELU, GOOD).status == "correct"  # never run unconfined instead, and nothing broke


def _linked_venv() -> tuple[Path, Path]:
    """(folder to remove, this virtualenv's python) reached through a link
    under /tmp, which the sandbox covers with a /tmp of its own."""
    links = Path(tempfile.mkdtemp(prefix="sage-linked-venv-", dir="/tmp"))
    (links / "venv").symlink_to(sys.prefix, target_is_directory=True)
    return links, links / "venv" / Path(sys.executable).relative_to(sys.prefix)


def test_an_interpreter_is_resolved_through_its_folders_but_keeps_its_own_name():
    links, python = _linked_venv()
    try:
        resolved = confine.interpreter_path(str(python))
        # The virtualenv's own bin/python (a link to the base interpreter) stays: Python finds
        # pyvenv.cfg beside the path it was started by.
        assert resolved == str(Path(sys.prefix).resolve() / Path(sys.executable).relative_to(sys.prefix))
        assert Launch(python=str(python)).python == resolved == Launch(python=resolved).python
        assert confine.interpreter_path("python3") == "python3"
    finally:
        shutil.rmtree(links)


@needs_bwrap
def test_a_virtualenv_reached_through_a_symlink_under_tmp_evaluates_in_the_sandbox(harness):
    links, python = _linked_venv()
    backend = harness.backend("cpu")
    try:
        outcome = harness.pool.run(backend.build_request(RELU, GOOD, 1), Launch(python=str(python)), lambda event: None)
    finally:
        shutil.rmtree(links)
    result = results.from_outcome(
        outcome,
        base=backend.base_fields(RELU, GOOD),
        timeout_s=60.0,
        max_tasks=MAX_TASKS,
        timing_representative=True,
        suspicious_speedup=harness.config.suspicious_speedup,
    )
    assert result.status == "correct", result.message


# ------------------------------------------------------------ cancellation and fairness


def _start_hung(harness: Harness) -> tuple[threading.Thread, threading.Event, dict]:
    cancel, running, outcome = threading.Event(), threading.Event(), {}

    def run() -> None:
        try:
            outcome["result"] = harness.evaluate(
                RELU, HUNG, cancel=cancel, progress=lambda done, total, message: message.startswith("checking") and running.set()
            )
        except Cancelled as exc:
            outcome["cancelled"] = (time.monotonic(), exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert running.wait(120), "the hung candidate started"
    outcome["cancel"] = cancel
    return thread, cancel, outcome


def _evaluation_pids(harness: Harness) -> list[int]:
    """Forks of this process's workers: the reference and candidate processes."""
    marker = f"sage-worker-{os.getpid()}-".encode()
    workers: dict[int, int] = {}
    for name in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if marker in argv and argv.split(b"\0")[1:3] == [b"-m", b"sage_engine.evaluation.worker"]:
            workers[int(name)] = ppid
    return [p for p, ppid in workers.items() if ppid in workers]


@needs_bwrap
def test_cancel_kills_a_hung_evaluation_within_a_second(eval_cache):
    with Harness(fast_config(eval_cache)) as harness:
        thread, cancel, outcome = _start_hung(harness)
        assert _evaluation_pids(harness)
        start = time.monotonic()
        cancel.set()
        thread.join(10)
        raised_after = outcome["cancelled"][0] - start
        while _evaluation_pids(harness) and time.monotonic() - start < 10:
            time.sleep(0.01)
        gone_after = time.monotonic() - start
        print(f"cancel -> evaluate raised {raised_after * 1000:.0f} ms, processes gone {gone_after * 1000:.0f} ms")
        assert raised_after < CANCEL_LIMIT_S and gone_after < CANCEL_LIMIT_S
        assert "result" not in outcome
        assert harness.evaluate(RELU, GOOD).status == "correct"


@needs_bwrap
def test_a_hung_evaluation_holds_up_only_its_own_caller(eval_cache):
    with Harness(fast_config(eval_cache)) as harness:
        # The first evaluation runs on a thread that then ends, as an MCP call's
        # worker thread does: the workers it started must outlive it.
        first = threading.Thread(target=lambda: harness.evaluate(RELU, GOOD))
        first.start()
        first.join(180)
        pids = set(harness.pool.ready_pids(2, timeout=120))  # the spare has imported torch
        assert len(pids) == 2
        thread, cancel, outcome = _start_hung(harness)
        try:
            t0 = time.monotonic()
            started: list[float] = []
            result = harness.evaluate(
                RELU,
                GOOD,
                progress=lambda done, total, message: (
                    message == "loading candidate" and not started and started.append(time.monotonic() - t0)
                ),
            )
            print(f"second caller started after {started[0] * 1000:.0f} ms, done after {time.monotonic() - t0:.2f} s")
            # Served while the hung one still runs (its limit is minutes away), by the
            # warm spare: delayed by a fork, not by a queue or a torch import.
            assert result.status == "correct"
            assert "result" not in outcome and thread.is_alive()
            assert set(harness.pool.worker_pids()) == pids  # the same warm workers, none started or restarted
        finally:
            cancel.set()
            thread.join(10)


@needs_bwrap
def test_callers_of_a_cold_pool_share_the_spare_it_is_starting(eval_cache):
    """The second of two callers finds the first's spare still importing
    torch: it waits for that one instead of starting a third worker."""
    with Harness(fast_config(eval_cache)) as harness:
        results: list[str] = []
        callers = [threading.Thread(target=lambda: results.append(harness.evaluate(RELU, GOOD).status)) for _ in range(2)]
        for caller in callers:
            caller.start()
        seen: set[int] = set()
        while any(c.is_alive() for c in callers):
            seen.update(harness.pool.worker_pids())
            time.sleep(0.05)
        assert results == ["correct", "correct"]
        assert len(seen | set(harness.pool.worker_pids())) == harness.pool.n_slots == 2


# ------------------------------------------------------------ leftovers


def test_leftover_folders_are_removed_only_when_their_owner_is_dead(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me, started = os.getpid(), process_start(os.getpid())
    names = {
        "dead owner": f"sage-worker-{dead.pid}-1-abc",
        "recycled pid": f"sage-eval-{me}-{started + 1}-abc",
        "live owner": f"sage-worker-{me}-{started}-abc",
        "no owner in the name": "sage-worker-abc",
        "not ours": "other-worker-1-1-abc",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    removed = {Path(p).name for p in sweep_leftovers(str(tmp_path))}
    assert removed == {names["dead owner"], names["recycled pid"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(names.values()) - removed)


def test_the_measured_limits_the_physics_floor_uses_are_hidden_wherever_the_cache_is(tmp_path):
    from sage_engine.evaluation.host.calibration import FOLDER
    from sage_engine.evaluation.host.launch import sandboxing_for
    from tests.evaluation.support import fast_config

    # A cache dir outside any home: nothing else would cover it.
    cache = tmp_path / "cache"
    sandboxing = sandboxing_for(fast_config(cache), confine.probe("auto", "bwrap"))
    assert str((cache / FOLDER).resolve()) in sandboxing.hidden_dirs
