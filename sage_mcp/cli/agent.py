"""`sage run`: SAGE's own agent over a task suite, resumable, with a report."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from sage_engine.errors import InvalidInput
from sage_mcp.cli.common import State, console, err_console, handle_errors, pass_state

STRATEGY_NAMES = ("none", "retrieval", "uniform", "adopted-only", "atu", "atu+ugc")
# Flags stored in run.json: on resume they may be omitted, but not changed.
RUN_FLAGS = (
    "suite",
    "level",
    "family",
    "tasks",
    "model",
    "provider",
    "base_url",
    "rounds",
    "backend",
    "strategy",
    "k",
    "consolidate_every",
    "abstraction",
    "price",
    "max_tokens",
)


@click.command()
@click.option("--suite", default="bundled", show_default=True, help="'bundled', or a directory of task folders.")
@click.option("--level", type=click.IntRange(1, 3), help="Only tasks of this level.")
@click.option("--family", help="Only tasks of this operator family.")
@click.option("--tasks", "task_list", help="Comma-separated task ids, run in this order.")
@click.option("--model", help="Model id (default: Config.model, env SAGE_MODEL).")
@click.option(
    "--provider",
    type=click.Choice(["anthropic", "openai"]),
    default="anthropic",
    show_default=True,
    help="anthropic (ANTHROPIC_API_KEY) or any OpenAI-compatible endpoint (OPENAI_API_KEY, --base-url).",
)
@click.option("--base-url", help="API base URL (openai: e.g. https://api.openai.com/v1; anthropic: a proxy).")
@click.option("--rounds", type=click.IntRange(1, 50), default=4, show_default=True, help="Submissions per task.")
@click.option("--backend", "run_backend", help="Evaluation backend (default: sage --backend / SAGE_BACKEND / cpu).")
@click.option("--strategy", type=click.Choice(STRATEGY_NAMES), default="atu", show_default=True, help="Memory strategy (ablation).")
@click.option("--k", type=click.IntRange(1, 50), default=5, show_default=True, help="Retrieved items per task.")
@click.option(
    "--consolidate-every",
    type=click.IntRange(0),
    default=None,
    help="atu+ugc: consolidate after this many closed episodes (default: Config.auto_consolidate_every).",
)
@click.option(
    "--abstraction",
    type=click.Choice(["llm", "deterministic"]),
    default="llm",
    show_default=True,
    help="atu+ugc: who writes consolidated rules (an LLM rewrite is checked and may fall back).",
)
@click.option("--concurrency", type=click.IntRange(1, 32), default=1, show_default=True, help="Tasks in flight at once.")
@click.option("--price", help="Override the price table: 'IN,OUT' USD per million tokens.")
@click.option("--max-tokens", type=click.IntRange(256, 64000), default=8192, show_default=True, help="Output tokens per model call.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Run directory (default: sage-runs/<id>). An existing one is resumed.")
@click.option("--dry-run", is_flag=True, help="Print the prompts each task would get; call no model, write nothing.")
@click.option(
    "--report",
    "report_dirs",
    type=click.Path(file_okay=False, exists=True),
    multiple=True,
    help="Only rebuild the report of RUN_DIR; repeat it to compare runs (ablation) side by side.",
)
@click.pass_context
@pass_state
@handle_errors
def run(
    state: State,
    ctx: click.Context,
    suite,
    level,
    family,
    task_list,
    model,
    provider,
    base_url,
    rounds,
    run_backend,
    strategy,
    k,
    consolidate_every,
    abstraction,
    concurrency,
    price,
    max_tokens,
    run_dir,
    dry_run,
    report_dirs,
) -> None:
    """Run SAGE's agent on a suite: retrieve, write, evaluate, learn; then report."""
    from sage_engine.agent import compare_markdown, write_report

    if report_dirs:
        reports = []
        for folder in report_dirs:
            reports.append(write_report(folder))
            _print_summary(reports[-1], Path(folder))
        if len(reports) > 1:
            click.echo(compare_markdown(reports), nl=False)
        return

    values = dict(
        suite=suite,
        level=level,
        family=family,
        tasks=task_list,
        model=model,
        provider=provider,
        base_url=base_url,
        rounds=rounds,
        backend=run_backend,
        strategy=strategy,
        k=k,
        consolidate_every=consolidate_every,
        abstraction=abstraction,
        price=price,
        max_tokens=max_tokens,
    )
    explicit = {name for name in RUN_FLAGS if _given(ctx, "task_list" if name == "tasks" else "run_backend" if name == "backend" else name)}
    if dry_run:
        _dry_run(state, values)
        return
    _run(state, values, explicit, concurrency, run_dir)


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _dry_run(state: State, v: dict) -> None:
    from sage_engine.agent import preview_prompts, select_tasks
    from sage_engine.engine import Engine

    config = _allow_suite(state.config, v["suite"])
    backend = v["backend"] or config.backend
    with Engine(config) as engine:
        refs = select_tasks(engine, v["suite"], level=v["level"], family=v["family"], tasks=_split(v["tasks"]))
        click.echo(preview_prompts(engine, refs, strategy=v["strategy"], backend=backend, rounds=v["rounds"], k=v["k"]), nl=False)


