"""A result's roofline as self-contained SVG, drawn by SAGE's own code
(standard library only: no plotting library, nothing fetched).

`chart_for` turns an `EvalResult` (its profile and medians) and the host's
measured limits into a `Chart`: what is drawn, in data units; `render_svg`
draws a chart. Two kinds of chart:

- **roofline**, when the call's FLOPs are known (matrix products,
  convolutions, attention): achieved GFLOP/s against arithmetic intensity
  (FLOP per byte the call must move), under the bandwidth slope measured
  for the call's working set and the matmul peak of its dtype;
- **bandwidth**, when no FLOP formula counts the call's work (element-wise
  ops, reductions: torch's formulas count matrix work only, so there is no
  intensity to place it at): achieved GB/s against the bytes one call
  moves, under the bandwidth the calibration measured at each working-set
  size (the envelope the judgement reads its share from).

Both draw the launch ceiling where the calibration measured a launch's
cost (a call of N launches cannot beat N of them), shade what is
physically impossible above the measured roof, join the reference and the
candidate by an arrow, and name the binding limit. A vector (non-matmul)
FLOP peak is not measured by the calibration, so none is drawn. Without a
profile, or without measured limits, the chart still renders and says what
is missing.

The SVG carries no `style` attribute and no `<style>` element, only
presentation attributes: a webview's content security policy without
'unsafe-inline' (the VS Code panel's) draws it as it is. Inline, its text
takes the page's colour (`currentColor`); standalone it is dark on white.
"""

from __future__ import annotations

import hashlib
import math
import textwrap
from typing import Literal
from xml.sax.saxutils import escape

from pydantic import Field

from sage_engine.models import EvalResult, MachineLimits
from sage_engine.models.base import _Model

Kind = Literal["memory", "compute", "launch"]
COLOURS = {
    "memory": "#1f6fb4",
    "compute": "#8c3fb4",
    "launch": "#c06a00",
    "reference": "#6b6b6b",
    "candidate": "#e8590c",
    "impossible": "#d62728",
}
BOUND_WORDS = {"memory": "memory-bound", "compute": "compute-bound", "latency": "launch/latency-bound"}
NOTE_CHARS = 124  # a note line's width at 11 px in an 800 px chart
LABEL_PX = 6.6  # about what a character of 12 px sans-serif takes: a label's width, guessed


class Line(_Model):
    """A limit, as a polyline in data units (straight between points on log axes)."""

    kind: Kind
    label: str
    points: list[tuple[float, float]]
    roof: bool = Field(True, description="Part of the physical roof: above it is impossible")
    binding: bool = False


class Mark(_Model):
    role: Literal["reference", "candidate"]
    x: float
    y: float
    label: str


class Chart(_Model):
    """What a roofline picture shows, in data units: enough to draw it again."""

    mode: Literal["roofline", "bandwidth", "empty"]
    title: str
    x_label: str = ""
    y_label: str = ""
    x_bytes: bool = Field(False, description="The x axis counts bytes (ticks in KiB/MiB/GiB)")
    x_range: tuple[float, float] = (1.0, 10.0)
    y_range: tuple[float, float] = (1.0, 10.0)
    lines: list[Line] = Field(default_factory=list)
    marks: list[Mark] = Field(default_factory=list)
    binding: str = ""
    impossible: bool = Field(False, description="The candidate's point lies in the impossible region")
    notes: list[str] = Field(default_factory=list)


# ------------------------------------------------------------------ the chart


