"""Copy a clew index from one store to another: SQLite → PostgreSQL, PostgreSQL → SQLite, or
between two of the same kind.

Every document is copied with its chunks (texts, offsets, headings, token counts, hashes), the
analyzer's tokens, the vectors, the mentions (each concept with its stored label, kind and
surface forms) and its links, through the destination's ordinary :meth:`write`, so the
destination answers the same queries. Doc ids and chunk ids are kept; documents are written in the
order of their chunks' ordinals, so chunk ordinals keep their relative order (their values are
the destination's own). Ingest settings in ``meta`` (embedder, dimension, analyzer, …) are
copied too; the release counter is not (each batch is one release of the destination).

The source is read in one consistent snapshot (``src.reading()``). A document the destination
already holds with the same ``doc_hash`` is skipped, so an interrupted copy can be run again
and carries on where it stopped.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from clew.backends.embedded.store import SQLiteStore
from clew.backends.postgres.store import PostgresStore
from clew.backends.records import assemble_records
from clew.errors import StoreError
from clew.protocols import DocumentRecord
from clew.types import CONCEPT_KINDS, Concept, Mention

AnyStore = SQLiteStore | PostgresStore

META_SKIP = frozenset({"release", "schema_version", "max_ordinal"})
"""Meta keys that belong to one store and are never copied."""


def copy_index(
    src: AnyStore,
    dst: AnyStore,
    *,
    batch: int = 500,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Copy every document of ``src`` into ``dst``, ``batch`` documents per write (release).

    ``progress(done, total)`` is called after each batch with documents handled so far.
    Returns counts: ``documents`` written, ``skipped`` (already there with the same hash),
    ``chunks``, ``mentions``, ``links``, ``releases`` (writes made), ``seconds``, and the
    ``source`` and ``destination`` table counts afterwards (``matches``: whether they agree).
    """
    if not isinstance(batch, int) or batch < 1:
        raise StoreError(f"batch={batch!r} is invalid; allowed: an integer >= 1")
    if src is dst:
        raise StoreError("cannot copy an index onto itself; allowed: two different stores")
    dst.check_writable()
    started = time.monotonic()
    report: dict[str, Any] = {
        "documents": 0,
        "skipped": 0,
        "chunks": 0,
        "mentions": 0,
        "links": 0,
        "releases": 0,
    }
    with src.reading():
        meta = {k: v for k, v in _meta(src).items() if k not in META_SKIP}
        ids = _doc_ids(src)
        total = len(ids)
        for start in range(0, total, batch):
            part = ids[start : start + batch]
            records = _records(src, part)
            have = dst.doc_hashes(part)
            todo = [r for r in records if have.get(r.document.doc_id) != r.doc_hash]
            report["skipped"] += len(records) - len(todo)
            if todo:
                dst.write(todo)
                report["releases"] += 1
                report["documents"] += len(todo)
                report["chunks"] += sum(len(r.chunks) for r in todo)
                report["mentions"] += sum(len(m) for r in todo for m in r.mentions)
                report["links"] += sum(len(set(r.document.links)) for r in todo)
            if progress is not None:
                progress(min(start + batch, total), total)
        source = src.counts()
    if meta:
        dst.set_meta(meta)
    destination = dst.counts()
    report["source"] = source
    report["destination"] = destination
    report["matches"] = source == destination
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


# -- reading a store ------------------------------------------------------------------------------


def _meta(store: AnyStore) -> dict[str, str]:
    if isinstance(store, PostgresStore):
        return store.meta_items()
    rows = store._conn().execute("SELECT key, value FROM meta").fetchall()
    return {str(k): str(v) for k, v in rows}


def _doc_ids(store: AnyStore) -> list[str]:
    """Every document id in the order of its first chunk's ordinal (chunkless ones last)."""
    if isinstance(store, PostgresStore):
        return store.doc_ids()
    rows = (
        store._conn()
        .execute(
            "SELECT d.doc_id FROM documents d LEFT JOIN (SELECT doc_id, MIN(ordinal) AS first "
            "FROM chunks GROUP BY doc_id) c USING (doc_id) "
            "ORDER BY c.first IS NULL, c.first, d.release, d.doc_id"
        )
        .fetchall()
    )
    return [str(r[0]) for r in rows]


def _records(store: AnyStore, doc_ids: Sequence[str]) -> list[DocumentRecord]:
    if isinstance(store, PostgresStore):
        return store.records(doc_ids)
    return _sqlite_records(
        store._conn(),
        list(dict.fromkeys(doc_ids)),
        store._page_column("chunks"),
        store._mention_kind("m"),
    )


def _in(column: str, n: int) -> str:
    return f"{column} IN ({','.join('?' * n)})"


def _sqlite_records(
    conn: sqlite3.Connection, ids: list[str], page: str = "page", kind: str = "m.kind"
) -> list[DocumentRecord]:
    """The documents among ``ids`` as full records, read with SQL (SQLiteStore has no such
    read), in the order given."""
    out: dict[str, DocumentRecord] = {}
    for start in range(0, len(ids), 400):
        part = ids[start : start + 400]
        docs = conn.execute(
            "SELECT doc_id, title, source, fmt, metadata, doc_hash, text FROM documents WHERE "
            + _in("doc_id", len(part)),
            part,
        ).fetchall()
        links: dict[str, list[str]] = {}
        for doc_id, target in conn.execute(
            "SELECT doc_id, target FROM links WHERE "
            + _in("doc_id", len(part))
            + " ORDER BY doc_id, target",
            part,
        ):
            links.setdefault(str(doc_id), []).append(str(target))
        chunk_rows = conn.execute(
            "SELECT ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
            f"heading_path, start_char, end_char, tokens, vector, {page} FROM chunks WHERE "
            + _in("doc_id", len(part))
            + " ORDER BY ordinal",
            part,
        ).fetchall()
        mention_rows = conn.execute(
            f"SELECT m.ordinal, c.concept_id, c.key, c.label, {kind}, m.count FROM mentions m "
            "JOIN concepts c USING (concept_id) JOIN chunks k ON k.ordinal = m.ordinal WHERE "
            + _in("k.doc_id", len(part))
            + " ORDER BY m.ordinal, c.key",
            part,
        ).fetchall()
        concept_ids = sorted({int(r[1]) for r in mention_rows})
        surfaces: dict[int, list[str]] = {}
        for cstart in range(0, len(concept_ids), 400):
            cpart = concept_ids[cstart : cstart + 400]
            for cid, surface in conn.execute(
                "SELECT concept_id, surface FROM concept_aliases WHERE "
                + _in("concept_id", len(cpart))
                + " ORDER BY concept_id, surface",
                cpart,
            ):
                surfaces.setdefault(int(cid), []).append(str(surface))
        by_ordinal: dict[int, list[Mention]] = {}
        for ordinal, cid, key, label, rank, count in mention_rows:
            # the mention's own kind: a copy keeps what each chunk called the concept
            concept = Concept(
                str(key), str(label), CONCEPT_KINDS[int(rank)], tuple(surfaces.get(int(cid), ()))
            )
            by_ordinal.setdefault(int(ordinal), []).append(Mention(concept, int(count)))
        out.update(
            assemble_records(
                docs,
                chunk_rows,
                links,
                by_ordinal,
                lambda blob: np.frombuffer(blob, dtype=np.float32),
                json.loads,
            )
        )
    return [out[d] for d in ids if d in out]
