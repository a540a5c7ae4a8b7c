"""Judging a profile: pure functions of what the children measured, the
medians timing measured (never re-timed) and this host's calibrated limits.

- achieved GB/s = the call's bytes (inputs plus outputs, a lower bound) over
  the side's median; its share of the bandwidth measured for a working set
  of that size (the calibration's envelope: a smaller working set is never
  slower, interpolated geometrically between the sizes measured);
- achieved FLOP/s = the call's FLOPs over the median; the compute share is
  the time those FLOPs need at the measured matmul peak of their dtype over
  the median;
- the binding limit: latency when the call's bytes and FLOPs need less time
  at the measured limits than its launches cost (launches x the measured
  cost of one smallest op): no resource can be the limit of a call that
  small; otherwise memory or compute, whichever share is larger;
- physics, two different findings:
  - a candidate whose median implies more than `bandwidth_slack` times the
    bandwidth for the bytes its output depends on (inputs whose change
    changes the output, and the outputs) is impossible: it did not read its
    inputs (or write its outputs) once. Its speedup earns no credit. Unless
    the reference's own median does too: then the count, not the
    candidate, is off (the task moves less than its tensors hold);
  - a candidate whose median is below what the reference's FLOPs need at
    `flops_slack` times the matmul peak does fewer FLOPs than the
    reference. That is an algebraic shortcut (a diagonal matmul done as a
    row scale), not a cheat: it read every byte, and its outputs were
    checked on inputs it never saw before. Said, and credited.
- kernel times against the timed median (the child took the profiler's
  own cost per recorded op out of them, `child/profiling.py`): off by more
  than `AGREEMENT` (10%), the profile says by how much and why: a machine
  busier (or quieter) in the profile phase than while timed (the same calls
  clocked without the profiler say so), time outside the kernels (Python,
  code the profiler cannot see), or both.
"""

from __future__ import annotations

from dataclasses import dataclass

from sage_engine.evaluation.protocol import ProfileReport, SideKernels
from sage_engine.evaluation.protocol.profile import MAX_KERNELS
from sage_engine.models import MachineLimits, Profile, SideProfile
from sage_engine.models.profile import Bound

DEVICE_SOURCES = ("cuda-kernels", "npu-ops")  # kernel names the device ran, not torch ops on the host
# On the CPU a candidate's own C++ runs outside any torch op: said when the
# ops the profiler saw hold less than this share of the candidate's time.
OWN_CODE_SHARE = 0.5
# Kernel times per call within this share of the timed median agree with it.
AGREEMENT = 0.10


@dataclass(frozen=True)
class Rules:
    bandwidth_slack: float = 1.1
    flops_slack: float = 1.1


def bandwidth_for(limits: MachineLimits, nbytes: float) -> float | None:
    """GB/s measured for a working set of `nbytes` (`MachineLimits.bandwidth_at`)."""
    return limits.bandwidth_at(nbytes)


def peak_seconds(limits: MachineLimits, flops: dict[str, float]) -> tuple[float, list[str]] | None:
    """Seconds the FLOPs need at the measured matmul peak of their dtypes, and
    the dtypes with no measured peak (counted at float32's)."""
    fallback = limits.matmul_flops.get("float32")
    seconds, unmeasured = 0.0, []
    for dtype, count in flops.items():
        peak = limits.matmul_flops.get(dtype)
        if peak is None:
            unmeasured.append(dtype)
            peak = fallback
        if not peak:
            return None
        seconds += count / peak
    return (seconds, unmeasured) if seconds > 0 else None


def bound(side: SideProfile, ideal_s: float | None, launch_s: float | None, *, compute: bool = True) -> Bound | None:
    """Latency when the work needs less time at the limits than the side's
    launches cost; else the resource whose share is larger (memory alone for
    a side that does fewer FLOPs than counted: `compute=False`)."""
    if ideal_s is None:
        return None
    if launch_s is not None and ideal_s < max(1.0, side.launches) * launch_s:
        return "latency"
    compute_share = (side.compute_share or 0.0) if compute else 0.0
    return "memory" if (side.bandwidth_share or 0.0) >= compute_share else "compute"


