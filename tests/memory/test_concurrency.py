"""Several OS processes share one database file and lose nothing."""

import subprocess
import sys
import textwrap

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import NewItem

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import Adoption
    from tests.conftest import make_result

    db, worker, episodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with Engine(Config(db_path=Path(db), auto_consolidate_every=0)) as eng:
        for n in range(episodes):
            r = eng.retrieve("softmax kernel tiling grid", operator=f"op{worker}", client=f"w{worker}-{n}", k=4)
            res = eng.record_result(make_result("correct" if n % 3 else "incorrect", 1.0 + n % 2), episode_id=r.episode_id)
            adopted = [Adoption(id=r.items[(worker + n) % len(r.items)].id, evidence=f"w{worker} e{n}")]
            eng.record_adoption(r.episode_id, adopted, attempt_id=res.attempt_id)
    print("done")
""")


def test_concurrent_processes_lose_no_adoption_or_utility_update(tmp_path):
    db = tmp_path / "shared.db"
    with Engine(Config(db_path=db)) as eng:
        for i in range(6):
            eng.add_item(NewItem(title=f"softmax kernel idea {i}", content=f"tiling grid advice number {i} " + "x" * i))
    workers, episodes = 4, 15
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(db), str(w), str(episodes)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(workers)
    ]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert out.strip() == "done"

    with Engine(Config(db_path=db)) as eng:
        q = eng.store.scalar
        total = workers * episodes
        assert q("SELECT COUNT(*) FROM episodes WHERE status = 'closed'") == total
        assert q("SELECT COUNT(*) FROM adoptions") == total
        assert q("SELECT COUNT(*) FROM attempts") == total
        assert q("SELECT SUM(n_adopted) FROM items") == total
        shown = q("SELECT COUNT(*) FROM (SELECT DISTINCT episode_id, item_id FROM retrievals)")
        assert q("SELECT SUM(n_retrieved) FROM items") == shown
        assert q("SELECT COUNT(*) FROM utility_log") == shown == q("SELECT SUM(n_credited) FROM items")
        # No lost update: each item's audit log is one unbroken chain ending at its utility.
        for item in eng.list_items(limit=100):
            chain = eng.store.query("SELECT before, after FROM utility_log WHERE item_id = ? ORDER BY id", (item.id,))
            assert all(a["after"] == b["before"] for a, b in zip(chain, chain[1:]))
            assert chain[-1]["after"] == item.utility
