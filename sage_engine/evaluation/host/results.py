"""Building `EvalResult` values from what the sandbox reported.

The child's final report decides the status when it arrived; otherwise the
supervisor's observations do (timeout, too many processes, a signal, an exit
without a report). A candidate can never turn its own exit code into a pass.

A speedup is credited only where it is believable (`speedup_trusted`): not
where the candidate's time is faster than reading its inputs allows here,
not on a task whose output is the same for every input (a constant passes
it), and past `suspicious_speedup` only where the profile confirmed the
candidate moved every byte (then a large speedup is an algebraic shortcut,
checked on inputs it had never seen).
"""

from __future__ import annotations

import re
import signal
from typing import Any

from sage_engine.evaluation.common import timing
from sage_engine.evaluation.host import calibration, roofline
from sage_engine.evaluation.protocol import CaseResult, Judgement, Outcome, ProfileReport, Report
from sage_engine.models import AutotuneChecked, CompileInfo, Diagnostic, EvalResult, MachineLimits, Profile, VariantResult

STDOUT_TAIL_CHARS = 4000
# faulthandler's frame lines: File "/tmp/sage-eval-x/candidate.py", line 12 in forward
_FAULT_FRAME = re.compile(r'File "[^"]*candidate\.py", line (\d+) in (\S+)')


def from_outcome(
    outcome: Outcome,
    *,
    base: dict[str, Any],
    timeout_s: float,
    max_tasks: int,
    timing_representative: bool,
    suspicious_speedup: float,
    notes: tuple[Diagnostic, ...] = (),
    last_progress: str = "",
    limits: MachineLimits | None = None,
    limits_note: str = "",
    rules: roofline.Rules | None = None,
) -> EvalResult:
    """The EvalResult for what the supervisor saw, built once. `notes` are
    diagnostics every result of the evaluation carries. Lines on the result
    channel that did not carry the evaluation's token (a candidate writing
    to a pipe it found) never count as results; they are reported."""
    extra = list(notes)
    if outcome.forged_lines:
        extra.append(
            Diagnostic(
                severity="warning",
                category="cheat",
                message=f"{outcome.forged_lines} line(s) on the harness's result channel were not written by the harness; ignored",
            )
        )
    if outcome.retried_after:
        extra.append(
            Diagnostic(
                severity="info",
                category="host",
                message=f"a fault of this host ended the first try, which was discarded: {outcome.retried_after}; "
                "this result is from a fresh worker",
            )
        )
    cases = list(outcome.cases)
    if outcome.report is not None and outcome.killed != "processes":
        fields = _report_fields(
            outcome.report, base=base, timing_representative=timing_representative, suspicious_speedup=suspicious_speedup
        )
        if rules is not None and outcome.report.profile is not None and fields.get("candidate_timing") is not None:
            _judge_profile(fields, outcome.report.profile, limits, limits_note, rules)
        fields["speedup_trusted"], fields["speedup_note"] = speedup_trust(
            fields.get("speedup"),
            fields.get("profile"),
            fields.get("degenerate"),
            suspicious_speedup,
            fresh_confirmed=fresh_ratio(outcome.report) is not None,
        )
        fields["diagnostics"] += extra
        errors_abs = [c.max_abs_error for c in cases if c.max_abs_error is not None]
        errors_rel = [c.max_rel_error for c in cases if c.max_rel_error is not None]
        return EvalResult(
            **fields,
            cases=cases,
            stdout_tail=_tail(outcome),
            max_abs_error=max(errors_abs) if errors_abs else None,
            max_rel_error=max(errors_rel) if errors_rel else None,
        )
    status, category, message, tail = _ended(
        outcome, timeout_s=timeout_s, max_tasks=max_tasks, cases=cases, stage=f" while {last_progress}" if last_progress else ""
    )
    line, func = _fault_line(outcome.output_tail)
    where = f" (candidate.py line {line}, in {func})" if line else ""
    diag = Diagnostic(category=category, message=message + where, line=line)
    return EvalResult(
        **base,
        status=status,
        message=message,
        cases=cases,
        diagnostics=[diag, *extra],
        stdout_tail=tail,
        timing_representative=timing_representative,
    )


