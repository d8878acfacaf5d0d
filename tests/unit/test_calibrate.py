"""Calibration across corpora and from off-topic questions, on small made-up evidence."""

from __future__ import annotations

import json

import pytest

from clew.compose.answer import COSINE_EVIDENCE, EVIDENCE, Calibration
from clew.compose.offtopic import offtopic_threshold
from clew.errors import ClewError, ConfigError, ModelError
from clew.train.calibrate import fit_across, rates


def ev(strength: float) -> dict[str, float]:
    return {f: strength for f in EVIDENCE}


def corpus(answerable: list[float], unrelated: list[float]) -> dict[str, list[dict[str, float]]]:
    return {
        "answerable": [ev(x) for x in answerable],
        "hidden": [ev(0.5)],
        "unrelated": [ev(x) for x in unrelated],
    }


EASY = corpus([0.8 + i / 100 for i in range(10)], [0.1 + i / 100 for i in range(10)])
HARD = corpus([0.4 + i / 100 for i in range(10)], [0.05 + i / 100 for i in range(10)])
MIDDLE = corpus([0.6 + i / 100 for i in range(10)], [0.1 + i / 100 for i in range(10)])


def test_the_median_corpus_answers_the_share_asked() -> None:
    corpora = {"easy": EASY, "hard": HARD, "middle": MIDDLE}
    cal = fit_across(corpora, answer_rate=0.9)
    cuts = []
    for c in corpora.values():
        probs = sorted(cal.probability(e) for e in c["answerable"])
        cuts.append(probs[1])  # answers 9 of 10
    assert cal.threshold == pytest.approx(sorted(cuts)[1])
    lowest = fit_across(corpora, answer_rate=0.9, rule="min")
    assert lowest.threshold == pytest.approx(min(cuts))
    assert all(rates(lowest, c)["answered"] >= 0.9 for c in corpora.values())
    assert rates(cal, HARD)["answered"] < 0.9 <= rates(cal, EASY)["answered"]
    assert rates(cal, EASY)["abstained_unrelated"] == 1.0
    assert set(cal.info["corpora"]) == set(corpora)
    with pytest.raises(ConfigError, match="rule"):
        fit_across(corpora, rule="max")


def test_offtopic_threshold_is_a_quantile_with_a_cap() -> None:
    cal = fit_across({"easy": EASY, "hard": HARD})
    low = [ev(0.05 + i / 200) for i in range(10)]
    t = offtopic_threshold(cal, low, quantile=0.7, cap=0.99)
    probs = sorted(cal.probability(e) for e in low)
    assert probs[5] <= t <= probs[7]
    assert sum(cal.probability(e) < t for e in low) == 7
    assert offtopic_threshold(cal, [ev(0.99)] * 3, cap=0.4) == 0.4
    with pytest.raises(ConfigError, match="off-topic"):
        offtopic_threshold(cal, [])


def test_a_calibration_that_reads_cosines_holds_for_its_own_embedder_only() -> None:
    corpora = {"easy": EASY, "hard": HARD}
    portable_features = [f for f in EVIDENCE if f not in COSINE_EVIDENCE]
    portable = fit_across(corpora, features=portable_features, info={"embedder": "mini"})
    cal = fit_across(corpora, info={"embedder": "mini"})
    both = Calibration(cal.model, cal.threshold, portable)
    assert both.reads_cosines and not portable.reads_cosines
    assert both.for_embedder("mini") is both
    assert both.for_embedder("another-model") is portable
    assert both.without_cosines() is portable
    assert portable.for_embedder("another-model") is portable
    # a file round trip keeps the portable fit; one without it (older files) still loads
    again = Calibration.from_json(json.loads(json.dumps(both.to_json())), "test")
    assert again.portable is not None and again.portable.model.features == portable.model.features
    assert again.for_embedder("another-model").threshold == pytest.approx(portable.threshold)
    alone = Calibration.from_json(portable.to_json(), "test")
    assert alone.portable is None and alone.for_embedder("another-model") is alone
    bad = {**both.to_json(), "portable": both.to_json()}
    with pytest.raises(ModelError, match="portable fit must not read cosine"):
        Calibration.from_json(bad, "test")


def test_each_scope_has_its_own_calibration_file() -> None:
    from clew.engine import CALIBRATION_FILE, calibration_file

    assert calibration_file(None) == CALIBRATION_FILE
    tenant_a = calibration_file({"tenant": "a"})
    assert tenant_a.startswith("calibration-scope-") and tenant_a.endswith(".json")
    # the name is the scope's, not its spelling: key order and the parsed form agree
    both = {"tenant": "a", "audience": "sre"}
    assert calibration_file(both) == calibration_file(dict(reversed(list(both.items()))))
    assert tenant_a not in (calibration_file({"tenant": "b"}), calibration_file(both))
    with pytest.raises(ClewError, match=r"\$nope"):
        calibration_file({"tenant": {"$nope": 1}})
