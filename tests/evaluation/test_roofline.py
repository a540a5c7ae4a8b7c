"""Judging a profile (pure): the bandwidth for a working set, the binding
limit, the physics check, the own-kernel mark, and what a reply may carry."""

from __future__ import annotations

import math

import pytest

from sage_engine.evaluation.child.ncu import METRICS, parse_csv
from sage_engine.evaluation.host import roofline
from sage_engine.evaluation.protocol import KernelTime, ProfileReport, SideKernels, Work
from sage_engine.evaluation.protocol.profile import MAX_KERNELS, MAX_NAME_CHARS, side_profile
from sage_engine.models import BandwidthPoint, MachineLimits

LIMITS = MachineLimits(
    backend="cpu",
    hardware="x86_64-avx2",
    threads=1,
    torch="2.13.0",
    measured_at=0.0,
    seconds=1.0,
    launch_us=2.0,
    # The smallest working set is slowed by per-call costs, as measured ones are; caches end past 8 MiB.
    bandwidth=[
        BandwidthPoint(bytes=1 << 15, copy_gbps=20.0, read_gbps=15.0),
        BandwidthPoint(bytes=1 << 23, copy_gbps=80.0, read_gbps=70.0),
        BandwidthPoint(bytes=1 << 25, copy_gbps=20.0, read_gbps=25.0),
    ],
    matmul_flops={"float32": 100e9, "bfloat16": 200e9},
)


def side(*names: str, launches: float | None = None, source: str = "cpu-ops") -> SideKernels:
    kernels = [KernelTime(n, 1.0, 10.0) for n in names]
    return SideKernels(
        source=source,
        calls=1,
        kernels=kernels,
        launches=len(names) if launches is None else launches,
        kernel_us=10.0 * len(names),
        wall_us=12.0 * len(names),
    )


def judged(ref_ms: float, cand_ms: float, nbytes: int = 16 << 20, flops: dict | None = None, **sides):
    report = ProfileReport(
        reference=sides.get("reference", side("aten::mul", "aten::add")),
        candidate=sides.get("candidate", side("aten::mul", "aten::add")),
        work=Work(bytes=nbytes, flops=flops or {}),
    )
    return roofline.judge(report, reference_ms=ref_ms, candidate_ms=cand_ms, limits=LIMITS, rules=roofline.Rules())


def test_the_bandwidth_for_a_working_set_never_falls_below_a_larger_ones():
    assert roofline.bandwidth_for(LIMITS, 1 << 10) == 80.0  # the small set's measured 20 is per-call cost
    assert roofline.bandwidth_for(LIMITS, 1 << 23) == pytest.approx(80.0)
    assert roofline.bandwidth_for(LIMITS, 1 << 30) == 25.0
    between = roofline.bandwidth_for(LIMITS, 1 << 24)  # halfway, geometrically
    assert between == pytest.approx(math.sqrt(80.0 * 25.0))


def test_a_call_moving_megabytes_is_memory_bound_at_its_share_of_bandwidth():
    p = judged(ref_ms=1.0, cand_ms=2.0)
    gbps = (16 << 20) / 2e-3 / 1e9
    assert p.candidate.achieved_gbps == pytest.approx(gbps)
    assert p.candidate.bandwidth_share == pytest.approx(gbps / p.peak_gbps)
    assert p.bound == p.candidate.bound == "memory" and p.candidate.compute_share is None
    assert p.summary.startswith(f"memory-bound at {p.candidate.bandwidth_share:.0%} of measured bandwidth")
    assert "the reference launches 2 torch ops a call, the candidate 2: nothing was fused" in p.summary