def judge(
    report: ProfileReport, *, reference_ms: float, candidate_ms: float, limits: MachineLimits | None, rules: Rules, limits_note: str = ""
) -> Profile:
    """The profile a result carries."""
    work = report.work
    nbytes = work.bytes if work is not None and work.bytes > 0 else None
    flops = {k: v for k, v in (work.flops if work is not None else {}).items() if v > 0}
    total_flops = sum(flops.values()) or None
    notes = [f"{role}: {why}" for role, why in report.errors.items()]
    if work is not None and work.note:
        notes.append(work.note)
    peak_gbps = bandwidth_for(limits, nbytes) if limits is not None and nbytes else None
    at_peak = peak_seconds(limits, flops) if limits is not None and flops else None
    if at_peak is not None and at_peak[1]:
        notes.append(f"no measured matmul peak for {', '.join(at_peak[1])}: float32's used")
    if limits is None:
        notes.append(f"no measured limits: {limits_note or 'calibration unavailable'}")
    # What the call's work needs at the machine's limits, whoever does it.
    ideal = [t for t in (nbytes / (peak_gbps * 1e9) if nbytes and peak_gbps else None, at_peak[0] if at_peak else None) if t is not None]
    ideal_s = max(ideal) if ideal else (0.0 if limits is not None else None)
    launch_s = limits.launch_us / 1e6 if limits is not None else None
    sides = {}
    for role, median_ms in (("reference", reference_ms), ("candidate", candidate_ms)):
        seconds = median_ms / 1000.0
        side = side_model(getattr(report, role), nbytes, total_flops, seconds)
        if peak_gbps and side.achieved_gbps is not None:
            side.bandwidth_share = side.achieved_gbps / peak_gbps
        if at_peak is not None and seconds > 0:
            side.compute_share = at_peak[0] / seconds
        side.bound = bound(side, ideal_s, launch_s)
        sides[role] = side
        if side.note:
            notes.append(f"{role}: {side.note}")
        side.agreement, side.agreement_note = agreement(side, median_ms * 1000.0, source_of(report, role))
        if side.agreement_note:
            notes.append(f"{role}: {side.agreement_note}")
    ref, cand = sides["reference"], sides["candidate"]
    source = next((s.source for s in (report.reference, report.candidate) if s is not None), "none")
    profile = Profile(
        source=source,
        bytes=nbytes,
        flops=total_flops,
        reference=ref,
        candidate=cand,
        peak_gbps=peak_gbps,
        peak_flops=total_flops / at_peak[0] if at_peak and total_flops else None,
        bound=cand.bound,
        notes=notes,
    )
    profile.impossible = impossible(profile, ref, cand, rules)
    profile.fewer_flops = fewer_flops(profile, ref, cand, rules)
    if profile.fewer_flops:
        # Its own work is its bytes: the reference's FLOPs say nothing of its bound.
        ideal_s = nbytes / (peak_gbps * 1e9) if nbytes and peak_gbps else 0.0
        cand.bound = profile.bound = bound(cand, ideal_s, launch_s, compute=False)
    profile.own_kernels = own_kernels(report)
    profile.summary = summary(profile, ref, cand, candidate_ms, ideal_s, launch_s)
    return profile


def side_model(found: SideKernels | None, nbytes: int | None, flops: float | None, seconds: float) -> SideProfile:
    side = SideProfile()
    if found is not None:
        side = SideProfile(
            kernels=list(found.kernels),
            launches=found.launches,
            kernel_us=found.kernel_us,
            wall_us=found.wall_us,
            bare_us=found.bare_us or None,
            overhead_us=found.overhead_us or None,
            note=found.note,
        )
    if seconds > 0:
        side.achieved_gbps = nbytes / seconds / 1e9 if nbytes else None
        side.achieved_flops = flops / seconds if flops else None
    return side


def source_of(report: ProfileReport, role: str) -> str:
    found = getattr(report, role)
    return found.source if found is not None else "none"


