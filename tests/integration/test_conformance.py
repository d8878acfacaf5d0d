from __future__ import annotations

from pathlib import Path

import numpy as np

from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.config import DenseConfig
from clew.ingest.analyze import analyze
from clew.testing.conformance import check_lexical_search, check_store, check_vector_search


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
