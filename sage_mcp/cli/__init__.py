"""The `sage` command line: a thin shell over the Engine."""

from __future__ import annotations

import logging

import click

from sage_mcp.cli.agent import run
from sage_mcp.cli.common import State, db_option, executor_option
from sage_mcp.cli.evals import evals
from sage_mcp.cli.evaluation import backends, bench
from sage_mcp.cli.suite import suite
from sage_mcp.cli.memory import consolidate, episodes, init, memory
from sage_mcp.cli.serve import lsp, mcp, serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", envvar="SAGE_DB", help="Memory: a SQLite file (default: your data dir) or a postgresql:// URL; env SAGE_DB.")
@click.option("--backend", envvar="SAGE_BACKEND", help="Default evaluation backend (cpu, triton, ascend-compile, npu, cuda).")
@click.option(
    "--executor",
    envvar="SAGE_EXECUTOR",
    type=click.Choice(["local", "ray"]),
    help="Where evaluations run: this machine (local, default) or a Ray cluster (ray; env RAY_ADDRESS).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr.")
@click.version_option(package_name="sage-npu")
@click.pass_context
def cli(ctx: click.Context, db: str | None, backend: str | None, executor: str | None, as_json: bool, verbose: bool) -> None:
    """SAGE: experience memory and kernel evaluation for NPU kernel agents."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    state = State(db, backend, as_json, executor)
    ctx.obj = state
    ctx.call_on_close(state.close)


def _with_root_options(command: click.Command) -> None:
    """Every leaf command takes --db and --executor as well (except those
    with options of those names of their own)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_root_options(sub)
        return
    names = {opt for p in command.params for opt in getattr(p, "opts", ())}
    if "--db" not in names:
        db_option(command)
    if "--executor" not in names:
        executor_option(command)


for command in (init, memory, consolidate, episodes, bench, suite, backends, evals, serve, mcp, lsp, run):
    _with_root_options(command)
    cli.add_command(command)


def main() -> None:
    cli(prog_name="sage")