def chart_for(result: EvalResult, limits: MachineLimits | None = None) -> Chart:
    """The chart of one result; `limits` stands in where its profile kept none (results stored before it did)."""
    title = f"{result.task} on {result.backend} ({result.hardware})"
    p = result.profile
    medians = {
        "reference": result.reference_timing.median_ms if result.reference_timing else None,
        "candidate": result.candidate_timing.median_ms if result.candidate_timing else None,
    }
    if p is None or not p.bytes or not all(medians.values()):
        why = (
            "no profile: only a correct, timed candidate on cpu, npu or cuda is profiled"
            if p is None or not all(medians.values())
            else "the profile measured no bytes for this call"
        )
        return Chart(mode="empty", title=title, notes=[why])
    limits = p.limits or limits
    launch_us = limits.launch_us if limits is not None else None
    launches = max(1.0, p.candidate.launches if p.candidate else 1.0)
    notes: list[str] = []
    if p.peak_gbps is None and limits is None:
        notes.append("no measured limits for this host: no roof is drawn (`sage backends calibrate` measures them)")
    if p.flops:
        chart = _roofline(p, medians, launch_us, launches, limits)
    else:
        chart = _bandwidth(p, medians, launch_us, launches, limits)
        notes.insert(
            0,
            "no FLOP formula counts this call's work (torch's count matrix products, convolutions and "
            "attention): bandwidth against working set instead of FLOP/s against intensity",
        )
    chart.title = title
    speedup = result.speedup
    for mark in chart.marks:
        ms = medians[mark.role]
        mark.label = f"{mark.role} {_ms(ms)}" + (f" ({speedup:.2f}x)" if mark.role == "candidate" and speedup else "")
    chart.binding = _binding(p, launches, launch_us)
    chart.impossible = bool(p.impossible)
    if p.impossible:
        notes.append(f"impossible: {p.impossible}")
    elif p.fewer_flops:
        notes.append(f"above the matmul peak: {p.fewer_flops}")
    chart.notes = notes
    _fit(chart)
    return chart


def _roofline(p, medians, launch_us, launches, limits) -> Chart:
    ai = p.flops / p.bytes
    marks = [Mark(role=role, x=ai, y=p.flops / (ms / 1e3) / 1e9, label="") for role, ms in medians.items()]
    bw = p.peak_gbps or (_envelope_at(limits, p.bytes) if limits else None)
    peak = (p.peak_flops or (limits.matmul_flops.get("float32") if limits else None) or 0.0) / 1e9 or None
    lines = []
    ridge = peak / bw if bw and peak else None
    xs = [ai] + ([ridge] if ridge else [])
    lo, hi = _decades(min(xs) / 10, max(xs) * 10)
    if bw:
        end = min(ridge, hi) if ridge else hi
        lines.append(
            Line(
                kind="memory",
                label=f"bandwidth {bw:.1f} GB/s ({_bytes(p.bytes)} working set)",
                points=[(lo, bw * lo), (end, bw * end)],
                binding=p.bound == "memory",
            )
        )
    if peak:
        start = max(ridge, lo) if ridge else lo
        lines.append(
            Line(kind="compute", label=f"matmul peak {peak:.1f} GFLOP/s", points=[(start, peak), (hi, peak)], binding=p.bound == "compute")
        )
    if launch_us:
        ceiling = p.flops / (launches * launch_us / 1e6) / 1e9
        lines.append(
            Line(
                kind="launch",
                label=f"{_count(launches)} launch{'es' if launches > 1.05 else ''} x {launch_us:.1f} µs",
                points=[(lo, ceiling), (hi, ceiling)],
                roof=False,
                binding=p.bound == "latency",
            )
        )
    return Chart(
        mode="roofline",
        title="",
        x_label="arithmetic intensity (FLOP per byte moved)",
        y_label="achieved GFLOP/s",
        x_range=(lo, hi),
        lines=lines,
        marks=marks,
    )


def _bandwidth(p, medians, launch_us, launches, limits) -> Chart:
    marks = [Mark(role=role, x=float(p.bytes), y=p.bytes / (ms / 1e3) / 1e9, label="") for role, ms in medians.items()]
    sizes = sorted(b.bytes for b in limits.bandwidth) if limits and limits.bandwidth else []
    lo, hi = _decades(min([p.bytes / 4, *sizes[:1]]), max([p.bytes * 4, *sizes[-1:]]))
    lines = []
    if sizes:
        xs = sorted({lo, hi, *sizes})
        lines.append(
            Line(
                kind="memory",
                label=f"measured bandwidth by working set ({_envelope_at(limits, p.bytes):.1f} GB/s at {_bytes(p.bytes)})",
                points=[(x, _envelope_at(limits, x)) for x in xs],
                binding=p.bound == "memory",
            )
        )
    elif p.peak_gbps:
        lines.append(
            Line(
                kind="memory",
                label=f"bandwidth {p.peak_gbps:.1f} GB/s ({_bytes(p.bytes)} working set)",
                points=[(lo, p.peak_gbps), (hi, p.peak_gbps)],
                binding=p.bound == "memory",
            )
        )
    if launch_us:
        # n launches take n x launch_us whatever they move: GB/s <= bytes / that.
        per_s = launches * launch_us / 1e6
        lines.append(
            Line(
                kind="launch",
                label=f"{_count(launches)} launch{'es' if launches > 1.05 else ''} x {launch_us:.1f} µs",
                points=[(lo, lo / per_s / 1e9), (hi, hi / per_s / 1e9)],
                roof=False,
                binding=p.bound == "latency",
            )
        )
    return Chart(
        mode="bandwidth",
        title="",
        x_label="bytes one call moves (inputs plus outputs)",
        y_label="achieved GB/s",
        x_bytes=True,
        x_range=(lo, hi),
        lines=lines,
        marks=marks,
    )


