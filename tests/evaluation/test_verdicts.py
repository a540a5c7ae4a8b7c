"""A verdict no kernel can game: correctness at sizes the kernel was not
written for and relative to the output's scale, seeds no candidate can
know, timing on values that never repeat, and no credit for a speedup the
machine cannot deliver."""

from __future__ import annotations

import re

import pytest

from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host.tasks import load_task
from tests.evaluation.support import CHEATS, as_own_candidate, fast_config, fixture_task, held_to_cpu


def test_zeros_where_every_output_is_under_atol_are_incorrect(harness):
    result = harness.evaluate(fixture_task("long_softmax"), (CHEATS / "returns_zeros_under_atol.py").read_text())
    assert result.status == "incorrect", result.message
    assert "relative to the output's scale" in result.message


def test_a_correct_long_row_softmax_passes_and_says_its_outputs_were_compared_to_their_scale(harness):
    task = fixture_task("long_softmax")
    candidate = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        e = torch.exp(x - x.amax(dim=1, keepdim=True))\n        return e / e.sum(dim=1, keepdim=True)\n"
    )
    result = harness.evaluate(task, candidate)
    assert result.status == "correct", result.message
    notes = [d.message for d in result.diagnostics if d.category == "tolerance"]
    assert notes and "relative to their own scale" in notes[0]


def test_an_answer_remembered_by_a_sample_of_its_inputs_is_rejected_as_stored(eval_cache):
    cheat = (CHEATS / "remembers_answers_by_value.py").read_text()
    # Its timed calls return stored answers too: a spot check usually sees that first.
    with Harness(fast_config(eval_cache, spot_checks=False)) as stale_checks_only:
        result = stale_checks_only.evaluate(fixture_task("matmul"), cheat)
    assert result.status == "rejected", result.message
    assert "returned a stored answer for new input values" in result.message
    assert result.speedup is None


def test_a_kernel_that_assumes_its_row_length_is_incorrect_and_the_message_names_the_sizes(harness):
    result = harness.evaluate(fixture_task("long_softmax"), (CHEATS / "assumes_its_row_length.py").read_text())
    assert result.status == "incorrect", result.message
    assert re.search(r"correct at \[2, 393216\], wrong at \[\d+, \d+\] \((odd|small)\)", result.message), result.message
    assert "assumes its sizes" in result.message


def test_a_kernel_that_fails_to_run_at_other_sizes_is_incorrect_naming_them(harness):
    candidate = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        return torch.softmax(x.view(2, 393216), dim=1)\n"
    )
    result = harness.evaluate(fixture_task("long_softmax"), candidate)
    assert result.status == "incorrect", result.message
    assert result.message.startswith("correct at [2, 393216], fails at") and "RuntimeError" in result.message


def test_variants_the_reference_cannot_run_are_dropped_and_listed(harness):
    reference = (
        "import torch\nimport torch.nn as nn\n\nrows = 48\nwidth = 1024\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        assert x.shape[1] % 64 == 0, 'width must be a multiple of 64'\n"
        "        return x.view(x.shape[0], -1, 64).sum(-1)\n\n"
        "def get_inputs():\n    return [torch.randn(rows, width)]\n\ndef get_init_inputs():\n    return []\n"
    )
    task = load_task(reference)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "correct", result.message
    by_name = {v.name: v for v in result.variants}
    assert by_name["odd"].status == "passed" and by_name["odd"].at == "[25, 1024]"  # an odd width fails it
    assert by_name["small"].status == "passed" and by_name["small"].at == "[16, 128]"
    odd_row = [c for c in result.cases if c.variant == "odd"][0].case
    assert odd_row == {"rows": 25}, "the alternative that keeps the width a multiple of 64 was chosen"

    always_fails = reference.replace("assert x.shape[1] % 64 == 0", "assert x.shape == (48, 1024)")
    task = load_task(always_fails)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "correct", result.message
    by_name = {v.name: v for v in result.variants}
    assert by_name["odd"].status == by_name["small"].status == "dropped"
    assert "AssertionError" in by_name["odd"].reason and "AssertionError" in by_name["small"].reason
    # Large values fall back to the declared sizes, which the reference runs.
    assert by_name["large values"].status == "passed" and by_name["large values"].at == "[48, 1024] with inputs x100"


def test_a_softmax_that_does_not_subtract_the_row_maximum_fails_at_large_values(harness):
    # Right at ordinary magnitudes; exp overflows once the inputs are x100,
    # which no tolerance forgives.
    candidate = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        e = torch.exp(x)\n        return e / e.sum(-1, keepdim=True)\n"
    )
    result = harness.evaluate(fixture_task("row_softmax"), candidate)
    assert result.status == "incorrect", result.message
    assert "(large values)" in result.message and "non-finite" in result.message


