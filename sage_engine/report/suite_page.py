"""A suite's report as one self-contained HTML page a person can scan
(`sage suite check|run --report FILE.html`): the summary per benchmark, the
speedups' distribution on a log scale, the statuses by cause, and every
task's row with its roofline thumbnail, failing tasks first, then the
slowest.

"Slowest" is what each command measures: for `suite run`, the candidates
with the lowest speedup over their reference; for `suite check` (a
reference against itself, a speedup near 1 by design), the tasks whose
check took longest. Tasks that cannot run on the backend come last.

The page is rewritten whole (to a temporary file, then renamed) after every
row, so a run cut short leaves a readable page of the rows it measured,
marked as incomplete. No script, no external file: inline CSS and SVG only.
"""

from __future__ import annotations

import html
import math
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sage_engine.models import EvalResult
from sage_engine.models.base import _Model
from sage_engine.report import causes
from sage_engine.report.roofline import Chart, chart_for, render_svg

Kind = Literal["check", "run"]
STATUS_COLOURS = {"correct": "#2a7a2a", "failed": "#b22222", "cannot_run": "#8a8a8a", "degenerate": "#c06a00", "unverified": "#c06a00"}
DETAIL_CHARS = 180  # a failure's first words in the table; the whole text in its tooltip


class Row(_Model):
    """One task (and, for `suite run`, one of its example solutions) in the report."""

    id: str
    benchmark: str = "local"
    solution: str = ""
    status: str = Field(description="correct, failed or cannot_run")
    result: str = Field("", description="The evaluation's own status (incorrect, compile_error, ...)")
    cause: str | None = None
    detail: str = ""
    speedup: float | None = None
    speedup_trusted: bool | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    seconds: float = 0.0
    degenerate: str | None = None
    bound: str | None = None
    share: float | None = Field(None, description="Of the binding limit, for the candidate")
    chart: Chart | None = None


def row_from_check(check: dict[str, Any]) -> Row:
    """A `sage suite check` row (`TaskCheck.as_dict()`)."""
    chart = Chart.model_validate(check["roofline"]) if check.get("roofline") else None
    return Row(
        id=check["id"],
        benchmark=check.get("benchmark") or "local",
        status=check["status"],
        result=check["status"],
        cause=check.get("cause"),
        detail=check.get("detail") or "",
        speedup=check.get("speedup"),
        reference_ms=check.get("reference_ms"),
        candidate_ms=check.get("candidate_ms"),
        seconds=check.get("seconds") or 0.0,
        degenerate=check.get("degenerate"),
        bound=check.get("bound"),
        share=check.get("share"),
        chart=chart,
    )


def row_from_result(task_id: str, benchmark: str, solution: str, result: EvalResult) -> Row:
    """A `sage suite run` row: one example solution's evaluation."""
    status, cause, detail = "correct", None, result.message
    if result.status != "correct":
        cause, detail = causes.classify(result)
        if causes.cannot_run(cause):
            status = "cannot_run"
        else:
            status, cause = "failed", result.status.replace("_", " ")
            detail = result.mismatch or result.message
    bound, share = point_of(result)
    return Row(
        id=task_id,
        benchmark=benchmark,
        solution=solution,
        status=status,
        result=result.status,
        cause=cause,
        detail=detail or "",
        speedup=result.speedup,
        speedup_trusted=result.speedup_trusted,
        reference_ms=result.reference_timing.median_ms if result.reference_timing else None,
        candidate_ms=result.candidate_timing.median_ms if result.candidate_timing else None,
        seconds=round(result.duration_s, 2),
        degenerate=result.degenerate,
        bound=bound,
        share=share,
        chart=chart_for(result) if result.profile is not None else None,
    )


def point_of(result: EvalResult) -> tuple[str | None, float | None]:
    """The candidate's binding limit and its share of it."""
    p = result.profile
    if p is None or p.candidate is None:
        return None, None
    share = {"memory": p.candidate.bandwidth_share, "compute": p.candidate.compute_share}.get(p.bound or "")
    return p.bound, share


