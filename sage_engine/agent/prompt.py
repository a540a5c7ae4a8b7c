"""What the model sees: the system prompt, the task message (with the
resident rules and retrieved items), evaluation feedback, and the tools.

Templates live in `prompts/*.md` so they can be read and edited without
touching code; `$name` placeholders are filled with `string.Template`
(kernel code is full of braces, so `str.format` would not do).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Sequence

from sage_engine.agent.llm import ToolSpec
from sage_engine.memory.text import fenced, one_line
from sage_engine.models import EvalResult, ScoredItem

if TYPE_CHECKING:
    from sage_engine.evaluation.host.tasks import Task

PROMPTS = Path(__file__).parent / "prompts"
MAX_ITEM_CODE_CHARS = 1500  # a retrieved item's code is a hint, not a second reference
MAX_DIAGNOSTICS = 12
MAX_STDOUT_CHARS = 1500

BACKEND_GUIDES: dict[str, str] = {
    "cpu": (
        "The kernel runs on CPU with PyTorch. Use PyTorch tensor operations and/or C++ compiled with "
        "`torch.utils.cpp_extension.load_inline` (the build is cached between evaluations). Reference and "
        "candidate are timed alternately with the same thread count."
    ),
    "triton": (
        "Write `@triton.jit` kernels (upstream Triton) and launch them from `ModelNew.forward`. They run in "
        "the Triton interpreter on CPU (TRITON_INTERPRET=1) on CPU tensors: every program instance costs "
        "about a millisecond, so launch few programs over large blocks. The interpreter checks no bounds: "
        "mask every `tl.load` and `tl.store`."
    ),
    "ascend-compile": (
        "Write Triton-Ascend kernels (`@triton.jit`, `import triton.language as tl`) for an Ascend 910B NPU. "
        "SAGE runs the real Ascend compiler front end (memory planning: Unified Buffer 192 KiB per core, "
        "L0C 128 KiB) and reports overflows at kernel lines; numerics are checked without the NPU, and "
        "timings on this machine are not representative of the NPU."
    ),
    "npu": (
        "Write Triton-Ascend kernels (`@triton.jit`) for the Ascend NPU in this machine; inputs live on the "
        "`npu` device and are timed against the torch_npu reference."
    ),
    "cuda": (
        "Write Triton or CUDA kernels (CUDA through `torch.utils.cpp_extension.load_inline`); inputs live on "
        "the `cuda` device and are timed with CUDA events."
    ),
}

SUBMIT_KERNEL = ToolSpec(
    name="submit_kernel",
    description=(
        "Submit a complete Python module defining ModelNew for evaluation: SAGE compiles it, checks it "
        "against the reference on every case and times it. Returns status, errors with line numbers, "
        "mismatch details, timings and the speedup over the reference."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The full module source, imports included, defining class ModelNew."},
            "adopted_ids": {
                "type": "array",
                "description": (
                    "Memory items (ids shown as [#id]) whose advice this code actually follows. Leave out items you did not use."
                ),
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "evidence": {"type": "string", "description": "One line: where and how the code applies it."},
                    },
                    "required": ["id", "evidence"],
                },
            },
        },
        "required": ["code", "adopted_ids"],
    },
)

RECORD_LESSON = ToolSpec(
    name="record_lesson",
    description="Store one lesson from this episode in the experience memory, for future kernels on other operators.",
    input_schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "A short, specific name for the lesson."},
            "content": {"type": "string", "description": "The lesson: what to do or avoid, when, and why (under 800 characters)."},
            "code": {"type": "string", "description": "Optional short snippet showing the pattern."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "A few lowercase tags."},
        },
        "required": ["title", "content"],
    },
)

WRITE_RULE = ToolSpec(
    name="write_rule",
    description="Write the consolidated rule in the fixed template.",
    input_schema={
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "trigger": {"type": "string", "description": "When the rule applies: operators, shapes, backend, chip."},
            "rule": {"type": "string", "description": "What to do."},
            "rationale": {"type": "string", "description": "Why it helps, from the evidence."},
            "when_not": {"type": "string", "description": "When not to apply it."},
            "evidence": {"type": "array", "items": {"type": "integer"}, "description": "Ids of ALL the experiences given."},
        },
        "required": ["title", "trigger", "rule", "rationale", "when_not", "evidence"],
    },
)


@lru_cache(maxsize=None)
def template(name: str) -> Template:
    return Template((PROMPTS / f"{name}.md").read_text(encoding="utf-8"))


def system_prompt(backend: str, rounds: int, *, with_memory: bool) -> str:
    return template("system").substitute(
        backend=backend,
        backend_guide=BACKEND_GUIDES.get(backend, ""),
        rounds=rounds,
        memory_clause=", the resident rules and the memory items it shows (each has an id like [#12])" if with_memory else "",
        adoption_clause=(
            " In `adopted_ids` list the memory items whose advice your code actually follows, each with one line "
            "of evidence (where the code applies it). List only items you really used: SAGE learns from this "
            "which memories help, and ignoring an item that does not fit is fine."
            if with_memory
            else " No memory is shown in this run: pass an empty `adopted_ids` list."
        ),
    )


def task_message(task: "Task", *, rules: Sequence[ScoredItem] = (), items: Sequence[ScoredItem] = (), with_memory: bool = True) -> str:
    cases = "\n".join(f"- {json.dumps(c)}" for c in task.case_rows) if task.cases else "- the module defaults"
    forbid = f"Forbidden calls (they are the operator itself): {', '.join(task.forbid)}\n" if task.forbid else ""
    tolerance = (
        ", ".join(f"{d}: atol {t.get('atol')}, rtol {t.get('rtol')}" for d, t in task.tolerance.items())
        if task.tolerance
        else "fp32 atol=rtol=1e-4, fp16/bf16 atol=rtol=1e-2, integers exact"
    )
    memory = ""
    if with_memory:
        memory = template("memory").substitute(
            rules="\n\n".join(render_item(r) for r in rules) or "(none yet)",
            items="\n\n".join(render_item(i, show_stats=True) for i in items) or "(nothing relevant found)",
        )
    return template("task").substitute(
        task_id=task.id,
        name=task.name,
        operator=task.operator,
        family=task.family,
        level=task.level,
        description=task.description or "(no description)",
        cases=cases,
        forbid=forbid,
        tolerance=tolerance,
        reference=task.reference_source.strip(),
        memory=memory,
    )


def render_item(item: ScoredItem, *, show_stats: bool = False) -> str:
    """An item as the model reads it: SAGE's header line (id, title, author,
    numbers), then the item's words quoted in fences, so an item cannot
    write a header, a rule or an instruction line that looks like SAGE's."""
    head = f"[#{item.id}] {one_line(item.title)}"
    who = ", ".join(item.authors) or item.author
    if who:
        head += f" (by {one_line(who)})"
    if show_stats:
        head += f"  (utility {item.utility:+.2f}, adopted {item.n_adopted}x)"
    body = fenced(item.content.strip())
    if item.code:
        code = item.code.strip()
        if len(code) > MAX_ITEM_CODE_CHARS:
            code = code[:MAX_ITEM_CODE_CHARS] + "\n# ... (truncated)"
        body += "\n" + fenced(code, "python")
    return f"{head}\n{body}"


