"""A real `sage-lsp` subprocess over stdio, driven by pytest-lsp with VS Code's
client capabilities, on a real SQLite file in tmp_path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

from tests.lsp.support import FAST_ENV, TASK, Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(root=tmp_path, db=tmp_path / "memory.db")
    ws.write("double.py", TASK)
    return ws


def _client_factory(received: dict[str, list]):
    def make() -> LanguageClient:
        client = make_test_lsp_client()

        @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
        def code_lens_refresh(ls: LanguageClient, params: None) -> None:
            received.setdefault("refresh", []).append(params)

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def apply_edit(ls: LanguageClient, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            received.setdefault("edits", []).append(params)
            return types.ApplyWorkspaceEditResult(applied=True)

        return client

    return make


@pytest_asyncio.fixture
async def lsp(workspace: Workspace):
    env = {**os.environ, **FAST_ENV, "SAGE_CACHE_DIR": str(workspace.root / ".cache")}
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "sage_mcp.lsp", "--db", str(workspace.db), "--poll-seconds", "0.2"],
        server_env=env,
        client_factory=_client_factory(workspace.received),
    )
    client = await config.start()
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=workspace.root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.root.as_uri(), name="ws")],
        )
    )
    yield client
    await client.shutdown_session()
    await client.stop()
    if client.error is not None:
        raise client.error
