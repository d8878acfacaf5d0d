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
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np
import numpy.typing as npt
import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from clew.backends.postgres.schema import EXTENSIONS, MIGRATIONS, MIN_VERSIONS, dimension_ddl
from clew.backends.records import assemble_records
from clew.errors import IndexNotFoundError, StoreError
from clew.filters import parse_time
from clew.protocols import ChunkRow, DocumentRecord, GraphRows, Matrix
from clew.types import Concept, Mention

log = logging.getLogger(__name__)

DEFAULT_SCHEMA = "clew"
SCHEMA_RULE = (
    "lowercase letters, digits and underscores, starting with a letter or underscore, "
    "at most 63 characters, not starting with 'pg_'"
)
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_KIND_RANK = {"phrase": 0, "entity": 1, "identifier": 2}
"""A concept's kind only ever moves up this order (identifier wins), as in SQLite."""
_KIND_SQL = "CASE {} WHEN 'identifier' THEN 2 WHEN 'entity' THEN 1 ELSE 0 END"

_RETRIES = 6
"""Attempts for a write that hits a serialization failure or a deadlock."""
_LOCK_WAIT_MS = 300_000
"""How long a write waits for another writer of the same index before giving up."""
_PAGE = 5000
"""Rows per page when iterating chunks (tokens, keys); vectors use a fifth of it."""
_EXTENSION_LOCK = int.from_bytes(hashlib.blake2b(b"clew:extensions", digest_size=8).digest(), "big")
_EXTENSION_LOCK -= 1 << 63

Conn = psycopg.Connection[Any]
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


def document_time(metadata: Mapping[str, Any]) -> float | None:
    """A document's ``created_at`` as epoch seconds, the way the filters read it (a finite
    number, or an ISO 8601 date/time; naive times are UTC), else None."""
    value = metadata.get("created_at")
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        return parse_time(value)
    return None


def _lock_key(schema: str) -> int:
    digest = hashlib.blake2b(f"clew:write:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") - (1 << 63)


