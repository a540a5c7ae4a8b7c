"""One (strategy, seed) run in one world through the real Engine.

A fresh SQLite store in a temporary directory gets the seed's starter memory;
every task of the stream then goes through the same protocol an MCP client
uses: `retrieve`, one `record_result` per simulated evaluation, and
`record_adoption` with the ids the agent reports and its lesson (ATU and the
lesson dedup run there; UGC runs automatically every N closed episodes where
the strategy enables it). Only the agent and the kernel outcomes are
simulated. The runner reads the engine only through its public methods.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.learning import metrics
from benchmarks.learning.agent import Outcome, Shown, run_episode
from benchmarks.learning.catalogue import ALL_SKILLS
from benchmarks.learning.config import SimConfig, engine_overrides
from benchmarks.learning.world import Operator, Situation, Truth, World, build_world, lesson_text
from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput
from sage_engine.models import Adoption, EvalResult, Item, Lesson, TimingStats

_MAX_RULES = Config.__dataclass_fields__["max_rules"].default
# A RAM-backed directory where the system has one: the store is the real
# SQLite either way, but WAL checkpoints to disk cost a quarter of a run.
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@dataclass(frozen=True)
class Strategy:
    name: str
    uses_memory: bool
    engine: dict[str, Any]  # Config overrides the arm asks for
    doc: str
    k: int | None = None  # items asked for per task; None = SimConfig.k


def strategies(sim: SimConfig) -> dict[str, Strategy]:
    off = {"auto_consolidate_every": 0}
    ugc = {"credit_strategy": "atu", "auto_consolidate_every": sim.consolidate_every}
    return {
        s.name: s
        for s in (
            Strategy("no-memory", False, {}, "the agent sees nothing; the engine is not called"),
            # Credit is still computed (ATU rule) so its fidelity can be read, but
            # the ranking ignores it: similarity (BM25) alone orders the items.
            Strategy(
                "similarity",
                True,
                dict(off, w_utility=0.0, w_adoption=0.0, exploration_c=0.0),
                "BM25 ranking only; utility, adoption rate and exploration weights set to 0",
            ),
            Strategy(
                "uniform",
                True,
                dict(off, credit_strategy="uniform"),
                "every shown item gets the episode reward; the ranking still weighs the adoption rate",
            ),
            Strategy(
                "uniform-pure",
                True,
                dict(off, credit_strategy="uniform", w_adoption=0.0),
                "MemRL/Memento: every shown item gets the episode reward, adoption reports unused",
            ),
            Strategy(
                "adopted-only",
                True,
                dict(off, credit_strategy="adopted-only"),
                "reported items get the reward, shown-but-unreported items are left alone (ACE-like)",
            ),
            Strategy(
                "atu",
                True,
                dict(off, credit_strategy="atu"),
                "adoption-traced utility: reported toward the reward, shown-but-unreported toward -beta",
            ),
            # Equal tokens: the scoped rulebook may add up to what k items cost to
            # each task, so ATU with 2k items spends the same context.
            Strategy(
                "atu-2k",
                True,
                dict(off, credit_strategy="atu"),
                f"ATU asking for 2k = {2 * sim.k} items: the context of atu+ugc-scoped with a full per-task rulebook",
                k=2 * sim.k,
            ),
            # Equal entries: a full global rulebook adds max_rules entries to every
            # task, so ATU+UGC shows k + max_rules.
            Strategy(
                "atu-wide",
                True,
                dict(off, credit_strategy="atu"),
                f"ATU asking for k + max_rules = {sim.k + _MAX_RULES} items: as many entries as atu+ugc",
                k=sim.k + _MAX_RULES,
            ),
            Strategy(
                "atu+ugc",
                True,
                dict(ugc, rulebook_scope="global"),
                f"ATU plus consolidation every {sim.consolidate_every} episodes; one global rulebook shown to every task",
            ),
            Strategy(
                "atu+ugc-scoped",
                True,
                dict(ugc, rulebook_scope="task"),
                f"ATU plus consolidation every {sim.consolidate_every} episodes; resident rules chosen per task by scope",
            ),
        )
    }


def strategy_names(sim: SimConfig | None = None) -> list[str]:
    return list(strategies(sim or SimConfig()))


def run(strategy: str, seed: int, sim: SimConfig) -> dict[str, Any]:
    known = strategies(sim)
    if strategy not in known:
        raise InvalidInput(f"unknown strategy {strategy!r}; choose from {', '.join(known)}")
    world = build_world(sim, seed)
    arm = known[strategy]
    settings = engine_overrides(arm.engine)
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="sage-learning-", dir=_SCRATCH) as tmp:
        if arm.uses_memory:
            # Lexical retrieval only (embeddings off): the benchmark measures
            # the FTS5/BM25 path every installation has.
            cfg = Config(db_path=Path(tmp) / "memory.db", cache_dir=Path(tmp) / "cache", embeddings="", **settings)
            with Engine(cfg) as engine:
                out = _Run(world, sim, engine, arm.k or sim.k).go()
        else:
            out = _Run(world, sim, None, sim.k).go()
    out.update(
        strategy=strategy, seed=seed, engine_applied=settings, runtime_s=time.perf_counter() - started, cpu_s=time.process_time() - cpu
    )
    return out


def _gain(truth: Truth, s: Situation) -> int:
    return len(truth.skills & s.needs) - len(truth.skills & s.harmful)


class _Run:
    def __init__(self, world: World, sim: SimConfig, engine: Engine | None, k: int):
        self.world, self.sim, self.engine, self.k = world, sim, engine, k
        self.truth: dict[int, Truth] = {}
        self.live: set[int] = set()  # ids that can be shown (active or resident)
        self.episodes: list[dict[str, Any]] = []
        self.lessons: list[tuple[int, int, bool]] = []  # (episode, new item id, names a needed skill)
        self.stale: list[int] = []
        self._gains: dict[tuple[str, bool], dict[int, int]] = {}

    def go(self) -> dict[str, Any]:
        if self.engine is not None:
            # The starter is distinct by construction (no starter item ever
            # merged with dedup on); skipping the check halves the setup time.
            for new, truth in self.world.starter:
                added = self.engine.add_item(new, dedup=False)
                self.truth[added.item.id] = truth
                self.live.add(added.item.id)
        snapshots: dict[str, dict[str, Any]] = {}
        for task in self.world.tasks:
            if task.index == self.world.drift_episode and self.engine is not None:
                flipped = set(self.world.flipped)
                self.stale = sorted(i for i, t in self.truth.items() if t.skills & flipped)
            self.episodes.append(self._episode(task.index, task.phase, task.operator, task.query))
            if task.index == self.sim.train_episodes - 1:
                snapshots["train_end"] = self._snapshot(task.index)
        snapshots["run_end"] = self._snapshot(len(self.world.tasks) - 1)
        return {
            "episodes": self.episodes,
            "snapshots": snapshots,
            "lessons": self.lessons,
            "stale": self.stale,
            "drift_episode": self.world.drift_episode,
            "flipped": list(self.world.flipped),
        }

    # -------------------------------------------------------------- episode

    def _episode(self, index: int, phase: str, op: Operator, query: str) -> dict[str, Any]:
        seed, sim, eng = self.world.seed, self.sim, self.engine
        situation = self.world.situation(op, index)
        shown: list[Shown] = []
        ndcg = ndcg_ctx = None
        tokens = 0
        episode_id = None
        if eng is not None:
            # The agent names the operator and its family, as a bundled task would.
            r = eng.retrieve(query, operator=op.name, family=op.family, k=self.k, client="learning-benchmark")
            episode_id, tokens = r.episode_id, r.tokens
            chars = lambda s: len(s.title) + len(s.content) + len(s.code or "")  # noqa: E731
            shown = [Shown(s.id, self._truth(s.id), True, chars(s)) for s in r.resident_rules]
            shown += [Shown(s.id, self._truth(s.id), False, chars(s)) for s in r.items]
            ndcg, ndcg_ctx = self._ndcg(op, index, situation, shown)
        out = run_episode(op, situation, shown, tokens, seed, index, sim)
        merged = self._record(eng, episode_id, op, situation, out, index) if eng is not None else None
        fit = lambda s: bool(s.truth.skills & situation.needs)  # noqa: E731
        used, reported = set(out.used), set(out.reported)
        return {
            "phase": phase,
            "family": op.family,
            "operator": op.name,
            "success": int(out.success),
            "p_expected": out.p_expected,
            "p_success": out.p_success,
            "speedup": out.speedup,
            "z": out.z,
            "ndcg": ndcg,
            "ndcg_ctx": ndcg_ctx,
            "tokens": tokens,
            "irrelevant_tokens": out.irrelevant_tokens,
            "shown": len(shown),
            "residents": sum(s.resident for s in shown),
            "residents_fit": sum(1 for s in shown if s.resident and fit(s)),
            "shown_fit": sum(1 for s in shown if fit(s)),
            "used": len(used),
            "reported": len(reported),
            "reported_used": len(used & reported),
            "rules_used": sum(1 for s in shown if s.resident and s.id in used),
            "used_useful": sum(1 for s in shown if s.id in used and fit(s)),
            "misapplied": out.misapplied,
            "from_memory": len(out.covered_from_memory),
            "misleading": out.n_misleading,
            "lesson": out.lesson_skill,
            "lesson_merged": merged,
            "ids": [s.id for s in shown],
        }

    def _record(self, eng: Engine, episode_id: int, op: Operator, situation: Situation, out: Outcome, index: int) -> bool | None:
        """Store the attempts, the reported adoptions and the lesson; whether
        the engine merged the lesson into an existing item (None: no lesson)."""
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
            episode_id,
            [Adoption(id=i, evidence="applied in the kernel") for i in out.reported],
            attempt_id=best_attempt,
            lesson=lesson,
        )
        if report.new_item is not None and not report.lesson_merged:
            self.truth[report.new_item.id] = Truth(frozenset([out.lesson_skill]), frozenset([op.family]))
            self.live.add(report.new_item.id)
            self.lessons.append((index, report.new_item.id, out.lesson_skill in situation.needs))
        if report.consolidation is not None:
            self.live = {it.id for it in self._items() if it.status in ("active", "resident")}
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
            self.truth[item_id] = Truth(frozenset().union(*(p.skills for p in parts)), frozenset().union(*(p.families for p in parts)))
        return self.truth[item_id]

    def _ndcg(self, op: Operator, index: int, situation: Situation, shown: list[Shown]) -> tuple[float | None, float | None]:
        """NDCG@k of the retrieved items against the best k the memory could
        have offered as items (every live entry but this task's resident
        rules), and NDCG of the whole context in the order shown (rules, then
        items) against the best context of the same length from every live
        entry. Gains are clipped at 0."""
        # Truth never changes and a situation only at the drift: cache gains.
        known = self._gains.setdefault((op.name, self.world.drifted(index)), {})
        for i in self.live - known.keys():
            known[i] = max(_gain(self._truth(i), situation), 0)
        for s in shown:
            if s.id not in known:
                known[s.id] = max(_gain(s.truth, situation), 0)
        gain = {i: known[i] for i in self.live}
        residents = {s.id for s in shown if s.resident}
        items = [s for s in shown if not s.resident]
        item_pool = [g for i, g in gain.items() if i not in residents]
        at_k = metrics.ndcg([known[s.id] for s in items], item_pool, self.k)
        whole = metrics.ndcg([known[s.id] for s in shown], list(gain.values()), len(shown)) if shown else None
        return at_k, whole

    # -------------------------------------------------------------- snapshots

    def _items(self, status: str | None = None) -> list[Item]:
        out: list[Item] = []
        while True:
            page = self.engine.list_items(status=status, limit=1000, offset=len(out))
            out += page
            if len(page) < 1000:
                return out

    def _snapshot(self, t: int) -> dict[str, Any]:
        if self.engine is None:
            return {
                "fidelity": None,
                "rulebook_precision": None,
                "rules": 0,
                "rule_tokens": 0,
                "items": 0,
                "misleading_rules": 0,
                "consolidations": 0,
            }
        seen = [it for it in self._items() + self._items("merged") if it.n_retrieved > 0]
        values = [(it.utility, self.world.value(self._truth(it.id), t)) for it in seen]
        rules = self.engine.resident_rules()
        precise = [all(self.world.value(self._truth(d), t) > 0 for d in r.derived_from) for r in rules]
        stats = self.engine.stats()
        harmful = self.world.misleading(t)
        return {
            "fidelity": metrics.spearman([u for u, _ in values], [v for _, v in values]),
            "rulebook_precision": sum(precise) / len(precise) if precise else None,
            "rules": len(rules),
            "rule_tokens": sum(r.tokens for r in rules),
            "items": stats.items_by_status.get("active", 0) + stats.items_by_status.get("resident", 0),
            "misleading_rules": sum(bool(self._truth(r.id).skills & harmful) for r in rules),
            "consolidations": stats.consolidations,
        }


def _eval_result(op: Operator, status: str, ms: float | None) -> EvalResult:
    """What a harness on an NPU would report; simulated numbers."""
    timing = lambda t: TimingStats(median_ms=t, iqr_ms=0.0, mean_ms=t, min_ms=t, reps=20)  # noqa: E731
    correct = status == "correct"
    return EvalResult(
        status=status,
        task=op.name,
        backend="npu",
        hardware="simulated",
        candidate_hash=hashlib.sha256(f"{op.name}:{ms}".encode()).hexdigest()[:16],
        correct=correct,
        reference_timing=timing(op.t_ref_ms),
        candidate_timing=timing(ms) if correct and ms else None,
        speedup=op.t_ref_ms / ms if correct and ms else None,
        message="" if correct else f"simulated {status}",
    )
