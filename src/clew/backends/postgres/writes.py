"""The write path of :class:`~clew.backends.postgres.store.PostgresStore`: write batches,
deletes, bulk loading and the deferred indexes, as functions over a connection.

What they need of the store comes in a :class:`Target` (the schema, the server for messages,
the write lock, the statement timeout, whether writes are refused, and the connection
factories). A write batch is one transaction under the index's advisory lock
(:func:`write_tx`), retried with backoff on serialization failures and deadlocks; rows go in
with binary ``COPY`` and set-based statements.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from clew.backends.postgres.schema import Conn, dimension_ddl
from clew.errors import StoreError
from clew.filters import parse_time
from clew.protocols import DocumentRecord
from clew.types import KIND_OF_RANK_SQL, KIND_RANK, KIND_SQL

log = logging.getLogger(__name__)

T = TypeVar("T")


_RETRIES = 6
"""Attempts for a write that hits a serialization failure or a deadlock."""
_LOCK_WAIT_MS = 300_000
"""How long a write waits for another writer of the same index before giving up."""
_BULK_INDEXES = ("chunks_hnsw", "chunks_bm25", "chunks_metadata")
"""Indexes over ``chunks`` that :func:`bulk_load` builds once at the end."""


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


@dataclass(frozen=True)
class Target:
    """The index a write goes to, as the store sees it at the call."""

    schema: str
    """The PostgreSQL schema holding the index."""
    where: str
    """The server and database, for messages (never the password)."""
    lock: int
    """The index's advisory write lock (:func:`~clew.backends.postgres.schema.lock_key`)."""
    statement_timeout_ms: int
    read_only_reason: str | None
    """Why writes are refused (None: the index is writable)."""
    pooled: Callable[[], AbstractContextManager[Conn]]
    """A pooled connection (never the thread's pinned snapshot)."""
    reader: Callable[[], AbstractContextManager[Conn]]
    """A connection for reading, with database errors as :class:`StoreError`."""
    scrub: Callable[[BaseException], str]
    """A database error's message without the password."""


def check_writable(target: Target) -> None:
    """Raise :class:`StoreError` unless ``target`` may be written."""
    if target.read_only_reason is not None:
        raise StoreError(
            f"index {target.schema!r} ({target.where}) is read-only ({target.read_only_reason}); "
            "nothing was written"
        )


def write_tx(target: Target, body: Callable[[Conn], T]) -> T:
    """``body`` in one transaction holding this index's write lock; retried with backoff on
    serialization failures and deadlocks; any database error becomes a StoreError."""
    for attempt in range(_RETRIES):
        try:
            with target.pooled() as conn, conn.transaction():
                conn.execute(
                    "SELECT set_config('statement_timeout', %s, true)", (str(_LOCK_WAIT_MS),)
                )
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (target.lock,))
                conn.execute(
                    "SELECT set_config('statement_timeout', %s, true)",
                    (str(target.statement_timeout_ms),),
                )
                return body(conn)
        except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
            if attempt + 1 >= _RETRIES:
                raise StoreError(
                    f"cannot write to the index {target.schema!r} ({target.where}): "
                    f"{target.scrub(exc)} (after {_RETRIES} attempts); nothing of this write "
                    "was kept; retry"
                ) from exc
            delay = min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())
            log.info("write to %s: %s; retrying in %.2f s", target.schema, exc, delay)
            time.sleep(delay)
        except StoreError:
            raise
        except pg_errors.QueryCanceled as exc:
            raise StoreError(
                f"cannot write to the index {target.schema!r} ({target.where}): a statement ran "
                f"past the timeout or another writer held the index too long "
                f"({target.scrub(exc)}); nothing of this write was kept"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot write to the index {target.schema!r} ({target.where}): "
                f"{target.scrub(exc)}; nothing of this write was kept"
            ) from exc
    raise AssertionError("unreachable")


def write(target: Target, records: Sequence[DocumentRecord]) -> int:
    """Insert or replace documents with their chunks, vectors and mentions; new release."""
    check_writable(target)
    records = list(records)
    for rec in records:
        _check_record(rec)
    return write_tx(target, lambda conn: _write(conn, target, records))


