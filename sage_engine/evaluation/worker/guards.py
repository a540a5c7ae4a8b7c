"""What the worker watches while it times: the reference process left
alone (`ReferenceGuard`), the candidate's CPU between its calls
(`CpuMeter`), its threads, and both sides pinned to the same CPUs."""

from __future__ import annotations

import os
import time

from sage_engine.evaluation.common.processes import stat_fields
from sage_engine.evaluation.worker.children import Child


# Each side's process times its own batches, and the worker's clocks bound
# what it may claim (its wall, and the process's CPU): a candidate process whose
# typical (median) batch takes longer by the worker's clock than by its report,
# by more than the reference's typical gap plus this much, and uses that much
# more CPU than it reports, misreports its time. The floor is what the
# bookkeeping outside the timed calls costs the candidate's side beyond the
# reference's (measured on the bundled suite's solutions, on a loaded
# two-core machine: up to 0.18 ms a batch, its CPU gap over the reference's
# median); the share, what a clock may drift within a batch.
MISREPORT_FLOOR_S = 2e-4
MISREPORT_SHARE = 0.02


def pin_together(pids: list[int], threads: int) -> list[int]:
    """Run both sides on the same CPUs while they are timed: on a shared
    machine each then meets the same contention, instead of one side landing
    on a busy core. The CPUs are where the first process runs now."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        return []
    k = max(1, min(len(allowed), threads))
    current = _current_cpu(pids[0])
    first = allowed.index(current) if current in allowed else 0
    chosen = {allowed[(first + i) % len(allowed)] for i in range(k)}
    # Twice: a thread started while its parent was not yet pinned inherited the
    # old set (one started later inherits the new), and `widened_threads` would find it.
    for _ in range(2):
        for pid in pids:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                try:
                    os.sched_setaffinity(tid, chosen)
                except OSError:
                    pass
    return sorted(chosen)


def widened_threads(pid: int, cpus: list[int]) -> list[int]:
    """Threads of `pid` allowed on CPUs beyond `cpus` (the set both sides
    were pinned to, from outside): an affinity a process widens itself.
    Read from here, not asked of the process; a thread that widens and
    narrows again within one call is not seen (a cpuset cgroup would bind
    it, where the machine lets the harness make one)."""
    if not cpus:
        return []
    allowed = set(cpus)
    out = []
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []
    for tid in tids:
        try:
            if not os.sched_getaffinity(tid) <= allowed:
                out.append(tid)
        except OSError:
            continue
    return out


def _current_cpu(pid: int) -> int | None:
    try:
        return int(stat_fields(pid)[36])
    except (ValueError, IndexError):
        return None


class ReferenceGuard:
    """What another process of the same user could do to slow the reference
    down while it is timed: stop and continue it (SIGSTOP/SIGCONT), lower
    its priority or scheduling class, or move it to other CPUs. The worker
    does none of these during its own timing phase (it holds the timing
    turn, so nothing pauses it), so any of them is the candidate's doing."""

    def __init__(self, ref: Child):
        self.ref = ref
        ref.poll()  # stops and continues of the pauses before timing are not counted
        self.job_changes = ref.job_changes
        self.settings = self.read()
        own = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
        self.lowered = any(nice_policy != own for nice_policy, _ in self.settings.values())

    def read(self) -> dict[int, tuple[tuple[int, int], frozenset[int]]]:
        out = {}
        for tid in thread_ids(self.ref.pid):
            try:
                out[tid] = ((os.getpriority(os.PRIO_PROCESS, tid), os.sched_getscheduler(tid)), frozenset(os.sched_getaffinity(tid)))
            except OSError:
                continue  # the thread ended
        return out

    def meddled(self) -> str:
        """What was done to the reference process since timing began ("" if nothing)."""
        self.ref.poll()
        if self.ref.job_changes != self.job_changes:
            return "stopped and resumed it"
        if self.lowered:
            return "lowered its priority"
        now = self.read()
        for tid, setting in now.items():
            before = self.settings.get(tid)
            if before is not None and before != setting:
                return "lowered its priority" if before[0] != setting[0] else "moved it to other CPUs"
        return ""


def thread_ids(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except (OSError, ValueError):
        return set()


class CpuMeter:
    """CPU time of one process: all its threads, those that already exited
    included (a thread started per call and gone by the next sample still
    counts). The kernel's per-process CPU clock, readable for any process
    of this PID namespace, ns-exact; /proc's tick counts where it is not,
    and for the children it reaped."""

    def __init__(self, pid: int):
        self.pid = pid
        self.clock = ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's ABI

    def seconds(self) -> float:
        """Its own CPU time plus that of the children it has reaped (a helper
        process started and waited for during a call still counts)."""
        ticks = self._ticks()
        try:
            own = time.clock_gettime(self.clock)
        except OSError:
            own = (ticks[0] + ticks[1]) / self.hz
        return own + (ticks[2] + ticks[3]) / self.hz

    def reaped(self) -> float:
        """CPU time of the children it has reaped (tick-exact: a child's work that never reaches a tick in all shows as none)."""
        ticks = self._ticks()
        return (ticks[2] + ticks[3]) / self.hz

    hz = os.sysconf("SC_CLK_TCK")

    def _ticks(self) -> tuple[int, int, int, int]:
        """utime, stime, cutime, cstime from /proc (clock ticks)."""
        try:
            fields = stat_fields(self.pid)
            return int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14])
        except (ValueError, IndexError):
            return 0, 0, 0, 0
