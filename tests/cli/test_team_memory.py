"""The CLI on a team PostgreSQL memory: `init` on a URL, `migrate`, and
`memory copy` between SQLite and PostgreSQL with nothing lost."""

import json

from click.testing import CliRunner

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import Adoption, Lesson, NewItem
from sage_mcp.cli import cli
from tests.support.engine import make_result, table_rows


def sage(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def populate(db: str) -> None:
    with Engine(Config(auto_consolidate_every=0).with_db(db)) as eng:
        eng.init()
        for n, op in enumerate(("softmax", "layernorm", "gelu", "silu")):
            eng = eng.as_user(f"user{n % 2}")
            r = eng.retrieve("persistent grid loop over blocks", operator=op, client=op)
            res = eng.record_result(make_result("correct", 1.0, 1.5), episode_id=r.episode_id)
            eng.record_adoption(
                r.episode_id,
                [Adoption(id=r.items[0].id, evidence="looped")],
                attempt_id=res.attempt_id,
                lesson=Lesson(title=f"{op} lesson", content=f"what {op} taught us about grids"),
            )
        eng.consolidate()


def test_init_on_a_postgresql_url_creates_the_schema_there(pg_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = pg_cluster.create_database()
    try:
        out = sage("--db", url, "--json", "init")
        assert json.loads(out.output)["stats"]["store"] == "postgres"
        status = json.loads(sage("memory", "migrate", "--status", "--db", url, "--json").output)
        assert status["pending"] == [] and status["applied"][0] == "0001_initial"
        # A URL is never a file path: nothing appeared in the working directory.
        assert list(tmp_path.iterdir()) == []
    finally:
        pg_cluster.drop_database(url)


def test_memory_copy_moves_everything_to_postgresql_and_back(pg_cluster, tmp_path):
    laptop, back = str(tmp_path / "laptop.db"), str(tmp_path / "back.db")
    url = pg_cluster.create_database()
    try:
        populate(laptop)
        with Engine(Config().with_db(laptop)) as eng:
            before = table_rows(eng)
            rulebook = [r.id for r in eng.resident_rules()]
        assert before["consolidations"] and before["utility_log"] and before["adoptions"]
        copied = json.loads(sage("--json", "memory", "copy", laptop, url).output)["rows"]
        assert copied == {t: len(rows) for t, rows in before.items()}
        with Engine(Config().with_db(url)) as team:
            assert table_rows(team) == before
            assert [r.id for r in team.resident_rules()] == rulebook
            # Ids continue after the copied ones on the server.
            added = team.add_item(NewItem(title="after copy", content="a lesson nobody wrote before")).item
            assert added.id == max(r["id"] for r in before["items"]) + 1
        sage("memory", "copy", url, back)
        with Engine(Config().with_db(back)) as eng:
            again = table_rows(eng)
        assert again["items"][:-1] == before["items"] and again["utility_log"] == before["utility_log"]
        assert {t: len(r) for t, r in again.items() if t != "items"} == {t: len(r) for t, r in before.items() if t != "items"}
    finally:
        pg_cluster.drop_database(url)


def test_copy_into_a_memory_that_holds_data_is_refused(tmp_path):
    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    populate(a)
    populate(b)
    result = CliRunner().invoke(cli, ["memory", "copy", a, b])
    assert result.exit_code == 4 and "not empty" in result.output