def _envelope_at(limits: MachineLimits, nbytes: float) -> float:
    """The bandwidth the judgement reads for a working set."""
    return limits.bandwidth_at(nbytes) or 0.0


def _fit(chart: Chart) -> None:
    """Axis ranges in whole decades holding every point and the roof around them."""
    ys = [m.y for m in chart.marks if _finite(m.y)]
    # The roof above each point: the lowest of the roof's lines there (a slope
    # drawn up to the ridge only would reach far above the peak past it).
    roofs = [
        min(_interpolate(line.points, m.x) for line in chart.lines if line.roof)
        for m in chart.marks
        if any(line.roof for line in chart.lines)
    ]
    ys.extend(roofs)
    for line in chart.lines:
        if line.kind == "compute":
            ys.append(line.points[0][1])
        elif not line.roof:
            at = [_interpolate(line.points, m.x) for m in chart.marks]
            # A launch ceiling far above the roof limits nothing: it may fall outside the picture.
            if line.binding or (roofs and min(at) < min(roofs)):
                ys.extend(at)
    ys = [y for y in ys if _finite(y) and y > 0] or [1.0]
    chart.y_range = _decades(min(ys) / 3, max(ys) * 3)
    chart.x_range = _decades(*chart.x_range)


def _interpolate(points: list[tuple[float, float]], x: float) -> float:
    """A polyline's value at x, straight between points on log axes, flat past its ends."""
    pts = sorted(points)
    if x <= pts[0][0]:
        return pts[0][1] if len(pts) == 1 or pts[0][1] == pts[-1][1] else _log_line(pts[0], pts[1], x)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1:
            return _log_line((x0, y0), (x1, y1), x)
    return _log_line(pts[-2], pts[-1], x) if len(pts) > 1 else pts[-1][1]


def _log_line(a: tuple[float, float], b: tuple[float, float], x: float) -> float:
    if a[0] == b[0] or a[1] <= 0 or b[1] <= 0:
        return a[1]
    t = math.log(x / a[0]) / math.log(b[0] / a[0])
    return math.exp(math.log(a[1]) + t * (math.log(b[1]) - math.log(a[1])))


def _binding(p, launches: float, launch_us: float | None) -> str:
    cand = p.candidate
    if p.impossible and cand and cand.bandwidth_share is not None:
        return f"binding: none: {cand.bandwidth_share:.1f}x the measured bandwidth, impossible"
    if p.bound == "memory" and cand and cand.bandwidth_share is not None:
        return f"binding: memory bandwidth ({cand.bandwidth_share:.0%} of {p.peak_gbps:.1f} GB/s)"
    if p.bound == "compute" and cand and cand.compute_share is not None:
        return f"binding: matmul peak ({cand.compute_share:.0%} of {p.peak_flops / 1e9:.1f} GFLOP/s)"
    if p.bound == "latency" and launch_us:
        return f"binding: launches ({_count(launches)} x {launch_us:.1f} µs a call)"
    return "binding: unknown (no measured limits)"


def _decades(lo: float, hi: float) -> tuple[float, float]:
    lo = lo if _finite(lo) and lo > 0 else 1.0
    hi = hi if _finite(hi) and hi > lo else lo * 10
    return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


# ------------------------------------------------------------------ the drawing


