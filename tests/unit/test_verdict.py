"""Yes/no verdicts on questions about two named subjects, from the sentences that name them."""

from __future__ import annotations

import pytest

from clew.compose.extract import yes_no
from clew.compose.render import answer_text
from clew.compose.verdict import subjects, verdict
from clew.types import Hit


def hit(cid: str, title: str, text: str) -> Hit:
    return Hit(cid, cid.split("#")[0], title, text, 1.0, {}, ())


NOLAN = hit("nolan#0", "Christopher Nolan", "Christopher Nolan is an English film director.")
KALATHIL = hit(
    "kalathil#0",
    "Sathish Kalathil",
    "Sathish Kalathil is an Indian film and documentary director. He lives in Kerala.",
)
CZIFFRA = hit("cziffra#0", "Géza von Cziffra", "He was an Austro-Hungarian screenwriter.")


@pytest.mark.parametrize(
    ("question", "want"),
    [
        (
            "Are Christopher Nolan and Sathish Kalathil both film directors?",
            ("Christopher Nolan", "Sathish Kalathil"),
        ),
        (
            "Are both magazines, the Woman's Viewpoint and Pick Me Up, British publications?",
            ("Woman's Viewpoint", "Pick Me Up"),
        ),
        (
            "Are Frozen and Escape from the Dark both animated features?",
            ("Frozen", "Escape from the Dark"),
        ),
        ("Are Nantong and Jingdezhen situated in the same province?", ("Nantong", "Jingdezhen")),
        ("Is ERR-4412 retryable?", ()),
        ("Is the ledger up and running?", ()),
    ],
)
def test_subjects_are_the_names_either_side_of_and(question: str, want: tuple[str, ...]) -> None:
    assert subjects(question) == want


def test_yes_when_every_subject_is_said_to_be_it() -> None:
    got = yes_no(
        "Are Christopher Nolan and Sathish Kalathil both film directors?", [NOLAN, KALATHIL]
    )
    assert got is not None
    found, grounds = got
    assert found.word == "yes" and found.text == "Yes."
    assert found.subjects == ("Christopher Nolan", "Sathish Kalathil")
    assert [g.sentence.chunk_id for g in grounds] == ["nolan#0", "kalathil#0"]
    assert "film" in grounds[0].matched_terms
    text = answer_text(grounds, {0: 1, 1: 2})
    assert text.startswith("Christopher Nolan is an English film director. [1]")


def test_no_when_one_subject_lacks_a_predicate_term() -> None:
    # Cziffra's hit says screenwriter, not director: its first sentence is read for its title
    got = yes_no(
        "Are Christopher Nolan and Géza von Cziffra both film directors?", [NOLAN, CZIFFRA]
    )
    assert got is not None
    assert got[0].word == "no"
    assert "Géza von Cziffra" in got[0].reason


def test_no_verdict_without_evidence_for_every_subject_or_for_one_subject() -> None:
    assert yes_no("Are Christopher Nolan and Greta Gerwig both film directors?", [NOLAN]) is None
    assert yes_no("Is Christopher Nolan a film director?", [NOLAN]) is None
    assert yes_no("Who is Christopher Nolan?", [NOLAN]) is None


def test_same_is_no_only_when_nothing_is_shared() -> None:
    q = "Are Nantong and Jingdezhen situated in the same province?"
    apart = ["Nantong is a city in Jiangsu.", "Jingdezhen is a city in Jiangxi."]
    found = verdict(q, apart, firsts=[True, True], titles=["Nantong", "Jingdezhen"])
    assert found is not None and found.word == "no" and found.evidence == (0, 1)
    shared = ["Nantong is a city in Jiangsu, China.", "Jingdezhen is a city in Jiangxi, China."]
    assert verdict(q, shared, firsts=[True, True], titles=["Nantong", "Jingdezhen"]) is None
    with pytest.raises(ValueError, match="as long"):
        verdict(q, apart, firsts=[True], titles=["Nantong", "Jingdezhen"])
