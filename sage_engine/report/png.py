"""PNGs of SAGE's pictures, drawn by headless Chromium: the browser a
person opens the SVG or the report page in draws it, so the PNG is what they
see. Chromium is found on PATH (`chromium`, `chromium-browser`,
`google-chrome`); without it a PNG cannot be made here and the error says
so (an SVG or HTML file needs nothing). matplotlib is not used: it cannot
draw SVG, and a second renderer would draw a second, different picture."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sage_engine.errors import InvalidInput

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 120.0  # a cold browser start on a loaded two-core machine takes tens of seconds
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def find_chromium() -> str | None:
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def screenshot(html: str, path: Path | str, *, width: int, height: int, browser: str | None = None) -> Path:
    """Draw `html` (a page, or SVG markup) at `width` x `height` CSS pixels into the PNG at `path`."""
    browser = browser or find_chromium()
    if browser is None:
        raise InvalidInput(
            "a PNG is drawn by headless Chromium, and none is on PATH here (apt-get install chromium, "
            "or brew install --cask chromium); write an .svg (or .html) file instead, which needs nothing"
        )
    path = Path(path)
    if html.lstrip().startswith("<svg"):
        # Margins off, so the picture fills the window exactly.
        html = f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">{html}</body></html>'
    with tempfile.TemporaryDirectory(prefix="sage-png-") as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(html, encoding="utf-8")
        out = Path(tmp) / "shot.png"
        args = [
            browser,
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "--force-device-scale-factor=1",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            f"--window-size={width},{height}",
            f"--screenshot={out}",
            page.as_uri(),
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to start as root with its sandbox on
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InvalidInput(f"headless Chromium ({browser}) could not draw the PNG: {exc}") from exc
        if not out.is_file() or out.read_bytes()[:8] != PNG_MAGIC:
            said = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise InvalidInput(f"headless Chromium ({browser}) wrote no PNG (exit {done.returncode}: {said})")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, path)
    return path
