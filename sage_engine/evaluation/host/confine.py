"""Confining evaluation processes with bubblewrap.

Each evaluation worker (the process that forks the reference and candidate
children) starts inside its own bubblewrap sandbox, so everything a
candidate runs inherits it:

- the whole filesystem read-only, `/tmp`, `/dev/shm` private and size-capped;
- the user's home, `/root`, `/home`, the memory database's folder (which
  holds the HTTP token file), SAGE's config dir and a few system secrets
  (`/etc/shadow`, `/etc/ssh`, container secret mounts) covered by empty
  tmpfs or `/dev/null`; what SAGE itself needs from under them (its Python,
  its packages, the cache dir) is bound back read-only;
- one writable folder: the worker's scratch (evaluation dirs, and the build
  dir that `/tmp/sage-build` points at);
- the interpreter's torch package, read-only, also at `/tmp/sage-torch`
  (what a C++ build's flags name, the same from every checkout);
- no network, own PID, IPC and UTS namespaces, all capabilities dropped,
  `/proc/sys` read-only, killed with its parent, its own session;
- only the device nodes the backend names.

When bubblewrap is missing or cannot create namespaces here, evaluation
still runs with the process limits alone (`limits-only`) and says so with
the command that fixes it, unless `sandbox_confinement = "required"`.
Standard library only: the pieces that build the command line are pure.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

BUBBLEWRAP = "bubblewrap"
LIMITS_ONLY = "limits-only"
# Inside every sandbox the candidate's build folder appears here: a path
# that is the same in every worker, so a cached build is up to date for ninja.
BUILD_MOUNT = "/tmp/sage-build"
# Inside every sandbox the interpreter's torch package appears here too (on
# PYTHONPATH, ahead of its site-packages): a C++ build's flags name torch's
# include and library folders, so with torch at one path a cached build is
# up to date for ninja from any checkout and any virtualenv path.
TORCH_MOUNT = "/tmp/sage-torch"
PROBE_TIMEOUT_S = 20.0
# Covered even when SAGE runs as an ordinary user: other users' homes,
# password hashes, host keys, container secret mounts.
SYSTEM_HIDDEN = (
    "/root",
    "/home",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/run/secrets",
    "/var/run/secrets",
    # A local PostgreSQL server's unix sockets: a team memory must be out of reach too.
    "/run/postgresql",
    "/var/run/postgresql",
)
# Namespaces and privileges, the same for the probe and every sandbox. The
# worker is PID 1 of its PID namespace (`--as-pid-1`, bubblewrap 0.8): the
# kernel drops a signal sent to it from inside the namespace (it has no
# handlers a candidate could use), so a candidate cannot kill its worker, and
# a worker lost mid-evaluation is the host's fault (docs/reliability.md). As
# init it also adopts the candidate's orphans, which it reaps between requests.
ISOLATION = (
    "--unshare-net",
    "--unshare-pid",
    "--as-pid-1",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--hostname",
    "sage-sandbox",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
)
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Confinement:
    """How this host confines evaluations. `mode` is what every result,
    `ping`, `sage backends list` and the server banner report."""

    mode: str  # BUBBLEWRAP or LIMITS_ONLY
    detail: str  # the bubblewrap version, or why it is not used
    fix: str = ""  # one command that makes confinement work ("" when confined)
    bwrap: str | None = None  # the executable, when confined
    required: bool = False  # sandbox_confinement = "required"

    @property
    def confined(self) -> bool:
        return self.mode == BUBBLEWRAP

    def describe(self) -> str:
        if self.confined:
            return f"{BUBBLEWRAP} ({self.detail})"
        return f"{LIMITS_ONLY}: {self.detail}" + (f"; fix: {self.fix}" if self.fix else "")


def install_command(is_root: bool) -> str:
    return ("" if is_root else "sudo ") + "apt-get install -y bubblewrap"


def namespace_fix(message: str, is_root: bool) -> str:
    """The one command most likely to let bubblewrap create namespaces, from its error."""
    text = message.lower()
    if is_root:
        # Root that cannot unshare is a container without the privilege to.
        return "start the container with --privileged (or --cap-add SYS_ADMIN --security-opt seccomp=unconfined)"
    if "apparmor" in text or Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").exists():
        return "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
    return "sudo sysctl -w kernel.unprivileged_userns_clone=1"


def bwrap_message(stderr: str) -> str | None:
    """bubblewrap's own error line ("bwrap: ...") in a process's stderr."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith("bwrap:")]
    return lines[-1] if lines else None


