"""Source transformations of imported references: imports, input shims,
seeded forward, requirements, and the self candidate."""

from __future__ import annotations

import ast
import textwrap
import types

import pytest
import torch

from sage_engine.evaluation.host import static_checks
from sage_engine.suite import randomness, source


def _module(text: str) -> types.ModuleType:
    module = types.ModuleType("ref")
    exec(compile(textwrap.dedent(text), "ref.py", "exec"), module.__dict__)
    return module


def test_npu_imports_and_imports_only_dropped_code_used_are_removed():
    tree = ast.parse(
        textwrap.dedent("""
        import torch
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        from framework.utils import check_precision
        import math

        def get_inputs(param):
            return [torch.ones(math.prod([2, 3]))]
    """)
    )
    text = ast.unparse(source.strip_imports(tree))
    assert "torch_npu" not in text and "framework" not in text
    assert "import math" in text and "import torch" in text


def test_integer_draws_in_builders_give_valid_values_of_that_dtype():
    tree = ast.parse(
        textwrap.dedent("""
        import torch

        def get_inputs(dtype):
            x = torch.rand([64, 8], dtype=dtype) * 9 + 1
            y = torch.randn(5, dtype=dtype)
            z = torch.empty(6, dtype=dtype).uniform_(1, 4)
            w = torch.rand(3, dtype=torch.float16)
            return x, y, z, w
    """)
    )
    assert randomness.shim_random_inputs(tree, {"get_inputs"})
    assert "torch.rand(3, dtype=torch.float16)" in ast.unparse(tree), "float draws are left as written"
    module = _module(ast.unparse(tree))
    for dtype in (torch.int32, torch.int8, torch.uint8, torch.bool):
        torch.manual_seed(0)
        x, y, z, w = module.get_inputs(dtype)
        assert y.dtype == z.dtype == dtype and x.shape == (64, 8)
        if dtype != torch.bool:  # bool * 9 is an int64 tensor: the builder's own arithmetic
            assert x.dtype == dtype
            assert int(z.min()) >= 1 and int(z.max()) <= 4
            assert len(torch.unique(x)) > 1
    torch.manual_seed(0)
    floats = module.get_inputs(torch.float32)
    torch.manual_seed(0)
    assert torch.equal(floats[0], torch.rand([64, 8]) * 9 + 1), "float inputs are the values torch.rand gives"


def test_a_forward_that_draws_random_numbers_becomes_a_function_of_its_inputs():
    text = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.5)
                self.keep = nn.Dropout(p=0.0)

            def forward(self, x):
                return self.drop(x) + torch.rand_like(x)
    """)
    tree = ast.parse(text)
    assert randomness.random_in_forward(tree)
    assert randomness.seed_random_forward(tree, seed=7)
    model = _module(ast.unparse(tree)).Model()
    x = torch.ones(32)
    first = model(x)
    torch.rand(100)  # moves the global generator on
    assert torch.equal(first, model(x))
    quiet = ast.parse(
        "import torch.nn as nn\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.d = nn.Dropout(0.0)\n"
        "    def forward(self, x):\n        return self.d(x)\n"
    )
    assert not randomness.random_in_forward(quiet)


def test_a_layer_built_inside_forward_is_seeded_and_one_built_in_init_is_left_alone():
    # As benchmarks write a functional conv task: the layer, with fresh random weights, built on every call.
    text = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = nn.GELU()

            def forward(self, x, out_channels):
                conv = nn.Conv1d(x.shape[1], out_channels, 3)
                return self.act(conv(x))
    """)
    tree = ast.parse(text)
    assert randomness.random_in_forward(tree) == [11]
    assert randomness.seed_random_forward(tree, seed=3)
    model = _module(ast.unparse(tree)).Model()
    x = torch.randn(2, 4, 16)
    assert torch.equal(model(x, 5), model(x, 5))
    in_init = ast.parse(
        "import torch.nn as nn\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.conv = nn.Conv2d(3, 8, 3)\n"
        "    def forward(self, x):\n        return nn.ReLU()(self.conv(x))\n"
    )
    assert not randomness.random_in_forward(in_init)
    # KernelBench's level-3 models build their layers through helpers called from __init__.
    helper = ast.parse(
        "import torch.nn as nn\n"
        "def conv_bn(c):\n    return nn.Sequential(nn.Conv2d(c, c, 3), nn.BatchNorm2d(c))\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.block = conv_bn(8)\n    def forward(self, x):\n        return self.block(x)\n"
    )
    assert not randomness.random_in_forward(helper)


def test_requirements_come_from_calls_not_from_imports_guards_or_comments():
    needs = source.requirements(
        ast.parse(
            textwrap.dedent('''
        """Replaces torch_npu.npu_rotary_mul"""
        import torch

        def forward(x):
            if torch.cuda.is_available():
                pass
            return torch_npu.npu_rotary_mul(x)

        def to_gpu(x):
            return x.cuda()
    ''')
        )
    )
    assert [(r.kind, r.reason) for r in needs] == [("npu", "calls torch_npu.npu_rotary_mul"), ("cuda", "moves tensors with .cuda()")]
    assert source.requirements(ast.parse("import torch\nx = torch.zeros(3, device='cpu')\n")) == []


REFERENCE = textwrap.dedent("""
    import torch
    import torch.nn as nn
    import os, math

    SCALE = 2.0
    batch_size = 8


    def helper(x):
        return x * SCALE


    class Model(nn.Module):
        def __init__(self, width):
            super(Model, self).__init__()
            self.width = width

        def forward(self, x):
            return helper(x)[..., : self.width] + math.pi


    def get_inputs():
        return [torch.randn(batch_size, 4)]


    def get_init_inputs():
        return [3]
""")


def test_self_candidate_holds_the_model_and_only_what_it_needs():
    candidate = source.self_candidate(REFERENCE)
    assert "class ModelNew" in candidate and "super(ModelNew, self)" in candidate
    assert "def helper" in candidate and "SCALE = 2.0" in candidate and "import math" in candidate
    assert "get_inputs" not in candidate and "batch_size" not in candidate and "import os" not in candidate
    assert static_checks.check_source(candidate) == []
    ref, cand = _module(REFERENCE), _module(candidate)
    x = torch.randn(8, 4)
    assert torch.equal(ref.Model(3)(x), cand.ModelNew(3)(x))


def test_self_candidate_puts_import_roots_first_on_the_path():
    candidate = source.self_candidate(REFERENCE, import_roots=["/opt/bench/lib"])
    assert "sys.path[:0] = ['/opt/bench/lib']" in candidate
    with pytest.raises(ValueError, match="no class Model"):
        source.self_candidate("import torch\n")
