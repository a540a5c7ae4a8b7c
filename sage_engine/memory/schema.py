"""Named schema migrations.

Each migration runs once, inside one transaction together with its record in
`migrations`, so a crash mid-migration leaves the previous schema intact.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        """
        CREATE TABLE items (
            id INTEGER PRIMARY KEY,
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
            utility REAL NOT NULL DEFAULT 0,
            n_retrieved INTEGER NOT NULL DEFAULT 0,
            n_adopted INTEGER NOT NULL DEFAULT 0,
            n_credited INTEGER NOT NULL DEFAULT 0,
            adoption_rate REAL NOT NULL DEFAULT 0,
            target_sum REAL NOT NULL DEFAULT 0,
            target_sq REAL NOT NULL DEFAULT 0,
            support INTEGER NOT NULL DEFAULT 1,
            operators_adopted TEXT NOT NULL DEFAULT '[]',
            source_episode INTEGER,
            source_attempt INTEGER,
            derived_from TEXT NOT NULL DEFAULT '[]',
            tokens INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX items_status ON items(status, kind);

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

        CREATE TABLE episodes (
            id INTEGER PRIMARY KEY,
            task TEXT NOT NULL,
            operator TEXT,
            family TEXT,
            backend TEXT,
            hardware TEXT,
            client TEXT,
            scope TEXT NOT NULL DEFAULT 'global',
            status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
            reward REAL,
            reward_parts TEXT,
            created_at REAL NOT NULL,
            last_activity REAL NOT NULL,
            closed_at REAL
        );
        CREATE INDEX episodes_open ON episodes(status, client, task);

        CREATE TABLE retrievals (
            id INTEGER PRIMARY KEY,
            episode_id INTEGER NOT NULL REFERENCES episodes(id),
            item_id INTEGER NOT NULL REFERENCES items(id),
            rank INTEGER NOT NULL,
            score REAL NOT NULL,
            similarity REAL NOT NULL,
            exploration REAL NOT NULL DEFAULT 0,
            utility REAL NOT NULL,
            resident INTEGER NOT NULL DEFAULT 0,
            query TEXT,
            created_at REAL NOT NULL
        );
        CREATE INDEX retrievals_episode ON retrievals(episode_id);

        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            episode_id INTEGER REFERENCES episodes(id),
            task TEXT NOT NULL,
            backend TEXT NOT NULL,
            status TEXT NOT NULL,
            candidate_hash TEXT NOT NULL,
            candidate_path TEXT,
            speedup REAL,
            candidate_ms REAL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX attempts_episode ON attempts(episode_id);
        CREATE INDEX attempts_path ON attempts(candidate_path, id);

        CREATE TABLE adoptions (
            id INTEGER PRIMARY KEY,
            episode_id INTEGER NOT NULL REFERENCES episodes(id),
            item_id INTEGER NOT NULL REFERENCES items(id),
            attempt_id INTEGER REFERENCES attempts(id),
            evidence TEXT NOT NULL DEFAULT '',
            weight REAL NOT NULL DEFAULT 1.0,
            created_at REAL NOT NULL,
            UNIQUE (episode_id, item_id)
        );

        CREATE TABLE utility_log (
            id INTEGER PRIMARY KEY,
            item_id INTEGER NOT NULL REFERENCES items(id),
            episode_id INTEGER REFERENCES episodes(id),
            adopted INTEGER NOT NULL,
            before REAL NOT NULL,
            after REAL NOT NULL,
            target REAL NOT NULL,
            eta REAL NOT NULL,
            strategy TEXT NOT NULL,
            rule_version TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX utility_log_item ON utility_log(item_id);
        CREATE INDEX utility_log_episode ON utility_log(episode_id);

        CREATE TABLE consolidations (
            id INTEGER PRIMARY KEY,
            created_at REAL NOT NULL,
            report TEXT NOT NULL,
            snapshot TEXT NOT NULL,
            reverted_at REAL
        );

        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    ),
    (
        "0002_item_vectors",
        """
        CREATE TABLE item_vectors (
            item_id INTEGER PRIMARY KEY REFERENCES items(id),
            model TEXT NOT NULL,
            vector BLOB NOT NULL
        );
        """,
    ),
]
