"""One retrieval as data: the inputs, every intermediate list and the final hits (:class:`Run`),
its trace and replay, and how fused candidates become :class:`~clew.types.Hit` values."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clew.config import EngineConfig
from clew.filters import filter_key, parse_filter
from clew.ingest.analyze import ANALYZER_VERSION
from clew.protocols import (
    ChunkRow,
    RerankCandidate,
    RerankScores,
    ScopeStats,
    Snapshot,
)
from clew.retrieve.expand import ExpandStats
from clew.retrieve.fuse import Fused
from clew.types import (
    Hit,
    LegHit,
    RerankNote,
    RerankStatus,
    Route,
    SearchResult,
)

if TYPE_CHECKING:
    from clew.compose.answer import Answer

SAME_SCOPE: Any = type("SameScope", (), {"__repr__": lambda self: "SAME_SCOPE"})()
"""Statistics over the request's own scope (the default of ``stats_scope``)."""


@dataclass(slots=True)
class Run:
    """One retrieval: the inputs, every intermediate list, and the final hits."""

    cfg: EngineConfig
    query: str
    k: int
    filter: dict[str, Any] | None
    preset: str
    snap: Snapshot
    route: Route
    lists: dict[str, list[LegHit]]
    fused: list[Fused]
    expanded: list[Fused] | None = None
    expand_stats: ExpandStats | None = None
    reranked: list[Fused] | None = None
    rerank_status: RerankStatus | None = None
    rerank_notes: dict[int, RerankNote] = field(default_factory=dict)
    reranker_version: str = ""
    features: dict[int, dict[str, float]] = field(default_factory=dict)
    """Feature-reranker signals per candidate ordinal (when that reranker ran)."""
    hits: tuple[Hit, ...] = ()
    embedding: Future[Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    scope: dict[str, Any] | None = None
    """The caller's scope (AND-ed with the filter in every leg); None = unscoped."""
    stats_scope: Any = SAME_SCOPE
    """The scope statistics are computed over when it is not ``scope`` (recall: the caller's
    scope without the memory conditions)."""
    caller: str | None = None
    """Name of the principal that asked (a service key's name; never the key)."""
    reference: float = 0.0
    """Reference time of recency weighting and ``as_of`` (epoch seconds)."""
    scoped: ScopeStats | None = None
    """The statistics population of a scoped request (None: the whole index's)."""

    @property
    def release(self) -> int:
        """The release the caller sees: its scope's (:meth:`Snapshot.view`; the scope
        statistics are computed over, when that is not the request's own), the snapshot's when
        unscoped. What the result and the trace carry."""
        scope = self.scope if self.stats_scope is SAME_SCOPE else self.stats_scope
        return self.snap.view(filter_key(parse_filter(scope)))

    def result(self) -> SearchResult:
        return SearchResult(
            query=self.query,
            route=self.route,
            hits=self.hits,
            release=self.release,
            timings_ms=self.timings,
            filter=self.filter,
            preset=self.preset,
            rerank=self.rerank_status,
        )

    def trace(self, kind: str) -> dict[str, Any]:
        """Everything needed to replay and compare this retrieval (no timings compared)."""
        keys = self.snap.keys

        def ranked(items: Sequence[Fused | LegHit]) -> dict[str, list[Any]]:
            return {
                "ids": [keys[f.ordinal][0] for f in items],
                "scores": [float(f.score) for f in items],
            }

        store = self.snap.store
        lists: dict[str, Any] = {leg: ranked(hits) for leg, hits in sorted(self.lists.items())}
        lists["fused"] = ranked(self.fused)
        if self.expanded is not None:
            lists["expanded"] = ranked(self.expanded)
        if self.reranked is not None:
            lists["reranked"] = ranked(self.reranked)
        lists["hits"] = {
            "ids": [h.chunk_id for h in self.hits],
            "scores": [h.score for h in self.hits],
        }
        stats = self.expand_stats
        return {
            "format": TRACE_FORMAT,
            "kind": kind,
            "query": self.query,
            "k": self.k,
            "filter": self.filter,
            "scope": self.scope,
            **({} if self.stats_scope is SAME_SCOPE else {"stats_scope": self.stats_scope}),
            "caller": self.caller,
            "reference_time": self.reference,
            "preset": self.preset,
            "config": self.cfg.to_dict(),
            "release": self.release,
            "analyzer": ANALYZER_VERSION,
            "models": {
                "embedder": store.get_meta("embedder"),
                "embedder_version": store.get_meta("embedder_version"),
                "concepts": store.get_meta("concepts"),
                "reranker": None if self.rerank_status is None else self.rerank_status.reranker,
                "reranker_version": self.reranker_version,
            },
            "route": self.route.to_dict(),
            "lists": lists,
            "expansion": None
            if stats is None
            else {
                "seeds": stats.seeds,
                "reached": stats.reached,
                "added": stats.added,
                "lifted": stats.lifted,
            },
            "rerank": None if self.rerank_status is None else self.rerank_status.to_dict(),
            "hits": [traced(h) for h in self.hits],
            "timings_ms": dict(self.timings),
        }


@dataclass(frozen=True, slots=True)
class Replay:
    trace_id: str
    release_then: int
    release_now: int
    differences: tuple[str, ...]

    @property
    def identical(self) -> bool:
        return not self.differences


@dataclass(frozen=True, slots=True)
class Answered:
    """An answer with the retrieval run behind it and what its trace adds
    (:meth:`clew.Engine.answer`)."""

    answer: Answer
    run: Run
    trace: Mapping[str, Any]


def replayed(trace_id: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> Replay:
    """Every difference between a trace and its re-run, the release first: it explains the
    rest."""
    from clew.trace import diff_traces

    then, now = int(old["release"]), int(new["release"])
    diffs = [str(d) for d in diff_traces(old, new) if d.path != "release"]
    if then != now:
        diffs.insert(0, f"release: {then} -> {now} (the index changed since the trace)")
    return Replay(trace_id, then, now, tuple(diffs))


def replay_args(old: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments that re-run a traced search or ask with its own config."""
    return {
        "k": old["k"],
        "filter": old["filter"],
        "preset": old["preset"],
        "config": EngineConfig.from_dict(old["config"]),
        "scope": old.get("scope"),
        "as_of": old.get("reference_time"),
        "stats_scope": old.get("stats_scope", SAME_SCOPE),
    }


TRACE_FORMAT = "clew-trace/1"


class BrokenReranker:
    """Stands in for a reranker that could not be built, so the fallback records why."""

    def __init__(self, kind: str, error: Exception) -> None:
        self.name = kind
        self.error = error

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        raise self.error


def traced(hit: Hit) -> dict[str, Any]:
    """A hit as the trace keeps it: ids, score and provenance (the text is in the store)."""
    out = hit.to_dict()
    for key in ("text", "title", "metadata", "heading_path"):
        out.pop(key, None)
    return out


def to_hit(
    f: Fused, row: ChunkRow, keys: Mapping[int, tuple[str, str]], note: RerankNote | None
) -> Hit:
    return Hit(
        chunk_id=row.chunk_id,
        doc_id=row.doc_id,
        title=row.title,
        text=row.text,
        score=f.score,
        metadata=row.metadata,
        contributions=f.contributions,
        graph=f.trail,
        heading_path=row.heading_path,
        token_count=row.token_count,
        content_hash=row.content_hash,
        duplicates=tuple(keys[o][0] for o in f.duplicates),
        expansion=f.expansion,
        rerank=note,
        page=row.page,
        source=row.source,
    )


def elapsed_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)
