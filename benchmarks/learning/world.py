"""One seeded world: which skills each operator needs (and when), the starter
memory, the task stream, and the ground truth that the metrics score the
engine against.

The engine never sees the ground truth: it sees item text, task text, which
items the agent reported adopting and how the kernels measured.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from benchmarks.learning.catalogue import ALL_SKILLS, FAMILIES, IRRELEVANT, MIRROR, MISLEADING, SHARED, Family, Skill
from benchmarks.learning.config import SimConfig
from sage_engine.models import NewItem


@dataclass(frozen=True)
class Operator:
    name: str
    family: str
    needs: frozenset[str]  # skill ids, before any drift
    t_ref_ms: float
    pair: frozenset[str] = frozenset()  # two needed skills that only pay together; empty if none
    harm: str | None = None  # a skill of its family that hurts this operator


@dataclass(frozen=True)
class Situation:
    """What is true for one operator at one point of the stream."""

    needs: frozenset[str]
    harmful: frozenset[str]  # misleading skills, plus the operator's own harm
    pair: frozenset[str]


@dataclass(frozen=True)
class Task:
    index: int
    phase: str  # "train", "retest" or "heldout"
    operator: Operator
    query: str


@dataclass(frozen=True)
class Truth:
    """What an item really is: the skills its text carries and the families
    it speaks about (all families for a general item)."""

    skills: frozenset[str]
    families: frozenset[str]


_MISLEADING_IDS = frozenset(s.id for s in MISLEADING)


@dataclass
class World:
    seed: int
    train: list[Family]
    heldout: list[Family]
    affine: dict[str, tuple[str, ...]]  # family -> shared skill ids it relies on
    operators: dict[str, Operator]
    starter: list[tuple[NewItem, Truth]]
    flipped: tuple[str, ...] = ()  # shared skills that flip at drift_episode
    drift_episode: int | None = None
    tasks: list[Task] = field(default_factory=list)

    @property
    def families(self) -> list[Family]:
        return self.train + self.heldout

    def operators_of(self, family: str) -> list[Operator]:
        return [o for o in self.operators.values() if o.family == family]

    def drifted(self, t: int) -> bool:
        return self.drift_episode is not None and t >= self.drift_episode

    def _swap(self, skills: frozenset[str], t: int) -> frozenset[str]:
        if not self.drifted(t):
            return skills
        return frozenset(MIRROR[s] if s in self.flipped else s for s in skills)

    def misleading(self, t: int) -> frozenset[str]:
        if not self.drifted(t):
            return _MISLEADING_IDS
        return (_MISLEADING_IDS - {MIRROR[s] for s in self.flipped}) | set(self.flipped)

    def situation(self, op: Operator, t: int) -> Situation:
        harmful = self.misleading(t) | ({op.harm} if op.harm else set())
        return Situation(self._swap(op.needs, t), frozenset(harmful), self._swap(op.pair, t))

    def gain(self, truth: Truth, op: Operator, t: int) -> int:
        """Needed skills an item brings to a task at time t, minus the harmful ones it carries."""
        s = self.situation(op, t)
        return len(truth.skills & s.needs) - len(truth.skills & s.harmful)

    def value(self, truth: Truth, t: int) -> float:
        """True usefulness of an item at time t: its mean gain over the
        operators of the families it speaks about (those whose tasks retrieve it)."""
        ops = [o for f in truth.families for o in self.operators_of(f)]
        return sum(self.gain(truth, o, t) for o in ops) / len(ops) if ops else 0.0


def build_world(sim: SimConfig, seed: int) -> World:
    # The first generator draws exactly what the first version of the world
    # drew, so the easy world is unchanged; the harder mechanisms draw from
    # their own generator.
    rng = random.Random(f"world:{seed}")
    extra = random.Random(f"world-extra:{seed}")
    fams = list(FAMILIES)
    rng.shuffle(fams)
    train = fams[: sim.n_train_families]
    heldout = fams[sim.n_train_families : sim.n_train_families + sim.n_heldout_families]
    affine: dict[str, tuple[str, ...]] = {}
    operators: dict[str, Operator] = {}
    for fam in train + heldout:
        affine[fam.name] = tuple(s.id for s in rng.sample(SHARED, sim.shared_per_family))
        for op in fam.operators:
            shared = rng.sample(affine[fam.name], sim.needed_shared)
            own = [s.id for s in rng.sample(fam.skills, sim.needed_family)]
            t_ref = round(rng.uniform(0.5, 2.0), 3)
            pair = frozenset([extra.choice(sorted(shared)), extra.choice(sorted(own))]) if extra.random() < sim.p_pair else frozenset()
            unneeded = sorted(s.id for s in fam.skills if s.id not in own)
            harm = extra.choice(unneeded) if unneeded and extra.random() < sim.p_operator_harm else None
            operators[op] = Operator(op, fam.name, frozenset(shared + own), t_ref, pair, harm)
    starter = _starter(sim, rng, train + heldout, affine)
    if sim.crowd_per_family:
        starter += _crowd(sim, extra, train + heldout, affine)
        extra.shuffle(starter)
    world = World(seed, train, heldout, affine, operators, starter)
    if sim.drift_skills:
        world.drift_episode = sim.drift_episode
        at = train[min(world.drift_episode // sim.episodes_per_family, len(train) - 1)]
        world.flipped = tuple(sorted(extra.sample(affine[at.name], sim.drift_skills)))
    world.tasks = _stream(sim, world)
    return world


def _starter(sim: SimConfig, rng: random.Random, fams: list[Family], affine: dict[str, tuple[str, ...]]) -> list[tuple[NewItem, Truth]]:
    """A starter pack: per family, useful items for its own and its affine
    shared skills, and misleading and irrelevant items that name the same
    operators. Order is shuffled so item ids carry no signal."""
    by_id = {s.id: s for s in SHARED}
    out: list[tuple[NewItem, Truth]] = []
    everywhere = frozenset(f.name for f in fams)
    for fam in fams:
        useful = list(fam.skills) + [by_id[i] for i in affine[fam.name]]
        misleading = rng.sample(MISLEADING, sim.harmful_per_family)
        irrelevant = rng.sample(IRRELEVANT, sim.irrelevant_per_family)
        for skill in useful + misleading + irrelevant:
            op = rng.choice(fam.operators)
            out.append((family_item(skill, fam.name, op), Truth(frozenset([skill.id]), frozenset([fam.name]))))
    if sim.general_items:
        for skill in SHARED + MISLEADING:
            item = NewItem(title=skill.phrase, content=f"{skill.advice} Applies to any Ascend kernel.", tags=["general"])
            out.append((item, Truth(frozenset([skill.id]), everywhere)))
    rng.shuffle(out)
    return out


def _crowd(sim: SimConfig, rng: random.Random, fams: list[Family], affine: dict[str, tuple[str, ...]]) -> list[tuple[NewItem, Truth]]:
    """Useless notes in the words of a family's useful items: the skill's
    phrase and cue, an operator and the family, then advice that does nothing
    for the kernel. Lexical retrieval ranks them next to the useful ones."""
    by_id = {s.id: s for s in SHARED}
    out: list[tuple[NewItem, Truth]] = []
    for fam in fams:
        useful = list(fam.skills) + [by_id[i] for i in affine[fam.name]]
        for _ in range(sim.crowd_per_family):
            skill, noise, op = rng.choice(useful), rng.choice(IRRELEVANT), rng.choice(fam.operators)
            item = NewItem(
                title=f"{skill.phrase} notes for {op}",
                content=f"While writing {op} ({fam.name} family) we looked at {skill.phrase} for the {skill.cue} case. {noise.advice}",
                tags=[fam.name, op],
                operator=op,
                family=fam.name,
            )
            out.append((item, Truth(frozenset([noise.id]), frozenset([fam.name]))))
    return out


def family_item(skill: Skill, family: str, operator: str) -> NewItem:
    return NewItem(
        title=f"{skill.phrase} in {family} kernels",
        content=f"Seen while writing {operator} ({family} family): {skill.advice}",
        tags=[family, operator],
        operator=operator,
        family=family,
    )


def lesson_text(skill: Skill, family: str, operator: str, speedup: float) -> tuple[str, str]:
    """What the agent writes after an episode: the skill it credits, named in
    the operator's and family's words."""
    return (
        f"{skill.phrase} helped {operator}",
        f"{operator} in the {family} family: {skill.advice} The best kernel ran at {speedup:.2f}x the reference.",
    )


def task_query(op: Operator, rng: random.Random, sim: SimConfig) -> str:
    # Mirrored skills share their cue word, so a query reads the same before
    # and after a drift: the text cannot tell the engine that the world changed.
    cues = [ALL_SKILLS[s].cue for s in sorted(op.needs) if rng.random() < sim.p_hint]
    if rng.random() < sim.p_distractor_hint:
        other = sorted(set(ALL_SKILLS) - op.needs)
        cues.append(ALL_SKILLS[rng.choice(other)].cue)
    rng.shuffle(cues)
    notes = f" Notes: {', '.join(dict.fromkeys(cues))}." if cues else ""
    return f"Write an Ascend kernel for {op.name} ({op.family} family).{notes}"


def _stream(sim: SimConfig, world: World) -> list[Task]:
    """Training blocks one family at a time, then the first families again,
    then the held-out families. Operators within a block are drawn uniformly."""
    rng = random.Random(f"stream:{world.seed}")
    plan: list[tuple[str, Family, int]] = [("train", f, sim.episodes_per_family) for f in world.train]
    plan += [("retest", f, sim.retest_episodes) for f in world.train[: sim.retest_families]]
    plan += [("heldout", f, sim.heldout_episodes) for f in world.heldout]
    tasks: list[Task] = []
    for phase, fam, n in plan:
        for _ in range(n):
            op = world.operators[rng.choice(fam.operators)]
            tasks.append(Task(len(tasks), phase, op, task_query(op, rng, sim)))
    return tasks
