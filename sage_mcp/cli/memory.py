"""`sage init`, `sage memory ...`, `sage consolidate`, `sage episodes ...`."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import click

from sage_engine.models import NewItem
from sage_mcp.cli.common import State, console, emit, handle_errors, json_option, pass_state, table


def _ago(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _short(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


@click.command()
@click.option("--starter/--no-starter", default=True, help="Import the Ascend starter memory (skipped if already present).")
@json_option
@pass_state
@handle_errors
def init(state: State, starter: bool) -> None:
    """Create (or migrate) the memory database and import the starter memory."""
    engine = state.engine
    report = engine.init(starter=starter)
    stats = engine.stats()
    emit(
        state,
        {"db": stats.db_path, "starter": report, "stats": stats},
        lambda _: console.print(
            f"memory ready at [bold]{stats.db_path}[/bold]: "
            f"{sum(stats.items_by_kind.values())} items" + (f" ({report.items} starter items imported)" if report else "")
        ),
    )


@click.group()
def memory() -> None:
    """Inspect and curate memory items."""


@memory.command("list")
@click.option("--kind", type=click.Choice(["experience", "rule"]))
@click.option("--status", type=click.Choice(["active", "resident", "quarantined", "merged", "deleted"]))
@click.option("--scope", help="team, private or project:NAME.")
@click.option("--author", help="Only items this person recorded.")
@click.option("-q", "--query", help="Rank by relevance to this text instead of utility.")
@click.option("--limit", default=50, show_default=True)
@click.option("--offset", default=0)
@json_option
@pass_state
@handle_errors
def memory_list(state: State, kind, status, scope, author, query, limit, offset) -> None:
    """List items (by utility), or search them with -q."""
    if query:
        found = state.engine.search_items(query, k=min(limit, state.engine.config.max_k), scope=scope)
        emit(
            state,
            found,
            lambda rows: table(
                None,
                ["id", "kind", "utility", "adopted", "sim", "title"],
                [(r.id, r.kind, f"{r.utility:+.3f}", r.n_adopted, f"{r.similarity:.2f}", _short(r.title)) for r in rows],
            ),
        )
        return
    items = state.engine.list_items(kind=kind, status=status, scope=scope, author=author, limit=limit, offset=offset)
    emit(
        state,
        items,
        lambda rows: table(
            None,
            ["id", "kind", "status", "utility", "adopted", "ops", "scope", "author", "title"],
            [
                (
                    r.id,
                    r.kind,
                    r.status,
                    f"{r.utility:+.3f}",
                    r.n_adopted,
                    len(r.operators_adopted),
                    r.scope,
                    r.author or "-",
                    _short(r.title),
                )
                for r in rows
            ],
        ),
    )


@memory.command("show")
@click.argument("item_id", type=int)
@json_option
@pass_state
@handle_errors
def memory_show(state: State, item_id: int) -> None:
    """Show one item with its provenance and utility history."""
    item = state.engine.get_item(item_id)
    history = state.engine.utility_history(item_id)

    def render(_):
        console.print(
            f"[bold]#{item.id} {item.title}[/bold]  ({item.kind}, {item.status}"
            + (f": {item.status_reason}" if item.status_reason else "")
            + ")"
        )
        console.print(
            f"utility {item.utility:+.3f} · shown {item.n_retrieved} · adopted {item.n_adopted} "
            f"(p={item.adoption_rate:.2f}) · operators {', '.join(item.operators_adopted) or '-'} · support {item.support}"
        )
        console.print(
            f"scope {item.scope} · author {item.author or '-'} · operator {item.operator or '-'} · family {item.family or '-'} · "
            f"backend {item.backend or '-'} · hardware {item.hardware or '-'} · tags {', '.join(item.tags) or '-'}"
        )
        console.print(
            f"source: episode {item.source_episode or '-'}, attempt {item.source_attempt or '-'}; "
            f"derived from {item.derived_from or '-'}; created {_ago(item.created_at)}"
        )
        console.print()
        console.print(item.content, highlight=False, markup=False)
        if item.code:
            console.print()
            console.print(item.code, highlight=False, markup=False)
        if history:
            table(
                "utility history",
                ["episode", "adopted", "before", "after", "target", "strategy"],
                [
                    (h.episode_id, "yes" if h.adopted else "no", f"{h.before:+.3f}", f"{h.after:+.3f}", f"{h.target:+.3f}", h.strategy)
                    for h in history
                ],
            )

    emit(state, {"item": item, "history": history}, render)


@memory.command("add")
@click.option("--title", required=True)
@click.option("--content", required=True, help="The lesson; '-' reads standard input.")
@click.option("--code", type=click.Path(exists=True, dir_okay=False), help="File with an example snippet.")
@click.option("--kind", type=click.Choice(["experience", "rule"]), default="experience")
@click.option("--scope", default="team", show_default=True, help="team, private or project:NAME.")
@click.option("--operator")
@click.option("--family")
@click.option("--backend", "item_backend")
@click.option("--hardware")
@click.option("--tag", "tags", multiple=True)
@json_option
@pass_state
@handle_errors
def memory_add(state: State, title, content, code, kind, scope, operator, family, item_backend, hardware, tags) -> None:
    """Add an item (a near-duplicate strengthens the existing one instead)."""
    if content == "-":
        content = sys.stdin.read()
    new = NewItem(
        title=title,
        content=content,
        code=Path(code).read_text() if code else None,
        kind=kind,
        scope=scope,
        operator=operator,
        family=family,
        backend=item_backend,
        hardware=hardware,
        tags=list(tags),
    )
    result = state.engine.add_item(new)
    emit(state, result, lambda r: console.print(f"{'strengthened existing' if r.merged else 'added'} item #{r.item.id}: {r.item.title}"))


@memory.command("edit")
@click.argument("item_id", type=int)
@click.option("--title")
@click.option("--content")
@click.option("--tag", "tags", multiple=True, help="Replaces the tags when given.")
@json_option
@pass_state
@handle_errors
def memory_edit(state: State, item_id, title, content, tags) -> None:
    """Edit an item's text or tags."""
    item = state.engine.edit_item(item_id, title=title, content=content, tags=list(tags) if tags else None)
    emit(state, item, lambda i: console.print(f"updated item #{i.id}"))


