"""Turn Ascend compiler output into categories an agent can learn from.

Pure functions over the text the compilers print, so every mapping can be
tested on recorded output without the ascend-compile environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# Categories double as memory tags: a lesson about a UB overflow on a 910B3
# is tagged `ub_overflow` and `Ascend910B3`.
CATEGORIES = ("ub_overflow", "cc_overflow", "grid_too_large", "unsupported_op", "lowering_failed", "other")

# bishengir-compile prints `loc("file":line:col): error: message`.
_LOC_ERROR = re.compile(r'loc\("(?P<path>[^"]*)":(?P<line>\d+):(?P<col>\d+)\):\s*error:\s*(?P<msg>.+)')
_BITS = re.compile(r"requires (?P<need>\d+) bits while (?P<have>\d+) bits")
# Wrapper lines that accompany every failure, real or not.
_NOISE = ("External hivmc run fails", "Failed to run BiShengHIR pipeline", "Failed to run BiShengIR pipeline")
# hivmc is CANN's back end; reaching it means memory planning and every
# check before it passed.
_REACHED_HIVMC = ("Cannot find hivmc", "External hivmc run fails")
_UNSUPPORTED = re.compile(
    r"unsupported|not supported|not implemented|Expected dtype|failed to legalize|no lowering|cannot be lowered",
    re.IGNORECASE,
)


@dataclass
class KernelVerdict:
    kernel: str
    passed: bool
    category: str | None = None
    message: str = ""
    line: int | None = None
    stage: str | None = None
    details: dict = field(default_factory=dict)


def compiler_errors(output: str) -> list[tuple[str, int, str]]:
    """(path, line, message) for each real `error:` bishengir-compile printed."""
    found = []
    for m in _LOC_ERROR.finditer(output):
        msg = m.group("msg").strip()
        if any(n in msg for n in _NOISE):
            continue
        found.append((m.group("path"), int(m.group("line")), msg))
    return found


def _category_of(message: str) -> str:
    low = message.lower()
    if "ub overflow" in low:
        return "ub_overflow"
    if "cc overflow" in low:
        return "cc_overflow"
    if _UNSUPPORTED.search(message):
        return "unsupported_op"
    return "lowering_failed"


def _last_meaningful_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("^")]
    return lines[-1] if lines else text.strip()


def classify_kernel(result: dict, candidate: Path | str) -> KernelVerdict:
    """Verdict for one kernel from the worker's compile record."""
    kernel = result.get("kernel", "kernel")
    stage = result.get("stage")
    output = result.get("output") or ""
    def_line = result.get("def_line")
    if stage == "bishengir":
        errors = compiler_errors(output)
        if errors:
            path, line, msg = errors[0]
            category = _category_of(msg)
            for _p, _l, m in errors:  # an overflow anywhere names the failure
                if _category_of(m) in ("ub_overflow", "cc_overflow"):
                    msg, category = m, _category_of(m)
                    break
            same_file = Path(path).name == Path(candidate).name
            details = {}
            bits = _BITS.search(msg)
            if bits:
                details = {"required_bits": int(bits["need"]), "available_bits": int(bits["have"])}
            return KernelVerdict(kernel, False, category, msg, line if same_file else def_line, stage, details)
        if result.get("returncode") == 0 or any(s in output for s in _REACHED_HIVMC):
            return KernelVerdict(kernel, True, None, "front end passed", def_line, stage)
        return KernelVerdict(kernel, False, "other", _last_meaningful_line(output) or "bishengir-compile failed", def_line, stage)
    if stage == "ttir":
        # The Python -> TTIR front end: the message's last line names the op.
        msg = _last_meaningful_line(output)
        category = "unsupported_op" if _UNSUPPORTED.search(output) else "lowering_failed"
        return KernelVerdict(kernel, False, category, msg, result.get("line") or def_line, stage)
    if stage == "linalg":
        msg = _first_error_line(output) or _last_meaningful_line(output)
        category = "unsupported_op" if _UNSUPPORTED.search(output) else "lowering_failed"
        return KernelVerdict(kernel, False, category, msg, def_line, stage)
    return KernelVerdict(kernel, False, "other", _last_meaningful_line(output) or f"stage {stage} failed", def_line, stage)


def _first_error_line(text: str) -> str | None:
    for ln in text.splitlines():
        if "error" in ln.lower() and "[ERROR][Triton]" not in ln:
            return ln.strip()
    return None
