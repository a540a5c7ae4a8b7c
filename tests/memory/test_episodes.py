"""ATU through the Engine, on a real SQLite file and a real PostgreSQL database."""

import pytest

from sage_engine.engine import Engine
from sage_engine.errors import Conflict, InvalidInput, NotFound
from sage_engine.models import Adoption, Lesson, NewItem
from tests.support.engine import make_result


def seed(engine, n=3):
    ids = []
    for i in range(n):
        ids.append(
            engine.add_item(
                NewItem(title=f"softmax trick {i}", content=f"row softmax kernels benefit from idea number {i} {'x' * i}", tags=["softmax"])
            ).item.id
        )
    return ids


def run_episode(engine, adopt, status="correct", speedup=None):
    r = engine.retrieve("row softmax kernel", client="test")
    shown = [i.id for i in r.items]
    engine.record_result(make_result(status, 2.0, speedup), episode_id=r.episode_id)
    report = engine.record_adoption(r.episode_id, [Adoption(id=i, evidence="used") for i in adopt if i in shown])
    return r, report


def test_adopted_items_rise_and_unused_items_fall_under_atu(engine):
    a, b, c = seed(engine)
    r, report = run_episode(engine, [a])
    assert report.reward > 0
    moved = {u.item_id: u for u in report.updates}
    assert moved[a].after > moved[a].before
    assert moved[b].after < moved[b].before and moved[c].after < moved[c].before
    assert engine.get_item(a).utility > 0 > engine.get_item(b).utility


def test_uniform_credit_moves_adopted_and_unused_items_alike(config):
    with Engine(config.replace(credit_strategy="uniform")) as eng:
        a, b, _ = seed(eng)
        _, report = run_episode(eng, [a])
        moved = {u.item_id: u.after - u.before for u in report.updates}
        assert moved[a] == pytest.approx(moved[b]) and moved[a] > 0


def test_every_update_is_written_to_the_audit_log(engine):
    a, *_ = seed(engine)
    r, report = run_episode(engine, [a])
    rows = engine.store.rows("SELECT item_id, before, after, strategy, rule_version FROM utility_log WHERE episode_id = ?", (r.episode_id,))
    assert len(rows) == len(report.updates) == 3
    assert {row["strategy"] for row in rows} == {"atu"} and all(row["rule_version"].startswith("atu-") for row in rows)
    history = engine.utility_history(a)
    assert [(u.episode_id, u.adopted, u.strategy) for u in history] == [(r.episode_id, True, "atu")]
    assert history[0].after == engine.get_item(a).utility


def test_failed_episode_pushes_adopted_items_down(engine):
    a, *_ = seed(engine)
    _, report = run_episode(engine, [a], status="compile_error")
    assert report.reward == pytest.approx(-engine.config.delta)
    assert engine.get_item(a).utility < 0


def test_adopting_an_item_the_episode_never_showed_is_refused_and_changes_nothing(engine):
    seed(engine)
    hidden = engine.add_item(NewItem(title="matmul tiling", content="tile the GEMM by 128")).item.id
    r = engine.retrieve("row softmax kernel")
    assert hidden not in [i.id for i in r.items]
    with pytest.raises(InvalidInput, match="not shown in episode"):
        engine.record_adoption(r.episode_id, [Adoption(id=hidden)])
    assert engine.get_episode(r.episode_id).status == "open"
    assert engine.store.scalar("SELECT COUNT(*) FROM adoptions") == 0


def test_unknown_episode_is_a_clear_not_found(engine):
    with pytest.raises(NotFound, match="retrieve_rules"):
        engine.record_adoption(424242, [])


def test_closing_twice_is_a_conflict(engine):
    seed(engine)
    r = engine.retrieve("row softmax kernel")
    engine.close_episode(r.episode_id)
    with pytest.raises(Conflict):
        engine.close_episode(r.episode_id)


def test_lesson_becomes_an_item_with_provenance(engine):
    seed(engine)
    r = engine.retrieve("row softmax kernel", client="c")
    res = engine.record_result(make_result("correct", 1.0), episode_id=r.episode_id)
    report = engine.record_adoption(
        r.episode_id,
        [],
        attempt_id=res.attempt_id,
        lesson=Lesson(title="Use exp2 for softmax", content="exp2 with a log2e scale is cheaper", tags=["softmax"]),
    )
    item = report.new_item
    assert item.source_episode == r.episode_id and item.source_attempt == res.attempt_id
    assert item.utility == 0.0 and not report.lesson_merged


