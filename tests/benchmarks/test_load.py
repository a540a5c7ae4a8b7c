"""The load benchmark run small, as CI runs it: four agents of one client
name and a reader on one real `sage serve` (SQLite) for 30 s, then its
integrity check; and that check sees a lost update when there is one."""

from __future__ import annotations

import sqlite3

import pytest

from benchmarks import load
from sage_engine.config import Config

pytestmark = pytest.mark.slow


def test_four_agents_of_one_name_lose_nothing_and_close_only_their_own_episodes(tmp_path, capsys):
    db = str(tmp_path / "memory.db")
    tally, problems = load.measure(db, clients=4, readers=1, seconds=30, workers=2)
    assert problems == []
    assert not [k for k in tally.errors if not k.endswith(": busy")], tally.errors  # no conflicts, no other errors
    closed = [e for e, told in tally.episodes.items() if told.get("closed")]
    assert len(closed) >= 4 and all(told["credited"] for told in tally.episodes.values() if told.get("closed"))
    assert load.report(tally, 4, problems)
    assert "integrity: ok" in capsys.readouterr().out

    # A lost update (an item's utility no longer where its log leaves it) is found.
    with sqlite3.connect(db) as conn:
        item = conn.execute("SELECT item_id FROM utility_log ORDER BY id DESC LIMIT 1").fetchone()[0]
        conn.execute("UPDATE items SET utility = utility + 0.25 WHERE id = ?", (item,))
    before = {}  # replayed from zero: every item of the starter memory starts there
    found = load.integrity(db, tally, before, Config(auto_consolidate_every=0))
    assert any(f"item {item}: utility" in p for p in found), found