def probe(setting: str, executable: str = "bwrap") -> Confinement:
    """Whether bubblewrap works here (cached per setting and executable): it
    runs `true` in a sandbox with the same namespaces every evaluation gets."""
    return _probe(setting, executable, os.geteuid() == 0)


@functools.lru_cache(maxsize=8)
def _probe(setting: str, executable: str, is_root: bool) -> Confinement:
    required = setting == "required"
    if setting == "off":
        return Confinement(LIMITS_ONLY, "sandbox_confinement is 'off'", "export SAGE_SANDBOX_CONFINEMENT=auto", required=False)
    path = shutil.which(executable)
    if path is None:
        return Confinement(
            LIMITS_ONLY, f"bubblewrap is not installed ({executable!r} is not on PATH)", install_command(is_root), required=required
        )
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        proc = subprocess.run(
            [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *ISOLATION, "--", "true"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Confinement(LIMITS_ONLY, f"bubblewrap could not be run: {exc}", install_command(is_root), required=required)
    if proc.returncode != 0:
        message = bwrap_message(proc.stderr) or proc.stderr.strip()[-300:] or f"exit {proc.returncode}"
        return Confinement(
            LIMITS_ONLY, f"bubblewrap cannot create namespaces here ({message})", namespace_fix(message, is_root), required=required
        )
    return Confinement(BUBBLEWRAP, version.stdout.strip() or "bubblewrap", bwrap=path, required=required)


# ------------------------------------------------------------------ layout


@dataclass(frozen=True)
class Layout:
    """What one sandbox sees. Paths are absolute and resolved."""

    hidden_dirs: tuple[str, ...]  # covered by an empty read-only tmpfs
    hidden_files: tuple[str, ...]  # covered by /dev/null (or a tmpfs for a directory)
    readable: tuple[str, ...]  # bound back read-only where a hidden dir covers them
    writable: tuple[tuple[str, str], ...]  # (host path, path inside)
    devices: tuple[str, ...]  # device nodes bound through
    mounted: tuple[tuple[str, str], ...] = ()  # (host path, path inside) bound read-only at a fixed place, in order
    tmp_mb: int = 1024  # size of the private /tmp and /dev/shm
    chdir: str = "/"


def resolved(paths: Iterable[str | Path]) -> list[str]:
    out = []
    for p in paths:
        if not p:
            continue
        try:
            out.append(str(Path(p).expanduser().resolve()))
        except (OSError, RuntimeError):
            continue
    return sorted(set(out), key=lambda s: (s.count("/"), s))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def interpreter_path(python: str) -> str:
    """The interpreter as the sandbox can reach it: the folders above it
    resolved, its own name kept. Through a symlinked folder (a virtualenv
    reached by a link under /tmp, which the sandbox covers with its own)
    the path does not exist inside; resolving the file itself would leave
    the virtualenv (its bin/python links to the base interpreter, and Python
    finds pyvenv.cfg beside the path it was started by)."""
    if not os.path.isabs(python):
        return python
    return os.path.join(os.path.realpath(os.path.dirname(python)), os.path.basename(python))


def python_paths(python: str) -> list[str]:
    """What an interpreter needs to start and import its packages: its venv,
    the installation the venv was made from, and (for this very interpreter)
    its site-packages folders and PYTHONPATH. Not the rest of sys.path: the
    script's folder or the working directory may be anything."""
    exe = Path(python)
    paths: list[Path] = [exe.parent.parent, exe.resolve().parent.parent]
    cfg = exe.parent.parent / "pyvenv.cfg"
    try:
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(Path(value.strip()).parent)
    except OSError:
        pass
    if exe.resolve() == Path(sys.executable).resolve() or str(exe) == sys.executable:
        paths += [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)]
        paths += [Path(p) for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)]
    paths += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [str(p) for p in paths if p.is_absolute()]


