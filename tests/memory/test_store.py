"""The store: migrations, export/import, bad input, dedup, lexical-search
safety, scopes and authors; on SQLite and on PostgreSQL."""

import pytest

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput, NotFound, StoreError
from sage_engine.models import Adoption, Lesson, NewItem
from sage_engine.memory.store.schema import MIGRATIONS
from tests.support.engine import make_result, table_rows as snapshot


def populate(engine):
    engine.import_starter()
    for op in ("softmax", "layernorm", "gelu"):
        r = engine.retrieve("persistent grid loop over blocks", operator=op, client="x")
        res = engine.record_result(make_result("correct", 1.0, 1.5), episode_id=r.episode_id)
        engine.record_adoption(
            r.episode_id,
            [Adoption(id=r.items[0].id, evidence="looped")],
            attempt_id=res.attempt_id,
            lesson=Lesson(title=f"{op} lesson", content=f"what {op} taught us about grids"),
        )
    engine.consolidate()


def test_migrations_are_recorded_and_reopening_applies_nothing_new(config):
    Engine(config).close()
    with Engine(config) as eng:
        assert eng.schema_status() == {"applied": [m.name for m in MIGRATIONS], "pending": []}
        assert eng.migrate() == []
        if eng.store.dialect == "sqlite":
            assert eng.store.scalar("PRAGMA journal_mode") == "wal"


def test_a_memory_from_before_close_reasons_migrates_and_its_closed_episodes_stay_credited(config):
    with Engine(config) as eng:
        populate(eng)
        credited = {e.id: e.reward for e in eng.list_episodes(status="closed")}
        # Back to the schema before 0005: no close_reason column, no record of it.
        eng.store.run("ALTER TABLE episodes DROP COLUMN close_reason")
        eng.store.run("DELETE FROM migrations WHERE name = '0005_close_reason'")
    with Engine(config) as eng:
        assert eng.schema_status()["pending"] == []
        episodes = eng.list_episodes(status="closed")
        assert {e.id: e.reward for e in episodes} == credited and len(credited) == 3
        assert all(e.credited and e.close_reason is None for e in episodes)
        assert eng.stats().episodes_without_evidence == 0


def test_servers_opening_a_new_memory_at_once_all_succeed(tmp_path):
    # Each one switches the new file to WAL and migrates it; SQLite answers
    # all but one "locked" at once, without waiting on its busy timeout.
    import threading

    from sage_engine.memory.store import open_store

    for round_ in range(20):
        db = tmp_path / f"new-{round_}.db"
        together = threading.Barrier(4)
        errors: list[Exception] = []

        def open_it():
            together.wait()
            try:
                open_store(db).close()
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with Engine(Config().with_db(str(db))) as eng:
            assert eng.store.scalar("PRAGMA journal_mode") == "wal"
            assert eng.schema_status()["pending"] == []


def test_a_database_from_a_newer_sage_is_refused(config):
    with Engine(config) as eng:
        eng.store.run("INSERT INTO migrations VALUES ('9999_future', 0)")
    with pytest.raises(StoreError, match="newer SAGE"):
        Engine(config)


def test_export_then_import_round_trips_everything(engine, tmp_path, new_db):
    populate(engine)
    before = snapshot(engine)
    assert before["consolidations"] and before["utility_log"] and before["adoptions"]
    out = tmp_path / "backup.jsonl"
    report = engine.export_jsonl(out)
    assert report.items == len(before["items"])
    with Engine(engine.config.with_db(new_db())) as other:
        other.import_jsonl(out)
        assert snapshot(other) == before
        assert [r.id for r in other.resident_rules()] == [r.id for r in engine.resident_rules()]


def test_importing_a_full_export_twice_is_refused_without_partial_writes(engine, tmp_path):
    populate(engine)
    out = tmp_path / "backup.jsonl"
    engine.export_jsonl(out)
    before = snapshot(engine)
    with pytest.raises(StoreError, match="empty database"):
        engine.import_jsonl(out)
    assert snapshot(engine) == before


def test_starter_memory_is_tagged_and_starts_at_zero_utility(engine):
    report = engine.import_starter()
    items = engine.list_items(limit=100)
    assert report.items == len(items) >= 15
    assert all(i.utility == 0.0 and "starter" in i.tags for i in items)
    assert any("ub_overflow" in i.tags for i in items) and any("ascendc" in i.tags for i in items)


@pytest.mark.parametrize(
    "new, message",
    [
        (NewItem(title="", content="x"), "title must not be empty"),
        (NewItem(title="t", content="   "), "content must not be empty"),
        (NewItem(title="t", content="x" * 100_000), "limit is"),
        (NewItem(title="t", content="x", scope="everyone"), "invalid scope"),
        (NewItem(title="t", content="x", scope="project:../../etc"), "invalid scope"),
        (NewItem(title="t", content="x", tags=["has space"]), "invalid tags"),
        (NewItem(title="t\x00", content="x"), "NUL"),
    ],
)
def test_bad_items_get_a_clear_error_and_change_nothing(engine, new, message):
    before = snapshot(engine)
    with pytest.raises(InvalidInput, match=message):
        engine.add_item(new)
    assert snapshot(engine) == before


