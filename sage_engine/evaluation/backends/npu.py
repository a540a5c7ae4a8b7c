"""The `npu` backend: reference and candidate on a real Ascend NPU via torch_npu.

What a host needs (SAGE installs none of it, and never puts torch_npu into a
CPU environment, where it breaks `import torch`):
- CANN, with its `set_env.sh` sourced in the shell that starts SAGE
  (ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME set; the evaluation child inherits
  the environment, library paths included);
- torch_npu matching SAGE's torch, in SAGE's environment;
- triton-ascend in the same environment for Triton-Ascend candidates.

Candidates: PyTorch (ops dispatch to torch_npu), Triton-Ascend kernels (the
same files the ascend-compile gate checks; on the device they compile with
CANN's bishengir and hivmc), and Ascend C kernels that the candidate module
builds and loads itself (a torch_npu C++ extension or a custom-op package
built with CANN's msopgen, called from `ModelNew.forward`); the child gives
each candidate its own TORCH_EXTENSIONS_DIR.

Timing: NPU events around each call after warm-ups, reference and candidate
alternating, a 192 MB buffer zeroed before every call to flush the cache;
with `device_time` the torch_npu profiler also reports device-only time.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Mapping

from sage_engine.config import Config
from sage_engine.evaluation.backends.device_backend import CHILD, DeviceBackend
from sage_engine.evaluation.host.pool import WorkerPool

CANN_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
SETUP_HINT = ("on an Ascend host: install CANN and `source <ascend-toolkit>/set_env.sh` before starting SAGE, then "
              "install the torch_npu release that matches this torch into SAGE's environment (never on a machine "
              "without CANN). For a machine without an NPU use the ascend-compile backend.")


def cann_home(environ: Mapping[str, str]) -> str | None:
    """CANN's install dir as its set_env.sh exports it."""
    for name in CANN_VARIABLES:
        if environ.get(name):
            return environ[name]
    return None


class NpuBackend(DeviceBackend):
    name = "npu"
    device = "npu"
    module = "npu"
    timer = f"{CHILD}:npu_timer"
    preload = ("torch_npu",)
    setup_hint = SETUP_HINT
    device_time = True
    # The Ascend driver's nodes, as Ascend's container runtime passes them through.
    devices = ("/dev/davinci*", "/dev/hisi_hdc*", "/dev/devmm_svm*")
    build_namespace = "npu_extensions"  # Ascend C candidates build torch extensions: one folder per source

    def __init__(self, config: Config, pool: WorkerPool | None = None, *, environ: Mapping[str, str] | None = None):
        super().__init__(config, pool)
        # CANN is configured by its own set_env.sh in the process environment,
        # which the evaluation child inherits; it is not SAGE configuration.
        self.environ = os.environ if environ is None else environ

    def missing(self) -> str | None:
        if cann_home(self.environ) is None:
            return "CANN is not set up in this environment (neither ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set)"
        if importlib.util.find_spec("torch_npu") is None:
            return "torch_npu is not installed in SAGE's environment"
        return None

    def build_vars(self) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": ""}