def test_a_bad_lesson_is_refused_before_anything_is_written(engine):
    a, *_ = seed(engine)
    r = engine.retrieve("row softmax kernel")
    with pytest.raises(InvalidInput, match="content"):
        engine.record_adoption(r.episode_id, [Adoption(id=a)], lesson=Lesson(title="t", content="  "))
    assert engine.get_episode(r.episode_id).status == "open"
    assert engine.store.scalar("SELECT COUNT(*) FROM adoptions") == 0


@pytest.mark.parametrize("label", ["operator", "family", "backend", "hardware"])
def test_every_label_an_episode_accepts_its_lesson_can_carry(engine, label):
    # The lesson inherits the episode's labels: what retrieval accepts, an item must hold.
    with pytest.raises(InvalidInput, match=f"{label} is 201 characters; the limit is 200"):
        engine.retrieve("row softmax kernel", **{label: "x" * 201})
    r = engine.retrieve("row softmax kernel", **{label: "x" * 200})
    report = engine.record_adoption(r.episode_id, [], lesson=Lesson(title="long labels", content="still stored"))
    assert getattr(report.new_item, label) == "x" * 200


def test_a_new_retrieval_by_the_same_client_and_task_closes_the_previous_episode(engine):
    seed(engine)
    first = engine.retrieve("row softmax kernel", client="cursor-1")
    second = engine.retrieve("row softmax kernel", client="cursor-1")
    assert engine.get_episode(first.episode_id).status == "closed"
    assert engine.get_episode(second.episode_id).status == "open"


def test_idle_episodes_are_closed_and_only_those_with_an_attempt_are_credited(config, engine):
    seed(engine)
    tried = engine.retrieve("row softmax kernel", client="a")
    engine.record_result(make_result("compile_error"), episode_id=tried.episode_id)
    browsed = engine.retrieve("row softmax kernel", client="b")
    with Engine(config.replace(episode_idle_s=0.0)) as eng:  # both count as idle now
        closed = {c.episode_id: c for c in eng.close_idle_episodes()}
        assert set(closed) == {tried.episode_id, browsed.episode_id}
        assert closed[tried.episode_id].credited and closed[tried.episode_id].close_reason == "idle"
        assert eng.get_episode(tried.episode_id).reward == pytest.approx(-eng.config.delta)
        assert not closed[browsed.episode_id].credited and not closed[browsed.episode_id].updates
        episode = eng.get_episode(browsed.episode_id)
        assert (episode.status, episode.reward, episode.close_reason, episode.credited) == ("closed", None, "idle", False)


@pytest.mark.parametrize("status", ["sandbox_error", "host_error"])
def test_an_attempt_the_host_failed_under_is_no_evidence(engine, status):
    a, *_ = seed(engine)
    _, report = run_episode(engine, [a], status=status)
    assert not report.credited and report.reward is None and not report.updates
    assert engine.get_item(a).utility == 0 and engine.get_item(a).n_adopted == 0
    # Beside an attempt that ran, it is left out: the episode is credited on that one alone.
    r = engine.retrieve("row softmax kernel", client="test")
    engine.record_result(make_result(status), episode_id=r.episode_id)
    engine.record_result(make_result("correct", 2.0), episode_id=r.episode_id)
    report = engine.record_adoption(r.episode_id, [Adoption(id=a, evidence="used")])
    assert report.credited and report.reward > 0


def test_an_unverified_speedup_earns_correctness_and_nothing_for_speed(engine):
    a, *_ = seed(engine)
    trusted = engine.retrieve("row softmax kernel", client="trusted")
    engine.record_result(make_result("correct", 4.0, 1.0), episode_id=trusted.episode_id)
    engine.record_result(make_result("correct", 1.0, 4.0), episode_id=trusted.episode_id)
    honest = engine.record_adoption(trusted.episode_id, [Adoption(id=a, evidence="used")])
    assert honest.reward_parts["speedup"] > 0 and honest.reward_parts["z"] == pytest.approx(0.75)
    # The same two attempts, the faster one flagged as faster than this machine can go.
    flagged = engine.retrieve("row softmax kernel", client="flagged")
    engine.record_result(make_result("correct", 4.0, 1.0), episode_id=flagged.episode_id)
    engine.record_result(make_result("correct", 1.0, 4.0, trusted=False), episode_id=flagged.episode_id)
    report = engine.record_adoption(flagged.episode_id, [Adoption(id=a, evidence="used")])
    assert report.credited and report.reward_parts["z"] == 0.0
    assert report.reward_parts.get("speedup", 0.0) == 0.0  # log2(1.0): the trusted attempt's speedup only
    assert report.reward < honest.reward
    assert engine.get_episode(flagged.episode_id).attempt_list[1].speedup_trusted is False