@memory.command("quarantine")
@click.argument("item_id", type=int)
@click.option("--reason", default="")
@click.option("--undo", is_flag=True, help="Restore the item to the retrievable pool.")
@json_option
@pass_state
@handle_errors
def memory_quarantine(state: State, item_id, reason, undo) -> None:
    """Stop showing an item (kept, and restorable with --undo)."""
    item = state.engine.restore_item(item_id) if undo else state.engine.quarantine_item(item_id, reason)
    emit(state, item, lambda i: console.print(f"item #{i.id} is now {i.status}"))


@memory.command("delete")
@click.argument("item_id", type=int)
@json_option
@pass_state
@handle_errors
def memory_delete(state: State, item_id) -> None:
    """Soft-delete an item (kept for the audit trail; never shown)."""
    item = state.engine.delete_item(item_id)
    emit(state, item, lambda i: console.print(f"item #{i.id} deleted"))


@memory.command("export")
@click.argument("path", type=click.Path(dir_okay=False))
@json_option
@pass_state
@handle_errors
def memory_export(state: State, path) -> None:
    """Write the whole memory (every table) as JSON lines."""
    report = state.engine.export_jsonl(path)
    emit(state, report, lambda r: console.print(f"exported {sum(r.rows.values())} rows to {path}"))


@memory.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@json_option
@pass_state
@handle_errors
def memory_import(state: State, path) -> None:
    """Restore a full export into an empty database, or add items from a file of items."""
    report = state.engine.import_jsonl(path)
    emit(state, report, lambda r: console.print(f"imported {sum(r.rows.values())} rows ({r.skipped} merged into existing items)"))


@memory.command("mode")
@click.argument("mode", type=click.Choice(["team", "solo"]), required=False)
@json_option
@pass_state
@handle_errors
def memory_mode(state: State, mode: str | None) -> None:
    """Show, or set on the server's host, whether this memory is a team's (docs/memory.md, "Threat model")."""
    if mode is not None:
        state.engine.set_team_mode(mode == "team")
    current = "team" if state.engine.team_mode() else "solo"
    emit(state, {"mode": current}, lambda r: console.print(f"memory mode: {r['mode']}"))


@memory.command("stats")
@json_option
@pass_state
@handle_errors
def memory_stats(state: State) -> None:
    """Counts of items, episodes, attempts and updates."""
    s = state.engine.stats()
    emit(
        state,
        s,
        lambda s: table(
            f"memory at {s.db_path}",
            ["what", "count"],
            [
                *[(f"items ({k})", v) for k, v in sorted(s.items_by_status.items())],
                ("resident rules", f"{s.resident_rules} ({s.resident_tokens} tokens)"),
                ("episodes open / closed", f"{s.episodes_open} / {s.episodes_closed}"),
                ("closed without evidence (no attempt: not credited)", s.episodes_without_evidence),
                ("attempts", s.attempts),
                ("adoptions", s.adoptions),
                ("utility updates", s.utility_updates),
                ("consolidations", s.consolidations),
                ("mean utility", "-" if s.mean_utility is None else f"{s.mean_utility:+.3f}"),
                *[(f"by {who}", ", ".join(f"{n} {what}" for what, n in sorted(made.items()))) for who, made in sorted(s.by_author.items())],
            ],
        ),
    )


@memory.command("migrate")
@click.option("--status", "status_only", is_flag=True, help="Only show applied and pending migrations.")
@json_option
@pass_state
@handle_errors
def memory_migrate(state: State, status_only: bool) -> None:
    """Show the schema version and apply pending migrations (SQLite or PostgreSQL)."""
    applied = [] if status_only else state.engine.migrate()
    status = state.engine.schema_status()
    emit(
        state,
        {"db": state.engine.store.describe(), "applied_now": applied, **status},
        lambda r: console.print(
            f"{r['db']}: schema at {r['applied'][-1] if r['applied'] else 'nothing'}; "
            + (f"applied {', '.join(applied)}" if applied else "nothing to apply")
            + (f"; pending {', '.join(r['pending'])}" if r["pending"] else "")
        ),
    )