def _write(conn: Conn, target: Target, records: list[DocumentRecord]) -> int:
    release = _release(conn) + 1
    _fix_dimension(conn, target, records)
    added = removed = 0
    top = 0
    for segment in _segments(records):
        removed += _delete_docs(conn, [r.document.doc_id for r in segment], release)
        n, top_here = _insert(conn, segment, release)
        added += n
        top = max(top, top_here)
    _bump(conn, release, added, removed, top)
    return release


def _fix_dimension(conn: Conn, target: Target, records: list[DocumentRecord]) -> None:
    dims = {int(r.vectors.shape[1]) for r in records if r.chunks}
    if not dims:
        return
    if len(dims) > 1:
        raise StoreError(
            f"cannot write to the index {target.schema!r}: the batch mixes vector dimensions "
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
            f"cannot write {dim}-dimensional vectors to the index {target.schema!r} "
            f"({target.where}): it holds {current}-dimensional vectors; allowed: {current} "
            "(re-ingest into a new schema to change the embedding model); nothing was written"
        )
    try:
        ddl = dimension_ddl(dim)
    except ValueError as exc:
        raise StoreError(f"cannot write to the index {target.schema!r}: {exc}") from None
    conn.execute("DROP INDEX IF EXISTS chunks_hnsw")
    for statement in ddl:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('dim', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (str(dim),),
    )
    if _deferred(conn):  # inside a bulk load: the new HNSW index waits for the end too
        defer(conn, target.schema, ["chunks_hnsw"])


@contextmanager
def bulk_load(target: Target, *, maintenance_work_mem: str | None = "1GB") -> Iterator[None]:
    """Load many documents fast: the search indexes over ``chunks`` (HNSW, BM25, the
    metadata GIN) are dropped on entry and built once on exit, which is several times
    faster than maintaining them row by row. Meanwhile vector search still works (exactly,
    by scanning) but BM25 search does not. The dropped definitions are kept in ``meta``
    (``deferred_indexes``) in the same transaction, so an interrupted load is finished by
    :func:`restore_indexes` (a warning on open says so)."""
    check_writable(target)
    write_tx(target, lambda conn: defer(conn, target.schema, list(_BULK_INDEXES)))
    try:
        yield
    finally:
        restore_indexes(target, maintenance_work_mem=maintenance_work_mem)
        vacuum(target)


def vacuum(target: Target) -> None:
    """``VACUUM ANALYZE`` the chunk and mention tables: fresh planner statistics, and a
    visibility map that lets the graph leg read mentions from the index alone (autovacuum
    gets there too, later). Run after a bulk load; harmless any time."""
    check_writable(target)
    with target.pooled() as conn:
        conn.execute("SELECT set_config('statement_timeout', '0', false)")
        try:
            for table in ("chunks", "mentions"):
                conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
        finally:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false)",
                (str(target.statement_timeout_ms),),
            )


def deferred_indexes(target: Target) -> list[str]:
    """Names of the indexes a bulk load dropped and has not rebuilt yet."""
    with target.reader() as conn:
        return [name for name, _ in _deferred(conn)]


def restore_indexes(target: Target, *, maintenance_work_mem: str | None = "1GB") -> list[str]:
    """Build every index a bulk load deferred (each in its own transaction, without a
    statement timeout, holding the write lock); the names built."""
    check_writable(target)
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

        done = write_tx(target, build)
        if done is None:
            return built
        log.info("index %s: built %s", target.schema, done)
        built.append(done)