class _Frame:
    """Data units to pixels, on log axes."""

    def __init__(self, chart: Chart, left: float, top: float, width: float, height: float):
        self.left, self.top, self.width, self.height = left, top, width, height
        self.lx = (math.log10(chart.x_range[0]), math.log10(chart.x_range[1]))
        self.ly = (math.log10(chart.y_range[0]), math.log10(chart.y_range[1]))

    def x(self, v: float) -> float:
        return self.left + (math.log10(v) - self.lx[0]) / (self.lx[1] - self.lx[0]) * self.width

    def y(self, v: float) -> float:
        return self.top + self.height - (math.log10(v) - self.ly[0]) / (self.ly[1] - self.ly[0]) * self.height


def render_svg(chart: Chart, *, standalone: bool = True, compact: bool = False, uid: str | None = None) -> str:
    """The chart as SVG markup. `standalone`: dark on white, for a file;
    otherwise transparent, its text in the page's colour. `compact`: a
    thumbnail (the suite report's rows): no axes' text, legend or notes.
    `uid` keeps ids apart where several charts share a page."""
    uid = uid or "r" + hashlib.sha1(chart.model_dump_json().encode()).hexdigest()[:10]
    box = (6, 6, 120, 68) if compact else (72, 44, 440, 300)
    notes = [] if compact else [ln for n in chart.notes for ln in textwrap.wrap(n, NOTE_CHARS)][:6]
    width, height = (132, 80) if compact else (800, box[1] + box[3] + 52 + 15 * len(notes))
    f = _Frame(chart, *box)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="roofline{" compact" if compact else ""}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
        f'font-size="{9 if compact else 12}"' + (' color="#222222"' if standalone else "") + f' data-mode="{chart.mode}">',
        f"<title>{escape(chart.title + (': ' + chart.binding if chart.binding else ''))}</title>",
        f'<defs><clipPath id="{uid}-plot"><rect x="{f.left}" y="{f.top}" width="{f.width}" height="{f.height}"/>'
        f'</clipPath><marker id="{uid}-head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        f'fill="{COLOURS["candidate"]}"/></marker></defs>',
    ]
    if standalone:
        out.append(f'<rect class="background" x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>')
    if not compact:
        out.append(
            f'<text class="title" x="{f.left}" y="18" font-size="14" font-weight="bold" fill="currentColor">{escape(chart.title)}</text>'
        )
    out.append(
        f'<rect class="plot" x="{f.left}" y="{f.top}" width="{f.width}" height="{f.height}" fill="none" '
        f'stroke="currentColor" stroke-opacity="0.5"/>'
    )
    if not compact:
        out.extend(_grid(chart, f))
    out.append(f'<g clip-path="url(#{uid}-plot)">')
    out.extend(_impossible(chart, f, compact))
    out.extend(_lines(chart, f, compact))
    marks, labels = _marks(chart, f, compact, uid)
    out.extend(marks)
    out.append("</g>")
    out.extend(labels)  # outside the clip: a label may run past the plot's edge
    if chart.mode == "empty":
        out.append(
            f'<text class="empty" x="{f.left + f.width / 2:.1f}" y="{f.top + f.height / 2:.1f}" '
            f'text-anchor="middle" fill="currentColor">{"no profile" if compact else "nothing to draw"}</text>'
        )
    if not compact:
        out.extend(_legend(chart, f))
        for i, note in enumerate(notes):
            out.append(
                f'<text class="note" x="12" y="{box[1] + box[3] + 50 + 15 * i}" font-size="11" fill="currentColor">{escape(note)}</text>'
            )
    out.append("</svg>")
    return "\n".join(out)


def roofline_svg(result: EvalResult, limits: MachineLimits | None = None, *, standalone: bool = True) -> str:
    """One result's roofline as SVG."""
    return render_svg(chart_for(result, limits), standalone=standalone)


