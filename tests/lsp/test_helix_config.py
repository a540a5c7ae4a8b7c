"""The helix `languages.toml` in docs/editor.md, and the one `sage lsp config
--editor helix` prints, checked without a helix binary (helix is not
packaged for Debian 12): each parses as TOML, uses only keys helix documents
(docs.helix-editor.com/languages.html), and the server line it configures
starts `sage-lsp` and accepts its `config` the way helix sends it (as
initializationOptions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from tests.lsp.support import GOOD, open_doc

# Python 3.11 reads TOML itself; on 3.10 these tests need tomli.
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "editor.md"
FIRST_LINE = "# sage-lsp for helix (23.10 and later)"
# Keys helix documents for [language-server.<name>] and [[language]] (23.10 on).
SERVER_KEYS = {"command", "args", "config", "timeout", "environment", "required-root-patterns"}
LANGUAGE_KEYS = {
    "name",
    "language-id",
    "scope",
    "injection-regex",
    "file-types",
    "shebangs",
    "roots",
    "auto-format",
    "diagnostic-severity",
    "comment-tokens",
    "comment-token",
    "block-comment-tokens",
    "indent",
    "language-servers",
    "grammar",
    "formatter",
    "soft-wrap",
    "text-width",
    "rulers",
    "workspace-lsp-roots",
    "persistent-diagnostic-sources",
    "auto-pairs",
    "debugger",
}


def documented_config() -> dict:
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(FIRST_LINE + "\n")]
    return tomllib.loads(block)


def printed_config(*args: str) -> dict:
    sage = Path(sys.executable).with_name("sage")
    printed = subprocess.run([str(sage), "lsp", "config", "--editor", "helix", *args], capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    return tomllib.loads(printed.stdout)


def check_keys(config: dict) -> None:
    assert set(config) == {"language-server", "language"}
    server = config["language-server"]["sage"]
    assert set(server) <= SERVER_KEYS and isinstance(server["command"], str)
    assert all(isinstance(a, str) for a in server["args"]) and isinstance(server["config"], dict)
    languages = {entry["name"]: entry for entry in config["language"]}
    assert set(languages) == {"python", "cpp"}
    for entry in languages.values():
        assert set(entry) <= LANGUAGE_KEYS
        assert "sage" in entry["language-servers"]  # the name of the [language-server.sage] table


def test_the_helix_configuration_uses_only_keys_helix_documents():
    check_keys(documented_config())


def test_the_printed_helix_configuration_names_this_sage_lsp_by_its_absolute_path(tmp_path):
    config = printed_config("--db", str(tmp_path / "m.db"), "--backend", "triton")
    check_keys(config)
    server = config["language-server"]["sage"]
    assert server["command"] == str(Path(sys.executable).with_name("sage-lsp"))
    assert server["args"] == ["--db", str((tmp_path / "m.db").resolve()), "--backend", "triton", "--poll-seconds", "3"]
    assert server["config"] == documented_config()["language-server"]["sage"]["config"]


async def code_action_and_hover(lsp, workspace) -> None:
    assert lsp.messages == []  # the config was accepted: no warning about a setting
    uri = open_doc(lsp, workspace.write("kernels/good.py", GOOD))
    at = types.Range(start=types.Position(line=6, character=0), end=types.Position(line=6, character=0))
    (action,) = await lsp.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=at, context=types.CodeActionContext(diagnostics=[])
        )
    )
    assert action.command == "sage.benchmark"  # helix's `space a` offers the benchmark
    hover = await lsp.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=8))
    )
    assert "`ModelNew` (candidate module)" in hover.contents.value


async def test_the_helix_server_line_starts_sage_lsp_and_accepts_its_config(start_lsp, workspace):
    server = documented_config()["language-server"]["sage"]
    executable = Path(sys.executable).with_name(server["command"])
    assert executable.is_file(), f"{server['command']} is not installed beside {sys.executable}"
    # The documented args on the documented command (what helix runs), plus the test's database.
    lsp = await start_lsp("neovim", init_options=server["config"], command=[str(executable), *server["args"], "--db", str(workspace.db)])
    await code_action_and_hover(lsp, workspace)


async def test_the_printed_helix_server_line_starts_as_it_is(start_lsp, workspace):
    server = printed_config("--db", str(workspace.db))["language-server"]["sage"]
    # Exactly what helix would run: the database is pinned in the printed args.
    lsp = await start_lsp("neovim", init_options=server["config"], command=[server["command"], *server["args"]])
    await code_action_and_hover(lsp, workspace)
