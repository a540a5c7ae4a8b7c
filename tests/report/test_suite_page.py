"""A suite's report as a person sees it: one self-contained page, failing
tasks first, the speedups on a log scale, statuses by cause, a roofline
thumbnail per row; rewritten as rows arrive, so a run cut short leaves a
readable page; drawn by headless Chromium."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET

from sage_engine.config import Config
from sage_engine.evaluation.host.tasks import list_suite
from sage_engine.models import EvalResult
from sage_engine.report.png import PNG_MAGIC, find_chromium, screenshot
from sage_engine.report.suite_page import SuitePage, render_page, row_from_check, row_from_result
from sage_engine.suite.check import check_suite

from tests.support.parts import require
from tests.report.charts import result

MATMUL = {"float32": 2.0 * 512**3}


def failed(task: str, status: str, message: str) -> EvalResult:
    return EvalResult(
        status=status, message=message, task=task, backend="cpu", hardware="x86_64-avx2", candidate_hash="0" * 16, duration_s=3.0
    )


def run_rows():
    return [
        row_from_result("leaky_relu", "bundled", "cpu_clamp_parts", result(0.678, 2.39)),
        row_from_result("matmul", "bundled", "cpu_k_panels", result(8.0, 4.0, nbytes=3 << 20, flops=MATMUL)),
        row_from_result("silu", "bundled", "cpu_fast", result(1.0, 0.8, task="silu")),
        row_from_result("gelu", "bundled", "cpu_wrong", failed("gelu", "incorrect", "max abs error 0.3")),
        row_from_result("conv", "bundled", "cpu_npu", failed("conv", "runtime_error", "ModuleNotFoundError: No module named 'torch_npu'")),
    ]


def table_order(page: str) -> list[str]:
    body = page.split("<table class=rows>", 1)[1]
    return re.findall(r"<tr><td>([a-z_]+)(?:<br>|</td>)", body)


def test_the_page_puts_failing_tasks_first_then_the_slowest_and_cannot_run_last():
    page = render_page(run_rows(), kind="run", backend="cpu")
    assert table_order(page) == ["gelu", "leaky_relu", "silu", "matmul", "conv"]
    assert '<span class="badge failed">failed</span>' in page and '<span class="badge cannot_run">cannot run</span>' in page


def test_the_page_summarises_each_benchmark_and_shows_speedups_and_causes_as_pictures():
    rows = run_rows()
    rows[2].benchmark = "kernelbench"
    page = render_page(rows, kind="run", backend="cpu")
    summary = page.split("<h2>Summary by benchmark</h2>", 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<tr><th>(.*?)</th><td", summary) == ["bundled", "kernelbench", "all"]
    histogram = ET.fromstring(re.search(r'<svg[^>]*class="histogram".*?</svg>', page, re.S).group(0))
    bins = [e for e in histogram.iter("{http://www.w3.org/2000/svg}rect") if e.get("class") == "bin"]
    assert sum(int(b.find("{http://www.w3.org/2000/svg}title").text.split()[0]) for b in bins) == 3
    assert "1x" in "".join(histogram.itertext())  # the log axis is marked at 1x
    causes = ET.fromstring(re.search(r'<svg[^>]*class="causes".*?</svg>', page, re.S).group(0))
    labels = "".join(causes.itertext())
    assert "correct" in labels and "failed: incorrect" in labels and "cannot run: needs NPU" in labels


def test_each_profiled_row_carries_a_roofline_thumbnail_with_its_points():
    page = render_page(run_rows(), kind="run", backend="cpu")
    thumbs = re.findall(r'<svg[^>]*class="roofline compact".*?</svg>', page, re.S)
    assert len(thumbs) == 3  # the three correct rows; failures have no profile
    for svg in thumbs:
        roles = {e.get("class") for e in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}circle")}
        assert roles == {"point reference", "point candidate"}
    ids = re.findall(r'id="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_the_page_is_self_contained_and_escapes_what_tasks_say():
    rows = run_rows()
    rows[3].detail = '<img src="http://example.com/x.png"> mismatch'
    page = render_page(rows, kind="run", backend="cpu")
    assert "<script" not in page and 'src="http' not in page and "<link" not in page
    assert "&lt;img src=&quot;http://example.com/x.png&quot;&gt; mismatch" in page


def test_a_hundred_rows_stay_well_under_a_megabyte():
    rows = [row for i in range(20) for row in run_rows()]
    for i, row in enumerate(rows):
        row.id = f"{i}_{row.id}"
    page = render_page(rows, kind="run", backend="cpu")
    assert len(rows) == 100 and len(page.encode()) < 1_000_000


def test_a_check_rewrites_its_page_as_each_row_arrives(tmp_path):
    suite = tmp_path / "suite"
    for tid, forward in (("a_double", "return x * 2"), ("b_relu", "return torch.relu(x)")):
        (suite / tid).mkdir(parents=True)
        (suite / tid / "reference.py").write_text(
            textwrap.dedent(f"""
            import torch
            import torch.nn as nn

            class Model(nn.Module):
                def forward(self, x):
                    {forward}

            def get_inputs():
                return [torch.randn(4, 8)]

            def get_init_inputs():
                return []
            """)
        )
        (suite / tid / "task.json").write_text(json.dumps({"name": tid, "operator": tid, "family": "t", "level": 1}))
    config = Config(
        db_path=tmp_path / "m.db",
        cache_dir=tmp_path / "cache",
        correctness_trials=1,
        timing_budget_s=0.05,
        timing_min_reps=3,
        timing_max_reps=10,
        timing_warmup=1,
    )
    report = tmp_path / "report.html"

    seen = []

    def snapshot(done, total, message):
        # The page is written before progress is told: it already holds this row.
        seen.append(report.read_text())

    check_suite(list_suite(suite), config, backend="cpu", progress=snapshot, report=report)
    assert "in progress: 1 of 2 rows so far" in seen[0] and table_order(seen[0]) == ["a_double"]
    assert "in progress: 2 of 2 rows so far" in seen[1]
    page = report.read_text()
    assert "complete: 2 rows" in page and sorted(table_order(page)) == ["a_double", "b_relu"]
    assert not list(tmp_path.glob(".report.html.*"))  # no temporary file left behind


def test_rows_from_the_check_and_from_its_json_lines_draw_the_same_page(tmp_path):
    check = {
        "id": "x",
        "benchmark": "kernelbench",
        "status": "correct",
        "cause": None,
        "detail": "ok",
        "speedup": 1.01,
        "reference_ms": 1.0,
        "candidate_ms": 0.99,
        "seconds": 12.0,
        "degenerate": None,
        "bound": "memory",
        "share": 0.4,
        "roofline": None,
    }
    row = row_from_check(json.loads(json.dumps(check)))
    assert row.status == "correct" and row.share == 0.4 and row.chart is None
    page = SuitePage(tmp_path / "r.html", kind="check", backend="cpu", total=1)
    page.add(row)
    assert "memory<br>40%" in (tmp_path / "r.html").read_text()
    assert "complete: 1 row" in page.finish().read_text()


def test_headless_chromium_draws_the_page_as_a_png(tmp_path):
    if find_chromium() is None:
        require("chromium", "chromium is not installed (apt-get install -y chromium)")
    path = screenshot(render_page(run_rows(), kind="run", backend="cpu"), tmp_path / "suite.png", width=1200, height=1400)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000
