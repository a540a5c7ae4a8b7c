"""Facts about this machine that an evaluation result carries."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import platform
from functools import lru_cache
from pathlib import Path

# Each evaluation runs two processes (reference and candidate) and
# Config.eval_workers (2) evaluations run at once: a quarter each lets them
# all hold their full share together.
MEMORY_SHARE = 0.25
MIN_MEMORY_MB = 2048  # torch and a task's inputs on a small machine


def candidate_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


@lru_cache(maxsize=1)
def cpu_hardware() -> str:
    """`x86_64-avx512`, `x86_64-avx2`, `aarch64-sve`...: the widest vector ISA
    matters most for CPU kernels, so that is what memory items are tagged with."""
    machine = platform.machine() or "unknown"
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags = set(value.split())
                    break
    except OSError:
        pass
    if machine in ("x86_64", "AMD64", "i686"):
        for flag, name in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4")):
            if flag in flags:
                return f"{machine}-{name}"
    if machine in ("aarch64", "arm64"):
        return f"{machine}-{'sve' if 'sve' in flags else 'neon'}"
    return machine


@lru_cache(maxsize=1)
def host_versions() -> dict[str, str]:
    """Versions from package metadata: the server process need not import torch."""
    out = {"python": platform.python_version()}
    for dist in ("torch", "triton"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


@lru_cache(maxsize=1)
def build_tag() -> str:
    """What a built extension depends on besides its source: the Python and
    package versions it was built against. Part of the build cache's path, so
    upgrading torch never loads an extension built for the old one."""
    versions = host_versions()
    return "-".join(f"{k}{versions[k]}" for k in sorted(versions)).replace("+", "_")


def _meminfo_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_limits(proc: Path = Path("/proc/self")) -> list[int]:
    """The memory limits of the cgroups this process runs under, its
    ancestors' included (v1 `memory.limit_in_bytes`, v2 `memory.max`)."""
    try:
        mounts = (proc / "mounts").read_text().splitlines()
        own = (proc / "cgroup").read_text().splitlines()
    except OSError:
        return []
    roots: dict[str, Path] = {}
    for line in mounts:
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup2":
            roots.setdefault("v2", Path(parts[1]))
        elif len(parts) >= 4 and parts[2] == "cgroup" and "memory" in parts[3].split(","):
            roots.setdefault("v1", Path(parts[1]))
    limits = []
    for line in own:
        hid, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and "v2" in roots:
            root, name = roots["v2"], "memory.max"
        elif "memory" in controllers.split(",") and "v1" in roots:
            root, name = roots["v1"], "memory.limit_in_bytes"
        else:
            continue
        folder = root / rel.lstrip("/")
        while True:
            try:
                text = (folder / name).read_text().strip()
                if text.isdigit():
                    limits.append(int(text))
            except OSError:
                pass
            if folder == root or root not in folder.parents:
                break
            folder = folder.parent
    return limits


@lru_cache(maxsize=1)
def usable_memory_bytes() -> int | None:
    """The memory this host gives SAGE: MemTotal, or less where the cgroup
    SAGE runs under (a container, a systemd slice) sets a lower limit."""
    found = [v for v in [_meminfo_total(), *_cgroup_limits()] if v]
    return min(found) if found else None


def eval_memory_mb(configured: int) -> int:
    """Each evaluation process's memory cap: `configured` (Config.eval_memory_mb)
    when set, else a share of what this host gives SAGE."""
    if configured > 0:
        return configured
    total = usable_memory_bytes()
    if total is None:
        return 6144  # no /proc to read: the old fixed cap
    return max(MIN_MEMORY_MB, int(total * MEMORY_SHARE) >> 20)
