"""Shape variants derived from a task's size slots, without running it, and
the verdicts they give: sizes too small to halve are varied too, and the
large values are the task's own inputs, so a kernel may rely on what they
promise."""

from __future__ import annotations

import re

from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host.variants import odd_size, small_size, variants_for
from sage_engine.evaluation.host.tasks import load_task
from tests.evaluation.support import as_own_candidate, fast_config

REFERENCE = (
    "import torch\nimport torch.nn as nn\n\nbatch_size = 16\ndim = 393216\ninput_shape = (3, 240, 240)\n"
    "kernel_size = 32\nblock_size = 64\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n"
    "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n"
)


def test_odd_sizes_are_odd_never_a_power_of_two_and_small_sizes_stay_tile_sized():
    assert [odd_size(v) for v in (393216, 4096, 1000, 34, 18)] == [196609, 2049, 501, 17, 17]
    # Too small to halve to 17: about doubled, past the next power of two.
    assert [odd_size(v) for v in (17, 16, 7, 3)] == [35, 33, 15, 7]
    assert odd_size(16, "batch_size") == 9 and odd_size(2, "batch_size") == 1
    assert [small_size(v, "dim") for v in (393216, 4096, 200, 16)] == [49152, 512, 24, 16]
    assert small_size(16, "batch_size") == 2


def test_a_module_constants_task_gets_odd_small_and_large_value_variants():
    variants = {v.name: v for v in variants_for(load_task(REFERENCE), 100.0)}
    odd = variants["odd"].rows[0]
    assert odd == {"batch_size": 9, "dim": 196609, "input_shape": [7, 121, 121]}
    assert variants["small"].rows[0] == {"batch_size": 2, "dim": 49152, "input_shape": [3, 24, 24]}
    assert variants["large values"].scale == 100.0 and variants["large values"].rows[-1] == {}
    # Kernel sizes and layout blocks say what is computed: never varied.
    assert all("kernel_size" not in r and "block_size" not in r for v in variants.values() for r in v.rows)


def test_alternatives_keep_small_sizes_then_vary_each_group_of_equal_sizes_alone():
    rows = variants_for(load_task(REFERENCE.replace("batch_size = 16", "batch_size = 240")), 0.0)[0].rows
    assert rows[0]["batch_size"] == 121 and rows[0]["dim"] == 196609 and rows[0]["input_shape"] == [7, 121, 121]
    assert rows[1] == {"batch_size": 121, "dim": 196609, "input_shape": [3, 121, 121]}  # a 3 the reference may fix kept
    assert rows[2] == {"dim": 196609}  # the largest size alone first
    assert len(rows) == 3


def test_a_task_with_case_rows_varies_the_first_row():
    task = load_task(REFERENCE.replace("\nclass Model", "\nSAGE_TASK = {'cases': [{'batch_size': 32, 'dim': 1024}]}\n\nclass Model"))
    odd = variants_for(task, 0.0)[0].rows[0]
    assert odd["batch_size"] == 17 and odd["dim"] == 513 and odd["input_shape"] == [7, 121, 121]


def test_small_sizes_vary_where_named_as_sizes_and_axes_counts_and_layout_never_do():
    reference = REFERENCE.replace(
        "block_size = 64\n",
        "block_size = 64\nout_channels = 7\nnum_classes = 10\ndim_axis = 2\nreduce_dim = 1\nk = 10\nstep = 10\nstride = 2\npool_size = 4\n",
    ).replace("dim = 393216", "dim = 8")
    odd = variants_for(load_task(reference), 0.0)[0].rows[0]
    assert odd["out_channels"] == 15 and odd["num_classes"] == 21 and odd["input_shape"] == [7, 121, 121]
    assert not {"dim", "dim_axis", "reduce_dim", "k", "step", "stride", "pool_size"} & set(odd), odd


# ------------------------------------------------------------ verdicts

# A 1x1 convolution to 7 channels.
CHANNEL_MIX = """
import torch
import torch.nn as nn

batch_size = 4
in_channels = 32
out_channels = 7
length = 1024


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.proj = nn.Conv1d(in_channels, out_channels, 1)

    def forward(self, x):
        return self.proj(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
"""

