"""Several OS processes share one memory and lose nothing: 8 writers x 50
episodes, on a SQLite file and on one PostgreSQL database. Afterwards the
credit is replayed serially, in the order the episodes closed, from the
stored episodes alone: every utility must come out the same."""

import subprocess
import sys
import textwrap

import pytest

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.memory import utility
from sage_engine.models import NewItem

WORKER = textwrap.dedent("""
    import sys
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import Adoption
    from tests.support.engine import make_result

    db, worker, episodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with Engine(Config(auto_consolidate_every=0).with_db(db)).as_user(f"worker{worker}") as eng:
        for n in range(episodes):
            r = eng.retrieve("softmax kernel tiling grid", operator=f"op{worker}", client=f"w{worker}-{n}", k=4)
            res = eng.record_result(make_result("correct" if n % 3 else "incorrect", 1.0 + n % 2), episode_id=r.episode_id)
            adopted = [Adoption(id=r.items[(worker + n) % len(r.items)].id, evidence=f"w{worker} e{n}")]
            eng.record_adoption(r.episode_id, adopted, attempt_id=res.attempt_id)
    print("done")
""")
WORKERS, EPISODES = 8, 50


@pytest.mark.slow
def test_concurrent_processes_lose_no_write_and_match_a_serial_replay(config):
    with Engine(config) as eng:
        for i in range(6):
            eng.add_item(NewItem(title=f"softmax kernel idea {i}", content=f"tiling grid advice number {i} " + "x" * i))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, config.database, str(w), str(EPISODES)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert out.strip() == "done"

    with Engine(config) as eng:
        q = eng.store.scalar
        total = WORKERS * EPISODES
        assert q("SELECT COUNT(*) FROM episodes WHERE status = 'closed'") == total
        assert q("SELECT COUNT(*) FROM adoptions") == total
        assert q("SELECT COUNT(*) FROM attempts") == total
        assert q("SELECT CAST(SUM(n_adopted) AS BIGINT) FROM items") == total
        shown = q("SELECT COUNT(*) FROM (SELECT DISTINCT episode_id, item_id FROM retrievals) AS s")
        assert q("SELECT CAST(SUM(n_retrieved) AS BIGINT) FROM items") == shown
        assert q("SELECT COUNT(*) FROM utility_log") == shown == q("SELECT CAST(SUM(n_credited) AS BIGINT) FROM items")
        assert {e.author for e in eng.list_episodes(limit=1000)} == {f"worker{w}" for w in range(WORKERS)}

        # Serial replay in commit order (the order of each episode's audit rows).
        order = [
            r["episode_id"]
            for r in eng.store.rows("SELECT episode_id, MIN(id) AS first FROM utility_log GROUP BY episode_id ORDER BY first")
        ]
        assert len(order) == total
        replayed = {i.id: 0.0 for i in eng.list_items(limit=100)}
        for episode_id in order:
            e = eng.get_episode(episode_id)
            outcomes = [utility.AttemptOutcome(a.status == "correct", a.candidate_ms, a.speedup) for a in e.attempt_list]
            reward, _ = utility.episode_reward(outcomes, eng.config)
            assert reward == e.reward
            shown_ids = sorted({s.id for s in e.shown})
            targets = utility.credit_targets(shown_ids, {a.id: a.weight for a in e.adopted}, reward, eng.config)
            assert [u.item_id for u in e.updates] == [i for i in shown_ids if i in targets]
            for u in e.updates:
                assert u.before == replayed[u.item_id] and u.target == targets[u.item_id][0]
                replayed[u.item_id] = utility.step(replayed[u.item_id], u.target, u.eta)
                assert u.after == replayed[u.item_id]
        assert {i.id: i.utility for i in eng.list_items(limit=100)} == replayed


def test_a_thread_reads_while_another_threads_write_waits_for_the_file(tmp_path):
    # One store, two threads: a write transaction waits on another process's
    # write lock, and a read on the other thread still answers at once (each
    # thread has its own connection; under WAL readers never wait on a writer).
    import sqlite3
    import threading
    import time

    from sage_engine.memory.store import open_store

    db = tmp_path / "memory.db"
    with Engine(Config(auto_consolidate_every=0).with_db(str(db))) as eng:
        eng.add_item(NewItem(title="softmax tiling", content="tile rows"))
    store = open_store(db, busy_timeout_ms=8000)
    try:
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        waiting = threading.Event()

        def write():
            waiting.set()
            with store.transaction():
                store.run("UPDATE items SET utility = utility + 0.5")

        writer = threading.Thread(target=write)
        writer.start()
        waiting.wait()
        time.sleep(0.5)  # the writer is now inside BEGIN IMMEDIATE, waiting on the file
        started = time.monotonic()
        assert store.scalar("SELECT COUNT(*) FROM items") == 1
        read_s = time.monotonic() - started
        assert writer.is_alive()
        holder.execute("ROLLBACK")
        holder.close()
        writer.join(10)
        assert read_s < 2.0, f"the read waited {read_s:.1f} s behind the other thread's write"
        assert store.scalar("SELECT utility FROM items") == 0.5
    finally:
        store.close()


def test_a_file_locked_past_busy_timeout_is_a_store_error_naming_it_and_nothing_is_half_written(tmp_path):
    import sqlite3

    from sage_engine.errors import StoreError

    db = tmp_path / "memory.db"
    config = Config(auto_consolidate_every=0, busy_timeout_ms=300).with_db(str(db))
    with Engine(config) as eng:
        eng.add_item(NewItem(title="softmax tiling", content="tile rows"))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        with pytest.raises(
            StoreError,
            match=r"memory\.db: it is locked by another process "
            r"past busy_timeout_ms \(300 ms\).*nothing was written",
        ):
            with Engine(config) as eng:
                eng.retrieve("softmax", client="t")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Engine(config) as eng:
        assert eng.stats().episodes_open == 0 and eng.retrieve("softmax", client="t").episode_id == 1
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_full_disk_is_a_store_error_naming_the_file_and_the_transaction_is_rolled_back(tmp_path):
    # SQLite's own "database or disk is full" (SQLITE_FULL), reached by capping the file's pages:
    # the same error a full filesystem gives, without mounting one.
    import sqlite3

    from sage_engine.errors import StoreError

    db = tmp_path / "memory.db"
    with Engine(Config(auto_consolidate_every=0).with_db(str(db))) as eng:
        eng.add_item(NewItem(title="softmax tiling", content="tile rows"))
        before = eng.stats()
        conn = eng.store._connection()
        pages = conn.execute("PRAGMA page_count").fetchone()["page_count"]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        added = 0
        with pytest.raises(StoreError, match=r"memory\.db: the disk holding it is full.*nothing was written"):
            for n in range(200):  # until a page more is needed
                eng.add_item(NewItem(title=f"lesson {n}", content=f"tile rows {n} " * 500))
                added += 1
        conn.execute("PRAGMA max_page_count = 1073741823")
        # Whole items before the one that failed, and nothing of that one.
        assert sum(eng.stats().items_by_kind.values()) == sum(before.items_by_kind.values()) + added
        assert eng.add_item(NewItem(title="after", content="space again")) is not None
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
