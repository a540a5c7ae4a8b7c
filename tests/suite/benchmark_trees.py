"""Small checkouts in the layouts of the three public benchmarks, written by
the tests (no file comes from a benchmark). What each layout looks like:

- NPUKernelBench: `framework/` (the benchmark's helper package) and
  `tasks/levelN/<Category>/<Op>/` with `api_desc.md` and `validation/`
  (`module.py`: Model, a ModelNew calling `kernel_gen_ops`, torch_npu imports;
  `prepare_inputs.py`: `get_inputs(param, device)`, `get_init_inputs(param,
  device)`, optional `custom_check_precision`; `test_cases.csv`: `;`-separated,
  `case_id` first, parameters as text).
- MultiKernelBench: `dataset.py` and `reference/<category>/<op>.py`
  (KernelBench convention) plus `reference/npukernelbench_levelN/N_op.py` with
  `get_input_groups()` reading `N_op.json` (JSON lines of named inputs).
- KernelBench: `KernelBench/levelN/N_Name.py` with sizes as module constants.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


NPU_MODULE_HEAD = """import torch
import torch_npu
from torch_npu.contrib import transfer_to_npu
import torch.nn as nn
"""


def _module_py(path: Path, body: str) -> Path:
    """validation/module.py: the NPU imports every NPUKernelBench module starts with, then the body."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NPU_MODULE_HEAD + textwrap.dedent(body), encoding="utf-8")
    return path


