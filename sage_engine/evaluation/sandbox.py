"""Containing evaluation processes: environment, process limits, the
process watch, and what a supervisor reports (`Outcome`).

Used by the worker (which forks an evaluation's children and supervises
them) and the harness (which supervises the worker). Standard library only,
Linux-first. Namespaces (filesystem, network, PIDs) come from `confine.py`.

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
  (and their descendants) and kills all of them past `MAX_TASKS`. The count
  is gated by the machine-wide task total in /proc/loadavg so the poll costs
  one small read, not a /proc scan;
- output: stdout and stderr go to a pipe the supervisor drains, keeping a
  bounded tail.
Confined, the harness puts the whole sandbox in one pids cgroup (the
sandbox sees /sys read-only); the worker then reads its counters only.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, MutableMapping

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_", "AWS_", "PG", "DATABASE_URL")
# Processes plus threads of one evaluation. torch keeps a few threads per
# process and a C++ build runs ninja, a shell, g++, cc1plus and as; 128 leaves
# room for both. A fork bomb of torch-sized processes needs a few seconds of
# forking to get there on two cores, so a lower cap would not stop it much sooner.
MAX_TASKS = 128
OUTPUT_TAIL_BYTES = 64 * 1024
# The file torch's extension builder (FileBaton) holds while it builds. A
# build killed by a timeout or a cancel leaves it, and every later build of
# that candidate would wait on it forever: it is never cached nor staged.
BUILD_LOCKS = frozenset({"lock"})
_cgroup_counter = itertools.count()
_PENDING_REMOVAL: set[Path] = set()
_swept = False


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
        tail = bytes(self.data[-self.cap:])
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
    return raw[raw.rfind(")") + 2:].split()


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
            pid=int(name), ppid=int(rest[1]), session=int(rest[3]), threads=int(rest[17]),
            start=int(rest[19]), zombie=rest[0] in ("Z", "X"),
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


class PidsCgroup:
    """A `pids` cgroup for one evaluation, where the machine allows creating
    one (root with cgroup v1, or a delegated cgroup v2 subtree)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, max_tasks: int) -> "PidsCgroup | None":
        cls.sweep()
        base = _pids_cgroup_base()
        if base is None:
            return None
        _sweep_dead_owners(base)
        return cls.create_at(base, f"sage-eval-{os.getpid()}-{next(_cgroup_counter)}", max_tasks)

    @classmethod
    def existing(cls, path: str) -> "PidsCgroup | None":
        """A cgroup made by someone else (the harness, for a whole sandbox)."""
        p = Path(path)
        return cls(p) if (p / "pids.max").exists() else None

    @classmethod
    def create_at(cls, base: Path, name: str, max_tasks: int) -> "PidsCgroup | None":
        path = base / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_tasks))
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    def events_max(self) -> int:
        """How often a fork failed at pids.max, since the cgroup was made."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def limit_hit(self) -> bool:
        return self.events_max() > 0

    def members(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        kill_file = self.path / "cgroup.kill"  # cgroup v2: one write kills all
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        for _ in range(2):
            for pid in self.members():
                _kill(pid)

    def remove(self) -> bool:
        """rmdir once its members are gone; a cgroup still emptying is
        retried by the next `create` (or `sweep`)."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            self.kill()
            _PENDING_REMOVAL.add(self.path)
            return False
        _PENDING_REMOVAL.discard(self.path)
        return True

    @staticmethod
    def sweep(wait_s: float = 0.0) -> None:
        """Remove cgroups whose members were still exiting; with `wait_s`,
        keep trying that long (a supervisor about to exit)."""
        deadline = time.monotonic() + wait_s
        while True:
            for path in list(_PENDING_REMOVAL):
                PidsCgroup(path).remove()
            if not _PENDING_REMOVAL or time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def _sweep_dead_owners(base: Path) -> None:
    """Remove empty evaluation and sandbox cgroups left by processes that died."""
    global _swept
    if _swept:
        return
    _swept = True
    for path in [*base.glob("sage-eval-*"), *base.glob("sage-worker-*")]:
        owner = path.name.split("-")[2]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            try:
                path.rmdir()
            except OSError:
                continue


def _pids_cgroup_base() -> Path | None:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in mounts:
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup" and "pids" in parts[3].split(","):
            v1 = Path(parts[1])
        elif parts[2] == "cgroup2":
            v2 = Path(parts[1])
    for line in own:
        hid, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if v1 is not None and "pids" in controllers.split(","):
            base = v1 / rel
            if os.access(base, os.W_OK):
                return base
        if v2 is not None and hid == "0" and controllers == "":
            base = v2 / rel
            try:
                if "pids" in (base / "cgroup.subtree_control").read_text().split() and os.access(base, os.W_OK):
                    return base
            except OSError:
                continue
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


# ----------------------------------------------------------------- supervision


@dataclass
class Outcome:
    """What a supervisor saw of one child. `result` is the runner's final
    report; without it, `killed` or the exit status says what happened."""

    result: dict[str, Any] | None = None
    exit_code: int | None = None  # negative: killed by that signal
    killed: str | None = None  # "timeout", "processes", "worker", "cancelled"
    output_tail: str = ""
    output_bytes: int = 0
    wall_s: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)  # case events, kept for partial results
    forged_lines: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Outcome":
        return cls(**data)


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
