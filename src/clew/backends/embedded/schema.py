"""The embedded store's SQLite schema, and the in-place changes an older index gets on open.

``SCHEMA`` is run on every writable open (``CREATE ... IF NOT EXISTS``): a new index gets every
table; an existing one keeps its tables, and a column added since it was made comes from
:func:`add_page_column` (a nullable ``ALTER TABLE ... ADD COLUMN``, cheap in SQLite: no table
rewrite) and :func:`add_mention_kind` (each mention's kind, filled from its concept's). A
read-only open changes nothing: readers ask :func:`columns` what is there.
"""

from __future__ import annotations

import sqlite3

from clew.types import KIND_SQL

__all__ = ["SCHEMA", "add_mention_kind", "add_page_column", "columns"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    source TEXT NOT NULL,
    fmt TEXT NOT NULL,
    metadata TEXT NOT NULL,
    doc_hash TEXT NOT NULL,
    text TEXT NOT NULL,
    release INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    ordinal INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    start_char INTEGER NOT NULL,
    end_char INTEGER NOT NULL,
    tokens TEXT NOT NULL,
    vector BLOB NOT NULL,
    release INTEGER NOT NULL,
    page INTEGER
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id, seq);
CREATE TABLE IF NOT EXISTS concepts (
    concept_id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    label TEXT NOT NULL,
    kind TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS mentions (
    ordinal INTEGER NOT NULL REFERENCES chunks(ordinal) ON DELETE CASCADE,
    concept_id INTEGER NOT NULL REFERENCES concepts(concept_id),
    count INTEGER NOT NULL,
    kind INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (ordinal, concept_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS concept_aliases (
    concept_id INTEGER NOT NULL REFERENCES concepts(concept_id) ON DELETE CASCADE,
    surface TEXT NOT NULL,
    PRIMARY KEY (concept_id, surface)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS links (
    doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    target TEXT NOT NULL,
    PRIMARY KEY (doc_id, target)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes (
    release INTEGER NOT NULL,
    op TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS removed (
    metadata TEXT PRIMARY KEY,
    release INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS releases (
    release INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    added INTEGER NOT NULL,
    removed INTEGER NOT NULL
);
"""


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The column names of ``table``."""
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def add_page_column(conn: sqlite3.Connection) -> None:
    """Give ``chunks`` its ``page`` column (a PDF chunk's page) if the index was made before
    chunks had one; old chunks read as page None."""
    if "page" in columns(conn, "chunks"):
        return
    try:
        conn.execute("ALTER TABLE chunks ADD COLUMN page INTEGER")
    except sqlite3.OperationalError as exc:  # another process added it meanwhile
        if "duplicate column" not in str(exc):
            raise


def add_mention_kind(conn: sqlite3.Connection) -> None:
    """Give ``mentions`` its ``kind`` column (the kind that chunk's extraction gave the concept,
    as a rank in :data:`clew.types.CONCEPT_KINDS`; a concept's kind is the highest of its
    mentions'), filled from the concept's kind for an index made before mentions had one, and
    the ``(concept_id, kind)`` index that finds a concept's highest kind after a delete."""
    if "kind" not in columns(conn, "mentions"):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if "kind" not in columns(conn, "mentions"):  # not added by another process meanwhile
                conn.execute("ALTER TABLE mentions ADD COLUMN kind INTEGER NOT NULL DEFAULT 0")
                conn.execute(
                    "UPDATE mentions SET kind = (SELECT "
                    + KIND_SQL.format("c.kind")
                    + " FROM concepts c WHERE c.concept_id = mentions.concept_id) "
                    "WHERE concept_id IN (SELECT concept_id FROM concepts WHERE kind <> 'phrase')"
                )
                conn.execute("DROP INDEX IF EXISTS mentions_concept")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    conn.execute("CREATE INDEX IF NOT EXISTS mentions_kind ON mentions(concept_id, kind)")
