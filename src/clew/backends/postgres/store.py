"""The PostgreSQL system of record: the same contract as
:class:`~clew.backends.embedded.store.SQLiteStore`.

One clew index is one PostgreSQL schema (``clew`` unless ``schema=`` or a ``schema`` query
parameter in the URL says otherwise); its tables are defined by
:mod:`clew.backends.postgres.schema`.
A write batch is one transaction under an advisory lock per schema, so concurrent writers (threads
or processes) are serialized and releases stay monotonic; a failed write leaves the previous
release intact and is a :class:`StoreError` naming the index and the cause. Serialization
failures and deadlocks are retried a few times with backoff.

Chunk ordinals come from the ``chunks`` identity sequence, allocated inside the locked write, so
a later release always has higher ordinals and ordinals are never reused (derived indexes catch
up by reading ordinals above the last one they saw, exactly as with SQLite).
:meth:`PostgresStore.reading` pins one ``REPEATABLE READ`` snapshot to the calling thread: every
read inside, and every :meth:`PostgresStore.connection` taken inside, sees the same release.

Rows are written with binary ``COPY`` (documents, chunks, vectors, mentions, links, the change
log) and set-based statements, never one round trip per chunk.

The reads live here; the write path is :mod:`clew.backends.postgres.writes` and opening (the
extensions, the migrations) is :func:`clew.backends.postgres.schema.bootstrap`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np
import numpy.typing as npt
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from clew.backends.postgres import writes
from clew.backends.postgres.schema import Conn, bootstrap, lock_key
from clew.backends.postgres.where import compile_filter
from clew.backends.postgres.writes import Target
from clew.backends.postgres.writes import document_time as document_time  # re-exported
from clew.backends.records import assemble_records
from clew.errors import StoreError
from clew.filters import Node
from clew.protocols import ChunkRow, DocumentRecord, GraphRows, Matrix
from clew.types import CONCEPT_KINDS, Concept, DocumentSummary, Mention

log = logging.getLogger(__name__)

DEFAULT_SCHEMA = "clew"
SCHEMA_RULE = (
    "lowercase letters, digits and underscores, starting with a letter or underscore, "
    "at most 63 characters, not starting with 'pg_'"
)
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_PAGE = 5000
"""Rows per page when iterating chunks (tokens, keys); vectors use a fifth of it."""

Connect = Callable[[], AbstractContextManager[Conn]]
"""A connection factory: each call a context manager lending one connection
(:meth:`PostgresStore.connection`); the legs and the graph take one."""
T = TypeVar("T")


def validate_schema(name: object) -> str:
    """``name`` if it is a schema name clew accepts, else a :class:`StoreError` saying why."""
    if not isinstance(name, str) or not _SCHEMA_RE.fullmatch(name) or name.startswith("pg_"):
        raise StoreError(f"invalid PostgreSQL schema name {name!r}; allowed: {SCHEMA_RULE}")
    return name


def split_url(url: str) -> tuple[str, str | None]:
    """(the URL without its ``schema`` query parameter, that parameter or None)."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url, None
    parts = urlsplit(url)
    keep: list[str] = []
    schema: str | None = None
    for piece in parts.query.split("&"):
        if not piece:
            continue
        key, _, value = piece.partition("=")
        if unquote(key) == "schema":
            schema = unquote(value)
        else:
            keep.append(piece)
    return urlunsplit(parts._replace(query="&".join(keep))), schema


