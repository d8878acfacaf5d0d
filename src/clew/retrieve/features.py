"""The feature reranker's signals for each candidate (see :data:`clew.retrieve.rerank.FEATURES`):
dense cosine and BM25 from the snapshot, concept overlap and PageRank from the graph,
recency, and the legs' own contributions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from clew.config import EngineConfig
from clew.filters import parse_time
from clew.index.graph import LinkedConcept
from clew.protocols import ChunkRow, Matrix, ScopeStats, Snapshot
from clew.retrieve.fuse import Fused
from clew.retrieve.rerank import leg_features, recency

__all__ = ["features"]


def features(
    snap: Snapshot,
    head: Sequence[Fused],
    rows: Mapping[int, ChunkRow],
    vector: Matrix,
    tokens: Mapping[str, float],
    linked: Sequence[LinkedConcept],
    cfg: EngineConfig,
    scoped: ScopeStats | None = None,
) -> list[dict[str, float]]:
    """One dict of named signals per candidate of ``head``, in order."""
    ords = np.array([f.ordinal for f in head], dtype=np.int64)
    query = np.asarray(vector, dtype=np.float32)
    cos = snap.cosines(ords, query)
    bm25 = snap.bm25(tokens, ords, cfg.lexical, scoped)
    top = float(bm25.max()) if len(bm25) else 0.0
    bm25 = bm25 / top if top > 0 else bm25
    g = snap.graph_index
    weights = {g.key_to_row[c.key]: c.weight for c in linked}
    total = sum(weights.values())
    pr = g.pagerank_chunk if scoped is None else scoped.graph.pagerank_chunk
    times = [parse_time(str(rows[o].metadata.get("created_at", ""))) for o in ords.tolist()]
    fresh = recency(times)
    top_score = max((f.score for f in head), default=0.0)
    out = []
    for i, f in enumerate(head):
        o = f.ordinal
        overlap = 0.0
        if total > 0 and o < g.mentions_csc.shape[1]:
            here = g.mentions_csc.indices[g.mentions_csc.indptr[o] : g.mentions_csc.indptr[o + 1]]
            overlap = sum(weights.get(int(r), 0.0) for r in here) / total
        out.append(
            {
                "cosine": float(cos[i]),
                "bm25": float(bm25[i]),
                "concept_overlap": overlap,
                "pagerank": float(pr[o]) if o < len(pr) else 0.0,
                "recency": fresh[i],
                **leg_features(f, top_score),
            }
        )
    return out
