"""Shape variants derived from a task's size slots, without running it."""

from __future__ import annotations

from sage_engine.evaluation.host.variants import odd_size, small_size, variants_for
from sage_engine.evaluation.host.tasks import load_task

REFERENCE = (
    "import torch\nimport torch.nn as nn\n\nbatch_size = 16\ndim = 393216\ninput_shape = (3, 240, 240)\n"
    "kernel_size = 32\nblock_size = 64\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n"
    "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n"
)


def test_odd_sizes_are_odd_never_a_power_of_two_and_small_sizes_stay_tile_sized():
    assert [odd_size(v) for v in (393216, 4096, 1000, 34, 18, 16)] == [196609, 2049, 501, 17, 17, 16]
    assert odd_size(16, "batch_size") == 9 and odd_size(2, "batch_size") == 1
    assert [small_size(v, "dim") for v in (393216, 4096, 200, 16)] == [49152, 512, 24, 16]
    assert small_size(16, "batch_size") == 2


def test_a_module_constants_task_gets_odd_small_and_large_value_variants():
    variants = {v.name: v for v in variants_for(load_task(REFERENCE), 100.0)}
    odd = variants["odd"].rows[0]
    assert odd == {"batch_size": 9, "dim": 196609, "input_shape": [3, 121, 121]}
    assert variants["small"].rows[0] == {"batch_size": 2, "dim": 49152, "input_shape": [3, 24, 24]}
    assert variants["large values"].scale == 100.0 and variants["large values"].rows[-1] == {}
    # Kernel sizes and layout blocks say what is computed: never varied.
    assert all("kernel_size" not in r and "block_size" not in r for v in variants.values() for r in v.rows)


def test_alternatives_vary_each_group_of_equal_sizes_alone():
    rows = variants_for(load_task(REFERENCE.replace("batch_size = 16", "batch_size = 240")), 0.0)[0].rows
    assert rows[0]["batch_size"] == 121 and rows[0]["dim"] == 196609
    assert rows[1] == {"dim": 196609}  # the largest size alone first
    assert len(rows) == 3


def test_a_task_with_case_rows_varies_the_first_row():
    task = load_task(REFERENCE.replace("\nclass Model", "\nSAGE_TASK = {'cases': [{'batch_size': 32, 'dim': 1024}]}\n\nclass Model"))
    odd = variants_for(task, 0.0)[0].rows[0]
    assert odd["batch_size"] == 17 and odd["dim"] == 513 and odd["input_shape"] == [3, 121, 121]
