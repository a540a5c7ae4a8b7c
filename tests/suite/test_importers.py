"""`sage suite import`: trees in the three benchmarks' layouts (written by
benchmark_trees.py) become SAGE task directories that load and run."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sage_engine.errors import Conflict, InvalidInput
from sage_engine.evaluation.host.tasks import load_task
from sage_engine.suite.importers import detect_layout, find_tasks, import_tasks
from sage_engine.suite.npukernelbench import column_values

import benchmark_trees

DTYPES = {"float32", "float16", "bfloat16", "int32", "int16", "int8", "int64", "bool"}


def run_reference_cases(task_dir: Path) -> list[list]:
    """Execute the converted reference once per case, the way the sandbox child does.

    A reference with import roots puts them on sys.path and imports the
    benchmark's helpers; both are undone so later imports in this process do
    not find those helpers installed."""
    task = load_task(task_dir)
    path = list(sys.path)
    try:
        return _run_cases(task, task_dir)
    finally:
        sys.path[:] = path
        for name, module in list(sys.modules.items()):
            where = getattr(module, "__file__", None) or ""
            if any(where.startswith(root) for root in task.import_roots):
                del sys.modules[name]


def _run_cases(task, task_dir: Path) -> list[list]:
    outputs = []
    for i, case in enumerate(task.case_rows):
        module = type(sys)(f"imported_{task.id}_{i}")
        exec(compile(task.reference_source, str(task_dir / "reference.py"), "exec"), module.__dict__)
        for key, value in case.items():
            module.__dict__[key] = getattr(torch, value) if isinstance(value, str) and value in DTYPES else value
        torch.manual_seed(task.seed)
        model = module.Model(*module.get_init_inputs())
        out = model(*module.get_inputs())
        outputs.append(out if isinstance(out, list) else [out])
    return outputs


@pytest.fixture
def trees(tmp_path):
    return {
        "npukernelbench": benchmark_trees.npukernelbench(tmp_path / "NPUKernelBench"),
        "multikernelbench": benchmark_trees.multikernelbench(tmp_path / "MultiKernelBench"),
        "kernelbench": benchmark_trees.kernelbench(tmp_path / "KernelBench"),
    }


def test_every_layout_is_recognised_in_its_tree(trees):
    nkb, mkb, kb = trees["npukernelbench"], trees["multikernelbench"], trees["kernelbench"]
    assert detect_layout(nkb / "tasks" / "level1" / "Math" / "ClipByValueMini") == "npukernelbench"
    assert detect_layout(mkb / "reference" / "npukernelbench_level1" / "1_gelu_mini.py") == "multikernelbench"
    assert detect_layout(kb / "KernelBench" / "level1" / "1_Square_matmul_mini.py") == "kernelbench"
    assert detect_layout(nkb / "framework" / "utils.py") is None
    assert [p.name for p, _ in find_tasks(nkb)] == [
        "ClipByValueMini",
        "HalfScaleMini",
        "BatchNormMini",
        "MatmulRowsMini",
        "StridedAssignMini",
        "DoubleNoiseMini",
    ]
    assert sorted(kind for _, kind in find_tasks(mkb)) == ["kernelbench", "multikernelbench", "multikernelbench"]


def test_a_checkouts_own_scripts_are_not_taken_for_tasks(trees):
    """KernelBench's scripts/ and src/ define small Models of their own; importing the checkout's root takes its levels only."""
    kb = trees["kernelbench"]
    levels = find_tasks(kb)
    for folder in ("scripts", "src"):
        tool = kb / folder / "baseline_time.py"
        tool.parent.mkdir(parents=True, exist_ok=True)
        tool.write_text("import torch.nn as nn\n\n\nclass Model(nn.Module):\n    pass\n\n\ndef get_inputs():\n    return []\n")
    assert find_tasks(kb) == levels and all("KernelBench" in p.parts for p, _ in levels)


def test_csv_columns_get_one_type_each_as_pandas_reads_them():
    assert column_values(["1", "2"]) == [1, 2]
    assert column_values(["1", "1.5"]) == [1.0, 1.5]
    assert column_values(["True", "false"]) == [True, False]
    assert column_values(["True", "maybe"]) == ["True", "maybe"]
    assert column_values(["[1, 2]", ""]) == ["[1, 2]", None]


def test_npukernelbench_task_runs_on_cpu_with_typed_parameters_and_integer_inputs(trees, tmp_path):
    imported = {t.id: t for t in import_tasks(trees["npukernelbench"] / "tasks", tmp_path / "out")}
    clip = imported["clip_by_value_mini"]
    assert clip.layout == "npukernelbench" and clip.cases == 3 and clip.benchmark == "NPUKernelBench"
    meta = json.loads((clip.path / "task.json").read_text())
    assert meta["level"] == 1 and meta["family"] == "math"
    assert meta["origin"] == {"benchmark": "NPUKernelBench", "path": "tasks/level1/Math/ClipByValueMini"}
    reference = (clip.path / "reference.py").read_text()
    assert "torch_npu" not in reference and "kernel_gen_ops" not in reference and "framework" not in reference
    outputs = run_reference_cases(clip.path)
    assert [o[0].dtype for o in outputs] == [torch.float32, torch.int32, torch.int16]
    assert int(outputs[1][0].min()) >= 1, "integer inputs are valid draws, clipped like the float ones"
    assert "custom_check_precision" in (clip.path / "description.md").read_text()

    norm = imported["batch_norm_mini"]
    cases = json.loads((norm.path / "task.json").read_text())["cases"]
    assert cases[1]["affine"] is False and cases[1]["training"] is False and cases[1]["epsilon"] == 1e-3
    first, second = run_reference_cases(norm.path)
    assert first[0].shape == (8, 4) and second[0].shape == (6, 3)


def test_a_helper_package_still_imported_travels_read_only_with_the_task(trees, tmp_path):
    (task,) = import_tasks(trees["npukernelbench"] / "tasks" / "level2" / "Activation" / "HalfScaleMini", tmp_path / "out")
    meta = json.loads((task.path / "task.json").read_text())
    assert meta["import_roots"] == ["lib"] and meta["origin"]["helpers"] == ["framework"]
    copied = task.path / "lib" / "framework" / "scales.py"
    assert copied.read_text() == (trees["npukernelbench"] / "framework" / "scales.py").read_text()
    assert not copied.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    loaded = load_task(task.path)
    assert loaded.import_roots == (str((task.path / "lib").resolve()),)
    assert f"SAGE_IMPORT_ROOTS = {list(loaded.import_roots)!r}" in loaded.reference_source
    outputs = run_reference_cases(task.path)
    assert outputs[0][0].shape == (33, 17)
    # Importing again over it works although the helper files are read-only.
    (again,) = import_tasks(trees["npukernelbench"] / "tasks" / "level2" / "Activation" / "HalfScaleMini", tmp_path / "out", overwrite=True)
    assert again.path == task.path


def test_multikernelbench_json_lines_become_cases_run_by_the_original_builder(trees, tmp_path):
    imported = {t.id: t for t in import_tasks(trees["multikernelbench"], tmp_path / "out")}
    gelu = imported["gelu_mini"]
    assert gelu.layout == "multikernelbench" and gelu.cases == 3 and gelu.benchmark == "MultiKernelBench"
    meta = json.loads((gelu.path / "task.json").read_text())
    assert meta["description"] == "Simple model that performs a GELU activation."
    assert meta["origin"]["path"] == "reference/npukernelbench_level1/1_gelu_mini.py"
    outputs = run_reference_cases(gelu.path)
    assert [tuple(o[0].shape) for o in outputs] == [(128,), (16, 32), (7, 15, 23)]
    assert outputs[1][0].dtype == torch.float16
    assert imported["rotary_mini"].requires == ["npu: imports torch_npu (line 11)", "npu: calls torch_npu.npu_rotary_mul (line 12)"]
    assert imported["relu_mini"].layout == "kernelbench" and imported["relu_mini"].requires == []


def test_kernelbench_file_is_kept_as_written_unless_it_must_change(trees, tmp_path):
    level1 = trees["kernelbench"] / "KernelBench" / "level1" / "1_Square_matmul_mini.py"
    (matmul,) = import_tasks(level1, tmp_path / "out")
    assert (matmul.path / "reference.py").read_text() == level1.read_text()
    assert matmul.id == "square_matmul_mini" and matmul.benchmark == "KernelBench"
    level2 = trees["kernelbench"] / "KernelBench" / "level2" / "5_Gemm_Dropout_mini.py"
    (dropout,) = import_tasks(level2, tmp_path / "out")
    reference = (dropout.path / "reference.py").read_text()
    assert "@_sage_seeded_forward" in reference and "batch_size = 8\n" in reference
    assert "generator seeded" in (dropout.path / "description.md").read_text()
    first, second = run_reference_cases(dropout.path)[0], run_reference_cases(dropout.path)[0]
    assert torch.equal(first[0], second[0])


def test_origin_names_the_commit_of_a_git_checkout(trees, tmp_path):
    root = trees["kernelbench"]
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=30)
    subprocess.run([*git, "add", "."], check=True, timeout=30)
    subprocess.run([*git, "commit", "-q", "-m", "tasks"], check=True, timeout=30)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    imported = import_tasks(root / "KernelBench" / "level1", tmp_path / "out")
    assert json.loads((imported[0].path / "task.json").read_text())["origin"]["commit"] == head


def test_ids_that_clash_within_one_import_get_their_level(tmp_path):
    for level in ("level1", "level2"):
        benchmark_trees._write(
            tmp_path / "src" / "KernelBench" / level / "3_Relu.py",
            "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n"
            "    def forward(self, x):\n        return x.relu()\n"
            "def get_inputs():\n    return [torch.randn(4)]\n"
            "def get_init_inputs():\n    return []\n",
        )
    ids = [t.id for t in import_tasks(tmp_path / "src", tmp_path / "out")]
    assert ids == ["relu", "relu_l2"]


def test_max_cases_keeps_the_first_rows(trees, tmp_path):
    imported = import_tasks(trees["npukernelbench"] / "tasks" / "level1", tmp_path / "out", max_cases=1)
    assert [t.cases for t in imported] == [1]


def test_existing_task_is_kept_unless_overwrite(trees, tmp_path):
    path = trees["multikernelbench"] / "reference" / "npukernelbench_level1" / "1_gelu_mini.py"
    import_tasks(path, tmp_path / "out")
    with pytest.raises(Conflict, match="overwrite"):
        import_tasks(path, tmp_path / "out")
    (again,) = import_tasks(path, tmp_path / "out", overwrite=True)
    assert again.cases == 3


def test_task_directory_without_its_case_table_is_refused(trees, tmp_path):
    clip = trees["npukernelbench"] / "tasks" / "level1" / "Math" / "ClipByValueMini"
    (clip / "validation" / "test_cases.csv").unlink()
    with pytest.raises(InvalidInput, match="test_cases.csv is missing"):
        import_tasks(clip, tmp_path / "out")


def test_path_with_no_task_or_a_bad_scale_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(InvalidInput, match="no NPUKernelBench task directory"):
        import_tasks(tmp_path, tmp_path / "out")
    with pytest.raises(InvalidInput, match="scale must be one of cpu"):
        import_tasks(tmp_path, tmp_path / "out", scale="gpu")
    with pytest.raises(InvalidInput, match="pass a backend"):
        import_tasks(tmp_path, tmp_path / "out", scale="cpu")


def test_import_roots_must_be_folders_inside_the_task_with_the_roots_line(tmp_path):
    task = tmp_path / "t"
    (task / "lib").mkdir(parents=True)
    (task / "reference.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n"
    )
    meta = {"name": "t", "operator": "t", "family": "t", "level": 1}
    (task / "task.json").write_text(json.dumps({**meta, "import_roots": ["../elsewhere"]}))
    with pytest.raises(InvalidInput, match="inside"):
        load_task(task)
    (task / "task.json").write_text(json.dumps({**meta, "import_roots": ["lib"]}))
    with pytest.raises(InvalidInput, match="SAGE_IMPORT_ROOTS = \\[\\]"):
        load_task(task)
