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
from sage_mcp.mcp.server import create_server
from tests.support.engine import table_rows

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
    (
        "SiLU: compute sigmoid in float32",
        "For half inputs upcast to float32, compute sigmoid(x) * x, cast back; avoids fp16 overflow in exp.",
    ),
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
        return [engine.add_item(NewItem(title=t, content=c, operator="silu" if "SiLU" in t else "softmax")).item.id for t, c in lessons]


def snapshot(config: Config) -> dict[str, list[dict]]:
    """Every row of every table, read through a separate store."""
    with Engine(config) as engine:
        return table_rows(engine)


def stdio_params(config: Config, cwd: Path, **env: str) -> StdioServerParameters:
    """Launch `sage-mcp` as an editor would: the venv's script, a database flag."""
    return StdioServerParameters(
        command=str(SAGE_MCP),
        args=["--db", config.database, "--quiet"],
        cwd=str(cwd),
        env={
            "SAGE_AUTO_CONSOLIDATE_EVERY": "0",
            "SAGE_TIMING_BUDGET_S": "0.2",
            "SAGE_CACHE_DIR": str(config.cache_dir),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            # A stdio server gets no environment of the test's: the tests' wait, as tests/conftest.py sets it.
            "SAGE_EVAL_WAIT_S": os.environ.get("SAGE_EVAL_WAIT_S", "600"),
            **env,
        },
    )


def text(result) -> str:
    return result.content[0].text if result.content else ""


# A value of the wrong JSON type for each schema type.
WRONG_VALUE = {"string": 5, "integer": "x", "number": "x", "boolean": "maybe", "array": "x", "object": 5}
# What a validator's own report carries and a caller cannot act on.
VALIDATOR_INTERNALS = (
    "validation error",
    "Arguments",
    "[type=",
    "input_value",
    "input_type",
    "pydantic",
    "For further information",
    "Input should",
)


def schema_violations(tools) -> list[tuple[str, str, dict]]:
    """(tool, parameter, arguments) for every listed tool that has
    parameters: its first required parameter (else its first) of the wrong
    type, every other required one left out of the way with a valid value."""
    calls = []
    for tool in tools:
        props = tool.input_schema.get("properties", {})
        if not props:
            continue
        required = tool.input_schema.get("required", [])
        param = required[0] if required else next(iter(props))
        kind = props[param].get("type") or next(o["type"] for o in props[param]["anyOf"] if o["type"] != "null")
        args = {name: ("x" if props[name].get("type") == "string" else 1) for name in required}
        calls.append((tool.name, param, {**args, param: WRONG_VALUE[kind]}))
    return calls


def assert_phrased(tool: str, param: str, message: str) -> None:
    """A schema violation says which parameter and what it must be, as an
    `invalid_input` refusal, with nothing of the validator's own report."""
    assert message.startswith(f"Error executing tool {tool}: invalid_input: {param} must be "), message
    assert "; got " in message, message
    assert not [w for w in VALIDATOR_INTERNALS if w in message], message


async def assert_every_schema_error_phrased(client) -> None:
    """Every tool's schema violation, through `client`, comes back in the words of its parameters."""
    calls = schema_violations((await client.list_tools()).tools)
    assert len(calls) >= 10
    for tool, param, arguments in calls:
        r = await client.call_tool(tool, arguments)
        assert r.is_error
        assert_phrased(tool, param, text(r))
    r = await client.call_tool("retrieve_rules", {"task": "silu", "k": 0})
    assert text(r) == "Error executing tool retrieve_rules: invalid_input: k must be between 1 and 50; got 0"
