"""A scope is a wall for the dense leg too, with an HNSW index built.

An HNSW walk with the scope as an id selector passes through every tenant's vectors: which of
the scope's own it reaches depends on the others. A scoped query therefore scans its scope
exactly (``dense.scoped_exact``, on by default), however many chunks it holds. Checked on the
vector index (random vectors, a deliberately weak HNSW graph so that the walk is approximate)
and end to end (a shared index with HNSW against an index of one tenant's documents alone).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clew.backends.embedded.vector import VectorIndex
from clew.config import DenseConfig, EngineConfig
from clew.testing.fakes import fake_engine
from clew.types import Document, SearchResult

WEAK = DenseConfig(
    hnsw_min_chunks=100, exact_max_allowed=0, hnsw_m=4, ef_construction=8, ef_search=8
)
"""HNSW from 100 chunks on, used for every filter, with a graph and beam too small to be exact."""


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """faiss builds the graph in one thread here, so the weak graph is the same every run."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _index(matrix: np.ndarray, config: DenseConfig) -> VectorIndex:
    index = VectorIndex(matrix.shape[1], config)
    index.add(enumerate(matrix))
    return index


def _brute(matrix: np.ndarray, allowed: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    ids = np.flatnonzero(allowed)
    sims = matrix[ids] @ q
    order = sorted(range(len(ids)), key=lambda i: (-float(sims[i]), int(ids[i])))
    return [int(ids[i]) for i in order[:k]]


def test_an_exact_search_is_the_scan_of_the_allowed_rows_whatever_the_rest_holds() -> None:
    rng = np.random.default_rng(7)
    n, dim, k = 3000, 32, 20
    matrix = _unit(rng.standard_normal((n, dim)))
    allowed = np.zeros(n, dtype=bool)
    allowed[rng.choice(n, n // 2, replace=False)] = True
    index = _index(matrix, WEAK)
    assert index.hnsw is not None
    # the other half replaced by different vectors: the rows outside the scope change
    other = matrix.copy()
    other[~allowed] = _unit(rng.standard_normal((int((~allowed).sum()), dim)))
    index_other = _index(other, WEAK)
    queries = _unit(rng.standard_normal((25, dim)))
    walked_misses = 0
    for q in queries:
        want = _brute(matrix, allowed, q, k)
        got = [h.ordinal for h in index.search(q, allowed, k, exact=True)]
        assert got == want
        assert [h.ordinal for h in index_other.search(q, allowed, k, exact=True)] == want
        walked = [h.ordinal for h in index.search(q, allowed, k)]
        walked_misses += len(set(want) - set(walked))
    # the test has teeth: this weak graph's filtered walk does miss allowed neighbours
    assert walked_misses > 0


def _docs(tenant: str, count: int, seed: int) -> list[Document]:
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    return [
        Document(
            f"{tenant}-{i}",
            f"note {i}",
            " ".join(rnd.choice(words) for _ in range(12)),
            tenant,
            {"tenant": tenant},
        )
        for i in range(count)
    ]


def _dense(result: SearchResult) -> list[tuple[str, float]]:
    return [
        (h.chunk_id, round(c.raw_score, 6))
        for h in result.hits
        for c in h.contributions
        if c.leg == "dense"
    ]


@pytest.mark.parametrize("scoped_exact", [True, False])
def test_scoped_dense_hits_are_those_of_the_tenants_own_index(
    tmp_path: Path, scoped_exact: bool
) -> None:
    """With HNSW built over both tenants, tenant a's scoped dense hits equal those of an index
    of tenant a's documents alone (exact there: it is below the HNSW threshold); with
    ``scoped_exact`` off the walk is approximate and they need not."""
    a, b = _docs("a", 400, 1), _docs("b", 800, 2)
    shared_cfg = EngineConfig().with_overrides(
        dense={
            "hnsw_min_chunks": WEAK.hnsw_min_chunks,
            "exact_max_allowed": WEAK.exact_max_allowed,
            "hnsw_m": WEAK.hnsw_m,
            "ef_construction": WEAK.ef_construction,
            "ef_search": WEAK.ef_search,
            "scoped_exact": scoped_exact,
        }
    )
    shared = fake_engine(tmp_path / "shared", shared_cfg)
    alone = fake_engine(tmp_path / "alone", EngineConfig())
    try:
        shared.ingest(a + b)
        alone.ingest(a)
        assert shared.stats()["hnsw"] and not alone.stats()["hnsw"]
        same = 0
        queries = [" ".join(f"w{(7 * i + j) % 300}" for j in range(5)) for i in range(20)]
        for query in queries:
            got = shared.search(query, k=30, preset="dense", scope={"tenant": "a"})
            want = alone.search(query, k=30, preset="dense")
            same += _dense(got) == _dense(want)
            if scoped_exact:
                assert _dense(got) == _dense(want), query
        if not scoped_exact:
            assert same < len(queries), "the weak walk was exact: the test would not fail"
    finally:
        shared.close()
        alone.close()


def test_scoped_exact_is_on_by_default() -> None:
    assert DenseConfig().scoped_exact is True
    assert EngineConfig().with_overrides(dense={"scoped_exact": False}).dense.scoped_exact is False
