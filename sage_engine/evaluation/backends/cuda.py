"""The `cuda` backend: PyTorch and (upstream) Triton candidates on an NVIDIA GPU.

Needs a CUDA build of torch and a visible GPU; Triton candidates need the
`triton` package. Timing: CUDA events around each call after warm-ups,
reference and candidate alternating, a 256 MB buffer zeroed before every call
to flush the L2 cache (the KernelBench and `triton.testing.do_bench` recipe).
"""

from __future__ import annotations

from sage_engine.evaluation.backends.device_backend import CHILD, DeviceBackend

SETUP_HINT = ("needs an NVIDIA GPU and a CUDA build of torch in SAGE's environment "
              "(pip install torch==<version> from the CUDA index); triton for Triton candidates")


class CudaBackend(DeviceBackend):
    name = "cuda"
    device = "cuda"
    module = "cuda"
    timer = f"{CHILD}:cuda_timer"
    preload = ("triton",)
    setup_hint = SETUP_HINT
    devices = ("/dev/nvidia*",)  # nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/
    # C++/CUDA load_inline candidates: one build folder per source, Triton's cache inside it.
    build_namespace = "cuda_extensions"

    def build_vars(self) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": "", "TRITON_CACHE_DIR": "triton"}