def _grid(chart: Chart, f: _Frame) -> list[str]:
    out = ['<g class="axes" fill="currentColor">']
    for v in _ticks(chart.x_range, chart.x_bytes):
        x = f.x(v)
        out.append(f'<line x1="{x:.1f}" y1="{f.top}" x2="{x:.1f}" y2="{f.top + f.height}" stroke="currentColor" stroke-opacity="0.12"/>')
        out.append(
            f'<text x="{x:.1f}" y="{f.top + f.height + 16}" text-anchor="middle">'
            f"{escape(_bytes(v) if chart.x_bytes else _number(v))}</text>"
        )
    for v in _ticks(chart.y_range, False):
        y = f.y(v)
        out.append(f'<line x1="{f.left}" y1="{y:.1f}" x2="{f.left + f.width}" y2="{y:.1f}" stroke="currentColor" stroke-opacity="0.12"/>')
        out.append(f'<text x="{f.left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(_number(v))}</text>')
    out.append(
        f'<text class="x-label" x="{f.left + f.width / 2:.1f}" y="{f.top + f.height + 36}" '
        f'text-anchor="middle">{escape(chart.x_label)}</text>'
    )
    out.append(
        f'<text class="y-label" x="{16}" y="{f.top + f.height / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {f.top + f.height / 2:.1f})">{escape(chart.y_label)}</text>'
    )
    out.append("</g>")
    return out


def _ticks(span: tuple[float, float], in_bytes: bool) -> list[float]:
    lo, hi = math.log10(span[0]), math.log10(span[1])
    if in_bytes:
        base, first, last = 2.0, math.ceil(lo / math.log10(2)), math.floor(hi / math.log10(2))
    else:
        base, first, last = 10.0, math.ceil(lo - 1e-9), math.floor(hi + 1e-9)
    step = 1
    while (last - first) / step > 7:
        step *= 2
    return [base**e for e in range(first, last + 1) if e % step == 0]


def _impossible(chart: Chart, f: _Frame, compact: bool) -> list[str]:
    roof = sorted(p for line in chart.lines if line.roof for p in line.points)
    if not roof:
        return []
    pts = [(f.x(x), f.y(y)) for x, y in roof]
    top = f.top - 1
    pts = pts + [(pts[-1][0], top), (pts[0][0], top)]
    out = [
        f'<polygon class="impossible" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" '
        f'fill="{COLOURS["impossible"]}" fill-opacity="0.09"/>'
    ]
    if not compact:
        # Top right: above the roof in both kinds of chart (the compute peak, the envelope's lowest end).
        out.append(
            f'<text class="impossible-label" x="{f.left + f.width - 8}" y="{f.top + 16}" font-size="11" '
            f'text-anchor="end" fill="{COLOURS["impossible"]}">physically impossible above the measured '
            "roof</text>"
        )
    return out


def _lines(chart: Chart, f: _Frame, compact: bool) -> list[str]:
    out = []
    for line in chart.lines:
        pts = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in line.points if x > 0 and y > 0)
        width = (2 if line.binding else 1.2) if compact else (3 if line.binding else 1.6)
        dash = ' stroke-dasharray="6 4"' if line.kind == "launch" else ""
        out.append(
            f'<polyline class="roof {line.kind}{" binding" if line.binding else ""}" points="{pts}" '
            f'fill="none" stroke="{COLOURS[line.kind]}" stroke-width="{width}"{dash}>'
            f"<title>{escape(line.label)}</title></polyline>"
        )
    return out


def _marks(chart: Chart, f: _Frame, compact: bool, uid: str) -> tuple[list[str], list[str]]:
    """The two points and the arrow between them; their labels apart (drawn unclipped)."""
    where: dict[str, tuple[float, float]] = {
        m.role: (f.x(m.x), f.y(m.y)) for m in chart.marks if _finite(m.x) and _finite(m.y) and m.x > 0 and m.y > 0
    }
    out, labels = [], []
    r = 3 if compact else 5
    if "reference" in where and "candidate" in where:
        (x0, y0), (x1, y1) = where["reference"], where["candidate"]
        gap = math.hypot(x1 - x0, y1 - y0)
        if gap > 3 * r:
            # Ends short of both marks so the head stays visible.
            ux, uy = (x1 - x0) / gap, (y1 - y0) / gap
            out.append(
                f'<line class="arrow" x1="{x0 + ux * r:.1f}" y1="{y0 + uy * r:.1f}" x2="{x1 - ux * (r + 1):.1f}" '
                f'y2="{y1 - uy * (r + 1):.1f}" stroke="{COLOURS["candidate"]}" stroke-width="1.5" '
                f'marker-end="url(#{uid}-head)"/>'
            )
    for m in chart.marks:
        if m.role not in where:
            continue
        x, y = where[m.role]
        fill = COLOURS["impossible"] if m.role == "candidate" and chart.impossible else COLOURS[m.role]
        out.append(
            f'<circle class="point {m.role}" cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{fill}" '
            f'stroke="#ffffff" stroke-width="1"><title>{escape(m.label)}</title></circle>'
        )
        if not compact:
            labels.append(_label(m, x, y, f, {k.role: k for k in chart.marks}, where))
    return out, labels


