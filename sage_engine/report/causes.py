"""Why a task's reference could not be judged against itself, in a few words.

`blocking_requirement` decides from the code, before anything runs, that a
task cannot run on a backend (it calls torch_npu, moves tensors to CUDA).
`classify` turns an evaluation that did not come back correct into a cause
that groups well: "needs NPU", "missing dependency: einops",
"reference fails: IndexError", "not reproducible", "timeout", "unsupported on
this backend" (the backend's torch lacks the operator, or lacks it for the
case's dtype: CPU torch has no float16 `avg_pool3d`). Causes that
say the task cannot run here (`CANNOT_RUN`) are left out of the share of
correct tasks; every other cause counts against it.
"""

from __future__ import annotations

import re
from typing import Any

NEEDS_NPU, NEEDS_CUDA, NEEDS_NETWORK = "needs NPU", "needs CUDA", "needs network"
MISSING = "missing dependency"
UNSUPPORTED = "unsupported on this backend"
CANNOT_RUN = (NEEDS_NPU, NEEDS_CUDA, NEEDS_NETWORK, MISSING, UNSUPPORTED)
# Backends on which each requirement is met.
MEETS = {"npu": ("npu",), "cuda": ("cuda",), "network": ()}  # the sandbox has no network
_KIND_CAUSE = {"npu": NEEDS_NPU, "cuda": NEEDS_CUDA, "network": NEEDS_NETWORK}
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]+)'")
_EXC = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Warning|Interrupt))\b")
_NETWORK = (
    "huggingface.co",
    "couldn't connect",
    "offline mode",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
)
# What torch says when the backend has no kernel for an operator, or for a dtype.
_UNSUPPORTED = (
    (re.compile(r"\"(\w+)\" not implemented for '(\w+)'"), "torch has no {1} kernel for {0}"),
    (re.compile(r"'_OpNamespace' '(\w+)' object has no attribute '(\w+)'"), "this torch has no operator {0}.{1}"),
    (re.compile(r"Could not run '([\w:.]+)' with arguments from the '(\w+)' backend"), "torch has no {1} kernel for {0}"),
)
# A failed allocation (the sandbox caps address space), or the kernel's OOM killer.
_MEMORY = ("can't allocate memory", "Cannot allocate memory", "out of memory", "out-of-memory", "MemoryError")
_CUDA = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "CUDA driver", "cuda runtime error", "no CUDA GPUs are available")


def cannot_run(cause: str | None) -> bool:
    if not cause:
        return False
    return cause.split(":")[0] in CANNOT_RUN


def blocking_requirement(requires: list[str], backend: str) -> tuple[str, str] | None:
    """(cause, detail) when a requirement like "npu: calls torch_npu.x (line 3)" is not met by `backend`."""
    for text in requires:
        kind, _, reason = text.partition(": ")
        if kind in MEETS and backend not in MEETS[kind]:
            return _KIND_CAUSE[kind], reason
    return None


def classify(result: Any) -> tuple[str, str]:
    """(cause, detail) for an EvalResult whose status is not `correct`."""
    text = "\n".join([result.message or "", *(d.message for d in result.diagnostics)])
    missing = _NO_MODULE.search(text)
    if missing:
        module = missing.group(1).split(".")[0]
        if module == "torch_npu":
            return NEEDS_NPU, "imports torch_npu at run time"
        return f"{MISSING}: {module}", missing.group(0)
    if any(marker in text for marker in _CUDA) or re.search(r"device type at start of device string: cuda", text):
        return NEEDS_CUDA, _first_line(text)
    if re.search(r"device string: npu|npu device|torch\.npu", text):
        return NEEDS_NPU, _first_line(text)
    if any(marker in text for marker in _NETWORK):
        return NEEDS_NETWORK, _first_line(text)
    status = result.status
    if re.search(r"got a torch\.sparse_\w+ / \w+ tensor", text):
        return "harness: sparse tensor outputs", _first_line(result.mismatch or text)
    if status == "incorrect":
        return "not reproducible", _first_line(result.mismatch or text)
    if status == "rejected":
        return "rejected by the static checks", _first_line(text)
    if status == "timeout":
        return "timeout", _first_line(text)
    if any(marker in text for marker in _MEMORY):
        return "out of memory", _first_line(text)
    if status == "crashed":
        # Both processes run the reference's code here, so whichever died first, it is the reference's crash.
        signal = re.search(r"\b(SIG[A-Z]+)\b", text)
        return (f"reference fails: {signal.group(1)}" if signal else "crashed"), _first_line(text)
    if "process failed inside the sandbox" in text:  # the harness's own code raised, not the task's
        return f"harness: {_exception(text)}", _first_line(text)
    for pattern, detail in _UNSUPPORTED:
        found = pattern.search(text)
        if found:
            return UNSUPPORTED, detail.format(*found.groups())
    if "the reference" in text:
        return f"reference fails: {_exception(text)}", _first_line(text)
    if status == "compile_error":
        return f"does not load: {_exception(text)}", _first_line(text)
    return f"{status}: {_exception(text)}", _first_line(text)


def _exception(text: str) -> str:
    found = _EXC.search(text)
    return found.group(1) if found else "error"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return ""
