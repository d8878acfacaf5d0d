"""The embedded system of record: one SQLite file in WAL mode.

Documents, chunks (text, hash, tokens, vector), concepts, mentions, links, a change log and a
monotonically increasing release. A write batch is one ``BEGIN IMMEDIATE`` transaction: a crash
or an error mid-batch (disk full included) leaves the previous release intact, and a failed
write is a :class:`StoreError` naming the index and the cause. Chunk ordinals (``INTEGER PRIMARY
KEY AUTOINCREMENT``) are never reused, so derived indexes catch up by reading ordinals above the
last one they saw, and learn deletions from the set of live ordinals; :meth:`SQLiteStore.reading`
makes such a catch-up read one consistent release however many writes commit meanwhile.

An index whose directory (or database file) cannot be written opens read-only: searches work,
writes raise :class:`StoreError` saying why. ``read_only=True`` asks for that explicitly.

Integrity. A store gets a random ``store_id`` (a ``meta`` row) when it is created, or on the
first open by a writer of a store made before ids existed; derived index manifests record it,
with the release they reflect and that release's commit time
(:class:`clew.backends.embedded.files.Origin`), so a derived file of another store, or of
another history of this one, is never used. The same records are what detects a store that lost
committed releases (its ``-wal`` truncated or deleted, or the database replaced by an older
copy): on open, a store behind the release that a derived manifest of the same store reflects,
or with no data at all while a manifest reflects a committed release, is a :class:`StoreError`
and nothing is written. It is an error rather than a warning because serving, and then writing
on top of, the older release would make the loss silent and permanent (new commits would reuse
the lost release numbers). Manifests are saved only after the release they record has committed,
and are read here before the store, so a concurrent writer never causes a false alarm. What it
cannot see is a loss of releases committed after the last derived save (a process stopped
between its commit and its refresh).

Commits run with ``synchronous=FULL`` (the WAL is fsynced at every commit; a process crash alone
never loses a WAL commit, a power loss under NORMAL may), so a power loss cannot lose a release
that a manifest, fsynced after it, already records: the error above then means real damage.
Measured on a 2-core VM: 200 one-document commits 0.39 ms each under NORMAL, 3.98 ms under FULL
(one fsync); 200 one-document ``Engine.ingest`` calls (each also saves three derived indexes)
14.6 s vs 15.3 s (+5%); one 200-document ingest: no measurable difference.

A damaged database file (a page of garbage) is a one-line :class:`StoreError` naming the file,
wherever SQLite notices it: on open or in any read (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``).
``PRAGMA quick_check`` on every open would find damage that no query touches, but costs 94 ms on
SciFact (41 MB, 6.7k chunks; the whole open is 0.22 s) and 1.05 s at 100k chunks (630 MB): not
run.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from clew.backends.embedded.files import Origin, recorded_origins
from clew.backends.embedded.schema import SCHEMA, add_mention_kind, add_page_column, columns
from clew.errors import IndexNotFoundError, StoreError
from clew.filters import MetadataColumns, Node
from clew.protocols import ChunkRow, DocumentRecord, GraphRows, Matrix
from clew.types import KIND_OF_RANK_SQL, KIND_RANK, KIND_SQL, DocumentSummary

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
DB_NAME = "clew.sqlite"
SYNCHRONOUS = "FULL"
"""Every commit (each bumps the release) fsyncs the WAL; measured in the module docstring."""


_LIST_BATCH = 500
"""Documents read per query by :meth:`SQLiteStore.documents` (a scope is evaluated per batch)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return True
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _damaged(path: Path, exc: sqlite3.DatabaseError) -> StoreError:
    return StoreError(
        f"the index database {str(path)!r} is corrupt ({exc}); restore the index from a backup "
        "or re-ingest into a new index"
    )


