"""Facts about this machine that an evaluation result carries."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import platform
from functools import lru_cache


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
