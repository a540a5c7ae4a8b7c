"""How MCP clients launch SAGE: the stdio command of this environment and the
project files Claude Code, Cursor and VS Code read (`sage mcp config`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from sage_engine.config import Config, is_db_url
from sage_engine.errors import InvalidInput

# File, top-level key and entry shape per client. VS Code names the map
# `servers` and wants an explicit type; Claude Code writes `type` too; Cursor
# accepts it but does not need it.
CLIENTS: dict[str, tuple[str, str, bool]] = {
    "claude": (".mcp.json", "mcpServers", True),
    "cursor": (".cursor/mcp.json", "mcpServers", False),
    "vscode": (".vscode/mcp.json", "servers", True),
}


# The tool-call timeout each client reads from its own entry, in its unit.
# Claude Code reads `timeout` (milliseconds, a hard limit on one call; under
# 1000 is ignored and its default is about 28 hours, so a server that stops
# answering holds an agent that long). 60 s is well past the 25 s that
# compile_and_bench and get_result wait by default (Config.eval_wait_s), so
# their answers always arrive, and a hung call ends within a minute. Cursor
# and VS Code read no such setting (docs/mcp.md says what they do instead).
TOOL_TIMEOUT: dict[str, tuple[str, int]] = {"claude": ("timeout", int((Config.eval_wait_s + 35) * 1000))}


def _with_timeout(client: str, entry: dict[str, Any]) -> dict[str, Any]:
    if client in TOOL_TIMEOUT:
        key, value = TOOL_TIMEOUT[client]
        entry[key] = value
    return entry


def server_command() -> list[str]:
    """The absolute command that starts the stdio server from this
    environment, so a client can launch it without activating the venv."""
    script = Path(sys.executable).parent / ("sage-mcp.exe" if os.name == "nt" else "sage-mcp")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "sage_mcp.mcp"]


def server_args(db: str | Path | None = None, backend: str | None = None) -> list[str]:
    args: list[str] = []
    if db:
        # A URL stays as written; a path is pinned absolute (editors start servers anywhere).
        args += ["--db", str(db) if is_db_url(str(db)) else str(Path(db).expanduser().resolve())]
    if backend:
        args += ["--backend", backend]
    return args


def server_entry(client: str, db: str | Path | None = None, backend: str | None = None) -> dict[str, Any]:
    _, _, typed = _spec(client)
    command, *prefix = server_command()
    entry: dict[str, Any] = {"type": "stdio"} if typed else {}
    entry.update(command=command, args=prefix + server_args(db, backend))
    if client == "claude":
        entry["env"] = {}
    return _with_timeout(client, entry)


# How each client expands a secret at launch, so the token never has to sit in
# a project file: Claude Code reads ${VAR}, Cursor ${env:VAR}, VS Code asks
# once through an `inputs` prompt and keeps the answer in its secret store.
TOKEN_INPUT = "sage-token"


def http_entry(client: str, url: str, *, token: str | None = None, token_env: str = "SAGE_TOKEN") -> dict[str, Any]:
    """An entry that connects to `sage serve` at `url` with its bearer token:
    the literal `token` when given, else a reference the client expands.
    Without the header a client meets a 401 and drifts into an OAuth flow."""
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"--http takes the URL `sage serve` prints (http://host:port/mcp), got {url!r}")
    _, _, typed = _spec(client)
    if token is None:
        token = {"claude": f"${{{token_env}}}", "cursor": f"${{env:{token_env}}}", "vscode": f"${{input:{TOKEN_INPUT}}}"}[client]
    entry: dict[str, Any] = {"type": "http"} if typed else {}
    entry.update(url=url, headers={"Authorization": f"Bearer {token}"})
    return _with_timeout(client, entry)


def config_path(client: str, project: str | Path = ".") -> Path:
    return Path(project).expanduser().resolve() / _spec(client)[0]


def merged_config(client: str, existing: dict[str, Any] | None, entry: dict[str, Any], name: str = "sage") -> dict[str, Any]:
    """`existing` with our server set under the client's key; every other
    server and top-level key (VS Code `inputs`, ...) is kept as it was."""
    _, key, _ = _spec(client)
    config = dict(existing or {})
    servers = config.get(key, {})
    if not isinstance(servers, dict):
        raise InvalidInput(f"the existing config's {key!r} is not an object; fix the file by hand")
    config[key] = {**servers, name: entry}
    if client == "vscode" and f"${{input:{TOKEN_INPUT}}}" in json.dumps(entry):
        inputs = config.get("inputs", [])
        if not isinstance(inputs, list):
            raise InvalidInput("the existing config's 'inputs' is not a list; fix the file by hand")
        if not any(isinstance(i, dict) and i.get("id") == TOKEN_INPUT for i in inputs):
            inputs = [
                *inputs,
                {"type": "promptString", "id": TOKEN_INPUT, "password": True, "description": "SAGE bearer token (`sage serve` prints it)"},
            ]
        config["inputs"] = inputs
    return config


def write_config(client: str, entry: dict[str, Any], project: str | Path = ".", name: str = "sage") -> Path:
    path = config_path(client, project)
    existing = None
    if path.exists():
        text = path.read_text(encoding="utf-8")
        try:
            existing = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            # VS Code tolerates comments in mcp.json; rewriting such a file
            # would drop them, so refuse rather than clobber.
            raise InvalidInput(
                f"{path} is not plain JSON ({exc.msg} at line {exc.lineno}); remove comments or trailing "
                "commas, or add the printed entry by hand"
            ) from exc
        if not isinstance(existing, dict):
            raise InvalidInput(f"{path} does not hold a JSON object; fix or remove it")
    config = merged_config(client, existing, entry, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # an interrupted write never leaves a half file under the real name
    return path


def connect_hint(db: str | Path | None = None) -> str:
    """Lines for the stdio banner: how each client connects to this server."""
    command = " ".join(server_command() + server_args(db))
    return (
        f"  Claude Code: claude mcp add --transport stdio --scope project sage -- {command}\n"
        "  Cursor:      sage mcp config --client cursor --write   (writes .cursor/mcp.json)\n"
        "  VS Code:     sage mcp config --client vscode --write   (writes .vscode/mcp.json)"
    )


def _spec(client: str) -> tuple[str, str, bool]:
    try:
        return CLIENTS[client]
    except KeyError:
        raise InvalidInput(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}") from None
