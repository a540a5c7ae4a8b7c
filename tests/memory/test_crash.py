"""A writer killed with SIGKILL mid-transaction leaves a sound memory, on
both stores: every committed record, nothing of the open transaction."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

from sage_engine.engine import Engine
from sage_engine.models import NewItem

WRITER = textwrap.dedent("""
    import sys
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import NewItem

    eng = Engine(Config(auto_consolidate_every=0).with_db(sys.argv[1]))
    for i in range(20):
        item = eng.add_item(NewItem(title=f"committed lesson {i}", content=f"unique content {i} " * (i + 1)), dedup=False).item
        print(f"committed {item.id}", flush=True)
    with eng.store.transaction():
        for i in range(500):
            eng.store.run("INSERT INTO items (kind, title, content, tokens, created_at, updated_at) VALUES ('experience', ?, 'doomed', 1, 0, 0)", (f"doomed {i}",))
        eng.store.run("UPDATE items SET utility = 0.9")
        print("in transaction", flush=True)
        sys.stdin.readline()  # hold the write lock until killed
""")

# Episodes closed through record_adoption in a loop; the test kills the
# process at some point inside one of them.
ADOPTER = textwrap.dedent("""
    import os
    import sys
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import Adoption, Lesson
    from tests.support.engine import make_result

    eng = Engine(Config(auto_consolidate_every=0).with_db(sys.argv[1]))
    n = 0
    while True:
        r = eng.retrieve("softmax rows tiling", operator=f"op{n % 4}", client=f"c{os.getpid()}-{n}", k=3)
        res = eng.record_result(make_result("correct", 1.0), episode_id=r.episode_id)
        if n == 3:
            print("running", flush=True)
        eng.record_adoption(r.episode_id, [Adoption(id=r.items[0].id, evidence="used")], attempt_id=res.attempt_id,
                            lesson=Lesson(title=f"lesson {n}", content=" ".join(f"p{os.getpid()}n{n}w{j}" for j in range(8))))
        n += 1
""")


def _run_until(script: str, db: str, marker: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    for line in proc.stdout:
        if line.startswith(marker):
            break
    return proc


def test_sigkill_mid_transaction_keeps_every_committed_record(config):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, config.database], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    committed = []
    for line in proc.stdout:
        if line.startswith("committed"):
            committed.append(int(line.split()[1]))
        if line.startswith("in transaction"):
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and len(committed) == 20

    if not config.db_url:
        con = sqlite3.connect(config.db_path)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
    with Engine(config) as eng:
        ids = {i.id for i in eng.list_items(limit=1000)}
        assert ids == set(committed)
        assert all(i.utility == 0.0 for i in eng.list_items(limit=1000))
        assert eng.store.scalar("SELECT COUNT(*) FROM items WHERE content = 'doomed'") == 0
        # The lexical index agrees with its table after recovery.
        assert len(eng.store.items.lexical(["committed"], 100)) == 20


def test_sigkill_during_record_adoption_leaves_no_half_written_episode(config):
    with Engine(config) as eng:
        for i in range(4):
            eng.add_item(NewItem(title=f"softmax rows idea {i}", content=f"tiling advice {i} " + "y" * i))
    for _ in range(3):
        proc = _run_until(ADOPTER, config.database, "running")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    with Engine(config) as eng:
        episodes = eng.list_episodes(limit=1000)
        assert episodes
        for summary in episodes:
            e = eng.get_episode(summary.id)
            lessons = eng.store.scalar("SELECT COUNT(*) FROM items WHERE source_episode = ?", (e.id,))
            if e.status == "closed":
                # All of record_adoption: the adoption, the credit of every shown item, the lesson.
                assert len(e.adopted) == 1 and len(e.updates) == len({s.id for s in e.shown}) and lessons == 1
            else:
                # None of it (the attempt was its own, earlier, transaction).
                assert e.adopted == [] and e.updates == [] and lessons == 0
        credited = eng.store.scalar("SELECT COUNT(*) FROM utility_log")
        assert credited == eng.store.scalar("SELECT CAST(SUM(n_credited) AS BIGINT) FROM items")
