"""The worker's scratch folder between evaluations: emptied (and, confined,
the sandbox's private /tmp and /dev/shm), and the candidate's cached build
staged into its writable build folder."""

from __future__ import annotations

import os
import shutil

from sage_engine.evaluation.protocol import BUILD_LOCKS, build_product

BUILD_DIR = "build"  # in the scratch dir: bound at host.confine.BUILD_MOUNT inside the sandbox


def stage_build(cache: str, inside: str) -> None:
    """Copy the candidate's cached build (read-only here) into its writable
    build dir, times kept so ninja sees it up to date. Regular files and
    folders only: a link planted by an earlier run is not followed."""
    shutil.rmtree(inside, ignore_errors=True)
    if not os.path.isdir(cache):
        os.makedirs(inside, exist_ok=True)
        return
    shutil.copytree(cache, inside, symlinks=True, ignore=_links, copy_function=shutil.copy2)


def _links(folder: str, names: list[str]) -> set[str]:
    """Links, the lock of a build that was killed (torch would wait on it
    forever), and any file a build does not make (`build_product`)."""
    out = set()
    for n in names:
        path = os.path.join(folder, n)
        if os.path.islink(path) or n in BUILD_LOCKS or (os.path.isfile(path) and not build_product(path)):
            out.add(n)
    return out


def clean(scratch: str, confined: bool) -> None:
    """Remove what the previous evaluation left: everything in the scratch
    dir (its build dir is the harness's to publish, and it has by now), and
    when confined the private /tmp and /dev/shm, keeping mount points."""
    build = os.path.join(scratch, BUILD_DIR)
    keep = (_mount_points() if confined else set()) | {build}
    for root in [scratch, build] + (["/tmp", "/dev/shm"] if confined else []):
        # The build dir itself stays: a mount inside the sandbox points at it.
        _empty(root, keep - {root})


def _mount_points() -> set[str]:
    points = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 4:
                    points.add(parts[4].replace("\\040", " "))
    except OSError:
        pass
    return points


def _empty(root: str, keep: set[str]) -> None:
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        if path in keep:
            continue
        if any(k.startswith(path + "/") for k in keep):
            _empty(path, keep)  # a mount point lies below: empty around it
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass
