"""Pictures of results: a result's roofline as SVG (`roofline.py`), a suite's
report as one HTML page (`suite_page.py`), and PNGs of either through
headless Chromium (`png.py`). Pure functions of the engine's models, standard
library only: no plotting library, nothing fetched from a network."""

from sage_engine.report.roofline import Chart, chart_for, render_svg, roofline_svg

__all__ = ["Chart", "chart_for", "render_svg", "roofline_svg"]
