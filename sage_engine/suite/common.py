"""What the importers share: the converted-task value, names, levels, and
writing a task directory (with a read-only copy of helper packages)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sage_engine.errors import Conflict, InvalidInput
from sage_engine.evaluation.host.tasks import load_task

_LEVEL_RE = re.compile(r"level_?(\d+)", re.IGNORECASE)
HELPER_DIR = "lib"  # where a task keeps the benchmark's helper packages
GIT_TIMEOUT_S = 10.0


@dataclass
class Converted:
    """A task converted in memory, before it is written."""

    id: str
    reference: str
    meta: dict[str, Any]
    description: str | None = None
    notes: list[str] = field(default_factory=list)
    helpers: dict[str, Path] = field(default_factory=dict)  # package name -> folder or .py to copy


@dataclass
class ImportedTask:
    id: str
    path: Path
    source: Path
    layout: str
    cases: int
    notes: list[str] = field(default_factory=list)
    benchmark: str | None = None
    requires: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": str(self.path),
            "source": str(self.source),
            "layout": self.layout,
            "cases": self.cases,
            "notes": self.notes,
            "benchmark": self.benchmark,
            "requires": self.requires,
        }


def snake(name: str) -> str:
    """RmsNorm -> rms_norm; names that already have underscores are only lower-cased."""
    if "_" not in name:
        name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"\W+", "_", name).strip("_").lower()


def level_of(path: Path) -> int:
    """SAGE's 1..3 from the nearest `levelN` folder (level 0 -> 1, level 4 -> 3)."""
    for part in reversed(path.parts):
        m = _LEVEL_RE.search(part)
        if m:
            return min(3, max(1, int(m.group(1))))
    return 1


def benchmark_root(path: Path) -> tuple[str | None, Path | None]:
    """Which benchmark checkout `path` lies in, from the repositories' top-level layout."""
    for parent in [path, *path.parents] if path.is_dir() else list(path.parents):
        if (parent / "tasks").is_dir() and (parent / "framework").is_dir():
            return "NPUKernelBench", parent
        if (parent / "reference").is_dir() and (parent / "dataset.py").is_file():
            return "MultiKernelBench", parent
        if (parent / "KernelBench").is_dir() and any((parent / "KernelBench").glob("level*")):
            return "KernelBench", parent
    return None, None


def git_commit(root: Path | None) -> str | None:
    """The checkout's commit, when it is a git work tree and git is installed."""
    if root is None or shutil.which("git") is None:
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", text) else None


def write_task(dest: Path, converted: Converted, *, overwrite: bool, origin: dict[str, Any]) -> tuple[Path, int]:
    """Write the task directory; returns it and its number of cases. A task
    that does not load is removed again and reported."""
    target = dest / converted.id
    if target.exists():
        if not overwrite:
            raise Conflict(f"task directory {target} exists; pass overwrite to replace it")
        _make_writable(target)
        shutil.rmtree(target)
    target.mkdir(parents=True)
    meta = dict(converted.meta)
    if converted.helpers:
        for where in converted.helpers.values():
            _copy_read_only(where, target / HELPER_DIR / where.name)
        meta["import_roots"] = [HELPER_DIR]
    meta["origin"] = origin
    (target / "reference.py").write_text(converted.reference, encoding="utf-8")
    (target / "task.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if converted.description:
        (target / "description.md").write_text(converted.description.strip() + "\n", encoding="utf-8")
    try:
        task = load_task(target)
    except InvalidInput as exc:
        _make_writable(target)
        shutil.rmtree(target)
        raise InvalidInput(f"{origin.get('path')}: the converted task is not valid: {exc}") from exc
    return target, len(task.case_rows)


def _copy_read_only(source: Path, target: Path) -> None:
    """Python files only (no caches); files read-only so an evaluation cannot edit them."""
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        return
    for file in sorted(source.rglob("*.py")):
        if "__pycache__" in file.parts:
            continue
        _copy_read_only(file, target / file.relative_to(source))


def _make_writable(folder: Path) -> None:
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
