from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clew.eval.datasets import EvalError
from clew.eval.gate import Gate, check_gates, load_gates, parse_gates

GATES_YAML = """\
gates:
  - dataset: scifact
    min: {nDCG@10: 0.70}
  - dataset: musique-migres200
    slice: "*"
    min: {recall@5: 0.30}
    no_worse_than_best_leg: 0.01
    metric: recall@5
  - dataset: hotpotqa-migres200
    slice: bridge
    no_worse_than_best_leg: 0.02
"""

TABLE: dict[str, dict[str, dict[str, float]]] = {
    "default": {
        "all": {"recall@5": 0.55, "ndcg@10": 0.60},
        "2hop": {"recall@5": 0.62, "ndcg@10": 0.66},
        "3hop": {"recall@5": 0.41, "ndcg@10": 0.50},
    },
    "lexical": {
        "all": {"recall@5": 0.45},
        "2hop": {"recall@5": 0.51},
        "3hop": {"recall@5": 0.44},
    },
    "dense": {
        "all": {"recall@5": 0.5550},
        "2hop": {"recall@5": 0.60},
        "3hop": {"recall@5": 0.40},
    },
}


def test_load_gates_parses_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gates.yaml"
    path.write_text(GATES_YAML, encoding="utf-8")
    scifact, musique, hotpot = load_gates(path)
    assert scifact == Gate("scifact", min={"ndcg@10": 0.70}, metric="ndcg@10")
    assert scifact.slice == "all"
    assert scifact.no_worse_than_best_leg is None
    assert musique == Gate(
        "musique-migres200", "*", {"recall@5": 0.3}, no_worse_than_best_leg=0.01, metric="recall@5"
    )
    assert hotpot.metric == "ndcg@10"
    assert hotpot.slice == "bridge"
    # The default metric for no_worse_than_best_leg is the first metric in min.
    (gate,) = parse_gates(
        {"gates": [{"dataset": "d", "min": {"MRR@10": 0.1}, "no_worse_than_best_leg": 0}]}
    )
    assert gate.metric == "mrr@10"
    assert gate.no_worse_than_best_leg == 0.0
    assert parse_gates({"gates": []}) == ()


def test_pass() -> None:
    gates = parse_gates(
        {
            "gates": [
                {"dataset": "musique-migres200", "min": {"recall@5": 0.5, "ndcg@10": 0.6}},
                {
                    "dataset": "musique-migres200",
                    "slice": "2hop",
                    "no_worse_than_best_leg": 0,
                    "metric": "recall@5",
                },
                {"dataset": "scifact", "min": {"ndcg@10": 0.99}},  # another dataset: ignored
            ]
        }
    )
    # Overall: 0.55 vs dense 0.555 is 0.005 below, allowed 0.01.
    gates += (Gate("musique-migres200", no_worse_than_best_leg=0.01, metric="recall@5"),)
    assert check_gates(gates, "musique-migres200", TABLE) == []


def test_min_failure_reason() -> None:
    gate = Gate("scifact", min={"ndcg@10": 0.70})
    table = {"default": {"all": {"ndcg@10": 0.6812}}}
    assert check_gates([gate], "scifact", table) == ["scifact/all: ndcg@10 0.6812 < min 0.7000"]
    # Float noise in a mean does not fail a gate set at the same value.
    table = {"default": {"all": {"ndcg@10": 0.1 + 0.2 + 0.4}}}
    assert check_gates([Gate("scifact", min={"ndcg@10": 0.7})], "scifact", table) == []


def test_best_leg_failure_reason() -> None:
    gate = Gate("musique-migres200", "3hop", no_worse_than_best_leg=0.01, metric="recall@5")
    assert check_gates([gate], "musique-migres200", TABLE) == [
        "musique-migres200/3hop: recall@5 0.4100 is 0.0300 below best leg lexical (0.4400); "
        "allowed 0.0100"
    ]
    # Exactly at the allowed shortfall passes despite float noise (0.44 - 0.43).
    table = {"default": {"all": {"recall@5": 0.43}}, "lexical": {"all": {"recall@5": 0.44}}}
    gate = Gate("m", no_worse_than_best_leg=0.01, metric="recall@5")
    assert check_gates([gate], "m", table) == []


def test_star_checks_every_slice_including_all() -> None:
    (_, musique, _) = parse_gates(_yaml(GATES_YAML))
    reasons = check_gates([musique], "musique-migres200", TABLE)
    assert reasons == [
        "musique-migres200/3hop: recall@5 0.4100 is 0.0300 below best leg lexical (0.4400); "
        "allowed 0.0100",
    ]
    strict = Gate("musique-migres200", "*", min={"recall@5": 0.6})
    assert check_gates([strict], "musique-migres200", TABLE) == [
        "musique-migres200/all: recall@5 0.5500 < min 0.6000",
        "musique-migres200/3hop: recall@5 0.4100 < min 0.6000",
    ]


