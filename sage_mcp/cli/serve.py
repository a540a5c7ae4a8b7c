"""`sage serve` (MCP over HTTP), `sage mcp config` (client setup files) and
`sage lsp config` (editor setup)."""

from __future__ import annotations

import json

import click

from sage_engine.config import BACKENDS
from sage_mcp.cli.common import State, err_console, handle_errors, pass_state
from sage_mcp.lsp.clients import EDITORS, editor_config, lsp_command, where
from sage_mcp.mcp.clients import CLIENTS, config_path, http_entry, merged_config, server_entry, write_config


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind; loopback unless --allow-remote.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host (the token is still required).")
@click.option("--token-file", type=click.Path(dir_okay=False), help="Bearer token file (default: next to the database).")
@click.option(
    "--tokens",
    "tokens_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Team tokens: one 'NAME TOKEN' line per person (mode 0600); each call records its NAME.",
)
@pass_state
@handle_errors
def serve(state: State, host: str, port: int, allow_remote: bool, token_file: str | None, tokens_file: str | None) -> None:
    """Serve SAGE's MCP tools over streamable HTTP at /mcp.

    Every request needs `Authorization: Bearer <token>`; the token is created
    on first start (mode 0600) and printed on stderr. Editors that launch
    servers themselves should use the stdio command `sage-mcp` instead.
    """
    from sage_mcp.mcp.http import serve as serve_http
    from sage_mcp.mcp.server import check_executor

    check_executor(state.config)
    serve_http(state.config, host=host, port=port, allow_remote=allow_remote, token_file=token_file, tokens_file=tokens_file)


@click.group()
def mcp() -> None:
    """Connect MCP clients (Claude Code, Cursor, VS Code) to SAGE."""


@mcp.command("config")
@click.option("--client", "client", type=click.Choice(sorted(CLIENTS)), required=True, help="Which client's file.")
@click.option("--write", is_flag=True, help="Merge into the project's file instead of printing it.")
@click.option("--db", type=click.Path(dir_okay=False), help="Pin this memory database (default: the user-wide one).")
@click.option("--backend", type=click.Choice(BACKENDS), help="Pin a default evaluation backend.")
@click.option("--project", default=".", show_default=True, type=click.Path(file_okay=False), help="Project root for --write.")
@click.option("--name", default="sage", show_default=True, help="Server name in the client's config.")
@click.option("--http", "http_url", help="Connect to a running `sage serve` at this URL instead of launching sage-mcp.")
@click.option(
    "--token",
    help="With --http: write this bearer token into the file (default: a reference the client "
    "expands: ${SAGE_TOKEN} for Claude Code, ${env:SAGE_TOKEN} for Cursor, a password prompt in VS Code).",
)
@click.pass_context
@handle_errors
def mcp_config(
    ctx: click.Context,
    client: str,
    write: bool,
    db: str | None,
    backend: str | None,
    project: str,
    name: str,
    http_url: str | None,
    token: str | None,
) -> None:
    """Print (or --write) the MCP config that launches `sage-mcp` for a client.

    The command is the absolute path of this environment's `sage-mcp`, so the
    client needs no activated virtualenv. --write keeps every other server
    already in the file.
    """
    db = _pinned_db(ctx, db)
    if http_url:
        entry = http_entry(client, http_url, token=token)
        if token:
            err_console.print("# the file now holds the token: keep it out of version control", highlight=False)
    else:
        entry = server_entry(client, db=db, backend=backend)
    if write:
        path = write_config(client, entry, project, name)
        err_console.print(f"wrote server {name!r} to {path}", highlight=False)
        return
    click.echo(json.dumps(merged_config(client, None, entry, name), indent=2))
    err_console.print(f"# save as {config_path(client, project)} (or run again with --write)", highlight=False)


@click.group()
def lsp() -> None:
    """Connect editors (neovim, helix) to SAGE's language server."""


@lsp.command("config")
@click.option("--editor", type=click.Choice(EDITORS), required=True, help="Which editor's configuration.")
@click.option("--db", type=click.Path(dir_okay=False), help="Pin this memory database (default: the user-wide one).")
@click.option("--backend", type=click.Choice(BACKENDS), help="Pin a default evaluation backend.")
@click.pass_context
@handle_errors
def lsp_config(ctx: click.Context, editor: str, db: str | None, backend: str | None) -> None:
    """Print the editor configuration that starts this environment's `sage-lsp`.

    neovim: an init.lua snippet for neovim 0.7 and later; helix: a
    languages.toml. The command is the absolute path of this environment's
    `sage-lsp`, so the editor needs no activated virtualenv.
    """
    click.echo(editor_config(editor, lsp_command(db=_pinned_db(ctx, db), backend=backend)), nl=False)
    err_console.print(f"# {where(editor)}", highlight=False)


def _pinned_db(ctx: click.Context, db: str | None) -> str | None:
    """The database to pin in a client's configuration: this command's --db,
    or a --db given to `sage` itself on the command line. SAGE_DB from the
    shell does not count, since the editor may not share that shell."""
    root = ctx.find_object(State)
    if db is None and root is not None and ctx.parent is not None and ctx.parent.parent is not None:
        if ctx.parent.parent.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE:
            return root.db
    return db
