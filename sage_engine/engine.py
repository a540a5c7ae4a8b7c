"""The Engine facade: the only thing the surfaces (MCP, LSP, CLI, agent) import.

It opens the store once and wires the services (memory, episodes, rulebook,
evaluation) onto it; each method is one call into a service, which opens one
transaction for it. An Engine acts for one user (the OS user by default);
`as_user(name)` gives a view that records as someone else (an HTTP token's
name) over the same store and harness. The engine a process opens for
itself (the CLI, a stdio server, the language server: the host's user)
holds the admin role; a view for an HTTP token holds it only where the
tokens file gives it. Safe to share between threads.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from sage_engine.config import Config
from sage_engine.errors import InvalidInput, NotFound
from sage_engine.memory.consolidation import DeterministicAbstractor, RuleAbstractor
from sage_engine.memory.embeddings import DenseIndex, load_embedder
from sage_engine.memory.retrieval import Filters
from sage_engine.memory.store import Store, open_store, transfer
from sage_engine.memory import validation
from sage_engine.models import (
    ProgressCallback,
    AddResult,
    Adoption,
    AdoptionReport,
    BackendStatus,
    ConsolidationReport,
    EpisodeDetail,
    EpisodeSummary,
    EvalResult,
    ImportReport,
    Item,
    Lesson,
    MachineLimits,
    MemoryStats,
    NewItem,
    RetrievalResult,
    ScoredItem,
    TaskSummary,
    UtilityUpdate,
)
from sage_engine.services.episodes import EpisodeService, episode_key
from sage_engine.services.evaluation import EvaluationService
from sage_engine.services import runs
from sage_engine.services.jobs import Job, Jobs, Ledger, RunningNote, memory_key
from sage_engine.services.memory import STARTER, MemoryService
from sage_engine.services.rulebook import RulebookService
from sage_engine.services.team import Caller, check_admin, is_team, set_mode

if TYPE_CHECKING:
    from sage_engine.evaluation.cluster.ray import HostSlots, RunningEvaluation
    from sage_engine.evaluation.harness import Harness
    from sage_engine.evaluation.host.confine import Confinement
    from sage_engine.evaluation.host.tasks import Task
    from sage_engine.report.suite_page import Kind, SuitePage
    from sage_engine.suite.check import SuiteCheck
    from sage_engine.suite.common import ImportedTask

log = logging.getLogger(__name__)


def open_config_store(config: Config) -> Store:
    return open_store(
        config.database,
        busy_timeout_ms=config.busy_timeout_ms,
        pool_size=config.pg_pool_size,
        connect_timeout_s=config.pg_connect_timeout_s,
        bm25_weights=config.bm25_weights,
    )


class Engine:
    def __init__(self, config: Config | None = None, *, abstractor: RuleAbstractor | None = None) -> None:
        self.config = config or Config.from_env()
        self.user = self.config.user
        self.store = open_config_store(self.config)
        try:
            embedder = load_embedder(self.config.embeddings)
        except BaseException:
            self.store.close()
            raise
        self.dense = DenseIndex(self.store, embedder) if embedder else None
        self.memory = MemoryService(self.store, self.config, self.dense)
        self.episodes = EpisodeService(self.store, self.config, self.memory)
        self.rulebook = RulebookService(self.store, self.config, abstractor or DeterministicAbstractor())
        self.evaluation = EvaluationService(self.config)
        self.jobs = Jobs(self.config.task_ttl_s)  # shared by every as_user view
        self.ledger = Ledger(self.config.cache_dir / "running" / memory_key(self.config))
        self.episodes.consolidate = lambda caller: self.rulebook.consolidate(caller=caller)
        self.admin = True
        self._owner = True
        if self.config.team:
            set_mode(self.store, True)

    def as_user(self, user: str, *, admin: bool = False) -> "Engine":
        """This engine acting for `user` (with the admin role only if `admin`);
        closing the view closes nothing."""
        validation.check_text("user", user, 200, required=True)
        view = copy.copy(self)
        view.user, view.admin, view._owner = user, admin, False
        return view

    @property
    def caller(self) -> Caller:
        return Caller(self.user, self.admin)

    def close(self) -> None:
        if self._owner:
            self.jobs.cancel_all()
            self.evaluation.close()  # kills what the jobs run
            self.jobs.wait_all(10.0)
            self.store.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def abstractor(self) -> RuleAbstractor:
        return self.rulebook.abstractor

    @property
    def harness(self) -> "Harness":
        return self.evaluation.harness

    # ------------------------------------------------------------------ memory

    def add_item(self, new: NewItem, *, dedup: bool = True) -> AddResult:
        return self.memory.add(new, user=self.user, dedup=dedup)

    def get_item(self, item_id: int) -> Item:
        return self.memory.get(item_id, user=self.user)

    def list_items(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        scope: str | None = None,
        author: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Item]:
        return self.memory.list(kind=kind, status=status, scope=scope, author=author, limit=limit, offset=offset, user=self.user)

    def search_items(
        self, query: str, *, k: int = 10, backend: str | None = None, hardware: str | None = None, scope: str | None = None
    ) -> list[ScoredItem]:
        return self.memory.search(query, k=self._check_k(k), backend=backend, hardware=hardware, scope=scope, user=self.user)

    def edit_item(
        self, item_id: int, *, title: str | None = None, content: str | None = None, code: str | None = None, tags: list[str] | None = None
    ) -> Item:
        return self.memory.edit(item_id, caller=self.caller, title=title, content=content, code=code, tags=tags)

    def quarantine_item(self, item_id: int, reason: str = "") -> Item:
        return self.memory.set_status(item_id, "quarantined", reason or "quarantined by a user", caller=self.caller)

    def restore_item(self, item_id: int) -> Item:
        """Back to the retrievable pool; a restored rule re-enters the
        rulebook only through consolidation."""
        return self.memory.set_status(item_id, "active", caller=self.caller)

    def delete_item(self, item_id: int) -> Item:
        return self.memory.set_status(item_id, "deleted", "deleted by a user", caller=self.caller)

    def resident_rules(self, *, shared_only: bool = False) -> list[Item]:
        """The resident rules this user sees (theirs and the team's); with
        `shared_only`, the team's alone (for a reader nobody identified)."""
        return self.memory.residents(viewer=None if shared_only else self.user)

    def stats(self) -> MemoryStats:
        return self.memory.stats(viewer=self.user)

    def set_team_mode(self, team: bool) -> None:
        """Record whether this memory is a team's (docs/memory.md, "Threat model")."""
        check_admin(self.caller, "changing the memory's mode")
        set_mode(self.store, team)

    def team_mode(self) -> bool:
        return is_team(self.store, self.config)

    def export_jsonl(self, path: Path | str) -> ImportReport:
        return self.memory.export_jsonl(path)

    def import_jsonl(self, path: Path | str) -> ImportReport:
        """Restore a full export into this (empty) database, or add a file of items."""
        return self.memory.import_jsonl(path, user=self.user)

    def import_items(self, records: Iterable[dict[str, Any]]) -> ImportReport:
        return self.memory.import_items(records, user=self.user)

    def import_starter(self) -> ImportReport:
        return self.import_jsonl(STARTER)

    def init(self, *, starter: bool = True) -> ImportReport | None:
        """Import the starter memory once per database; None if already done."""
        return self.memory.init(starter=starter)

    def utility_history(self, item_id: int) -> list[UtilityUpdate]:
        return self.memory.utility_history(item_id, user=self.user)

    def schema_status(self) -> dict[str, list[str]]:
        return self.store.schema_status()

    def migrate(self) -> list[str]:
        return self.store.migrate()

    def copy_to(self, destination: str | Path) -> dict[str, int]:
        """Copy this whole memory into an empty one (SQLite <-> PostgreSQL)."""
        dst = open_config_store(self.config.with_db(destination))
        try:
            return transfer.copy(self.store, dst)
        finally:
            dst.close()

    # ---------------------------------------------------------------- episodes

    def retrieve(
        self,
        task: str,
        *,
        operator: str | None = None,
        family: str | None = None,
        backend: str | None = None,
        hardware: str | None = None,
        k: int | None = None,
        episode_id: int | None = None,
        reference: str | None = None,
        client: str | None = None,
        scope: str | None = None,
        close_previous: bool = True,
    ) -> RetrievalResult:
        """Open an episode for `task` (or continue `episode_id`) and return what it shows.

        `client` labels the episode; with `close_previous`, the same client's
        open episode for the same task is closed first. Pass False where the
        label does not name one agent (docs/mcp.md, "Who owns an episode")."""
        validation.check_text("task", task, 20_000, required=True)
        validation.check_text("reference", reference, self.config.max_candidate_chars, required=False)
        k = self._check_k(self.config.default_k if k is None else k)
        # An episode's labels become its lesson's: the item limit.
        for name, value in (("operator", operator), ("family", family), ("backend", backend), ("hardware", hardware)):
            validation.check_text(name, value, validation.LABEL_CHARS, required=False)
        validation.check_text("client", client, 200, required=False)
        key, query = episode_key(
            task,
            operator=operator,
            family=family,
            backend=backend,
            hardware=hardware,
            client=client,
            scope=scope,
            reference=reference,
            load_task=self.load_task,
        )
        filters = Filters(scopes=self.memory.scopes(key.scope), backend=key.backend, hardware=key.hardware, viewer=self.user)
        return self.episodes.retrieve(
            key, query, filters, k, episode_id=episode_id, caller=self.caller, close_previous=close_previous and client is not None
        )

    def evaluate(
        self,
        candidate: str,
        task: str,
        *,
        backend: str | None = None,
        episode_id: int | None = None,
        adopted: Sequence[Adoption] = (),
        trials: int | None = None,
        progress: ProgressCallback | None = None,
        candidate_path: str | None = None,
        cancel: threading.Event | None = None,
    ) -> EvalResult:
        """Check, evaluate (here or on a cluster host, no transaction open),
        then record the attempt once (its request id makes a repeat a no-op).
        `cancel` set kills the evaluation; it then raises and nothing is recorded."""
        source, path = self.resolve_candidate(candidate)
        the_task = self.load_task(task)
        self.episodes.check_attempt(episode_id, adopted, self.caller)
        request_id = uuid.uuid4().hex
        result = self.evaluation.harness.evaluate(the_task, source, backend=backend, trials=trials, progress=progress, cancel=cancel)
        return self.record_result(
            result,
            episode_id=episode_id,
            adopted=adopted,
            candidate_path=candidate_path or path,
            request_id=request_id,
            labels=(the_task.operator, the_task.family),
        )

    def start_evaluation(
        self,
        candidate: str,
        task: str,
        *,
        backend: str | None = None,
        episode_id: int | None = None,
        adopted: Sequence[Adoption] = (),
        trials: int | None = None,
        candidate_path: str | None = None,
    ) -> Job:
        """`evaluate` without waiting: checked now, its attempt id reserved,
        evaluated and stored (once) in the background. Read it back with
        `evaluation_job` while it is kept, `get_attempt` for good."""
        return runs.start_evaluation(
            self,
            self.jobs,
            candidate,
            task,
            backend=backend,
            episode_id=episode_id,
            adopted=adopted,
            trials=trials,
            candidate_path=candidate_path,
        )

    def evaluation_job(self, attempt_id: int) -> Job | None:
        """The background evaluation that stores `attempt_id`, while this
        process keeps it; None for one it never ran (or long finished).
        Someone else's raises NotFound, as a made-up id would."""
        job = self.jobs.for_attempt(attempt_id)
        if job is not None and job.owner != self.user:
            raise NotFound(f"no attempt with id {attempt_id}")
        return job

    def evaluations_elsewhere(self) -> list[RunningNote]:
        """This user's evaluations of this memory running in another process
        on this machine (`Ledger` notes: attempt id, task, candidate path
        and hash, last progress message)."""
        return [n for n in self.ledger.entries() if n.pid != os.getpid() and n.owner == self.user]

    def cancel_evaluation(self, attempt_id: int) -> bool:
        """Cancel a running evaluation of this user's, in this process or
        another on this machine; False when it is no longer running (its
        result stands). A cancelled evaluation stores nothing."""
        job = self.evaluation_job(attempt_id)
        if job is not None:
            if job.finished:
                return False
            job.cancel.set()
            return True
        note = self.ledger.get(attempt_id)
        if note is None or note.owner != self.user:
            self.store.episodes.attempt(attempt_id)  # NotFound for an id never stored
            return False
        self.ledger.request_cancel(attempt_id)
        return True

    def running_result(self, job: Job) -> EvalResult:
        """What an evaluation not finished yet answers: `running`, its attempt id, when to ask again."""
        return runs.running_result(job, self.config.poll_after_s)

    def start_consolidation(self, *, dry_run: bool = False, budget_tokens: int | None = None) -> Job:
        """`consolidate` in the background (an MCP task)."""
        return runs.start_consolidation(self, self.jobs, dry_run=dry_run, budget_tokens=budget_tokens)

    def record_result(
        self,
        result: EvalResult,
        *,
        episode_id: int | None = None,
        adopted: Sequence[Adoption] = (),
        candidate_path: str | None = None,
        request_id: str | None = None,
        labels: tuple[str | None, str | None] = (None, None),
        attempt_id: int | None = None,
    ) -> EvalResult:
        """Store an evaluation as an attempt (with its adoptions). `evaluate`
        calls this; so can a caller that evaluated elsewhere (its own NPU farm).
        `labels` are the evaluated task's operator and family: what credit
        counts (a result from elsewhere counts its task id instead)."""
        if candidate_path:
            candidate_path = str(Path(candidate_path).expanduser().resolve())
        return self.episodes.record_attempt(
            result,
            episode_id=episode_id,
            adopted=adopted,
            candidate_path=candidate_path,
            caller=self.caller,
            request_id=request_id,
            labels=labels,
            attempt_id=attempt_id,
        )

    def record_adoption(
        self,
        episode_id: int,
        adopted: Sequence[Adoption],
        *,
        attempt_id: int | None = None,
        lesson: Lesson | None = None,
        close: bool = True,
    ) -> AdoptionReport:
        return self.episodes.record_adoption(episode_id, adopted, attempt_id=attempt_id, lesson=lesson, close=close, caller=self.caller)

    def close_episode(self, episode_id: int) -> AdoptionReport:
        return self.episodes.close(episode_id, self.caller)

    def close_idle_episodes(self) -> list[AdoptionReport]:
        return self.episodes.close_idle()

    def get_episode(self, episode_id: int) -> EpisodeDetail:
        return self.episodes.get(episode_id, self.caller)

    def list_episodes(self, *, status: str | None = None, limit: int = 20, author: str | None = None) -> list[EpisodeSummary]:
        return self.episodes.list(status=status, limit=limit, author=author)

    def last_result(self, candidate_path: str) -> EvalResult | None:
        found = self.results_for(candidate_path, limit=1)
        return found[0] if found else None

    def results_for(self, candidate_path: str, limit: int = 10) -> list[EvalResult]:
        return self.episodes.results_for(str(Path(candidate_path).expanduser().resolve()), limit)

    def get_attempt(self, attempt_id: int) -> EvalResult:
        """One stored attempt's result: the caller's own (any surface's), or any with the admin role."""
        return self.episodes.attempt(attempt_id, self.caller)

    def roofline_svg(self, result: EvalResult, *, standalone: bool = True) -> str:
        """The result's roofline as SVG: against the limits its profile kept, or
        (a result stored before profiles kept them) this host's cached ones."""
        from sage_engine.report import roofline_svg

        limits = None
        if result.profile is not None and result.profile.limits is None:
            limits = self.evaluation.cached_limits(result.backend, result.hardware)
        return roofline_svg(result, limits, standalone=standalone)

    def write_roofline(self, result: EvalResult, path: Path | str) -> Path:
        """The result's roofline written to `path`: SVG, or PNG drawn by headless Chromium."""
        from sage_engine.report.png import screenshot

        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".svg", ".png"):
            raise InvalidInput(f"a roofline is written as .svg or .png, not {path.name!r}")
        svg = self.roofline_svg(result)
        if suffix == ".png":
            import xml.etree.ElementTree as ET

            root = ET.fromstring(svg)
            return screenshot(svg, path, width=int(root.attrib["width"]), height=int(root.attrib["height"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        return path

    def suite_report(self, path: Path | str, *, kind: "Kind", backend: str, total: int | None = None) -> "SuitePage":
        """An HTML report of a suite (`report.suite_page.SuitePage`), rewritten as each row is added."""
        from sage_engine.report.suite_page import SuitePage

        if Path(path).suffix.lower() not in (".html", ".htm"):
            raise InvalidInput(f"a suite report is an .html file, not {Path(path).name!r}")
        return SuitePage(path, kind=kind, backend=backend, total=total)

    def results_version(self) -> int:
        """A stamp that changes whenever any process stores an attempt (cheap to poll)."""
        return self.store.episodes.latest_attempt_id()

    # ----------------------------------------------------------- consolidation

    def consolidate(
        self, *, dry_run: bool = False, budget_tokens: int | None = None, progress: ProgressCallback | None = None
    ) -> ConsolidationReport:
        return self.rulebook.consolidate(dry_run=dry_run, budget_tokens=budget_tokens, progress=progress, caller=self.caller)

    def revert_consolidation(self, consolidation_id: int) -> ConsolidationReport:
        return self.rulebook.revert(consolidation_id, self.caller)

    # ------------------------------------------------------- tasks and backends

    def load_task(self, spec: str) -> "Task":
        return self.evaluation.load_task(spec)

    def list_tasks(self, *, level: int | None = None, family: str | None = None, suite_dir: Path | str | None = None) -> list[TaskSummary]:
        return self.evaluation.list_tasks(level=level, family=family, suite_dir=suite_dir)

    def get_task(self, task_id: str) -> TaskSummary:
        from sage_engine.evaluation.host.tasks import task_summary

        return task_summary(self.load_task(task_id))

    def task_source(self, task_id: str) -> str:
        return self.load_task(task_id).reference_source

    def confinement(self) -> "Confinement":
        """How candidates are contained on this host: bubblewrap, or limits-only with the fix (probed once)."""
        return self.probe_confinement(self.config)

    @staticmethod
    def probe_confinement(config: Config) -> "Confinement":
        """How `config` confines candidates on this host (`describe()` says it in a line), before any Engine opens."""
        from sage_engine.evaluation.host.launch import confinement_for

        return confinement_for(config)

    @staticmethod
    def connect_cluster(config: Config) -> None:
        """Join the Ray cluster `config` evaluates on (RAY_ADDRESS); `BackendUnavailable` says how when it is not there."""
        from sage_engine.evaluation.cluster.ray import connect

        connect(config)

    @staticmethod
    def redact(database: str) -> str:
        """A memory's path or URL with its password hidden, for banners and logs."""
        from sage_engine.memory.store import redact

        return redact(database)

    @staticmethod
    def candidate_hash(source: str) -> str:
        """What an `EvalResult.candidate_hash` is for this source (an editor tells a stale result by it)."""
        from sage_engine.evaluation.host.machine import candidate_hash

        return candidate_hash(source)

    def suite_tasks(self, suite_dir: Path | str | None = None, *, level: int | None = None, family: str | None = None) -> list["Task"]:
        """The tasks of a suite folder (the bundled one by default), with their example solutions."""
        return self.evaluation.suite_tasks(suite_dir, level=level, family=family)

    def backends(self) -> list[BackendStatus]:
        return self.evaluation.backends()

    def evaluation_hosts(self) -> list["HostSlots"]:
        """The hosts evaluations run on and their free NPU/GPU/CPU slots."""
        return self.evaluation.harness.hosts()

    def running_evaluations(self) -> list["RunningEvaluation"]:
        """Evaluations queued or running (on a cluster: every server's)."""
        return self.evaluation.harness.running()

    def setup_backend(self, name: str, *, log: Callable[[str], None] | None = None, force: bool = False) -> Path | None:
        return self.evaluation.setup_backend(name, log=log, force=force)

    def calibrate(self, backend: str | None = None, *, force: bool = False) -> MachineLimits:
        """This host's measured bandwidth, matmul peaks and launch cost for a backend (cached per host)."""
        return self.evaluation.calibrate(backend, force=force)

    def import_tasks(
        self,
        src: Path | str,
        dest: Path | str,
        *,
        overwrite: bool = False,
        max_cases: int | None = None,
        scale: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> list["ImportedTask"]:
        """Convert NPUKernelBench / MultiKernelBench / KernelBench tasks into SAGE task directories;
        `scale="cpu"` sizes them for a CPU in the sandbox (cpu backend)."""
        return self.evaluation.import_tasks(src, dest, overwrite=overwrite, max_cases=max_cases, scale=scale, progress=progress)

    def check_suite(
        self,
        suite_dir: Path | str | None = None,
        *,
        backend: str | None = None,
        jobs: int | None = None,
        trials: int | None = None,
        task_ids: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        rows: Path | str | None = None,
        report: Path | str | None = None,
    ) -> "SuiteCheck":
        """Every task's reference evaluated as its own candidate (`sage suite check`); with `rows`,
        each task's row is appended to that JSON-lines file as it is checked; with `report`, an HTML
        page of the rows so far is rewritten as each arrives."""
        if report is not None and Path(report).suffix.lower() not in (".html", ".htm"):
            raise InvalidInput(f"a suite report is an .html file, not {Path(report).name!r}")
        return self.evaluation.check_suite(
            suite_dir, backend=backend, jobs=jobs, trials=trials, task_ids=task_ids, progress=progress, rows=rows, report=report
        )

    def resolve_candidate(self, candidate: str) -> tuple[str, str | None]:
        return self.evaluation.resolve_candidate(candidate)

    def _check_k(self, k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.config.max_k:
            raise InvalidInput(f"k must be an integer in 1..{self.config.max_k}")
        return k
