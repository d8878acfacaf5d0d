"""The learned router: signals, the model file, weighing a route, training and evaluation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from clew.config import EngineConfig
from clew.errors import ConfigError
from clew.eval.routes import ROUTES, candidate_configs, oracle_records, route_report, share_of
from clew.index.bm25 import ceiling
from clew.retrieve.adaptive import (
    SHIPPED,
    RouterModel,
    dense_share,
    load_router,
    parse_router,
    reasons,
)
from clew.retrieve.route import adaptive, route, walks_by_pagerank, weigh
from clew.retrieve.signals import SIGNALS, signals
from clew.train.router import Example, fit, leave_one_out, mean_gain, route_gains
from clew.types import LegHit


def hits(scores: list[float], start: int = 0) -> list[LegHit]:
    return [LegHit(start + i, s) for i, s in enumerate(scores)]


def model(**weights: float) -> RouterModel:
    n = len(SIGNALS)
    return RouterModel(
        SIGNALS,
        (0.0,) * n,
        (1.0,) * n,
        tuple(weights.get(s, 0.0) for s in SIGNALS),
        weights.get("bias", 0.0),
    )


def test_a_peaked_list_stands_out_and_a_flat_one_does_not() -> None:
    peaked = signals({"lexical": hits([9.0] + [1.0] * 19)}, {"lexical": 50}, 10.0, 3, ())
    flat = signals({"lexical": hits([1.0] * 20)}, {"lexical": 50}, 10.0, 3, ())
    assert peaked["lexical_top_z"] > 4.0
    assert flat["lexical_top_z"] == 0.0
    assert peaked["lexical_gap"] == pytest.approx(8 / 9)
    assert peaked["lexical_fill"] == pytest.approx(0.4)
    assert peaked["lexical_cover"] == pytest.approx(0.9)
    assert flat["dense_fill"] == 0.0 and flat["agree_10"] == 0.0


def test_agreement_and_query_features() -> None:
    lists = {"lexical": hits([3, 2, 1], start=0), "dense": hits([0.9, 0.8], start=1)}
    got = signals(lists, {"lexical": 50, "dense": 50}, 0.0, 4, ("identifier", "entity"))
    assert got["agree_10"] == pytest.approx(0.2)
    assert got["lexical_top_in_dense"] == 0.0
    assert got["dense_top_in_lexical"] == 1.0
    assert got["identifier"] == 1.0 and got["entity"] == 1.0 and got["question"] == 0.0
    assert got["lexical_cover"] == 0.0  # no idf mass: nothing to cover
    assert set(got) == set(SIGNALS)


def test_share_follows_the_weights_and_the_reason_names_the_push() -> None:
    m = model(lexical_top_z=-1.0, agree_10=-0.5)
    flat = {"lexical_top_z": -2.0, "agree_10": 0.0}
    share = dense_share(m, flat)
    assert share == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert dense_share(m, {"lexical_top_z": 2.0}) < 0.5
    assert reasons(m, flat) == "prior dense share 0.50; lexical top z -2 → dense"
    assert reasons(m, {"lexical_top_z": 3.0}).endswith("lexical top z 3 → lexical")
    clamped = RouterModel(**{**_fields(m), "max_share": 0.8})
    assert dense_share(clamped, {"lexical_top_z": -50.0}) == 0.8


def _fields(m: RouterModel) -> dict[str, object]:
    return {name: getattr(m, name) for name in RouterModel.__dataclass_fields__}


def test_model_file_round_trip_and_versioning(tmp_path: Path) -> None:
    m = model(terms=0.3, bias=0.1)
    path = tmp_path / "router.json"
    path.write_text(m.to_json(), encoding="utf-8")
    loaded = load_router(str(path))
    assert loaded.weights == m.weights and loaded.version.startswith("router-")
    data = json.loads(path.read_text())
    data["bias"] = 5.0  # edited by hand: the version no longer matches
    with pytest.raises(ConfigError, match="does not match its content"):
        parse_router(data, "test")
    with pytest.raises(ConfigError, match="not a router model"):
        parse_router({"kind": "other"}, "test")
    with pytest.raises(ConfigError, match="unknown"):
        RouterModel(("nope",), (0.0,), (1.0,), (0.0,), 0.0)
    with pytest.raises(ConfigError, match=r"router.model='/nowhere.json'"):
        load_router("/nowhere.json")


def test_the_shipped_model_loads_and_was_trained_on_train_splits_only() -> None:
    shipped = load_router("")
    assert shipped.version.startswith("router-")
    assert SHIPPED.is_file()
    datasets = shipped.info.get("datasets", [])
    assert datasets and not any(str(d).endswith(":test") for d in datasets)


def test_weigh_resets_lexical_and_dense_and_keeps_graph(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(model(lexical_top_z=-2.0).to_json(), encoding="utf-8")
    cfg = EngineConfig().with_overrides(router={"model": str(path)})
    chosen = route("billing paused", 1, cfg.fusion, cfg.router)
    assert adaptive(chosen, cfg.router)
    lists = {"lexical": hits([1.0] * 10), "dense": hits([0.9, 0.5, 0.4], start=20)}
    weighed = weigh(chosen, lists, {"billing": 1.0, "paused": 1.0}, {"billing": 2.0}, cfg)
    assert weighed.legs["graph"] == chosen.legs["graph"]
    assert weighed.legs["dense"] + weighed.legs["lexical"] == pytest.approx(2.0)
    assert weighed.legs["dense"] == pytest.approx(1.0)  # flat list: z 0, share 0.5
    assert weighed.weighed_by.startswith("router-")
    peaked = {"lexical": hits([9.0] + [1.0] * 9), "dense": lists["dense"]}
    pushed = weigh(chosen, peaked, {"billing": 1.0}, {"billing": 2.0}, cfg)
    assert pushed.legs["lexical"] > 1.9 and pushed.reason.startswith("lexical 2")
    assert "→ lexical" in pushed.reason and pushed.signals["lexical_top_z"] > 2.0
    off = cfg.with_overrides(router={"adaptive": False})
    assert not adaptive(route("billing", 1, off.fusion, off.router), off.router)
    lexical_only = cfg.with_overrides(fusion={"dense_weight": 0.0})
    assert not adaptive(route("billing", 1, lexical_only.fusion, lexical_only.router), cfg.router)


def test_a_lexical_list_that_covers_a_sliver_of_the_query_weighs_less(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(model().to_json(), encoding="utf-8")  # share 0.5 whatever the lists
    cfg = EngineConfig().with_overrides(router={"model": str(path), "lexical_floor": 0.2})
    chosen = route("pause billing without ending the plan", 1, cfg.fusion, cfg.router)
    dense = hits([0.9, 0.5, 0.4], start=20)
    terms = {"pause": 1.0, "billing": 1.0, "plan": 1.0}
    idf = {"pause": 3.0, "billing": 3.0, "plan": 1.0}
    top = ceiling(terms, idf, cfg.lexical.k1)
    sliver = {"lexical": hits([0.05 * top, 0.04 * top]), "dense": dense}
    thin = weigh(chosen, sliver, terms, idf, cfg)
    assert thin.signals["lexical_cover"] == pytest.approx(0.05, abs=1e-3)
    assert thin.legs["lexical"] == pytest.approx(1.0 * 0.05 / 0.2, abs=1e-3)
    assert thin.legs["dense"] == pytest.approx(1.0)
    assert "lexical x0.25: its top hit covers 5% of the query" in thin.reason
    full = weigh(chosen, {"lexical": hits([0.6 * top, 0.5 * top]), "dense": dense}, terms, idf, cfg)
    assert full.legs["lexical"] == pytest.approx(1.0) and "covers" not in full.reason
    off = cfg.with_overrides(router={"lexical_floor": 0.0})
    kept = weigh(chosen, {"lexical": hits([0.05 * top]), "dense": dense}, terms, idf, off)
    assert kept.legs["lexical"] == pytest.approx(1.0)
    with pytest.raises(ConfigError, match=r"router.lexical_floor.*0.0..1.0"):
        cfg.with_overrides(router={"lexical_floor": 1.5})


def _example(dataset: str, x: float, wins: str) -> Example:
    # dense wins when x > 0, lexical when x < 0; balanced is in between
    gains = tuple(c if wins == "dense" else 1.0 - c for c in ROUTES)
    return Example(dataset, f"{dataset}-{x}", "all", {"lexical_top_z": x}, gains)


def test_fit_learns_the_direction_deterministically_and_beats_fixed_routes() -> None:
    examples = [
        _example(d, x, "dense" if x > 0 else "lexical")
        for d in ("a", "b", "c")
        for x in (-2.0, -1.0, -0.5, 0.5, 1.0, 2.0)
    ]
    first = fit(examples, steps=400)
    second = fit(examples, steps=400)
    assert first == second
    w = dict(zip(first.signals, first.weights, strict=True))
    assert w["lexical_top_z"] > 0.5
    assert mean_gain(first, examples) > max(mean_gain(None, examples, s) for s in (0.0, 0.5, 1.0))
    lodo = leave_one_out(examples, steps=400)
    assert set(lodo) == {"a", "b", "c"}
    assert all(row["learned_lodo"] > row["balanced"] for row in lodo.values())
    with pytest.raises(ValueError, match="no train examples"):
        fit([])


def test_route_gains_refuse_the_same_lists_per_candidate() -> None:
    lists = {"lexical": hits([5.0, 4.0], start=0), "dense": hits([0.9, 0.8], start=2)}
    keys = {0: ("lex#0:a", "h0"), 1: ("x#0:b", "h1"), 2: ("den#0:c", "h2"), 3: ("y#0:d", "h3")}
    gains = route_gains(lists, 0.0, (1.0, 1.0), keys, {"den": 1}, 60)
    assert gains[0] < gains[-1]  # lexical alone misses the relevant doc, dense alone has it
    assert gains[-1] == pytest.approx(1.0)


def test_oracle_and_report_on_small_runs() -> None:
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    candidates = {
        f"route-{c:.2f}": {"q1": ["d1"] if c < 0.5 else ["x"], "q2": ["x", "d2"]} for c in ROUTES
    }
    choice = oracle_records(candidates, qrels)
    assert choice["q1"] == "route-0.35"  # ties go to the candidate nearest 0.5
    assert choice["q2"] == "route-0.50"
    report = route_report(
        {"q1": 0.5, "q2": 0.5},
        {"q1": ["x"], "q2": ["x", "d2"]},
        candidates,
        qrels,
        {"all": ["q1", "q2"]},
    )["all"]
    assert report["accuracy"] == 0.5
    assert report["regret"] == pytest.approx(0.5)
    assert report["routes"] == {"0.50": 2}
    assert report["oracle_routes"] == {"0.35": 1, "0.50": 1}


def test_candidate_configs_fix_the_split_and_turn_the_model_off() -> None:
    base = EngineConfig()
    configs = dict(candidate_configs(base))
    assert len(configs) == len(ROUTES)
    lexical_only = configs["route-0.00"]
    assert lexical_only.fusion.dense_weight == 0.0 and lexical_only.fusion.lexical_weight == 2.0
    assert not lexical_only.router.adaptive and lexical_only.router.enabled
    assert share_of({"lexical": 0.5, "dense": 1.5}, base) == pytest.approx(0.75)
    assert share_of({"graph": 1.0}, base) is None


def test_features_across_sets_weigh_each_set_the_same() -> None:
    import numpy as np

    from clew.retrieve.rerank import FEATURES
    from clew.train.features import fit_features_across

    rng = np.random.default_rng(0)
    n = len(FEATURES)
    # set "big" (400 rows): feature 0 predicts relevance; set "small" (40 rows): feature 1 does
    big = rng.normal(size=(400, n))
    small = rng.normal(size=(40, n))
    y_big = (big[:, 0] > 0).astype(float)
    y_small = (small[:, 1] > 0).astype(float)
    model = fit_features_across([("big", big, y_big), ("small", small, y_small)], l2=1.0)
    w = dict(zip(model.features, model.weights, strict=True))
    assert w[FEATURES[0]] > 0 and w[FEATURES[1]] > 0
    # balanced: the small set's feature counts far more than its 40 rows alone would give
    pooled = fit_features_across([("all", np.vstack([big, small]), np.r_[y_big, y_small])])
    assert w[FEATURES[1]] > 2 * dict(zip(pooled.features, pooled.weights, strict=True))[FEATURES[1]]
    assert model.info["datasets"]["small"]["candidates"] == 40
    with pytest.raises(ValueError, match="no candidates"):
        fit_features_across([("empty", big[:0], y_big[:0])])


def test_a_question_naming_an_entity_gets_the_pagerank_plan_and_its_weight() -> None:
    cfg = EngineConfig()
    named = route("who founded the Acme Corporation?", 2, cfg.fusion, cfg.router, named=1)
    assert {"named", "question"} <= set(named.features)
    assert named.legs["graph"] == cfg.router.named_graph_weight
    assert walks_by_pagerank(named, "auto") and walks_by_pagerank(named, "ppr")
    assert not walks_by_pagerank(named, "walk")
    claim = route("Acme Corporation was founded in 1990", 2, cfg.fusion, cfg.router, named=1)
    assert "question" not in claim.features
    assert claim.legs["graph"] == cfg.fusion.graph_weight  # a statement: the base weight
    assert not walks_by_pagerank(claim, "auto") and walks_by_pagerank(claim, "ppr")
    common = route("how do refunds work?", 1, cfg.fusion, cfg.router, named=0)
    assert "named" not in common.features and not walks_by_pagerank(common, "auto")
    none = route("billed twice", 0, cfg.fusion, cfg.router)
    assert "graph" not in none.legs and not walks_by_pagerank(none, "ppr")