def test_missing_slice_metric_legs_config() -> None:
    gate = Gate("m", "4hop", min={"recall@5": 0.1})
    (reason,) = check_gates([gate], "m", TABLE)
    assert (
        reason == "m/4hop: slice '4hop' missing from results of 'default' (have: all, 2hop, 3hop)"
    )

    gate = Gate("m", min={"map@100": 0.1})
    (reason,) = check_gates([gate], "m", TABLE)
    assert reason.startswith("m/all: map@100 missing from results of 'default' (have: recall@5")

    gate = Gate("m", "2hop", no_worse_than_best_leg=0.01)  # legs have no ndcg@10
    (reason,) = check_gates([gate], "m", TABLE)
    assert reason == (
        "m/2hop: no single-leg results for ndcg@10 (legs: lexical, dense, graph, hybrid); "
        "run with --ablate to check no_worse_than_best_leg"
    )
    only_default = {"default": TABLE["default"]}
    gate = Gate("m", no_worse_than_best_leg=0.01, metric="recall@5")
    (reason,) = check_gates([gate], "m", only_default)
    assert "run with --ablate" in reason
    # Legs can be renamed.
    assert check_gates([gate], "m", TABLE, legs=("lexical",)) == []

    gate = Gate("m", no_worse_than_best_leg=0.01, metric="mrr@10")
    (reason,) = check_gates([gate], "m", TABLE)
    assert "mrr@10 missing from results of 'default'" in reason
    assert "needed for no_worse_than_best_leg" in reason

    gate = Gate("m", min={"recall@5": 0.1})
    assert check_gates([gate], "m", TABLE, config="hybrid") == [
        "m/all: config 'hybrid' missing from results (have: default, dense, lexical)"
    ]
    assert check_gates([Gate("m", "*", min={"recall@5": 0.1})], "m", {"default": {}}) == [
        "m/*: no slice rows in results of 'default'"
    ]


def test_other_config_under_test() -> None:
    gate = Gate("m", min={"recall@5": 0.5})
    assert check_gates([gate], "m", TABLE, config="lexical") == [
        "m/all: recall@5 0.4500 < min 0.5000"
    ]


def _yaml(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (None, r"src: top level is NoneType; allowed: a mapping with key 'gates'"),
        ([], r"src: top level is list"),
        ({"gates": [], "extra": 1}, r"src: unknown top-level key 'extra'; allowed: gates"),
        ({"gates": {"dataset": "x"}}, r"src: gates=.* is invalid; allowed: a list"),
        ({"gates": ["scifact"]}, r"src: gates\[0\]: got str 'scifact'; allowed: a mapping"),
        (
            {"gates": [{"dataset": "a", "min": {"ndcg@10": 0.1}}, {"dataset": "b", "mim": {}}]},
            r"src: gates\[1\]: unknown key 'mim'; allowed: dataset, slice, min, "
            r"no_worse_than_best_leg, min_gain_over, metric",
        ),
        ({"gates": [{"min": {"ndcg@10": 0.1}}]}, r"gates\[0\]: missing required key 'dataset'"),
        ({"gates": [{"dataset": ""}]}, r"gates\[0\]: dataset='' is invalid"),
        ({"gates": [{"dataset": "a"}]}, r"gates\[0\]: gate for dataset 'a' checks nothing"),
        (
            {"gates": [{"dataset": "a", "min": {"ndcg10": 0.1}}]},
            r"gates\[0\]: unknown metric 'ndcg10'; allowed: ndcg@K, recall@K",
        ),
        (
            {"gates": [{"dataset": "a", "min": {"ndcg@10": "high"}}]},
            r"gates\[0\]: min\['ndcg@10'\]='high' is invalid; allowed: a finite number",
        ),
        (
            {"gates": [{"dataset": "a", "min": {"ndcg@10": True}}]},
            r"min\['ndcg@10'\]=True is invalid",
        ),
        ({"gates": [{"dataset": "a", "min": [0.7]}]}, r"gates\[0\]: min=\[0\.7\] is invalid"),
        (
            {"gates": [{"dataset": "a", "no_worse_than_best_leg": -0.1}]},
            r"no_worse_than_best_leg=-0\.1 is invalid; allowed: a finite number >= 0",
        ),
        (
            {"gates": [{"dataset": "a", "no_worse_than_best_leg": 0.1, "metric": "p@5"}]},
            r"gates\[0\]: unknown metric 'p@5'",
        ),
        (
            {"gates": [{"dataset": "a", "slice": 2, "min": {"ndcg@10": 0.1}}]},
            r"gates\[0\]: slice=2 is invalid",
        ),
    ],
)
def test_parse_errors(data: Any, pattern: str) -> None:
    with pytest.raises(EvalError, match=pattern):
        parse_gates(data, source="src")


def test_load_gates_file_errors(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match=r"gate file .*missing\.yaml' does not exist"):
        load_gates(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gates: [\n  - dataset: x\n", encoding="utf-8")
    with pytest.raises(EvalError, match=r"bad\.yaml: invalid YAML"):
        load_gates(bad)
    entry = tmp_path / "entry.yaml"
    entry.write_text("gates:\n  - dataset: x\n    min: {ndcg@10: abc}\n", encoding="utf-8")
    with pytest.raises(EvalError, match=r"entry\.yaml: gates\[0\]: min\['ndcg@10'\]='abc'"):
        load_gates(entry)


def test_min_gain_over_another_config() -> None:
    (gate,) = parse_gates(
        {
            "gates": [
                {
                    "dataset": "m",
                    "slice": "*",
                    "min_gain_over": {"lexical": 0.05},
                    "metric": "recall@5",
                }
            ]
        }
    )
    assert gate.min_gain_over == {"lexical": 0.05}
    # all +0.10 and 2hop +0.11 pass; 3hop 0.41 - 0.44 = -0.03 fails
    assert check_gates([gate], "m", TABLE) == [
        "m/3hop: recall@5 0.4100 is -0.0300 over lexical (0.4400); allowed at least +0.0500",
    ]
    loss = Gate("m", min_gain_over={"dense": -0.01}, metric="recall@5")
    assert check_gates([loss], "m", TABLE) == []  # 0.55 vs 0.555: within the allowed loss
    missing = Gate("m", min_gain_over={"hybrid": 0.0}, metric="recall@5")
    assert "needed for min_gain_over" in check_gates([missing], "m", TABLE)[0]
    with pytest.raises(EvalError, match="min_gain_over"):
        parse_gates({"gates": [{"dataset": "m", "min_gain_over": {"hybrid": "x"}}]})
