"""Named schema migrations, one SQL text per dialect, and the column list of
every stored table.

Each migration runs once, inside one transaction together with its record in
`migrations`, so a crash mid-migration leaves the previous schema intact. The
two dialects carry the same migration names and end at the same tables and
columns, so a memory can be copied between them row for row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    name: str
    sqlite: str
    postgres: str


# Columns per table in export order. Derived columns (the FTS index, the
# tsvector) are not listed: each store rebuilds them from these.
TABLES: dict[str, tuple[str, ...]] = {
    "items": (
        "id",
        "kind",
        "status",
        "status_reason",
        "title",
        "content",
        "code",
        "scope",
        "operator",
        "family",
        "backend",
        "hardware",
        "tags",
        "utility",
        "n_retrieved",
        "n_adopted",
        "n_credited",
        "adoption_rate",
        "target_sum",
        "target_sq",
        "support",
        "operators_adopted",
        "source_episode",
        "source_attempt",
        "derived_from",
        "tokens",
        "created_at",
        "updated_at",
        "author",
        "families_adopted",
        "rule_families",
        "rule_operators",
        "rule_backends",
        "rule_hardware",
        "rule_triggers",
        "authors",
        "adopted_by",
        "merged_into",
    ),
    "episodes": (
        "id",
        "task",
        "operator",
        "family",
        "backend",
        "hardware",
        "client",
        "scope",
        "status",
        "reward",
        "reward_parts",
        "created_at",
        "last_activity",
        "closed_at",
        "author",
        "close_reason",
        "task_free",
    ),
    "retrievals": (
        "id",
        "episode_id",
        "item_id",
        "rank",
        "score",
        "similarity",
        "exploration",
        "utility",
        "resident",
        "query",
        "created_at",
    ),
    "attempts": (
        "id",
        "episode_id",
        "task",
        "backend",
        "status",
        "candidate_hash",
        "candidate_path",
        "speedup",
        "candidate_ms",
        "result",
        "created_at",
        "author",
        "request_id",
        "host",
        "speedup_trusted",
        "operator",
        "family",
    ),
    "adoptions": ("id", "episode_id", "item_id", "attempt_id", "evidence", "weight", "created_at", "author"),
    "utility_log": (
        "id",
        "item_id",
        "episode_id",
        "adopted",
        "before",
        "after",
        "target",
        "eta",
        "strategy",
        "rule_version",
        "created_at",
    ),
    "consolidations": ("id", "created_at", "report", "snapshot", "reverted_at", "author"),
    "item_vectors": ("item_id", "model", "vector"),
    "meta": ("key", "value"),
}
# Tables with an integer id drawn from a sequence (PostgreSQL resets those
# sequences after rows are copied in with their ids).
ID_TABLES = ("items", "episodes", "retrievals", "attempts", "adoptions", "utility_log", "consolidations")
# Columns holding JSON text (lists or objects) on both stores.
JSON_COLUMNS = (
    "tags",
    "operators_adopted",
    "families_adopted",
    "derived_from",
    "rule_families",
    "rule_operators",
    "rule_backends",
    "rule_hardware",
    "rule_triggers",
    "authors",
    "adopted_by",
)


def _initial(pk: str, integer: str, real: str) -> str:
    """The first schema, written once for both dialects (types differ only in
    the key, integer and floating point columns)."""
    return f"""
        CREATE TABLE items (
            id {pk},
            kind TEXT NOT NULL CHECK (kind IN ('experience', 'rule')),
            status TEXT NOT NULL DEFAULT 'active'
                CHECK (status IN ('active', 'resident', 'quarantined', 'merged', 'deleted')),
            status_reason TEXT,
            title TEXT NOT NULL,
            content TEXT NOT NULL,
            code TEXT,
            scope TEXT NOT NULL DEFAULT 'global',
            operator TEXT,
            family TEXT,
            backend TEXT,
            hardware TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            utility {real} NOT NULL DEFAULT 0,
            n_retrieved {integer} NOT NULL DEFAULT 0,
            n_adopted {integer} NOT NULL DEFAULT 0,
            n_credited {integer} NOT NULL DEFAULT 0,
            adoption_rate {real} NOT NULL DEFAULT 0,
            target_sum {real} NOT NULL DEFAULT 0,
            target_sq {real} NOT NULL DEFAULT 0,
            support {integer} NOT NULL DEFAULT 1,
            operators_adopted TEXT NOT NULL DEFAULT '[]',
            source_episode {integer},
            source_attempt {integer},
            derived_from TEXT NOT NULL DEFAULT '[]',
            tokens {integer} NOT NULL,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL
        );
        CREATE INDEX items_status ON items(status, kind);

        CREATE TABLE episodes (
            id {pk},
            task TEXT NOT NULL,
            operator TEXT,
            family TEXT,
            backend TEXT,
            hardware TEXT,
            client TEXT,
            scope TEXT NOT NULL DEFAULT 'global',
            status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
            reward {real},
            reward_parts TEXT,
            created_at {real} NOT NULL,
            last_activity {real} NOT NULL,
            closed_at {real}
        );
        CREATE INDEX episodes_open ON episodes(status, client, task);

        CREATE TABLE retrievals (
            id {pk},
            episode_id {integer} NOT NULL REFERENCES episodes(id),
            item_id {integer} NOT NULL REFERENCES items(id),
            rank {integer} NOT NULL,
            score {real} NOT NULL,
            similarity {real} NOT NULL,
            exploration {real} NOT NULL DEFAULT 0,
            utility {real} NOT NULL,
            resident {integer} NOT NULL DEFAULT 0,
            query TEXT,
            created_at {real} NOT NULL
        );
        CREATE INDEX retrievals_episode ON retrievals(episode_id);

        CREATE TABLE attempts (
            id {pk},
            episode_id {integer} REFERENCES episodes(id),
            task TEXT NOT NULL,
            backend TEXT NOT NULL,
            status TEXT NOT NULL,
            candidate_hash TEXT NOT NULL,
            candidate_path TEXT,
            speedup {real},
            candidate_ms {real},
            result TEXT NOT NULL,
            created_at {real} NOT NULL
        );
        CREATE INDEX attempts_episode ON attempts(episode_id);
        CREATE INDEX attempts_path ON attempts(candidate_path, id);

        CREATE TABLE adoptions (
            id {pk},
            episode_id {integer} NOT NULL REFERENCES episodes(id),
            item_id {integer} NOT NULL REFERENCES items(id),
            attempt_id {integer} REFERENCES attempts(id),
            evidence TEXT NOT NULL DEFAULT '',
            weight {real} NOT NULL DEFAULT 1.0,
            created_at {real} NOT NULL,
            UNIQUE (episode_id, item_id)
        );

        CREATE TABLE utility_log (
            id {pk},
            item_id {integer} NOT NULL REFERENCES items(id),
            episode_id {integer} REFERENCES episodes(id),
            adopted {integer} NOT NULL,
            before {real} NOT NULL,
            after {real} NOT NULL,
            target {real} NOT NULL,
            eta {real} NOT NULL,
            strategy TEXT NOT NULL,
            rule_version TEXT NOT NULL,
            created_at {real} NOT NULL
        );
        CREATE INDEX utility_log_item ON utility_log(item_id);
        CREATE INDEX utility_log_episode ON utility_log(episode_id);

        CREATE TABLE consolidations (
            id {pk},
            created_at {real} NOT NULL,
            report TEXT NOT NULL,
            snapshot TEXT NOT NULL,
            reverted_at {real}
        );

        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """


SQLITE_FTS = """
    CREATE VIRTUAL TABLE items_fts USING fts5(
        title, content, tags, operator, family,
        content='items', content_rowid='id', tokenize='porter unicode61'
    );
    CREATE TRIGGER items_ai AFTER INSERT ON items BEGIN
        INSERT INTO items_fts(rowid, title, content, tags, operator, family)
        VALUES (new.id, new.title, new.content, new.tags, new.operator, new.family);
    END;
    CREATE TRIGGER items_ad AFTER DELETE ON items BEGIN
        INSERT INTO items_fts(items_fts, rowid, title, content, tags, operator, family)
        VALUES ('delete', old.id, old.title, old.content, old.tags, old.operator, old.family);
    END;
    CREATE TRIGGER items_au AFTER UPDATE OF title, content, tags, operator, family ON items BEGIN
        INSERT INTO items_fts(items_fts, rowid, title, content, tags, operator, family)
        VALUES ('delete', old.id, old.title, old.content, old.tags, old.operator, old.family);
        INSERT INTO items_fts(rowid, title, content, tags, operator, family)
        VALUES (new.id, new.title, new.content, new.tags, new.operator, new.family);
    END;
