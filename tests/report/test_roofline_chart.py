"""A result's roofline as a person sees it: the SVG's structure (both points,
the roofs, the labels, finite coordinates, points inside the plot) for each
kind of result, and the picture headless Chromium draws of it."""

from __future__ import annotations

import time

import pytest

from sage_engine.report import chart_for, render_svg, roofline_svg
from sage_engine.report.png import PNG_MAGIC, find_chromium, screenshot

from tests.support.parts import require
from tests.report.charts import finite, parse, plot_box, points, result, roofs, texts

MATMUL = {"float32": 2.0 * 512**3}


def inside(point: tuple[float, float], box: tuple[float, float, float, float]) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def test_a_matmul_is_drawn_under_its_bandwidth_slope_and_matmul_peak_with_both_points_inside():
    r = result(8.0, 4.0, nbytes=3 * 512 * 512 * 4, flops=MATMUL)
    svg = roofline_svg(r)
    root = parse(svg)
    assert root.get("data-mode") == "roofline" and finite(svg)
    box = plot_box(root)
    found = points(root)
    assert set(found) == {"reference", "candidate"} and all(inside(p, box) for p in found.values())
    assert found["candidate"][1] < found["reference"][1]  # twice as fast: higher on the chart
    assert {"memory", "compute"} <= set(roofs(root))
    assert any(e.get("class") == "arrow" for e in root.iter("{http://www.w3.org/2000/svg}line"))
    words = " ".join(texts(root))
    assert "arithmetic intensity (FLOP per byte moved)" in words and "achieved GFLOP/s" in words
    assert "matmul peak 90.0 GFLOP/s" in words and "binding: matmul peak" in words
    assert "reference 8.00 ms" in words and "candidate 4.00 ms (2.00x)" in words
    assert "physically impossible above the measured roof" in words


def test_the_binding_roof_is_the_one_drawn_heavier():
    r = result(8.0, 4.0, nbytes=3 * 512 * 512 * 4, flops=MATMUL)
    assert r.profile.bound == "compute"
    lines = roofs(parse(roofline_svg(r)))
    assert "binding" in lines["compute"].get("class") and "binding" not in lines["memory"].get("class")


def test_an_element_wise_call_without_flops_is_drawn_as_bandwidth_against_working_set():
    r = result(0.678, 2.39)
    chart = chart_for(r)
    assert chart.mode == "bandwidth" and chart.x_bytes
    svg = render_svg(chart)
    root = parse(svg)
    assert finite(svg) and set(points(root)) == {"reference", "candidate"}
    assert all(inside(p, plot_box(root)) for p in points(root).values())
    assert "memory" in roofs(root) and "binding: memory bandwidth" in " ".join(texts(root))
    assert "bytes one call moves (inputs plus outputs)" in texts(root) and "16 MiB" in texts(root)
    assert any("no FLOP formula counts this call's work" in t for t in texts(root, "note"))
    # The envelope drawn is the one the share was read from.
    assert chart.lines[0].points and max(y for _, y in chart.lines[0].points) == pytest.approx(90.0)


def test_a_latency_bound_call_names_its_launch_ceiling_as_the_limit():
    r = result(0.004, 0.0076, nbytes=512, ops=(1, 2))
    assert r.profile.bound == "latency"
    root = parse(roofline_svg(r))
    lines = roofs(root)
    assert "binding" in lines["launch"].get("class") and lines["launch"].get("stroke-dasharray")
    assert "binding: launches (2 x 2.4 µs a call)" in " ".join(texts(root, "binding"))
    assert all(inside(p, plot_box(root)) for p in points(root).values())


def test_without_measured_limits_the_chart_still_renders_and_says_so():
    r = result(1.0, 0.5, limits=None)
    svg = roofline_svg(r)
    root = parse(svg)
    assert finite(svg) and not roofs(root) and set(points(root)) == {"reference", "candidate"}
    assert any("no measured limits for this host" in t for t in texts(root, "note"))
    assert "binding: unknown (no measured limits)" in " ".join(texts(root, "binding"))


def test_a_result_without_a_profile_renders_an_empty_chart_that_says_why():
    r = result(1.0, 0.5, profiled=False)
    svg = roofline_svg(r)
    root = parse(svg)
    assert root.get("data-mode") == "empty" and not points(root) and finite(svg)
    assert any("no profile: only a correct, timed candidate" in t for t in texts(root, "note"))


def test_an_impossible_candidate_sits_in_the_shaded_region_and_the_chart_says_why():
    # 16 MiB in 0.05 ms is 335 GB/s against 17 measured: it skipped its reads.
    r = result(2.0, 0.05)
    assert r.profile.impossible
    root = parse(roofline_svg(r))
    cand = next(e for e in root.iter("{http://www.w3.org/2000/svg}circle") if e.get("class") == "point candidate")
    assert cand.get("fill") == "#d62728"
    assert any(t.startswith("impossible: its time implies") for t in texts(root, "note"))
    assert inside(points(root)["candidate"], plot_box(root))


def test_the_svg_holds_no_style_or_script_a_webview_policy_would_block():
    for r in (result(4.0, 2.0, flops=MATMUL), result(0.678, 2.39), result(1.0, 0.5, profiled=False)):
        svg = render_svg(chart_for(r), standalone=False)
        assert "style=" not in svg and "<style" not in svg and "<script" not in svg and 'href="http' not in svg
        assert '#ffffff"/>' not in svg.split("<g", 1)[0]  # inline: no white background under a dark theme


def test_task_names_are_escaped_in_the_markup():
    r = result(1.0, 0.5, task='<script>alert("x")</script>')
    svg = roofline_svg(r)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    parse(svg)


def test_two_charts_on_one_page_keep_their_ids_apart():
    a, b = render_svg(chart_for(result(1.0, 0.5)), compact=True), render_svg(chart_for(result(1.0, 0.25)), compact=True)
    ids = lambda svg: {e.get("id") for e in parse(svg).iter() if e.get("id")}  # noqa: E731
    assert ids(a) and not ids(a) & ids(b)


def test_a_chart_renders_in_well_under_twenty_milliseconds():
    r = result(4.0, 2.0, flops=MATMUL)
    roofline_svg(r)
    start = time.perf_counter()
    for _ in range(20):
        roofline_svg(r)
    assert (time.perf_counter() - start) / 20 < 0.02


def test_headless_chromium_draws_the_chart_as_a_png(tmp_path):
    if find_chromium() is None:
        require("chromium", "chromium is not installed (apt-get install -y chromium)")
    svg = roofline_svg(result(8.0, 4.0, nbytes=3 * 512 * 512 * 4, flops=MATMUL))
    root = parse(svg)
    path = screenshot(svg, tmp_path / "roofline.png", width=int(root.get("width")), height=int(root.get("height")))
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (int(root.get("width")), int(root.get("height")))
    assert len(data) > 10_000  # a drawn picture, not a blank page
