"""`sage evals list`: evaluations queued and running, with host and age."""

from __future__ import annotations

import click

from sage_mcp.cli.common import State, console, emit, handle_errors, json_option, pass_state, table


@click.group()
def evals() -> None:
    """Evaluations in flight."""


@evals.command("list")
@json_option
@pass_state
@handle_errors
def evals_list(state: State) -> None:
    """Queued and running evaluations (with --executor ray: every server's, cluster-wide)."""
    engine = state.engine
    rows = engine.running_evaluations()

    def render(rs):
        if engine.config.executor == "local":
            console.print(
                "executor local: evaluations run inside each server process and finish with its call; "
                "use --executor ray (RAY_ADDRESS) for a cluster-wide view"
            )
            return
        table(
            f"{len(rs)} evaluations in flight",
            ["state", "host", "age", "task id"],
            [(r.state, r.host or "-", f"{r.age_s:.0f}s", r.request_id or "-") for r in rs],
        )

    emit(state, [r.__dict__ for r in rows], render)