class SuitePage:
    """The report file, rewritten after each row."""

    def __init__(self, path: Path | str, *, kind: Kind, backend: str, total: int | None = None):
        self.path = Path(path)
        self.kind, self.backend, self.total = kind, backend, total
        self.rows: list[Row] = []
        self.started = time.strftime("%Y-%m-%d %H:%M:%S")
        self.begin = time.monotonic()
        self.done = False
        self.lock = threading.Lock()  # rows may arrive from several checking threads
        self.write()

    def add(self, row: Row) -> None:
        with self.lock:
            self.rows.append(row)
            self.write()

    def add_result(self, task_id: str, solution: str, result: EvalResult, *, benchmark: str = "local") -> None:
        """A `suite run` row: one example solution's evaluation."""
        self.add(row_from_result(task_id, benchmark, solution, result))

    def finish(self) -> Path:
        with self.lock:
            self.done = True
            self.write()
        return self.path

    def write(self) -> None:
        text = render_page(
            self.rows,
            kind=self.kind,
            backend=self.backend,
            started=self.started,
            total=self.total,
            done=self.done,
            wall_s=time.monotonic() - self.begin,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.path)  # a reader sees the old page or the new one, never half of one
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


# ------------------------------------------------------------------ the page


def render_page(
    rows: list[Row],
    *,
    kind: Kind,
    backend: str,
    started: str = "",
    total: int | None = None,
    done: bool = True,
    wall_s: float | None = None,
) -> str:
    title = f"SAGE suite {kind} on {backend}"
    state = (
        f"complete: {len(rows)} row{'s' if len(rows) != 1 else ''}"
        if done
        else f"in progress: {len(rows)}{f' of {total}' if total else ''} rows so far; this page is rewritten as each row arrives"
    )
    when = "".join([f" · started {started}" if started else "", f", {wall_s:.0f} s" if started and wall_s else ""])
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="{"muted" if done else "warn"}">{_e(state + when)}</p>',
        "<h2>Summary by benchmark</h2>",
        _summary_table(rows, kind),
        '<div class="charts"><div><h2>Speedups (log scale)</h2>',
        speedup_histogram(rows, kind),
        "</div>",
        "<div><h2>Statuses by cause</h2>",
        cause_bars(rows),
        "</div></div>",
        f"<h2>Tasks: failing first, then the {'lowest speedup' if kind == 'run' else 'longest check'}</h2>",
        _rows_table(rows, kind),
    ]
    return PAGE.format(title=_e(title), style=STYLE, body="\n".join(body))


def ordered(rows: list[Row], kind: Kind) -> list[Row]:
    def key(r: Row) -> tuple:
        rank = {"failed": 0, "correct": 1, "cannot_run": 2}.get(r.status, 0)
        slow = (r.speedup if r.speedup else math.inf) if kind == "run" else -r.seconds
        return rank, r.cause or "", slow if rank == 1 else 0, r.id

    return sorted(rows, key=key)


def summarize(rows: list[Row]) -> dict[str, Any]:
    runnable = [r for r in rows if r.status != "cannot_run"]
    correct = [r for r in runnable if r.status == "correct"]
    speedups = sorted(r.speedup for r in correct if r.speedup and r.speedup_trusted is not False)
    out: dict[str, Any] = {
        "tasks": len(rows),
        "runnable": len(runnable),
        "correct": len(correct),
        "pct": 100.0 * len(correct) / len(runnable) if runnable else None,
        "degenerate": sum(1 for r in rows if r.degenerate),
        "n": len(speedups),
    }
    if speedups:
        out["median"] = statistics.median(speedups)
        out["geomean"] = math.exp(statistics.fmean(math.log(s) for s in speedups))
        if len(speedups) > 1:
            q = statistics.quantiles(speedups, n=4, method="inclusive")
            out["q1"], out["q3"] = q[0], q[2]
    slowest = max(rows, key=lambda r: r.seconds, default=None)
    out["slowest"] = (slowest.id, slowest.seconds) if slowest else None
    return out


