"""The BM25 formulas, once: inverse document frequency and per-term score.

Both backends score with these: the embedded index
(:class:`clew.backends.embedded.lexical.BM25Index`) over numpy ``float32`` postings, the
PostgreSQL lexical leg (:class:`clew.backends.postgres.lexical.PgLexical`) in Python floats (and
in SQL, whose query text spells out the same per-term score over the idf computed here).

Each function is the formula exactly as the backends evaluate it (same operations in the same
order), so scores are the same bit for bit wherever they are computed. The ``*s`` variants take
numpy arrays (``float32`` in, ``float32`` out: Python float parameters do not widen them).

    idf(t)        = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    norm(d)       = k1 · (1 - b + b · |d| / avgdl)
    score(t, d)   = idf(t) · w(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + norm(d))

``N``: chunks in the population, ``df(t)``: those holding term ``t`` (0 gives the highest idf),
``|d|``: the chunk's length in tokens, ``avgdl``: the population's mean length, ``w(t)``: the
query term's weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float32]


def idf(n_docs: float, df: float) -> float:
    """BM25 idf of a term held by ``df`` of ``n_docs`` chunks (never negative; df 0: highest)."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def average_length(total_len: float, n_docs: int) -> float:
    """The mean chunk length BM25 normalizes by (no chunks: the total over 1)."""
    return total_len / max(n_docs, 1)


def length_norm(length: float, avgdl: float, k1: float, b: float) -> float:
    """The length normalization ``k1 · (1 - b + b · length / avgdl)`` of one chunk."""
    return k1 * (1.0 - b + b * length / avgdl)


def length_norms(lengths: Floats, avgdl: float, k1: float, b: float) -> Floats:
    """:func:`length_norm` of each chunk length (``float32`` arithmetic)."""
    out: Floats = k1 * (1.0 - b + b * lengths / avgdl)
    return out


def saturation(tf: float, norm: float, k1: float) -> float:
    """The term-frequency saturation ``tf · (k1 + 1) / (tf + norm)``."""
    return tf * (k1 + 1.0) / (tf + norm)


def saturations(tf: Floats, norm: Floats, k1: float) -> Floats:
    """:func:`saturation` of each (term frequency, length norm) pair (``float32`` arithmetic)."""
    out: Floats = tf * (k1 + 1.0) / (tf + norm)
    return out


def term_score(idf: float, weight: float, tf: float, norm: float, k1: float) -> float:
    """One query term's BM25 contribution to one chunk: ``idf · weight · saturation``."""
    return idf * weight * saturation(tf, norm, k1)


def term_scores(idf: float, weight: float, tf: Floats, norm: Floats, k1: float) -> Floats:
    """:func:`term_score` for each posting; ``idf · weight`` is rounded to ``float32`` once,
    then multiplies the ``float32`` saturations."""
    out: Floats = np.float32(idf * weight) * saturations(tf, norm, k1)
    return out


def ceiling(terms: Mapping[str, float], idf: Mapping[str, float], k1: float) -> float:
    """The highest score a chunk could reach on ``terms`` (each saturated at ``k1 + 1``):
    ``Σ w(t) · idf(t) · (k1 + 1)``, a term without idf counting 0. The lexical leg's top score
    over it is how much of the query that hit covers."""
    return sum(w * idf.get(t, 0.0) * (k1 + 1.0) for t, w in terms.items())
