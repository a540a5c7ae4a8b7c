"""`sage mcp config` for each client, and what `sage-mcp` says on start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sage_engine.config import Config
from sage_mcp.cli import cli

SAGE_MCP = str(Path(sys.executable).parent / "sage-mcp")


@pytest.mark.parametrize(
    "client, file, key, typed",
    [
        ("claude", ".mcp.json", "mcpServers", True),
        ("cursor", ".cursor/mcp.json", "mcpServers", False),
        ("vscode", ".vscode/mcp.json", "servers", True),
    ],
)
def test_config_launches_this_environments_sage_mcp_with_the_chosen_db(tmp_path, client, file, key, typed):
    db = tmp_path / "proj.db"
    r = CliRunner().invoke(cli, ["mcp", "config", "--client", client, "--db", str(db)])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout)
    entry = printed[key]["sage"]
    assert entry["command"] == SAGE_MCP and Path(entry["command"]).is_absolute()
    assert entry["args"] == ["--db", str(db.resolve())]
    assert ("type" in entry) is typed and entry.get("type", "stdio") == "stdio"

    r = CliRunner().invoke(cli, ["mcp", "config", "--client", client, "--write", "--project", str(tmp_path)])
    assert r.exit_code == 0, r.output
    written = json.loads((tmp_path / file).read_text())
    assert written[key]["sage"]["args"] == []  # no --db: the user-wide database


def test_writing_keeps_other_servers_and_keys_in_the_file(tmp_path):
    path = tmp_path / ".vscode" / "mcp.json"
    path.parent.mkdir()
    path.write_text(
        json.dumps(
            {
                "inputs": [{"id": "k", "type": "promptString"}],
                "servers": {"github": {"type": "http", "url": "https://example.invalid/mcp"}, "sage": {"type": "stdio", "command": "old"}},
            }
        )
    )
    r = CliRunner().invoke(cli, ["mcp", "config", "--client", "vscode", "--write", "--project", str(tmp_path)])
    assert r.exit_code == 0, r.output
    config = json.loads(path.read_text())
    assert config["inputs"] == [{"id": "k", "type": "promptString"}]
    assert config["servers"]["github"]["url"] == "https://example.invalid/mcp"
    assert config["servers"]["sage"]["command"] == SAGE_MCP


def test_a_file_that_is_not_plain_json_is_refused_not_clobbered(tmp_path):
    path = tmp_path / ".mcp.json"
    original = '{\n  // my servers\n  "mcpServers": {}\n}\n'
    path.write_text(original)
    r = CliRunner().invoke(cli, ["mcp", "config", "--client", "claude", "--write", "--project", str(tmp_path)])
    assert r.exit_code == 2 and "not plain JSON" in r.output
    assert path.read_text() == original


def test_a_db_given_to_sage_itself_is_pinned_too(tmp_path):
    db = tmp_path / "team.db"
    r = CliRunner().invoke(cli, ["--db", str(db), "mcp", "config", "--client", "cursor"])
    assert json.loads(r.stdout)["mcpServers"]["sage"]["args"] == ["--db", str(db.resolve())]
    r = CliRunner().invoke(cli, ["mcp", "config", "--client", "cursor"], env={"SAGE_DB": str(db)})
    assert json.loads(r.stdout)["mcpServers"]["sage"]["args"] == []  # the shell's SAGE_DB may not reach the editor


def test_sage_mcp_prints_its_banner_on_stderr_and_keeps_stdout_for_the_protocol(tmp_path):
    db = tmp_path / "m.db"
    r = subprocess.run([SAGE_MCP, "--db", str(db)], input="", capture_output=True, text=True, timeout=60)
    assert r.stdout == ""
    assert str(db) in r.stderr and "claude mcp add" in r.stderr and "--client vscode" in r.stderr
    r = subprocess.run([SAGE_MCP, "--backend", "gpu"], input="", capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "invalid choice" in r.stderr and r.stdout == ""


@pytest.mark.parametrize(
    "client, key, header",
    [
        ("claude", "mcpServers", "Bearer ${SAGE_TOKEN}"),
        ("cursor", "mcpServers", "Bearer ${env:SAGE_TOKEN}"),
        ("vscode", "servers", "Bearer ${input:sage-token}"),
    ],
)
def test_http_config_carries_the_bearer_header_without_the_secret(tmp_path, client, key, header):
    url = "http://127.0.0.1:8765/mcp"
    r = CliRunner().invoke(cli, ["mcp", "config", "--client", client, "--http", url, "--write", "--project", str(tmp_path)])
    assert r.exit_code == 0, r.output
    written = json.loads(next(tmp_path.glob("**/*.json")).read_text())
    entry = written[key]["sage"]
    assert entry["url"] == url and entry["headers"] == {"Authorization": header} and "command" not in entry
    if client == "vscode":
        assert written["inputs"] == [
            {"type": "promptString", "id": "sage-token", "password": True, "description": "SAGE bearer token (`sage serve` prints it)"}
        ]
        again = CliRunner().invoke(cli, ["mcp", "config", "--client", client, "--http", url, "--write", "--project", str(tmp_path)])
        assert again.exit_code == 0 and len(json.loads(next(tmp_path.glob("**/*.json")).read_text())["inputs"]) == 1


def test_http_config_with_a_literal_token_and_a_bad_url(tmp_path):
    r = CliRunner().invoke(cli, ["mcp", "config", "--client", "claude", "--http", "http://h:1/mcp", "--token", "abc"])
    assert r.exit_code == 0 and '"Authorization": "Bearer abc"' in r.output
    bad = CliRunner().invoke(cli, ["mcp", "config", "--client", "claude", "--http", "h:1/mcp"])
    assert bad.exit_code == 2 and "sage serve" in bad.output


@pytest.mark.parametrize("http", [False, True])
def test_claude_gets_a_tool_timeout_past_the_servers_own_wait_and_the_others_none(tmp_path, http):
    # Claude Code's per-server `timeout` (ms) bounds a call that never returns; it
    # must outlast compile_and_bench's default wait_s so the running answer arrives.
    extra = ["--http", "http://127.0.0.1:8765/mcp"] if http else []
    for client, key in (("claude", "mcpServers"), ("cursor", "mcpServers"), ("vscode", "servers")):
        r = CliRunner().invoke(cli, ["mcp", "config", "--client", client, *extra])
        assert r.exit_code == 0, r.output
        entry = json.loads(r.stdout)[key]["sage"]
        if client == "claude":
            assert entry["timeout"] >= 1000 and entry["timeout"] > Config().eval_wait_s * 1000 + 30_000
        else:
            assert "timeout" not in entry