class PostgresStore:
    """PostgreSQL system of record. Safe to share between threads (a connection pool)."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        create: bool = False,
        read_only: bool = False,
        pool_size: int = 4,
        statement_timeout_ms: int = 30_000,
    ) -> None:
        clean, from_url = split_url(url)
        self.schema: str = validate_schema(
            schema if schema is not None else from_url if from_url is not None else DEFAULT_SCHEMA
        )
        """The PostgreSQL schema holding this index."""
        if not isinstance(pool_size, int) or pool_size < 1:
            raise StoreError(f"pool_size={pool_size!r} is invalid; allowed: an integer >= 1")
        if not isinstance(statement_timeout_ms, int) or statement_timeout_ms < 0:
            raise StoreError(
                f"statement_timeout_ms={statement_timeout_ms!r} is invalid; allowed: an integer "
                ">= 0 (0: no timeout)"
            )
        if create and read_only:
            raise StoreError(
                f"cannot create the index {self.schema!r} read-only; open it without read_only "
                "to create it"
            )
        self._conninfo = clean
        try:
            params = conninfo_to_dict(clean)
        except psycopg.Error as exc:
            raise StoreError(
                f"invalid PostgreSQL URL: {exc}; expected postgresql://USER@HOST:PORT/DATABASE"
            ) from None
        self._secret = str(params.get("password") or "")
        host = str(params.get("host") or params.get("hostaddr") or "localhost")
        port = str(params.get("port") or "5432")
        database = str(params.get("dbname") or params.get("user") or "postgres")
        self.where = f"database {database!r} on host {host!r} port {port}"
        """The server and database, for messages (never the password)."""
        self.statement_timeout_ms = statement_timeout_ms
        self.read_only_reason: str | None = "opened read-only" if read_only else None
        """Why writes are refused (None: the index is writable)."""
        self._lock = lock_key(self.schema)
        self._local = threading.local()
        self._closed = False
        bootstrap(
            self._conninfo,
            self.schema,
            self.where,
            create=create,
            read_only_reason=self.read_only_reason,
            lock=self._lock,
            scrub=self._scrub,
        )
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            clean,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": 10},
            configure=self._configure,
            name=f"clew-{self.schema}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=30.0)
        except PoolTimeout:
            self._pool.close()
            raise StoreError(
                f"cannot connect to PostgreSQL ({self.where}) within 30 s; check that the "
                "server is running and reachable"
            ) from None
        pending = self.deferred_indexes()
        if pending:
            log.warning(
                "index %s (%s): a bulk load did not finish; indexes %s are missing (BM25 search "
                "fails, vector search scans): call restore_indexes()",
                self.schema,
                self.where,
                ", ".join(pending),
            )

    # -- connections ------------------------------------------------------------------------

    def _scrub(self, exc: BaseException) -> str:
        text = str(exc).strip()
        if self._secret:
            text = text.replace(self._secret, "***")
        return text

    def _configure(self, conn: Conn) -> None:
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(self.schema)))
        conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", (str(self.statement_timeout_ms),)
        )
        if self.read_only_reason is not None:
            conn.execute("SET default_transaction_read_only = on")
        register_vector(conn)

    @contextmanager
    def _pooled(self) -> Iterator[Conn]:
        if self._closed:
            raise StoreError(f"the index {self.schema!r} ({self.where}) is closed")
        try:
            conn = self._pool.getconn(timeout=60.0)
        except PoolTimeout:
            raise StoreError(
                f"no connection to PostgreSQL ({self.where}) within 60 s: the server is "
                "unreachable or all pooled connections are busy"
            ) from None
        except PoolClosed:
            raise StoreError(f"the index {self.schema!r} ({self.where}) is closed") from None
        try:
            yield conn
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A pooled connection: autocommit, ``search_path`` = ``<schema>, public``, the pgvector
        adapter registered, the statement timeout set. Inside :meth:`reading` on this thread it
        is the pinned snapshot connection (read-only; do not commit it). Returned on exit."""
        pinned: Conn | None = getattr(self._local, "conn", None)
        if pinned is not None:
            yield pinned
            return
        with self._pooled() as conn:
            yield conn

    @contextmanager
    def _reader(self) -> Iterator[Conn]:
        """:meth:`connection`, with database errors as :class:`StoreError`."""
        try:
            with self.connection() as conn:
                yield conn
        except StoreError:
            raise
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot read the index {self.schema!r} ({self.where}): {self._scrub(exc)}"
            ) from exc

    def _query(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        with self._reader() as conn:
            return conn.execute(query, params).fetchall()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _target(self) -> Target:
        """This index as the write path needs it, as it stands now."""
        return Target(
            self.schema,
            self.where,
            self._lock,
            self.statement_timeout_ms,
            self.read_only_reason,
            self._pooled,
            self._reader,
            self._scrub,
        )

    # -- read-only state ----------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def check_writable(self) -> None:
        """Raise :class:`StoreError` unless this store may be written."""
        writes.check_writable(self._target())

    # -- meta -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = %s", (key,))
        return None if not rows else str(rows[0][0])

    def meta_items(self) -> dict[str, str]:
        """Every meta key and value (release and schema version included)."""
        return {str(k): str(v) for k, v in self._query("SELECT key, value FROM meta")}

    def set_meta(self, values: Mapping[str, str]) -> None:
        self.check_writable()
        items = [(str(k), str(v)) for k, v in values.items()]

        def run(conn: Conn) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO meta(key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    items,
                )

        self._write_tx(run)

    def release(self) -> int:
        return int(self.get_meta("release") or 0)

    # -- writes (clew.backends.postgres.writes) ---------------------------------------------

    def _write_tx(self, body: Callable[[Conn], T]) -> T:
        """``body`` in one write transaction (:func:`~clew.backends.postgres.writes.write_tx`)."""
        return writes.write_tx(self._target(), body)

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return {}
        rows = self._query("SELECT doc_id, doc_hash FROM documents WHERE doc_id = ANY(%s)", (ids,))
        return {str(d): str(h) for d, h in rows}

    def write(self, records: Sequence[DocumentRecord]) -> int:
        """Insert or replace documents with their chunks, vectors and mentions; new release."""
        return writes.write(self._target(), records)

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Remove documents from the store (and so from every derived index); new release."""
        return writes.delete(self._target(), doc_ids)

    @contextmanager
    def bulk_load(self, *, maintenance_work_mem: str | None = "1GB") -> Iterator[None]:
        """Load many documents fast: the search indexes over ``chunks`` (HNSW, BM25, the
        metadata GIN) are dropped on entry and built once on exit, which is several times
        faster than maintaining them row by row. Meanwhile vector search still works (exactly,
        by scanning) but BM25 search does not. The dropped definitions are kept in ``meta``
        (``deferred_indexes``) in the same transaction, so an interrupted load is finished by
        :meth:`restore_indexes` (a warning on open says so)."""
        with writes.bulk_load(self._target(), maintenance_work_mem=maintenance_work_mem):
            yield

    def vacuum(self) -> None:
        """``VACUUM ANALYZE`` the chunk and mention tables: fresh planner statistics, and a
        visibility map that lets the graph leg read mentions from the index alone (autovacuum
        gets there too, later). Run after a bulk load; harmless any time."""
        writes.vacuum(self._target())

    def deferred_indexes(self) -> list[str]:
        """Names of the indexes a bulk load dropped and has not rebuilt yet."""
        return writes.deferred_indexes(self._target())

    def restore_indexes(self, *, maintenance_work_mem: str | None = "1GB") -> list[str]:
        """Build every index a bulk load deferred (each in its own transaction, without a
        statement timeout, holding the write lock); the names built."""
        return writes.restore_indexes(self._target(), maintenance_work_mem=maintenance_work_mem)

    # -- reads ------------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One ``REPEATABLE READ`` read-only transaction pinned to this thread: every read inside
        (and every :meth:`connection` taken inside) sees the same committed release, whatever
        other connections commit meanwhile. Re-entrant."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with self._pooled() as conn, conn.transaction():
            try:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                conn.execute("SELECT value FROM meta WHERE key = 'release'").fetchall()  # pin now
            except psycopg.Error as exc:
                raise StoreError(
                    f"cannot read the index {self.schema!r} ({self.where}): {self._scrub(exc)}"
                ) from exc
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def has_document(self, doc_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM documents WHERE doc_id = %s", (doc_id,)))

    def has_source(self, source: str) -> bool:
        """Whether any document has this ``source`` (e.g. ``memory``)."""
        return bool(self._query("SELECT 1 FROM documents WHERE source = %s LIMIT 1", (source,)))

    def concept_kinds(self, keys: Sequence[str]) -> dict[str, str]:
        """Kind of each stored concept among ``keys`` (missing keys are left out)."""
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        rows = self._query("SELECT key, kind FROM concepts WHERE key = ANY(%s)", (wanted,))
        return {str(k): str(v) for k, v in rows}

    def concept_aliases(self) -> list[tuple[str, str, str, list[str], int]]:
        """(key, label, kind, surface forms, chunks mentioning it) of every concept."""
        with self._reader() as conn:
            surfaces: dict[int, list[str]] = {}
            for cid, surface in conn.execute(
                "SELECT concept_id, surface FROM concept_aliases "
                'ORDER BY concept_id, surface COLLATE "C"'
            ):
                surfaces.setdefault(int(cid), []).append(str(surface))
            rows = conn.execute(
                "SELECT c.concept_id, c.key, c.label, c.kind, COUNT(m.ordinal) FROM concepts c "
                "LEFT JOIN mentions m USING (concept_id) GROUP BY c.concept_id "
                'ORDER BY c.key COLLATE "C"'
            ).fetchall()
        return [
            (str(key), str(label), str(kind), surfaces.get(int(cid), [str(label)]), int(n))
            for cid, key, label, kind, n in rows
        ]

    def document(
        self, doc_id: str
    ) -> tuple[dict[str, Any], list[tuple[int, str, int, str]]] | None:
        """A stored document (doc_id, title, source, fmt, metadata, text, release) and its chunks
        as (ordinal, chunk id, seq, text) in order; None if there is no such document."""
        with self._reader() as conn:
            row = conn.execute(
                "SELECT doc_id, title, source, fmt, metadata, text, release FROM documents "
                "WHERE doc_id = %s",
                (doc_id,),
            ).fetchone()
            if row is None:
                return None
            chunks = conn.execute(
                "SELECT ordinal, chunk_id, seq, text FROM chunks WHERE doc_id = %s ORDER BY seq",
                (doc_id,),
            ).fetchall()
        doc = {
            "doc_id": row[0],
            "title": row[1],
            "source": row[2],
            "fmt": row[3],
            "metadata": row[4],
            "text": row[5],
            "release": int(row[6]),
        }
        return doc, [(int(o), str(c), int(s), str(t)) for o, c, s, t in chunks]

    def documents(
        self, scope: Node | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[DocumentSummary]:
        """The documents (no text) in id order (bytewise, as the embedded store orders them),
        those ``scope`` lets through only (the access filter compiled over
        ``documents.metadata``, as over ``chunks.metadata`` for the legs), starting after the
        id ``after`` (exclusive), at most ``limit``. One query: one release."""
        query = sql.SQL(
            "SELECT d.doc_id, d.title, d.source, d.metadata, d.release, "
            "(SELECT count(*) FROM chunks c WHERE c.doc_id = d.doc_id) FROM documents AS d "
            'WHERE {} AND ({}) ORDER BY d.doc_id COLLATE "C"{}'
        ).format(
            sql.SQL("TRUE")
            if after is None
            else sql.SQL('d.doc_id COLLATE "C" > {}').format(sql.Literal(after)),
            compile_filter(scope, alias="d"),
            sql.SQL("") if limit is None else sql.SQL(" LIMIT {}").format(sql.Literal(int(limit))),
        )
        return [
            DocumentSummary(
                doc_id=str(doc_id),
                title=str(title),
                source=str(source),
                chunks=int(n),
                release=int(release),
                metadata=dict(metadata),
            )
            for doc_id, title, source, metadata, release, n in self._query(query)
        ]

    def counts(self) -> dict[str, int]:
        with self._reader() as conn:
            return {
                name: int(conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0])  # type: ignore[index]
                for name in ("documents", "chunks", "concepts", "mentions", "links")
            }

    def max_ordinal(self) -> int:
        rows = self._query(
            "SELECT GREATEST(COALESCE((SELECT MAX(ordinal) FROM chunks), 0), "
            "COALESCE((SELECT value::bigint FROM meta WHERE key = 'max_ordinal'), 0))"
        )
        return int(rows[0][0])

    def live_ordinals(self) -> npt.NDArray[np.int64]:
        with self._reader() as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute("SELECT ordinal FROM chunks ORDER BY ordinal").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def _pages(self, columns: str, after: int, size: int) -> Iterator[list[tuple[Any, ...]]]:
        """Pages of ``(ordinal, columns…)`` above ``after`` in ordinal order (keyset paging: no
        connection is held between pages unless the caller is inside :meth:`reading`)."""
        last = int(after)
        while True:
            with self._reader() as conn, conn.cursor(binary=True) as cur:
                rows = cur.execute(
                    f"SELECT ordinal, {columns} FROM chunks WHERE ordinal > %s "
                    "ORDER BY ordinal LIMIT %s",
                    (last, size),
                ).fetchall()
            if not rows:
                return
            yield rows
            if len(rows) < size:
                return
            last = int(rows[-1][0])

    def iter_tokens(self, after: int) -> Iterator[tuple[int, tuple[str, ...]]]:
        for page in self._pages("tokens", after, _PAGE):
            for ordinal, tokens in page:
                yield int(ordinal), tuple(tokens.split())

    def iter_vectors(self, after: int) -> Iterator[tuple[int, Matrix]]:
        for page in self._pages("embedding", after, _PAGE // 5):
            for ordinal, vector in page:
                yield int(ordinal), vector.to_numpy()

    def chunk_keys(self, after: int) -> Iterator[tuple[int, tuple[str, str]]]:
        """(ordinal, (chunk id, content hash)) of chunks above an ordinal."""
        for page in self._pages("chunk_id, content_hash", after, _PAGE):
            for ordinal, chunk_id, digest in page:
                yield int(ordinal), (str(chunk_id), str(digest))

    def fetch(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]:
        wanted = sorted({int(o) for o in ordinals})
        if not wanted:
            return {}
        rows = self._query(
            "SELECT c.ordinal, c.chunk_id, c.doc_id, d.title, c.text, c.content_hash, "
            "c.heading_path, d.metadata, c.token_count, c.page, d.source FROM chunks c "
            "JOIN documents d "
            "USING (doc_id) WHERE c.ordinal = ANY(%s)",
            (wanted,),
        )
        return {
            int(r[0]): ChunkRow(
                ordinal=int(r[0]),
                chunk_id=r[1],
                doc_id=r[2],
                title=r[3],
                text=r[4],
                content_hash=r[5],
                heading_path=tuple(r[6]),
                metadata=r[7],
                token_count=int(r[8]),
                page=None if r[9] is None else int(r[9]),
                source=str(r[10]),
            )
            for r in rows
        }

    def metadata_rows(self) -> Iterator[tuple[list[int], Mapping[str, Any]]]:
        rows = self._query(
            "SELECT array_agg(c.ordinal ORDER BY c.ordinal), d.metadata FROM documents d "
            "JOIN chunks c USING (doc_id) GROUP BY d.doc_id"
        )
        for ordinals, metadata in rows:
            yield [int(o) for o in ordinals], metadata

    def graph_rows(self) -> GraphRows:
        with self._reader() as conn:
            return GraphRows(
                concepts=[
                    (int(a), str(b), str(c), str(d))
                    for a, b, c, d in conn.execute(
                        "SELECT concept_id, key, label, kind FROM concepts"
                    )
                ],
                mentions=[
                    (int(a), int(b), int(c), int(d))
                    for a, b, c, d in conn.execute(
                        "SELECT ordinal, concept_id, count, kind FROM mentions"
                    )
                ],
                chunks=[
                    (int(a), str(b), int(c))
                    for a, b, c in conn.execute("SELECT ordinal, doc_id, seq FROM chunks")
                ],
                links=[
                    (str(a), str(b)) for a, b in conn.execute("SELECT doc_id, target FROM links")
                ],
                titles=[
                    (str(a), str(b)) for a, b in conn.execute("SELECT doc_id, title FROM documents")
                ],
            )

    # -- whole documents (for copying an index) ------------------------------------------------

    def doc_ids(self) -> list[str]:
        """Every document id, in the order of their chunks' ordinals (documents without chunks
        last, oldest release first)."""
        rows = self._query(
            "SELECT d.doc_id FROM documents d LEFT JOIN (SELECT doc_id, MIN(ordinal) AS first "
            "FROM chunks GROUP BY doc_id) c USING (doc_id) "
            'ORDER BY c.first NULLS LAST, d.release, d.doc_id COLLATE "C"'
        )
        return [str(r[0]) for r in rows]

    def records(self, doc_ids: Sequence[str]) -> list[DocumentRecord]:
        """The stored documents among ``doc_ids`` as full records (chunks in ordinal order,
        tokens, vectors, mentions with each concept's stored label and aliases and the
        mention's own kind), in the order given; what :meth:`write` would store again."""
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return []
        with self._reader() as conn:
            docs = conn.execute(
                "SELECT doc_id, title, source, fmt, metadata, doc_hash, text FROM documents "
                "WHERE doc_id = ANY(%s)",
                (ids,),
            ).fetchall()
            links: dict[str, list[str]] = {}
            for doc_id, target in conn.execute(
                "SELECT doc_id, target FROM links WHERE doc_id = ANY(%s) "
                'ORDER BY doc_id, target COLLATE "C"',
                (ids,),
            ):
                links.setdefault(str(doc_id), []).append(str(target))
            with conn.cursor(binary=True) as cur:
                chunk_rows = cur.execute(
                    "SELECT ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
                    "heading_path, start_char, end_char, tokens, embedding, page FROM chunks "
                    "WHERE doc_id = ANY(%s) ORDER BY ordinal",
                    (ids,),
                ).fetchall()
            mention_rows = conn.execute(
                "SELECT m.ordinal, c.key, c.label, m.kind, m.count, "
                'COALESCE((SELECT array_agg(a.surface ORDER BY a.surface COLLATE "C") '
                "FROM concept_aliases a WHERE a.concept_id = c.concept_id), '{}') "
                "FROM mentions m JOIN concepts c USING (concept_id) JOIN chunks k USING (ordinal) "
                'WHERE k.doc_id = ANY(%s) ORDER BY m.ordinal, c.key COLLATE "C"',
                (ids,),
            ).fetchall()
        by_ordinal: dict[int, list[Mention]] = {}
        for ordinal, key, label, rank, count, surfaces in mention_rows:
            # the mention's own kind: a copy keeps what each chunk called the concept
            kind = CONCEPT_KINDS[int(rank)]
            concept = Concept(str(key), str(label), kind, tuple(str(s) for s in surfaces))
            by_ordinal.setdefault(int(ordinal), []).append(Mention(concept, int(count)))
        out = assemble_records(
            docs, chunk_rows, links, by_ordinal, lambda v: v.to_numpy(), lambda x: x
        )
        return [out[d] for d in ids if d in out]
