"""The `cpu` backend: PyTorch and C++ (torch cpp_extension) candidates on this CPU."""

from __future__ import annotations

import shutil

from sage_engine.evaluation.backends.base import SandboxBackend
from sage_engine.evaluation.tasks import Task
from sage_engine.models import BackendStatus


class CpuBackend(SandboxBackend):
    name = "cpu"
    timing_representative = True
    # One build folder per candidate source: an unchanged candidate reuses its
    # compiled extension, and two candidates that pick the same extension
    # name never build over each other.
    build_namespace = "torch_extensions"

    def build_vars(self) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": ""}

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        return {"MAX_JOBS": str(max(1, self.config.eval_threads))}

    def status(self) -> BackendStatus:
        compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
        reason = "PyTorch candidates run here"
        reason += "; C++ candidates build with " + compiler if compiler else "; no C++ compiler found"
        return BackendStatus(
            name=self.name, ready=True, hardware=self.hardware(), reason=reason,
            setup="" if compiler else "install g++ (and ninja) for C++ load_inline candidates",
            timing_representative=True,
        )