def feedback(result: EvalResult, *, round_no: int, rounds: int, best: str | None, ignored_ids: Sequence[int] = ()) -> str:
    """The evaluation as the model reads it: status first, then what to fix
    at which line, then the numbers."""
    lines = [f"Round {round_no} of {rounds}: {result.status}"]
    if result.message:
        lines.append(result.message.strip())
    if result.diagnostics:
        lines.append("Diagnostics:")
        for d in result.diagnostics[:MAX_DIAGNOSTICS]:
            where = f"line {d.line}" + (f":{d.column}" if d.column else "") if d.line else "(no line)"
            kernel = f" in kernel {d.kernel}" if d.kernel else ""
            lines.append(f"  {where} [{d.severity} {d.category}]{kernel}: {d.message.strip()}")
        if len(result.diagnostics) > MAX_DIAGNOSTICS:
            lines.append(f"  ... and {len(result.diagnostics) - MAX_DIAGNOSTICS} more")
    if result.mismatch:
        lines.append(f"Mismatch: {result.mismatch}")
    if result.max_abs_error is not None:
        rel = f", max rel error {result.max_rel_error:.3g}" if result.max_rel_error is not None else ""
        lines.append(f"Max abs error {result.max_abs_error:.3g}{rel}")
    failed = [c for c in result.cases if not c.ok]
    for c in failed[:3]:
        lines.append(f"Failed case {json.dumps(c.case, default=str)} trial {c.trial}: {c.message}")
    if result.reference_timing and result.candidate_timing:
        ref, cand = result.reference_timing, result.candidate_timing
        lines.append(
            f"Timing (median over {cand.reps} reps): reference {ref.median_ms:.4g} ms (IQR {ref.iqr_ms:.2g}), "
            f"candidate {cand.median_ms:.4g} ms (IQR {cand.iqr_ms:.2g})"
        )
    if result.speedup is not None:
        lines.append(
            f"Speedup over the reference: {result.speedup:.3g}x" + (f" ({result.speedup_note})" if result.speedup_trusted is False else "")
        )
    if result.profile is not None and result.profile.summary:
        lines.append(f"Where the time goes: {result.profile.summary}")
    if result.suspicious_speedup and result.speedup_trusted is not False:
        lines.append("Note: this speedup is suspiciously large; make sure the kernel does all the work.")
    if not result.timing_representative:
        lines.append("Note: timings on this backend are not representative of the target hardware.")
    if result.stdout_tail and result.status in ("runtime_error", "crashed", "timeout", "compile_error"):
        tail = result.stdout_tail[-MAX_STDOUT_CHARS:]
        lines.append(f"Output tail:\n{tail}")
    if ignored_ids:
        lines.append(f"Adopted ids {list(ignored_ids)} were not shown in this episode and were ignored.")
    if best:
        lines.append(f"Best so far: {best}.")
    left = rounds - round_no
    if left > 0:
        lines.append(f"{left} submission(s) left. Submit an improved module with submit_kernel, or answer DONE to stop.")
    else:
        lines.append("That was the last submission.")
    return "\n".join(lines)


def lesson_prompt(outcome: str) -> str:
    return template("lesson").substitute(outcome=outcome)


def abstraction_system() -> str:
    return template("abstract").template


def abstraction_message(cluster, stats: str) -> str:
    parts = [f"Experiences ({len(cluster)}), with their record: {stats}", ""]
    for it in cluster:
        meta = ", ".join(
            filter(
                None,
                [
                    f"operators adopted by: {', '.join(sorted(set(it.operators_adopted))) or 'none'}",
                    f"family {it.family}" if it.family else "",
                    f"backend {it.backend}" if it.backend else "",
                    f"hardware {it.hardware}" if it.hardware else "",
                    f"utility {it.utility:+.2f}, adopted {it.n_adopted}x",
                ],
            )
        )
        parts.append(f"[#{it.id}] {it.title}\n({meta})\n{it.content.strip()}")
        if it.code:
            parts.append(f"```python\n{it.code.strip()[:MAX_ITEM_CODE_CHARS]}\n```")
        parts.append("")
    parts.append(f"Evidence ids to cite, all of them: {[it.id for it in cluster]}")
    return "\n".join(parts)
