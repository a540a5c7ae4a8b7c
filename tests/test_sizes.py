"""Size slots: found in module constants and case rows, halved, written back."""

from __future__ import annotations

from sage_engine import sizes

MODULE = """import torch

batch_size = 4096  # rows
N = 2048 * 2
height = width = 128
input_shape = (3, 240, 241)
kernel_size = 7
eps = 1e-5


def get_inputs():
    return [torch.rand(batch_size, N)]
"""


def test_module_constants_are_slots_and_hyperparameters_are_not_scalable():
    slots = {s.key: s for s in sizes.module_slots(MODULE)}
    assert slots[("const", "N")].value == 4096
    assert slots[("const", "input_shape", 2)].value == 241
    assert ("const", "eps") not in slots
    scalable = {s.key for s in slots.values() if sizes.scalable(s)}
    assert ("const", "kernel_size") not in scalable and ("const", "input_shape", 0) not in scalable
    assert ("const", "batch_size") in scalable and ("const", "height") in scalable


def test_rewriting_constants_keeps_every_other_character():
    out = sizes.apply_module(MODULE, {("const", "batch_size"): 16, ("const", "input_shape", 2): 121})
    assert "batch_size = 16  # rows\n" in out and "input_shape = (3, 240, 121)\n" in out
    assert out.replace("16  # rows", "4096  # rows").replace("121)", "241)") == MODULE
    assert sizes.set_constants(MODULE, {"eps": 0.001}).count("eps = 0.001\n") == 1


def test_constants_assigned_together_are_slots_rewritten_in_place():
    # As MultiKernelBench's attention tasks write their sizes.
    source = "import torch\n\nbatch_size, seq_len, d_model, num_heads = 2, 4096, 4096 // 2, 32  # sizes\n"
    slots = {s.key: s for s in sizes.module_slots(source)}
    assert slots[("const", "seq_len")].value == 4096 and slots[("const", "d_model")].value == 2048
    assert sizes.module_values(source) == {"batch_size": 2, "seq_len": 4096, "d_model": 2048, "num_heads": 32}
    out = sizes.apply_module(source, {("const", "seq_len"): 512, ("const", "d_model"): 256})
    assert out == "import torch\n\nbatch_size, seq_len, d_model, num_heads = 2, 512, 256, 32  # sizes\n"
    assert sizes.set_constants(out, {"seq_len": 4096}).count(", 4096, 256,") == 1


def test_halving_keeps_odd_sizes_odd_and_stops_at_the_floor():
    assert sizes.halve(4096) == 2048
    assert sizes.halve(241) == 121
    assert sizes.halve(4095) % 2 == 1
    assert sizes.halve(12) == sizes.MIN_SCALED
    assert sizes.halve(3, "batch_size") == 1


def test_equal_sizes_are_halved_together_first():
    slots = sizes.case_slots({"input_shape": "[48, 128, 256]", "normalized_shape": "[256]"})
    current = {s.key: s.value for s in slots}
    first = sizes.proposals(slots, current, set())[0]
    assert set(first) == {("case", "input_shape", "text", 2), ("case", "normalized_shape", "text", 0)}
    assert (("case", "input_shape", "text", 2),) in sizes.proposals(slots, current, {first})


def test_a_last_index_is_halved_with_its_size_and_stays_one_below_it():
    # MultiKernelBench's nll_loss: targets drawn from [0, C - 1] for C classes.
    for classes in (4096, 128000, 15259):
        case = {
            "case_inputs": [
                {"name": "input", "type": "tensor", "shape": [2, classes, 64]},
                {"name": "target", "type": "tensor", "shape": [2, 64], "range": [0, classes - 1]},
            ]
        }
        slots = sizes.case_slots(case)
        current = {s.key: s.value for s in slots}
        first = sizes.proposals(slots, current, set())[0]
        assert set(first) == {("case", "case_inputs", 0, "shape", 1), ("case", "case_inputs", 1, "range", 1)}
        out = sizes.halved(current, first)
        assert out[("case", "case_inputs", 1, "range", 1)] == out[("case", "case_inputs", 0, "shape", 1)] - 1
        assert out[("case", "case_inputs", 0, "shape", 1)] < classes
        # The size alone stays a fallback.
        assert (("case", "case_inputs", 0, "shape", 1),) in sizes.proposals(slots, current, {first})


def test_case_text_and_json_shapes_are_rewritten_in_their_own_form():
    case = {
        "input_shape": "[48, 128, 256]",
        "dtype": "float16",
        "flag": True,
        "case_inputs": [{"name": "x", "type": "tensor", "shape": [1, 128, 4096]}, {"name": "dim", "type": "attr", "value": -1}],
    }
    slots = sizes.case_slots(case)
    assert {s.name for s in slots} == {"input_shape", "x", "dim"}
    out = sizes.apply_case(case, {("case", "input_shape", "text", 2): 128, ("case", "case_inputs", 0, "shape", 2): 512})
    assert out["input_shape"] == "[48, 128, 128]"
    assert out["case_inputs"][0]["shape"] == [1, 128, 512]
    assert case["case_inputs"][0]["shape"] == [1, 128, 4096], "the original case is not modified"


def test_shape_volume_adds_up_every_shape_in_a_row():
    assert sizes.shape_volume({"a": "[4, 8]", "b": [[2, 3], [5]], "dtype": "float32", "n": 7}) == 32 + 6 + 5


def test_sizes_the_constructor_fixes_are_slots_and_are_rewritten_in_place():
    source = (
        "class Model:\n"
        "    def __init__(self, dim):\n"
        "        self.vocab_size = 65536  # table rows\n"
        "        self.hidden_size: int = 4096\n"
        "        self.dim = dim\n"
        "        self.steps = 64\n"
        "        self.steps = 128\n"
        "        if dim:\n"
        "            self.width = 512\n"
        "\n"
        "class Other:\n"
        "    def __init__(self):\n"
        "        self.rows = 1024\n"
    )
    # Only literal sizes assigned once, directly in Model's constructor
    # (an annotated one included); parameters, reassigned names and other classes are not.
    assert [(s.key, s.value) for s in sizes.init_slots(source)] == [(("attr", "vocab_size"), 65536), (("attr", "hidden_size"), 4096)]
    out = sizes.apply_init(source, {("attr", "vocab_size"): 16384, ("attr", "hidden_size"): 512, ("const", "n"): 8})
    assert out == source.replace("= 65536  #", "= 16384  #").replace("int = 4096", "int = 512")
