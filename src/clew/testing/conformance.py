"""Conformance suites every backend must pass.

Each ``check_*`` function takes a factory for a fresh, empty backend and raises
``AssertionError`` with a message on the first violation. The store, BM25 and vector checks run
in ``tests/integration/test_conformance.py`` (embedded) and ``tests/postgres/`` (PostgreSQL); the
Snapshot suite every backend's :class:`~clew.protocols.Snapshot` must pass is
:mod:`clew.testing.snapshot_conformance`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from clew.ingest.analyze import analyze
from clew.ingest.chunk import content_hash
from clew.protocols import DocumentRecord, Store
from clew.types import Chunk, Concept, Document, Mention

if TYPE_CHECKING:
    pass


def make_record(
    doc_id: str,
    paragraphs: Sequence[str],
    *,
    metadata: dict[str, Any] | None = None,
    links: Sequence[str] = (),
    dim: int = 8,
    seed: int = 0,
) -> DocumentRecord:
    """A small, fully formed record: one chunk per paragraph, identifiers as mentions."""
    rng = np.random.default_rng(seed)
    chunks = []
    pos = 0
    text = "\n\n".join(paragraphs)
    for i, p in enumerate(paragraphs):
        start = text.index(p, pos)
        chunks.append(
            Chunk(
                chunk_id=f"{doc_id}#{i}",
                doc_id=doc_id,
                seq=i,
                text=p,
                content_hash=content_hash(p),
                token_count=len(p.split()),
                start=start,
                end=start + len(p),
            )
        )
        pos = start + len(p)
    vectors = rng.normal(size=(len(chunks), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    mentions = tuple(
        tuple(
            Mention(Concept(w.lower(), w, "identifier"), n)
            for w, n in sorted(Counter(x for x in p.split() if "-" in x).items())
        )
        for p in paragraphs
    )
    return DocumentRecord(
        document=Document(
            doc_id=doc_id,
            title=doc_id,
            text=text,
            source=doc_id,
            metadata=metadata or {},
            links=tuple(links),
        ),
        doc_hash=f"hash-{doc_id}-{seed}",
        chunks=tuple(chunks),
        tokens=tuple(tuple(analyze(p)) for p in paragraphs),
        vectors=vectors,
        mentions=mentions,
    )


def check_store(make_store: Callable[[], Store]) -> None:
    """Writes, reads, updates, deletes and failed writes behave as the protocol says."""
    store = make_store()
    assert store.release() == 0, "a new store starts at release 0"
    a = make_record("a", ["alpha ERR-1 one", "alpha two"], metadata={"audience": "public"})
    b = make_record("b", ["beta ERR-1 three"], metadata={"audience": "sre"}, links=["a"])
    r1 = store.write([a, b])
    assert r1 == 1 and store.release() == 1, "each write is one new release"
    assert store.doc_hashes(["a", "b", "zz"]) == {"a": a.doc_hash, "b": b.doc_hash}
    assert store.has_document("a") and not store.has_document("zz")
    assert store.counts()["documents"] == 2 and store.counts()["chunks"] == 3
    store.set_meta({"embedder": "x"})
    assert store.get_meta("embedder") == "x" and store.release() == 1, "meta is not a release"
    live = list(store.live_ordinals())
    assert len(live) == 3 and live == sorted(live), "ordinals are listed ascending"
    toks = dict(store.iter_tokens(0))
    assert sorted(toks.values()) == sorted(a.tokens + b.tokens), "tokens round-trip"
    vecs = dict(store.iter_vectors(0))
    stored = np.stack([vecs[o] for o in live])
    expected = np.concatenate([a.vectors, b.vectors])
    assert np.allclose(np.sort(stored, axis=0), np.sort(expected, axis=0)), "vectors round-trip"
    keys = dict(store.chunk_keys(0))
    assert sorted(keys) == live and {k[0] for k in keys.values()} == {"a#0", "a#1", "b#0"}
    assert dict(store.chunk_keys(live[0])) == {o: keys[o] for o in live[1:]}
    rows = store.fetch(live)
    assert {r.chunk_id for r in rows.values()} == {"a#0", "a#1", "b#0"}
    assert all(r.metadata == {"audience": "public"} for r in rows.values() if r.doc_id == "a")
    md = {tuple(sorted(o)): m for o, m in store.metadata_rows()}
    assert len(md) == 2 and sum(len(k) for k in md) == 3, "metadata rows cover every chunk"
    g = store.graph_rows()
    concept_keys = {c[1] for c in g.concepts}
    assert concept_keys == {"err-1"}, f"concepts are shared across documents: {concept_keys}"
    assert len(g.mentions) == 2 and ("b", "a") in set(g.links)
    assert sorted(g.titles) == [("a", "a"), ("b", "b")], "each document's title, for title links"

    # update: a's chunks are replaced, never duplicated; ordinals are not reused
    a2 = make_record("a", ["alpha changed"], metadata={"audience": "public"}, seed=1)
    r2 = store.write([a2])
    assert r2 == 2
    live2 = list(store.live_ordinals())
    assert len(live2) == 2 and max(live2) > max(live), "new chunks get new ordinals"
    assert not set(live2) & (set(live) - {o for o, r in rows.items() if r.doc_id == "b"})
    assert store.max_ordinal() >= max(live2)
    after = dict(store.iter_tokens(max(live)))
    assert list(after.values()) == [a2.tokens[0]], "iter_tokens(after) yields only newer chunks"

    # delete: chunks, mentions and orphaned concepts go; other documents stay
    r3 = store.delete(["b"])
    assert r3 == 3 and len(store.live_ordinals()) == 1
    assert store.graph_rows().concepts == [] or all(
        c[1] != "err-1" for c in store.graph_rows().concepts
    ), "orphan concepts are removed"
    assert store.doc_hashes(["b"]) == {}

    # a failed write changes nothing
    bad = make_record("c", ["gamma"], seed=2)
    broken = DocumentRecord(
        bad.document,
        bad.doc_hash,
        bad.chunks * 2,
        bad.tokens * 2,
        np.concatenate([bad.vectors, bad.vectors]),
        bad.mentions * 2,
    )
    try:
        store.write([make_record("d", ["delta"]), broken])
    except Exception:
        pass
    else:
        raise AssertionError("a batch with duplicate chunk ids must fail")
    assert store.release() == 3, "a failed write must not bump the release"
    assert store.doc_hashes(["c", "d"]) == {}, "a failed write must leave nothing behind"


def check_chunk_pages(make_store: Callable[[], Store]) -> None:
    """A chunk's page (a PDF's) is stored and fetched with it (a chunk without one reads None),
    and so is its document's source."""
    store = make_store()
    paged = make_record("manual.pdf", ["page one ERR-1", "page two", "still two"])
    paged = replace(
        paged,
        chunks=tuple(replace(c, page=p) for c, p in zip(paged.chunks, (1, 2, 2), strict=True)),
    )
    store.write([paged, make_record("plain.md", ["no pages here"])])
    rows = store.fetch(list(range(1, 1000)))
    mine = ("manual.pdf", "plain.md")
    by_chunk = {r.chunk_id: r.page for r in rows.values() if r.doc_id in mine}
    assert by_chunk == {
        "manual.pdf#0": 1,
        "manual.pdf#1": 2,
        "manual.pdf#2": 2,
        "plain.md#0": None,
    }, by_chunk
    assert {r.source for r in rows.values() if r.doc_id in mine} == set(mine), "its source"


