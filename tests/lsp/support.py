"""Shared pieces of the language-server tests: a tiny task, candidates, helpers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

from sage_engine.config import Config

# A task small enough that an evaluation takes a second or two on one core.
TASK = """import torch
import torch.nn as nn

batch_size = 8
dim = 256
dtype = torch.float32

SAGE_TASK = {"name": "Double plus one", "operator": "double_plus_one", "family": "elementwise", "level": 1,
             "description": "y = 2x + 1 elementwise."}


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []
"""

GOOD = """# sage: task=../double.py
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.add(x + x, 1)
"""

# Off by one on purpose: the harness must report a mismatch.
WRONG = GOOD.replace("torch.add(x + x, 1)", "x + x")

# Fast settings for the evaluation child: the flow is under test, not the timing.
FAST_ENV = {
    "SAGE_CORRECTNESS_TRIALS": "1",
    "SAGE_TIMING_BUDGET_S": "0.05",
    "SAGE_TIMING_MIN_REPS": "3",
    "SAGE_TIMING_WARMUP": "1",
    "SAGE_AUTO_CONSOLIDATE_EVERY": "0",
}


@dataclass
class Workspace:
    root: Path
    db: Path
    received: dict[str, list] = field(default_factory=dict)
    pick: str | None = None  # the task a "user" picks when the server offers the list
    pulls: asyncio.Queue = field(default_factory=asyncio.Queue)  # configuration requests, as they arrive

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def config(self) -> Config:
        """The same database and settings the server uses, for evaluating
        'from another process' (as an agent over MCP would)."""
        return Config.from_env(
            {**FAST_ENV},
            db_path=self.db,
            cache_dir=self.root / ".cache",
            candidate_roots=str(self.root),
        )


def open_doc(client: LanguageClient, path: Path, text: str | None = None, language: str = "python") -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=path.read_text() if text is None else text)
        )
    )
    return uri


async def lenses(client: LanguageClient, uri: str) -> list[types.CodeLens]:
    return list(await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))) or [])


async def execute(client: LanguageClient, command: str, *arguments):
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=command, arguments=list(arguments)))