def _version(text: str | None) -> tuple[int, ...]:
    out = []
    for part in (text or "").split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
    return tuple(out)


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
        self._lock = _lock_key(self.schema)
        self._local = threading.local()
        self._closed = False
        self._bootstrap(create)
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

    # -- creation and migrations --------------------------------------------------------------

    def _bootstrap(self, create: bool) -> None:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL ({self.where}): {self._scrub(exc)}; check that the "
                "server is running and the URL (host, port, database, user) is right"
            ) from None
        try:
            with conn:
                if self._version(conn) == len(MIGRATIONS):
                    return  # current: nothing to lock or change
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_EXTENSION_LOCK,))
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
                    self._migrate(conn, create)
        except StoreError:
            raise
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the index {self.schema!r} ({self.where}): {self._scrub(exc)}"
            ) from None

    def _version(self, conn: Conn) -> int | None:
        """The schema's migration version (0: schema without tables); None: no such schema."""
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s), "
            "to_regclass(format('%%I.clew_migrations', %s::text)) IS NOT NULL",
            (self.schema, self.schema),
        ).fetchone()
        assert row is not None
        if not row[0]:
            return None
        if not row[1]:
            return 0
        found = conn.execute(
            sql.SQL("SELECT COALESCE(MAX(version), 0) FROM {}.clew_migrations").format(
                sql.Identifier(self.schema)
            )
        ).fetchone()
        return int(found[0]) if found else 0

    def _migrate(self, conn: Conn, create: bool) -> None:
        version = self._version(conn)
        known = len(MIGRATIONS)
        how = (
            f"create it with PostgresStore(url, schema={self.schema!r}, create=True) "
            "(the CLI creates it on the first ingest)"
        )
        if version is None and not create:
            raise IndexNotFoundError(
                f"no clew index in schema {self.schema!r} ({self.where}); {how}"
            )
        if version == 0:
            tables = conn.execute(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm')",
                (self.schema,),
            ).fetchone()
            if tables and tables[0]:
                raise StoreError(
                    f"schema {self.schema!r} ({self.where}) holds tables but no clew index "
                    "(no clew_migrations table); choose another schema"
                )
            if not create:
                raise IndexNotFoundError(
                    f"schema {self.schema!r} ({self.where}) holds no clew index yet; {how}"
                )
        current = version or 0
        if current > known:
            raise StoreError(
                f"the index {self.schema!r} ({self.where}) is at schema version {current}, newer "
                f"than this clew knows (allowed: up to {known}); upgrade clew"
            )
        if current == known:
            return
        if self.read_only_reason is not None:
            raise StoreError(
                f"the index {self.schema!r} ({self.where}) is at schema version {current} and "
                f"needs migrating to {known}; open it once without read_only"
            )
        self._ensure_extensions(conn)
        ident = sql.Identifier(self.schema)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path = {}, public").format(ident))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS clew_migrations (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for v in range(current, known):
            conn.execute(MIGRATIONS[v])
            conn.execute("INSERT INTO clew_migrations(version) VALUES (%s)", (v + 1,))
            log.info("index %s: applied migration %d", self.schema, v + 1)
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (str(known),),
        )
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('release', '0') ON CONFLICT (key) DO NOTHING"
        )

    def _ensure_extensions(self, conn: Conn) -> None:
        rows = conn.execute(
            "SELECT name, default_version, installed_version FROM pg_available_extensions "
            "WHERE name = ANY(%s)",
            (list(EXTENSIONS),),
        ).fetchall()
        found = {str(r[0]): (r[1], r[2]) for r in rows}
        for name, where in EXTENSIONS.items():
            need = ".".join(map(str, MIN_VERSIONS.get(name, ())))
            if name not in found:
                raise StoreError(
                    f"PostgreSQL extension {name!r} is not available on the server ({self.where}); "
                    f"clew needs {where} (minimum version {need}); install it on the server, "
                    f"then run `CREATE EXTENSION {name};` or let clew create it"
                )
            default, installed = found[name]
            version = installed or default
            if _version(version) < MIN_VERSIONS.get(name, ()):
                action = f"ALTER EXTENSION {name} UPDATE;" if installed else "upgrade it"
                raise StoreError(
                    f"PostgreSQL extension {name!r} is version {version} on the server "
                    f"({self.where}); clew needs {where} (minimum version {need}): {action}"
                )
            if installed is None:
                try:
                    with conn.transaction():
                        conn.execute(
                            sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(
                                sql.Identifier(name)
                            )
                        )
                except pg_errors.InsufficientPrivilege:
                    raise StoreError(
                        f"cannot create the PostgreSQL extension {name!r} ({self.where}): "
                        f"permission denied; ask an administrator to run `CREATE EXTENSION "
                        f"{name};` in this database (clew needs {where}, minimum version {need})"
                    ) from None

    # -- read-only state ----------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def check_writable(self) -> None:
        """Raise :class:`StoreError` unless this store may be written."""
        if self.read_only_reason is not None:
            raise StoreError(
                f"index {self.schema!r} ({self.where}) is read-only ({self.read_only_reason}); "
                "nothing was written"
            )

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

    # -- writes -----------------------------------------------------------------------------

    def _write_tx(self, body: Callable[[Conn], T]) -> T:
        """``body`` in one transaction holding this index's write lock; retried with backoff on
        serialization failures and deadlocks; any database error becomes a StoreError."""
        for attempt in range(_RETRIES):
            try:
                with self._pooled() as conn, conn.transaction():
                    conn.execute(
                        "SELECT set_config('statement_timeout', %s, true)", (str(_LOCK_WAIT_MS),)
                    )
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
                    conn.execute(
                        "SELECT set_config('statement_timeout', %s, true)",
                        (str(self.statement_timeout_ms),),
                    )
                    return body(conn)
            except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
                if attempt + 1 >= _RETRIES:
                    raise StoreError(
                        f"cannot write to the index {self.schema!r} ({self.where}): "
                        f"{self._scrub(exc)} (after {_RETRIES} attempts); nothing of this write "
                        "was kept; retry"
                    ) from exc
                delay = min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())
                log.info("write to %s: %s; retrying in %.2f s", self.schema, exc, delay)
                time.sleep(delay)
            except StoreError:
                raise
            except pg_errors.QueryCanceled as exc:
                raise StoreError(
                    f"cannot write to the index {self.schema!r} ({self.where}): a statement ran "
                    f"past the timeout or another writer held the index too long "
                    f"({self._scrub(exc)}); nothing of this write was kept"
                ) from exc
            except psycopg.Error as exc:
                raise StoreError(
                    f"cannot write to the index {self.schema!r} ({self.where}): "
                    f"{self._scrub(exc)}; nothing of this write was kept"
                ) from exc
        raise AssertionError("unreachable")

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return {}
        rows = self._query("SELECT doc_id, doc_hash FROM documents WHERE doc_id = ANY(%s)", (ids,))
        return {str(d): str(h) for d, h in rows}

    def write(self, records: Sequence[DocumentRecord]) -> int:
        """Insert or replace documents with their chunks, vectors and mentions; new release."""
        self.check_writable()
        records = list(records)
        for rec in records:
            _check_record(rec)
        return self._write_tx(lambda conn: self._write(conn, records))

    def _write(self, conn: Conn, records: list[DocumentRecord]) -> int:
        release = _release(conn) + 1
        self._fix_dimension(conn, records)
        added = removed = 0
        top = 0
        for segment in _segments(records):
            removed += self._delete_docs(conn, [r.document.doc_id for r in segment], release)
            n, top_here = self._insert(conn, segment, release)
            added += n
            top = max(top, top_here)
        _bump(conn, release, added, removed, top)
        return release

    def _fix_dimension(self, conn: Conn, records: list[DocumentRecord]) -> None:
        dims = {int(r.vectors.shape[1]) for r in records if r.chunks}
        if not dims:
            return
        if len(dims) > 1:
            raise StoreError(
                f"cannot write to the index {self.schema!r}: the batch mixes vector dimensions "
                f"{sorted(dims)}; allowed: one dimension per index; nothing was written"
            )
        dim = dims.pop()
        row = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'chunks'::regclass "
            "AND attname = 'embedding'"
        ).fetchone()
        current = int(row[0]) if row else -1
        if current == dim:
            return
        if conn.execute("SELECT EXISTS (SELECT 1 FROM chunks)").fetchone() == (True,):
            raise StoreError(
                f"cannot write {dim}-dimensional vectors to the index {self.schema!r} "
                f"({self.where}): it holds {current}-dimensional vectors; allowed: {current} "
                "(re-ingest into a new schema to change the embedding model); nothing was written"
            )
        try:
            ddl = dimension_ddl(dim)
        except ValueError as exc:
            raise StoreError(f"cannot write to the index {self.schema!r}: {exc}") from None
        conn.execute("DROP INDEX IF EXISTS chunks_hnsw")
        for statement in ddl:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('dim', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (str(dim),),
        )
        if _deferred(conn):  # inside a bulk load: the new HNSW index waits for the end too
            _defer(conn, self.schema, ["chunks_hnsw"])

    # -- bulk loading -----------------------------------------------------------------------

    @contextmanager
    def bulk_load(self, *, maintenance_work_mem: str | None = "1GB") -> Iterator[None]:
        """Load many documents fast: the search indexes over ``chunks`` (HNSW, BM25, the
        metadata GIN) are dropped on entry and built once on exit, which is several times
        faster than maintaining them row by row. Meanwhile vector search still works (exactly,
        by scanning) but BM25 search does not. The dropped definitions are kept in ``meta``
        (``deferred_indexes``) in the same transaction, so an interrupted load is finished by
        :meth:`restore_indexes` (a warning on open says so)."""
        self.check_writable()
        self._write_tx(lambda conn: _defer(conn, self.schema, list(_BULK_INDEXES)))
        try:
            yield
        finally:
            self.restore_indexes(maintenance_work_mem=maintenance_work_mem)
            self.vacuum()

    def vacuum(self) -> None:
        """``VACUUM ANALYZE`` the chunk and mention tables: fresh planner statistics, and a
        visibility map that lets the graph leg read mentions from the index alone (autovacuum
        gets there too, later). Run after a bulk load; harmless any time."""
        self.check_writable()
        with self._pooled() as conn:
            conn.execute("SELECT set_config('statement_timeout', '0', false)")
            try:
                for table in ("chunks", "mentions"):
                    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
            finally:
                conn.execute(
                    "SELECT set_config('statement_timeout', %s, false)",
                    (str(self.statement_timeout_ms),),
                )

    def deferred_indexes(self) -> list[str]:
        """Names of the indexes a bulk load dropped and has not rebuilt yet."""
        with self._reader() as conn:
            return [name for name, _ in _deferred(conn)]

    def restore_indexes(self, *, maintenance_work_mem: str | None = "1GB") -> list[str]:
        """Build every index a bulk load deferred (each in its own transaction, without a
        statement timeout, holding the write lock); the names built."""
        self.check_writable()
        built: list[str] = []
        while True:

            def build(conn: Conn) -> str | None:
                pending = _deferred(conn)
                if not pending:
                    return None
                name, ddl = pending[0]
                conn.execute("SELECT set_config('statement_timeout', '0', true)")
                if maintenance_work_mem:
                    conn.execute(
                        "SELECT set_config('maintenance_work_mem', %s, true)",
                        (maintenance_work_mem,),
                    )
                conn.execute(ddl.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1))
                _set_deferred(conn, pending[1:])
                return name

            done = self._write_tx(build)
            if done is None:
                return built
            log.info("index %s: built %s", self.schema, done)
            built.append(done)

    def _insert(self, conn: Conn, records: list[DocumentRecord], release: int) -> tuple[int, int]:
        """COPY one segment's documents (distinct ids, none stored); (chunks added, top ordinal)."""
        n = sum(len(r.chunks) for r in records)
        ordinals: list[int] = []
        if n:
            ordinals = sorted(
                int(r[0])
                for r in conn.execute(
                    "SELECT nextval(pg_get_serial_sequence('chunks', 'ordinal')) "
                    "FROM generate_series(1, %s)",
                    (n,),
                )
            )
        concepts: dict[str, tuple[str, str]] = {}
        aliases: dict[tuple[str, str], None] = {}
        for rec in records:
            for chunk_mentions in rec.mentions:
                for m in chunk_mentions:
                    c = m.concept
                    seen = concepts.get(c.key)
                    if seen is None:
                        concepts[c.key] = (c.label, c.kind)
                    elif _KIND_RANK.get(c.kind, 0) > _KIND_RANK.get(seen[1], 0):
                        concepts[c.key] = (seen[0], c.kind)
                    for a in (c.label, *c.aliases):
                        if a:
                            aliases[(c.key, a)] = None
        ids = self._concept_ids(conn, concepts)
        with conn.cursor() as cur:
            with cur.copy(
                "COPY documents(doc_id, title, source, fmt, metadata, doc_hash, text, release) "
                "FROM STDIN (FORMAT BINARY)"
            ) as cp:
                cp.set_types(["text", "text", "text", "text", "jsonb", "text", "text", "int8"])
                for rec in records:
                    d = rec.document
                    cp.write_row(
                        (
                            d.doc_id,
                            d.title,
                            d.source,
                            d.fmt,
                            d.metadata,
                            rec.doc_hash,
                            d.text,
                            release,
                        )
                    )
            links = [
                (r.document.doc_id, t) for r in records for t in dict.fromkeys(r.document.links)
            ]
            if links:
                with cur.copy("COPY links(doc_id, target) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.set_types(["text", "text"])
                    for row in links:
                        cp.write_row(row)
            mentions: list[tuple[int, int, int]] = []
            changes: list[tuple[int, str, int]] = []
            if n:
                with cur.copy(
                    "COPY chunks(ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
                    "heading_path, start_char, end_char, tokens, embedding, metadata, created_at, "
                    "release) FROM STDIN (FORMAT BINARY)"
                ) as cp:
                    cp.set_types(
                        ["int8", "text", "text", "int4", "text", "text", "int4", "jsonb", "int4",
                         "int4", "text", "vector", "jsonb", "float8", "int8"]
                    )  # fmt: skip
                    at = 0
                    for rec in records:
                        d = rec.document
                        when = document_time(d.metadata)
                        vectors = np.ascontiguousarray(rec.vectors, dtype=np.float32)
                        for i, chunk in enumerate(rec.chunks):
                            ordinal = ordinals[at]
                            at += 1
                            cp.write_row(
                                (
                                    ordinal,
                                    chunk.chunk_id,
                                    chunk.doc_id,
                                    chunk.seq,
                                    chunk.text,
                                    chunk.content_hash,
                                    chunk.token_count,
                                    list(chunk.heading_path),
                                    chunk.start,
                                    chunk.end,
                                    " ".join(rec.tokens[i]),
                                    vectors[i],
                                    d.metadata,
                                    when,
                                    release,
                                )
                            )
                            changes.append((release, d.doc_id, ordinal))
                            for m in rec.mentions[i]:
                                mentions.append((ordinal, ids[m.concept.key], m.count))
                with cur.copy(
                    "COPY changes(release, op, doc_id, ordinal) FROM STDIN (FORMAT BINARY)"
                ) as cp:
                    cp.set_types(["int8", "text", "text", "int8"])
                    for rel, doc_id, ordinal in changes:
                        cp.write_row((rel, "add", doc_id, ordinal))
            if mentions:
                with cur.copy(
                    "COPY mentions(ordinal, concept_id, count) FROM STDIN (FORMAT BINARY)"
                ) as cp:
                    cp.set_types(["int8", "int8", "int4"])
                    for mention in mentions:
                        cp.write_row(mention)
            if aliases:
                cur.execute(
                    "INSERT INTO concept_aliases(concept_id, surface) "
                    "SELECT * FROM unnest(%s::bigint[], %s::text[]) ON CONFLICT DO NOTHING",
                    ([ids[k] for k, _ in aliases], [a for _, a in aliases]),
                )
        return n, (ordinals[-1] if ordinals else 0)

    @staticmethod
    def _concept_ids(conn: Conn, concepts: dict[str, tuple[str, str]]) -> dict[str, int]:
        """Insert new concepts, raise the kind of known ones; concept id of every key."""
        if not concepts:
            return {}
        keys = list(concepts)
        conn.execute(
            "INSERT INTO concepts AS c (key, label, kind) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) "
            "ON CONFLICT (key) DO UPDATE SET kind = EXCLUDED.kind WHERE "
            + _KIND_SQL.format("EXCLUDED.kind")
            + " > "
            + _KIND_SQL.format("c.kind"),
            (keys, [concepts[k][0] for k in keys], [concepts[k][1] for k in keys]),
        )
        rows = conn.execute(
            "SELECT key, concept_id FROM concepts WHERE key = ANY(%s)", (keys,)
        ).fetchall()
        return {str(k): int(v) for k, v in rows}

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Remove documents from the store (and so from every derived index); new release."""
        self.check_writable()
        ids = list(dict.fromkeys(doc_ids))

        def run(conn: Conn) -> int:
            release = _release(conn) + 1
            removed = self._delete_docs(conn, ids, release)
            _bump(conn, release, 0, removed, 0)
            return release

        return self._write_tx(run)

    @staticmethod
    def _delete_docs(conn: Conn, doc_ids: list[str], release: int) -> int:
        """Delete stored documents among ``doc_ids`` with their chunks, mentions and links, log
        the removed ordinals, drop concepts no chunk mentions any more; chunks removed."""
        if not doc_ids:
            return 0
        cur = conn.execute(
            "INSERT INTO changes(release, op, doc_id, ordinal) SELECT %s, 'delete', doc_id, "
            "ordinal FROM chunks WHERE doc_id = ANY(%s) ORDER BY ordinal",
            (release, doc_ids),
        )
        removed = max(cur.rowcount, 0)
        concept_ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT DISTINCT m.concept_id FROM mentions m JOIN chunks c USING (ordinal) "
                "WHERE c.doc_id = ANY(%s)",
                (doc_ids,),
            )
        ]
        conn.execute("DELETE FROM documents WHERE doc_id = ANY(%s)", (doc_ids,))  # cascades
        if concept_ids:
            conn.execute(
                "DELETE FROM concepts c WHERE c.concept_id = ANY(%s) AND NOT EXISTS "
                "(SELECT 1 FROM mentions m WHERE m.concept_id = c.concept_id)",
                (concept_ids,),
            )
        return removed

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
            "c.heading_path, d.metadata, c.token_count FROM chunks c JOIN documents d "
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
                    (int(a), int(b), int(c))
                    for a, b, c in conn.execute("SELECT ordinal, concept_id, count FROM mentions")
                ],
                chunks=[
                    (int(a), str(b), int(c))
                    for a, b, c in conn.execute("SELECT ordinal, doc_id, seq FROM chunks")
                ],
                links=[
                    (str(a), str(b)) for a, b in conn.execute("SELECT doc_id, target FROM links")
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
        tokens, vectors, mentions with each concept's stored label, kind and aliases), in the
        order given; what :meth:`write` would store again."""
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
                    "heading_path, start_char, end_char, tokens, embedding FROM chunks "
                    "WHERE doc_id = ANY(%s) ORDER BY ordinal",
                    (ids,),
                ).fetchall()
            mention_rows = conn.execute(
                "SELECT m.ordinal, c.key, c.label, c.kind, m.count, "
                'COALESCE((SELECT array_agg(a.surface ORDER BY a.surface COLLATE "C") '
                "FROM concept_aliases a WHERE a.concept_id = c.concept_id), '{}') "
                "FROM mentions m JOIN concepts c USING (concept_id) JOIN chunks k USING (ordinal) "
                'WHERE k.doc_id = ANY(%s) ORDER BY m.ordinal, c.key COLLATE "C"',
                (ids,),
            ).fetchall()
        by_ordinal: dict[int, list[Mention]] = {}
        for ordinal, key, label, kind, count, surfaces in mention_rows:
            concept = Concept(str(key), str(label), kind, tuple(str(s) for s in surfaces))
            by_ordinal.setdefault(int(ordinal), []).append(Mention(concept, int(count)))
        out = assemble_records(
            docs, chunk_rows, links, by_ordinal, lambda v: v.to_numpy(), lambda x: x
        )
        return [out[d] for d in ids if d in out]


