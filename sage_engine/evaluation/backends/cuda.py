"""The `cuda` backend: PyTorch and (upstream) Triton candidates on an NVIDIA GPU.

Needs a CUDA build of torch and a visible GPU; Triton candidates need the
`triton` package. Timing: CUDA events around each call after warm-ups,
reference and candidate alternating, a 256 MB buffer zeroed before every call
to flush the L2 cache (the KernelBench and `triton.testing.do_bench` recipe).
"""

from __future__ import annotations

from sage_engine.evaluation import hostinfo
from sage_engine.evaluation.backends.device_backend import CHILD, DeviceBackend
from sage_engine.evaluation.tasks import Task

SETUP_HINT = ("needs an NVIDIA GPU and a CUDA build of torch in SAGE's environment "
              "(pip install torch==<version> from the CUDA index); triton for Triton candidates")


class CudaBackend(DeviceBackend):
    name = "cuda"
    device = "cuda"
    module = "cuda"
    timer = f"{CHILD}:cuda_timer"
    preload = ("triton",)
    setup_hint = SETUP_HINT

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        # C++/CUDA load_inline candidates: one build dir per source; Triton's cache beside it.
        ext_dir = self.config.cache_dir / "cuda_extensions" / hostinfo.candidate_hash(source)
        ext_dir.mkdir(parents=True, exist_ok=True)
        return {"TORCH_EXTENSIONS_DIR": str(ext_dir), "TRITON_CACHE_DIR": str(self.config.cache_dir / "triton-cuda")}