def _insert(conn: Conn, records: list[DocumentRecord], release: int) -> tuple[int, int]:
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
                elif KIND_RANK.get(c.kind, 0) > KIND_RANK.get(seen[1], 0):
                    concepts[c.key] = (seen[0], c.kind)
                for a in (c.label, *c.aliases):
                    if a:
                        aliases[(c.key, a)] = None
    ids = _concept_ids(conn, concepts)
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
        links = [(r.document.doc_id, t) for r in records for t in dict.fromkeys(r.document.links)]
        if links:
            with cur.copy("COPY links(doc_id, target) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["text", "text"])
                for row in links:
                    cp.write_row(row)
        mentions: list[tuple[int, int, int, int]] = []
        changes: list[tuple[int, str, int]] = []
        if n:
            with cur.copy(
                "COPY chunks(ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
                "heading_path, start_char, end_char, tokens, embedding, metadata, created_at, "
                "release, page) FROM STDIN (FORMAT BINARY)"
            ) as cp:
                cp.set_types(
                    ["int8", "text", "text", "int4", "text", "text", "int4", "jsonb", "int4",
                     "int4", "text", "vector", "jsonb", "float8", "int8", "int4"]
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
                                chunk.page,
                            )
                        )
                        changes.append((release, d.doc_id, ordinal))
                        for m in rec.mentions[i]:
                            kind = KIND_RANK.get(m.concept.kind, 0)
                            mentions.append((ordinal, ids[m.concept.key], m.count, kind))
            with cur.copy(
                "COPY changes(release, op, doc_id, ordinal) FROM STDIN (FORMAT BINARY)"
            ) as cp:
                cp.set_types(["int8", "text", "text", "int8"])
                for rel, doc_id, ordinal in changes:
                    cp.write_row((rel, "add", doc_id, ordinal))
        if mentions:
            with cur.copy(
                "COPY mentions(ordinal, concept_id, count, kind) FROM STDIN (FORMAT BINARY)"
            ) as cp:
                cp.set_types(["int8", "int8", "int4", "int2"])
                for mention in mentions:
                    cp.write_row(mention)
        if aliases:
            cur.execute(
                "INSERT INTO concept_aliases(concept_id, surface) "
                "SELECT * FROM unnest(%s::bigint[], %s::text[]) ON CONFLICT DO NOTHING",
                ([ids[k] for k, _ in aliases], [a for _, a in aliases]),
            )
    return n, (ordinals[-1] if ordinals else 0)


def _concept_ids(conn: Conn, concepts: dict[str, tuple[str, str]]) -> dict[str, int]:
    """Insert new concepts, raise the kind of known ones; concept id of every key."""
    if not concepts:
        return {}
    keys = list(concepts)
    conn.execute(
        "INSERT INTO concepts AS c (key, label, kind) "
        "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) "
        "ON CONFLICT (key) DO UPDATE SET kind = EXCLUDED.kind WHERE "
        + KIND_SQL.format("EXCLUDED.kind")
        + " > "
        + KIND_SQL.format("c.kind"),
        (keys, [concepts[k][0] for k in keys], [concepts[k][1] for k in keys]),
    )
    rows = conn.execute(
        "SELECT key, concept_id FROM concepts WHERE key = ANY(%s)", (keys,)
    ).fetchall()
    return {str(k): int(v) for k, v in rows}


def delete(target: Target, doc_ids: Sequence[str]) -> int:
    """Remove documents from the store (and so from every derived index); new release."""
    check_writable(target)
    ids = list(dict.fromkeys(doc_ids))

    def run(conn: Conn) -> int:
        release = _release(conn) + 1
        removed = _delete_docs(conn, ids, release)
        _bump(conn, release, 0, removed, 0)
        return release

    return write_tx(target, run)


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
    # the tombstones: which scopes saw something go at this release (one row per metadata)
    conn.execute(
        "INSERT INTO removed(key, metadata, release) SELECT DISTINCT ON (k) k, metadata, %s "
        "FROM (SELECT md5(metadata::text) AS k, metadata FROM documents "
        "WHERE doc_id = ANY(%s)) AS gone "
        "ON CONFLICT (key) DO UPDATE SET release = EXCLUDED.release",
        (release, doc_ids),
    )
    conn.execute("DELETE FROM documents WHERE doc_id = ANY(%s)", (doc_ids,))  # cascades
    if concept_ids:
        conn.execute(
            "DELETE FROM concepts c WHERE c.concept_id = ANY(%s) AND NOT EXISTS "
            "(SELECT 1 FROM mentions m WHERE m.concept_id = c.concept_id)",
            (concept_ids,),
        )
        # a concept is of the highest kind its live mentions have: the chunk that made a word
        # a name may be the one gone
        conn.execute(
            "UPDATE concepts c SET kind = x.kind FROM (SELECT m.concept_id, "
            + KIND_OF_RANK_SQL.format("max(m.kind)")
            + " AS kind FROM mentions m WHERE m.concept_id IN (SELECT concept_id FROM concepts "
            "WHERE concept_id = ANY(%s) AND kind <> 'phrase') GROUP BY m.concept_id) AS x "
            "WHERE c.concept_id = x.concept_id AND c.kind <> x.kind",
            (concept_ids,),
        )
    return removed


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


def defer(conn: Conn, schema: str, names: list[str]) -> None:
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
