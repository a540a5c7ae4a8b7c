from __future__ import annotations

import pytest

from sage_engine.evaluation.host.static_checks import check_source

from tests.evaluation.support import FIXTURE_TASKS


def rules(source: str, **kw) -> list[str]:
    return [f.rule for f in check_source(source, **kw)]


def test_fixture_solutions_have_no_findings():
    for path in FIXTURE_TASKS.glob("*/solutions/*.py"):
        task_json = (path.parent.parent / "task.json").read_text()
        forbid = [f for f in ("torch.relu", "F.relu", "torch.softmax", "F.softmax") if f in task_json]
        assert check_source(path.read_text(), forbid=forbid) == [], path


def test_forbidden_op_is_found_through_import_aliases():
    src = "from torch.nn import functional as G\ndef f(x):\n    return G.softmax(x, -1)\n"
    (finding,) = check_source(src, forbid=["F.softmax"])
    assert finding.rule == "forbidden-op" and finding.line == 3


def test_forbidden_op_under_another_torch_path_is_found():
    src = "import torch\ndef f(x):\n    return torch.special.softmax(x, -1)\n"
    assert rules(src, forbid=["torch.softmax"]) == ["forbidden-op"]


def test_forbidden_op_through_getattr_with_a_constant_is_found():
    src = "import torch\nf = getattr(torch, 'softmax')\n"
    assert "forbidden-op" in rules(src, forbid=["torch.softmax"])


def test_matmul_operator_counts_as_torch_matmul_only_when_forbidden():
    src = "def f(a, b):\n    return a @ b\n"
    assert rules(src, forbid=["torch.matmul"]) == ["forbidden-op"]
    assert rules(src) == []


def test_patching_torch_through_an_alias_is_found():
    src = "import torch\nT = torch.Tensor\nT.add = lambda a, b: a\n"
    (finding,) = check_source(src)
    assert finding.rule == "monkeypatch" and finding.line == 3


def test_setattr_on_torch_is_a_patch():
    assert rules("import torch.nn.functional as F\nsetattr(F, 'gelu', abs)\n") == ["monkeypatch"]


def test_cudnn_benchmark_switch_is_allowed():
    assert rules("import torch\ntorch.backends.cudnn.benchmark = True\n") == []


def test_a_locally_defined_class_named_model_is_not_the_reference():
    src = "import torch.nn as nn\nclass Model(nn.Module):\n    pass\nclass ModelNew(Model):\n    pass\n"
    assert rules(src) == []


@pytest.mark.parametrize(
    ("src", "rule"),
    [
        ("import pathlib\nt = pathlib.Path('r.py').read_text()\n", "file-access"),
        ("from pathlib import Path\nf = Path('r.py').open()\n", "file-access"),
        ("import os\nos.listdir('..')\n", "file-access"),
        ("import numpy as np\nnp.load('out.npy')\n", "file-access"),
        ("import torch\ntorch.load('out.pt')\n", "file-access"),
        ("import inspect\n", "introspection"),
        ("import sys\nm = sys.modules\n", "introspection"),
        ("def f():\n    try:\n        1 / 0\n    except Exception as e:\n        return e.__traceback__.tb_frame\n", "introspection"),
        ("import subprocess\n", "process"),
        ("import os\nos.system('cat ../reference.py')\n", "process"),
        ("import os\nos.kill(os.getppid(), 9)\n", "process"),
        ("__import__('reference')\n", "dynamic-code"),
        ("import sage_engine.suite\n", "reference"),
        ("from .reference import Model\n", "reference"),
    ],
)
def test_escape_hatches_are_rejected(src: str, rule: str):
    assert rule in rules(src)


def test_imports_named_after_the_task_are_rejected():
    assert rules("import relu\n", reference_names=["relu"]) == ["reference"]


def test_cpp_file_access_inside_a_source_string_is_found_at_its_line():
    src = 'S = r"""\n#include <torch/extension.h>\nvoid f() {\n  FILE* f = fopen("x", "r");\n}\n"""\n'
    (finding,) = check_source(src)
    assert finding.rule == "file-access" and finding.line == 4


def test_syntax_errors_propagate_for_the_caller_to_report():
    with pytest.raises(SyntaxError):
        check_source("def f(:\n")


def test_own_extension_function_named_like_the_op_is_allowed():
    src = (
        "from torch.utils.cpp_extension import load_inline\n_ext = load_inline(name='e', cpp_sources='')\n"
        "def forward(x):\n    return _ext.softmax(x)\n"
    )
    assert rules(src, forbid=["torch.softmax"]) == []
    assert rules("def forward(x):\n    return x.softmax(-1)\n", forbid=["torch.softmax"]) == ["forbidden-op"]


@pytest.mark.parametrize(
    "src,rule",
    [
        ('import sys\nmods = getattr(sys, "modules")\n', "introspection"),
        ('def f(frame):\n    return getattr(frame, "f_back")\n', "introspection"),
        ("def forward(self, x):\n    x.__class__ = Sub\n    return x\n", "identity"),
        ('def forward(self, x):\n    setattr(x, "__class__", Sub)\n    return x\n', "identity"),
        ("def forward(self, x):\n    x.set_(x.clone())\n    return x\n", "identity"),
        ('def forward(self, x):\n    getattr(x, "set_")(x.clone())\n    return x\n', "identity"),
        ("def forward(self, x):\n    x.data = x.clone()\n    return x\n", "identity"),
    ],
)
def test_attribute_rules_hold_for_names_given_as_strings_and_for_input_identity(src: str, rule: str):
    assert rules(src) == [rule]


def test_a_parameters_data_set_in_the_constructor_is_not_an_input_repointed():
    src = "class ModelNew:\n    def __init__(self, w):\n        self.w.data = w\n    def forward(self, x):\n        return x\n"
    assert rules(src) == []
