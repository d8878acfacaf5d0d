"""Recency after fusion (memories in recall, documents when configured) and time parsing."""

from __future__ import annotations

import math
from dataclasses import replace

from clew.config import EngineConfig, RecencyConfig
from clew.protocols import Snapshot
from clew.retrieve.fuse import Fused, boost

RECENCY = "recency"
"""Contribution name of recency weighting."""


def without_memory_recency(cfg: EngineConfig) -> EngineConfig:
    """The config :meth:`Engine.search` and :meth:`Engine.ask` run with: memories compete with
    documents on relevance, so a fresh but weak memory cannot crowd out the documents a
    search is for (recency of memories is :meth:`Engine.recall`'s)."""
    if not cfg.recency.memories:
        return cfg
    return replace(cfg, recency=replace(cfg.recency, memories=False))


def apply_recency(
    fused: list[Fused],
    snap: Snapshot,
    rc: RecencyConfig,
    reference: float,
    unit: float,
) -> list[Fused]:
    """Recency weighting after fusion, as its own additive part on the fusion's scale: a hit
    created ``age`` days before ``reference`` gains ``weight * 0.5 ** (age / half_life) *
    unit`` (``unit``: a rank-1 part of a weight-1 leg, :meth:`clew.config.FusionConfig.top_part`; a
    brand-new hit gains ``weight`` times a rank-1 leg's part; an old one almost
    nothing, so age never buries an exact match). Memories, and documents when configured;
    hits without ``created_at`` are left alone. Each boosted hit gets a ``recency``
    contribution: its new rank, its age in days as the raw score, and the part it gained."""
    known = snap.created([f.ordinal for f in fused], rc.memories)
    if known is None:
        return fused

    def info(o: int) -> tuple[float, bool]:
        return known.get(o, (math.nan, False))

    gained: dict[int, tuple[float, float]] = {}
    for f in fused:
        o = f.ordinal
        when, is_memory = info(o)
        is_memory = is_memory and rc.memories
        if math.isnan(when) or not (rc.documents or is_memory):
            continue
        age = max(0.0, (reference - when) / 86_400.0)
        gained[o] = (round(age, 3), rc.weight * 0.5 ** (age / rc.half_life_days) * unit)
    if not gained:
        return fused
    return boost(fused, gained, RECENCY)
