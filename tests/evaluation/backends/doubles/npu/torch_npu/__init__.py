"""TEST DOUBLE standing in for torch_npu on a machine without an NPU.

Importing it renames torch's PrivateUse1 backend to `npu` (as torch_npu does)
so `torch.device("npu")` parses, and maps the `npu` device to the CPU through
`device_double.install`. `torch_npu.profiler` writes an op_statistic.csv in
CANN's column layout with perf_counter timings. Never a measurement.
"""

import torch

import device_double

torch.utils.rename_privateuse1_backend("npu")
device_double.install("npu", "Ascend910B3")

from torch_npu import profiler  # noqa: E402,F401

__version__ = "0.0.0+double"