def check_concept_kinds(make_store: Callable[[], Store]) -> None:
    """Each mention keeps the kind its chunk's extraction gave the concept (``graph_rows``); a
    concept is of the highest kind its live mentions have: a write raises it, and a delete or a
    replacement that takes away the mention that made it a name lowers it again."""
    store = make_store()

    def record(doc_id: str, kind: str) -> DocumentRecord:
        rec = make_record(doc_id, [f"{doc_id} restarted pgbouncer"])
        concept = Concept("pgbouncer", "pgbouncer" if kind == "phrase" else "PgBouncer", kind)  # type: ignore[arg-type]
        return replace(rec, mentions=((Mention(concept, 1),),))

    def kinds() -> dict[int, int]:
        rows = store.graph_rows()
        (cid,) = [c[0] for c in rows.concepts if c[1] == "pgbouncer"]
        return {int(m[0]): int(m[3]) for m in rows.mentions if m[1] == cid and len(m) > 3}

    store.write([record("plain", "phrase")])
    assert store.concept_kinds(["pgbouncer"]) == {"pgbouncer": "phrase"}
    store.write([record("named", "identifier")])
    assert store.concept_kinds(["pgbouncer"]) == {"pgbouncer": "identifier"}, "raised"
    assert sorted(kinds().values()) == [0, 2], f"one phrase and one identifier mention: {kinds()}"
    store.write([record("named", "entity")])  # replaced: the identifier mention is gone
    assert store.concept_kinds(["pgbouncer"]) == {"pgbouncer": "entity"}, "lowered by a replace"
    store.delete(["named"])
    assert store.concept_kinds(["pgbouncer"]) == {"pgbouncer": "phrase"}, "lowered by a delete"
    assert list(kinds().values()) == [0], kinds()
    store.delete(["plain"])
    assert store.concept_kinds(["pgbouncer"]) == {}, "no mention left: no concept"


