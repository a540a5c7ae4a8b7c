"""The two children of one evaluation, as the worker sees them: forked with
their pipes (`spawn`), what each runs then (`child_main`: the sides live in
`evaluation/child/`, imported only in the child), polled for their exit (`Child`)."""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sage_engine.evaluation.common import diagnostics
from sage_engine.evaluation.common.processes import TailBuffer
from sage_engine.evaluation.protocol import Fail, Request, RunnerResult, wire

if TYPE_CHECKING:
    from sage_engine.evaluation.child.side import Channels

# The default limit for unprivileged users (/proc/sys/fs/pipe-max-size).
BULK_PIPE_BYTES = 1 << 20


@dataclass
class Child:
    role: str
    pid: int
    cmd: int
    replies: wire.LineReader
    events: wire.LineReader
    output: int
    tail: TailBuffer = field(default_factory=TailBuffer)
    exit_code: int | None = None
    out_open: bool = True
    job_changes: int = 0  # times it was stopped or continued (by the worker's pauses, or by someone else)

    def poll(self) -> int | None:
        while self.exit_code is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED | os.WCONTINUED)
            except ChildProcessError:
                self.exit_code = -signal.SIGKILL
                break
            if not done:
                break
            if os.WIFSTOPPED(status) or os.WIFCONTINUED(status):
                self.job_changes += 1
                continue
            self.exit_code = os.waitstatus_to_exitcode(status)
        return self.exit_code

    def fds(self) -> tuple[int, ...]:
        return (self.cmd, self.replies.fd, self.events.fd, self.output)


def bulk_pipe() -> tuple[int, int]:
    """A pipe for tensor bytes. At 1 MiB instead of 64 KiB a trial's inputs
    and outputs cross in a sixteenth of the wake-ups: about 2.5x faster."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, BULK_PIPE_BYTES)
    except OSError:
        pass  # a lowered pipe-max-size: the default size still works, slower
    return r, w


def shared_file() -> int:
    """The shared memory file a trial's inputs live in (`child/inputs.py`):
    made here, before the fork, so both children hold it; sparse, so only
    what is written uses memory."""
    from sage_engine.evaluation.child.inputs import REGION_BYTES

    fd = os.memfd_create("sage-inputs")
    os.ftruncate(fd, REGION_BYTES)
    return fd


def spawn(role: str, request: Request, workdir: str, data_fd: int, inputs_fd: int, shared_fd: int, cgroup: str | None) -> Child:
    """Fork one child that runs `child_main(role, ...)` in its own session."""
    from sage_engine.evaluation.child.side import Channels

    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    evt_r, evt_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            gc.freeze()  # what the worker holds is not this child's garbage: see worker.__main__
            os.setsid()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            keep = {0, 1, 2, cmd_r, rep_w, evt_w, data_fd, inputs_fd, shared_fd}
            # Nothing of the worker's may stay open here: not its protocol,
            # not the other side's pipes.
            for name in os.listdir("/proc/self/fd"):
                if int(name) not in keep:
                    try:
                        os.close(int(name))
                    except OSError:
                        pass
            if cgroup:
                try:
                    with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
                        fh.write(str(os.getpid()))
                except OSError:
                    pass  # the process watch still applies
            child_main(role, request, Channels(cmd_r, rep_w, evt_w, data_fd, inputs_fd, shared_fd), workdir)
        finally:
            os._exit(70)
    for fd in (cmd_r, rep_w, evt_w, out_w):
        os.close(fd)
    for fd in (rep_r, evt_r, out_r):
        os.set_blocking(fd, False)
    return Child(role, pid, cmd_w, wire.LineReader(rep_r), wire.LineReader(evt_r), out_r)


# glibc's malloc moves its mmap threshold up to the largest block freed so
# far (and its trim threshold with it): a process that once freed a large
# temporary then takes same-sized tensors from its heap, one that did not
# maps and faults in every one afresh. Both sides of an evaluation start
# from these fixed values instead, so neither's timed calls depend on what
# it happened to free before them (a reference timed against itself read
# 0.6-0.8x after the candidate's side alone freed a large sort's buffers).
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit hosts
TRIM_THRESHOLD = 256 << 20
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def steady_allocator() -> None:
    """Fixed malloc thresholds in this process (glibc only; elsewhere nothing changes)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def child_main(role: str, request: Request, channels: "Channels", workdir: str) -> None:
    """What a forked child runs: the reference side, the candidate side, or a
    backend's runner routine (which has no reference); never returns."""
    from sage_engine.evaluation.child.side import Emitter, prepare, resolve

    emit = Emitter(channels.evt, request.token)
    code = 0
    try:
        steady_allocator()
        prepare(request, workdir)
        if role == "reference":
            from sage_engine.evaluation.child.reference import ReferenceSide

            ReferenceSide(request, emit, channels).main()
        elif request.runner:
            # A backend's own routine with no reference (the Ascend compile step, the device probe).
            emit.send(RunnerResult(result=resolve(request.runner)(request, emit)))
        else:
            from sage_engine.evaluation.child.candidate import CandidateSide

            CandidateSide(request, emit, channels).main()
    except BaseException as exc:  # each side reports its own failures; this is a harness fault
        text = diagnostics.exception_text(exc)
        emit.send(
            Fail(
                status="runtime_error",
                message=f"the {role} process failed inside the sandbox: {text}",
                diagnostics=[diagnostics.diagnostic("harness", text)],
                harness=True,
            )
        )
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
