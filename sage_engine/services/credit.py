"""Closing an episode, and the ATU credit it carries: every item it showed
moves toward its target (adopted items toward their share of the reward,
unused ones toward -beta), inside the caller's write transaction. An episode
closed without an attempt carries no evidence: it closes without credit and
changes nothing else. Neither does one whose only attempts never ran
because the sandbox could not start (`sandbox_error`) or a part of the
host failed under them (`host_error`): the host's doing, not the kernel's;
or whose task's reference failed (`task_error`). A
correct attempt whose speedup is unverified earns correctness only. Only
attempts on the episode's own task are evidence, and the operator and family
credited are that task's. On a team memory one person's adoptions count up
to a cap per episode and per day; the rest are kept, not credited."""

from __future__ import annotations

import json
import time
from typing import Sequence

from sage_engine.config import Config
from sage_engine.errors import Conflict
from sage_engine.memory import utility
from sage_engine.memory.store import Store
from sage_engine.memory.store.sql import Row
from sage_engine.models import AdoptionReport, CloseReason, UtilityUpdate
from sage_engine.services.team import is_team

# Statuses that say nothing about the kernel, so nothing about what the
# episode showed: the candidate never ran or the host failed under it
# (sandbox_error, host_error), or the task's own reference failed (task_error).
NOT_EVIDENCE = frozenset({"sandbox_error", "host_error", "task_error"})


def attempt_outcome(row: Row) -> utility.AttemptOutcome:
    """An attempt as ATU counts it: a correct kernel whose speedup is
    unverified (`speedup_trusted` 0) counts as correct, with no time and no
    speedup: neither the improvement term nor the speedup term takes it."""
    correct = row["status"] == "correct"
    if row["speedup_trusted"] == 0:
        return utility.AttemptOutcome(correct, None, None)
    return utility.AttemptOutcome(correct, row["candidate_ms"], row["speedup"])


def own_task(episode: Row, attempts: Sequence[Row]) -> str | None:
    """The task an episode's evidence must be about: its own, or (an
    episode opened with free text) the task its first attempt evaluated."""
    if not episode["task_free"]:
        return episode["task"]
    return attempts[0]["task"] if attempts else None


