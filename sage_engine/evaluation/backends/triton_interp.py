"""The `triton` backend: upstream Triton kernels under TRITON_INTERPRET=1 on CPU.

The interpreter runs each program instance as numpy code, so it checks
correctness; its times say nothing about a GPU or NPU. Timing is still
measured (it shows a runaway kernel) but marked unrepresentative, and no
speedup is reported.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from sage_engine.evaluation.backends.base import SandboxBackend
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.protocol import TimingOptions
from sage_engine.evaluation.tasks import Task
from sage_engine.models import BackendStatus


class TritonInterpreterBackend(SandboxBackend):
    name = "triton"
    timing_representative = False

    def launch(self) -> Launch:
        # Its own warm worker: triton decorates its standard library
        # (tl.sum, tl.max, ...) at import, interpreted only if
        # TRITON_INTERPRET is set by then.
        return Launch(env=(("TRITON_INTERPRET", "1"),), preload=("triton",))

    build_namespace = "triton"  # Triton's cache, per candidate: no candidate can plant a kernel for another

    def build_vars(self) -> dict[str, str]:
        return {"TRITON_CACHE_DIR": ""}

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        return {"TRITON_INTERPRET": "1"}

    def timing_options(self) -> TimingOptions | None:
        # The interpreter is ~1 ms per program instance: a few reps are plenty
        # for a number nobody should compare.
        options = super().timing_options()
        return dataclasses.replace(options, warmup=1, min_reps=3, max_reps=20,
                                   budget_s=min(self.config.timing_budget_s, 0.5))

    def status(self) -> BackendStatus:
        ready = importlib.util.find_spec("triton") is not None
        return BackendStatus(
            name=self.name, ready=ready, hardware=self.hardware(),
            reason="upstream Triton in interpreter mode (TRITON_INTERPRET=1): correctness only"
            if ready else "triton is not installed",
            setup="" if ready else "pip install 'sage-npu[triton]' (upstream triton; not triton-ascend)",
            timing_representative=False,
        )
