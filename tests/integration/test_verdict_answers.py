"""Yes/no verdicts in answers end to end, and which abstention fit an engine reads: the one
with cosines for the embedder it was fitted with, the portable one for any other. FAKE hash
encoder (fast) unless the real sample index is asked for."""

from __future__ import annotations

from pathlib import Path

from clew import Document, Engine
from clew.config import EngineConfig

PEOPLE = [
    Document(
        "nolan",
        "Christopher Nolan",
        "Christopher Nolan is an English-American film director and producer.",
        "nolan",
    ),
    Document(
        "kalathil",
        "Sathish Kalathil",
        "Sathish Kalathil is an Indian film and documentary director. He lives in Kerala.",
        "kalathil",
    ),
    Document(
        "cziffra",
        "Géza von Cziffra",
        "Géza von Cziffra was an Austro-Hungarian screenwriter. He wrote over eighty scripts.",
        "cziffra",
    ),
]
OPEN = EngineConfig().with_overrides(answer={"abstain": False})


def test_a_yes_no_question_about_two_subjects_gets_a_verdict(fake_engine: Engine) -> None:
    fake_engine.ingest(PEOPLE)
    yes = fake_engine.ask(
        "Are Christopher Nolan and Sathish Kalathil both film directors?", config=OPEN
    )
    assert yes.verdict == "yes" and yes.answer.startswith("Yes. ")
    assert {c.doc_id for c in yes.citations} == {"nolan", "kalathil"}
    assert "film, director" in yes.verdict_reason
    assert yes.to_dict()["verdict"] == "yes"
    no = fake_engine.ask(
        "Are Christopher Nolan and Géza von Cziffra both film directors?", config=OPEN
    )
    assert no.verdict == "no" and no.answer.startswith("No. ")
    assert "Géza von Cziffra" in no.verdict_reason
    other = fake_engine.ask("Is Christopher Nolan a film director?", config=OPEN)
    assert other.verdict is None and not other.answer.startswith(("Yes", "No"))


def test_an_injected_encoder_reads_the_portable_fit(fake_engine: Engine) -> None:
    fit = fake_engine._calibration("")
    assert not fit.reads_cosines
    fake_engine.ingest(PEOPLE)
    answer = fake_engine.ask("Who is Christopher Nolan?")
    assert answer.threshold == fit.threshold


def test_the_shipped_embedder_reads_the_fit_with_cosines(sample_index: Path) -> None:
    with Engine(sample_index) as engine:
        fit = engine._calibration("")
        assert fit.reads_cosines and fit.embedder == engine.embedder_name
        assert fit.portable is not None and not fit.portable.reads_cosines
        answer = engine.ask("What does ERR-4413 mean?")
        assert not answer.abstained and answer.threshold == fit.threshold
        assert answer.evidence["dense_top"] > 0 and answer.evidence["sentence_cosine"] > 0