"""

# Lexical search on PostgreSQL: one weighted tsvector per item, kept by the
# database itself. Weights mirror SQLite's BM25 column weights (title 4,
# tags/operator/family 2, content 1) through ts_rank_cd's A/B/C weights.
POSTGRES_FTS = """
    ALTER TABLE items ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A')
        || setweight(to_tsvector('english', coalesce(tags, '') || ' ' || coalesce(operator, '') || ' '
                                 || coalesce(family, '')), 'B')
        || setweight(to_tsvector('english', content), 'C')
    ) STORED;
    CREATE INDEX items_search ON items USING GIN (search);
"""

_TEAM = """
    ALTER TABLE items ADD COLUMN author TEXT;
    ALTER TABLE episodes ADD COLUMN author TEXT;
    ALTER TABLE attempts ADD COLUMN author TEXT;
    ALTER TABLE adoptions ADD COLUMN author TEXT;
    ALTER TABLE consolidations ADD COLUMN author TEXT;
    ALTER TABLE attempts ADD COLUMN request_id TEXT;
    ALTER TABLE attempts ADD COLUMN host TEXT;
    CREATE UNIQUE INDEX attempts_request ON attempts(request_id);
    CREATE INDEX items_author ON items(author);
    UPDATE items SET scope = 'team' WHERE scope = 'global';
    UPDATE episodes SET scope = 'team' WHERE scope = 'global';
