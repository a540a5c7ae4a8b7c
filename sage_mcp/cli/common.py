"""Shared plumbing for the `sage` commands: one Engine per invocation,
`--json` output, and SageError turned into a clean message and exit code."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import click
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from sage_engine.config import Config
from sage_engine.errors import SageError

# Piped output (scripts, CI logs) has no terminal width; don't squeeze tables into 80 columns.
console = Console(stderr=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
# Messages are not wrapped: a long path must stay on one line for whoever greps the output.
err_console = Console(stderr=True, soft_wrap=True)


class State:
    """Options of the root group; the Engine opens on first use only, so
    `sage --help` and `sage mcp config` never touch a database."""

    def __init__(self, db: str | None, backend: str | None, as_json: bool, executor: str | None = None):
        self.db, self.backend, self.as_json, self.executor = db, backend, as_json, executor
        self._engine = None
        self._chosen: list[str] = []
        self.changes: dict[str, Any] = {}  # Config fields a subcommand's flags set (sage bench --ncu)

    def chose(self, *paths: str | Path | None) -> None:
        """Paths the user typed on this command line. The candidate roots keep
        a *client* of the servers from naming files outside them; here the
        person at the terminal named these, so their folders are allowed too
        (`sage suite check ~/nkb-tasks` from any directory). Call before the
        engine opens."""
        for path in paths:
            if path is not None and Path(path).exists():
                resolved = Path(path).resolve()
                self._chosen.append(str(resolved if resolved.is_dir() else resolved.parent))

    @property
    def config(self) -> Config:
        config = Config.from_env(db=self.db, backend=self.backend, executor=self.executor)
        if self._chosen:
            roots = config.candidate_roots or str(Path.cwd())  # empty means the working directory
            config = dataclasses.replace(config, candidate_roots=os.pathsep.join([roots, *self._chosen]))
        return dataclasses.replace(config, **self.changes) if self.changes else config

    @property
    def engine(self):
        if self._engine is None:
            from sage_engine.engine import Engine

            self._engine = Engine(self.config)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


pass_state = click.make_pass_decorator(State)


def root_state(ctx: click.Context) -> State:
    """The `sage` group's options, which every subcommand runs under."""
    state = ctx.find_object(State)
    if state is None:
        raise click.UsageError("run this command as a subcommand of `sage`")
    return state


def handle_errors(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SageError as exc:
            err_console.print(f"[red]error ({exc.kind}):[/red] {exc}", highlight=False, markup=True)
            sys.exit(exc.exit_code)

    return wrapper


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def emit(state: State, value: Any, render: Callable[[Any], None]) -> None:
    if state.as_json:
        click.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False))
    else:
        render(value)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    console.print(t)


def json_option(fn: Callable) -> Callable:
    """`--json` accepted after a subcommand too (`sage memory list --json`)."""

    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            root_state(ctx).as_json = True
        return value

    return click.option(
        "--json", "as_json_local", is_flag=True, expose_value=False, callback=callback, help="Print JSON instead of tables."
    )(fn)


def db_option(fn: Callable) -> Callable:
    """`--db` accepted after a subcommand too (`sage init --db X`), so the
    flag can sit wherever a user types it."""

    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            root_state(ctx).db = value
        return value

    return click.option(
        "--db",
        "db_local",
        expose_value=False,
        callback=callback,
        is_eager=True,
        help="Memory: a SQLite file or a postgresql:// URL (env SAGE_DB).",
    )(fn)


def executor_option(fn: Callable) -> Callable:
    """`--executor local|ray` after a subcommand too (`sage bench F --task T --executor ray`)."""

    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            root_state(ctx).executor = value
        return value

    return click.option(
        "--executor",
        "executor_local",
        type=click.Choice(["local", "ray"]),
        expose_value=False,
        callback=callback,
        is_eager=True,
        help="Evaluate here (local) or on a Ray cluster's hosts (ray; RAY_ADDRESS names it).",
    )(fn)