def _run_folder(run_dir: str | None, run_id: str) -> Path:
    """Where a run keeps its state: --run-dir, or its own folder under sage-runs/."""
    return Path(run_dir) if run_dir else Path("sage-runs") / run_id


def _run(state: State, v: dict, explicit: set[str], concurrency: int, run_dir: str | None) -> None:
    from sage_engine.agent import RunState, Runner, get_strategy, new_settings, parse_price, select_tasks, strategy_config
    from sage_engine.engine import Engine

    stored = RunState.settings(Path(run_dir)) if run_dir else None
    base = _allow_suite(state.config, stored.suite if stored else v["suite"])
    if stored is not None:
        _check_resume(stored, v, explicit, state.db)
        config = base.with_db(stored.db_path)
        settings = stored.model_copy(update={"concurrency": concurrency})
    else:
        config = base
        settings = None
    strategy = get_strategy(settings.strategy if settings else v["strategy"])
    every = settings.consolidate_every if settings else v["consolidate_every"]
    config = strategy_config(config, strategy, every)
    provider = settings.provider if settings else v["provider"]
    model = (settings.model if settings else v["model"]) or config.model
    base_url = settings.base_url if settings else (v["base_url"] or (config.anthropic_base_url if provider == "anthropic" else None))
    max_tokens = settings.max_tokens if settings else v["max_tokens"]
    llm = _make_llm(provider, model, base_url, max_tokens)
    abstraction = settings.abstraction if settings else v["abstraction"]
    abstractor = None
    if strategy.consolidate and abstraction == "llm":
        from sage_engine.agent import LLMAbstractor

        abstractor = LLMAbstractor(llm)
    with Engine(config, abstractor=abstractor) as engine:
        if settings is None:
            refs = select_tasks(engine, v["suite"], level=v["level"], family=v["family"], tasks=_split(v["tasks"]))
            price = parse_price(v["price"]) if v["price"] else None
            settings = new_settings(
                suite=v["suite"],
                tasks=refs,
                model=model,
                provider=provider,
                base_url=base_url,
                rounds=v["rounds"],
                backend=v["backend"] or config.backend,
                strategy=strategy.name,
                k=v["k"],
                concurrency=concurrency,
                consolidate_every=config.auto_consolidate_every,
                abstraction=abstraction if strategy.consolidate else "none",
                price=[price.input, price.output] if price else None,
                max_tokens=max_tokens,
                db_path=config.database,
            )
            run_state = RunState.create(_run_folder(run_dir, settings.run_id), settings)
        else:
            run_state = RunState(_run_folder(run_dir, settings.run_id))
        folder = run_state.dir
        done = len(run_state.finished)
        err_console.print(
            f"run [bold]{settings.run_id}[/bold] in {folder}: {len(settings.tasks)} tasks"
            + (f" ({done} already finished, resuming)" if done else "")
            + f", model {settings.model}, strategy {settings.strategy}, backend {settings.backend}, memory {engine.store.describe()}",
            highlight=False,
        )
        runner = Runner(engine, llm, settings, run_state, console=err_console)
        try:
            outcome = runner.run()
        except Exception:  # the state is saved: say how to resume, then let the cause surface
            err_console.print(f"[yellow]run stopped[/yellow]; resume with: sage run --run-dir {folder}", highlight=False)
            raise
        if outcome.report:
            _print_summary(outcome.report, folder)
        if outcome.stopped:
            err_console.print(
                f"[yellow]run stopped ({outcome.stopped})[/yellow]; "
                f"{len(outcome.remaining)} task(s) left; resume with: sage run --run-dir {folder}",
                highlight=False,
            )
            sys.exit(130)


