"""Deterministic router v1: query features → which legs run and with what weight.

Features (each reported in the result): ``question`` (a wh- or yes/no question: the
entities it names are often a chain to follow), ``identifier`` (an error code, CamelCase,
snake_case, UPPER_SNAKE or dotted identifier), ``entity`` (the query names a concept in the graph),
``relation`` (cues such as "what else", "caused by", "downstream of", "after"), ``global``
("across all", "overall"), ``quoted`` (a quoted phrase), ``no_concept`` (nothing to walk from).
Starting from the config's fusion weights, rules only scale weights; a leg whose base weight is 0
never runs, and the graph leg does not run without a linked concept. A relation cue with a
linked concept also turns graph expansion on (``router.relation_expand``).

With ``router.adaptive`` (the default), :func:`weigh` then resets the lexical and dense weights
once the legs have run: the learned model (:mod:`clew.retrieve.adaptive`) splits their summed
base weight by the legs' own lists; the graph weight stays as the rules set it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from clew.config import EngineConfig, FusionConfig, RouterConfig
from clew.index.bm25 import ceiling
from clew.ingest.concepts import find_identifiers
from clew.retrieve.adaptive import dense_share, load_router, reasons
from clew.retrieve.signals import signals
from clew.types import LegHit, Route

_RELATION = re.compile(
    r"\b(what else|caused by|cause[sd]?|because of|led to|lead to|leads to|resulted in|"
    r"related to|relates? to|downstream( of)?|upstream( of)?|depends? on|dependenc(y|ies)|"
    r"after|before|triggered|impact(ed|s)? (on|by)?|affect(ed|s)?|broke|linked to|connected to)\b",
    re.IGNORECASE,
)
_GLOBAL = re.compile(
    r"\b(across all|across the|overall|in general|all (the )?\w+s\b|every)\b", re.IGNORECASE
)
_QUESTION = re.compile(
    r"^\s*(who|whom|whose|what|which|when|where|why|how|is|are|was|were|do|does|did|can|could"
    r"|has|have|had|will|would|should)\b|\?\s*$",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"\"[^\"]{2,}\"|“[^”]{2,}”")


def query_features(query: str, linked_concepts: int, named: int = 0) -> list[str]:
    """The query's features; ``named``: how many of its linked concepts are names (an entity
    or an identifier, not a common phrase)."""
    features = []
    if find_identifiers(query) or re.search(r"\b[A-Za-z]+-\d{2,}\b", query):
        features.append("identifier")
    if linked_concepts:
        features.append("entity")
    else:
        features.append("no_concept")
    if named:
        features.append("named")
    if _RELATION.search(query):
        features.append("relation")
    if _GLOBAL.search(query):
        features.append("global")
    if _QUOTED.search(query):
        features.append("quoted")
    if _QUESTION.search(query):
        features.append("question")
    return features


def route(
    query: str, linked_concepts: int, fusion: FusionConfig, router: RouterConfig, named: int = 0
) -> Route:
    features = query_features(query, linked_concepts, named)
    weights = fusion.weights()
    if router.enabled:
        base = dict(weights)
        if "identifier" in features:
            weights["lexical"] *= router.identifier_lexical_boost
            weights["dense"] *= router.identifier_dense_factor
        if "quoted" in features:
            weights["lexical"] *= router.quoted_lexical_boost
        if "entity" in features and base["graph"] > 0:
            if "named" in features and "question" in features:
                weights["graph"] = max(weights["graph"], router.named_graph_weight)
            if "question" in features:
                weights["graph"] = max(weights["graph"], router.question_graph_weight)
            if "relation" in features:
                weights["graph"] = max(weights["graph"], router.relation_graph_weight)
            if "global" in features:
                weights["graph"] = max(weights["graph"], router.global_graph_weight)
        for leg, w in base.items():
            if w <= 0:
                weights[leg] = 0.0
    if "no_concept" in features:
        weights["graph"] = 0.0
    legs = {leg: round(w, 6) for leg, w in weights.items() if w > 0}
    expand = bool(
        router.enabled
        and router.relation_expand
        and "relation" in features
        and "entity" in features
    )
    return Route(legs=legs, features=tuple(features), expand=expand)


def walks_by_pagerank(chosen: Route, method: str) -> bool:
    """Whether the query's graph leg is Personalized PageRank (run after the text legs, which
    seed it) rather than the hop walk (run beside them): ``graph.method`` ``ppr``, or ``auto``
    and a question that names an entity or identifier."""
    if "graph" not in chosen.legs or method == "walk":
        return False
    return method == "ppr" or {"named", "question"} <= set(chosen.features)


def adaptive(chosen: Route, router: RouterConfig) -> bool:
    """Whether :func:`weigh` applies: the router and its model are on and both legs run."""
    return (
        router.enabled and router.adaptive and "lexical" in chosen.legs and "dense" in chosen.legs
    )


def weigh(
    chosen: Route,
    lists: Mapping[str, Sequence[LegHit]],
    terms: Mapping[str, float],
    idf: Mapping[str, float],
    cfg: EngineConfig,
) -> Route:
    """The route with its lexical and dense weights set by the router model; a lexical list
    whose top hit covers less than ``router.lexical_floor`` of the query's BM25 ceiling then
    weighs ``cover / floor`` of the model's lexical weight (the reason says so)."""
    model = load_router(cfg.router.model)
    max_lexical = ceiling(terms, idf, cfg.lexical.k1)
    values = signals(
        lists,
        {"lexical": cfg.lexical.depth, "dense": cfg.dense.depth},
        max_lexical,
        len(terms),
        chosen.features,
    )
    share = dense_share(model, values)
    legs = dict(chosen.legs)
    lexical = round(cfg.fusion.lexical_weight * 2.0 * (1.0 - share), 6)
    dense = round(cfg.fusion.dense_weight * 2.0 * share, 6)
    # a lexical top hit that says a sliver of the query is no evidence its list ranks well
    floor = cfg.router.lexical_floor
    cover = values.get("lexical_cover", 1.0)
    thin = floor > 0 and cover < floor and lexical > 0 and bool(lists.get("lexical"))
    if thin:
        lexical = round(lexical * cover / floor, 6)
    for leg, w in (("lexical", lexical), ("dense", dense)):
        if w > 0:
            legs[leg] = w
        else:
            legs.pop(leg, None)
    lead, other = ("dense", "lexical") if share >= 0.5 else ("lexical", "dense")
    why = reasons(model, values)
    if thin:
        why += f"; lexical x{cover / floor:.2f}: its top hit covers {cover:.0%} of the query"
    reason = f"{lead} {legs.get(lead, 0.0):.2g}, {other} {legs.get(other, 0.0):.2g}"
    return Route(
        legs=legs,
        features=chosen.features,
        expand=chosen.expand,
        weighed_by=model.version,
        reason=f"{reason} ({why})",
        signals={s: round(v, 4) for s, v in values.items()},
    )
