"""`pids` cgroups: a hard kernel limit on the processes and threads of one
evaluation (or one sandbox), where the machine lets SAGE create one (root
with cgroup v1, or a delegated cgroup v2 subtree); their member lists find
processes that left the session.

The harness puts each confined sandbox in one (the sandbox sees /sys
read-only; its worker then only reads the counters); limits-only, the
worker makes one per evaluation. Standard library only.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

_cgroup_counter = itertools.count()
_PENDING_REMOVAL: set[Path] = set()
_swept = False


def next_name(kind: str) -> str:
    """`sage-<kind>-<pid>-<n>`: the owner's pid lets a later process remove what a dead one left."""
    return f"sage-{kind}-{os.getpid()}-{next(_cgroup_counter)}"


class PidsCgroup:
    """A `pids` cgroup for one evaluation, where the machine allows creating
    one (root with cgroup v1, or a delegated cgroup v2 subtree)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, max_tasks: int) -> "PidsCgroup | None":
        cls.sweep()
        base = pids_cgroup_base()
        if base is None:
            return None
        _sweep_dead_owners(base)
        return cls.create_at(base, next_name("eval"), max_tasks)

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


def pids_cgroup_base() -> Path | None:
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
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
