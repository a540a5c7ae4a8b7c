from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sage_engine.errors import InvalidInput, NotFound
from sage_engine.evaluation.host.tasks import list_suite, load_task, task_summary

from tests.evaluation.support import FIXTURE_TASKS


def test_task_directory_loads_metadata_cases_and_examples():
    task = load_task(str(FIXTURE_TASKS / "row_softmax"))
    assert (task.id, task.operator, task.family, task.level, task.seed) == ("row_softmax", "softmax", "softmax", 1, 7)
    assert task.cases[0] == {"batch_size": 8, "dim": 1024, "dtype": "float16"}
    assert "F.softmax" in task.forbid
    assert "cpu_stable" in task.examples and task.examples["cpu_stable"].is_file()
    assert "class Model" in task.reference_source and task.reference_path.name == "reference.py"


def test_bundled_id_is_found_in_the_suite_dir():
    task = load_task("matmul", suite_dir=FIXTURE_TASKS)
    assert task.id == "matmul" and task.tolerance == {"float32": {"atol": 1e-3, "rtol": 1e-3}}


def test_unknown_id_lists_close_ids():
    with pytest.raises(NotFound, match="row_softmax"):
        load_task("row_softmx", suite_dir=FIXTURE_TASKS)


def test_single_file_task_reads_sage_task_dict(tmp_path: Path):
    source = (FIXTURE_TASKS / "relu" / "reference.py").read_text()
    source += '\nSAGE_TASK = {"name": "My ReLU", "operator": "relu", "cases": [{"dim": 64}], "forbid": ["torch.relu"]}\n'
    path = tmp_path / "my_relu.py"
    path.write_text(source)
    task = load_task(str(path))
    assert (task.id, task.name, task.operator, task.family) == ("my_relu", "My ReLU", "relu", "relu")
    assert task.cases == ({"dim": 64},) and task.forbid == ("torch.relu",)


def test_inline_reference_source_becomes_a_task():
    source = (FIXTURE_TASKS / "relu" / "reference.py").read_text()
    task = load_task(source)
    assert task.id.startswith("inline-") and task.reference_path is None
    assert task.case_rows == ({},)


def test_inline_source_without_get_inputs_is_rejected():
    with pytest.raises(InvalidInput, match="get_inputs"):
        load_task("import torch\nclass Model:\n    pass\n")


def _copy_task(tmp_path: Path, name: str = "relu") -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURE_TASKS / name, dst)
    return dst


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"levle": 1}, "unknown key.*levle"),
        ({"level": 7}, "'level' must be 1, 2 or 3"),
        ({"cases": [{"dimm": 3}]}, "'cases'\\[0\\] sets 'dimm'"),
        ({"tolerance": {"float32": {"atol": -1}}}, "'tolerance'\\['float32'\\]\\['atol'\\]"),
        ({"forbid": "torch.relu"}, "'forbid' must be a list"),
    ],
)
def test_malformed_task_json_names_the_key(tmp_path: Path, change: dict, message: str):
    task_dir = _copy_task(tmp_path)
    meta = json.loads((task_dir / "task.json").read_text())
    meta.update(change)
    (task_dir / "task.json").write_text(json.dumps(meta))
    with pytest.raises(InvalidInput, match=message):
        load_task(str(task_dir))


def test_task_json_missing_a_required_key_says_which(tmp_path: Path):
    task_dir = _copy_task(tmp_path)
    meta = json.loads((task_dir / "task.json").read_text())
    del meta["operator"]
    (task_dir / "task.json").write_text(json.dumps(meta))
    with pytest.raises(InvalidInput, match="operator"):
        load_task(str(task_dir))


def test_list_suite_filters_and_handles_a_missing_dir(tmp_path: Path):
    assert [t.id for t in list_suite(FIXTURE_TASKS)] == ["long_softmax", "matmul", "matmul_1024", "matmul_512", "relu", "row_softmax"]
    assert [t.id for t in list_suite(FIXTURE_TASKS, family="softmax")] == ["long_softmax", "row_softmax"]
    assert list_suite(tmp_path / "nowhere") == []


def test_task_summary_counts_cases_and_examples():
    summary = task_summary(load_task(str(FIXTURE_TASKS / "relu")))
    assert summary.cases == 2 and summary.examples == ["cpu_clamp", "cpu_cpp", "triton_relu"]


def test_loading_a_task_never_runs_the_reference(tmp_path: Path):
    marker = tmp_path / "ran"
    source = (FIXTURE_TASKS / "relu" / "reference.py").read_text()
    source = f"open({str(marker)!r}, 'w').close()\n" + source
    load_task(source)
    assert not marker.exists()