@memory.command("copy")
@click.argument("src")
@click.argument("dst")
@json_option
@pass_state
@handle_errors
def memory_copy(state: State, src: str, dst: str) -> None:
    """Copy a whole memory from SRC into the empty DST (each a SQLite file or a postgresql:// URL)."""
    from sage_engine.engine import Engine

    with Engine(state.config.with_db(src)) as source:
        counts = source.copy_to(dst)
    emit(
        state,
        {"src": src, "dst": dst, "rows": counts},
        lambda r: console.print(f"copied {sum(counts.values())} rows ({', '.join(f'{n} {t}' for t, n in counts.items())}) into {dst}"),
    )


@click.command()
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--budget-tokens", type=int, help="Token budget of the resident rulebook.")
@click.option("--revert", "revert_id", type=int, help="Undo consolidation N instead.")
@json_option
@pass_state
@handle_errors
def consolidate(state: State, dry_run, budget_tokens, revert_id) -> None:
    """Promote proven experiences into the resident rulebook (UGC)."""
    if revert_id is not None:
        report = state.engine.revert_consolidation(revert_id)
    else:
        report = state.engine.consolidate(dry_run=dry_run, budget_tokens=budget_tokens)

    def render(r):
        head = "dry run: " if r.dry_run else (f"consolidation {r.consolidation_id}: " if r.consolidation_id else "")
        console.print(
            f"{head}{len(r.eligible)} eligible, {len(r.merged)} clusters abstracted ({r.abstraction}), "
            f"promoted {r.promoted or '-'}, demoted {r.demoted or '-'}"
        )
        for note in r.notes:
            console.print(f"note: {note}")
        table(
            f"resident rulebook ({r.tokens}/{r.budget_tokens} tokens)",
            ["id", "utility", "p", "tokens", "title"],
            [(i.id if i.id > 0 else "new", f"{i.utility:+.3f}", f"{i.adoption_rate:.2f}", i.tokens, _short(i.title)) for i in r.rulebook],
        )

    emit(state, report, render)


@click.group()
def episodes() -> None:
    """Inspect episodes (one agent working on one task)."""


@episodes.command("list")
@click.option("--status", type=click.Choice(["open", "closed"]))
@click.option("--author", help="Only episodes this person ran.")
@click.option("--limit", default=20, show_default=True)
@json_option
@pass_state
@handle_errors
def episodes_list(state: State, status, author, limit) -> None:
    """Latest episodes first, and how many closed without evidence."""
    rows = state.engine.list_episodes(status=status, author=author, limit=limit)

    def render(rows):
        table(
            None,
            ["id", "task", "status", "reward", "attempts", "author", "client", "started"],
            [(e.id, e.task, _closed_as(e), _reward(e), e.attempts, e.author or "-", e.client, _ago(e.created_at)) for e in rows],
        )
        s = state.engine.stats()
        console.print(
            f"in this memory, {s.episodes_without_evidence} of {s.episodes_closed} closed episodes closed "
            "without evidence (no attempt): not credited, utilities untouched"
        )

    emit(state, rows, render)


def _closed_as(e) -> str:
    return e.status if e.status == "open" or not e.close_reason else f"closed ({e.close_reason.replace('_', ' ')})"


def _reward(e) -> str:
    if e.reward is not None:
        return f"{e.reward:+.3f}"
    return "no evidence" if e.status == "closed" else ""


@episodes.command("show")
@click.argument("episode_id", type=int)
@json_option
@pass_state
@handle_errors
def episodes_show(state: State, episode_id) -> None:
    """What was shown, tried, adopted and credited."""
    e = state.engine.get_episode(episode_id)

    def render(e):
        console.print(f"[bold]episode {e.id}[/bold] task {e.task} · {_closed_as(e)} · reward {_reward(e) or '-'}")
        table("shown", ["id", "rank", "score", "title"], [(s.id, s.rank, f"{s.score:.3f}", _short(s.title)) for s in e.shown])
        table(
            "attempts",
            ["id", "status", "speedup", "adopted"],
            [
                (
                    a.id,
                    a.status,
                    "" if a.speedup is None else f"{a.speedup:.2f}x" + (" unverified" if a.speedup_trusted is False else ""),
                    a.adopted_ids,
                )
                for a in e.attempt_list
            ],
        )
        table("adopted", ["id", "weight", "evidence"], [(a.id, a.weight, _short(a.evidence)) for a in e.adopted])
        table(
            "utility updates",
            ["item", "adopted", "before", "after", "target"],
            [(u.item_id, u.adopted, f"{u.before:+.3f}", f"{u.after:+.3f}", f"{u.target:+.3f}") for u in e.updates],
        )

    emit(state, e, render)