_BULK_INDEXES = ("chunks_hnsw", "chunks_bm25", "chunks_metadata")
"""Indexes over ``chunks`` that :meth:`PostgresStore.bulk_load` builds once at the end."""


def _deferred(conn: Conn) -> list[tuple[str, str]]:
    row = conn.execute("SELECT value FROM meta WHERE key = 'deferred_indexes'").fetchone()
    return [(str(n), str(d)) for n, d in json.loads(row[0])] if row else []


def _set_deferred(conn: Conn, pending: list[tuple[str, str]]) -> None:
    if pending:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('deferred_indexes', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (json.dumps(pending),),
        )
    else:
        conn.execute("DELETE FROM meta WHERE key = 'deferred_indexes'")


def _defer(conn: Conn, schema: str, names: list[str]) -> None:
    """Drop these indexes of ``schema`` (those that exist), remembering their definitions."""
    pending = _deferred(conn)
    known = {n for n, _ in pending}
    for name, ddl in conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = ANY(%s)",
        (schema, names),
    ).fetchall():
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        if name not in known:
            pending.append((str(name), str(ddl)))
    _set_deferred(conn, pending)


def _release(conn: Conn) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'release'").fetchone()
    return int(row[0]) if row else 0


def _bump(conn: Conn, release: int, added: int, removed: int, top: int) -> None:
    conn.execute(
        "INSERT INTO releases(release, created_at, added, removed) VALUES (%s, %s, %s, %s)",
        (release, time.time(), added, removed),
    )
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('release', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (str(release),),
    )
    if top:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('max_ordinal', %s) ON CONFLICT (key) DO UPDATE "
            "SET value = GREATEST(meta.value::bigint, EXCLUDED.value::bigint)::text",
            (str(top),),
        )


def _segments(records: list[DocumentRecord]) -> Iterator[list[DocumentRecord]]:
    """Runs of records with distinct doc ids, in order: a document written twice in one batch is
    replaced by its later copy, as if written one after the other."""
    segment: list[DocumentRecord] = []
    seen: set[str] = set()
    for rec in records:
        if rec.document.doc_id in seen:
            yield segment
            segment, seen = [], set()
        segment.append(rec)
        seen.add(rec.document.doc_id)
    if segment:
        yield segment


def _check_record(rec: DocumentRecord) -> None:
    n = len(rec.chunks)
    vectors = np.asarray(rec.vectors)
    if n and (vectors.ndim != 2 or vectors.shape[0] != n):
        raise StoreError(
            f"record {rec.document.doc_id!r} has {n} chunks but vectors of shape "
            f"{tuple(vectors.shape)}; allowed: ({n}, dim); nothing was written"
        )
    if len(rec.tokens) != n or len(rec.mentions) != n:
        raise StoreError(
            f"record {rec.document.doc_id!r} has {n} chunks but {len(rec.tokens)} token lists "
            f"and {len(rec.mentions)} mention lists; allowed: one per chunk; nothing was written"
        )