def _ended(outcome: Outcome, *, timeout_s: float, max_tasks: int, cases: list[CaseResult], stage: str) -> tuple[str, str, str, str]:
    """(status, category, message, output tail) of an evaluation that ended without a decision."""
    tail = _tail(outcome)
    status, category = "crashed", "crash"
    if outcome.killed == "timeout":
        status, category = "timeout", "timeout"
        message = f"the evaluation exceeded the {timeout_s:g} s wall-clock limit{stage}"
        if cases and all(c.ok for c in cases):
            message += f"; {len(cases)} correctness trial(s) had passed"
    elif outcome.killed == "processes":
        category = "processes"
        message = f"the candidate started more than {max_tasks} processes/threads (fork bomb?); everything it started was killed"
    elif outcome.killed in ("host", "scratch"):
        # Not the candidate's doing: it cannot reach a confined worker, one that never started ran
        # nothing, and the scratch space's free bytes were measured here (host/pool.py).
        status, category = "host_error", "host"
        then = (
            "it was retried once on a fresh worker. Check the host's evaluation environment (`sage backends "
            "list`, the server's log) and evaluate again"
            if outcome.killed == "host"
            else "then evaluate again"
        )
        message = f"a fault of this host, not of the kernel{stage}: {outcome.output_tail or 'no detail'}; {then}"
        tail = ""
    elif outcome.killed == "worker":
        message = (
            f"the evaluation worker was lost{stage}: {outcome.output_tail or 'no detail'}; without "
            "bubblewrap the candidate can kill its worker, so this counts as its crash"
        )
        tail = ""
    elif outcome.killed == "sandbox":
        # bubblewrap refused to start the sandbox: not the candidate's doing, and never run unconfined instead.
        status, category = "sandbox_error", "sandbox"
        message = f"the sandbox could not be started: {outcome.output_tail}"
        tail = ""
    elif outcome.exit_code is not None and outcome.exit_code < 0:
        sig = -outcome.exit_code
        name = _signal_name(sig)
        if sig == signal.SIGXCPU:
            status, category = "timeout", "timeout"
            message = f"the candidate exceeded the CPU-time limit ({name}){stage}"
        elif sig == signal.SIGKILL:
            message = f"the child was killed ({name}){stage}; most often the kernel's out-of-memory killer"
        else:
            message = f"the child died of {name}{stage}" + (
                " (invalid memory access: out-of-bounds pointer or index)" if sig in (signal.SIGSEGV, signal.SIGBUS) else ""
            )
    elif outcome.exit_code is not None:
        message = (
            f"the child exited with code {outcome.exit_code} before reporting a result{stage} (os._exit or a native exit in the candidate?)"
        )
    else:
        message = f"the child ended without reporting a result{stage}"
    return status, category, message, tail


def _report_fields(report: Report, *, base: dict[str, Any], timing_representative: bool, suspicious_speedup: float) -> dict[str, Any]:
    """The result's fields from the worker's decision (cases, tail and errors are the caller's)."""
    status = report.status
    diags = [Diagnostic(**d) for d in report.diagnostics]
    fields: dict[str, Any] = {}
    timing_report = report.timing
    if timing_report is not None:
        ref, cand = timing_report.reference, timing_report.candidate
        fields.update(reference_timing=ref, candidate_timing=cand)
        if timing_representative:
            speedup = timing.speedup(ref.median_ms, cand.median_ms)
            fresh = fresh_ratio(report)
            if speedup is not None and fresh is not None and fresh > 1.0:
                # The credited speedup is the one on inputs the candidate had never seen, where lower.
                speedup /= fresh
            held = credited_share(report, "cpu_bound")
            if speedup is not None and held is not None and held > 1.0:
                # No more than a little past what the processes' CPU times say (one CPU).
                speedup /= held
            fields["speedup"] = speedup
            if speedup is not None and speedup > suspicious_speedup:
                fields["suspicious_speedup"] = True
                diags.append(
                    Diagnostic(
                        severity="warning",
                        category="timing",
                        message=f"speedup {speedup:.1f}x exceeds {suspicious_speedup:g}x: check that the candidate "
                        "does all the work the reference does",
                    )
                )
    judgement = report.judgement or Judgement()
    diags += [Diagnostic(severity="info", category="tolerance", message=note) for note in judgement.notes]
    if judgement.constant:
        diags.append(
            Diagnostic(
                severity="warning",
                category="degenerate",
                message=(
                    f"this task cannot tell a constant from a kernel: {judgement.constant}; a correct result here says "
                    "little, and no speedup on it is credited"
                ),
            )
        )
    versions = dict(base.get("versions", {}))
    versions.update(report.versions)
    # The device the reference process ran on names the hardware (a GPU's or NPU's own name).
    hardware = report.device_name or base["hardware"]
    return {
        **base,
        "versions": versions,
        "hardware": hardware,
        "status": status,
        "correct": status == "correct",
        "message": report.message,
        "mismatch": report.mismatch,
        "diagnostics": diags,
        "timing_representative": timing_representative,
        "variants": [VariantResult(name=v.name, status=v.status, at=v.at, reason=v.reason) for v in judgement.variants],
        "degenerate": judgement.constant or None,
        "phases": {k: round(float(v), 6) for k, v in report.phases.items()},
        "compile_info": compile_info(report),
        **fields,
    }