def test_an_attempt_whose_task_failed_is_no_evidence(engine):
    a, *_ = seed(engine)
    _, report = run_episode(engine, [a], status="task_error")
    assert not report.credited and report.reward is None and not report.updates
    assert engine.get_item(a).utility == 0


def test_retrieval_logs_exactly_what_was_shown(engine):
    seed(engine, 5)
    r = engine.retrieve("row softmax kernel", k=2)
    detail = engine.get_episode(r.episode_id)
    assert [s.id for s in detail.shown] == [i.id for i in r.items]
    assert r.filtered_out.get("below_top_k") == 3


def test_automatic_consolidation_runs_every_n_closed_episodes(config):
    with Engine(config.replace(auto_consolidate_every=2)) as eng:
        seed(eng)
        _, first = run_episode(eng, [])
        _, second = run_episode(eng, [])
        assert first.consolidation is None and second.consolidation is not None
        assert eng.stats().consolidations == 1


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e.retrieve("softmax", client="\ud800"), "not valid Unicode"),
        (lambda e: e.retrieve("softmax", operator="x" * 500), "limit is 200"),
        (lambda e: e.load_task("t" * 300), "over 255 characters"),
        (lambda e: e.resolve_candidate("c" * 300 + ".py"), "over 255 characters"),
        (lambda e: e.get_item(2**64), "no memory item"),
        (lambda e: e.get_episode(-1), "no episode"),
    ],
)
def test_arguments_no_database_or_filesystem_could_hold_are_refused_plainly(engine, call, message):
    with pytest.raises((InvalidInput, NotFound), match=message):
        call(engine)
    assert engine.store.scalar("SELECT COUNT(*) FROM episodes") == 0


def test_concurrent_record_adoption_on_one_episode_has_exactly_one_winner(config):
    import threading

    with Engine(config) as setup:
        a, *_ = seed(setup)
        r = setup.retrieve("row softmax kernel")
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def close(n: int) -> None:
        with Engine(config) as eng:
            barrier.wait(timeout=30)
            try:
                outcomes.append(
                    eng.record_adoption(
                        r.episode_id,
                        [Adoption(id=a, evidence=f"caller {n}")],
                        lesson=Lesson(title=f"lesson from caller {n}", content=f"caller {n} says hi"),
                    )
                )
            except Conflict as exc:
                outcomes.append(exc)

    threads = [threading.Thread(target=close, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(type(o).__name__ for o in outcomes) == ["AdoptionReport", "Conflict"]
    with Engine(config) as eng:
        episode = eng.get_episode(r.episode_id)
        assert episode.status == "closed" and len(episode.adopted) == 1
        # The loser's lesson was never stored.
        assert eng.store.scalar("SELECT COUNT(*) FROM items WHERE source_episode = ?", (r.episode_id,)) == 1


def test_an_error_inside_record_adoption_leaves_nothing_stored(engine, monkeypatch):
    a, *_ = seed(engine)
    r = engine.retrieve("row softmax kernel")

    def broken_close(episode_id, reason):
        raise Conflict("closed by a concurrent caller")

    monkeypatch.setattr(engine.episodes, "_close", broken_close)
    with pytest.raises(Conflict):
        engine.record_adoption(r.episode_id, [Adoption(id=a)], lesson=Lesson(title="never stored", content="rolled back"))
    assert engine.store.scalar("SELECT COUNT(*) FROM adoptions") == 0
    assert engine.list_items(limit=100) and all(i.title != "never stored" for i in engine.list_items(limit=100))


def test_a_closed_episode_is_a_conflict_for_evaluation_and_adoption(engine):
    seed(engine)
    r = engine.retrieve("row softmax kernel")
    engine.close_episode(r.episode_id)
    with pytest.raises(Conflict, match="already closed"):
        engine.record_result(make_result(), episode_id=r.episode_id)
    with pytest.raises(Conflict, match="already closed"):
        engine.record_adoption(r.episode_id, [], lesson=Lesson(title="late", content="too late"))


def test_the_same_request_id_is_recorded_once(engine):
    first = engine.record_result(make_result(), request_id="req-1")
    again = engine.record_result(make_result(status="incorrect"), request_id="req-1")
    assert again.attempt_id == first.attempt_id and again.status == "correct"
    assert engine.store.scalar("SELECT COUNT(*) FROM attempts") == 1
