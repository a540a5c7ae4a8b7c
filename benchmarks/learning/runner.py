"""One (strategy, seed) run through the real Engine.

A fresh SQLite store in a temporary directory gets the seed's starter memory;
every task of the stream then goes through the same protocol an MCP client
uses: `retrieve`, one `record_result` per simulated evaluation, and
`record_adoption` with the adopted ids and the agent's lesson (ATU and the
lesson dedup run there; UGC runs automatically every N closed episodes where
the strategy enables it). Only the agent and the kernel outcomes are simulated.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.learning import metrics
from benchmarks.learning.agent import Outcome, Shown, run_episode
from benchmarks.learning.catalogue import ALL_SKILLS
from benchmarks.learning.config import SimConfig
from benchmarks.learning.world import Operator, Truth, World, build_world, is_misleading, lesson_text
from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput
from sage_engine.memory.text import query_terms
from sage_engine.models import Adoption, EvalResult, Lesson, TimingStats


@dataclass(frozen=True)
class Strategy:
    name: str
    uses_memory: bool
    engine: dict[str, Any]  # Config overrides
    doc: str
    k: int | None = None  # items asked for per task; None = SimConfig.k


def strategies(sim: SimConfig) -> dict[str, Strategy]:
    off = {"auto_consolidate_every": 0}
    return {s.name: s for s in (
        Strategy("no-memory", False, {}, "the agent sees nothing; the engine is not called"),
        # Credit is still computed (ATU rule) so its fidelity can be read, but
        # the ranking ignores it: similarity (BM25) alone orders the items.
        Strategy("similarity", True, dict(off, w_utility=0.0, w_adoption=0.0, exploration_c=0.0),
                 "BM25 ranking only; utility, adoption rate and exploration weights set to 0"),
        Strategy("uniform", True, dict(off, credit_strategy="uniform"),
                 "every shown item gets the episode reward (MemRL/Memento)"),
        Strategy("adopted-only", True, dict(off, credit_strategy="adopted-only"),
                 "adopted items get the reward, shown-but-unused items are left alone"),
        Strategy("atu", True, dict(off, credit_strategy="atu"),
                 "adoption-traced utility: adopted toward the reward, unused toward -beta"),
        Strategy("atu+ugc", True, dict(credit_strategy="atu", auto_consolidate_every=sim.consolidate_every),
                 f"ATU plus utility-gated consolidation every {sim.consolidate_every} episodes"),
        # Control for context size: a full rulebook adds up to max_rules entries
        # to every task, so ATU+UGC shows more than k. This asks ATU for as many
        # entries as ATU+UGC can show, without consolidation.
        Strategy("atu-wide", True, dict(off, credit_strategy="atu"),
                 f"ATU asking for k + max_rules = {sim.k + _MAX_RULES} items (no consolidation): ATU+UGC's context size",
                 k=sim.k + _MAX_RULES),
    )}


_MAX_RULES = Config.__dataclass_fields__["max_rules"].default


def strategy_names(sim: SimConfig | None = None) -> list[str]:
    return list(strategies(sim or SimConfig()))


def run(strategy: str, seed: int, sim: SimConfig) -> dict[str, Any]:
    known = strategies(sim)
    if strategy not in known:
        raise InvalidInput(f"unknown strategy {strategy!r}; choose from {', '.join(known)}")
    world = build_world(sim, seed)
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="sage-learning-") as tmp:
        if known[strategy].uses_memory:
            # Lexical retrieval only (embeddings off): the benchmark measures
            # the FTS5/BM25 path every installation has.
            cfg = Config(db_path=Path(tmp) / "memory.db", cache_dir=Path(tmp) / "cache", embeddings="",
                         **known[strategy].engine)
            with Engine(cfg) as engine:
                out = _Run(world, sim, engine, known[strategy].k or sim.k).go()
        else:
            out = _Run(world, sim, None, sim.k).go()
    out.update(strategy=strategy, seed=seed, runtime_s=time.perf_counter() - started, cpu_s=time.process_time() - cpu)
    return out


class _Run:
    def __init__(self, world: World, sim: SimConfig, engine: Engine | None, k: int):
        self.world, self.sim, self.engine, self.k = world, sim, engine, k
        self.truth: dict[int, Truth] = {}
        self.episodes: list[dict[str, Any]] = []

    def go(self) -> dict[str, Any]:
        if self.engine is not None:
            for new, truth in self.world.starter:
                added = self.engine.add_item(new)
                if not added.merged:
                    self.truth[added.item.id] = truth
        snapshots: dict[str, dict[str, Any]] = {}
        for task in self.world.tasks:
            self.episodes.append(self._episode(task.index, task.phase, task.operator, task.query))
            if task.index == self.sim.train_episodes - 1:
                snapshots["train_end"] = self._snapshot()
        snapshots["run_end"] = self._snapshot()
        return {"episodes": self.episodes, "snapshots": snapshots}

    # -------------------------------------------------------------- episode

    def _episode(self, index: int, phase: str, op: Operator, query: str) -> dict[str, Any]:
        seed, sim, eng = self.world.seed, self.sim, self.engine
        shown: list[Shown] = []
        ndcg = None
        tokens = 0
        episode_id = None
        if eng is not None:
            r = eng.retrieve(query, operator=op.name, k=self.k, client="learning-benchmark")
            episode_id, tokens = r.episode_id, r.tokens
            shown = [Shown(s.id, self._truth(s.id), True) for s in r.resident_rules]
            shown += [Shown(s.id, self._truth(s.id), False) for s in r.items]
            ndcg = self._ndcg(op, query, [s.id for s in r.items])
        out = run_episode(op, shown, seed, index, sim)
        rules_adopted = sum(1 for s in shown if s.resident and s.id in out.adopted)
        merged = self._record(eng, episode_id, op, out) if eng is not None else None
        return {
            "phase": phase, "family": op.family, "operator": op.name,
            "success": int(out.success), "p_expected": out.p_expected, "p_success": out.p_success,
            "speedup": out.speedup, "z": out.z, "ndcg": ndcg, "tokens": tokens,
            "shown": len(shown), "residents": sum(s.resident for s in shown),
            "residents_fit": sum(1 for s in shown if s.resident and s.truth.skills & op.needs),
            "shown_fit": sum(1 for s in shown if s.truth.skills & op.needs),
            "adopted": len(out.adopted), "rules_adopted": rules_adopted,
            "adopted_useful": sum(1 for s in shown if s.id in out.adopted and s.truth.skills & op.needs),
            "from_memory": len(out.covered_from_memory), "misleading": out.n_misleading, "lesson": out.lesson_skill,
            "lesson_merged": merged,
        }

    def _record(self, eng: Engine, episode_id: int, op: Operator, out: Outcome) -> bool | None:
        """Store the attempts, the adoptions and the lesson; whether the
        engine merged the lesson into an existing item (None: no lesson)."""
        best_attempt = None
        for status, ms in out.attempts:
            result = eng.record_result(_eval_result(op, status, ms), episode_id=episode_id)
            if status == "correct" and ms == out.t_best_ms:
                best_attempt = result.attempt_id
        lesson = None
        if out.lesson_skill is not None:
            skill = ALL_SKILLS[out.lesson_skill]
            title, content = lesson_text(skill, op.family, op.name, out.speedup or 1.0)
            lesson = Lesson(title=title, content=content, tags=[op.family, op.name])
        report = eng.record_adoption(
            episode_id, [Adoption(id=i, evidence="applied in the kernel") for i in out.adopted],
            attempt_id=best_attempt, lesson=lesson,
        )
        if report.new_item is not None and not report.lesson_merged:
            self.truth[report.new_item.id] = Truth(frozenset([out.lesson_skill]), frozenset([op.family]))
        return None if lesson is None else report.lesson_merged

    # -------------------------------------------------------------- truth

    def _truth(self, item_id: int) -> Truth:
        """Ground truth of an item; a rule made by consolidation carries the
        skills of the experiences it was abstracted from."""
        if item_id not in self.truth:
            item = self.engine.get_item(item_id)
            if item.kind != "rule" or not item.derived_from:
                raise RuntimeError(f"item {item_id} ({item.kind}) appeared without a known origin")
            parts = [self._truth(i) for i in item.derived_from]
            self.truth[item_id] = Truth(frozenset().union(*(p.skills for p in parts)),
                                        frozenset().union(*(p.families for p in parts)))
        return self.truth[item_id]

    def _ndcg(self, op: Operator, query: str, ranked: list[int]) -> float | None:
        """NDCG@k of the retrieved list against the best order of every item
        the ranker could have returned for this query (the FTS candidates)."""
        pool = self.engine.store.items.lexical(query_terms(query), self.engine.config.candidate_pool)
        gain = lambda i: max(self.world.gain(self._truth(i), op), 0)  # noqa: E731
        ideal = [gain(c.id) for c in pool if c.status == "active"]
        return metrics.ndcg([gain(i) for i in ranked], ideal, self.k)

    # -------------------------------------------------------------- snapshots

    def _snapshot(self) -> dict[str, Any]:
        if self.engine is None:
            return {"fidelity": None, "rulebook_precision": None, "rules": 0, "rule_tokens": 0, "items": 0,
                    "misleading_rules": 0, "consolidations": 0}
        rows = self.engine.store.rows(
            "SELECT id, utility FROM items WHERE n_retrieved > 0 AND status != 'deleted'")
        values = [(r["utility"], self.world.value(self._truth(r["id"]))) for r in rows]
        rules = self.engine.resident_rules()
        precise = [all(self._useful(d) for d in r.derived_from) for r in rules]
        live = self.engine.store.scalar("SELECT COUNT(*) FROM items WHERE status IN ('active', 'resident')")
        return {
            "fidelity": metrics.spearman([u for u, _ in values], [v for _, v in values]),
            "rulebook_precision": sum(precise) / len(precise) if precise else None,
            "rules": len(rules),
            "rule_tokens": sum(r.tokens for r in rules),
            "items": live,
            "misleading_rules": sum(any(is_misleading(s) for s in self._truth(r.id).skills) for r in rules),
            "consolidations": self.engine.stats().consolidations,
        }

    def _useful(self, item_id: int) -> bool:
        return self.world.value(self._truth(item_id)) > 0


def _eval_result(op: Operator, status: str, ms: float | None) -> EvalResult:
    """What a harness on an NPU would report; simulated numbers."""
    timing = lambda t: TimingStats(median_ms=t, iqr_ms=0.0, mean_ms=t, min_ms=t, reps=20)  # noqa: E731
    correct = status == "correct"
    return EvalResult(
        status=status, task=op.name, backend="npu", hardware="simulated", candidate_hash=hashlib.sha256(f"{op.name}:{ms}".encode()).hexdigest()[:16],
        correct=correct, reference_timing=timing(op.t_ref_ms), candidate_timing=timing(ms) if correct and ms else None,
        speedup=op.t_ref_ms / ms if correct and ms else None,
        message="" if correct else f"simulated {status}",
    )

