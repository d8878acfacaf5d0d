"""Token-budgeted context assembly with near-duplicate skipping and a score floor.

A pure function over fused (or reranked) hits: sort by score, keep a hit unless its score is
below ``floor`` × the top score, its token set overlaps an already kept hit by more than
``jaccard`` (Jaccard similarity of analyzer token sets), or it no longer fits the token budget.
Every dropped hit carries its reason, so the explanation can say why a source was left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from clew.config import AssembleConfig
from clew.ingest.analyze import analyze
from clew.types import Hit

DropReason = Literal["floor", "near_duplicate", "budget"]


@dataclass(frozen=True, slots=True)
class Dropped:
    chunk_id: str
    reason: DropReason
    detail: str


@dataclass(frozen=True, slots=True)
class Context:
    kept: tuple[Hit, ...]
    dropped: tuple[Dropped, ...]
    tokens: int
    """Tokens of the kept hits (embedding-tokenizer counts stored at ingest)."""


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def assemble(hits: Sequence[Hit], config: AssembleConfig | None = None) -> Context:
    config = config or AssembleConfig()
    ordered = sorted(enumerate(hits), key=lambda p: (-p[1].score, p[0]))
    top = ordered[0][1].score if ordered else 0.0
    kept: list[Hit] = []
    kept_sets: list[tuple[str, frozenset[str]]] = []
    dropped: list[Dropped] = []
    used = 0
    for _, hit in ordered:
        if top > 0 and hit.score < config.floor * top:
            dropped.append(
                Dropped(
                    hit.chunk_id,
                    "floor",
                    f"score {hit.score:.5f} < {config.floor:g} × top {top:.5f}",
                )
            )
            continue
        tokens = frozenset(analyze(hit.text))
        twin = max(((jaccard(tokens, s), cid) for cid, s in kept_sets), default=(0.0, ""))
        if twin[0] > config.jaccard:
            dropped.append(
                Dropped(
                    hit.chunk_id,
                    "near_duplicate",
                    f"Jaccard {twin[0]:.2f} with {twin[1]} > {config.jaccard:g}",
                )
            )
            continue
        if used + hit.token_count > config.token_budget:
            dropped.append(
                Dropped(
                    hit.chunk_id,
                    "budget",
                    f"{hit.token_count} tokens do not fit in "
                    f"{config.token_budget - used} left of {config.token_budget}",
                )
            )
            continue
        kept.append(hit)
        kept_sets.append((hit.chunk_id, tokens))
        used += hit.token_count
    return Context(tuple(kept), tuple(dropped), used)
