"""Fusion that keeps every contribution, and content-hash dedup.

Pure functions over ranked lists; two methods (``fusion.method``):

- ``convex`` (the default): a weighted sum of each leg's scores min-max normalized within the
  leg's own list: a hit scoring ``s`` in a leg of weight ``w`` whose list spans
  ``[lo, hi]`` adds ``w · (s - lo) / (hi - lo)`` (1 for a list of one score). Score-aware: a hit
  far ahead of the rest of its list counts for more than the next rank down, which plain ranks
  cannot say. Measured on the train sets (bench/results/router.md) it beats RRF on every one.
- ``rrf``: weighted Reciprocal Rank Fusion, a hit at 1-based rank ``r`` adds ``w / (k + r)``.

Ties are broken by (score desc, best rank asc, number of legs desc, chunk id asc), so the same
inputs give the same order, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from clew.types import Contribution, ExpansionPath, GraphTrail, LegHit


@dataclass(frozen=True, slots=True)
class Fused:
    ordinal: int
    score: float
    contributions: tuple[Contribution, ...]
    trail: GraphTrail | None
    duplicates: tuple[int, ...] = ()
    expansion: tuple[ExpansionPath, ...] = ()


def order(fused: list[Fused], chunk_id: Callable[[int], str]) -> None:
    """Sort in place by (score desc, best rank asc, number of contributions desc, id asc)."""
    fused.sort(
        key=lambda f: (
            -f.score,
            min(c.rank for c in f.contributions),
            -len(f.contributions),
            chunk_id(f.ordinal),
        )
    )


def _weighted(
    lists: Mapping[str, Sequence[LegHit]],
    weights: Mapping[str, float],
    chunk_id: Callable[[int], str],
    part_of: Callable[[float, Sequence[LegHit]], Callable[[int, LegHit], float]],
) -> list[Fused]:
    """The shared loop: legs in sorted name order (a stable sum), a leg of weight 0 skipped,
    each hit's part from ``part_of(weight, hits)(rank, hit)``, contributions and the first
    graph trail kept, then one fused hit per ordinal in :func:`order`."""
    parts: dict[int, list[Contribution]] = {}
    trails: dict[int, GraphTrail] = {}
    for leg in sorted(lists):
        weight = weights.get(leg, 0.0)
        hits = lists[leg]
        if weight <= 0 or not hits:
            continue
        part = part_of(weight, hits)
        for rank, hit in enumerate(hits, start=1):
            parts.setdefault(hit.ordinal, []).append(
                Contribution(leg=leg, rank=rank, raw_score=hit.score, fused_part=part(rank, hit))
            )
            if hit.trail is not None and hit.ordinal not in trails:
                trails[hit.ordinal] = hit.trail
    fused = [
        Fused(
            ordinal=o,
            score=sum(c.fused_part for c in cs),
            contributions=tuple(cs),
            trail=trails.get(o),
        )
        for o, cs in parts.items()
    ]
    order(fused, chunk_id)
    return fused


def rrf(
    lists: Mapping[str, Sequence[LegHit]],
    weights: Mapping[str, float],
    k: int,
    chunk_id: Callable[[int], str],
) -> list[Fused]:
    """Weighted RRF: a hit at rank ``r`` of a leg of weight ``w`` adds ``w / (k + r)``."""

    def part_of(weight: float, hits: Sequence[LegHit]) -> Callable[[int, LegHit], float]:
        return lambda rank, hit: weight / (k + rank)

    return _weighted(lists, weights, chunk_id, part_of)


FUSIONS = ("convex", "rrf")


def fuse(
    method: str,
    lists: Mapping[str, Sequence[LegHit]],
    weights: Mapping[str, float],
    rrf_k: int,
    chunk_id: Callable[[int], str],
) -> list[Fused]:
    """Fuse with ``method`` (:data:`FUSIONS`)."""
    if method == "rrf":
        return rrf(lists, weights, rrf_k, chunk_id)
    return convex(lists, weights, chunk_id)


def convex(
    lists: Mapping[str, Sequence[LegHit]],
    weights: Mapping[str, float],
    chunk_id: Callable[[int], str],
) -> list[Fused]:
    """Weighted sum of each leg's scores min-max normalized within its own list."""

    def part_of(weight: float, hits: Sequence[LegHit]) -> Callable[[int, LegHit], float]:
        lo = min(h.score for h in hits)
        span = max(h.score for h in hits) - lo
        if span <= 0:
            return lambda rank, hit: weight * 1.0
        return lambda rank, hit: weight * ((hit.score - lo) / span)

    return _weighted(lists, weights, chunk_id, part_of)


def boost(
    fused: Sequence[Fused], gained: Mapping[int, tuple[float, float]], leg: str
) -> list[Fused]:
    """``fused`` after a step that raises some hits: each ordinal in ``gained`` (``(raw,
    part)``) gains ``part``, the list is re-sorted by score (ties keep fused order), and each
    raised hit carries a ``leg`` contribution with its new rank, ``raw`` and ``part``. Steps
    after fusion (recency, identifier titles) share it, so their hits read alike."""
    if not gained:
        return list(fused)
    position = {f.ordinal: i for i, f in enumerate(fused)}
    raised = [
        replace(f, score=f.score + gained[f.ordinal][1]) if f.ordinal in gained else f
        for f in fused
    ]
    raised.sort(key=lambda f: (-f.score, position[f.ordinal]))
    return [
        replace(
            f,
            contributions=(
                *f.contributions,
                Contribution(leg, rank, gained[f.ordinal][0], gained[f.ordinal][1]),
            ),
        )
        if f.ordinal in gained
        else f
        for rank, f in enumerate(raised, start=1)
    ]


def dedup(fused: Sequence[Fused], content_hash: Callable[[int], str]) -> list[Fused]:
    """Fold hits whose content hash was already seen into the first (best) one."""
    first: dict[str, int] = {}
    out: list[Fused] = []
    folded: dict[int, list[int]] = {}
    for f in fused:
        h = content_hash(f.ordinal)
        if h in first:
            folded.setdefault(first[h], []).append(f.ordinal)
            continue
        first[h] = len(out)
        out.append(f)
    for i, dups in folded.items():
        f = out[i]
        out[i] = replace(f, duplicates=f.duplicates + tuple(dups))
    return out
