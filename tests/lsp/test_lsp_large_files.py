"""A 50k-line candidate open beside a small one, over real stdio: the large
file costs nothing per request, and the small file's lenses and hover stay
fast while the idle check runs every 0.2 s (benchmarks/lsp_latency.py has
the timing over several seconds)."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.lsp.support import GOOD, execute, lenses, open_doc

LINES = 50_000
# What this test tells apart: before per-version caching the p95 was over
# 1 s with a 0.2 s poll (each poll re-parsed the file); with it, 2-10 ms on
# a loaded 2-core machine. The bound sits between the two, far from both, as
# the test shares the machine with the rest of the suite; the latency target
# itself (50 ms) is measured by benchmarks/lsp_latency.py.
P95_MS = 250
REQUESTS = 40
# Requests spread over several poll periods, as a user's are: back-to-back
# ones would all fit between two polls and never meet the idle work.
SPACING_S = 0.05


def _large(lines: int) -> str:
    """A candidate of `lines` lines: ModelNew, then many small helpers."""
    body = [f"def helper_{n}(x):\n    return x * {n % 97} + {n}" for n in range((lines - 8) // 2)]
    return GOOD + "\n".join(body) + "\n"


def _hover(uri: str, line: int) -> types.HoverParams:
    return types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=8))


async def _timed_ms(request) -> float:
    t0 = time.perf_counter()
    await request
    return (time.perf_counter() - t0) * 1e3


def _p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * len(values))]


async def test_a_file_over_the_candidate_limit_gets_no_lens_hover_or_benchmark(start_lsp, workspace):
    lsp = await start_lsp("neovim")
    big = _large(LINES)
    assert len(big) > 400_000  # over Config.max_candidate_chars by default
    uri = open_doc(lsp, workspace.write("kernels/big.py", big))
    assert await lenses(lsp, uri) == []  # no benchmark lens that would be refused
    assert await lsp.text_document_hover_async(_hover(uri, 5)) is None
    with pytest.raises(JsonRpcException, match=r"big.py has 1,\d{3},\d{3} characters; SAGE evaluates candidates of up to 400,000"):
        await execute(lsp, "sage.benchmark", uri)
    (note,) = [m for m in lsp.log_messages if "big.py" in m.message]
    assert "over the 400,000-character candidate limit" in note.message


async def test_lens_and_hover_on_another_file_stay_fast_while_a_large_file_is_open(start_lsp, workspace):
    # The limit raised so the large file is analysed (line by line) and checked by every poll.
    lsp = await start_lsp("neovim", poll=0.2, env={"SAGE_MAX_CANDIDATE_CHARS": "2000000"})
    big_uri = open_doc(lsp, workspace.write("kernels/big.py", _large(LINES)))
    small_uri = open_doc(lsp, workspace.write("kernels/small.py", GOOD))
    (big_lens,) = await lenses(lsp, big_uri)
    assert big_lens.command.title == "SAGE: benchmark vs double.py" and big_lens.range.start.line == 5

    lens_ms, hover_ms = [], []
    for _ in range(REQUESTS):
        lens_ms.append(await _timed_ms(lenses(lsp, small_uri)))
        hover_ms.append(await _timed_ms(lsp.text_document_hover_async(_hover(small_uri, 5))))
        await asyncio.sleep(SPACING_S)  # pacing, not synchronisation: see SPACING_S
    # Requests on the large file itself are answered from the cache too.
    again_ms = [await _timed_ms(lenses(lsp, big_uri)) for _ in range(5)]
    report = (
        f"lens p50 {statistics.median(lens_ms):.1f} p95 {_p95(lens_ms):.1f} ms; hover p50 "
        f"{statistics.median(hover_ms):.1f} p95 {_p95(hover_ms):.1f} ms; large-file lens p50 "
        f"{statistics.median(again_ms):.1f} ms"
    )
    assert _p95(lens_ms) <= P95_MS and _p95(hover_ms) <= P95_MS, report
    assert statistics.median(again_ms) <= P95_MS, report
