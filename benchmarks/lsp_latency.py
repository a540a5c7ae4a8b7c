"""Lens and hover latency of `sage-lsp` on a small file, alone and while a
large file is open, over real stdio.

    python -m benchmarks.lsp_latency [--lines 50000] [--seconds 15] [--poll 3] [--max-candidate-chars N]

Starts `sage-lsp` as an editor would (a subprocess on a fresh database) with
the given poll period, opens a small candidate, and times
`textDocument/codeLens` and `textDocument/hover` on it every 25 ms for
--seconds: first alone, then with a --lines-line candidate open beside it (its
own lens requested once, as an editor does on open, and timed). Requests are
spread over several poll periods so the idle work the server does for the
large file shows up in the small file's latency. Prints p50/p95/max in ms and
the server's CPU seconds per phase. The 50k-line file is over the default
candidate size limit, so the server skips it; --max-candidate-chars 2000000
makes the server analyse it (line by line, as it does any file over
kernels.PARSE_MAX_CHARS).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from benchmarks.retrieval import pct

TASK = """import torch
import torch.nn as nn

SAGE_TASK = {"name": "Double plus one", "operator": "double_plus_one", "family": "elementwise", "level": 1}


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return []
"""

SMALL = """# sage: task=double.py
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.add(x + x, 1)
"""


def large_source(lines: int) -> str:
    """A candidate of `lines` lines: ModelNew plus many small helpers (about
    20 characters a line, as generated kernels are)."""
    out = [SMALL]
    n = 0
    while len(out) < lines // 2:
        out.append(f"def helper_{n}(x):\n    return x * {n % 97} + {n}")
        n += 1
    return "\n".join(out) + "\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks at USER_HZ=100


async def timed(fn) -> float:
    t0 = time.perf_counter()
    await fn()
    return (time.perf_counter() - t0) * 1e3


async def sample(client, uri: str, seconds: float) -> dict[str, list[float]]:
    doc = types.TextDocumentIdentifier(uri=uri)
    out: dict[str, list[float]] = {"lens": [], "hover": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out["lens"].append(await timed(lambda: client.text_document_code_lens_async(types.CodeLensParams(text_document=doc))))
        out["hover"].append(
            await timed(
                lambda: client.text_document_hover_async(types.HoverParams(text_document=doc, position=types.Position(line=5, character=8)))
            )
        )
        await asyncio.sleep(0.025)  # load shaping: spread requests over several poll periods
    return out


def open_doc(client, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )
    return uri


def report(name: str, values: list[float]) -> None:
    print(
        f"  {name:6s} n={len(values):4d}  p50 {statistics.median(values):7.1f} ms  p95 {pct(values, 0.95):7.1f} ms"
        f"  p99 {pct(values, 0.99):7.1f} ms  max {max(values):7.1f} ms"
    )


async def main(lines: int, seconds: float, poll: float, max_chars: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "double.py").write_text(TASK)
        small, large = root / "small.py", root / "large.py"
        small.write_text(SMALL)
        big = large_source(lines)
        large.write_text(big)
        config = ClientServerConfig(
            server_command=[sys.executable, "-m", "sage_mcp.lsp", "--db", str(root / "memory.db"), "--poll-seconds", str(poll)],
            server_env={**os.environ, **({"SAGE_MAX_CANDIDATE_CHARS": str(max_chars)} if max_chars else {})},
        )
        client = await config.start()
        await client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("neovim"),
                root_uri=root.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="ws")],
            )
        )
        pid = client._server.pid
        try:
            uri = open_doc(client, small, SMALL)
            await sample(client, uri, 1.0)  # warm: imports, the engine, SQLite's page cache

            async def measure(title: str) -> None:
                print(title)
                cpu0 = cpu_seconds(pid)
                for name, values in (await sample(client, uri, seconds)).items():
                    report(name, values)
                print(f"  server CPU {cpu_seconds(pid) - cpu0:.2f} s")

            await measure(f"small file alone ({seconds:g} s, poll {poll:g} s):")

            large_uri = open_doc(client, large, big)
            doc = types.TextDocumentIdentifier(uri=large_uri)
            first = await timed(lambda: client.text_document_code_lens_async(types.CodeLensParams(text_document=doc)))
            again = await timed(lambda: client.text_document_code_lens_async(types.CodeLensParams(text_document=doc)))
            print(f"large file ({lines} lines, {len(big)} chars): first lens {first:.1f} ms, again {again:.1f} ms")
            await measure(f"small file with the large file open ({seconds:g} s):")
        finally:
            await client.shutdown_session()
            await client.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--poll", type=float, default=3.0)
    parser.add_argument("--max-candidate-chars", type=int, help="SAGE_MAX_CANDIDATE_CHARS for the server")
    args = parser.parse_args()
    asyncio.run(main(args.lines, args.seconds, args.poll, args.max_candidate_chars))
