"""How a worker is started and what its sandbox hides and lets through.

`Launch` is per backend (interpreter, environment, preloads, device nodes);
`Sandboxing` is per harness (hidden folders and files, what every sandbox
may read, the private /tmp size); `sandboxing_for` builds it from a Config.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from platformdirs import user_config_dir

from sage_engine.config import Config
from sage_engine.evaluation.host import calibration, confine
from sage_engine.evaluation.common.processes import child_environment, stat_fields

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # the sage_engine package
# The cache subfolders a sandbox may read: backend virtualenvs and the
# per-candidate build folders (each backend's `build_namespace`). Not the
# cache dir whole: a memory database may sit in it.
CACHE_READABLE: tuple[str, ...] = ("backends", "torch_extensions", "triton", "cuda_extensions", "npu_extensions")


_folders: dict[str, str] = {}  # what a folder of `own_folder` holds -> the folder
_folders_lock = threading.Lock()


def own_folder(name: str, fill: Callable[[Path], None]) -> str:
    """A folder of this process's own under the temp dir holding `name`, made
    by `fill` once (again if it was removed since), removed at exit."""
    with _folders_lock:
        root = _folders.get(name)
        if root is None or not Path(root, name).exists():
            root = tempfile.mkdtemp(prefix=owner_prefix("import"))
            fill(Path(root))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _folders[name] = root
        return root


def import_root() -> str:
    """A directory holding only a link to the `sage_engine` package, for the
    workers' PYTHONPATH. Adding the package's parent instead would, in an
    installed SAGE, put all of this environment's site-packages (its triton,
    its numpy) in front of a backend's own virtualenv."""
    return own_folder("sage_engine", lambda root: os.symlink(PACKAGE_DIR, root / "sage_engine"))


def torch_mount_root() -> str:
    """A directory holding only an empty `torch` folder: bound read-only at
    `confine.TORCH_MOUNT`, the package bound over that folder. On the
    worker's PYTHONPATH, ahead of the standard library, nothing may be
    written beside torch (a module left there by one candidate would be
    imported by later evaluations' processes, the reference's included)."""
    return own_folder("torch", lambda root: (root / "torch").mkdir())


@functools.lru_cache(maxsize=16)
def torch_package(python: str) -> str | None:
    """The folder of the torch package `python` imports: this process's own
    (found, not imported) for this interpreter, else the one in its
    virtualenv's site-packages. None where there is none, or no one place."""
    if python == confine.interpreter_path(sys.executable):
        spec = importlib.util.find_spec("torch")
        found = list(spec.submodule_search_locations or []) if spec is not None else []
    else:
        found = [str(p.parent) for p in Path(python).parent.parent.glob("lib/python3*/site-packages/torch/__init__.py")]
    return os.path.realpath(found[0]) if len(found) == 1 else None


@dataclass(frozen=True)
class Launch:
    """How to start workers for a backend: which interpreter, with what
    environment, which modules a warm worker imports up front, and which
    device nodes and extra read-only folders its sandbox needs."""

    python: str = sys.executable
    env: tuple[tuple[str, str], ...] = ()
    preload: tuple[str, ...] = ()
    # Started ahead: a worker is ready (its imports done) before an evaluation asks.
    warm: bool = True
    # Each worker serves one evaluation, then a fresh one takes its place (a
    # device backend: its runtime's libraries are imported, the device is
    # started only in the evaluation's children).
    single_use: bool = False
    devices: tuple[str, ...] = ()  # exact paths (required) or glob patterns
    # A task's import roots (its benchmark's helper package): bound read-only,
    # so tasks with their own helpers get workers of their own.
    readable: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Every executor and backend starts workers from a Launch: the
        # interpreter is resolved here, once, the same way for all of them.
        object.__setattr__(self, "python", confine.interpreter_path(self.python))

    def environment(self, threads: int, torch_mounted: bool = False) -> dict[str, str]:
        """The worker's environment; `torch_mounted`: its sandbox shows torch at `confine.TORCH_MOUNT`."""
        mount = confine.TORCH_MOUNT if torch_mounted else ""
        pythonpath = os.pathsep.join(p for p in (import_root(), mount, os.environ.get("PYTHONPATH", "")) if p)
        extra = {
            "PYTHONPATH": pythonpath,
            "OMP_NUM_THREADS": str(threads),  # read once when the OpenMP runtime starts
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
            # Idle OpenMP threads sleep instead of spinning: a spinning pool
            # would look like work left running between timed calls.
            "OMP_WAIT_POLICY": "PASSIVE",
            # A fixed malloc policy: with glibc's adaptive one, the reference and
            # candidate processes end up with different thresholds, and one of
            # them takes page faults on every large output (measured: 30-60%
            # slower relu on identical code).
            "MALLOC_MMAP_THRESHOLD_": str(256 << 20),
            "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **dict(self.env),
        }
        return child_environment(os.environ, extra)