@contextmanager
def _damage_is_store_error(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if _is_damage(exc):
            raise _damaged(path, exc) from exc
        raise


def _guarded(
    fn: Callable[Concatenate[SQLiteStore, _P], _R],
) -> Callable[Concatenate[SQLiteStore, _P], _R]:
    """A read whose damaged-database error becomes a one-line :class:`StoreError`. A generator
    is guarded over its whole iteration (no per-row cost)."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(self: SQLiteStore, *args: _P.args, **kwargs: _P.kwargs) -> Any:
            with _damage_is_store_error(self.path):
                yield from cast(Iterator[Any], fn(self, *args, **kwargs))

        return cast("Callable[Concatenate[SQLiteStore, _P], _R]", gen)

    @functools.wraps(fn)
    def call(self: SQLiteStore, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _damage_is_store_error(self.path):
            return fn(self, *args, **kwargs)

    return cast("Callable[Concatenate[SQLiteStore, _P], _R]", call)


class SQLiteStore:
    """SQLite system of record. Safe to share between threads (one connection per thread)."""

    def __init__(
        self, directory: str | Path, *, create: bool = False, read_only: bool = False
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        existed = self.path.exists()
        if not existed:
            if not create:
                raise IndexNotFoundError(
                    f"no clew index at {str(self.directory)!r}; create one with "
                    f"'clew ingest PATH --index {self.directory}'"
                )
            if read_only:
                raise StoreError(
                    f"cannot create an index at {str(self.directory)!r} read-only; "
                    "open it without read_only to create it"
                )
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot create index directory {str(directory)!r}: {exc.strerror or exc}"
                ) from exc
            reason = _not_writable(self.directory, self.path)
            if reason is not None:
                raise StoreError(f"cannot create an index in {str(self.directory)!r}: {reason}")
        self.read_only_reason: str | None = (
            "opened read-only" if read_only else _not_writable(self.directory, self.path)
        )
        """Why writes are refused (None: the index is writable)."""
        self._local = threading.local()
        self._has_page: bool | None = None
        self._has_mention_kind: bool | None = None
        self.store_id: str | None = None
        """This store's random id (None only for a store made before ids, opened read-only)."""
        # what the derived manifests say was committed: read BEFORE the store, since a manifest
        # is saved only after its release committed (a concurrent writer cannot look like a loss)
        recorded = recorded_origins(self.directory) if existed else []
        try:
            with _damage_is_store_error(self.path):
                self._open(recorded)
        except BaseException:
            self.close()
            raise

    def _open(self, recorded: Sequence[tuple[Path, Origin]]) -> None:
        conn = self._conn()
        try:
            version = self.get_meta("schema_version")
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise StoreError(f"{str(self.path)!r} is not a clew index: {exc}") from exc
            version = None  # an empty database
        # before anything is written: a store that lost its releases is left as it is
        self._check_recorded(recorded, has_data=version is not None)
        if self.read_only_reason is not None:
            if version is None:
                raise StoreError(f"{str(self.path)!r} is not a clew index (no schema version)")
        else:
            try:
                conn.executescript(SCHEMA)
            except sqlite3.DatabaseError as exc:
                if _is_damage(exc):
                    raise
                raise StoreError(f"{str(self.path)!r} is not a clew index: {exc}") from exc
            add_page_column(conn)
            add_mention_kind(conn)
        if version is None:
            self._init_meta({"schema_version": SCHEMA_VERSION, "release": "0"})
        elif version != SCHEMA_VERSION:
            raise StoreError(
                f"index schema version {version!r} is not supported; allowed: {SCHEMA_VERSION!r}"
            )
        self.store_id = self.get_meta("store_id")
        if self.store_id is None and self.read_only_reason is None:
            self._init_meta({})  # a store made before ids: give it one (migration)
            self.store_id = self.get_meta("store_id")

    def _page_column(self, alias: str) -> str:
        """``alias.page``, or NULL for a read-only store made before chunks had pages."""
        if self._has_page is None:
            self._has_page = "page" in columns(self._conn(), "chunks")
        return f"{alias}.page" if self._has_page else "NULL"

    def _mention_kind(self, alias: str) -> str:
        """``alias.kind``, or its concept's kind for a read-only store made before mentions had
        kinds."""
        if self._has_mention_kind is None:
            self._has_mention_kind = "kind" in columns(self._conn(), "mentions")
        if self._has_mention_kind:
            return f"{alias}.kind"
        kind = KIND_SQL.format("c.kind")
        return f"(SELECT {kind} FROM concepts c WHERE c.concept_id = {alias}.concept_id)"

    def _init_meta(self, values: Mapping[str, str]) -> None:
        """Add ``values`` and a fresh ``store_id`` where absent (never replaces: two processes
        creating or migrating the same store agree on the first one committed)."""
        conn = self._conn()
        rows = [*values.items(), ("store_id", uuid.uuid4().hex)]
        with _transaction(conn, self.directory):
            conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", rows)

    def _check_recorded(self, recorded: Sequence[tuple[Path, Origin]], *, has_data: bool) -> None:
        """A :class:`StoreError` when a derived manifest of this store reflects a committed
        release the store no longer has (see the module docstring)."""
        store_id = self.get_meta("store_id") if has_data else None
        release = self.release() if has_data else 0
        for path, origin in sorted(recorded, key=lambda r: -r[1].release):
            if origin.release <= 0 or (has_data and origin.store_id != store_id):
                continue  # nothing committed, or another store's leftovers (rebuilt on load)
            if has_data and origin.release <= release:
                continue
            held = f"is at release {release}" if has_data else "holds no data"
            manifests = " ".join(sorted(p.name for p, _ in recorded))
            raise StoreError(
                f"the index at {str(self.directory)!r} lost committed releases: {DB_NAME} {held}"
                f" but {path.name} reflects {origin.describe()}; its write-ahead log "
                f"{DB_NAME}-wal was truncated or deleted, or {DB_NAME} was replaced by an older "
                "copy. Nothing was changed: restore the index directory from a backup or "
                f"re-ingest; to accept the older release instead, delete {manifests} (the "
                "derived indexes are then rebuilt from the store)"
            )

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def check_writable(self) -> None:
        """Raise :class:`StoreError` unless this store may be written."""
        if self.read_only_reason is not None:
            raise StoreError(
                f"index at {str(self.directory)!r} is read-only ({self.read_only_reason}); "
                "nothing was written"
            )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                if self.read_only_reason is None:
                    conn = sqlite3.connect(
                        self.path, timeout=10.0, isolation_level=None, check_same_thread=False
                    )
                    try:
                        _retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"), 10.0)  # type: ignore[union-attr]
                        conn.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
                    except sqlite3.Error:
                        conn.close()
                        raise
                else:
                    conn = self._connect_read_only()
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.Error as exc:
                raise _store_error(self.directory, exc, "cannot open") from exc
            self._local.conn = conn
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """``mode=ro``; where SQLite cannot create the WAL index (``-shm``) in a read-only
        directory, ``immutable=1`` — safe only when no committed change waits in ``-wal``."""
        uri = "file:" + quote(str(self.path.resolve()))
        conn = sqlite3.connect(
            uri + "?mode=ro", uri=True, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise StoreError(
                    f"cannot open the index at {str(self.directory)!r} read-only: {wal.name!r} "
                    "holds changes its last writer did not checkpoint (it did not close "
                    f"cleanly) and the directory is {self.read_only_reason}; open it once with "
                    f"write access ({exc})"
                ) from exc
        return sqlite3.connect(
            uri + "?mode=ro&immutable=1", uri=True, isolation_level=None, check_same_thread=False
        )

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta -------------------------------------------------------------------------------

    @_guarded
    def get_meta(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, values: Mapping[str, str]) -> None:
        self.check_writable()
        conn = self._conn()
        with _transaction(conn, self.directory):
            conn.executemany(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(values.items())
            )

    def release(self) -> int:
        return int(self.get_meta("release") or 0)

    @_guarded
    def origin(self, release: int) -> Origin | None:
        """Release ``release`` of this store as a derived index records it (None when this
        store, in the current read, has no such committed release, or has no id)."""
        if self.store_id is None or release < 0:
            return None
        if release == 0:
            return Origin(self.store_id, 0, None)
        row = (
            self._conn()
            .execute("SELECT created_at FROM releases WHERE release = ?", (int(release),))
            .fetchone()
        )
        return None if row is None else Origin(self.store_id, int(release), float(row[0]))

    # -- writes -----------------------------------------------------------------------------

    @_guarded
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
        self.check_writable()
        conn = self._conn()
        with _transaction(conn, self.directory):
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
                        "token_count, heading_path, start_char, end_char, tokens, vector, release, "
                        "page) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                            chunk.page,
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
                        rows.append((ordinal, cid, m.count, KIND_RANK.get(m.concept.kind, 0)))
                        conn.executemany(
                            "INSERT OR IGNORE INTO concept_aliases(concept_id, surface) "
                            "VALUES (?, ?)",
                            [(cid, a) for a in (m.concept.label, *m.concept.aliases) if a],
                        )
                    conn.executemany(
                        "INSERT INTO mentions(ordinal, concept_id, count, kind) "
                        "VALUES (?, ?, ?, ?)",
                        rows,
                    )
                    added += 1
            self._bump(conn, release, added, removed)
        return release

    @staticmethod
    def _concept_id(conn: sqlite3.Connection, key: str, label: str, kind: str) -> int:
        row = conn.execute("SELECT concept_id, kind FROM concepts WHERE key = ?", (key,)).fetchone()
        if row is not None:
            if KIND_RANK.get(kind, 0) > KIND_RANK.get(str(row[1]), 0):
                # seen as a phrase first, now as an identifier: it is a name
                conn.execute("UPDATE concepts SET kind = ? WHERE concept_id = ?", (kind, row[0]))
            return int(row[0])
        cur = conn.execute(
            "INSERT INTO concepts(key, label, kind) VALUES (?, ?, ?)", (key, label, kind)
        )
        return int(cur.lastrowid or 0)

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Remove documents from the store (and so from every derived index); new release."""
        self.check_writable()
        conn = self._conn()
        with _transaction(conn, self.directory):
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
        # the tombstone: which scopes saw something go at this release (one row per metadata)
        conn.execute(
            "INSERT INTO removed(metadata, release) SELECT metadata, ? FROM documents "
            "WHERE doc_id = ? ON CONFLICT(metadata) DO UPDATE SET release = excluded.release",
            (release, doc_id),
        )
        conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))  # cascades
        for part in _batches(sorted(concept_ids), 500):
            marks = ",".join("?" * len(part))
            conn.execute(
                f"DELETE FROM concepts WHERE concept_id IN ({marks}) AND NOT EXISTS "
                "(SELECT 1 FROM mentions m WHERE m.concept_id = concepts.concept_id)",
                part,
            )
            # a concept is of the highest kind its live mentions have: the chunk that made a
            # word a name may be the one gone (mentions_kind answers each from the index)
            highest = KIND_OF_RANK_SQL.format(
                "(SELECT max(m.kind) FROM mentions m WHERE m.concept_id = concepts.concept_id)"
            )
            conn.execute(
                f"UPDATE concepts SET kind = {highest} WHERE concept_id IN ({marks}) "
                f"AND kind <> 'phrase' AND kind <> {highest}",
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

    @contextmanager
    @_guarded
    def reading(self) -> Iterator[None]:
        """One read transaction on this thread's connection: every read inside sees the same
        committed release, whatever other connections commit meanwhile. Re-entrant."""
        conn = self._conn()
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT value FROM meta WHERE key = 'release'").fetchall()  # pin it now
            yield
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")  # read-only: nothing to write, ends the snapshot

    @_guarded
    def concept_kinds(self, keys: Sequence[str]) -> dict[str, str]:
        """Kind of each stored concept among ``keys`` (missing keys are left out)."""
        out: dict[str, str] = {}
        conn = self._conn()
        for part in _batches(sorted(set(keys)), 500):
            marks = ",".join("?" * len(part))
            for key, kind in conn.execute(
                f"SELECT key, kind FROM concepts WHERE key IN ({marks})", part
            ):
                out[str(key)] = str(kind)
        return out

    @_guarded
    def concept_aliases(self) -> list[tuple[str, str, str, list[str], int]]:
        """(key, label, kind, surface forms, chunks mentioning it) of every concept."""
        conn = self._conn()
        surfaces: dict[int, list[str]] = {}
        for cid, surface in conn.execute(
            "SELECT concept_id, surface FROM concept_aliases ORDER BY concept_id, surface"
        ):
            surfaces.setdefault(int(cid), []).append(str(surface))
        rows = conn.execute(
            "SELECT c.concept_id, c.key, c.label, c.kind, COUNT(m.ordinal) FROM concepts c "
            "LEFT JOIN mentions m USING (concept_id) GROUP BY c.concept_id ORDER BY c.key"
        ).fetchall()
        return [
            (str(key), str(label), str(kind), surfaces.get(int(cid), [str(label)]), int(n))
            for cid, key, label, kind, n in rows
        ]

    @_guarded
    def has_source(self, source: str) -> bool:
        """Whether any document has this ``source`` (e.g. ``memory``)."""
        row = (
            self._conn()
            .execute("SELECT 1 FROM documents WHERE source = ? LIMIT 1", (source,))
            .fetchone()
        )
        return row is not None

    @_guarded
    def has_document(self, doc_id: str) -> bool:
        return (
            self._conn().execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
            is not None
        )

    @_guarded
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

    @_guarded
    def documents(
        self, scope: Node | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[DocumentSummary]:
        """The documents (no text) in id order, those ``scope`` lets through only (evaluated as
        a caller's scope is: a field a document lacks matches nothing), starting after the id
        ``after`` (exclusive), at most ``limit``. One read transaction: one release."""
        out: list[DocumentSummary] = []
        cursor = after
        with self.reading():
            conn = self._conn()
            while limit is None or len(out) < limit:
                rows = conn.execute(
                    "SELECT d.doc_id, d.title, d.source, d.metadata, d.release, "
                    "(SELECT COUNT(*) FROM chunks c WHERE c.doc_id = d.doc_id) FROM documents d "
                    + ("" if cursor is None else "WHERE d.doc_id > ? ")
                    + "ORDER BY d.doc_id LIMIT ?",
                    (_LIST_BATCH,) if cursor is None else (cursor, _LIST_BATCH),
                ).fetchall()
                metas = [json.loads(r[3]) for r in rows]
                keep = [True] * len(rows)
                if scope is not None and rows:
                    cols = MetadataColumns.build(len(rows), [([i], m) for i, m in enumerate(metas)])
                    keep = [bool(k) for k in cols.mask(scope, strict=False)]
                for row, metadata, kept in zip(rows, metas, keep, strict=True):
                    if kept and (limit is None or len(out) < limit):
                        out.append(
                            DocumentSummary(
                                doc_id=row[0],
                                title=row[1],
                                source=row[2],
                                chunks=int(row[5]),
                                release=int(row[4]),
                                metadata=metadata,
                            )
                        )
                if len(rows) < _LIST_BATCH:
                    break
                cursor = rows[-1][0]
        return out

    @_guarded
    def counts(self) -> dict[str, int]:
        conn = self._conn()
        return {
            name: int(conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0])
            for name in ("documents", "chunks", "concepts", "mentions", "links")
        }

    @_guarded
    def max_ordinal(self) -> int:
        row = self._conn().execute("SELECT MAX(ordinal) FROM chunks").fetchone()
        seq = (
            self._conn().execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        )
        return max(int(row[0] or 0), int(seq[0]) if seq else 0)

    @_guarded
    def live_ordinals(self) -> npt.NDArray[np.int64]:
        rows = self._conn().execute("SELECT ordinal FROM chunks ORDER BY ordinal").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    @_guarded
    def iter_tokens(self, after: int) -> Iterator[tuple[int, tuple[str, ...]]]:
        cur = self._conn().execute(
            "SELECT ordinal, tokens FROM chunks WHERE ordinal > ? ORDER BY ordinal", (int(after),)
        )
        for ordinal, tokens in cur:
            yield int(ordinal), tuple(tokens.split())

    @_guarded
    def iter_vectors(self, after: int) -> Iterator[tuple[int, Matrix]]:
        cur = self._conn().execute(
            "SELECT ordinal, vector FROM chunks WHERE ordinal > ? ORDER BY ordinal", (int(after),)
        )
        for ordinal, blob in cur:
            yield int(ordinal), np.frombuffer(blob, dtype=np.float32)

    @_guarded
    def chunk_keys(self, after: int) -> Iterator[tuple[int, tuple[str, str]]]:
        """(ordinal, (chunk id, content hash)) of chunks above an ordinal."""
        cur = self._conn().execute(
            "SELECT ordinal, chunk_id, content_hash FROM chunks WHERE ordinal > ? ORDER BY ordinal",
            (int(after),),
        )
        for ordinal, chunk_id, digest in cur:
            yield int(ordinal), (chunk_id, digest)

    @_guarded
    def fetch(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]:
        out: dict[int, ChunkRow] = {}
        conn = self._conn()
        for part in _batches([int(o) for o in ordinals], 500):
            marks = ",".join("?" * len(part))
            for row in conn.execute(
                "SELECT c.ordinal, c.chunk_id, c.doc_id, d.title, c.text, c.content_hash, "
                f"c.heading_path, d.metadata, c.token_count, {self._page_column('c')}, d.source "
                f"FROM chunks c JOIN documents d USING (doc_id) WHERE c.ordinal IN ({marks})",
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
                    page=None if row[9] is None else int(row[9]),
                    source=str(row[10]),
                )
        return out

    @_guarded
    def latest_release(self, ordinals: Sequence[int]) -> int | None:
        """The highest release that wrote one of ``ordinals`` (None: none of them is stored)."""
        conn = self._conn()
        found: list[int] = []
        for part in _batches([int(o) for o in ordinals], 500):
            marks = ",".join("?" * len(part))
            row = conn.execute(
                f"SELECT max(release) FROM chunks WHERE ordinal IN ({marks})", part
            ).fetchone()
            if row is not None and row[0] is not None:
                found.append(int(row[0]))
        return max(found, default=None)

    @_guarded
    def removed_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """(release, metadata) of the documents deleted or replaced: for each distinct metadata
        the last release that removed a document with it (none from before the table)."""
        conn = self._conn()
        if not columns(conn, "removed"):  # an older index opened read-only
            return []
        return [
            (int(release), json.loads(meta))
            for meta, release in conn.execute("SELECT metadata, release FROM removed")
        ]

    @_guarded
    def metadata_rows(self) -> Iterator[tuple[list[int], Mapping[str, Any]]]:
        conn = self._conn()
        by_doc: dict[str, list[int]] = {}
        for ordinal, doc_id in conn.execute("SELECT ordinal, doc_id FROM chunks"):
            by_doc.setdefault(doc_id, []).append(int(ordinal))
        for doc_id, metadata in conn.execute("SELECT doc_id, metadata FROM documents"):
            if doc_id in by_doc:
                yield by_doc[doc_id], json.loads(metadata)

    @_guarded
    def graph_rows(self) -> GraphRows:
        conn = self._conn()
        return GraphRows(
            concepts=conn.execute("SELECT concept_id, key, label, kind FROM concepts").fetchall(),
            mentions=conn.execute(
                f"SELECT ordinal, concept_id, count, {self._mention_kind('mentions')} FROM mentions"
            ).fetchall(),
            chunks=conn.execute("SELECT ordinal, doc_id, seq FROM chunks").fetchall(),
            links=conn.execute("SELECT doc_id, target FROM links").fetchall(),
            titles=conn.execute("SELECT doc_id, title FROM documents").fetchall(),
        )


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` on any exception.

    A failure of SQLite itself (disk full, I/O error, read-only file, busy) becomes a
    :class:`StoreError` naming the index directory and the cause; nothing of the batch remains.
    """

    def __init__(self, conn: sqlite3.Connection, directory: Path) -> None:
        self.conn = conn
        self.directory = directory

    def __enter__(self) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _store_error(self.directory, exc, "cannot start a write on") from exc

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except sqlite3.Error as commit_exc:
                self._rollback()
                raise _store_error(self.directory, commit_exc, "cannot commit to") from commit_exc
        self._rollback()
        if isinstance(exc, sqlite3.Error):
            raise _store_error(self.directory, exc, "cannot write to") from exc

    def _rollback(self) -> None:
        # SQLite rolls back by itself after some errors (SQLITE_FULL): then there is nothing
        # left to roll back, and trying would hide the real error
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("rollback failed on %s", self.directory, exc_info=True)


def _retry_locked(fn: Callable[[], object], timeout: float) -> None:
    """Run ``fn``, retrying while the database is locked: switching a new file to WAL takes an
    exclusive lock without waiting on the busy timeout, so two processes creating one index at
    once would otherwise fail at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fn()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _store_error(directory: Path, exc: sqlite3.Error, what: str) -> StoreError:
    """A :class:`StoreError` for a failed SQLite call, with the cause in plain words."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    if name == "SQLITE_FULL":
        cause = "the disk is full"
        advice = "nothing of this write was kept; free space and retry"
    elif name.startswith("SQLITE_READONLY"):
        cause = "the index files are read-only"
        advice = "nothing of this write was kept"
    elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        cause = "it is locked by another writer"
        advice = "retry when it has finished"
    elif name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        cause = "the database file is damaged or not a clew index"
        advice = "restore it or re-ingest into a new index"
    elif name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_PERM")):
        cause = "the disk or file system refused the operation"
        advice = "check the directory's space and permissions"
    else:
        cause = "SQLite failed"
        advice = "nothing of this write was kept"
    return StoreError(f"{what} the index at {str(directory)!r}: {cause} ({exc}); {advice}")


def _not_writable(directory: Path, db: Path) -> str | None:
    """Why the index cannot be written by this process (None when it can)."""
    targets = [directory] + [
        p
        for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))
        if p.exists()
    ]
    for target in targets:
        if not os.access(target, os.W_OK):
            try:
                read_only_fs = bool(os.statvfs(target).f_flag & os.ST_RDONLY)
            except (OSError, AttributeError):
                read_only_fs = False
            kind = "directory" if target == directory else "file"
            why = (
                "read-only file system"
                if read_only_fs
                else f"no write permission for uid {os.geteuid()}"
            )
            return f"{kind} {str(target)!r} is not writable: {why}"
    return None


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
