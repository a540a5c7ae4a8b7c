"""Folders named after the process that owns them (`sage-<kind>-<pid>-<start>-`),
and removing those whose owner died (a killed server leaves its workers'
scratch folders behind)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from sage_engine.evaluation.processes import stat_fields

LEFTOVER_RE = re.compile(r"sage-(worker|eval|import)-(\d+)-(\d+)-")


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): with its pid, an identity that survives pid reuse."""
    try:
        return int(stat_fields(pid)[19])
    except (ValueError, IndexError):
        return None


def owner_prefix(kind: str) -> str:
    """`sage-<kind>-<pid>-<start>-`: names a folder after the process that owns it."""
    return f"sage-{kind}-{os.getpid()}-{process_start(os.getpid()) or 0}-"


def owner_alive(pid: int, start: int) -> bool:
    if not Path(f"/proc/{pid}").exists():
        return False
    actual = process_start(pid)
    return actual is None or start == 0 or actual == start


def sweep_leftovers(tmp: str | None = None) -> list[str]:
    """Remove `sage-worker-*`, `sage-eval-*` and `sage-import-*` folders whose
    owning process is dead. A folder whose name names no owner, or whose
    owner lives (another SAGE process on this machine), is left alone."""
    root = Path(tmp or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = LEFTOVER_RE.match(path.name)
        if m is None or not path.is_dir() or path.is_symlink():
            continue
        if not owner_alive(int(m.group(2)), int(m.group(3))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed
