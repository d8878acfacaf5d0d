from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.config import DenseConfig
from clew.ingest.analyze import analyze
from clew.testing.conformance import (
    check_chunk_pages,
    check_concept_kinds,
    check_document_listing,
    check_lexical_search,
    check_store,
    check_vector_search,
)


def test_sqlite_store_conformance(tmp_path: Path) -> None:
    check_store(lambda: SQLiteStore(tmp_path / "s", create=True))


def test_bm25_conformance() -> None:
    texts = [
        "pgbouncer pool exhausted",
        "ERR-4012 timeouts in gateway",
        "pool pool size",
        "retry storm after ERR-4012",
        "settlement cutoff hour",
        "gateway gateway gateway",
    ]
    docs = {i * 2 + 1: analyze(t) for i, t in enumerate(texts)}  # gaps in ordinals
    idx = BM25Index()
    idx.add(list(docs.items())[:3])
    idx.add(list(docs.items())[3:])  # two segments answer like one
    check_lexical_search(lambda q, m, k: idx.search(q, m, k), docs)


def test_vector_index_conformance_exact_and_hnsw() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(300, 16)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    exact = VectorIndex(16, DenseConfig())
    exact.add(enumerate(m))
    check_vector_search(exact.search, m)
    # HNSW with a high ef on a small set is exact in practice; the filter goes inside
    hnsw = VectorIndex(16, DenseConfig(hnsw_min_chunks=10, exact_max_allowed=0, ef_search=400))
    hnsw.add(enumerate(m))
    assert hnsw.hnsw is not None
    check_vector_search(hnsw.search, m)


def test_sqlite_document_listing_conformance(tmp_path: Path) -> None:
    check_document_listing(lambda: SQLiteStore(tmp_path / "s", create=True))


def test_sqlite_document_listing_reads_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import clew.backends.embedded.store as embedded

    monkeypatch.setattr(embedded, "_LIST_BATCH", 2)  # every listing spans several reads
    check_document_listing(lambda: SQLiteStore(tmp_path / "s", create=True))


def test_sqlite_store_keeps_chunk_pages(tmp_path: Path) -> None:
    check_chunk_pages(lambda: SQLiteStore(tmp_path / "s", create=True))


def test_sqlite_store_keeps_mention_kinds(tmp_path: Path) -> None:
    check_concept_kinds(lambda: SQLiteStore(tmp_path / "s", create=True))


def test_a_store_made_before_mention_kinds_gets_the_column(tmp_path: Path) -> None:
    """An index written before mentions had kinds opens read-only with each mention of its
    concept's kind, and writable gains the column (filled the same way) and its index."""
    import sqlite3

    from clew.testing.conformance import make_record

    store = SQLiteStore(tmp_path / "s", create=True)
    store.write([make_record("old.md", ["ERR-1 old chunk", "ERR-1 again"])])
    store.close()
    conn = sqlite3.connect(tmp_path / "s" / "clew.sqlite")
    conn.execute("DROP INDEX mentions_kind")
    conn.execute("ALTER TABLE mentions DROP COLUMN kind")
    conn.execute("CREATE INDEX mentions_concept ON mentions(concept_id)")
    conn.commit()
    conn.close()
    ro = SQLiteStore(tmp_path / "s", read_only=True)
    assert [m[3] for m in ro.graph_rows().mentions] == [2, 2], "read-only: the concept's kind"
    ro.close()
    rw = SQLiteStore(tmp_path / "s")
    assert [m[3] for m in rw.graph_rows().mentions] == [2, 2], "migrated: the concept's kind"
    names = {
        r[0] for r in rw._conn().execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    assert "mentions_kind" in names and "mentions_concept" not in names
    rw.delete(["old.md"])
    assert rw.concept_kinds(["err-1"]) == {}
    rw.close()
    check_concept_kinds(lambda: SQLiteStore(tmp_path / "s"))


def test_a_store_made_before_pages_gets_the_column(tmp_path: Path) -> None:
    """An index written before chunks had pages opens, gains the column, reads page None."""
    import sqlite3

    from clew.testing.conformance import make_record

    store = SQLiteStore(tmp_path / "s", create=True)
    store.write([make_record("old.md", ["old chunk"])])
    store.close()
    conn = sqlite3.connect(tmp_path / "s" / "clew.sqlite")
    conn.execute("ALTER TABLE chunks DROP COLUMN page")
    conn.commit()
    conn.close()
    ro = SQLiteStore(tmp_path / "s", read_only=True)
    assert [r.page for r in ro.fetch([1]).values()] == [None], "read-only: no column, None"
    ro.close()
    check_chunk_pages(lambda: SQLiteStore(tmp_path / "s"))
