"""Per-query signals of how far each leg can be trusted, from the legs' own lists.

Cheap (a pass over at most ``depth`` scores per leg) and independent of the embedding model:
scores are compared only within their own list, never across legs or models. The learned
router (:mod:`clew.retrieve.adaptive`) maps them to leg weights.

- ``{leg}_top_z``: the rank-1 score as a z-score within its own list (a confident top hit
  stands out; a flat list does not);
- ``{leg}_gap``: the drop from rank 1 to rank 10, as a share of the rank-1 score;
- ``{leg}_fill``: hits returned, as a share of the leg's depth (a lexical leg whose terms are
  rare returns few);
- ``lexical_cover``: the lexical rank-1 score over the most any chunk could score on the
  query's terms (how much of the query's idf mass the best lexical hit covers);
- ``agree_10``: overlap of the two legs' top 10; ``lexical_top_in_dense`` /
  ``dense_top_in_lexical``: a leg's rank-1 hit is in the other's top 10;
- query features (0/1): ``identifier``, ``quoted``, ``entity``, ``relation``, ``question``;
  ``terms``: log(1 + query terms).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from clew.types import LegHit

__all__ = ["SIGNALS", "signals"]

TOP = 10
QUERY_FEATURES = ("identifier", "quoted", "entity", "relation", "question")
SIGNALS: tuple[str, ...] = (
    "lexical_top_z",
    "lexical_gap",
    "lexical_fill",
    "lexical_cover",
    "dense_top_z",
    "dense_gap",
    "dense_fill",
    "agree_10",
    "lexical_top_in_dense",
    "dense_top_in_lexical",
    *QUERY_FEATURES,
    "terms",
)
"""Every signal, in the order a router model lists its weights."""


def _shape(scores: Sequence[float], depth: int) -> tuple[float, float, float]:
    """(top z, gap to rank 10, fill) of one list's scores, best first."""
    n = len(scores)
    fill = n / depth if depth > 0 else 0.0
    if n < 2:
        return 0.0, 0.0, fill
    mean = sum(scores) / n
    var = sum((s - mean) ** 2 for s in scores) / n
    top = scores[0]
    z = (top - mean) / math.sqrt(var) if var > 1e-12 else 0.0
    last = scores[min(TOP, n) - 1]
    gap = (top - last) / abs(top) if abs(top) > 1e-12 else 0.0
    return z, gap, fill


def signals(
    lists: Mapping[str, Sequence[LegHit]],
    depths: Mapping[str, int],
    max_lexical: float,
    n_terms: int,
    features: Sequence[str],
) -> dict[str, float]:
    """The signals of one query. ``max_lexical``: the highest BM25 score any chunk could reach
    on the query's terms (sum of idf × weight × (k1 + 1)); ``features``: the router's query
    features (``identifier``, ``entity``...)."""
    out: dict[str, float] = {}
    for leg in ("lexical", "dense"):
        hits = lists.get(leg, ())
        z, gap, fill = _shape([h.score for h in hits], depths.get(leg, 0))
        out[f"{leg}_top_z"] = z
        out[f"{leg}_gap"] = gap
        out[f"{leg}_fill"] = fill
    lexical = lists.get("lexical", ())
    dense = lists.get("dense", ())
    top_lex = lexical[0].score if lexical else 0.0
    out["lexical_cover"] = min(1.0, top_lex / max_lexical) if max_lexical > 0 else 0.0
    lex10 = {h.ordinal for h in lexical[:TOP]}
    dense10 = {h.ordinal for h in dense[:TOP]}
    out["agree_10"] = len(lex10 & dense10) / TOP
    out["lexical_top_in_dense"] = float(bool(lexical) and lexical[0].ordinal in dense10)
    out["dense_top_in_lexical"] = float(bool(dense) and dense[0].ordinal in lex10)
    present = set(features)
    for name in QUERY_FEATURES:
        out[name] = float(name in present)
    out["terms"] = math.log1p(n_terms)
    return out
