"""The top-k of a dense score array, as every in-memory leg returns it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from clew.types import LegHit


def top_k(scores: npt.NDArray[np.float32], k: int) -> list[LegHit]:
    """Positive scores only, ordered by (score desc, ordinal asc)."""
    candidates = np.flatnonzero(scores > 0)
    if len(candidates) == 0:
        return []
    if len(candidates) > k:
        part = np.argpartition(-scores[candidates], k - 1)[:k]
        kth = scores[candidates[part]].min()
        # keep every tie at the boundary so the order below is by ordinal, not by partition
        candidates = candidates[scores[candidates] >= kth]
    order = np.lexsort((candidates, -scores[candidates]))[:k]
    chosen = candidates[order]
    return [LegHit(int(o), float(scores[o])) for o in chosen]