def test_a_kernel_right_only_for_the_documented_seeds_fails(harness):
    # It checks its inputs against those the task's seed (1024 + trial) makes:
    # with a seed drawn per evaluation, no trial's inputs are among them.
    candidate = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
        "        for seed in range(1024, 1034):\n            torch.random.default_generator.manual_seed(seed)\n"
        "            if torch.equal(torch.randn(a.shape), a):\n                return torch.matmul(a, b)\n"
        "        return torch.zeros(a.shape[0], b.shape[1])\n"
    )
    result = harness.evaluate(fixture_task("matmul"), candidate)
    assert result.status == "incorrect", result.message


def test_every_evaluation_draws_its_seed_and_a_given_seed_is_used(harness, eval_cache):
    task = fixture_task("relu")
    source = task.examples["cpu_clamp"].read_text()
    seeds = {harness.evaluate(task, source).seed for _ in range(2)}
    assert len(seeds) == 2 and None not in seeds
    with Harness(fast_config(eval_cache, eval_seed=12345)) as fixed:
        assert fixed.evaluate(task, source).seed == 12345


def test_a_speedup_past_the_threshold_is_trusted_where_the_profile_shows_every_byte_moved(harness, eval_cache):
    # A diagonal matmul done as a row scale: an algebraic shortcut, fewer FLOPs, a real speedup
    # (its size: a 384 x 384 one read 11x on a CPU with AMX, under the threshold).
    reference = (
        "import torch\nimport torch.nn as nn\n\nN = 1024\nM = 256\n\nclass Model(nn.Module):\n"
        "    def forward(self, a, b):\n        return torch.diag(a) @ b\n\n"
        "def get_inputs():\n    return [torch.randn(N), torch.randn(N, M)]\n\ndef get_init_inputs():\n    return []\n"
    )
    candidate = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a.unsqueeze(1) * b\n"
    task = load_task(reference)
    result = harness.evaluate(task, candidate)
    assert result.status == "correct" and result.speedup > harness.config.suspicious_speedup, (result.speedup, result.message)
    assert result.speedup_trusted is True and result.speedup_note is None
    assert result.profile.impossible is None
    # Said as fewer FLOPs, unless this machine's calibration (a busy moment) reads lower than the reference now runs.
    assert result.profile.fewer_flops or any("reference itself exceeds the measured matmul peak" in n for n in result.profile.notes)
    with Harness(fast_config(eval_cache, profile=False)) as unprofiled:
        result = unprofiled.evaluate(task, candidate)
    assert result.status == "correct" and result.speedup_trusted is False
    assert "no measurement of this machine's bandwidth" in result.speedup_note


def test_a_full_hash_memo_gets_no_speedup_from_values_that_repeat(harness):
    reference = (
        "import torch\nimport torch.nn as nn\n\nN = 512\n\nclass Model(nn.Module):\n"
        "    def forward(self, a, b):\n        return torch.matmul(a, b)\n\n"
        "def get_inputs():\n    return [torch.randn(N, N), torch.randn(N, N)]\n\ndef get_init_inputs():\n    return []\n"
    )
    candidate = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.memo = {}\n\n    def forward(self, a, b):\n"
        "        key = hash(a.numpy().tobytes()) ^ hash(b.numpy().tobytes())\n"
        "        if key not in self.memo:\n            self.memo[key] = torch.matmul(a, b)\n"
        "        return self.memo[key].clone()\n"
    )
    result = harness.evaluate(load_task(reference), candidate)
    assert result.status == "correct", result.message
    # Every timed call sees values no call saw before: the memo never answers.
    assert result.speedup < 2.0, result.speedup
    assert result.compile_info.checks.churn_us > 0


def test_a_call_drawn_from_inside_each_timed_batch_of_a_correct_kernel_is_judged_and_passes(harness):
    # Microseconds a call: many calls a sample, however loaded the machine.
    reference = (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x, y):\n"
        "        return x * y + 1.0\n\ndef get_inputs():\n    return [torch.randn(1000), torch.randn(1000)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    task = load_task(reference)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "correct", result.message
    checks = result.compile_info.checks
    assert min(checks.inner_calls.values()) > 1, checks  # batches of several calls, one drawn from each
    assert checks.spot_checks >= 1 and checks.spot_skipped == 0, checks