def test_unknown_ids_get_not_found(engine):
    for call in (
        lambda: engine.get_item(77),
        lambda: engine.quarantine_item(77),
        lambda: engine.get_episode(77),
        lambda: engine.revert_consolidation(77),
    ):
        with pytest.raises(NotFound):
            call()


def test_near_duplicate_lesson_strengthens_the_existing_item(engine):
    first = engine.add_item(
        NewItem(title="Accumulate softmax sums in fp32", content="Cast the tile to fp32 before summing exponentials, then cast back once.")
    )
    again = engine.add_item(
        NewItem(
            title="Accumulate softmax sums in fp32",
            content="Cast the tile to fp32 before summing the exponentials, then cast back once.",
            tags=["fp16"],
        )
    )
    other = engine.add_item(NewItem(title="Tile GEMM by 128", content="Use 128x128 output tiles with BLOCK_K 64."))
    assert again.merged and again.item.id == first.item.id and again.item.support == 2 and "fp16" in again.item.tags
    assert not other.merged
    assert len(engine.list_items()) == 2


def test_quarantined_items_are_never_shown_but_kept(engine):
    item = engine.add_item(NewItem(title="softmax in fp32", content="softmax rows accumulate in fp32")).item
    engine.quarantine_item(item.id, "contaminated")
    r = engine.retrieve("softmax rows")
    assert item.id not in [i.id for i in r.items] and r.filtered_out.get("quarantined") == 1
    assert engine.get_item(item.id).status_reason == "contaminated"
    engine.restore_item(item.id)
    assert item.id in [i.id for i in engine.retrieve("softmax rows").items]


@pytest.mark.parametrize("query", ['"unbalanced', "NEAR(a b)", "title:softmax", "a AND OR NOT", "*", "()", "💥 ∑"])
def test_fts_syntax_in_user_text_cannot_break_retrieval(engine, query):
    item = engine.add_item(NewItem(title="softmax", content="softmax rows")).item
    expected = [item.id] if "softmax" in query else []
    assert [i.id for i in engine.retrieve(query).items] == expected
    assert [i.id for i in engine.search_items(query)] == expected


def test_scoped_items_are_shown_only_inside_their_project(engine):
    engine.add_item(NewItem(title="softmax project trick", content="softmax rows trick", scope="project:alpha"))
    assert engine.retrieve("softmax rows").items == []
    assert len(engine.retrieve("softmax rows", scope="project:alpha").items) == 1


def test_items_record_who_made_them_and_list_filters_by_author(engine):
    mine = engine.add_item(NewItem(title="softmax rows in fp32", content="accumulate the row sum in fp32")).item
    theirs = engine.as_user("bob").add_item(NewItem(title="matmul tiles of 128", content="tile the output 128 by 128")).item
    assert (mine.author, theirs.author, mine.scope) == (engine.config.user, "bob", "team")
    assert [i.id for i in engine.list_items(author="bob")] == [theirs.id]
    assert engine.stats().by_author["bob"] == {"items": 1}


def test_private_items_are_seen_only_by_their_author(engine):
    secret = engine.as_user("alice").add_item(NewItem(title="softmax private trick", content="softmax rows trick", scope="private")).item
    bob = engine.as_user("bob")
    assert bob.retrieve("softmax rows").items == [] and bob.search_items("softmax rows") == []
    assert bob.list_items() == []
    with pytest.raises(NotFound):
        bob.get_item(secret.id)
    alice = engine.as_user("alice")
    assert [i.id for i in alice.retrieve("softmax rows").items] == [secret.id]
    assert [i.id for i in alice.list_items()] == [secret.id]


def test_global_is_read_as_the_team_scope(engine):
    item = engine.add_item(NewItem(title="softmax trick", content="softmax rows", scope="global")).item
    assert item.scope == "team"


def test_an_attempt_id_handed_out_before_its_row_exists_is_never_taken_by_another(engine, new_db):
    with engine.store.transaction():
        reserved = engine.store.episodes.reserve_attempt_id()
    # Attempts stored meanwhile (another agent's, or imported ones) skip it.
    meanwhile = engine.record_result(make_result("correct", 1.0, 1.5))
    assert meanwhile.attempt_id > reserved
    stored = engine.record_result(make_result("correct", 1.0, 1.5), attempt_id=reserved)
    assert stored.attempt_id == reserved and engine.get_attempt(reserved).created_at == stored.created_at
    # A copy carries the counter with the rows: the next id there is past both.
    copy = new_db()
    engine.copy_to(copy)
    with Engine(engine.config.with_db(copy)) as there, there.store.transaction():
        assert there.store.episodes.reserve_attempt_id() > meanwhile.attempt_id