def _allow_suite(config, suite: str):
    """Naming a suite directory on the command line allows SAGE to read the
    task files in it (task paths must lie under the candidate roots)."""
    if suite == "bundled":
        return config
    roots = [r for r in config.candidate_roots.split(os.pathsep) if r] or [str(Path.cwd())]
    return config.replace(candidate_roots=os.pathsep.join(roots + [str(Path(suite).expanduser().resolve())]))


def _check_resume(stored, v: dict, explicit: set[str], db: str | None) -> None:
    changed = []
    for name in explicit:
        given = v[name]
        if name == "tasks":
            continue  # the stored list is authoritative; ids are checked below
        if name in ("level", "family", "suite", "price"):
            if name == "suite" and given != stored.suite:
                changed.append(f"--suite {given} (run has {stored.suite})")
            continue
        current = getattr(stored, name)
        if given != current:
            changed.append(f"--{name.replace('_', '-')} {given} (run has {current})")
    if db and _same_db(db, stored.db_path) is False:
        changed.append(f"--db {db} (run has {stored.db_path})")
    if changed:
        raise InvalidInput(
            "this run directory was started with other settings: "
            + "; ".join(changed)
            + ". Resume with only --run-dir (and --concurrency), or pick a new --run-dir."
        )


def _make_llm(provider: str, model: str, base_url: str | None, max_tokens: int):
    from sage_engine.agent import make_llm

    env_key = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    key = os.environ.get(env_key)
    if not key and provider == "anthropic" and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        raise InvalidInput(f"set {env_key} to run the agent (or use --dry-run to see the prompts without a model)")
    return make_llm(provider, model, base_url=base_url, api_key=key, max_tokens=max_tokens)


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _print_summary(report: dict, folder: Path) -> None:
    m = report["metrics"]

    def pct(x):
        return "-" if x is None else f"{x:.0%}"

    def xs(x):
        return "-" if x is None else f"{x:.2f}x"

    cost = m.get("cost_usd_total")
    console.print(
        f"{m['solved']}/{m['tasks_finished']} solved (execution rate {pct(m['execution_rate'])}), "
        f"Fast_1.0 {pct(m['fast_1_0_over_solved'])} of solved, fast_1 {pct(m['fast_p_over_all'].get('1'))} of all, "
        f"S_self {xs(m['s_self_median'])}, median speedup {xs(m['speedup_median'])}, "
        f"{m['tokens_total']} tokens" + (f" (~${cost:.2f}, estimate)" if cost is not None else ""),
        highlight=False,
    )
    console.print(f"report: {folder / 'report.md'}", highlight=False)


def _same_db(a: str, b: str) -> bool:
    """Whether two --db values name the same memory (paths compared resolved, URLs as written)."""
    from sage_engine.config import is_db_url

    if is_db_url(a) or is_db_url(b):
        return a == b
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
