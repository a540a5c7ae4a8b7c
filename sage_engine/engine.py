"""The Engine facade: the only thing the surfaces (MCP, LSP, CLI, agent) import.

It opens the store once, owns the evaluation harness, and turns each protocol
operation into calls on the memory modules. Safe to share between threads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, InvalidInput, SageError
from sage_engine.memory import episodes, items, rulebook
from sage_engine.memory.consolidation import DeterministicAbstractor, RuleAbstractor
from sage_engine.memory.embeddings import DenseIndex, load_embedder
from sage_engine.memory.retrieval import Candidate, Filters, rank
from sage_engine.memory.store import Store, check_id
from sage_engine.memory.text import fts_query
from sage_engine.models import (
    AddResult,
    Adoption,
    AdoptionReport,
    ConsolidationReport,
    EpisodeDetail,
    EpisodeSummary,
    EvalResult,
    ImportReport,
    Item,
    Lesson,
    MemoryStats,
    NewItem,
    RetrievalResult,
    ScoredItem,
    TaskSummary,
    UtilityUpdate,
)

if TYPE_CHECKING:
    from sage_engine.evaluation.harness import Harness
    from sage_engine.evaluation.tasks import Task

log = logging.getLogger(__name__)

Progress = Callable[[float, float | None, str], None]
STARTER = Path(__file__).parent / "memory" / "starter" / "ascend.jsonl"
SUITE_DIR = Path(__file__).parent / "suite" / "tasks"


class Engine:
    def __init__(self, config: Config | None = None, *, abstractor: RuleAbstractor | None = None):
        self.config = config or Config.from_env()
        self.store = Store(self.config.db_path, busy_timeout_ms=self.config.busy_timeout_ms)
        self.abstractor: RuleAbstractor = abstractor or DeterministicAbstractor()
        self._harness: Harness | None = None
        embedder = load_embedder(self.config.embeddings)
        self.dense = DenseIndex(self.store, embedder) if embedder else None

    def close(self) -> None:
        if self._harness is not None:
            self._harness.close()
        self.store.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def harness(self) -> "Harness":
        # Imported lazily: servers start fast and memory-only commands never
        # pay for the evaluation stack.
        if self._harness is None:
            from sage_engine.evaluation.harness import Harness

            self._harness = Harness(self.config)
        return self._harness

    # ------------------------------------------------------------------ memory

    def add_item(self, new: NewItem, *, dedup: bool = True) -> AddResult:
        result = items.add_item(self.store, new, self.config, dedup=dedup, dense=self.dense)
        if self.dense is not None and not result.merged:
            self.dense.add(result.item.id, f"{result.item.title}\n{result.item.content}")
        return result

    def get_item(self, item_id: int) -> Item:
        return self.store.item(item_id)

    def list_items(
        self, *, kind: str | None = None, status: str | None = None, scope: str | None = None,
        limit: int = 50, offset: int = 0,
    ) -> list[Item]:
        if not 1 <= limit <= 1000 or offset < 0:
            raise InvalidInput("limit must lie in 1..1000 and offset must be >= 0")
        where, params = ["1"], []
        for col, value in (("kind", kind), ("status", status), ("scope", scope)):
            if value:
                where.append(f"{col} = ?")
                params.append(value)
        if not status:
            where.append("status NOT IN ('deleted', 'merged')")
        return self.store.items(" AND ".join(where), params, order="utility DESC, id", limit=limit, offset=offset)

    def search_items(
        self, query: str, *, k: int = 10, backend: str | None = None, hardware: str | None = None,
        scope: str | None = None,
    ) -> list[ScoredItem]:
        """Rank like retrieve, residents included, without opening an episode
        or logging anything (hover, inspection, `sage memory list -q`)."""
        items.check_text("query", query, 4000, required=True)
        k = self._check_k(k)
        cands = [replace(c, status="active") if c.status == "resident" else c for c in self._candidates(query)]
        filters = Filters(scopes=self._scopes(scope), backend=backend, hardware=hardware)
        ranking = rank(cands, filters, k, 0, self.config)
        return [episodes._scored(self.store.item(r.id), i + 1, r.similarity, 0.0, r.score) for i, r in enumerate(ranking.items)]

    def edit_item(self, item_id: int, *, title: str | None = None, content: str | None = None,
                  code: str | None = None, tags: list[str] | None = None) -> Item:
        return items.edit_item(self.store, item_id, self.config, title=title, content=content, code=code, tags=tags)

    def quarantine_item(self, item_id: int, reason: str = "") -> Item:
        return items.set_status(self.store, item_id, "quarantined", reason or "quarantined by a user")

    def restore_item(self, item_id: int) -> Item:
        """Back to the retrievable pool; a restored rule re-enters the
        rulebook only through consolidation."""
        return items.set_status(self.store, item_id, "active")

    def delete_item(self, item_id: int) -> Item:
        return items.set_status(self.store, item_id, "deleted", "deleted by a user")

    def resident_rules(self) -> list[Item]:
        return self.store.items("status = 'resident'", order="utility DESC, id")

    def stats(self) -> MemoryStats:
        q = self.store.query
        by_kind = {r[0]: r[1] for r in q("SELECT kind, COUNT(*) FROM items GROUP BY kind")}
        by_status = {r[0]: r[1] for r in q("SELECT status, COUNT(*) FROM items GROUP BY status")}
        ep = {r[0]: r[1] for r in q("SELECT status, COUNT(*) FROM episodes GROUP BY status")}
        count = lambda t: self.store.scalar(f"SELECT COUNT(*) FROM {t}")  # noqa: E731
        return MemoryStats(
            db_path=str(self.config.db_path),
            items_by_kind=by_kind,
            items_by_status=by_status,
            resident_rules=by_status.get("resident", 0),
            resident_tokens=self.store.scalar("SELECT COALESCE(SUM(tokens), 0) FROM items WHERE status = 'resident'"),
            episodes_open=ep.get("open", 0),
            episodes_closed=ep.get("closed", 0),
            attempts=count("attempts"),
            adoptions=count("adoptions"),
            utility_updates=count("utility_log"),
            consolidations=count("consolidations"),
            mean_utility=self.store.scalar("SELECT AVG(utility) FROM items WHERE status IN ('active', 'resident')"),
        )

    def export_jsonl(self, path: Path | str) -> ImportReport:
        counts: dict[str, int] = {}
        tmp = Path(f"{path}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for rec in self.store.export_rows():
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                counts[rec["table"]] = counts.get(rec["table"], 0) + 1
        os.replace(tmp, path)  # a crash mid-export never leaves a half file under the real name
        return _report(counts)

    def import_jsonl(self, path: Path | str) -> ImportReport:
        """Restore a full export into this database (which must not already
        hold the same ids). Items-only files (starter packs) use import_items."""
        records = []
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}:{n} is not valid JSON: {exc.msg}") from exc
        if records and "table" not in records[0]:
            return self.import_items(records)
        return _report(self.store.import_rows(records))

    def import_items(self, records: Iterable[dict[str, Any]]) -> ImportReport:
        """Add items (title, content, tags, ...) through validation and dedup."""
        added = merged = 0
        for rec in records:
            result = self.add_item(NewItem(**rec))
            merged += result.merged
            added += not result.merged
        return ImportReport(items=added, skipped=merged, rows={"items": added})

    def import_starter(self) -> ImportReport:
        return self.import_jsonl(STARTER)

    def init(self, *, starter: bool = True) -> ImportReport | None:
        """Import the starter memory once per database; None if already done."""
        if not starter or self.store.meta("starter_imported") is not None:
            return None
        report = self.import_starter()
        self.store.set_meta("starter_imported", "1")
        return report

    def utility_history(self, item_id: int) -> list[UtilityUpdate]:
        self.store.item(item_id)  # NotFound for an unknown id
        return episodes.utility_log(self.store, "item_id = ?", item_id)

    # ---------------------------------------------------------------- episodes

    def retrieve(
        self, task: str, *, operator: str | None = None, backend: str | None = None, hardware: str | None = None,
        k: int | None = None, episode_id: int | None = None, reference: str | None = None,
        client: str | None = None, scope: str | None = None,
    ) -> RetrievalResult:
        items.check_text("task", task, 20_000, required=True)
        items.check_text("reference", reference, self.config.max_candidate_chars, required=False)
        k = self._check_k(k or self.config.default_k)
        for name, value in (("operator", operator), ("backend", backend), ("hardware", hardware), ("client", client)):
            items.check_text(name, value, 200, required=False)
        self.close_idle_episodes()
        key, query = self._episode_key(task, operator, backend, hardware, client, scope, reference)
        if episode_id is None:
            if client:
                for row in self.store.query(
                    "SELECT id FROM episodes WHERE status = 'open' AND client = ? AND task = ?", (client, key.task)
                ):
                    self._close(row["id"])
        filters = Filters(scopes=self._scopes(key.scope), backend=key.backend, hardware=key.hardware)
        # One transaction: an idle sweep in another process cannot close the
        # episode between its opening and its retrieval log.
        with self.store.transaction():
            if episode_id is None:
                episode_id = episodes.open_episode(self.store, key)
            return episodes.retrieve(self.store, self.config, episode_id, query, filters, k, self._candidates)

    def evaluate(
        self, candidate: str, task: str, *, backend: str | None = None, episode_id: int | None = None,
        adopted: Sequence[Adoption] = (), trials: int | None = None, progress: Progress | None = None,
        candidate_path: str | None = None,
    ) -> EvalResult:
        source, path = self.resolve_candidate(candidate)
        candidate_path = candidate_path or path
        if trials is not None and not 1 <= trials <= 20:
            raise InvalidInput("trials must lie in 1..20")
        the_task = self.load_task(task)
        if episode_id is not None:
            row = episodes.episode_row(self.store, episode_id)
            if row["status"] != "open":
                raise InvalidInput(f"episode {episode_id} is closed; start a new one with retrieve_rules")
            shown = set(episodes.shown_ids(self.store, episode_id))
            unknown = sorted({a.id for a in adopted} - shown)
            if unknown:
                raise InvalidInput(
                    f"adopted ids {unknown} were not shown in episode {episode_id} (shown: {sorted(shown) or 'none'})"
                )
        elif adopted:
            raise InvalidInput("adopted_ids need an episode_id: pass the one retrieve_rules returned")
        result = self.harness.evaluate(the_task, source, backend=backend or self.config.backend, trials=trials, progress=progress)
        return self.record_result(result, episode_id=episode_id, adopted=adopted, candidate_path=candidate_path)

    def record_result(
        self, result: EvalResult, *, episode_id: int | None = None, adopted: Sequence[Adoption] = (),
        candidate_path: str | None = None,
    ) -> EvalResult:
        """Store an evaluation as an attempt (with its adoptions). `evaluate`
        calls this; so can a caller that evaluated elsewhere (its own NPU farm)."""
        if candidate_path:
            candidate_path = str(Path(candidate_path).expanduser().resolve())
        stored = episodes.record_attempt(self.store, result, episode_id, candidate_path)
        if episode_id is not None and adopted:
            episodes.record_adoptions(self.store, episode_id, adopted, stored.attempt_id)
        return stored

    def record_adoption(
        self, episode_id: int, adopted: Sequence[Adoption], *, attempt_id: int | None = None,
        lesson: Lesson | None = None, close: bool = True,
    ) -> AdoptionReport:
        row = episodes.episode_row(self.store, episode_id)
        if attempt_id is not None:
            check_id(attempt_id, "attempt")
            owner = self.store.scalar("SELECT episode_id FROM attempts WHERE id = ?", (attempt_id,))
            if owner != episode_id:
                raise InvalidInput(f"attempt {attempt_id} does not belong to episode {episode_id}")
        new_item = None
        merged = False
        if lesson is not None:
            # Validate the lesson before anything is written, so a bad lesson changes nothing.
            new = self._lesson_item(lesson, row, attempt_id)
            items.validate(new, self.config)
        if row["status"] == "open":
            episodes.record_adoptions(self.store, episode_id, adopted, attempt_id)
        elif adopted:
            raise InvalidInput(f"episode {episode_id} is already closed; adoption must be reported before it closes")
        if lesson is not None:
            added = self.add_item(new)
            new_item, merged = added.item, added.merged
        if close and row["status"] == "open":
            report = self._close(episode_id)
        else:
            report = AdoptionReport(episode_id=episode_id, closed=row["status"] == "closed", reward=row["reward"])
        report.new_item, report.lesson_merged = new_item, merged
        return report

    def close_episode(self, episode_id: int) -> AdoptionReport:
        return self._close(episode_id)

    def close_idle_episodes(self) -> list[AdoptionReport]:
        cutoff = time.time() - self.config.episode_idle_s
        stale = self.store.query("SELECT id FROM episodes WHERE status = 'open' AND last_activity < ?", (cutoff,))
        reports = []
        for row in stale:
            try:
                reports.append(self._close(row["id"]))
            except SageError as exc:  # another process closed it first
                log.info("idle episode %s: %s", row["id"], exc)
        return reports

    def get_episode(self, episode_id: int) -> EpisodeDetail:
        return episodes.detail(self.store, episode_id)

    def list_episodes(self, *, status: str | None = None, limit: int = 20) -> list[EpisodeSummary]:
        if status not in (None, "open", "closed"):
            raise InvalidInput("status must be 'open' or 'closed'")
        where = "status = ?" if status else "1"
        rows = self.store.query(f"SELECT * FROM episodes WHERE {where} ORDER BY id DESC LIMIT ?", ((status,) if status else ()) + (limit,))
        return [episodes.summary(self.store, r) for r in rows]

    def last_result(self, candidate_path: str) -> EvalResult | None:
        found = self.results_for(candidate_path, limit=1)
        return found[0] if found else None

    def results_for(self, candidate_path: str, limit: int = 10) -> list[EvalResult]:
        path = str(Path(candidate_path).expanduser().resolve())
        rows = self.store.query("SELECT result FROM attempts WHERE candidate_path = ? ORDER BY id DESC LIMIT ?", (path, limit))
        return [EvalResult.model_validate_json(r[0]) for r in rows]

    # ----------------------------------------------------------- consolidation

    def consolidate(self, *, dry_run: bool = False, budget_tokens: int | None = None,
                    progress: Progress | None = None) -> ConsolidationReport:
        return rulebook.consolidate(self.store, self.config, self.abstractor, dry_run=dry_run,
                                    budget_tokens=budget_tokens, progress=progress)

    def revert_consolidation(self, consolidation_id: int) -> ConsolidationReport:
        return rulebook.revert(self.store, consolidation_id)

    # ------------------------------------------------------- tasks and backends

    def load_task(self, spec: str) -> "Task":
        from sage_engine.evaluation.tasks import load_task

        items.check_text("task", spec, self.config.max_candidate_chars, required=True)
        inline = "class Model" in spec and "\n" in spec
        if not inline:
            _check_path_text(spec, "task")
        # A bare id that is no file here is a (possibly unknown) bundled task id:
        # the loader answers with close matches instead of a path error.
        task_id = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", spec) is not None and not Path(spec).exists()
        bundled = task_id or (re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", spec) is not None and (SUITE_DIR / spec).is_dir())
        if not inline and not bundled:
            # Anything else names a file or folder: check it before it is read,
            # so a client cannot make the server open files outside its roots.
            self._check_path(Path(spec))
        return load_task(spec)

    def list_tasks(self, *, level: int | None = None, family: str | None = None,
                   suite_dir: Path | str | None = None) -> list[TaskSummary]:
        from sage_engine.evaluation.tasks import list_suite, task_summary

        if suite_dir is not None:
            suite_dir = self._check_path(Path(suite_dir))
        return [task_summary(t) for t in list_suite(suite_dir, level=level, family=family)]

    def get_task(self, task_id: str) -> TaskSummary:
        from sage_engine.evaluation.tasks import task_summary

        return task_summary(self.load_task(task_id))

    def task_source(self, task_id: str) -> str:
        return self.load_task(task_id).reference_source

    def backends(self) -> list:
        from sage_engine.evaluation.backends.base import list_backends

        return list_backends(self.config)

    def setup_backend(self, name: str, *, log: Callable[[str], None] | None = None, force: bool = False) -> Path | None:
        """Create what a backend needs here (the ascend-compile virtualenv);
        hardware backends only report what the host is missing."""
        from sage_engine.evaluation.backends.base import get_backend

        backend = get_backend(name, self.config)
        try:
            setup = getattr(backend, "setup", None)
            if not callable(setup):
                status = backend.status()
                raise BackendUnavailable(f"{name}: {status.reason}. {status.setup}".strip())
            return setup(log=log, force=force)
        finally:
            backend.close()

    def import_tasks(self, src: Path | str, dest: Path | str, *, overwrite: bool = False, max_cases: int | None = None,
                     scale: str | None = None, progress: Callable[[int, int, str], None] | None = None) -> list:
        """Convert NPUKernelBench / MultiKernelBench / KernelBench tasks into SAGE task directories;
        `scale="cpu"` sizes them for a CPU in the sandbox (cpu backend)."""
        from sage_engine.suite.importers import import_tasks

        backend = self.harness.backend("cpu") if scale else None
        return import_tasks(Path(src), Path(dest), overwrite=overwrite, max_cases=max_cases, scale=scale,
                            backend=backend, progress=progress)

    def check_suite(self, suite_dir: Path | str | None = None, *, backend: str | None = None, jobs: int = 1,
                    trials: int | None = None, task_ids: Sequence[str] | None = None,
                    progress: Callable[[int, int, str], None] | None = None):
        """Every task's reference evaluated as its own candidate (`sage suite check`)."""
        from sage_engine.suite.check import check_suite, select_tasks

        folder = self._check_path(Path(suite_dir)) if suite_dir is not None else None
        return check_suite(select_tasks(folder, task_ids), self.config, backend=backend or self.config.backend,
                           jobs=jobs, trials=trials, progress=progress)

    def resolve_candidate(self, candidate: str) -> tuple[str, str | None]:
        """Source code, or a path to a file under the allowed roots."""
        if not isinstance(candidate, str) or not candidate.strip():
            raise InvalidInput("candidate must be kernel source code or a path to a .py file")
        if len(candidate) > self.config.max_candidate_chars:
            raise InvalidInput(f"candidate is {len(candidate)} characters; the limit is {self.config.max_candidate_chars}")
        if "\x00" in candidate:
            raise InvalidInput("candidate contains NUL bytes; send Python source text")
        if "\n" in candidate or "ModelNew" in candidate:
            return candidate, None
        _check_path_text(candidate, "candidate")
        path = self._check_path(Path(candidate))
        if not path.is_file():
            raise InvalidInput(f"candidate path {candidate!r} is not a file; pass source code or an existing .py file")
        if path.suffix != ".py":
            raise InvalidInput(f"candidate path must be a .py file defining ModelNew, got {path.name!r}")
        if path.stat().st_size > self.config.max_candidate_chars:
            raise InvalidInput(f"{path} is larger than {self.config.max_candidate_chars} bytes")
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path} is not UTF-8 text") from exc

    # ----------------------------------------------------------------- helpers

    def _check_path(self, path: Path) -> Path:
        resolved = path.expanduser().resolve()
        roots = [Path(r).expanduser().resolve() for r in self.config.candidate_roots.split(os.pathsep) if r] or [Path.cwd().resolve()]
        roots.append(SUITE_DIR.resolve())
        if not any(resolved == r or r in resolved.parents for r in roots):
            raise InvalidInput(
                f"path {str(path)!r} is outside the allowed directories ({', '.join(map(str, roots))}); "
                "pass the source code instead, or add the directory to SAGE_CANDIDATE_ROOTS"
            )
        return resolved

    def _candidates(self, query: str) -> list[Candidate]:
        """FTS hits, joined with dense hits when an embedding model is on."""
        q = fts_query(query)
        cands = self.store.fts_candidates(q, self.config.candidate_pool) if q else []
        if self.dense is None:
            return cands
        dense = self.dense.search(query, self.config.candidate_pool)
        seen = {c.id for c in cands}
        merged = [replace(c, dense=dense.get(c.id, 0.0)) for c in cands]
        extra = self.store.candidates_for([i for i in dense if i not in seen])
        return merged + [replace(c, dense=dense[c.id]) for c in extra]

    def _check_k(self, k: int) -> int:
        if not isinstance(k, int) or not 1 <= k <= self.config.max_k:
            raise InvalidInput(f"k must be an integer in 1..{self.config.max_k}")
        return k

    def _scopes(self, scope: str | None) -> tuple[str, ...]:
        if scope is None or scope == "global":
            return ("global",)
        return ("global", items.check_scope(scope))

    def _episode_key(self, task, operator, backend, hardware, client, scope, reference):
        scope = items.check_scope(scope or "global")
        backend = backend or None
        family = None
        description = ""
        task_key = task.strip()
        looks_like_task = "class Model" in task or (" " not in task.strip() and len(task) < 300)
        try:
            t = self.load_task(task) if looks_like_task else None
        except SageError:
            t = None  # free text describing the operator is fine for retrieval
        if t is not None:
            operator = operator or t.operator
            family = t.family
            description = f"{t.name} {t.description}"
            task_key = t.id
        if "\n" in task_key:
            task_key = "inline:" + hashlib.sha256(task_key.encode()).hexdigest()[:12]
        query = " ".join(filter(None, [task if t is None else "", operator, family, description, backend, hardware, (reference or "")[:2000]]))
        key = episodes.EpisodeKey(task=task_key[:300], operator=operator, family=family, backend=backend,
                                  hardware=hardware, client=client, scope=scope)
        return key, query

    def _lesson_item(self, lesson: Lesson, row, attempt_id: int | None) -> NewItem:
        tags = list(lesson.tags)
        hardware = row["hardware"]
        if attempt_id is not None:
            res = self.store.scalar("SELECT result FROM attempts WHERE id = ?", (attempt_id,))
            if res:
                result = EvalResult.model_validate_json(res)
                # Compiler failures are what the memory should learn from: carry
                # the category and chip so retrieval can filter on them.
                tags += [d.category for d in result.diagnostics if d.category][:4]
                chip = result.compile_info.get("chip") if isinstance(result.compile_info, dict) else None
                if chip:
                    tags.append(str(chip))
                    hardware = hardware or str(chip)
        return NewItem(
            title=lesson.title, content=lesson.content, code=lesson.code, kind="experience",
            scope=lesson.scope or row["scope"], operator=row["operator"], family=row["family"],
            backend=row["backend"], hardware=hardware, tags=sorted(set(tags)),
            source_episode=row["id"], source_attempt=attempt_id,
        )

    def _close(self, episode_id: int) -> AdoptionReport:
        report = episodes.close_and_credit(self.store, self.config, episode_id)
        every = self.config.auto_consolidate_every
        if every and episodes.closed_since_consolidation(self.store) >= every:
            report.consolidation = self.consolidate()
        return report


def _check_path_text(spec: str, what: str) -> None:
    """A one-line argument is a name or a path; refuse what no filesystem
    could hold before the OS is asked about it."""
    if len(spec) > 4096 or any(len(part) > 255 for part in spec.split("/")):
        raise InvalidInput(f"{what} is neither source code nor a usable path or id (a path part is over 255 characters)")


def _report(counts: dict[str, int]) -> ImportReport:
    return ImportReport(items=counts.get("items", 0), episodes=counts.get("episodes", 0),
                        attempts=counts.get("attempts", 0), rows=counts)
