"""Helpers shared by the MCP tests: connecting clients, seeding memory, and a
snapshot of every table to prove a refused call changed nothing."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
from mcp import Client, StdioServerParameters

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import NewItem
from sage_mcp.server import create_server
from tests.conftest import table_rows

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "sage_engine" / "suite" / "tasks"
SILU_CPU = SUITE / "silu" / "solutions" / "cpu_sigmoid_mul.py"
SAGE_MCP = Path(sys.executable).parent / "sage-mcp"

# A candidate that runs and returns the wrong values: `incorrect`, a result.
WRONG_SILU = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)
"""

SILU_LESSONS = [
    ("SiLU: compute sigmoid in float32", "For half inputs upcast to float32, compute sigmoid(x) * x, cast back; avoids fp16 overflow in exp."),
    ("SiLU: fuse sigmoid and multiply in one pass", "Elementwise silu reads x once: sigmoid and the multiply belong in one kernel."),
    ("Softmax: subtract the row max", "Row softmax must subtract the max before exp; the elementwise trick does not apply."),
]


def fast(config: Config, **changes: Any) -> Config:
    """Short timing: these tests check the protocol, not the speed numbers.
    No speedup term in the reward either, so its sign never hangs on a noisy
    timing (a correct kernel then always earns +correct_bonus)."""
    return config.replace(timing_budget_s=0.2, speedup_weight=0.0, **changes)


@contextlib.asynccontextmanager
async def connect(config: Config, *, within: float = 120, **server_kw: Any) -> AsyncIterator[Client]:
    """An in-memory client on a fresh server; the whole session must finish `within` seconds."""
    with anyio.fail_after(within):
        async with Client(create_server(config, **server_kw), raise_exceptions=True) as client:
            yield client


def seed(config: Config, lessons=SILU_LESSONS) -> list[int]:
    with Engine(config) as engine:
        return [engine.add_item(NewItem(title=t, content=c, operator="silu" if "SiLU" in t else "softmax")).item.id
                for t, c in lessons]


def snapshot(config: Config) -> dict[str, list[dict]]:
    """Every row of every table, read through a separate store."""
    with Engine(config) as engine:
        return table_rows(engine)


def stdio_params(config: Config, cwd: Path, **env: str) -> StdioServerParameters:
    """Launch `sage-mcp` as an editor would: the venv's script, a database flag."""
    return StdioServerParameters(
        command=str(SAGE_MCP), args=["--db", config.database, "--quiet"], cwd=str(cwd),
        env={"SAGE_AUTO_CONSOLIDATE_EVERY": "0", "SAGE_TIMING_BUDGET_S": "0.2",
             "SAGE_CACHE_DIR": str(config.cache_dir), "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env},
    )


def text(result) -> str:
    return result.content[0].text if result.content else ""