def test_matrix_work_at_most_of_the_peak_is_compute_bound_per_dtype():
    flops = {"bfloat16": 2 * 1024**3}  # 2.1 GFLOP: 10.7 ms at the 200 GFLOP/s bfloat16 peak
    p = judged(ref_ms=12.0, cand_ms=20.0, nbytes=3 * 1024 * 1024 * 2, flops=flops)
    assert p.candidate.compute_share == pytest.approx(2 * 1024**3 / 200e9 / 20e-3)
    assert p.bound == "compute" and p.peak_flops == pytest.approx(200e9)
    assert p.summary.startswith("compute-bound at 54% of the measured matmul peak")


def test_a_call_whose_work_needs_less_than_its_launches_cost_is_latency_bound():
    # 512 bytes need 6 ns at the limits; two launches cost 4 µs.
    p = judged(ref_ms=0.008, cand_ms=0.009, nbytes=512)
    assert p.reference.bound == p.candidate.bound == "latency"
    assert p.summary.startswith(
        "launch/latency-bound: at the measured limits its bytes and FLOPs need 6 ns, less "
        "than its 2 launches cost (4.0 µs); it takes 9.0 µs a call"
    )


def test_fewer_launches_read_as_fused_and_time_outside_torch_ops_as_own_code():
    cand = SideKernels(
        source="cpu-ops", calls=1, kernels=[KernelTime("aten::empty_like", 1, 1.0)], launches=1, kernel_us=1.0, wall_us=1000.0
    )
    p = judged(ref_ms=2.0, cand_ms=1.0, candidate=cand)
    assert "the candidate 1: fused (100% of its time is outside torch ops" in p.summary


def test_a_candidate_faster_than_the_bandwidth_allows_is_impossible_whatever_its_speedup():
    # 16 MiB in 0.1 ms is 168 GB/s against 52 measured here; the speedup is only 1.5x.
    p = judged(ref_ms=0.15 * 10, cand_ms=0.1)
    assert p.candidate.bandwidth_share > 1.1 and p.impossible.startswith("its time implies 167.8 GB/s for the 16.0 MiB")
    assert judged(ref_ms=1.0, cand_ms=0.6).impossible is None  # 1.1x the measured bandwidth is still possible


def test_a_candidate_faster_than_the_references_flops_allow_does_fewer_flops_which_is_no_impossibility():
    # 2 GFLOP in 5 ms is 400 GFLOP/s against 100: an algebraic shortcut, not a skipped input.
    p = judged(ref_ms=25.0, cand_ms=5.0, nbytes=1 << 20, flops={"float32": 2e9})
    assert p.impossible is None
    assert p.fewer_flops and "4.0x faster than the reference's 2 GFLOP need" in p.fewer_flops
    assert "algebraic shortcut" in p.fewer_flops and "fewer FLOPs than the reference" in p.summary
    # Its own work is its bytes: bound by memory (or launches), never "compute at 400%".
    assert p.candidate.bound in ("memory", "latency")


def test_skipping_inputs_and_doing_fewer_flops_are_told_apart():
    skipped = judged(ref_ms=30.0, cand_ms=0.05, nbytes=16 << 20, flops={"float32": 2e9})
    assert skipped.impossible and "cannot have read every input byte" in skipped.impossible


def test_when_the_reference_itself_exceeds_a_limit_the_count_is_off_and_nothing_is_flagged():
    # A reference that reads a slice of its input moves less than its tensors hold.
    p = judged(ref_ms=0.05, cand_ms=0.04)
    assert p.impossible is None and any("the reference itself exceeds the measured bandwidth" in n for n in p.notes)


def test_on_a_device_a_candidate_launching_only_the_references_kernels_has_none_of_its_own():
    ref = side("ampere_sgemm_128x64_nn", "elementwise_kernel", source="cuda-kernels")
    only_library = judged(1.0, 1.0, reference=ref, candidate=side("ampere_sgemm_128x64_nn", source="cuda-kernels"))
    own = judged(1.0, 1.0, reference=ref, candidate=side("fused_gelu_kernel", source="cuda-kernels"))
    assert only_library.own_kernels is False and "no kernel of its own" in only_library.summary
    assert own.own_kernels is True and "of its own" not in own.summary
    assert judged(1.0, 1.0).own_kernels is None  # torch ops on a CPU say nothing about kernels of one's own
    cut = side(*[f"k{i}" for i in range(MAX_KERNELS)], source="cuda-kernels")
    assert judged(1.0, 1.0, reference=cut, candidate=side("x", source="cuda-kernels")).own_kernels is None