def hidden_for(db_path: Path, home: str | Path, config_dir: str | Path, extra: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(dirs, files) to hide: the memory database with its folder (where the
    HTTP token file lives), HOME, SAGE's config dir, system secrets, and any
    extra paths. Only paths that exist are returned."""
    dirs: list[str | Path] = [home, config_dir]
    files: list[str | Path] = []
    db = Path(db_path).expanduser()
    if db.parent.resolve() != Path("/"):
        dirs.append(db.parent)
    files += [db.with_name(db.name + suffix) for suffix in SQLITE_SUFFIXES]
    files.append(db.with_name(db.stem + ".mcp-token"))
    for p in (*SYSTEM_HIDDEN, *extra):
        (dirs if Path(p).is_dir() else files).append(p)
    dirs_r = [d for d in resolved(dirs) if Path(d).is_dir() and d != "/"]
    files_r = [f for f in resolved(files) if Path(f).exists()]
    return dirs_r, files_r


def socket_dirs(db_url: str | None) -> list[str]:
    """The unix-socket folders a PostgreSQL URL connects through (`host=/path`), to hide like the SQLite file."""
    if not db_url:
        return []
    from psycopg.conninfo import conninfo_to_dict

    try:
        hosts = str(conninfo_to_dict(db_url).get("host") or "")
    except Exception:  # a malformed URL fails at connect time with its own message
        return []
    return [h for h in hosts.split(",") if h.startswith("/")]


def bwrap_argv(bwrap: str, layout: Layout, command: list[str]) -> list[str]:
    """The bubblewrap command line for `layout` running `command` (pure).

    Covers and read-only binds are applied from the shallowest path down, each
    only where it changes what is visible: a hidden folder inside a path that
    was bound back is covered again, and a hidden file is covered wherever it
    is still visible. Writable binds and devices come last, then the covers
    are made read-only. A needed path never uncovers a hidden folder whole."""
    args = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--size",
        str(layout.tmp_mb << 20),
        "--tmpfs",
        "/dev/shm",
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--size",
        str(layout.tmp_mb << 20),
        "--tmpfs",
        "/tmp",
    ]
    applied: list[tuple[str, bool]] = [("/tmp", True)]  # (path, hidden)

    def hidden(path: str) -> bool:
        inner = [(p, h) for p, h in applied if _under(path, p)]
        return max(inner, key=lambda ph: len(ph[0]))[1] if inner else False

    # A needed path that is a hidden folder itself (a venv whose prefix is
    # $HOME) or holds the private /tmp (PYTHONPATH=/tmp, or /) is not bound:
    # nothing would cover them again. Hidden folders deeper than a needed
    # path are covered again, as the ops below run from the shallowest down.
    readable = [r for r in layout.readable if r not in layout.hidden_dirs and not _under("/tmp", r)]
    ops = sorted(
        [(d, True) for d in layout.hidden_dirs] + [(r, False) for r in readable], key=lambda op: (op[0].count("/"), op[0], not op[1])
    )
    covers = []
    for path, hide in ops:
        if hidden(path) == hide or (not hide and not Path(path).exists()):
            continue
        args += ["--tmpfs", path] if hide else ["--ro-bind", path, path]
        applied.append((path, hide))
        if hide:
            covers.append(path)
    for f in layout.hidden_files:
        if not hidden(f):
            args += ["--tmpfs", f] if Path(f).is_dir() else ["--ro-bind", "/dev/null", f]
    for src, dest in layout.writable:
        args += ["--bind", src, dest]
    for src, dest in layout.mounted:
        args += ["--ro-bind", src, dest]
    for dev in layout.devices:
        args += ["--dev-bind", dev, dev]
    for d in covers:
        args += ["--remount-ro", d]
    return [*args, *ISOLATION, "--chdir", layout.chdir, "--", *command]


def device_nodes(patterns: Iterable[str]) -> tuple[str, ...]:
    """Device paths for a backend: exact paths are required (a missing one
    makes bubblewrap fail and the evaluation a `sandbox_error`); glob
    patterns bind whatever matches."""
    found: list[str] = []
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            found += sorted(glob.glob(pattern))
        else:
            found.append(pattern)
    return tuple(dict.fromkeys(found))
