"""Checks that an index is consistent, for crash, concurrency and disk-failure tests.

:func:`make_corpus` generates small documents that each carry three handles, one per leg: a
unique made-up word (lexical), a unique mix of filler words (dense) and a unique identifier
``XID-NNNN`` (graph). :func:`check_store` verifies the system of record table by table (no
document without chunks, no chunk without its vector and mentions, no orphan concept, the
release bookkeeping); :func:`check_legs` verifies through the public search that every
committed document is found by each leg alone and that no other corpus document is.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clew.backends.embedded.store import DB_NAME
from clew.config import EngineConfig, FusionConfig, RouterConfig, TraceConfig
from clew.engine import Engine
from clew.ingest.analyze import analyze

_LETTERS = "bcfhjkmpqrtvwxz"
"""Letters no English suffix rule touches, so made-up words survive the analyzer whole."""


def unique_word(group: int, i: int) -> str:
    """A made-up word that no other (group, i) shares, even after stemming."""
    digits = []
    n = i
    for _ in range(3):
        n, r = divmod(n, len(_LETTERS))
        digits.append(_LETTERS[r])
    return "zq" + _LETTERS[group % len(_LETTERS)] + "".join(reversed(digits))


def make_corpus(n: int, *, group: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` one-chunk documents ``g{group}-{i:04d}``; see the module docstring."""
    rng = random.Random(seed * 1_000 + group)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "pa", "do", "fe", "gu"]
    vocab = sorted({"".join(rng.choice(syllables) for _ in range(3)) for _ in range(400)})
    rows = []
    for i in range(n):
        xid = f"XID-{(group + 1) * 1000 + i}"
        filler = " ".join(rng.sample(vocab, 14))
        rows.append(
            {
                "id": f"g{group}-{i:04d}",
                "title": f"Note {group}-{i}",
                "text": f"Record {xid} describes {unique_word(group, i)}. It says {filler}.",
                "metadata": {"group": group, "n": i},
                "xid": xid,
                "word": unique_word(group, i),
            }
        )
    return rows


def write_corpus(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@dataclass(frozen=True, slots=True)
class StoreState:
    release: int
    doc_ids: frozenset[str]
    counts: dict[str, int]


def check_store(directory: Path, corpus: Mapping[str, Mapping[str, Any]], dim: int) -> StoreState:
    """Every invariant of the system of record; raises AssertionError naming the first breach."""
    conn = sqlite3.connect(directory / DB_NAME)
    try:

        def rows(sql: str, *args: Any) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()

        assert rows("PRAGMA integrity_check") == [("ok",)], rows("PRAGMA integrity_check")
        assert rows("PRAGMA foreign_key_check") == [], "rows point at missing parents"
        docs = {
            d: (title, text) for d, title, text in rows("SELECT doc_id, title, text FROM documents")
        }
        for doc_id, (title, text) in docs.items():
            want = corpus.get(doc_id)
            assert want is not None, f"unknown document {doc_id!r} in the store"
            assert (title, text) == (want["title"], want["text"]), f"{doc_id!r} half-written"
        no_chunks = rows(
            "SELECT doc_id FROM documents WHERE doc_id NOT IN (SELECT doc_id FROM chunks)"
        )
        assert not no_chunks, f"documents without chunks: {no_chunks[:5]}"
        orphans = rows(
            "SELECT chunk_id FROM chunks WHERE doc_id NOT IN (SELECT doc_id FROM documents)"
        )
        assert not orphans, f"chunks without a document: {orphans[:5]}"
        bad_vec = rows("SELECT chunk_id FROM chunks WHERE length(vector) != ?", dim * 4)
        assert not bad_vec, f"chunks without a {dim}-d vector: {bad_vec[:5]}"
        unmentioned = rows(
            "SELECT chunk_id FROM chunks WHERE ordinal NOT IN (SELECT ordinal FROM mentions)"
        )
        assert not unmentioned, f"chunks without mentions: {unmentioned[:5]}"
        for doc_id in docs:
            key = str(corpus[doc_id]["xid"]).lower()
            found = rows(
                "SELECT 1 FROM chunks c JOIN mentions m USING (ordinal) JOIN concepts k "
                "USING (concept_id) WHERE c.doc_id = ? AND k.key = ?",
                doc_id,
                key,
            )
            assert found, f"{doc_id!r} does not mention its concept {key!r}"
        unused = rows(
            "SELECT key FROM concepts WHERE concept_id NOT IN (SELECT concept_id FROM mentions)"
        )
        assert not unused, f"concepts nothing mentions: {unused[:5]}"
        dup = rows("SELECT key, COUNT(*) FROM concepts GROUP BY key HAVING COUNT(*) > 1")
        assert not dup, f"duplicated concepts: {dup[:5]}"
        meta = dict(rows("SELECT key, value FROM meta"))
        release = int(meta.get("release", 0))
        (top,) = rows("SELECT COALESCE(MAX(release), 0) FROM releases")[0]
        assert release == top, f"meta release {release} but last release row {top}"
        newer = rows("SELECT doc_id FROM documents WHERE release > ?", release)
        assert not newer, f"documents of an unrecorded release: {newer[:5]}"
        counts = {
            name: int(rows(f"SELECT COUNT(*) FROM {name}")[0][0])
            for name in ("documents", "chunks", "concepts", "mentions", "links", "releases")
        }
        return StoreState(release, frozenset(docs), counts)
    finally:
        conn.close()


def leg_configs(base: EngineConfig | None = None) -> dict[str, EngineConfig]:
    """One config per leg: only that leg runs (router off, no trace, no rerank)."""
    base = base or EngineConfig()
    weights = {
        "lexical": FusionConfig(lexical_weight=1.0, dense_weight=0.0, graph_weight=0.0),
        "dense": FusionConfig(lexical_weight=0.0, dense_weight=1.0, graph_weight=0.0),
        "graph": FusionConfig(lexical_weight=0.0, dense_weight=0.0, graph_weight=1.0),
    }
    return {
        leg: replace(
            base,
            fusion=fusion,
            router=replace(RouterConfig(), enabled=False),
            trace=TraceConfig(enabled=False),
        )
        for leg, fusion in weights.items()
    }


def check_legs(
    engine: Engine,
    corpus: Sequence[Mapping[str, Any]],
    committed: Iterable[str],
) -> None:
    """Each committed document is the top hit of every leg alone for its own handle; every
    other corpus document is found by none."""
    configs = leg_configs(engine.config)
    present = set(committed)
    for row in corpus:
        doc_id = str(row["id"])
        queries = {"lexical": str(row["word"]), "dense": str(row["text"]), "graph": str(row["xid"])}
        for leg, query in queries.items():
            hits = engine.search(query, k=3, config=configs[leg]).hits
            if doc_id in present:
                assert hits and hits[0].doc_id == doc_id, (
                    f"{leg} leg does not find committed {doc_id!r} by {query[:40]!r}: "
                    f"{[h.doc_id for h in hits]}"
                )
            elif leg != "dense":  # dense always returns its nearest neighbours
                assert all(h.doc_id != doc_id for h in hits), f"{leg} finds absent {doc_id!r}"
        assert analyze(str(row["word"])) == [row["word"]], "made-up word split by the analyzer"


def without_query(payload: Any) -> Any:
    """A response payload without its echoed ``query``/``question`` fields (so a leak check
    looks only at what the index returned, not at what the caller sent)."""
    if isinstance(payload, dict):
        return {k: without_query(v) for k, v in payload.items() if k not in ("query", "question")}
    if isinstance(payload, list):
        return [without_query(v) for v in payload]
    return payload
