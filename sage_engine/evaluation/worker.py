"""The evaluation worker: a process that has imported torch once and runs
evaluations on request, forking a reference and a candidate child for each
(`coordinator.py`). Confined, the whole worker runs inside one bubblewrap
sandbox, so the children inherit it; warm, it serves many requests; cold,
one.

Protocol (JSON lines): operations on stdin (`{"op": "eval", "request": ...}`,
`cancel`, `timing-go`, `pause`, `resume`, `quit`), events on the original
stdout: `ready`, then per request `started`, the children's `progress` and
`case` events, `timing-wait` / `timing-done` around the timing phase, and
`exit` with the Outcome. Anything else the process prints goes to stderr.

The worker stays single-threaded (forking a threaded process can deadlock
the child), never runs torch ops itself (a used OpenMP pool does not survive
fork) and is not dumpable (a candidate running as the same user may neither
trace it nor read its memory or pipes). It is a child subreaper: orphans of
an evaluation are re-parented to it, killed and reaped after each request.
Between requests it empties its scratch dir, and when confined its private
/tmp and /dev/shm, so nothing one candidate wrote reaches the next.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
from typing import Any, BinaryIO

from sage_engine.evaluation import sandbox, wire

BUILD_DIR = "build"  # in the scratch dir: bound at confine.BUILD_MOUNT inside the sandbox


def main() -> None:
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when the worker ends
    sandbox.become_subreaper()
    parser = argparse.ArgumentParser()
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--cgroup", default="", help="the sandbox's pids cgroup (confined), read-only here")
    parser.add_argument("--confined", action="store_true")
    parser.add_argument("preload", nargs="*")
    args = parser.parse_args()

    from sage_engine.evaluation import child

    child.not_dumpable()
    import torch  # noqa: F401  (the point of the warm worker)

    from sage_engine.evaluation import candidate_side, coordinator, reference_side  # noqa: F401  (imported once, before forks)

    for module in args.preload:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # optional preloads (triton); the child imports what it needs
    worker_cgroup = sandbox.PidsCgroup.existing(args.cgroup) if args.cgroup else None
    # What the imports made lives as long as the worker: out of the collector's
    # sight, a collection here or in a forked child (before timing) scans only
    # what the evaluation made, milliseconds instead of a quarter second.
    gc.collect()
    gc.freeze()
    _send(proto, {"ev": "ready", "pid": os.getpid(), "versions": child.versions()})
    os.set_blocking(0, False)
    ops = wire.LineReader(0)
    while True:
        line = ops.wait_line(float("inf"))
        if line is None:
            break
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("op") == "quit":
            break
        if message.get("op") == "eval":
            outcome, quit_after = run_one(message["request"], proto, ops, args.scratch, args.confined, worker_cgroup)
            _send(proto, {"ev": "exit", "outcome": outcome.as_dict()})
            if quit_after:
                break
    sandbox.PidsCgroup.sweep(wait_s=5.0)


def _send(proto: BinaryIO, event: dict[str, Any]) -> None:
    proto.write((json.dumps(event, default=str) + "\n").encode())


def run_one(request: dict[str, Any], proto: BinaryIO, ops: wire.LineReader, scratch: str, confined: bool,
            worker_cgroup: sandbox.PidsCgroup | None) -> tuple[sandbox.Outcome, bool]:
    from sage_engine.evaluation.coordinator import Evaluation

    clean(scratch, confined)
    max_tasks = int(request.get("limits", {}).get("max_tasks", sandbox.MAX_TASKS))
    # Confined, the sandbox's own cgroup bounds everything; otherwise each
    # evaluation gets one where the machine lets us create it.
    cgroup = None if confined else sandbox.PidsCgroup.create(max_tasks)
    workdir = tempfile.mkdtemp(prefix="sage-eval-", dir=scratch)
    try:
        build = request.get("build")
        if confined and build:
            stage_build(build["cache"], build["inside"])
        evaluation = Evaluation(request, send=lambda event: _send(proto, event), ops=ops, workdir=workdir,
                                cgroup=cgroup, worker_cgroup=worker_cgroup)
        outcome = evaluation.run()
        return outcome, evaluation.quit
    finally:
        _kill_adopted()
        sandbox.reap_orphans()
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)


def stage_build(cache: str, inside: str) -> None:
    """Copy the candidate's cached build (read-only here) into its writable
    build dir, times kept so ninja sees it up to date. Regular files and
    folders only: a link planted by an earlier run is not followed."""
    shutil.rmtree(inside, ignore_errors=True)
    if not os.path.isdir(cache):
        os.makedirs(inside, exist_ok=True)
        return
    shutil.copytree(cache, inside, symlinks=True, ignore=_links, copy_function=shutil.copy2)


def _links(folder: str, names: list[str]) -> set[str]:
    """Links, and the lock of a build that was killed (torch would wait on it forever)."""
    return {n for n in names if os.path.islink(os.path.join(folder, n)) or n in sandbox.BUILD_LOCKS}


def clean(scratch: str, confined: bool) -> None:
    """Remove what the previous evaluation left: everything in the scratch
    dir (its build dir is the harness's to publish, and it has by now), and
    when confined the private /tmp and /dev/shm, keeping mount points."""
    build = os.path.join(scratch, BUILD_DIR)
    keep = (_mount_points() if confined else set()) | {build}
    for root in [scratch, build] + (["/tmp", "/dev/shm"] if confined else []):
        # The build dir itself stays: a mount inside the sandbox points at it.
        _empty(root, keep - {root})


def _mount_points() -> set[str]:
    points = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 4:
                    points.add(parts[4].replace("\\040", " "))
    except OSError:
        pass
    return points


def _empty(root: str, keep: set[str]) -> None:
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        if path in keep:
            continue
        if any(k.startswith(path + "/") for k in keep):
            _empty(path, keep)  # a mount point lies below: empty around it
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _kill_adopted() -> None:
    """Between requests the worker has no children of its own: anything still
    parented to it is an orphan an evaluation left behind."""
    me = os.getpid()
    for info in sandbox.proc_table().values():
        if info.ppid == me and not info.zombie:
            try:
                os.kill(info.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    sandbox.reap_orphans()


if __name__ == "__main__":
    main()
