"""copy_index: SQLite → PostgreSQL → SQLite keeps every document, chunk, token, vector, mention
and link, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clew.backends.copy import copy_index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.postgres.store import PostgresStore
from clew.errors import StoreError
from clew.protocols import DocumentRecord
from clew.testing.conformance import make_record
from clew.types import Concept, Mention

AnyStore = SQLiteStore | PostgresStore


def _records() -> list[DocumentRecord]:
    err = Concept("err-4012", "ERR-4012", "identifier", ("ERR-4012", "err4012"))
    pool = Concept("pgbouncer", "PgBouncer", "entity", ("PgBouncer", "pgbouncer"))
    phrase = Concept("retry storm", "retry storm", "phrase")
    out = []
    for i in range(7):
        rec = make_record(
            f"doc-{i}",
            [f"para {i} ERR-4012 pool", f"second {i} retry storm", f"third {i} ünïcode ✓"],
            metadata={"audience": "sre" if i % 2 else "public", "n": i, "tags": ["a", str(i)]},
            links=[f"doc-{(i + 1) % 7}", "https://example.com/x"],
            dim=16,
            seed=i,
        )
        mentions = (
            (Mention(err, 2), Mention(pool, 1)),
            (Mention(phrase, 1),) if i % 3 else (),
            (),
        )
        out.append(
            DocumentRecord(
                rec.document, rec.doc_hash, rec.chunks, rec.tokens, rec.vectors, mentions
            )
        )
    empty = make_record("empty", ["x"], dim=16)
    out.append(
        DocumentRecord(
            empty.document, "hash-empty", (), (), np.zeros((0, 16), dtype=np.float32), ()
        )
    )
    return out


def _snapshot(store: AnyStore) -> dict[str, Any]:
    """Everything a query can see, independent of ordinal values and concept ids."""
    live = [int(o) for o in store.live_ordinals()]
    rows = store.fetch(live)
    chunk_of = {o: rows[o].chunk_id for o in live}
    tokens = dict(store.iter_tokens(0))
    vectors = dict(store.iter_vectors(0))
    g = store.graph_rows()
    concepts = {cid: (key, label, kind) for cid, key, label, kind in g.concepts}
    docs = {}
    for doc_id in sorted({r.doc_id for r in rows.values()} | {"empty"}):
        found = store.document(doc_id)
        assert found is not None, doc_id
        doc, chunks = found
        doc.pop("release")
        docs[doc_id] = (doc, [c[1:] for c in chunks])
    return {
        "order": [chunk_of[o] for o in live],
        "rows": [
            (r.chunk_id, r.doc_id, r.title, r.text, r.content_hash, r.heading_path, r.metadata)
            for r in (rows[o] for o in live)
        ],
        "tokens": [tokens[o] for o in live],
        "vectors": np.stack([vectors[o] for o in live]),
        # with each mention's own kind: a copy keeps what every chunk called the concept
        "mentions": sorted((chunk_of[o], concepts[c], *rest) for o, c, *rest in g.mentions),
        "concepts": sorted(concepts.values()),
        "aliases": store.concept_aliases(),
        "links": sorted(g.links),
        "chunks": sorted((chunk_of[o], d, s) for o, d, s in g.chunks),
        "docs": docs,
        "hashes": store.doc_hashes([*docs, "empty"]),
        "kinds": store.concept_kinds(["err-4012", "pgbouncer", "retry storm", "zz"]),
        "counts": store.counts(),
        "embedder": store.get_meta("embedder"),
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key == "vectors":
            assert a[key].shape == b[key].shape and np.allclose(a[key], b[key], atol=1e-7)
        else:
            assert a[key] == b[key], key


def test_round_trip_sqlite_postgres_sqlite(tmp_path: Path, pg_url: str, pg_schema: str) -> None:
    src = SQLiteStore(tmp_path / "src", create=True)
    recs = _records()
    src.write(recs[:3])
    src.write(recs[3:])
    src.delete(["doc-1"])
    src.write([recs[1]])  # doc-1 again, now after the others
    src.set_meta({"embedder": "test-model", "dim": "16"})
    want = _snapshot(src)
    assert want["order"][-3:] == ["doc-1#0", "doc-1#1", "doc-1#2"]
    assert want["counts"]["documents"] == 8 and want["counts"]["links"] == 14

    mid = PostgresStore(pg_url, schema=pg_schema, create=True)
    back = SQLiteStore(tmp_path / "back", create=True)
    try:
        seen: list[tuple[int, int]] = []
        report = copy_index(src, mid, batch=3, progress=lambda d, t: seen.append((d, t)))
        assert report["documents"] == 8 and report["skipped"] == 0
        assert report["chunks"] == 21 and report["links"] == 14 and report["releases"] == 3
        assert report["mentions"] == want["counts"]["mentions"] and report["matches"]
        assert seen == [(3, 8), (6, 8), (8, 8)]
        _same(_snapshot(mid), want)
        assert mid.get_meta("dim") == "16" and mid.release() == 3

        report2 = copy_index(mid, back, batch=500)
        assert report2["documents"] == 8 and report2["matches"] and report2["releases"] == 1
        _same(_snapshot(back), want)

        # a second run finds everything there already (an interrupted copy resumes)
        again = copy_index(src, mid)
        assert again["documents"] == 0 and again["skipped"] == 8 and again["releases"] == 0
        assert mid.release() == 3
    finally:
        mid.close()
        back.close()
        src.close()


def test_copy_errors(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "s", create=True)
    d = SQLiteStore(tmp_path / "d", create=True)
    try:
        with pytest.raises(StoreError, match="batch=0"):
            copy_index(s, d, batch=0)
        with pytest.raises(StoreError, match="onto itself"):
            copy_index(s, s)
        report = copy_index(s, d)
        assert report["documents"] == 0 and report["matches"]
    finally:
        s.close()
        d.close()
