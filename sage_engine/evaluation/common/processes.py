"""Containing evaluation processes: the environment they get, the process
table, the process watch that counts and kills what a child started, the
output tail, and the subreaper.

Shared by every process of an evaluation: the host (which supervises the
worker), the worker (which forks and supervises the children) and the
children (which scrub their environment). Standard library only,
Linux-first. Namespaces (filesystem, network, PIDs) come from
`host/confine.py`, `pids` cgroups from `cgroups.py`.

Limits and why each mechanism:
- wall clock: the supervisor's deadline, then SIGKILL to everything the
  child started;
- memory: RLIMIT_DATA in the child (set by the child before it runs the
  task or the candidate): memory used, not address space, which device
  runtimes reserve by the terabyte; shared memory the candidate maps, which
  RLIMIT_DATA does not count, is watched by its supervisor;
- CPU: RLIMIT_CPU, a backstop behind the wall clock;
- processes: RLIMIT_NPROC is not enforced for root and counts all of a
  user's processes, so instead (1) a `pids` cgroup with `pids.max` where the
  machine lets us create one (a hard kernel limit, and its member list finds
  processes that left the session), and always (2) a process watch: the
  child leads its own session; the supervisor counts the session's tasks
  (and their descendants) and kills all of them past the limit. The count
  is gated by the machine-wide task total in /proc/loadavg so the poll costs
  one small read, not a /proc scan;
- output: stdout and stderr go to a pipe the supervisor drains, keeping a
  bounded tail.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import MutableMapping

from sage_engine.evaluation.common.cgroups import PidsCgroup
from sage_engine.evaluation.protocol import MAX_TASKS

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_", "AWS_", "PG", "DATABASE_URL")
OUTPUT_TAIL_BYTES = 64 * 1024


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES)


def withheld(name: str) -> bool:
    """Not passed to evaluation processes: secrets (PostgreSQL's PG* settings
    among them), and SAGE's own settings (they name the memory database and
    where SAGE keeps its files)."""
    return is_secret(name) or name.upper().startswith("SAGE_")


def scrub_environ(env: MutableMapping[str, str]) -> None:
    for name in [n for n in env if withheld(n)]:
        del env[name]


def child_environment(base: MutableMapping[str, str], extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not withheld(k)}
    env.update(extra)
    return env


class TailBuffer:
    """Keeps the last `cap` bytes of a stream and counts the rest."""

    def __init__(self, cap: int = OUTPUT_TAIL_BYTES):
        self.cap, self.total, self.data = cap, 0, bytearray()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > 2 * self.cap:
            del self.data[: len(self.data) - self.cap]

    def text(self) -> str:
        tail = bytes(self.data[-self.cap :])
        dropped = self.total - len(tail)
        prefix = f"[... {dropped} earlier bytes dropped ...]\n" if dropped > 0 else ""
        return prefix + tail.decode("utf-8", errors="replace")


# ------------------------------------------------------------------ processes


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    session: int
    threads: int
    start: int
    zombie: bool


def stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first), or
    [] for a process that is gone. The name may hold spaces and parentheses:
    split after its last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return []
    return raw[raw.rfind(")") + 2 :].split()


def proc_table() -> dict[int, ProcInfo]:
    table: dict[int, ProcInfo] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        rest = stat_fields(name)
        if len(rest) < 20:
            continue
        table[int(name)] = ProcInfo(
            pid=int(name),
            ppid=int(rest[1]),
            session=int(rest[3]),
            threads=int(rest[17]),
            start=int(rest[19]),
            zombie=rest[0] in ("Z", "X"),
        )
    return table


def shared_resident_bytes(pid: int) -> int:
    """Shared memory a process has touched (RssShmem): anonymous shared
    mappings and memfds, which RLIMIT_DATA does not count."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"RssShmem:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _machine_tasks() -> int | None:
    try:
        with open("/proc/loadavg", "rb") as fh:
            return int(fh.read().split()[3].split(b"/")[1])
    except (OSError, IndexError, ValueError):
        return None


def _kill(pid: int) -> None:
    _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class ProcessWatch:
    """Counts and kills everything one evaluation child started."""

    def __init__(self, leader: int, cgroup: PidsCgroup | None = None, max_tasks: int = MAX_TASKS):
        self.leader, self.cgroup, self.max_tasks = leader, cgroup, max_tasks
        self.seen: dict[int, int] = {}  # pid -> start time, so a recycled pid is never killed
        self.baseline = _machine_tasks()

    def members(self) -> list[ProcInfo]:
        table = proc_table()
        ours = {p for p, info in table.items() if info.session == self.leader or p == self.leader}
        ours |= {p for p, start in self.seen.items() if p in table and table[p].start == start}
        children: dict[int, list[int]] = {}
        for info in table.values():
            children.setdefault(info.ppid, []).append(info.pid)
        stack = list(ours)
        while stack:  # descendants that left the session (setsid) are still ours
            for kid in children.get(stack.pop(), []):
                if kid not in ours:
                    ours.add(kid)
                    stack.append(kid)
        found = [table[p] for p in ours if not table[p].zombie]
        for info in found:
            self.seen[info.pid] = info.start
        return found

    def task_count(self) -> int:
        return sum(max(1, p.threads) for p in self.members())

    def over_limit(self) -> bool:
        if self.cgroup is not None and self.cgroup.limit_hit():
            return True
        total = _machine_tasks()
        if total is None or self.baseline is None:
            return self.task_count() > self.max_tasks
        self.baseline = min(self.baseline, total)
        if total - self.baseline <= self.max_tasks // 2:
            return False
        count = self.task_count()
        if count > self.max_tasks:
            return True
        self.baseline = total - count
        return False

    def kill_all(self) -> None:
        """SIGKILL everything the child started. Signals only: dying
        processes are not waited for (a killed process cannot fork again,
        and waiting on hundreds of exiting torch processes takes seconds)."""
        try:
            os.killpg(self.leader, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill()
        # Two passes: the first catches processes that left the process group
        # (setsid); the second, anything they forked before their SIGKILL.
        for _ in range(2):
            for info in self.members():
                if info.pid != os.getpid():
                    _kill(info.pid)


def reap_orphans() -> None:
    """A subreaper collects the zombies of orphans it adopted."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def become_subreaper() -> bool:
    """Orphans of the evaluation child are re-parented to us instead of init,
    so they stay findable and get reaped. Linux only."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
