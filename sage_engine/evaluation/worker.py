"""The warm worker: a long-lived process that has already imported torch and
forks a fresh child per evaluation.

Protocol (JSON lines): requests on stdin (`{"op": "eval", "request": ...}` or
`{"op": "quit"}`), events on the original stdout: `ready`, then per request
`started` (the child's pid), the child's `progress`/`case` events, and
`exit` with the supervisor's Outcome. Anything else the process prints goes
to stderr, so stdout stays the protocol.

The worker stays single-threaded (forking a threaded process can deadlock the
child) and never runs torch ops itself (a used OpenMP pool does not survive
fork). It is a child subreaper: orphans of an evaluation are re-parented to
it, killed and reaped after each request.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
from typing import Any, BinaryIO

from sage_engine.evaluation import sandbox


def main() -> None:
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when the worker ends
    sandbox.become_subreaper()

    import torch  # noqa: F401  (the point of the warm worker)

    from sage_engine.evaluation import child

    args = sys.argv[1:]
    scratch = None
    if args and args[0].startswith("--scratch="):
        scratch = args.pop(0).partition("=")[2]
    for module in args:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # optional preloads (triton); the child imports what it needs
    _send(proto, {"ev": "ready", "pid": os.getpid(), "versions": child.versions()})
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("op") == "quit":
            break
        if message.get("op") == "eval":
            outcome = run_one(message["request"], proto, scratch)
            _send(proto, {"ev": "exit", "outcome": outcome.as_dict()})
    sandbox.PidsCgroup.sweep(wait_s=5.0)


def _send(proto: BinaryIO, event: dict[str, Any]) -> None:
    proto.write((json.dumps(event, default=str) + "\n").encode())


def run_one(request: dict[str, Any], proto: BinaryIO, scratch: str | None = None) -> sandbox.Outcome:
    from sage_engine.evaluation import child

    limits = request.setdefault("limits", {})
    max_tasks = int(limits.get("max_tasks", sandbox.MAX_TASKS))
    # Inside the harness's scratch dir: if this worker is killed mid-request,
    # the harness still removes the evaluation's files.
    workdir = tempfile.mkdtemp(prefix="sage-eval-", dir=scratch)
    request["workdir"] = workdir
    cgroup = sandbox.PidsCgroup.create(max_tasks)
    limits["cgroup"] = str(cgroup.path) if cgroup else None
    r_res, w_res = os.pipe()
    r_out, w_out = os.pipe()
    pid = os.fork()
    if pid == 0:  # the evaluation child
        try:
            os.setsid()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.close(r_res)
            os.close(r_out)
            os.dup2(w_out, 1)
            os.dup2(w_out, 2)
            os.close(w_out)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            proto.close()  # the candidate must not write to the harness protocol
            child.child_main(request, w_res)
        finally:
            os._exit(70)
    os.close(w_res)
    os.close(w_out)
    _send(proto, {"ev": "started", "pid": pid})
    watch = sandbox.ProcessWatch(pid, cgroup, max_tasks)

    def poll_exit() -> int | None:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -signal.SIGKILL
        return None if done == 0 else sandbox.exit_code_from_status(status)

    try:
        outcome = sandbox.supervise(
            pid, result_fd=r_res, output_fd=r_out, timeout_s=float(request.get("timeout_s", 180.0)),
            token=request["token"], watch=watch, poll_exit=poll_exit,
            on_event=lambda event: _send(proto, event),
        )
    finally:
        os.close(r_res)
        os.close(r_out)
        _kill_adopted()
        sandbox.reap_orphans()
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome


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