"""

# A rule keeps the scope it was learned from as data, so residency can be
# decided per task without parsing rule text.
_RULE_SCOPE = """
    ALTER TABLE items ADD COLUMN families_adopted TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN rule_families TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN rule_operators TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN rule_backends TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN rule_hardware TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN rule_triggers TEXT NOT NULL DEFAULT '[]';
"""

# Why an episode closed (`explicit`, `next_retrieval`, `idle`). A closed
# episode whose reward is NULL closed without evidence (no attempt) and was
# not credited; rows closed before this migration keep a NULL reason.
_CLOSE_REASON = """
    ALTER TABLE episodes ADD COLUMN close_reason TEXT;
"""

# Whether an attempt's speedup is believable (`EvalResult.speedup_trusted`):
# 0 earns no speedup term in ATU. NULL (attempts stored before this
# migration, and results without a speedup) is credited as before.
_SPEEDUP_TRUSTED = """
    ALTER TABLE attempts ADD COLUMN speedup_trusted INTEGER;
"""

# Evidence a team can trust (docs/memory.md, "Threat model"): a rule's
# authors are its source items' authors; who adopted an item (promotion on a
# team needs someone besides its author); the rule an item was merged into
# (credit that arrives for it later reaches the rule); whether an episode's
# task was free text (bound to its first attempt's task); the operator and
# family of the task an attempt evaluated (what credit counts, not a claim).
_TEAM_EVIDENCE = """
    ALTER TABLE items ADD COLUMN authors TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN adopted_by TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE items ADD COLUMN merged_into BIGINT;
    ALTER TABLE episodes ADD COLUMN task_free INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE attempts ADD COLUMN operator TEXT;
    ALTER TABLE attempts ADD COLUMN family TEXT;
    CREATE INDEX utility_log_created ON utility_log(created_at);
"""

MIGRATIONS: list[Migration] = [
    Migration(
        "0001_initial",
        sqlite=_initial("INTEGER PRIMARY KEY", "INTEGER", "REAL") + SQLITE_FTS,
        postgres=_initial("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "BIGINT", "DOUBLE PRECISION") + POSTGRES_FTS,
    ),
    Migration(
        "0002_item_vectors",
        sqlite="CREATE TABLE item_vectors (item_id INTEGER PRIMARY KEY REFERENCES items(id), model TEXT NOT NULL, vector BLOB NOT NULL);",
        postgres="CREATE TABLE item_vectors (item_id BIGINT PRIMARY KEY REFERENCES items(id), model TEXT NOT NULL, vector BYTEA NOT NULL);",
    ),
    Migration("0003_team", sqlite=_TEAM, postgres=_TEAM),
    Migration("0004_rule_scope", sqlite=_RULE_SCOPE, postgres=_RULE_SCOPE),
    Migration("0005_close_reason", sqlite=_CLOSE_REASON, postgres=_CLOSE_REASON),
    Migration("0006_speedup_trusted", sqlite=_SPEEDUP_TRUSTED, postgres=_SPEEDUP_TRUSTED),
    Migration("0007_team_evidence", sqlite=_TEAM_EVIDENCE, postgres=_TEAM_EVIDENCE),
]


def split_sql(sql: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements, buf = [], []
    depth = 0
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        buf.append(line)
        upper = stripped.upper()
        if upper.startswith("CREATE TRIGGER"):
            depth += 1
        if depth and upper.startswith("END;"):
            depth -= 1
        if not depth and stripped.endswith(";"):
            statements.append("\n".join(buf))
            buf = []
    if buf:
        statements.append("\n".join(buf))
    return statements
