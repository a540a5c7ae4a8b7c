"""A real `sage-lsp` subprocess over stdio, driven by pytest-lsp with a chosen
client's capabilities (VS Code unless a test says otherwise), on a real SQLite
file in tmp_path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features
from pygls.protocol import default_converter

from tests.support.engine import share_calibration
from tests.lsp.support import FAST_ENV, TASK, Workspace


@pytest.fixture
def workspace(tmp_path: Path, calibration_dir: Path) -> Workspace:
    share_calibration(tmp_path / ".cache", calibration_dir)
    ws = Workspace(root=tmp_path, db=tmp_path / "memory.db")
    ws.write("double.py", TASK)
    return ws


def _client_factory(ws: Workspace):
    received = ws.received

    def make() -> LanguageClient:
        client = LanguageClient(converter_factory=default_converter)
        # pytest-lsp's own handlers, except configuration: answered below, and recorded.
        register_lsp_features(client, {k: v for k, v in DEFAULT_CLIENT_FEATURES.items() if k != types.WORKSPACE_CONFIGURATION})

        @client.feature(types.WORKSPACE_CONFIGURATION)
        def configuration(ls: LanguageClient, params: types.ConfigurationParams) -> list:
            ws.pulls.put_nowait(params)
            return [ls.get_configuration(section=i.section, scope_uri=i.scope_uri) for i in params.items]

        @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
        def code_lens_refresh(ls: LanguageClient, params: None) -> None:
            received.setdefault("refresh", []).append(params)

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def apply_edit(ls: LanguageClient, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            received.setdefault("edits", []).append(params)
            return types.ApplyWorkspaceEditResult(applied=True)

        @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        def show_message_request(ls: LanguageClient, params: types.ShowMessageRequestParams):
            """Answer as a user would: the action whose title starts with `ws.pick`, or dismiss."""
            received.setdefault("asked", []).append(params)
            return next((a for a in params.actions or [] if ws.pick and a.title.startswith(ws.pick + " ")), None)

        return client

    return make


@pytest_asyncio.fixture
async def start_lsp(workspace: Workspace):
    """Start `sage-lsp` over stdio as a given client would: its capabilities,
    initializationOptions, extra environment and poll period. Every server
    started is shut down and stopped at teardown."""
    started: list[LanguageClient] = []

    async def start(
        capabilities: str = "visual-studio-code",
        *,
        init_options=None,
        env=None,
        poll: float = 0.2,
        configuration=None,
        command: list[str] | None = None,
    ) -> LanguageClient:
        config = ClientServerConfig(
            # As vscode-languageclient starts an executable on the stdio transport: with `--stdio` appended.
            server_command=command
            or [sys.executable, "-m", "sage_mcp.lsp", "--db", str(workspace.db), "--poll-seconds", str(poll), "--stdio"],
            server_env={**os.environ, **FAST_ENV, "SAGE_CACHE_DIR": str(workspace.root / ".cache"), **(env or {})},
            client_factory=_client_factory(workspace),
        )
        client = await config.start()
        started.append(client)
        if configuration is not None:
            client.set_configuration(configuration)
        await client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities(capabilities),
                root_uri=workspace.root.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=workspace.root.as_uri(), name="ws")],
                initialization_options=init_options,
            )
        )
        return client

    yield start
    for client in started:
        if not client.stopped:  # a test may have shut one down itself
            await client.shutdown_session()
            await client.stop()
    for client in started:
        if client.error is not None:
            raise client.error


@pytest_asyncio.fixture
async def lsp(start_lsp):
    """The server as VS Code drives it."""
    return await start_lsp()
