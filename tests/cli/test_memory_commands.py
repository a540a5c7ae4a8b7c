"""The `sage` memory commands, run through click's real parser."""

import json

from click.testing import CliRunner

from sage_mcp.cli import cli


def sage(db, *args, input=None):
    result = CliRunner().invoke(cli, ["--db", str(db), *args], input=input, catch_exceptions=False)
    return result


def test_init_imports_the_starter_memory_once(tmp_path):
    db = tmp_path / "m.db"
    first = sage(db, "--json", "init")
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["starter"]["items"] >= 15
    again = json.loads(sage(db, "--json", "init").output)
    assert again["starter"] is None


def test_add_list_show_edit_quarantine_delete_round_trip(tmp_path):
    db = tmp_path / "m.db"
    added = json.loads(
        sage(
            db,
            "--json",
            "memory",
            "add",
            "--title",
            "Tile by 128",
            "--content",
            "-",
            "--tag",
            "matmul",
            input="Use 128x128 tiles for GEMM.\n",
        ).output
    )
    item_id = added["item"]["id"]
    listed = json.loads(sage(db, "memory", "list", "--json").output)
    assert [i["id"] for i in listed] == [item_id]
    shown = sage(db, "memory", "show", str(item_id))
    assert "Use 128x128 tiles" in shown.output
    assert (
        json.loads(sage(db, "--json", "memory", "edit", str(item_id), "--title", "Tile GEMM by 128").output)["title"] == "Tile GEMM by 128"
    )
    assert json.loads(sage(db, "--json", "memory", "quarantine", str(item_id), "--reason", "wrong").output)["status"] == "quarantined"
    assert json.loads(sage(db, "--json", "memory", "quarantine", str(item_id), "--undo").output)["status"] == "active"
    assert json.loads(sage(db, "--json", "memory", "delete", str(item_id)).output)["status"] == "deleted"
    assert json.loads(sage(db, "memory", "list", "--json").output) == []


def test_errors_are_one_clear_line_with_an_exit_code_per_kind(tmp_path):
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "memory", "show", "99"])
    assert result.exit_code == 3 and "error (not_found)" in result.output
    assert "no memory item with id 99" in result.output
    empty = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "memory", "add", "--title", "t", "--content", " "])
    assert empty.exit_code == 2 and "error (invalid_input)" in empty.output and "content must not be empty" in empty.output


def test_db_is_accepted_after_the_subcommand_too(tmp_path):
    db = tmp_path / "late.db"
    result = CliRunner().invoke(cli, ["init", "--db", str(db), "--no-starter"])
    assert result.exit_code == 0, result.output
    assert db.exists() and str(db) in result.output
    listed = CliRunner().invoke(cli, ["memory", "list", "--db", str(db), "--json"])
    assert listed.exit_code == 0 and json.loads(listed.output) == []


def test_export_and_import_through_the_cli(tmp_path):
    db, copy, out = tmp_path / "m.db", tmp_path / "copy.db", tmp_path / "dump.jsonl"
    sage(db, "init")
    assert sage(db, "memory", "export", str(out)).exit_code == 0
    assert sage(copy, "memory", "import", str(out)).exit_code == 0
    a = json.loads(sage(db, "memory", "list", "--json").output)
    b = json.loads(sage(copy, "memory", "list", "--json").output)
    assert a == b and len(a) >= 15


def test_consolidate_dry_run_and_stats(tmp_path):
    db = tmp_path / "m.db"
    sage(db, "init")
    report = json.loads(sage(db, "--json", "consolidate", "--dry-run").output)
    assert report["dry_run"] is True and report["rulebook"] == []
    stats = json.loads(sage(db, "--json", "memory", "stats").output)
    assert stats["consolidations"] == 0 and stats["items_by_status"]["active"] >= 15
    assert sage(db, "episodes", "list").exit_code == 0


def test_show_prints_the_utility_history_after_an_episode(tmp_path):
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import Adoption
    from tests.support.engine import make_result

    db = tmp_path / "m.db"
    with Engine(Config(db_path=db, auto_consolidate_every=0)) as eng:
        eng.init()
        r = eng.retrieve("ub overflow block size")
        eng.record_result(make_result("correct", 1.0), episode_id=r.episode_id)
        eng.record_adoption(r.episode_id, [Adoption(id=r.items[0].id)])
        adopted = r.items[0].id
    shown = json.loads(sage(db, "--json", "memory", "show", str(adopted)).output)
    assert [(h["episode_id"], h["adopted"]) for h in shown["history"]] == [(r.episode_id, True)]
    assert "utility history" in sage(db, "memory", "show", str(adopted)).output


def test_episodes_list_and_stats_count_the_episodes_closed_without_evidence(tmp_path):
    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from tests.support.engine import make_result

    db = tmp_path / "m.db"
    with Engine(Config(db_path=db, auto_consolidate_every=0)) as eng:
        eng.init()
        for _ in range(3):  # browsing: each retrieval closes the previous one, with nothing tried
            browsed = eng.retrieve("ub overflow block size", client="c")
        eng.record_result(make_result("correct", 1.0), episode_id=browsed.episode_id)
        eng.close_episode(browsed.episode_id)
    listed = sage(db, "episodes", "list")
    assert "in this memory, 2 of 3 closed episodes closed without evidence" in " ".join(listed.output.split())
    assert "no evidence" in listed.output and "next retrieval" in listed.output
    rows = json.loads(sage(db, "--json", "episodes", "list").output)
    assert [(e["close_reason"], e["credited"]) for e in rows] == [("explicit", True), ("next_retrieval", False), ("next_retrieval", False)]
    stats = json.loads(sage(db, "--json", "memory", "stats").output)
    assert stats["episodes_closed"] == 3 and stats["episodes_without_evidence"] == 2
    assert "closed without evidence" in sage(db, "memory", "stats").output


def test_an_export_to_a_full_disk_is_a_clear_error_and_leaves_no_file(tmp_path):
    import resource
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from sage_engine.config import Config
    from sage_engine.engine import Engine
    from sage_engine.models import NewItem

    db, out = tmp_path / "m.db", tmp_path / "dump.jsonl"
    with Engine(Config(db_path=db)) as eng:
        for i in range(40):
            eng.add_item(NewItem(title=f"note {i}", content=f"{i} " + "tile rows " * 790), dedup=False)
    limit = 128 * 1024  # room for SQLite's own files; the export (about 330 KB) does not fit

    def small_disk():
        # The OS refuses writes past the limit, as a full disk would (EFBIG, not a signal).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    # The database exists already; only the export grows past the limit.
    done = subprocess.run(
        [str(Path(sys.executable).parent / "sage"), "--db", str(db), "memory", "export", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_disk,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and f"cannot write the export to {out}" in done.stderr + done.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("dump")) == []