def _side(role: str, label: str, x: float, f: _Frame) -> bool:
    """True: the label goes right of its point. The points share an x: the
    reference's label goes left, the candidate's right, unless that side
    would run past the plot's edge."""
    width = LABEL_PX * len(label)
    if role == "candidate":
        return x + 9 + width <= f.left + f.width
    return x - 9 - width < f.left


def _label(m: Mark, x: float, y: float, f: _Frame, marks: dict[str, Mark], where: dict[str, tuple[float, float]]) -> str:
    """A point's label; on the same side as the reference's and as high, below or above it."""
    right = _side(m.role, m.label, x, f)
    dy = 4.0
    ref = where.get("reference")
    if (
        m.role == "candidate"
        and ref is not None
        and abs(ref[1] - y) < 14
        and _side("reference", marks["reference"].label, ref[0], f) == right
    ):
        dy = 4 + (14 - abs(ref[1] - y)) * (1 if y >= ref[1] else -1)
    anchor, dx = ("start", 9) if right else ("end", -9)
    return (
        f'<text class="label {m.role}" x="{x + dx:.1f}" y="{y + dy:.1f}" text-anchor="{anchor}" '
        f'fill="currentColor">{escape(m.label)}</text>'
    )


def _legend(chart: Chart, f: _Frame) -> list[str]:
    x, y = f.left + f.width + 18, f.top + 6
    out = ['<g class="legend" fill="currentColor">']
    for part in textwrap.wrap(chart.binding, 32)[:3]:
        out.append(f'<text class="binding" x="{x}" y="{y + 4}" font-weight="bold">{escape(part)}</text>')
        y += 16
    y += 10
    for line in chart.lines:
        dash = ' stroke-dasharray="6 4"' if line.kind == "launch" else ""
        out.append(
            f'<line x1="{x}" y1="{y}" x2="{x + 22}" y2="{y}" stroke="{COLOURS[line.kind]}" '
            f'stroke-width="{3 if line.binding else 1.6}"{dash}/>'
        )
        label = line.label
        if all(y > chart.y_range[1] for _, y in line.points):
            label += " (above the chart: it limits nothing here)"
        for i, part in enumerate(textwrap.wrap(label, 30)[:3]):
            out.append(f'<text class="legend-{line.kind}" x="{x + 28}" y="{y + 4 + 14 * i}">{escape(part)}</text>')
        y += 20 + 14 * min(3, len(textwrap.wrap(label, 30)))
    if any(line.roof for line in chart.lines):
        out.append(f'<rect x="{x}" y="{y - 7}" width="22" height="12" fill="{COLOURS["impossible"]}" fill-opacity="0.15"/>')
        out.append(f'<text x="{x + 28}" y="{y + 4}">impossible here</text>')
        y += 26
    for m in chart.marks:
        out.append(f'<circle cx="{x + 11}" cy="{y}" r="5" fill="{COLOURS[m.role]}"/>')
        out.append(f'<text x="{x + 28}" y="{y + 4}">{escape(_short(m.label, 32))}</text>')
        y += 22
    out.append("</g>")
    return out


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _number(v: float) -> str:
    if v >= 1e6 or v < 1e-3:
        return f"1e{round(math.log10(v))}" if abs(math.log10(v) - round(math.log10(v))) < 1e-9 else f"{v:.0e}"
    return f"{v:g}"


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} B"


def _count(n: float) -> str:
    return f"{n:.0f}" if abs(n - round(n)) < 0.05 else f"{n:.1f}"


def _ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.2f} ms"
