"""Closing an episode, and the ATU credit it carries: every item it showed
moves toward its target (adopted items toward their share of the reward,
unused ones toward -beta), inside the caller's write transaction. An episode
closed without an attempt carries no evidence: it closes without credit and
changes nothing else. Neither does one whose only attempts never ran
because the sandbox could not start (`sandbox_error`) or a part of the
host failed under them (`host_error`): the host's doing, not the kernel's;
or whose task's reference failed (`task_error`). A
correct attempt whose speedup is unverified earns correctness only."""

from __future__ import annotations

import json
import time

from sage_engine.config import Config
from sage_engine.errors import Conflict
from sage_engine.memory import utility
from sage_engine.memory.store import Store
from sage_engine.models import AdoptionReport, CloseReason, UtilityUpdate

# Statuses that say nothing about the kernel, so nothing about what the
# episode showed: the candidate never ran or the host failed under it
# (sandbox_error, host_error), or the task's own reference failed (task_error).
NOT_EVIDENCE = frozenset({"sandbox_error", "host_error", "task_error"})


def attempt_outcome(row) -> utility.AttemptOutcome:
    """An attempt as ATU counts it: a correct kernel whose speedup is
    unverified (`speedup_trusted` 0) counts as correct, with no time and no
    speedup: neither the improvement term nor the speedup term takes it."""
    correct = row["status"] == "correct"
    if row["speedup_trusted"] == 0:
        return utility.AttemptOutcome(correct, None, None)
    return utility.AttemptOutcome(correct, row["candidate_ms"], row["speedup"])


def close_and_credit(store: Store, config: Config, episode_id: int, reason: CloseReason) -> AdoptionReport:
    """Close the episode and run ATU over everything it showed, inside
    the caller's write transaction; without an attempt, close it without
    credit and change nothing else."""
    records = store.episodes
    row = records.get(episode_id)
    if row["status"] != "open":
        raise Conflict(f"episode {episode_id} is already closed ({outcome_text(row)})")
    outcomes = [attempt_outcome(a) for a in records.attempts(episode_id) if a["status"] not in NOT_EVIDENCE]
    earned = utility.episode_reward(outcomes, config)
    now = time.time()
    if earned is None:
        if not records.close(episode_id, None, None, now, reason):
            raise Conflict(f"episode {episode_id} was closed by another call")
        return AdoptionReport(episode_id=episode_id, closed=True, credited=False, close_reason=reason)
    reward, parts = earned
    adopted = {r["item_id"]: r["weight"] for r in records.adoptions(episode_id)}
    shown = records.shown_ids(episode_id)
    # A resident rule that does not match the task was not "ignored": it
    # did not apply. Penalising it would tie its utility to whichever
    # family happens to be running. Per-task rulebooks show only rules
    # whose scope matched; a global rulebook shows every rule, so there
    # "applied" means its text matches the task.
    off_topic = (
        set()
        if config.rulebook_scope == "task"
        else {i for i, sim in records.resident_match(episode_id).items() if sim < config.rule_match_threshold}
    )
    targets = utility.credit_targets(shown, adopted, reward, config, not_applicable=off_topic)
    operator = row["operator"] or row["task"]
    family = row["family"]
    rule_version = f"{utility.RULE_VERSION}/{config.reward_mode}"
    updates: list[UtilityUpdate] = []
    for item_id in shown:
        it = store.items.row(item_id)
        is_adopted = item_id in adopted
        ops, fams = json.loads(it["operators_adopted"]), json.loads(it["families_adopted"])
        if is_adopted and operator not in ops:
            ops.append(operator)
        if is_adopted and family and family not in fams:
            fams.append(family)
        fields = {"n_adopted": it["n_adopted"] + int(is_adopted), "operators_adopted": ops, "families_adopted": fams, "updated_at": now}
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


def outcome_text(row) -> str:
    """How a closed episode ended, for messages."""
    return "without credit: it had no attempt" if row["reward"] is None else f"reward {row['reward']:+.3f}"