def test_a_reference_that_fails_is_the_tasks_error_not_the_candidates(harness):
    # CPU torch has no bfloat16 avg_pool3d: this reference cannot run here at all.
    reference = (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.nn.functional.avg_pool3d(x, 2)\n\n"
        "def get_inputs():\n    return [torch.randn(1, 2, 8, 8, 8, dtype=torch.bfloat16)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    task = load_task(reference)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "task_error", result.message
    assert "the task is at fault, not the candidate" in result.message


@pytest.mark.slow
def test_a_correct_kernel_that_runs_long_in_the_interpreter_is_correct_not_a_timeout(eval_cache):
    # Each call runs 2000 interpreted programs: correctness fits the limit,
    # a timing phase at the usual repetitions would not.
    reference = (
        "import torch\nimport torch.nn as nn\n\nn = 64000\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x * 2.0\n\n"
        "def get_inputs():\n    return [torch.randn(n)]\n\ndef get_init_inputs():\n    return []\n"
    )
    candidate = (
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    mask = offs < n\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n"
        "        double[(triton.cdiv(x.numel(), 32),)](x, y, x.numel(), BLOCK=32)\n        return y\n"
    )
    config = fast_config(
        eval_cache,
        eval_timeout_s=40.0,
        timing_min_reps=10,
        timing_warmup=3,
        correctness_trials=1,
        shape_variants=False,
        unrepresentative_timing_s=4.0,
    )
    with Harness(config) as h:
        result = h.evaluate(load_task(reference), candidate, backend="triton")
    assert result.status == "correct", result.message
    assert any(d.category == "timing" and d.message.startswith(("timing skipped", "timing incomplete")) for d in result.diagnostics), (
        result.diagnostics
    )


def test_a_candidate_that_halves_the_time_its_process_reports_is_caught_on_any_load(harness):
    # It reaches the timer's clock in its own process (the closure cell the
    # timer holds it in, found through the garbage collector, past the static
    # checks' names) and makes every timed interval read half as long as it was.
    # Where a loaded machine preempts it for over half a batch its halved
    # claims pass its CPU (the misreport check's gap); its timer's speedup still
    # doubles the CPU's, preempted or not, and is credited near the CPU's.
    candidate = (
        "import sys\nimport time\nimport torch\nimport torch.nn as nn\n\n"
        "real = time.perf_counter\n"
        "collector = sys.__dict__['mod' + 'ules']['g' + 'c']\n"
        "for f in getattr(collector, 'get_' + 'objects')():\n"
        "    code = getattr(f, '__code__', None)\n"
        "    if code is not None and 'clock' in code.co_freevars and f.__closure__:\n"
        "        f.__closure__[code.co_freevars.index('clock')].cell_contents = lambda: real() * 0.5\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return torch.matmul(a, b)\n"
    )
    for task in ("matmul", "matmul_1024"):
        result = harness.evaluate(fixture_task(task), candidate)
        if held_to_cpu(result):  # credited no more than 1.15x the CPU's speedup
            continue
        assert result.status == "rejected", (task, result.message, result.compile_info.checks)
        assert "misreported how long its calls took" in result.message, result.message


def test_a_timer_that_shows_most_of_each_call_is_credited_near_the_cpus_speedup(harness):
    # A clock showing 70% of every call (the timer's closure cell, written):
    # on the 256 matmul it passes the misreport gap, and
    # read 1.41-1.47x; credited no more than 1.15x what the CPU times say.
    candidate = (
        "import sys\nimport time\nimport torch\nimport torch.nn as nn\n\n"
        "real = time.perf_counter\nstate = {'hidden': 0.0}\n"
        "collector = sys.__dict__['mod' + 'ules']['g' + 'c']\n"
        "for f in getattr(collector, 'get_' + 'objects')():\n"
        "    code = getattr(f, '__code__', None)\n"
        "    if code is not None and 'clock' in code.co_freevars and f.__closure__:\n"
        "        f.__closure__[code.co_freevars.index('clock')].cell_contents = lambda: real() - state['hidden']\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        start = real()\n"
        "        out = torch.matmul(a, b)\n        state['hidden'] += (real() - start) * 0.3\n        return out\n"
    )
    result = harness.evaluate(fixture_task("matmul"), candidate)
    if result.status == "rejected":
        assert "misreported how long its calls took" in result.message
        return
    held = result.compile_info.checks.cpu_bound
    assert result.status == "correct" and held is not None, (result.status, result.message)
    assert result.speedup is not None and result.speedup <= 1.15 * held.by_cpu * 1.0001, (result.speedup, held)


def test_a_numerics_switch_the_candidate_flipped_is_reset_before_its_timed_calls_and_reported(harness):
    """It lowers float32 matmul precision at import and, once timed (after
    its first calls), answers wrongly wherever the switch is still flipped:
    a spot check would see that, unless the switch is back at the default."""
    candidate = (
        "import torch\nimport torch.nn as nn\n\n"
        'torch.set_float32_matmul_precision("medium")\n\n'
        "class ModelNew(nn.Module):\n"
        "    calls = 0\n\n"
        "    def forward(self, a, b):\n"
        "        ModelNew.calls += 1\n"
        '        if ModelNew.calls > 20 and torch.get_float32_matmul_precision() != "highest":\n'
        "            return torch.zeros(a.shape[0], b.shape[1])\n"
        # In float64: right whatever the switch does to float32 (bfloat16 on a CPU with AMX).
        "        return torch.matmul(a.double(), b.double()).float()\n"
    )
    result = harness.evaluate(fixture_task("matmul"), candidate)
    assert result.status == "correct", result.message
    assert result.compile_info.checks.numerics_reset == ["float32_matmul_precision"]
