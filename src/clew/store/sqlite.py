"""The embedded system of record: one SQLite file in WAL mode.

Documents, chunks (text, hash, tokens, vector), concepts, mentions, links, a change log and a
monotonically increasing release. A write batch is one ``BEGIN IMMEDIATE`` transaction: a crash
or an error mid-batch leaves the previous release intact. Chunk ordinals (``INTEGER PRIMARY KEY
AUTOINCREMENT``) are never reused, so derived indexes catch up by reading ordinals above the last
one they saw, and learn deletions from the set of live ordinals.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.errors import IndexNotFoundError, StoreError
from clew.protocols import ChunkRow, DocumentRecord, GraphRows, Matrix

SCHEMA_VERSION = "1"
DB_NAME = "clew.sqlite"

_SCHEMA = """
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
    release INTEGER NOT NULL
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
    PRIMARY KEY (ordinal, concept_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mentions_concept ON mentions(concept_id);
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
CREATE TABLE IF NOT EXISTS releases (
    release INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    added INTEGER NOT NULL,
    removed INTEGER NOT NULL
);
"""


class SQLiteStore:
    """SQLite system of record. Safe to share between threads (one connection per thread)."""

    def __init__(self, directory: str | Path, *, create: bool = False) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        if not self.path.exists():
            if not create:
                raise IndexNotFoundError(
                    f"no clew index at {str(self.directory)!r}; create one with "
                    f"'clew ingest PATH --index {self.directory}'"
                )
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot create index directory {str(directory)!r}: {exc}"
                ) from exc
        self._local = threading.local()
        conn = self._conn()
        try:
            conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{str(self.path)!r} is not a clew index: {exc}") from exc
        version = self.get_meta("schema_version")
        if version is None:
            self.set_meta({"schema_version": SCHEMA_VERSION, "release": "0"})
        elif version != SCHEMA_VERSION:
            raise StoreError(
                f"index schema version {version!r} is not supported; allowed: {SCHEMA_VERSION!r}"
            )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=10.0, isolation_level=None, check_same_thread=False
                )
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open {str(self.path)!r}: {exc}") from exc
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, values: Mapping[str, str]) -> None:
        conn = self._conn()
        with _transaction(conn):
            conn.executemany(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(values.items())
            )

    def release(self) -> int:
        return int(self.get_meta("release") or 0)

    # -- writes -----------------------------------------------------------------------------

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        conn = self._conn()
        for part in _batches(list(doc_ids), 500):
            marks = ",".join("?" * len(part))
            for doc_id, h in conn.execute(
                f"SELECT doc_id, doc_hash FROM documents WHERE doc_id IN ({marks})", part
            ):
                out[doc_id] = h
        return out

    def write(self, records: Sequence[DocumentRecord]) -> int:
        """Insert or replace documents with their chunks, vectors and mentions; new release."""
        conn = self._conn()
        with _transaction(conn):
            release = self.release() + 1
            removed = 0
            added = 0
            concept_ids: dict[str, int] = {}
            for rec in records:
                removed += self._delete_doc(conn, rec.document.doc_id, release)
                doc = rec.document
                conn.execute(
                    "INSERT INTO documents(doc_id, title, source, fmt, metadata, doc_hash, text, "
                    "release) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        doc.doc_id,
                        doc.title,
                        doc.source,
                        doc.fmt,
                        json.dumps(doc.metadata, ensure_ascii=False, sort_keys=True),
                        rec.doc_hash,
                        doc.text,
                        release,
                    ),
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO links(doc_id, target) VALUES (?, ?)",
                    [(doc.doc_id, t) for t in doc.links],
                )
                vectors = np.ascontiguousarray(rec.vectors, dtype=np.float32)
                for i, chunk in enumerate(rec.chunks):
                    cur = conn.execute(
                        "INSERT INTO chunks(chunk_id, doc_id, seq, text, content_hash, "
                        "token_count, heading_path, start_char, end_char, tokens, vector, release)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            chunk.chunk_id,
                            chunk.doc_id,
                            chunk.seq,
                            chunk.text,
                            chunk.content_hash,
                            chunk.token_count,
                            json.dumps(list(chunk.heading_path)),
                            chunk.start,
                            chunk.end,
                            " ".join(rec.tokens[i]),
                            vectors[i].tobytes(),
                            release,
                        ),
                    )
                    ordinal = int(cur.lastrowid or 0)
                    conn.execute(
                        "INSERT INTO changes(release, op, doc_id, ordinal) VALUES (?, 'add', ?, ?)",
                        (release, doc.doc_id, ordinal),
                    )
                    rows = []
                    for m in rec.mentions[i]:
                        cid = concept_ids.get(m.concept.key)
                        if cid is None:
                            cid = self._concept_id(
                                conn, m.concept.key, m.concept.label, m.concept.kind
                            )
                            concept_ids[m.concept.key] = cid
                        rows.append((ordinal, cid, m.count))
                    conn.executemany(
                        "INSERT INTO mentions(ordinal, concept_id, count) VALUES (?, ?, ?)", rows
                    )
                    added += 1
            self._bump(conn, release, added, removed)
        return release

    @staticmethod
    def _concept_id(conn: sqlite3.Connection, key: str, label: str, kind: str) -> int:
        row = conn.execute("SELECT concept_id FROM concepts WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return int(row[0])
        cur = conn.execute(
            "INSERT INTO concepts(key, label, kind) VALUES (?, ?, ?)", (key, label, kind)
        )
        return int(cur.lastrowid or 0)

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Remove documents from the store (and so from every derived index); new release."""
        conn = self._conn()
        with _transaction(conn):
            release = self.release() + 1
            removed = sum(self._delete_doc(conn, d, release) for d in doc_ids)
            self._bump(conn, release, 0, removed)
        return release

    def _delete_doc(self, conn: sqlite3.Connection, doc_id: str, release: int) -> int:
        ordinals = [
            r[0] for r in conn.execute("SELECT ordinal FROM chunks WHERE doc_id = ?", (doc_id,))
        ]
        if (
            not ordinals
            and conn.execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
            is None
        ):
            return 0
        concept_ids: set[int] = set()
        for part in _batches(ordinals, 500):
            marks = ",".join("?" * len(part))
            concept_ids.update(
                r[0]
                for r in conn.execute(
                    f"SELECT DISTINCT concept_id FROM mentions WHERE ordinal IN ({marks})", part
                )
            )
        conn.executemany(
            "INSERT INTO changes(release, op, doc_id, ordinal) VALUES (?, 'delete', ?, ?)",
            [(release, doc_id, o) for o in ordinals],
        )
        conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))  # cascades
        for part in _batches(sorted(concept_ids), 500):
            marks = ",".join("?" * len(part))
            conn.execute(
                f"DELETE FROM concepts WHERE concept_id IN ({marks}) AND NOT EXISTS "
                "(SELECT 1 FROM mentions m WHERE m.concept_id = concepts.concept_id)",
                part,
            )
        return len(ordinals)

    def _bump(self, conn: sqlite3.Connection, release: int, added: int, removed: int) -> None:
        conn.execute(
            "INSERT INTO releases(release, created_at, added, removed) VALUES (?, ?, ?, ?)",
            (release, time.time(), added, removed),
        )
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('release', ?)", (str(release),)
        )

    # -- reads ------------------------------------------------------------------------------

    def has_document(self, doc_id: str) -> bool:
        return (
            self._conn().execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
            is not None
        )

    def document(
        self, doc_id: str
    ) -> tuple[dict[str, Any], list[tuple[int, str, int, str]]] | None:
        """A stored document (doc_id, title, source, fmt, metadata, text, release) and its chunks
        as (ordinal, chunk id, seq, text) in order; None if there is no such document."""
        conn = self._conn()
        row = conn.execute(
            "SELECT doc_id, title, source, fmt, metadata, text, release FROM documents "
            "WHERE doc_id = ?",
            (doc_id,),
        ).fetchone()
        if row is None:
            return None
        doc = {
            "doc_id": row[0],
            "title": row[1],
            "source": row[2],
            "fmt": row[3],
            "metadata": json.loads(row[4]),
            "text": row[5],
            "release": int(row[6]),
        }
        chunks = [
            (int(r[0]), r[1], int(r[2]), r[3])
            for r in conn.execute(
                "SELECT ordinal, chunk_id, seq, text FROM chunks WHERE doc_id = ? ORDER BY seq",
                (doc_id,),
            )
        ]
        return doc, chunks

    def counts(self) -> dict[str, int]:
        conn = self._conn()
        return {
            name: int(conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0])
            for name in ("documents", "chunks", "concepts", "mentions", "links")
        }

    def max_ordinal(self) -> int:
        row = self._conn().execute("SELECT MAX(ordinal) FROM chunks").fetchone()
        seq = (
            self._conn().execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        )
        return max(int(row[0] or 0), int(seq[0]) if seq else 0)

    def live_ordinals(self) -> npt.NDArray[np.int64]:
        rows = self._conn().execute("SELECT ordinal FROM chunks ORDER BY ordinal").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def iter_tokens(self, after: int) -> Iterator[tuple[int, tuple[str, ...]]]:
        cur = self._conn().execute(
            "SELECT ordinal, tokens FROM chunks WHERE ordinal > ? ORDER BY ordinal", (int(after),)
        )
        for ordinal, tokens in cur:
            yield int(ordinal), tuple(tokens.split())

    def iter_vectors(self, after: int) -> Iterator[tuple[int, Matrix]]:
        cur = self._conn().execute(
            "SELECT ordinal, vector FROM chunks WHERE ordinal > ? ORDER BY ordinal", (int(after),)
        )
        for ordinal, blob in cur:
            yield int(ordinal), np.frombuffer(blob, dtype=np.float32)

    def chunk_keys(self, after: int) -> Iterator[tuple[int, tuple[str, str]]]:
        """(ordinal, (chunk id, content hash)) of chunks above an ordinal."""
        cur = self._conn().execute(
            "SELECT ordinal, chunk_id, content_hash FROM chunks WHERE ordinal > ? ORDER BY ordinal",
            (int(after),),
        )
        for ordinal, chunk_id, digest in cur:
            yield int(ordinal), (chunk_id, digest)

    def fetch(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]:
        out: dict[int, ChunkRow] = {}
        conn = self._conn()
        for part in _batches([int(o) for o in ordinals], 500):
            marks = ",".join("?" * len(part))
            for row in conn.execute(
                "SELECT c.ordinal, c.chunk_id, c.doc_id, d.title, c.text, c.content_hash, "
                "c.heading_path, d.metadata, c.token_count FROM chunks c JOIN documents d "
                f"USING (doc_id) WHERE c.ordinal IN ({marks})",
                part,
            ):
                out[int(row[0])] = ChunkRow(
                    ordinal=int(row[0]),
                    chunk_id=row[1],
                    doc_id=row[2],
                    title=row[3],
                    text=row[4],
                    content_hash=row[5],
                    heading_path=tuple(json.loads(row[6])),
                    metadata=json.loads(row[7]),
                    token_count=int(row[8]),
                )
        return out

    def metadata_rows(self) -> Iterator[tuple[list[int], Mapping[str, Any]]]:
        conn = self._conn()
        by_doc: dict[str, list[int]] = {}
        for ordinal, doc_id in conn.execute("SELECT ordinal, doc_id FROM chunks"):
            by_doc.setdefault(doc_id, []).append(int(ordinal))
        for doc_id, metadata in conn.execute("SELECT doc_id, metadata FROM documents"):
            if doc_id in by_doc:
                yield by_doc[doc_id], json.loads(metadata)

    def graph_rows(self) -> GraphRows:
        conn = self._conn()
        return GraphRows(
            concepts=conn.execute("SELECT concept_id, key, label, kind FROM concepts").fetchall(),
            mentions=conn.execute("SELECT ordinal, concept_id, count FROM mentions").fetchall(),
            chunks=conn.execute("SELECT ordinal, doc_id, seq FROM chunks").fetchall(),
            links=conn.execute("SELECT doc_id, target FROM links").fetchall(),
        )


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"the index is locked by another writer ({exc}); retry when it has finished"
            ) from exc

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