def close_and_credit(store: Store, config: Config, episode_id: int, reason: CloseReason) -> AdoptionReport:
    """Close the episode and run ATU over everything it showed, inside
    the caller's write transaction; without an attempt on the episode's own
    task, close it without credit and change nothing else."""
    records = store.episodes
    row = records.get(episode_id)
    if row["status"] != "open":
        raise Conflict(f"episode {episode_id} is already closed ({outcome_text(row)})")
    ran = [a for a in records.attempts(episode_id) if a["status"] not in NOT_EVIDENCE]
    # An attempt on some other task (a tiny reference of one's own) says
    # nothing about what this episode showed for its task.
    task = own_task(row, ran)
    evidence = [a for a in ran if a["task"] == task]
    earned = utility.episode_reward([attempt_outcome(a) for a in evidence], config)
    now = time.time()
    if earned is None:
        if not records.close(episode_id, None, None, now, reason):
            raise Conflict(f"episode {episode_id} was closed by another call")
        return AdoptionReport(episode_id=episode_id, closed=True, credited=False, close_reason=reason)
    reward, parts = earned
    # Credit for an item merged into a rule since it was shown reaches the rule.
    absorbed = {i: absorber(store, i) for i in records.shown_ids(episode_id)}
    shown = list(dict.fromkeys(absorbed.values()))
    adopted: dict[int, float] = {}
    for r in records.adoptions(episode_id):
        item: int = r["item_id"]
        owner = absorbed.get(item, item)
        adopted[owner] = max(adopted.get(owner, 0.0), r["weight"])
    uncounted: set[int] = set()
    if is_team(store, config):
        # One person's adoptions move a bounded amount, per episode and per day.
        used = store.audit.adopted_credits_since(row["author"], now - 86_400)
        allowance = max(0, min(config.team_adoptions_per_episode, config.team_adoptions_per_day - used))
        uncounted = set(list(adopted)[allowance:])
        adopted = {i: w for i, w in adopted.items() if i not in uncounted}
    # A resident rule that does not match the task was not "ignored": it
    # did not apply. Penalising it would tie its utility to whichever
    # family happens to be running. Per-task rulebooks show only rules
    # whose scope matched; a global rulebook shows every rule, so there
    # "applied" means its text matches the task.
    off_topic = (
        set()
        if config.rulebook_scope == "task"
        else {absorbed.get(i, i) for i, sim in records.resident_match(episode_id).items() if sim < config.rule_match_threshold}
    )
    targets = utility.credit_targets(shown, adopted, reward, config, not_applicable=off_topic | uncounted)
    # Operator and family are the evaluated task's, never the caller's claim
    # (compile_and_bench records them from the task it loaded). A result
    # recorded in-process from elsewhere (`Engine.record_result`, no MCP tool)
    # without them keeps the episode's, as before.
    labelled = evidence[0]
    if labelled["operator"]:
        operator, family = labelled["operator"], labelled["family"]
    else:
        operator, family = row["operator"] or row["task"], row["family"]
    rule_version = f"{utility.RULE_VERSION}/{config.reward_mode}"
    updates: list[UtilityUpdate] = []
    for item_id in shown:
        if item_id in uncounted:
            continue
        it = store.items.row(item_id)
        is_adopted = item_id in adopted
        ops, fams = json.loads(it["operators_adopted"]), json.loads(it["families_adopted"])
        adopters = json.loads(it["adopted_by"])
        if is_adopted and operator not in ops:
            ops.append(operator)
        if is_adopted and family and family not in fams:
            fams.append(family)
        if is_adopted and row["author"] and row["author"] not in adopters:
            adopters.append(row["author"])
        fields = {
            "n_adopted": it["n_adopted"] + int(is_adopted),
            "operators_adopted": ops,
            "families_adopted": fams,
            "adopted_by": adopters,
            "updated_at": now,
        }
        if item_id not in off_topic:  # p is the adoption rate where the rule applied
            fields["adoption_rate"] = utility.adoption_ema(it["adoption_rate"], is_adopted, config.adoption_ema_mu)
        if item_id in targets:
            target, _ = targets[item_id]
            eta = utility.learning_rate(it["n_retrieved"], config.eta_min, config.learning_rate_form)
            after = utility.step(it["utility"], target, eta)
            fields.update(
                utility=after,
                n_credited=it["n_credited"] + 1,
                target_sum=it["target_sum"] + target,
                target_sq=it["target_sq"] + target * target,
            )
            update = UtilityUpdate(
                item_id=item_id,
                episode_id=episode_id,
                strategy=config.credit_strategy,
                adopted=is_adopted,
                before=it["utility"],
                after=after,
                target=target,
                eta=eta,
            )
            store.audit.log_update(update, rule_version, now)
            updates.append(update)
        store.items.update(item_id, fields)
    if not records.close(episode_id, reward, json.dumps(parts), now, reason):
        raise Conflict(f"episode {episode_id} was closed by another call")
    return AdoptionReport(
        episode_id=episode_id, reward=reward, reward_parts=parts, updates=updates, closed=True, credited=True, close_reason=reason
    )


def absorber(store: Store, item_id: int) -> int:
    """The item credit for `item_id` belongs to: itself, or the rule it was
    merged into (and that rule's, should it have been merged in turn)."""
    for _ in range(8):
        row = store.items.row(item_id)
        if row["status"] != "merged" or not row["merged_into"]:
            return item_id
        item_id = row["merged_into"]
    return item_id


def outcome_text(row: Row) -> str:
    """How a closed episode ended, for messages."""
    return "without credit: it had no attempt" if row["reward"] is None else f"reward {row['reward']:+.3f}"
