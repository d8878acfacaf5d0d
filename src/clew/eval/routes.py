"""Evaluating the router: the route each query took against the best route it could have taken.

The candidate routes are fixed: the dense leg's share of the lexical + dense weight on
:data:`ROUTES` (lexical alone … dense alone), the graph leg weighed by the rules as in the
default. Each candidate runs as its own configuration (router rules for the graph, no learned
weights, no identifier or quoted scaling), so every figure comes from the real pipeline.

Per query, the **oracle route** is the candidate with the highest gain (mean of nDCG@10 and
Recall@5, the router's training objective); ties go to the candidate nearest the balanced
0.5. Per slice the report gives:

- ``routes``: how many queries took each route (the default's share, at the nearest candidate);
- ``oracle_routes``: how many had each candidate as their oracle route;
- ``accuracy``: share of queries whose taken route (nearest candidate) scores as well as the
  oracle route;
- ``regret``: mean gain lost against the oracle route (the default's own gain, not the
  nearest candidate's);
- ``gain``, ``oracle_gain``: the two means.

The ``oracle-route`` row ranks each query with its oracle route's run: the ceiling a perfect
router would reach with these candidates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from clew.config import EngineConfig
from clew.eval.metrics import route_gain

__all__ = ["ORACLE", "ROUTES", "candidate_configs", "oracle_records", "route_report", "share_of"]

ROUTES: tuple[float, ...] = (0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 1.0)
"""Candidate routes: the dense leg's share of the lexical + dense weight."""
ORACLE = "oracle-route"


def route_name(share: float) -> str:
    return f"route-{share:.2f}"


def candidate_configs(base: EngineConfig) -> list[tuple[str, EngineConfig]]:
    """One configuration per candidate route, from ``base`` (normally the default)."""
    total = base.fusion.lexical_weight + base.fusion.dense_weight
    out = []
    for share in ROUTES:
        cfg = base.with_overrides(
            fusion={"lexical_weight": total * (1.0 - share), "dense_weight": total * share},
            router={
                "adaptive": False,
                "identifier_lexical_boost": 1.0,
                "identifier_dense_factor": 1.0,
                "quoted_lexical_boost": 1.0,
            },
        )
        out.append((route_name(share), cfg))
    return out


def share_of(legs: Mapping[str, float], base: EngineConfig) -> float | None:
    """The dense share of a route's lexical + dense weight, relative to the config's base
    weights (None when neither leg ran)."""
    lexical = legs.get("lexical", 0.0) / (base.fusion.lexical_weight or 1.0)
    dense = legs.get("dense", 0.0) / (base.fusion.dense_weight or 1.0)
    if lexical + dense <= 0:
        return None
    return dense / (lexical + dense)


def nearest(share: float) -> float:
    return min(ROUTES, key=lambda c: (abs(c - share), c))


def _gains(
    ranked: Mapping[str, Mapping[str, Sequence[str]]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, float]]:
    """Run name → query id → gain."""
    return {
        name: {q: route_gain(docs, qrels.get(q, {})) for q, docs in run.items()}
        for name, run in ranked.items()
    }


def oracle_choice(gains: Mapping[str, Mapping[str, float]], qid: str) -> float:
    """The oracle route of ``qid``: best gain, ties to the candidate nearest 0.5."""
    return max(ROUTES, key=lambda c: (gains[route_name(c)][qid], -abs(c - 0.5), -c))


def oracle_records(
    candidates: Mapping[str, Mapping[str, Sequence[str]]],
    qrels: Mapping[str, Mapping[str, int]],
) -> dict[str, str]:
    """Query id → the run name of its oracle route."""
    gains = _gains(candidates, qrels)
    qids = next(iter(candidates.values())).keys() if candidates else []
    return {q: route_name(oracle_choice(gains, q)) for q in qids}


def route_report(
    taken: Mapping[str, float | None],
    default: Mapping[str, Sequence[str]],
    candidates: Mapping[str, Mapping[str, Sequence[str]]],
    qrels: Mapping[str, Mapping[str, int]],
    slices: Mapping[str, Sequence[str]],
) -> dict[str, dict[str, Any]]:
    """Per slice: routes taken, oracle routes, accuracy, regret (see the module docstring).

    ``taken``: query id → the default's dense share; ``default``: query id → its ranked
    documents; ``candidates``: run name → query id → ranked documents; ``slices``: slice name →
    query ids."""
    gains = _gains(candidates, qrels)
    own = {q: route_gain(docs, qrels.get(q, {})) for q, docs in default.items()}
    out: dict[str, dict[str, Any]] = {}
    for name, qids in slices.items():
        routes: dict[str, int] = defaultdict(int)
        oracles: dict[str, int] = defaultdict(int)
        right = 0
        regret = 0.0
        total_gain = 0.0
        total_oracle = 0.0
        for q in qids:
            best = oracle_choice(gains, q)
            best_gain = gains[route_name(best)][q]
            oracles[f"{best:.2f}"] += 1
            share = taken.get(q)
            if share is None:
                routes["none"] += 1
            else:
                at = nearest(share)
                routes[f"{at:.2f}"] += 1
                right += gains[route_name(at)][q] >= best_gain - 1e-9
            regret += best_gain - own[q]
            total_gain += own[q]
            total_oracle += best_gain
        n = max(len(qids), 1)
        out[name] = {
            "n": len(qids),
            "routes": dict(sorted(routes.items())),
            "oracle_routes": dict(sorted(oracles.items())),
            "accuracy": round(right / n, 4),
            "regret": round(regret / n, 4),
            "gain": round(total_gain / n, 4),
            "oracle_gain": round(total_oracle / n, 4),
        }
    return out