def check_document_listing(make_store: Callable[[], Store]) -> None:
    """``documents()``: every document once, in bytewise id order, with its chunk count, the
    release that wrote it and its metadata; a scope lists only what it lets through (a field a
    document lacks matches nothing); ``after``/``limit`` page through it without gaps."""
    from clew.filters import parse_filter

    store = make_store()
    assert store.documents() == [], "a new store lists no documents"
    ids = ["b", "a", "Z", "a/x", "é", "a-1"]
    metas: list[dict[str, Any]] = [
        {"tenant": "t1"},
        {"tenant": "t2", "audience": ["public", "sre"]},
        {"tenant": "t1", "n": 3},
        {},
        {"tenant": "t1"},
        {"audience": "public"},
    ]
    r1 = store.write(
        [
            make_record(d, ["one ERR-1", "two"][: 1 + i % 2], metadata=m)
            for i, (d, m) in enumerate(zip(ids[:3], metas[:3], strict=True))
        ]
    )
    r2 = store.write(
        [make_record(d, ["three"], metadata=m) for d, m in zip(ids[3:], metas[3:], strict=True)]
    )
    listed = store.documents()
    expected = sorted(ids, key=lambda s: s.encode("utf-8"))
    assert [d.doc_id for d in listed] == expected, f"bytewise id order: {listed}"
    by_id = {d.doc_id: d for d in listed}
    assert by_id["b"].chunks == 1 and by_id["a"].chunks == 2 and by_id["a/x"].chunks == 1
    assert by_id["a"].release == r1 and by_id["é"].release == r2, "the release that wrote it"
    assert by_id["a"].metadata == metas[1] and by_id["a/x"].metadata == {}
    assert by_id["b"].title == "b" and by_id["b"].source == "b"

    def ids_of(scope: Any, **kw: Any) -> list[str]:
        return [d.doc_id for d in store.documents(parse_filter(scope), **kw)]

    assert ids_of({"tenant": "t1"}) == ["Z", "b", "é"], "a scope lists only its documents"
    assert ids_of({"audience": "public"}) == ["a", "a-1"], "a list value matches an element"
    assert ids_of({"not": {"tenant": "t1"}}) == ["a", "a-1", "a/x"], "not: a missing field"
    assert ids_of({"nobody": "x"}) == [], "a field no document has matches nothing"
    assert ids_of({"tenant": "t1"}, limit=2) == ["Z", "b"]
    assert ids_of({"tenant": "t1"}, after="b") == ["é"], "after is exclusive"
    assert ids_of(None, after="zz") == ["é"], "after needs no existing id"
    pages: list[str] = []
    after: str | None = None
    while True:
        page = store.documents(after=after, limit=2)
        pages += [d.doc_id for d in page]
        if len(page) < 2:
            break
        after = page[-1].doc_id
    assert pages == expected, "paging with after/limit lists each document once"

    store.write([make_record("b", ["b changed", "and more", "and more still"], seed=3)])
    store.delete(["a"])
    listed = store.documents()
    assert "a" not in {d.doc_id for d in listed}, "a deleted document is not listed"
    b = next(d for d in listed if d.doc_id == "b")
    assert b.chunks == 3 and b.release == store.release() - 1 and b.metadata == {}


def check_lexical_search(
    search: Callable[[Sequence[str], Any, int], list[Any]],
    docs: dict[int, Sequence[str]],
    k1: float = 0.9,
    b: float = 0.4,
) -> None:
    """BM25 scores and order match a brute-force reference; the mask is applied inside."""
    size = max(docs) + 1
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    df = Counter(t for toks in docs.values() for t in set(toks))
    vocab = sorted(df)
    for query in ([vocab[0]], vocab[:3], [vocab[-1], vocab[len(vocab) // 2]]):
        expected: dict[int, float] = {}
        for o, toks in docs.items():
            tf = Counter(toks)
            s = 0.0
            for t in query:
                if tf[t]:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(toks) / avgdl))
            if s > 0:
                expected[o] = s
        allowed = np.zeros(size, dtype=bool)
        allowed[list(docs)] = True
        got = search(query, allowed, 1000)
        assert {h.ordinal for h in got} == set(expected), f"BM25 hit set differs for {query}"
        for h in got:
            assert abs(h.score - expected[h.ordinal]) < 1e-3 * max(1.0, expected[h.ordinal])
        ranked = sorted(expected, key=lambda o: (-expected[o], o))
        assert [h.ordinal for h in got][:3] == ranked[:3], "order is (score desc, ordinal asc)"
        hidden = ranked[0]
        allowed[hidden] = False
        assert hidden not in {h.ordinal for h in search(query, allowed, 1000)}, "mask applies"


def check_vector_search(search: Callable[[Any, Any, int], list[Any]], matrix: Any) -> None:
    """Exact top-k by inner product among allowed rows."""
    rng = np.random.default_rng(7)
    size = len(matrix)
    for _ in range(5):
        q = rng.normal(size=matrix.shape[1]).astype(np.float32)
        q /= np.linalg.norm(q)
        allowed = rng.random(size) < 0.5
        got = search(q, allowed, 5)
        ids = np.flatnonzero(allowed)
        sims = matrix[ids] @ q
        want = ids[np.lexsort((ids, -sims))][:5]
        assert [h.ordinal for h in got] == [int(i) for i in want], "exact top-k among allowed"
