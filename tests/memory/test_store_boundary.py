"""All of SAGE's SQL lives in the store package: the services, the engine and
every surface reach the database only through `Store`, which is what lets a
second database exist at all."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "sage_engine" / "memory" / "store"
SQL = re.compile(r"\b(SELECT\s+[\w*(]|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|PRAGMA\s+\w)")
DRIVERS = re.compile(r"^\s*(import|from)\s+(sqlite3|psycopg|psycopg_pool)\b(?!\.conninfo)", re.M)


def test_no_sql_or_database_driver_outside_the_store_package():
    found = []
    for package in ("sage_engine", "sage_mcp"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if STORE in path.parents:
                continue
            text = path.read_text()
            found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in SQL.finditer(text)]
            found += [f"{path.relative_to(ROOT)}: imports {m.group(2)}" for m in DRIVERS.finditer(text)]
    assert found == []