def npukernelbench(root: Path) -> Path:
    _write(root / "framework" / "__init__.py", "")
    _write(
        root / "framework" / "utils.py",
        """
        import torch


        def check_precision(outputs, outputs_new, max_abs_error=1e-3, max_rel_error=1e-3):
            diff = (outputs - outputs_new).abs()
            return int(bool((diff <= max_abs_error).all())), diff, diff
    """,
    )
    _write(
        root / "framework" / "scales.py",
        """
        def half_of(value):
            return value * 0.5
    """,
    )
    (root / "tasks").mkdir(parents=True, exist_ok=True)

    clip = root / "tasks" / "level1" / "Math" / "ClipByValueMini"
    _write(clip / "api_desc.md", "# ClipByValueMini\n\nClamps every element between two one-element bounds.\n")
    _write(clip / "question" / "op_kernel" / "clip_by_value_mini.cpp", "// Ascend C kernel to write\n")
    _module_py(
        clip / "validation" / "module.py",
        """

        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x, low, high):
                return torch.minimum(torch.maximum(x, low), high)


        class ModelNew(nn.Module):
            def forward(self, x, low, high):
                import kernel_gen_ops
                return kernel_gen_ops.clip_by_value_mini(x, low, high)
    """,
    )
    _write(
        clip / "validation" / "prepare_inputs.py",
        """
        import torch
        from framework.utils import check_precision


        def get_inputs(param, device=None):
            shape = eval(param.get('shape', '[1]'))
            dtype = getattr(torch, param.get('dtype', 'float16'))
            x = (torch.rand(shape, dtype=dtype, device=device) * 9) + 1
            low = torch.empty(1, dtype=dtype, device=device).uniform_(1, 3)
            high = (torch.rand(1, dtype=dtype, device=device) * 6) + 4
            return x, low, high


        def get_init_inputs(param, device=None):
            return []


        def custom_check_precision(param, outputs, outputs_new):
            return check_precision(outputs, outputs_new, max_abs_error=0.01)
    """,
    )
    _write(
        clip / "validation" / "test_cases.csv",
        """
        case_id;shape;dtype
        0;[64, 32];float32
        1;[7, 5];int32
        2;[16, 3];int16
    """,
    )

    norm = root / "tasks" / "level2" / "Norm" / "BatchNormMini"
    _write(norm / "api_desc.md", "# BatchNormMini\n\nBatch normalisation over the channel axis.\n")
    _module_py(
        norm / "validation" / "module.py",
        """

        class Model(nn.Module):
            def __init__(self, num_features, eps, affine, training):
                super(Model, self).__init__()
                self.bn = nn.BatchNorm1d(num_features, eps=eps, affine=affine)
                self.bn.train(training)

            def forward(self, x):
                return self.bn(x)
    """,
    )
    _write(
        norm / "validation" / "prepare_inputs.py",
        """
        import torch


        def get_inputs(param, device=None):
            shape = eval(param.get('input_shape', '[2, 2]'))
            dtype = getattr(torch, param.get('dtype', 'float32'))
            return [torch.randn(shape, dtype=dtype, device=device)]


        def get_init_inputs(param, device=None):
            training = bool(int(param.get('training', 1)))
            return [int(param.get('num_features', 1)), float(param.get('epsilon', 1e-5)),
                    bool(param.get('affine', True)), training]
    """,
    )
    _write(
        norm / "validation" / "test_cases.csv",
        """
        case_id;input_shape;num_features;dtype;affine;training;epsilon
        0;[8, 4];4;float32;True;True;1e-5
        1;[6, 3];3;float32;False;False;1e-3
    """,
    )

    scaled = root / "tasks" / "level2" / "Activation" / "HalfScaleMini"
    _write(scaled / "api_desc.md", "# HalfScaleMini\n\nHalves a tensor with the benchmark's own helper.\n")
    _module_py(
        scaled / "validation" / "module.py",
        """
        from framework.scales import half_of


        class Model(nn.Module):
            def forward(self, x):
                return half_of(x) + 1.0
    """,
    )
    _write(
        scaled / "validation" / "prepare_inputs.py",
        """
        import torch
        from framework.scales import half_of


        def get_inputs(param, device=None):
            shape = eval(param.get('input_shape', '[1]'))
            return [half_of(torch.randn(shape, device=device)) * 4]


        def get_init_inputs(param, device=None):
            return []
    """,
    )
    _write(
        scaled / "validation" / "test_cases.csv",
        """
        case_id;input_shape;dtype
        0;[33, 17];float32
        1;[4096, 8192];float32
    """,
    )
    gmm = root / "tasks" / "level3" / "GMM" / "MatmulRowsMini"
    _write(gmm / "api_desc.md", "# MatmulRowsMini\n\nA matmul sized by scalar m, k, n columns.\n")
    _module_py(
        gmm / "validation" / "module.py",
        """

        class Model(nn.Module):
            def forward(self, a, b):
                return a @ b
    """,
    )
    _write(
        gmm / "validation" / "prepare_inputs.py",
        """
        import torch


        def get_inputs(param, device=None):
            m, k, n = (int(torch.tensor(param[c]).item()) for c in ('m', 'k', 'n'))
            return [torch.randn(m, k, device=device), torch.randn(k, n, device=device)]


        def get_init_inputs(param, device=None):
            return []
    """,
    )
    _write(
        gmm / "validation" / "test_cases.csv",
        """
        case_id;m;k;n
        0;40;24;16
        1;2048;2048;2048
    """,
    )
    noisy = root / "tasks" / "level3" / "Math" / "DoubleNoiseMini"
    _write(noisy / "api_desc.md", "# DoubleNoiseMini\n\nDoubles a tensor of approximately normal noise.\n")
    _module_py(
        noisy / "validation" / "module.py",
        """

        class Model(nn.Module):
            def forward(self, x):
                return x * 2
    """,
    )
    # Irwin-Hall noise drawn in float64 NumPy: building the input takes far
    # longer than the forward, as in several NPUKernelBench tasks.
    _write(
        noisy / "validation" / "prepare_inputs.py",
        """
        import numpy as np
        import torch


        def get_inputs(param, device=None):
            shape = eval(param['input_shape'])
            noise = sum(np.random.uniform(size=shape) for _ in range(24)) - 12
            return [torch.tensor(noise, dtype=torch.float32, device=device)]


        def get_init_inputs(param, device=None):
            return []
    """,
    )
    _write(
        noisy / "validation" / "test_cases.csv",
        """
        case_id;input_shape;dtype
        0;[8, 10];float32
        1;[4096, 1000];float32
    """,
    )
    strided = root / "tasks" / "level3" / "Index" / "StridedAssignMini"
    _write(strided / "api_desc.md", "# StridedAssignMini\n\nWrites a tensor into every other column of another.\n")
    _module_py(
        strided / "validation" / "module.py",
        """

        class Model(nn.Module):
            def forward(self, var, value, stride):
                step = int(stride.item())
                out = var.clone()
                out[:, ::step] = value
                return out
    """,
    )
    _write(
        strided / "validation" / "prepare_inputs.py",
        """
        import torch


        def get_inputs(param, device=None):
            var = torch.randn(eval(param['var_shape']), device=device)
            value = torch.randn(eval(param['value_shape']), device=device)
            return [var, value, torch.tensor(int(param['stride']), device=device)]


        def get_init_inputs(param, device=None):
            return []
    """,
    )
    # The value is half as wide as the tensor it goes into: halving either
    # width alone breaks the reference, which the written shapes cannot show.
    _write(
        strided / "validation" / "test_cases.csv",
        """
        case_id;var_shape;value_shape;stride;dtype
        0;[6, 8];[6, 4];2;float32
        1;[2048, 8192];[2048, 4096];2;float32
    """,
    )
    return root