def agreement(side: SideProfile, timed_us: float, source: str) -> tuple[float | None, str]:
    """Kernel time per call over the timed median, and, when they differ by
    more than `AGREEMENT`, a sentence that says by how much and why: the
    measured steps from the timed median to the kernels, each one's cause
    named where it alone is off by more than `AGREEMENT`."""
    if timed_us <= 0 or (side.kernel_us <= 0 and not side.kernels):
        return None, ""
    ratio = side.kernel_us / timed_us
    if abs(ratio - 1.0) <= AGREEMENT:
        return ratio, ""
    more = "more" if ratio > 1 else "less"
    head = (
        f"its kernel times add up to {human_time(side.kernel_us / 1e3)} a call, {abs(ratio - 1):.0%} {more} than "
        f"its timed median ({human_time(timed_us / 1e3)})"
    )
    why = []
    bare = side.bare_us
    if bare:
        step = (
            f"without the profiler the same calls took {human_time(bare / 1e3)} at best in the profile phase, "
            f"{bare / timed_us:.0%} of the timed median"
        )
        if bare > (1.0 + AGREEMENT) * timed_us:
            step += ": the machine was busier then, or its caches held other data (the timed median is what counts)"
        elif bare < (1.0 - AGREEMENT) * timed_us:
            step += (
                ": other work on the machine slowed the timed calls (a median of many samples holds such "
                "pauses, the fastest of a few calls need not)"
            )
        why.append(step)
        profiled = side.wall_us - (side.overhead_us or 0.0)
        if profiled > (1.0 + AGREEMENT) * bare:
            why.append(
                f"under the profiler they took {human_time(side.wall_us / 1e3)} at best, {profiled / bare:.1f}x "
                "as long, more than the profiler's own cost explains: the machine was busier while they were "
                "profiled"
            )
    reference_us = bare or side.wall_us
    if reference_us:
        outside = (
            "outside torch ops (Python, or compiled code of its own the profiler cannot see)"
            if source == "cpu-ops"
            else "between kernels (launch gaps, host code, synchronisation)"
        )
        share = 1.0 - side.kernel_us / reference_us
        if share > AGREEMENT:
            why.append(f"{share:.0%} of such a call is {outside}")
        elif share > 0.01:
            why.append(f"{share:.0%} of it is {outside}")
    if side.overhead_us:
        why.append(f"the profiler's own {human_time(side.overhead_us / 1e3)} a call is taken out")
    return ratio, f"{head}: {'; '.join(why)}"


def impossible(profile: Profile, ref: SideProfile, cand: SideProfile, rules: Rules) -> str | None:
    """Why the candidate's median is faster than reading its inputs allows here, or None."""
    if cand.bandwidth_share is None or cand.bandwidth_share <= rules.bandwidth_slack:
        return None
    if ref.bandwidth_share is not None and ref.bandwidth_share > rules.bandwidth_slack:
        profile.notes.append(
            "the reference itself exceeds the measured bandwidth: this task moves fewer bytes "
            "than its tensors hold, so bandwidth proves nothing here"
        )
        return None
    return (
        f"its time implies {cand.achieved_gbps:.1f} GB/s for the {human_bytes(profile.bytes)} every call "
        f"must move, {cand.bandwidth_share:.1f}x the {profile.peak_gbps:.1f} GB/s measured on this machine: "
        "it cannot have read every input byte its output depends on and written every output byte once"
    )


def fewer_flops(profile: Profile, ref: SideProfile, cand: SideProfile, rules: Rules) -> str | None:
    """Why the candidate does less arithmetic than the reference, or None."""
    # A compute share is measured only where the call's FLOPs and the matmul peak were.
    if cand.compute_share is None or cand.compute_share <= rules.flops_slack or profile.flops is None or profile.peak_flops is None:
        return None
    if ref.compute_share is not None and ref.compute_share > rules.flops_slack:
        profile.notes.append("the reference itself exceeds the measured matmul peak: its FLOPs are over-counted")
        return None
    return (
        f"its time is {cand.compute_share:.1f}x faster than the reference's {profile.flops / 1e9:.3g} GFLOP need "
        f"at the measured matmul peak ({profile.peak_flops / 1e9:.1f} GFLOP/s): it does less arithmetic than "
        "the reference (an algebraic shortcut)"
    )