def test_without_measured_limits_the_profile_says_so_and_binds_nothing():
    report = ProfileReport(
        reference=side("aten::mul"), candidate=side("aten::mul"), work=Work(bytes=1 << 20), errors={"candidate": "it failed"}
    )
    p = roofline.judge(report, reference_ms=1.0, candidate_ms=1.0, limits=None, rules=roofline.Rules(), limits_note="no GPU")
    assert p.bound is None and p.candidate.bandwidth_share is None and p.candidate.achieved_gbps > 0
    assert p.notes[:2] == ["candidate: it failed", "no measured limits: no GPU"]
    # 10 µs of kernels against a 1 ms median: said, whatever the limits.
    assert all("10.0 µs a call, 99% less than its timed median (1.00 ms)" in n for n in p.notes[2:]) and p.notes[2:]
    assert p.summary.startswith("no measured limits to compare with")


def test_a_candidates_profile_reply_is_bounded_before_it_is_believed():
    reply = {
        "source": "cuda-kernels" * 10,
        "calls": 3,
        "launches": float("nan"),
        "kernel_us": -5,
        "wall_us": "x",
        "kernels": [{"name": "k" * 10_000, "launches": float("inf"), "time_us": 1.5}] * 50,
        "extra": 1,
    }
    found = side_profile(reply)
    assert len(found.kernels) == MAX_KERNELS and len(found.kernels[0].name) == MAX_NAME_CHARS
    assert (found.launches, found.kernel_us, found.wall_us, found.kernels[0].launches) == (0.0, 0.0, 0.0, 0.0)
    assert len(found.source) == 40 and found.kernels[0].time_us == 1.5


