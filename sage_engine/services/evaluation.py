"""Tasks, candidates and backends: turning what a caller passes (an id, a
path, source code) into something the harness can evaluate, and refusing
paths outside the allowed roots before any file is read.

The harness never touches the memory: `Engine.evaluate` checks the
episode, runs the harness with no transaction open, then records the result.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.memory import validation
from sage_engine.models import BackendStatus, MachineLimits, ProgressCallback, TaskSummary

if TYPE_CHECKING:
    from sage_engine.evaluation.harness import Harness
    from sage_engine.evaluation.host.tasks import Task
    from sage_engine.suite.check import SuiteCheck
    from sage_engine.suite.common import ImportedTask

SUITE_DIR = Path(__file__).resolve().parents[1] / "suite" / "tasks"


class EvaluationService:
    def __init__(self, config: Config):
        self.config = config
        self._harness: Harness | None = None
        self._lock = threading.Lock()

    @property
    def harness(self) -> "Harness":
        """The one way into an evaluation, here or on a cluster (made on first
        use, imported lazily: servers start fast and memory-only commands
        never pay for the evaluation stack or join a cluster)."""
        with self._lock:
            if self._harness is None:
                from sage_engine.evaluation.harness import Harness

                self._harness = Harness(self.config)
            return self._harness

    def close(self) -> None:
        if self._harness is not None:
            self._harness.close()

    # ----------------------------------------------------------------- tasks

    def load_task(self, spec: str) -> "Task":
        from sage_engine.evaluation.host.tasks import load_task

        validation.check_text("task", spec, self.config.max_candidate_chars, required=True)
        inline = "class Model" in spec and "\n" in spec
        if not inline:
            check_path_text(spec, "task")
        # A bare id that is no file here is a (possibly unknown) bundled task id:
        # the loader answers with close matches instead of a path error.
        task_id = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", spec) is not None and not Path(spec).exists()
        bundled = task_id or (re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", spec) is not None and (SUITE_DIR / spec).is_dir())
        if not inline and not bundled:
            # Anything else names a file or folder: check it before it is read,
            # so a client cannot make the server open files outside its roots.
            self.check_path(Path(spec))
        return load_task(spec)

    def list_tasks(self, *, level: int | None = None, family: str | None = None, suite_dir: Path | str | None = None) -> list[TaskSummary]:
        from sage_engine.evaluation.host.tasks import list_suite, task_summary

        if suite_dir is not None:
            suite_dir = self.check_path(Path(suite_dir))
        return [task_summary(t) for t in list_suite(suite_dir, level=level, family=family)]

    def suite_tasks(self, suite_dir: Path | str | None = None, *, level: int | None = None, family: str | None = None) -> list["Task"]:
        from sage_engine.evaluation.host.tasks import list_suite

        folder = self.check_path(Path(suite_dir)) if suite_dir is not None else None
        return list_suite(folder, level=level, family=family)

    def import_tasks(
        self,
        src: Path | str,
        dest: Path | str,
        *,
        overwrite: bool = False,
        max_cases: int | None = None,
        scale: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> list[ImportedTask]:
        from sage_engine.suite.importers import import_tasks

        backend = self.harness.backend("cpu") if scale else None
        return import_tasks(
            Path(src), Path(dest), overwrite=overwrite, max_cases=max_cases, scale=scale, backend=backend, progress=progress
        )

    def check_suite(
        self,
        suite_dir: Path | str | None = None,
        *,
        backend: str | None = None,
        jobs: int | None = None,
        trials: int | None = None,
        task_ids: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        rows: Path | str | None = None,
        report: Path | str | None = None,
    ) -> SuiteCheck:
        from sage_engine.suite.check import check_suite, select_tasks

        folder = self.check_path(Path(suite_dir)) if suite_dir is not None else None
        return check_suite(
            select_tasks(folder, task_ids),
            self.config,
            backend=backend or self.config.backend,
            jobs=jobs,
            trials=trials,
            progress=progress,
            rows=Path(rows) if rows else None,
            report=Path(report) if report else None,
        )

    # ------------------------------------------------------------ candidates

    def resolve_candidate(self, candidate: str) -> tuple[str, str | None]:
        """Source code, or a path to a file under the allowed roots."""
        if not isinstance(candidate, str) or not candidate.strip():
            raise InvalidInput("candidate must be kernel source code or a path to a .py file")
        if "\x00" in candidate:
            raise InvalidInput("candidate contains NUL bytes; send Python source text")
        if "\n" in candidate or "ModelNew" in candidate:
            return candidate, None
        check_path_text(candidate, "candidate")
        path = self.check_path(Path(candidate))
        if not path.is_file():
            raise InvalidInput(f"candidate path {candidate!r} is not a file; pass source code or an existing .py file")
        if path.suffix != ".py":
            raise InvalidInput(f"candidate path must be a .py file defining ModelNew, got {path.name!r}")
        if path.stat().st_size > self.config.max_candidate_chars:
            raise InvalidInput(f"{path} is larger than {self.config.max_candidate_chars} bytes")
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path} is not UTF-8 text") from exc

    def check_path(self, path: Path) -> Path:
        try:
            resolved = path.expanduser().resolve()
        except RuntimeError as exc:  # `~name` for a user this machine does not have
            raise InvalidInput(f"path {str(path)!r} cannot be resolved ({exc}); pass an absolute path") from exc
        roots = [Path(r).expanduser().resolve() for r in self.config.candidate_roots.split(os.pathsep) if r] or [Path.cwd().resolve()]
        roots.append(SUITE_DIR.resolve())
        if not any(resolved == r or r in resolved.parents for r in roots):
            raise InvalidInput(
                f"path {str(path)!r} is outside the allowed directories ({', '.join(map(str, roots))}); "
                "pass the source code instead, or add the directory to SAGE_CANDIDATE_ROOTS"
            )
        return resolved

    # -------------------------------------------------------------- backends

    def backends(self) -> list[BackendStatus]:
        from sage_engine.evaluation.backends.base import list_backends

        return list_backends(self.config)

    def calibrate(self, name: str | None = None, *, force: bool = False) -> MachineLimits:
        """This host's measured limits for a backend: cached, or measured now
        (always with `force`), as an evaluation's candidate process would run."""
        backend = self.harness.backend(name)
        calibration = getattr(backend, "calibration", None)
        if not callable(calibration) or not backend.timing_representative:
            raise BackendUnavailable(
                f"the {backend.name} backend times nothing representative: it has no limits to measure; calibrate cpu, npu or cuda"
            )
        status = self.harness.backend_status(backend.name)
        if not status.ready:
            raise BackendUnavailable(f"backend {backend.name!r} is not ready: {status.reason}. {status.setup}".strip())
        return calibration(force=force)

    def cached_limits(self, backend: str, hardware: str) -> MachineLimits | None:
        """The newest limits cached on this host for `backend` on `hardware`,
        measuring nothing: what a result stored before its profile kept its
        limits is drawn against."""
        from sage_engine.evaluation.host.calibration import FOLDER

        found = []
        for path in (Path(self.config.cache_dir) / FOLDER).glob(f"{backend}-*.json"):
            try:
                limits = MachineLimits.model_validate_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # a file being replaced, or one an older SAGE wrote
                continue
            if limits.backend == backend and limits.hardware == hardware:
                found.append(limits)
        return max(found, key=lambda limits: limits.measured_at, default=None)

    def setup_backend(self, name: str, *, log: Callable[[str], None] | None = None, force: bool = False) -> Path | None:
        """Create what a backend needs here (the ascend-compile virtualenv);
        hardware backends only report what the host is missing."""
        from sage_engine.evaluation.backends.base import get_backend

        backend = get_backend(name, self.config)
        try:
            setup = getattr(backend, "setup", None)
            if not callable(setup):
                status = backend.status()
                raise BackendUnavailable(f"{name}: {status.reason}. {status.setup}".strip())
            return setup(log=log, force=force)
        finally:
            backend.close()


def check_path_text(spec: str, what: str) -> None:
    """A one-line argument is a name or a path; refuse what no filesystem
    could hold before the OS is asked about it."""
    if len(spec) > 4096 or any(len(part) > 255 for part in spec.split("/")):
        raise InvalidInput(f"{what} is neither source code nor a usable path or id (a path part is over 255 characters)")
