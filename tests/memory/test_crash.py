"""A writer killed with SIGKILL mid-transaction leaves a sound database."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

from sage_engine.config import Config
from sage_engine.engine import Engine

WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import NewItem

    eng = Engine(Config(db_path=Path(sys.argv[1])))
    for i in range(20):
        item = eng.add_item(NewItem(title=f"committed lesson {i}", content=f"unique content {i} " * (i + 1)), dedup=False).item
        print(f"committed {item.id}", flush=True)
    with eng.store.transaction() as conn:
        for i in range(500):
            conn.execute("INSERT INTO items (kind, title, content, tokens, created_at, updated_at) VALUES ('experience', ?, 'doomed', 1, 0, 0)", (f"doomed {i}",))
        conn.execute("UPDATE items SET utility = 0.9")
        print("in transaction", flush=True)
        sys.stdin.readline()  # hold the write lock until killed
""")


def test_sigkill_mid_transaction_keeps_every_committed_record(tmp_path):
    db = tmp_path / "crash.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    committed = []
    for line in proc.stdout:
        if line.startswith("committed"):
            committed.append(int(line.split()[1]))
        if line.startswith("in transaction"):
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and len(committed) == 20

    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    with Engine(Config(db_path=db)) as eng:
        ids = {i.id for i in eng.list_items(limit=1000)}
        assert ids == set(committed)
        assert all(i.utility == 0.0 for i in eng.list_items(limit=1000))
        assert eng.store.scalar("SELECT COUNT(*) FROM items WHERE content = 'doomed'") == 0
        # The FTS index is consistent with its table after recovery.
        assert eng.store.scalar("SELECT COUNT(*) FROM items_fts WHERE items_fts MATCH 'committed'") == 20
