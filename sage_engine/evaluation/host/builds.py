"""The shared build cache: a candidate's build folder (C++ extensions,
Triton caches) is copied out of a worker's scratch after its evaluation
(regular files only, size-capped, never a lock left by a killed build) and
staged into the next scratch that needs it, so a candidate can never write
into what another evaluation loads. Only what a build makes is copied
(`protocol.build_product`): a note the kernel left beside its module is
not there for the next evaluation of the same source to read."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from sage_engine.evaluation.protocol import BUILD_LOCKS, build_product

log = logging.getLogger(__name__)
BUILD_PUBLISH_MAX_BYTES = 1 << 30  # a build folder larger than this is not cached
STALE_LOCK_S = 900.0  # no build runs this long: an older lock's builder is gone


def publish_build(staged: Path, cached: Path) -> bool:
    """Copy a candidate's build folder from the worker's scratch into the
    cache, if it changed. Regular files and folders only (a link a candidate
    planted is not followed), under a size cap; replaced atomically."""
    if not staged.is_dir():
        return False
    files = _listing(staged)
    if files is None or files == _listing(cached):
        return False
    if sum(size for size, _ in files.values()) > BUILD_PUBLISH_MAX_BYTES:
        log.warning("build folder %s is over %d bytes; not cached", staged, BUILD_PUBLISH_MAX_BYTES)
        return False
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=cached.parent))
    try:
        for rel in sorted(files):
            src, dst = staged / rel, tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
        old = cached.with_name(f".{cached.name}-old-{os.getpid()}")
        if cached.exists():
            os.rename(cached, old)
        os.rename(tmp, cached)
        shutil.rmtree(old, ignore_errors=True)
        return True
    except OSError as exc:
        log.warning("could not cache the build folder %s: %s", staged, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def _listing(root: Path) -> dict[str, tuple[int, int]] | None:
    if not root.is_dir():
        return None
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not os.path.islink(path) and os.path.isfile(path) and build_product(path):
                out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def remove_stale_locks(root: Path | str, older_than_s: float = STALE_LOCK_S) -> list[str]:
    """Remove build locks under `root` older than `older_than_s`: torch's
    extension builder waits forever on a lock whose builder was killed."""
    removed, cutoff = [], time.time() - older_than_s
    for folder, _dirs, names in os.walk(root):
        for name in set(names) & BUILD_LOCKS:
            path = os.path.join(folder, name)
            try:
                if os.lstat(path).st_mtime < cutoff:
                    os.unlink(path)
                    removed.append(path)
            except OSError:
                continue
    return removed


def remove_foreign_files(root: Path | str) -> list[str]:
    """Remove every file under `root` no build makes (`build_product`), and
    links: what a candidate left in a build folder that is used in place."""
    removed = []
    for folder, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            if os.path.islink(path) or (os.path.isfile(path) and not build_product(path) and name not in BUILD_LOCKS):
                try:
                    os.unlink(path)
                    removed.append(path)
                except OSError:
                    continue
    return removed
