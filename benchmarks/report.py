"""What SAGE's pictures cost: milliseconds to draw a result's roofline, and
the size of a suite report page of N rows.

    python benchmarks/report.py --results a.json b.json ... [--rows rows.jsonl] [--names DIR] [--n 100]

`--results`: EvalResults as `sage bench --json` prints them (each result's
chart is drawn 200 times in one process, after a first drawing that pays
the imports; the median per drawing is reported, and the first apart).
`--rows`: a `sage suite check --rows` file. The page of `--n` rows is made
from the real rows given (checked rows, and the results as `suite run`
rows), cycled and renamed after the task folders of `--names` (e.g. an
imported KernelBench level 1) when there are fewer real rows than `--n`:
the page's size depends on its rows' content, not on which task each is.
Prints one JSON object. Goal: under 20 ms a chart; under 1 MB for 100 rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="*", default=[], type=Path)
    ap.add_argument("--rows", type=Path)
    ap.add_argument("--names", type=Path, help="A folder of task directories whose names the cycled rows take")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--page", type=Path, help="Also write the page here")
    args = ap.parse_args()

    start = time.perf_counter()
    from sage_engine.models import EvalResult
    from sage_engine.report import roofline_svg
    from sage_engine.report.suite_page import render_page, row_from_check, row_from_result

    imports_ms = (time.perf_counter() - start) * 1e3

    results = [EvalResult.model_validate_json(p.read_text()) for p in args.results]
    charts = []
    for path, result in zip(args.results, results):
        t0 = time.perf_counter()
        svg = roofline_svg(result)
        first = (time.perf_counter() - t0) * 1e3
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            roofline_svg(result)
            times.append((time.perf_counter() - t0) * 1e3)
        charts.append(
            {
                "result": path.name,
                "task": result.task,
                "first_ms": round(first, 3),
                "median_ms": round(statistics.median(times), 3),
                "max_ms": round(max(times), 3),
                "svg_bytes": len(svg.encode()),
            }
        )

    rows = [row_from_check(json.loads(line)) for line in args.rows.read_text().splitlines()] if args.rows else []
    rows += [row_from_result(r.task, "bundled", p.stem, r) for p, r in zip(args.results, results)]
    page = None
    if rows:
        names = sorted(d.name for d in args.names.iterdir() if (d / "task.json").is_file()) if args.names else []
        cycled = []
        for i in range(args.n):
            row = rows[i % len(rows)].model_copy(deep=True)
            if names:
                row.id = names[i % len(names)]
            elif i >= len(rows):
                row.id = f"{row.id}#{i // len(rows)}"
            cycled.append(row)
        t0 = time.perf_counter()
        text = render_page(cycled, kind="check" if args.rows else "run", backend="cpu")
        page = {
            "rows": len(cycled),
            "real_rows": len(rows),
            "bytes": len(text.encode()),
            "render_ms": round((time.perf_counter() - t0) * 1e3, 1),
            "thumbnails": text.count('class="roofline compact"'),
        }
        if args.page:
            args.page.write_text(text, encoding="utf-8")
    print(json.dumps({"imports_ms": round(imports_ms, 1), "charts": charts, "page": page}, indent=2))


if __name__ == "__main__":
    main()