@dataclass(frozen=True)
class Sandboxing:
    """Everything a worker's sandbox is built from, fixed per harness."""

    confinement: confine.Confinement
    hidden_dirs: tuple[str, ...] = ()
    hidden_files: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # needed by every worker (the cache dir, SAGE's package)
    tmp_mb: int = 1024
    timing_lock: str = ""
    pause_max_s: float = 10.0  # Config.timing_pause_max_s

    def layout(self, launch: Launch, scratch: str) -> confine.Layout:
        # Only what exists here: bubblewrap refuses to bind a missing path (a
        # task's import roots named on another machine, a folder since deleted).
        readable = [
            p
            for p in confine.resolved([*confine.python_paths(launch.python), *self.readable, PACKAGE_DIR, import_root(), *launch.readable])
            if os.path.exists(p)
        ]
        torch = torch_package(launch.python)
        return confine.Layout(
            hidden_dirs=self.hidden_dirs,
            hidden_files=self.hidden_files,
            readable=tuple(readable),
            writable=((scratch, scratch), (os.path.join(scratch, "build"), confine.BUILD_MOUNT)),
            devices=confine.device_nodes(launch.devices),
            mounted=((torch_mount_root(), confine.TORCH_MOUNT), (torch, f"{confine.TORCH_MOUNT}/torch")) if torch is not None else (),
            tmp_mb=self.tmp_mb,
            chdir=scratch,
        )


def sandboxing_for(config: Config, confinement: confine.Confinement) -> Sandboxing:
    """What every sandbox of this config hides and lets through."""
    extra = [p for p in config.sandbox_hide.split(os.pathsep) if p.strip()] + confine.socket_dirs(config.db_url)
    # The measured limits the physics floor is judged by: a kernel that read
    # them could pace itself to just above the floor. Made now, so one
    # measured later is covered too.
    limits_dir = config.cache_dir / calibration.FOLDER
    limits_dir.mkdir(parents=True, exist_ok=True)
    extra.append(str(limits_dir))
    dirs, files = confine.hidden_for(config.db_path, config.home_dir, user_config_dir("sage", appauthor=False), extra)
    readable = []
    for sub in CACHE_READABLE:
        # Made now, so builds published later are visible to sandboxes already running.
        (config.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        readable.append(config.cache_dir / sub)
    return Sandboxing(
        confinement,
        hidden_dirs=tuple(dirs),
        hidden_files=tuple(files),
        readable=tuple(confine.resolved(readable)),
        tmp_mb=config.sandbox_tmp_mb,
        timing_lock=config.timing_lock,
        pause_max_s=config.timing_pause_max_s,
    )


def confinement_for(config: Config) -> confine.Confinement:
    """How this host confines evaluations under `config` (probed once per process)."""
    return confine.probe(config.sandbox_confinement, config.sandbox_bwrap)


# ------------------------------------------------- folders dead processes left

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
    removed: list[str] = []
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