def _summary_table(rows: list[Row], kind: Kind) -> str:
    groups = sorted({r.benchmark for r in rows})
    lines = [
        "<table><tr><th>benchmark</th><th>tasks</th><th>runnable</th><th>correct</th>"
        f"<th>median {'self-' if kind == 'check' else ''}speedup (IQR)</th><th>geometric mean</th>"
        "<th>degenerate</th><th>longest</th></tr>"
    ]
    for name, subset in [*((g, [r for r in rows if r.benchmark == g]) for g in groups), ("all", rows)]:
        if name == "all" and len(groups) == 1:
            continue
        s = summarize(subset)
        pct = f" ({s['pct']:.1f}%)" if s["pct"] is not None else ""
        spread = (f"{s['median']:.3f}" + (f" ({s['q1']:.3f}–{s['q3']:.3f})" if "q1" in s else "")) if s["n"] else "–"
        geo = f"{s['geomean']:.3f}x" if s["n"] else "–"
        slow = f"{_e(s['slowest'][0])} {s['slowest'][1]:.1f} s" if s["slowest"] else "–"
        lines.append(
            f"<tr><th>{_e(name)}</th><td class=num>{s['tasks']}</td><td class=num>{s['runnable']}</td>"
            f"<td class=num>{s['correct']}{pct}</td><td class=num>{spread}</td><td class=num>{geo}</td>"
            f"<td class=num>{s['degenerate']}</td><td>{slow}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines)


def _rows_table(rows: list[Row], kind: Kind) -> str:
    out = [
        "<table class=rows><tr><th>task</th><th>status</th><th>cause</th><th class=num>speedup</th>"
        "<th class=num>ref ms</th><th class=num>cand ms</th><th>bound</th><th>roofline</th>"
        "<th class=num>s</th></tr>"
    ]
    for i, r in enumerate(ordered(rows, kind)):
        name = (
            _e(r.id)
            + (f"<br><span class=muted>{_e(r.solution)}</span>" if r.solution else "")
            + (f"<br><span class=muted>{_e(r.benchmark)}</span>" if r.benchmark not in ("local", "") else "")
        )
        status = "degenerate" if r.degenerate else r.status
        # A correct row's message ("correct on 3 trial(s) ...") says nothing the badge does not.
        detail = r.degenerate or ("" if r.status == "correct" else r.detail)
        cause = (f"<b>{_e(r.cause)}</b><br>" if r.cause else "") + (
            f'<span class=muted title="{_e(detail)}">{_e(_cut(detail, DETAIL_CHARS))}</span>' if detail else ""
        )
        speedup = f"{r.speedup:.3f}" if r.speedup else "–"
        if r.speedup and r.speedup_trusted is False:
            speedup += " <span class=warn>unverified</span>"
        bound = _e(r.bound or "–") + (f"<br>{r.share:.0%}" if r.share is not None else "")
        chart = render_svg(r.chart, compact=True, standalone=False, uid=f"t{i}") if r.chart else "–"
        out.append(
            f'<tr><td>{name}</td><td><span class="badge {status}">{_e(status.replace("_", " "))}</span></td>'
            f"<td>{cause}</td><td class=num>{speedup}</td><td class=num>{_ms(r.reference_ms)}</td>"
            f"<td class=num>{_ms(r.candidate_ms)}</td><td>{bound}</td><td>{chart}</td>"
            f"<td class=num>{r.seconds:.1f}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


# ------------------------------------------------------------------ the pictures


def speedup_histogram(rows: list[Row], kind: Kind, *, width: int = 520, height: int = 220) -> str:
    """Correct rows' speedups in bins of equal width on a log scale; unverified ones stacked apart."""
    found = [
        (r.speedup, r.speedup_trusted is not False)
        for r in rows
        if r.status == "correct" and r.speedup and math.isfinite(r.speedup) and r.speedup > 0
    ]
    if not found:
        return '<p class="muted">no speedups yet</p>'
    logs = [math.log10(s) for s, _ in found]
    # Wide enough to show 1x and at least 10% either side of it.
    lo, hi = min(min(logs), -0.04), max(max(logs), 0.04)
    pad = (hi - lo) * 0.04
    lo, hi = lo - pad, hi + pad
    bins = 24
    step = (hi - lo) / bins
    counts = [[0, 0] for _ in range(bins)]
    for (_speedup, trusted), v in zip(found, logs):
        counts[min(bins - 1, int((v - lo) / step))][0 if trusted else 1] += 1
    left, top, w, h = 40, 12, width - 56, height - 52
    most = max(a + b for a, b in counts)
    x = lambda v: left + (v - lo) / (hi - lo) * w  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="histogram" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>',
    ]
    for i, (ok, unverified) in enumerate(counts):
        for n, base, colour in ((ok, 0, "#1f6fb4"), (unverified, ok, STATUS_COLOURS["unverified"])):
            if n:
                bar = n / most * (h - 8)
                y0 = top + h - base / most * (h - 8) - bar
                out.append(
                    f'<rect class="bin" x="{x(lo + i * step) + 1:.1f}" y="{y0:.1f}" '
                    f'width="{max(1.0, step / (hi - lo) * w - 2):.1f}" height="{bar:.1f}" fill="{colour}">'
                    f"<title>{n} at {10 ** (lo + i * step):.3g}x–{10 ** (lo + (i + 1) * step):.3g}x</title>"
                    "</rect>"
                )
    for t in _speedup_ticks(lo, hi):
        out.append(
            f'<line x1="{x(math.log10(t)):.1f}" y1="{top + h}" x2="{x(math.log10(t)):.1f}" y2="{top + h + 4}" '
            f'stroke="#666"/><text x="{x(math.log10(t)):.1f}" y="{top + h + 16}" text-anchor="middle" '
            f'fill="currentColor">{t:g}x</text>'
        )
    one = x(0.0)
    out.append(f'<line class="one" x1="{one:.1f}" y1="{top}" x2="{one:.1f}" y2="{top + h}" stroke="#b22222" stroke-dasharray="4 3"/>')
    out.append(
        f'<text x="{left}" y="{height - 8}" fill="currentColor">{len(found)} correct; '
        f"{'self-' if kind == 'check' else ''}speedup, reference time over candidate time; "
        f"{most} in the fullest bin</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def _speedup_ticks(lo: float, hi: float) -> list[float]:
    """Round speedups inside [10^lo, 10^hi], at most about seven."""
    lists = (
        [0.001, 0.01, 0.1, 1, 10, 100, 1000],
        [0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32],
        [0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2],
        [0.9, 0.95, 1, 1.05, 1.1],
        [0.97, 0.98, 0.99, 1, 1.01, 1.02, 1.03],
    )
    for candidates in lists:
        inside = [t for t in candidates if lo <= math.log10(t) <= hi]
        if 3 <= len(inside) <= 9:
            return inside
    return [1]


def cause_bars(rows: list[Row], *, width: int = 520) -> str:
    """How many rows ended each way: correct, degenerate, and each failure and cannot-run cause."""
    groups: dict[tuple[str, str], int] = {}
    for r in rows:
        status = "degenerate" if r.degenerate else r.status
        label = {"correct": "correct", "degenerate": "degenerate"}.get(
            status
        ) or f"{'cannot run' if status == 'cannot_run' else 'failed'}: {r.cause or 'unknown'}"
        groups[(status, label)] = groups.get((status, label), 0) + 1
    if not groups:
        return '<p class="muted">no rows yet</p>'
    items = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0][1]))[:14]
    most = max(n for _, n in items)
    bar_w = width - 250
    height = 22 * len(items) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="causes" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
    ]
    for i, ((status, label), n) in enumerate(items):
        y = 6 + 22 * i
        out.append(
            f'<text x="212" y="{y + 12}" text-anchor="end" fill="currentColor">{_e(_cut(label, 36))}<title>{_e(label)}</title></text>'
        )
        out.append(
            f'<rect class="cause {status}" x="220" y="{y}" width="{max(2.0, n / most * bar_w):.1f}" '
            f'height="16" fill="{STATUS_COLOURS.get(status, "#b22222")}"/>'
        )
        out.append(f'<text x="{226 + n / most * bar_w:.1f}" y="{y + 12}" fill="currentColor">{n}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _cut(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _ms(ms: float | None) -> str:
    return "–" if ms is None else f"{ms:.3f}"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


STYLE = """
body { font-family: system-ui, sans-serif; color: #222; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #ddd; vertical-align: middle; font-size: 13px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.rows td { vertical-align: top; }
.muted { color: #666; font-size: 12px; }
.warn { color: #b35900; }
.badge { padding: 1px 6px; border-radius: 3px; color: #fff; font-size: 12px; white-space: nowrap; }
.badge.correct { background: #2a7a2a; } .badge.failed { background: #b22222; }
.badge.cannot_run { background: #8a8a8a; } .badge.degenerate { background: #c06a00; }
.charts { display: flex; flex-wrap: wrap; gap: 2em; }
svg.roofline.compact { display: block; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
{body}
</body>
</html>
"""
