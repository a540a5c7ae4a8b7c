"""One seeded world: which skills each operator needs, the starter memory, the
task stream, and the ground truth that the metrics score the engine against.

The engine never sees the ground truth: it sees item text, task text, which
items the agent adopted and how the kernels measured.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from benchmarks.learning.catalogue import ALL_SKILLS, FAMILIES, IRRELEVANT, MISLEADING, SHARED, Family, Skill
from benchmarks.learning.config import SimConfig
from sage_engine.models import NewItem


@dataclass(frozen=True)
class Operator:
    name: str
    family: str
    needs: frozenset[str]  # skill ids
    t_ref_ms: float


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


@dataclass
class World:
    seed: int
    train: list[Family]
    heldout: list[Family]
    affine: dict[str, tuple[str, ...]]  # family -> shared skill ids it relies on
    operators: dict[str, Operator]
    starter: list[tuple[NewItem, Truth]]
    tasks: list[Task] = field(default_factory=list)

    @property
    def families(self) -> list[Family]:
        return self.train + self.heldout

    def operators_of(self, family: str) -> list[Operator]:
        return [o for o in self.operators.values() if o.family == family]

    def gain(self, truth: Truth, op: Operator) -> int:
        """Needed skills an item brings to a task, minus the misleading ones it carries."""
        misleading = sum(1 for s in truth.skills if s in _MISLEADING_IDS)
        return len(truth.skills & op.needs) - misleading

    def value(self, truth: Truth) -> float:
        """True usefulness of an item: its mean gain over the operators of the
        families it speaks about (those whose tasks retrieve it)."""
        ops = [o for f in truth.families for o in self.operators_of(f)]
        return sum(self.gain(truth, o) for o in ops) / len(ops) if ops else 0.0


_MISLEADING_IDS = frozenset(s.id for s in MISLEADING)


def is_misleading(skill_id: str) -> bool:
    return skill_id in _MISLEADING_IDS


def build_world(sim: SimConfig, seed: int) -> World:
    rng = random.Random(f"world:{seed}")
    fams = list(FAMILIES)
    rng.shuffle(fams)
    train = fams[: sim.n_train_families]
    heldout = fams[sim.n_train_families: sim.n_train_families + sim.n_heldout_families]
    affine: dict[str, tuple[str, ...]] = {}
    operators: dict[str, Operator] = {}
    for fam in train + heldout:
        affine[fam.name] = tuple(s.id for s in rng.sample(SHARED, sim.shared_per_family))
        for op in fam.operators:
            needs = rng.sample(affine[fam.name], sim.needed_shared) + [s.id for s in rng.sample(fam.skills, sim.needed_family)]
            operators[op] = Operator(op, fam.name, frozenset(needs), round(rng.uniform(0.5, 2.0), 3))
    world = World(seed, train, heldout, affine, operators, _starter(sim, rng, train + heldout, affine))
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


def family_item(skill: Skill, family: str, operator: str) -> NewItem:
    return NewItem(
        title=f"{skill.phrase} in {family} kernels",
        content=f"Seen while writing {operator} ({family} family): {skill.advice}",
        tags=[family, operator], operator=operator, family=family,
    )


def lesson_text(skill: Skill, family: str, operator: str, speedup: float) -> tuple[str, str]:
    """What the agent writes after an episode: the skill it credits, named in
    the operator's and family's words."""
    return (
        f"{skill.phrase} helped {operator}",
        f"{operator} in the {family} family: {skill.advice} The best kernel ran at {speedup:.2f}x the reference.",
    )


def task_query(op: Operator, rng: random.Random, sim: SimConfig) -> str:
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