def compile_info(report: Report) -> CompileInfo:
    """The worker's part of a result: the case timed and the timer, the
    profiler's device time where it ran, the checks; only what it reported."""
    given: dict[str, Any] = {}
    timing_report = report.timing
    if timing_report is not None:
        given.update(timed_case=timing_report.case, timer=timing_report.timer)
        if timing_report.device_time_us is not None:
            given["device_time_us"] = timing_report.device_time_us
    if report.checks:
        given["checks"] = report.checks
    return CompileInfo.model_validate(given)


def autotune_checked(reported: dict[str, Any]) -> dict[str, AutotuneChecked]:
    """The interpreter hook's account of the configs checked per kernel (`HookReport.autotune`)."""
    return {kernel: AutotuneChecked.model_validate(entry) for kernel, entry in reported.items()}


def _judge_profile(
    fields: dict[str, Any], measured: ProfileReport, limits: MachineLimits | None, limits_note: str, rules: roofline.Rules
) -> None:
    """The profile judged against the medians timing measured, into `fields`;
    a physically impossible time is flagged whatever the speedup."""
    profile: Profile = roofline.judge(
        measured,
        reference_ms=fields["reference_timing"].median_ms,
        candidate_ms=fields["candidate_timing"].median_ms,
        limits=limits,
        rules=rules,
        limits_note=limits_note,
    )
    if limits is not None:
        profile.calibration = calibration.describe(limits)
        profile.limits = limits.model_copy(update={"path": None, "cached": False})  # what its chart draws, kept
    fields["profile"] = profile
    diags = fields["diagnostics"]
    if profile.impossible:
        fields["suspicious_speedup"] = True
        diags.append(Diagnostic(severity="warning", category="timing", message=f"physically impossible time: {profile.impossible}"))
    elif profile.fewer_flops:
        diags.append(Diagnostic(severity="info", category="profile", message=f"fewer FLOPs: {profile.fewer_flops}"))
    if profile.own_kernels is False:
        diags.append(
            Diagnostic(
                severity="info",
                category="profile",
                message="the candidate launched no kernel of its own: every kernel it ran is one "
                "the reference launches too (library kernels)",
            )
        )


def fresh_ratio(report: Report) -> float | None:
    """What the speedup is divided by: the candidate's time on inputs it had
    never seen over its timed time, relative to the reference's, where past
    noise (`worker/remeasure.py`); None where it was not re-measured."""
    return credited_share(report, "fresh_inputs")


def credited_share(report: Report, check: str) -> float | None:
    """What a check of the worker's says the speedup is divided by (its
    `credited`): None where that check did not run."""
    found = report.checks.get(check) if isinstance(report.checks, dict) else None
    value = found.get("credited") if isinstance(found, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def speedup_trust(
    speedup: float | None, profile: Profile | None, degenerate: str | None, suspicious_speedup: float, *, fresh_confirmed: bool = False
) -> tuple[bool | None, str | None]:
    """(trusted, why not) for a speedup; (None, None) where there is none.
    Past `suspicious_speedup` only a re-measurement on inputs the candidate
    had never seen (`fresh_confirmed`) and a measured bandwidth together
    vouch for it: a time at the bandwidth floor is a target a paced memo can hit."""
    if speedup is None:
        return None, None
    if degenerate:
        return False, (
            f"unverified: this task's output is the same for every input ({degenerate}), so a "
            "constant passes it and its speedup cannot be credited"
        )
    if profile is not None and profile.impossible:
        return False, f"unverified: the candidate skipped reading inputs ({profile.impossible})"
    if speedup > suspicious_speedup:
        if not fresh_confirmed:
            return False, (
                f"unverified: {speedup:.1f}x is past {suspicious_speedup:g}x and it was not re-measured on inputs "
                "the candidate had never seen"
            )
        confirmed = profile is not None and profile.peak_gbps is not None and profile.bytes
        if not confirmed:
            return False, (
                f"unverified: {speedup:.1f}x is past {suspicious_speedup:g}x and no measurement of this "
                "machine's bandwidth confirmed that the candidate read its inputs"
            )
    return True, None


def _tail(outcome: Outcome) -> str:
    text = outcome.output_tail.split("bytes dropped ...]\n", 1)[-1]
    last = text[-STDOUT_TAIL_CHARS:]
    dropped = outcome.output_bytes - len(last.encode("utf-8", errors="replace"))
    return f"[... {dropped} earlier bytes dropped ...]\n{last}" if dropped > 0 else last


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _fault_line(output: str) -> tuple[int | None, str | None]:
    """The innermost candidate frame of the last faulthandler dump."""
    block = output[output.rfind("Fatal Python error") :] if "Fatal Python error" in output else output
    stack_at = block.rfind("Stack (most recent call first)")
    if stack_at < 0:
        stack_at = block.rfind("Current thread")
    m = _FAULT_FRAME.search(block, max(stack_at, 0))
    return (int(m.group(1)), m.group(2)) if m else (None, None)