def multikernelbench(root: Path) -> Path:
    _write(root / "dataset.py", "tasks = {}\n")
    _write(
        root / "reference" / "activation" / "relu_mini.py",
        """
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            \"\"\"Simple model that performs a ReLU activation.\"\"\"

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.relu(x)


        batch_size = 16  # rows
        dim = 64


        def get_inputs():
            return [torch.randn(batch_size, dim)]


        def get_init_inputs():
            return []
    """,
    )
    level1 = root / "reference" / "npukernelbench_level1"
    _write(
        level1 / "1_gelu_mini.py",
        """
        import torch
        import torch.nn as nn
        import json
        import os


        class Model(nn.Module):
            \"\"\"Simple model that performs a GELU activation.\"\"\"

            def forward(self, x, approximate='none'):
                return torch.nn.functional.gelu(x, approximate=approximate)


        def get_input_groups():
            path = os.path.join(os.path.dirname(__file__), "1_gelu_mini.json")
            with open(path) as f:
                cases = [json.loads(line) for line in f if line.strip()]
            groups = []
            for case in cases:
                x_info, mode = case["inputs"][0], case["inputs"][1]
                x = torch.randn(x_info["shape"], dtype=getattr(torch, x_info["dtype"]))
                groups.append([x, mode["value"]])
            return groups


        def get_init_inputs():
            return []
    """,
    )
    lines = [
        {
            "inputs": [
                {"name": "x", "type": "tensor", "dtype": "float32", "shape": [128]},
                {"name": "approximate", "type": "attr", "dtype": "str", "value": "none"},
            ]
        },
        {
            "inputs": [
                {"name": "x", "type": "tensor", "dtype": "float16", "shape": [16, 32]},
                {"name": "approximate", "type": "attr", "dtype": "str", "value": "tanh"},
            ]
        },
        {
            "inputs": [
                {"name": "x", "type": "tensor", "dtype": "float32", "shape": [7, 15, 23]},
                {"name": "approximate", "type": "attr", "dtype": "str", "value": "none"},
            ]
        },
    ]
    (level1 / "1_gelu_mini.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    level2 = root / "reference" / "npukernelbench_level2"
    _write(
        level2 / "1_rotary_mini.py",
        """
        import torch
        import torch.nn as nn
        import json
        import os


        class Model(nn.Module):
            \"\"\"Rotary embedding through the NPU's fused op.\"\"\"

            def forward(self, x, r1, r2):
                import torch_npu
                return torch_npu.npu_rotary_mul(x, r1, r2)


        def get_input_groups():
            with open(os.path.join(os.path.dirname(__file__), "1_rotary_mini.json")) as f:
                shapes = [json.loads(line)["inputs"][0]["shape"] for line in f if line.strip()]
            return [[torch.randn(s), torch.randn(s), torch.randn(s)] for s in shapes]


        def get_init_inputs():
            return []
    """,
    )
    (level2 / "1_rotary_mini.json").write_text(
        json.dumps({"inputs": [{"name": "x", "type": "tensor", "dtype": "float32", "shape": [2, 8, 16]}]}) + "\n"
    )
    return root


def kernelbench(root: Path) -> Path:
    bench = root / "KernelBench"
    _write(
        bench / "level1" / "1_Square_matmul_mini.py",
        """
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            \"\"\"C = A @ B for square matrices.\"\"\"

            def __init__(self):
                super(Model, self).__init__()

            def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
                return torch.matmul(A, B)


        N = 2048 * 2  # sized for a GPU


        def get_inputs():
            A = torch.rand(N, N)
            B = torch.rand(N, N)
            return [A, B]


        def get_init_inputs():
            return []  # no parameters
    """,
    )
    _write(
        bench / "level2" / "5_Gemm_Dropout_mini.py",
        """
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            \"\"\"A linear layer followed by dropout, in training mode.\"\"\"

            def __init__(self, in_features, out_features, p):
                super(Model, self).__init__()
                self.linear = nn.Linear(in_features, out_features)
                self.dropout = nn.Dropout(p)

            def forward(self, x):
                return self.dropout(self.linear(x))


        batch_size = 8
        in_features = 32
        out_features = 24
        p = 0.5


        def get_inputs():
            return [torch.randn(batch_size, in_features)]


        def get_init_inputs():
            return [in_features, out_features, p]
    """,
    )
    _write(
        bench / "level3" / "7_Selective_scan_mini.py",
        """
        import torch
        import torch.nn as nn
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn  # a CUDA package, not installed


        class Model(nn.Module):
            def forward(self, x):
                return selective_scan_fn(x, x, x, x, x)


        def get_inputs():
            return [torch.randn(4, 3)]


        def get_init_inputs():
            return []
    """,
    )
    return root
