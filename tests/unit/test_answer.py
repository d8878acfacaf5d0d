"""Abstention features and calibration, and the "why" trail (pure functions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew.compose.answer import (
    EVIDENCE,
    Calibration,
    coverage,
    evidence_features,
    fit_calibration,
    load_calibration,
    why,
)
from clew.errors import ModelError
from clew.types import Contribution, ExpansionPath, GraphTrail, Hit, PathStep


def hit(chunk: str, *contribs: Contribution, **kw: object) -> Hit:
    return Hit(chunk, chunk.split("#")[0], "T", "text", 0.03, {}, tuple(contribs), **kw)  # type: ignore[arg-type]


def test_coverage_is_idf_share() -> None:
    assert coverage({"a": 3.0, "b": 1.0}, {"a"}) == 0.75
    assert coverage({}, {"a"}) == 0.0


def test_evidence_features_use_ranks_not_raw_scores() -> None:
    top = hit(
        "d#0", Contribution("lexical", 1, 12.0, 1 / 61), Contribution("dense", 1, 0.9, 1 / 61)
    )
    ev = evidence_features(
        leg_scores={"lexical": [12.0, 3.0, 2.0, 1.0], "dense": [0.9, 0.5, 0.45, 0.4]},
        leg_top={"lexical": ["d#0", "e#0"], "dense": ["d#0"]},
        hits=[top],
        leg_weights={"lexical": 1.0, "dense": 1.0},
        unit=1 / 61,
        coverages=[0.5, 0.9],
        sentence_overlap=0.3,
    )
    assert ev["fused_top"] == pytest.approx(1.0) and ev["agreement"] == 1.0
    assert ev["coverage"] == 0.5 and ev["coverage3"] == 0.9 and ev["sentence"] == 0.3
    # z-scores do not change when a model scales or shifts its scores
    scaled = evidence_features(
        leg_scores={
            "lexical": [12.0, 3.0, 2.0, 1.0],
            "dense": [x * 10 + 3 for x in (0.9, 0.5, 0.45, 0.4)],
        },
        leg_top={"lexical": ["d#0"], "dense": ["d#0"]},
        hits=[top],
        leg_weights={"lexical": 1.0, "dense": 1.0},
        unit=1 / 61,
        coverages=[0.5],
        sentence_overlap=0.3,
    )
    assert scaled["dense_gap"] == pytest.approx(ev["dense_gap"])
    assert set(ev) == set(EVIDENCE)


def test_threshold_answers_the_target_share(tmp_path: Path) -> None:
    pos = [dict.fromkeys(EVIDENCE, 1.0 + i / 100) for i in range(100)]
    neg = [dict.fromkeys(EVIDENCE, 0.5 + i / 100) for i in range(100)]
    cal = fit_calibration(pos, neg, answer_rate=0.9)
    answered = sum(cal.probability(e) >= cal.threshold for e in pos)
    assert 90 <= answered <= 92  # ties in probability may keep one or two more
    balanced = fit_calibration(pos, neg, answer_rate=None)
    assert balanced.info["balanced_accuracy"] >= cal.info["balanced_accuracy"]
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal.to_json()))
    assert load_calibration(str(path)) == cal


def test_shipped_calibration_loads() -> None:
    cal = load_calibration("")
    assert isinstance(cal, Calibration) and 0 < cal.threshold < 1
    assert cal.info["dataset"] == "six train corpora"
    assert set(cal.info["corpora"]) == {
        "scifact", "nfcorpus", "hotpotqa-train100", "musique-train100", "support", "memory"
    }  # fmt: skip


def test_bad_calibration_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="nope"):
        load_calibration(str(tmp_path / "nope.json"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "clew-abstain/1", "features": ["x"]}))
    with pytest.raises(ModelError, match="clew calibrate"):
        load_calibration(str(other))


def test_why_trail_names_terms_concepts_and_paths() -> None:
    path = ExpansionPath("a#0", 1, (PathStep("LINKS_TO", "b", "b#0"),), 1.0)
    h = hit(
        "b#0",
        Contribution("lexical", 3, 4.0, 1 / 63),
        Contribution("graph", 2, 1.0, 0.15 / 62),
        graph=GraphTrail(("err-4413",), 2, ("retry",)),
        expansion=(path,),
    )
    w = why(h, ["err-4413"], 1)
    kinds = [step["from"] for step in w["trail"]]  # type: ignore[index]
    assert kinds == ["query terms", "linked concepts", "graph expansion"]
    assert w["trail"][1]["edges"][0] == {"edge": "RELATED_TO", "via": ["retry"]}  # type: ignore[index]
    assert w["trail"][2]["edges"][0]["edge"] == "LINKS_TO"  # type: ignore[index]
    assert [c["leg"] for c in w["legs"]] == ["lexical", "graph"]  # type: ignore[union-attr, index]
