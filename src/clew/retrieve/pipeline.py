"""The query pipeline, in its fixed order, over one :class:`~clew.protocols.Snapshot`.

validate → filter (compiled once by the backend) → link concepts → route → legs (lexical,
dense, graph; in parallel, each with the same compiled filter, over-fetched) → weigh (the
learned router) → fuse (convex or RRF, contributions kept) → dedup (content hash) → identifier
titles → recency → expand → rerank → hits. The pipeline never asks which backend it has: the
snapshot answers every leg and every lookup."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from clew.config import EngineConfig
from clew.errors import QueryError
from clew.filters import Mask, filter_key, parse_filter, to_json
from clew.index.graph import LinkedConcept
from clew.index.ppr import Walk, explain, ppr
from clew.ingest.analyze import query_terms
from clew.protocols import (
    ChunkRow,
    Matrix,
    RerankCandidate,
    Reranker,
    ScopeStats,
    Snapshot,
)
from clew.retrieve.expand import expand
from clew.retrieve.features import features
from clew.retrieve.fuse import dedup, fuse
from clew.retrieve.named import identifier_share, query_identifiers, title_identifiers
from clew.retrieve.recency import apply_recency
from clew.retrieve.rerank import rerank
from clew.retrieve.route import adaptive, route, walks_by_pagerank, weigh
from clew.retrieve.run import SAME_SCOPE, BrokenReranker, Run, elapsed_ms, to_hit
from clew.retrieve.titles import title_links
from clew.types import JSONValue, LegHit, PlanStep, Route

__all__ = ["NAMED_KINDS", "Services", "check_query", "retrieve"]

NAMED_KINDS = frozenset({"entity", "identifier"})
"""Concept kinds that are names: a query naming one seeds the graph walk well."""
TITLE_IDENTIFIER_DEPTH = 30
"""How many of the top fused hits the identifier-title step reads."""


@dataclass(frozen=True, slots=True)
class Services:
    """What the pipeline uses beyond the snapshot: the query encoder, the worker pool the legs
    run in, and the reranker of a config (built once per setting by the engine)."""

    embed: Callable[[str], Matrix]
    pool: Executor
    reranker: Callable[[EngineConfig], Reranker]


def check_query(query: Any, k: int | None, cfg: EngineConfig) -> int:
    """Validate a query and its k (None: the config's); returns k."""
    if not isinstance(query, str) or not query.strip():
        raise QueryError("query is empty; give at least one word")
    if len(query) > cfg.search.max_query_chars:
        raise QueryError(
            f"query has {len(query)} characters; allowed: at most {cfg.search.max_query_chars}"
        )
    k = cfg.search.k if k is None else k
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 1000:
        raise QueryError(f"k={k!r} is invalid; allowed: 1..1000")
    return k


def retrieve(
    snap: Snapshot,
    services: Services,
    query: str,
    cfg: EngineConfig,
    *,
    k: int | None,
    filter: Any,
    preset: str | None,
    exclude_docs: Sequence[str] = (),
    scope: Any = None,
    as_of: float | None = None,
    stats_scope: Any = SAME_SCOPE,
) -> Run:
    """Every stage up to the final hits, with the intermediate lists kept for the trace.

    ``exclude_docs`` hides whole documents as a filter would. Statistics (BM25, concept idf,
    hub cuts, PageRank, answer idf) are computed over ``stats_scope`` (default: ``scope``;
    None = the whole index), so a scoped caller's numbers depend on nothing outside its
    scope."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    k = check_query(query, k, cfg)
    node = parse_filter(filter)
    scope_node = parse_filter(scope)

    t = time.perf_counter()
    stats_node = scope_node if stats_scope is SAME_SCOPE else parse_filter(stats_scope)
    scoped = snap.scope_stats(filter_key(stats_node))
    where = snap.where(node, scope_node, exclude_docs)
    timings["filter"] = elapsed_ms(t)

    # the query embedding is the longest stage: start it now, link and route meanwhile
    embedding: Future[Matrix] | None = None
    if cfg.fusion.dense_weight > 0 or cfg.rerank.kind == "features":
        embedding = services.pool.submit(_embed, services.embed, query, timings)

    t = time.perf_counter()
    linked = snap.link(query, cfg.graph, where, scoped)
    named = sum(1 for c in linked if c.kind in NAMED_KINDS)
    chosen = route(query, len(linked), cfg.fusion, cfg.router, named)
    timings["route"] = elapsed_ms(t)

    # lexical and graph run in workers; dense waits on the embedding already under way in a
    # worker, so it runs on the caller's thread instead of holding a worker while it waits
    tokens = query_terms(query, cfg.lexical.part_weight)
    pooled: dict[str, Callable[[], list[LegHit]]] = {}
    inline: dict[str, Callable[[], list[LegHit]]] = {}
    if "lexical" in chosen.legs:
        pooled["lexical"] = lambda: snap.lexical(tokens, where, cfg.lexical, scoped)
    if "dense" in chosen.legs:

        def dense() -> list[LegHit]:
            assert embedding is not None
            return snap.dense(embedding.result(), where, cfg.dense.depth)

        inline["dense"] = dense
    walk_after = walks_by_pagerank(chosen, cfg.graph.method)
    if "graph" in chosen.legs and not walk_after:
        pooled["graph"] = lambda: snap.graph(query, where, cfg.graph, linked, scoped)
    lists = _run_legs(services.pool, pooled, inline, timings)

    @cache
    def query_idf() -> dict[str, float]:
        """The query terms' idf in the caller's scope, looked up once and only if needed."""
        return snap.idf(list(tokens), scoped)

    if adaptive(chosen, cfg.router):
        t = time.perf_counter()
        chosen = weigh(chosen, lists, tokens, query_idf(), cfg)
        timings["weigh"] = elapsed_ms(t)

    plan = _plan(chosen.legs, cfg, walk_after, len(linked))
    chosen = replace(chosen, plan=plan)
    keys = snap.keys

    def chunk_id(o: int) -> str:
        return keys[o][0]

    def content_hash(o: int) -> str:
        return keys[o][1]

    @cache
    def allowed() -> Mask:
        """The caller's mask, built once per query and only if a stage walks the graph."""
        return snap.mask(where)

    walk: Walk | None = None
    if walk_after:
        # a sequential plan: the lexical and dense passages seed the walk with the concepts
        t = time.perf_counter()
        lists["graph"], walk = _ppr_leg(
            snap, allowed(), cfg, chosen, lists, linked, scoped, chunk_id
        )
        timings["graph"] = elapsed_ms(t)

    t = time.perf_counter()
    snap.load_keys(h.ordinal for hits in lists.values() for h in hits)

    fused = fuse(cfg.fusion.method, lists, chosen.legs, cfg.fusion.rrf_k, chunk_id)
    if cfg.fusion.dedup:
        fused = dedup(fused, content_hash)
    timings["fuse"] = elapsed_ms(t)
    asked = query_identifiers(query) if cfg.fusion.title_identifier > 0 else frozenset()
    if fused and asked:
        t = time.perf_counter()
        share = identifier_share(tokens, query_idf(), asked)
        part = cfg.fusion.title_identifier * cfg.fusion.top_part() * share
        fused = title_identifiers(fused, snap.rows, asked, part, TITLE_IDENTIFIER_DEPTH)
        timings["identifiers"] = elapsed_ms(t)
    reference = time.time() if as_of is None else as_of
    rc = cfg.recency
    if fused and rc.weight > 0 and (rc.documents or (rc.memories and snap.has_memories())):
        t = time.perf_counter()
        fused = apply_recency(fused, snap, rc, reference, cfg.fusion.top_part())
        timings["recency"] = elapsed_ms(t)
    run = Run(cfg, query, k, to_json(node), preset or "default", snap, chosen, lists, fused)
    run.scope = to_json(scope_node)
    if stats_scope is not SAME_SCOPE:
        run.stats_scope = None if stats_node is None else to_json(stats_node)
    run.scoped = scoped
    run.reference = reference

    pool = fused
    if (cfg.expand.enabled or chosen.expand) and fused:
        t = time.perf_counter()
        pool, run.expand_stats = expand(
            fused,
            snap.graph_index,
            allowed(),
            cfg.expand,
            chunk_id,
            cfg.graph,
            snap.load_keys,
        )
        if cfg.fusion.dedup:
            pool = dedup(pool, content_hash)
        run.expanded = pool
        timings["expand"] = elapsed_ms(t)
    if "graph" in chosen.legs and cfg.graph.title_links > 0 and pool:
        t = time.perf_counter()
        pool, brought = title_links(
            pool,
            snap.graph_index,
            allowed,
            cfg.graph,
            chunk_id,
            snap.load_keys,
            None if scoped is None else scoped.graph,
        )
        if brought:
            run.expanded = pool
        timings["titles"] = elapsed_ms(t)

    rows: dict[int, ChunkRow] = {}
    if cfg.rerank.kind != "none" and pool:
        t = time.perf_counter()
        head = pool[: cfg.rerank.pool]
        rows = snap.rows([f.ordinal for f in head])
        head = [f for f in head if f.ordinal in rows]
        pool = head + pool[cfg.rerank.pool :]
        signals: list[dict[str, float]] = [{} for _ in head]
        if cfg.rerank.kind == "features":
            assert embedding is not None
            signals = features(snap, head, rows, embedding.result(), tokens, linked, cfg, scoped)
            run.features = {f.ordinal: x for f, x in zip(head, signals, strict=True)}
        candidates = [
            RerankCandidate(
                rows[f.ordinal].chunk_id, rows[f.ordinal].title, rows[f.ordinal].text, feats
            )
            for f, feats in zip(head, signals, strict=True)
        ]
        try:
            reranker = services.reranker(cfg)
        except Exception as exc:  # a model that cannot load: fall back, say why
            reranker = BrokenReranker(cfg.rerank.kind, exc)
        reranked = rerank(query, pool, candidates, reranker, cfg.rerank.keep)
        pool = reranked.pool
        run.rerank_status, run.rerank_notes = reranked.status, reranked.notes
        run.reranked = pool[: len(head)]
        run.reranker_version = str(getattr(reranker, "version", ""))
        timings["rerank"] = elapsed_ms(t)

    t = time.perf_counter()
    top = pool[:k]
    if walk is not None:  # the walk's hits get their path now that they are known
        top = [
            replace(
                f,
                trail=explain(
                    snap.graph_index, walk, f.ordinal, cfg.graph, chunk_id, snap.load_keys
                ),
            )
            if f.trail is None and any(c.leg == "graph" for c in f.contributions)
            else f
            for f in top
        ]
    # full rows only for the hits returned; a chunk deleted by another process since this
    # snapshot was taken is dropped rather than shown from a newer release
    missing = [f.ordinal for f in top if f.ordinal not in rows]
    if missing:
        rows.update(snap.rows(missing))
    run.hits = tuple(
        to_hit(f, rows[f.ordinal], keys, run.rerank_notes.get(f.ordinal))
        for f in top
        if f.ordinal in rows
    )
    run.embedding = embedding
    timings["fetch"] = elapsed_ms(t)
    timings["total"] = elapsed_ms(started)
    run.timings = timings
    return run


def _plan(
    legs: Mapping[str, float], cfg: EngineConfig, walk_after: bool, concepts: int
) -> tuple[PlanStep, ...]:
    """The steps the query runs, as data: the trace records them, a replay compares them."""
    steps: list[PlanStep] = []
    if "lexical" in legs:
        steps.append(PlanStep("lexical", params={"depth": cfg.lexical.depth}))
    if "dense" in legs:
        steps.append(PlanStep("dense", params={"depth": cfg.dense.depth}))
    if "graph" in legs:
        g = cfg.graph
        if walk_after:
            text = tuple(s.step for s in steps)
            params: dict[str, JSONValue] = {
                "concepts": concepts,
                "passages": g.seed_passages if text else 0,
                "passage_share": g.passage_share,
                "damping": g.damping,
                "depth": g.depth,
            }
            steps.append(PlanStep("graph.ppr", after=text, params=params))
        else:
            params = {"concepts": concepts, "max_hops": g.max_hops, "depth": g.depth}
            steps.append(PlanStep("graph.walk", params=params))
        if g.title_links > 0 and g.title_sources > 0:
            fused = tuple(s.step for s in steps)
            params = {
                "sources": g.title_sources,
                "links": g.title_links,
                "rank": g.title_rank,
                "shown": g.title_shown,
            }
            steps.append(PlanStep("graph.titles", after=fused, params=params))
    return tuple(steps)


def _ppr_leg(
    snap: Snapshot,
    allowed: Mask,
    cfg: EngineConfig,
    chosen: Route,
    lists: Mapping[str, list[LegHit]],
    linked: Sequence[LinkedConcept],
    scoped: ScopeStats | None,
    chunk_id: Callable[[int], str],
) -> tuple[list[LegHit], Walk | None]:
    """The graph leg as Personalized PageRank, seeded by the linked concepts and the top
    ``graph.seed_passages`` of the lexical + dense fusion (with the route's weights)."""
    passages: list[tuple[int, float]] = []
    n = cfg.graph.seed_passages
    text_legs = {leg: hits for leg, hits in lists.items() if leg != "graph"}
    if n > 0 and text_legs:
        snap.load_keys(h.ordinal for hits in text_legs.values() for h in hits[: 4 * n])
        head = {leg: hits[: 4 * n] for leg, hits in text_legs.items()}
        fused = fuse(cfg.fusion.method, head, chosen.legs, cfg.fusion.rrf_k, chunk_id)
        # rounded: the backends' BM25 agree to ~1e-7 (float32 against float64 SQL), and the
        # walk must not turn that noise into a different ranking
        passages = [(f.ordinal, round(f.score, 4)) for f in fused[:n]]
    return ppr(
        snap.graph_index,
        allowed,
        cfg.graph,
        linked,
        passages,
        cfg.graph.depth,
        stats=None if scoped is None else scoped.graph,
    )


def _embed(embed: Callable[[str], Matrix], query: str, timings: dict[str, float]) -> Matrix:
    t0 = time.perf_counter()
    vec = embed(query)
    timings["embed"] = elapsed_ms(t0)
    return vec


def _run_legs(
    pool: Executor,
    pooled: Mapping[str, Callable[[], list[LegHit]]],
    inline: Mapping[str, Callable[[], list[LegHit]]],
    timings: dict[str, float],
) -> dict[str, list[LegHit]]:
    """Run ``pooled`` legs in the worker pool and ``inline`` ones on this thread."""

    def timed(name: str, fn: Callable[[], list[LegHit]]) -> Callable[[], list[LegHit]]:
        def run() -> list[LegHit]:
            t0 = time.perf_counter()
            out = fn()
            timings[name] = elapsed_ms(t0)
            return out

        return run

    t = time.perf_counter()
    futures = {name: pool.submit(timed(name, fn)) for name, fn in pooled.items()}
    lists = {name: timed(name, fn)() for name, fn in inline.items()}
    lists.update({name: f.result() for name, f in futures.items()})
    timings["legs"] = elapsed_ms(t)
    return lists
