"""The evaluation worker: a process that has imported torch once and runs
evaluations on request, forking a reference and a candidate child for each
(`evaluation.py`). Confined, the whole worker runs inside one bubblewrap
sandbox, so the children inherit it; warm, it serves many requests; cold,
one.

Protocol (`protocol/`, JSON lines): `Op`s on stdin (eval with its
`Request`, cancel, timing-go, pause, resume, quit), events on the original
stdout: `Ready`, then per request `Started`, the candidate's
`ProgressEvent`s, `TimingWait` / `TimingDone` around the timing phase, and
`Exit` with the `Outcome` (every case row, once). Anything else the process
prints goes to stderr.

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
import os
import shutil
import signal
import tempfile
from typing import BinaryIO

from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.common.cgroups import PidsCgroup
from sage_engine.evaluation.common.processes import become_subreaper, proc_table, reap_orphans
from sage_engine.evaluation.protocol import Event, Exit, Op, Outcome, Ready, Request, worker_line
from sage_engine.evaluation.worker.scratch import clean, stage_build


def main() -> None:
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when the worker ends
    become_subreaper()
    parser = argparse.ArgumentParser()
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--cgroup", default="", help="the sandbox's pids cgroup (confined), read-only here")
    parser.add_argument("--confined", action="store_true")
    parser.add_argument("preload", nargs="*")
    args = parser.parse_args()

    from sage_engine.evaluation.child import side

    side.not_dumpable()
    import torch  # noqa: F401  (the point of the warm worker)

    # Imported once, before forks: every evaluation's children start with them loaded.
    from sage_engine.evaluation.child import candidate, profiling, reference  # noqa: F401
    from sage_engine.evaluation.worker.evaluation import Evaluation  # noqa: F401

    for module in args.preload:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # optional preloads (triton); the child imports what it needs
    worker_cgroup = PidsCgroup.existing(args.cgroup) if args.cgroup else None
    # What the imports made lives as long as the worker: out of the collector's
    # sight, a collection here or in a forked child (before timing) scans only
    # what the evaluation made, milliseconds instead of a quarter second.
    gc.collect()
    gc.freeze()
    _send(proto, Ready(pid=os.getpid(), versions=side.versions()))
    os.set_blocking(0, False)
    ops = wire.LineReader(0)
    while True:
        line = ops.wait_line(float("inf"))
        if line is None:
            break
        op = Op.parse(line)
        if op is None:
            continue
        if op.op == Op.QUIT:
            break
        if op.op == Op.EVAL and op.request is not None:
            outcome, quit_after = run_one(op.request, proto, ops, args.scratch, args.confined, worker_cgroup)
            _send(proto, Exit(outcome=outcome))
            if quit_after:
                break
    PidsCgroup.sweep(wait_s=5.0)


def _send(proto: BinaryIO, event: Event) -> None:
    proto.write(worker_line(event))


def run_one(
    request: Request, proto: BinaryIO, ops: wire.LineReader, scratch: str, confined: bool, worker_cgroup: PidsCgroup | None
) -> tuple[Outcome, bool]:
    from sage_engine.evaluation.worker.evaluation import Evaluation

    clean(scratch, confined)
    # Confined, the sandbox's own cgroup bounds everything; otherwise each
    # evaluation gets one where the machine lets us create it.
    cgroup = None if confined else PidsCgroup.create(request.limits.max_tasks)
    workdir = tempfile.mkdtemp(prefix="sage-eval-", dir=scratch)
    try:
        if confined and request.build is not None:
            stage_build(request.build.cache, request.build.inside)
        evaluation = Evaluation(
            request, send=lambda event: _send(proto, event), ops=ops, workdir=workdir, cgroup=cgroup, worker_cgroup=worker_cgroup
        )
        outcome = evaluation.run()
        return outcome, evaluation.quit
    finally:
        _kill_adopted()
        reap_orphans()
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_adopted() -> None:
    """Between requests the worker has no children of its own: anything still
    parented to it is an orphan an evaluation left behind."""
    me = os.getpid()
    for info in proc_table().values():
        if info.ppid == me and not info.zombie:
            try:
                os.kill(info.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    reap_orphans()


if __name__ == "__main__":
    main()
