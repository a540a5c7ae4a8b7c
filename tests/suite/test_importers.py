"""`sage suite import`: NPUKernelBench task directories and MultiKernelBench
files become SAGE task directories. The fixtures under import_fixtures/ mimic
both published layouts (README.md there says what is assumed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.tasks import load_task
from sage_engine.suite.importers import detect_layout, find_tasks, import_tasks

FIXTURES = Path(__file__).parent / "import_fixtures"
NKB_TASK = FIXTURES / "npukernelbench" / "tasks" / "level2" / "Norm" / "RmsNormMini"
MKB_FILE = FIXTURES / "multikernelbench" / "reference" / "npukernelbench_level1" / "1_gelu_mini.py"
KB_FILE = FIXTURES / "multikernelbench" / "reference" / "activation" / "relu_mini.py"


def run_reference_cases(task_dir: Path) -> list[list[torch.Tensor]]:
    """Execute the converted reference once per case, the way the sandbox does."""
    task = load_task(task_dir)
    outputs = []
    for i, case in enumerate(task.case_rows):
        spec = importlib.util.spec_from_file_location(f"imported_{task.id}_{i}", task_dir / "reference.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for key, value in case.items():
            setattr(module, key, getattr(torch, value) if value in ("float32", "float16") else value)
        model = module.Model(*module.get_init_inputs())
        out = model(*module.get_inputs())
        outputs.append(out if isinstance(out, list) else [out])
    return outputs


def test_layouts_are_recognised():
    assert detect_layout(NKB_TASK) == "npukernelbench"
    assert detect_layout(MKB_FILE) == "multikernelbench"
    assert detect_layout(KB_FILE) == "kernelbench"
    assert detect_layout(FIXTURES / "README.md") is None
    found = find_tasks(FIXTURES)
    assert sorted(kind for _, kind in found) == ["kernelbench", "multikernelbench", "npukernelbench"]


def test_npukernelbench_task_becomes_a_task_with_one_case_per_csv_row(tmp_path):
    (imported,) = import_tasks(NKB_TASK, tmp_path)
    assert imported.id == "rms_norm_mini" and imported.layout == "npukernelbench" and imported.cases == 3
    meta = json.loads((imported.path / "task.json").read_text())
    assert meta["level"] == 2 and meta["family"] == "norm"
    assert meta["cases"][1] == {"input_shape": "[4, 8, 32]", "normalized_shape": "[32]", "dtype": "float16",
                                "epsilon": 1e-5}
    description = (imported.path / "description.md").read_text()
    assert "Root-mean-square" in description and "custom_check_precision" in description
    reference = (imported.path / "reference.py").read_text()
    assert "torch_npu" not in reference and "kernel_gen_ops" not in reference and "ModelNew" not in reference
    outputs = run_reference_cases(imported.path)
    assert [tuple(o[0].shape) for o in outputs] == [(16, 64), (4, 8, 32), (3, 100)]
    assert outputs[1][0].dtype == torch.float16


def test_multikernelbench_json_lines_become_cases_run_by_the_original_builder(tmp_path):
    (imported,) = import_tasks(MKB_FILE, tmp_path)
    assert imported.id == "gelu_mini" and imported.cases == 3
    meta = json.loads((imported.path / "task.json").read_text())
    assert meta["level"] == 1 and meta["description"] == "Simple model that performs a GELU activation."
    outputs = run_reference_cases(imported.path)
    assert [tuple(o[0].shape) for o in outputs] == [(128,), (16, 32), (7, 15, 23)]
    assert outputs[1][0].dtype == torch.float16


def test_kernelbench_style_file_is_imported_as_is(tmp_path):
    (imported,) = import_tasks(KB_FILE, tmp_path)
    assert imported.layout == "kernelbench" and imported.cases == 1
    assert (imported.path / "reference.py").read_text() == KB_FILE.read_text()
    assert json.loads((imported.path / "task.json").read_text())["family"] == "activation"


def test_max_cases_keeps_the_first_rows(tmp_path):
    (imported,) = import_tasks(NKB_TASK, tmp_path, max_cases=1)
    assert imported.cases == 1


def test_existing_task_is_kept_unless_overwrite(tmp_path):
    import_tasks(MKB_FILE, tmp_path)
    with pytest.raises(Conflict, match="overwrite"):
        import_tasks(MKB_FILE, tmp_path)
    (again,) = import_tasks(MKB_FILE, tmp_path, overwrite=True)
    assert again.cases == 3


def test_task_directory_without_its_case_table_is_refused(tmp_path):
    broken = tmp_path / "src" / "Broken"
    (broken / "validation").mkdir(parents=True)
    (broken / "validation" / "module.py").write_text((NKB_TASK / "validation" / "module.py").read_text())
    (broken / "validation" / "prepare_inputs.py").write_text("def get_inputs(param, device=None):\n    return ()\n")
    with pytest.raises(InvalidInput, match="test_cases.csv is missing"):
        import_tasks(broken, tmp_path / "out")


def test_path_with_no_task_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(InvalidInput, match="no NPUKernelBench task directory"):
        import_tasks(tmp_path, tmp_path / "out")


@pytest.mark.slow
def test_imported_task_evaluates_in_the_harness(tmp_path):
    (imported,) = import_tasks(MKB_FILE, tmp_path / "tasks")
    candidate = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                 "    def forward(self, x, approximate='none'):\n"
                 "        if approximate == 'tanh':\n"
                 "            inner = 0.7978845608028654 * (x + 0.044715 * x.pow(3))\n"
                 "            return 0.5 * x * (1.0 + torch.tanh(inner))\n"
                 "        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))\n")
    config = Config(db_path=tmp_path / "m.db", cache_dir=tmp_path / "cache", correctness_trials=1,
                    timing_budget_s=0.1, timing_min_reps=3, timing_max_reps=10)
    with Harness(config) as harness:
        result = harness.evaluate(load_task(imported.path), candidate, backend="cpu")
    assert result.status == "correct", (result.message, result.stdout_tail[-2000:])
    assert len(result.cases) == 3
    assert sys.modules.get("torch_npu") is None