def test_ncu_raw_csv_reads_as_one_row_per_kernel():
    header = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", *METRICS]
    units = ["", "", "", "", "", "", "", "nsecond", "%", "%", "%", "register/thread"]
    row = ["0", "4242", "python3", "gpu", "triton_gelu_kernel", "1", "7", "136,000", "91.2", "12.5", "88.0", "32"]
    text = (
        "==PROF== Connected to process 4242\n"
        + "\n".join(",".join(f'"{v}"' for v in r) for r in (header, units, row))
        + "\n==PROF== Disconnected\n"
    )
    (found,) = parse_csv(text)
    assert found["kernel"] == "triton_gelu_kernel" and found["gpu__time_duration.sum"] == 136000.0
    assert found["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == 91.2
    assert parse_csv("==ERROR== ERR_NVGPUCTRPERM - no permission to read the GPU's counters") == []


def timed_side(kernel_us: float, bare_us: float, overhead_us: float = 0.0) -> SideKernels:
    return SideKernels(
        source="cpu-ops",
        calls=5,
        kernels=[KernelTime("aten::clamp", 2.0, kernel_us)],
        launches=2.0,
        kernel_us=kernel_us,
        wall_us=bare_us + overhead_us,
        bare_us=bare_us,
        overhead_us=overhead_us,
    )


def test_kernel_times_within_a_tenth_of_the_timed_median_agree_without_a_note():
    report = ProfileReport(reference=timed_side(1950.0, 2000.0, 3.0), candidate=timed_side(2300.0, 2400.0, 4.0), work=Work(bytes=16 << 20))
    p = roofline.judge(report, reference_ms=2.0, candidate_ms=2.39, limits=LIMITS, rules=roofline.Rules())
    assert p.reference.agreement == pytest.approx(0.975) and p.candidate.agreement == pytest.approx(2300 / 2390)
    assert p.reference.agreement_note == p.candidate.agreement_note == ""
    assert p.candidate.overhead_us == 4.0 and p.candidate.bare_us == 2400.0
    assert not [n for n in p.notes if "timed median" in n]


def test_kernel_times_off_the_timed_median_say_by_how_much_and_why():
    # The leaky_relu: 6.84 ms of kernels against a 2.39 ms median, the
    # same calls 6.9 ms without the profiler: the machine, not the kernels.
    busy = ProfileReport(reference=timed_side(654.0, 700.0), candidate=timed_side(6844.0, 6900.0, 5.0), work=Work(bytes=16 << 20))
    p = roofline.judge(busy, reference_ms=0.678, candidate_ms=2.39, limits=LIMITS, rules=roofline.Rules())
    assert p.reference.agreement_note == ""
    note = p.candidate.agreement_note
    assert note.startswith("its kernel times add up to 6.84 ms a call, 186% more than its timed median (2.39 ms)")
    assert "took 6.90 ms at best in the profile phase, 289% of the timed median: the machine was busier" in note
    assert "the profiler's own 5.0 µs a call is taken out" in note
    assert f"candidate: {note}" in p.notes
    # Kernels that hold a fifth of the call: the rest is outside torch ops.
    python = ProfileReport(reference=timed_side(700.0, 700.0), candidate=timed_side(20.0, 100.0), work=Work(bytes=1 << 10))
    q = roofline.judge(python, reference_ms=0.7, candidate_ms=0.1, limits=LIMITS, rules=roofline.Rules())
    assert "80% of such a call is outside torch ops" in q.candidate.agreement_note
    assert q.candidate.agreement == pytest.approx(0.2)
    # Profiled calls slowed by more than the profiler's cost: the machine, while they ran.
    busier = ProfileReport(
        reference=timed_side(700.0, 700.0),
        candidate=SideKernels(
            source="cpu-ops",
            calls=5,
            kernels=[KernelTime("aten::clamp", 2.0, 16590.0)],
            launches=2.0,
            kernel_us=16590.0,
            wall_us=16700.0,
            bare_us=14200.0,
            overhead_us=6.0,
        ),
        work=Work(bytes=16 << 20),
    )
    b = roofline.judge(busier, reference_ms=0.7, candidate_ms=14.01, limits=LIMITS, rules=roofline.Rules())
    assert (
        "1.2x as long, more than the profiler's own cost explains: the machine was busier while they were "
        "profiled" in b.candidate.agreement_note
    )
    # A timed median slowed by other work, against the fastest of the profiled calls.
    paused = ProfileReport(reference=timed_side(700.0, 700.0), candidate=timed_side(1500.0, 1520.0), work=Work(bytes=16 << 20))
    r = roofline.judge(paused, reference_ms=0.7, candidate_ms=3.8, limits=LIMITS, rules=roofline.Rules())
    assert (
        "1.52 ms at best in the profile phase, 40% of the timed median: other work on the machine slowed the "
        "timed calls" in r.candidate.agreement_note
    )
    # Steps each within a tenth that add up to more: each is said, with its share.
    both = ProfileReport(reference=timed_side(1750.0, 1850.0, 2.0), candidate=timed_side(2300.0, 2400.0), work=Work(bytes=16 << 20))
    n = roofline.judge(both, reference_ms=2.02, candidate_ms=2.39, limits=LIMITS, rules=roofline.Rules())
    assert n.reference.agreement_note == (
        "its kernel times add up to 1.75 ms a call, 13% less than its timed median (2.02 ms): without the profiler "
        "the same calls took 1.85 ms at best in the profile phase, 92% of the timed median; 5% of it is outside torch "
        "ops (Python, or compiled code of its own the profiler cannot see); the profiler's own 2.0 µs a call is taken "
        "out"
    )