def own_kernels(report: ProfileReport) -> bool | None:
    """On a device: False when the candidate launched no kernel the reference
    does not (library kernels only), None where that cannot be told."""
    ref, cand = report.reference, report.candidate
    if ref is None or cand is None or ref.source not in DEVICE_SOURCES or cand.source != ref.source:
        return None
    names = {k.name for k in cand.kernels}
    if not names:
        return False
    if len(ref.kernels) >= MAX_KERNELS:
        return None  # the reference's list is cut: a name missing from it may still be one of its kernels
    return not names <= {k.name for k in ref.kernels}


def summary(
    profile: Profile, ref: SideProfile, cand: SideProfile, candidate_ms: float, ideal_s: float | None, launch_s: float | None
) -> str:
    if cand.bound == "memory":
        head = (
            f"memory-bound at {cand.bandwidth_share:.0%} of measured bandwidth ({cand.achieved_gbps:.1f} of "
            f"{profile.peak_gbps:.1f} GB/s for {human_bytes(profile.bytes)} a call)"
        )
    elif cand.bound == "compute" and cand.achieved_flops is not None and profile.peak_flops is not None:
        head = (
            f"compute-bound at {cand.compute_share:.0%} of the measured matmul peak "
            f"({cand.achieved_flops / 1e9:.1f} of {profile.peak_flops / 1e9:.1f} GFLOP/s)"
        )
    elif cand.bound == "latency" and launch_s is not None:
        launches = max(1.0, cand.launches)
        head = (
            f"launch/latency-bound: at the measured limits its bytes and FLOPs need "
            f"{human_time((ideal_s or 0.0) * 1e3)}, less than its {count(launches)} "
            f"launch{'' if count(launches) == '1' else 'es'} cost ({human_time(launches * launch_s * 1e3)}); it "
            f"takes {human_time(candidate_ms)} a call: fewer launches or more work per call is what helps"
        )
    else:
        head = "no measured limits to compare with"
    parts = [head]
    if profile.impossible:
        parts = [f"impossible: {profile.impossible}"]
    elif profile.fewer_flops:
        parts.append(f"fewer FLOPs than the reference: {profile.fewer_flops}")
    counts = kernel_counts(profile, ref, cand)
    if counts:
        parts.append(counts)
    return "; ".join(parts)


def kernel_counts(profile: Profile, ref: SideProfile, cand: SideProfile) -> str:
    if not (ref.kernels or ref.launches) or not (cand.kernels or cand.launches or cand.wall_us):
        return ""
    unit = "kernel" if profile.source in DEVICE_SOURCES else "torch op"
    r, c = count(ref.launches), count(cand.launches)
    text = f"the reference launches {r} {unit}{'' if r == '1' else 's'} a call, the candidate {c}"
    if cand.launches < ref.launches:
        text += ": fused"
    elif cand.launches > ref.launches:
        text += ": more than the reference" + (", each one more pass over memory" if cand.bound == "memory" else "")
    elif ref.launches > 1:
        text += ": nothing was fused"
    call_us = cand.bare_us or cand.wall_us  # its clock without the profiler, where measured
    if profile.source == "cpu-ops" and call_us > 0 and cand.kernel_us < OWN_CODE_SHARE * call_us:
        text += (
            f" ({1 - cand.kernel_us / call_us:.0%} of its time is outside torch ops: Python, or compiled "
            "code of its own the profiler cannot see)"
        )
    if profile.own_kernels is False:
        text += "; every kernel it launched is one the reference launches too (no kernel of its own)"
    return text


def count(launches: float) -> str:
    return f"{launches:.0f}" if abs(launches - round(launches)) < 0.05 else f"{launches:.1f}"


def human_bytes(n: float | None) -> str:
    if not n:
        return "0 B"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def human_time(ms: float) -> str:
    if ms < 1e-3:
        return f"{ms * 1e6:.0f} ns"
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.2f} ms"