# One block of 8 output channels, masked on its tail: right for any count up to 8.
ONE_BLOCK_OF_CHANNELS = """
import torch
import torch.nn as nn

BLOCK = 8


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.proj = nn.Conv1d(in_channels, out_channels, 1)

    def forward(self, x):
        weight, bias = self.proj.weight[:, :, 0], self.proj.bias
        out = torch.zeros(x.shape[0], weight.shape[0], x.shape[2])
        n = min(BLOCK, weight.shape[0])
        out[:, :n] = torch.einsum("oc,bcl->bol", weight[:n], x) + bias[:n, None]
        return out
"""


def test_a_kernel_that_assumes_a_small_size_fits_one_block_is_incorrect_at_the_odd_variant(harness):
    result = harness.evaluate(load_task(CHANNEL_MIX), ONE_BLOCK_OF_CHANNELS)
    assert result.status == "incorrect", result.message
    assert result.message.startswith("correct at [4, 32, 1024], wrong at [3, 17, 513] (odd)"), result.message
    assert [(v.name, v.status) for v in result.variants] == [("odd", "failed")]
    assert result.variants[0].at == "[3, 17, 513]"


def test_a_small_size_the_reference_fixes_keeps_the_variant_at_its_other_sizes(harness):
    # Luma from RGB: the weights fix three channels, so the odd variant cannot grow them.
    reference = (
        "import torch\nimport torch.nn as nn\n\nbatch_size = 4\nchannels = 3\nheight = 64\nwidth = 48\n\n"
        "class Model(nn.Module):\n    def forward(self, image):\n"
        "        return torch.einsum('bchw,c->bhw', image, torch.tensor([0.299, 0.587, 0.114]))\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, channels, height, width)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    task = load_task(reference)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "correct", result.message
    by_name = {v.name: v for v in result.variants}
    assert by_name["odd"].status == "passed" and by_name["odd"].at == "[3, 3, 33, 25]"


# As triton-ascend's gather_sorted tutorial makes its inputs: row 0 of the
# table is all ones, the indices sorted, about a fifth of them 0.
SORTED_GATHER = """
import torch
import torch.nn as nn

rows = 64
width = 32
num_indices = 256


class Model(nn.Module):
    def forward(self, table, index):
        return table[index]


def get_inputs():
    table = torch.randn(rows, width)
    table[0] = 1.0
    index = torch.randint(1, rows, (num_indices,))
    index[torch.rand(num_indices) < 0.2] = 0
    return [table, index.sort().values]


def get_init_inputs():
    return []
"""

# Rows for index 0 written as the ones the task promises, not read.
TRUSTS_ROW_ZERO = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, table, index):
        out = torch.ones(index.shape[0], table.shape[1], dtype=table.dtype)
        read = index != 0
        out[read] = table[index[read]]
        return out
"""


def test_large_values_keep_what_the_tasks_inputs_promise(eval_cache):
    # Timing's churn swaps table elements between rows, which breaks row 0
    # as surely as scaling did: this test is about the variant, so none.
    with Harness(fast_config(eval_cache, churn_swaps=0)) as harness:
        result = harness.evaluate(load_task(SORTED_GATHER), TRUSTS_ROW_ZERO)
    assert result.status == "correct", result.message
    by_name = {v.name: v for v in result.variants}
    assert by_name["large values"].status == "passed", by_name
    assert re.fullmatch(r"\[16, 16\] x \[32\] with inputs x100", by_name["large values"].at), by_name["large values"].at


def test_large_values_still_catch_an_exp_that_overflows_on_the_tasks_own_inputs(harness):
    # A softmax over scaled draws still overflows where the row maximum is not subtracted.
    reference = (
        "import torch\nimport torch.nn as nn\n\nrows = 64\nwidth = 256\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n\n"
        "def get_inputs():\n    x = torch.randn(rows, width)\n    x[:, 0] = 0.0\n    return [x]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    candidate = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        e = torch.exp(x)\n        return e / e.sum(-1, keepdim=True)\n"
    )
    result = harness.evaluate(load_task(reference), candidate)
    assert result.status == "incorrect", result.message
    assert "(large values)" in result.message and "non-finite" in result.message


def test_timing_keeps_what_the_tasks_inputs_promise_too(eval_cache):
    # The same kernel under the default churn: timing's swaps leave row 0
    # of ones where the task put it, so the spot checks judge it on inputs
    # the task could have made.
    with Harness(fast_config(eval_cache)) as harness:
        result = harness.evaluate(load_task(SORTED_GATHER), TRUSTS_ROW_ZERO)
    assert result.status == "correct", result.message
    checks = result.compile_info.checks
    assert checks is not None and checks.spot_checks >= 1 and checks.spot_skipped == 0, checks
