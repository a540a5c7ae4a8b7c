"""Virtualenvs for backends that cannot share SAGE's own environment.

triton-ascend installs under the package name `triton`, so it cannot live
beside upstream Triton; its interpreter also needs numpy < 2. Such a backend
gets its own virtualenv under `Config.cache_dir / "backends" / <name>`. A
marker file records the package set the env was built with: a changed set
rebuilds it, a matching one returns at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, InvalidInput

Log = Callable[[str], None]


@dataclass(frozen=True)
class Recipe:
    packages: tuple[str, ...]
    # Python run in the new env; it must exit 0 for the env to count as built.
    probe: str = "import sys"


# Everything the ascend-compile backend needs must import, and
# bishengir-compile must be where the backend looks for it.
ASCEND_PROBE = """
import os, numpy, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import ascendnpuir
b = os.path.join(os.path.dirname(ascendnpuir.__file__), "bin", "bishengir-compile")
if not os.access(b, os.X_OK):
    raise SystemExit(f"bishengir-compile is not executable at {b}")
if int(numpy.__version__.split(".")[0]) >= 2:
    raise SystemExit(f"numpy {numpy.__version__} is installed; the triton-ascend interpreter needs numpy<2")
print(torch.__version__, triton.__version__, numpy.__version__)
"""

RECIPES: dict[str, Recipe] = {
    "ascend-compile": Recipe(
        packages=(
            # An exact CPU-capable release: a bare `torch` lets pip pull a
            # multi-GB CUDA build. Where a local `+cpu` wheel is on pip's
            # find-links it wins (PEP 440 ranks 2.13.0+cpu above 2.13.0).
            "torch==2.13.0",
            "triton-ascend==3.2.0",  # installs as `triton`: never beside upstream triton
            "ascendnpu-ir==1.2.0",  # ships bishengir-compile
            "pybind11",
            "numpy<2",  # the triton-ascend interpreter breaks on numpy 2
        ),
        probe=ASCEND_PROBE,
    ),
}

MARKER = "sage-env.json"
# pip and torch imports on a cold disk; a whole install is a few hundred MB.
INSTALL_TIMEOUT_S = 1800.0
PROBE_TIMEOUT_S = 120.0


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def env_dir(name: str, config: Config) -> Path:
    if name not in RECIPES:
        raise InvalidInput(f"no virtualenv recipe for backend {name!r}; known: {', '.join(RECIPES)}")
    return config.cache_dir / "backends" / name


def env_python(path: Path) -> Path:
    return path / "bin" / "python"


def read_marker(path: Path) -> dict | None:
    try:
        return json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None


def env_is_current(name: str, config: Config) -> bool:
    """True when the env exists and was built with today's package set."""
    path = env_dir(name, config)
    marker = read_marker(path)
    return marker is not None and marker.get("packages") == list(RECIPES[name].packages) and env_python(path).exists()


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    # Two servers asking for the same env at once must not interleave pip runs.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], log: Log, timeout: float) -> None:
    log("$ " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BackendUnavailable(f"{cmd[0]} did not finish within {timeout:.0f} s") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise BackendUnavailable(f"backend env setup failed ({' '.join(cmd[:4])} ... exit {proc.returncode}):\n{tail}")


def dir_size_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def ensure_backend_env(name: str, config: Config, *, log: Log | None = None, force: bool = False) -> Path:
    """Create (or reuse) the virtualenv of backend `name` and return its path."""
    log = log or _stderr
    path = env_dir(name, config)
    recipe = RECIPES[name]
    packages = list(recipe.packages)
    with _lock(path.parent / f".{name}.lock"):
        if not force and env_is_current(name, config):
            return path
        if path.exists():
            log(f"rebuilding {path} (package set changed or setup was interrupted)")
            shutil.rmtree(path)
        start = time.monotonic()
        # -m venv from inside a venv builds on the base interpreter, so the new
        # env sees none of SAGE's packages (upstream triton above all).
        venv_cmd = [sys.executable, "-m", "venv", str(path)]
        if not packages:
            venv_cmd.insert(3, "--without-pip")
        _run(venv_cmd, log, PROBE_TIMEOUT_S)
        py = str(env_python(path))
        if packages:
            _run(
                [py, "-m", "pip", "install", "--only-binary=:all:", "--progress-bar", "off", *packages],
                log,
                INSTALL_TIMEOUT_S,
            )
        _run([py, "-c", recipe.probe], log, PROBE_TIMEOUT_S)
        marker = {
            "backend": name,
            "packages": packages,
            "python": sys.version.split()[0],
            "setup_s": round(time.monotonic() - start, 1),
            "size_mb": round(dir_size_bytes(path) / 2**20),
            "created": time.time(),
        }
        (path / MARKER).write_text(json.dumps(marker, indent=2))
        log(f"{name} env ready in {marker['setup_s']} s at {path} ({marker['size_mb']} MB)")
        return path


def probe_env(name: str, config: Config) -> str:
    """Run the import probe in the env; return its version line or raise."""
    path = env_dir(name, config)
    if not env_is_current(name, config):
        raise BackendUnavailable(f"the {name} virtualenv is not set up; run `sage backends setup {name}`")
    proc = subprocess.run(
        [str(env_python(path)), "-c", RECIPES[name].probe],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise BackendUnavailable(f"the {name} virtualenv at {path} is broken ({last}); run `sage backends setup {name} --force`")
    return proc.stdout.strip()
