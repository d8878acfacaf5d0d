from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from clew.compose.dated import CURRENT_WEIGHT, MEMORY_TIME_FIT
from clew.compose.extract import (
    CONTINUATION_WEIGHT,
    DENSE_WEIGHTS,
    IDENTIFIER_BONUS,
    LEXICAL_WEIGHTS,
    MAX_WORDS,
    Selected,
    Sentence,
    select_sentences,
    split_sentences,
)
from clew.compose.render import answer_text
from clew.errors import QueryError
from clew.protocols import Encoder, Matrix
from clew.testing.fakes import FakeHashEncoder
from clew.types import Hit


def hit(cid: str, text: str, score: float = 1.0) -> Hit:
    return Hit(
        chunk_id=cid,
        doc_id=cid.split("#")[0],
        title="",
        text=text,
        score=score,
        metadata={},
        contributions=(),
    )


def sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


class CountingEncoder:
    """FakeHashEncoder that records every batch it is asked to encode."""

    def __init__(self) -> None:
        self.inner = FakeHashEncoder()
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        return self.inner.encode(texts)


ERRORS = [
    hit(
        "payments#0",
        "ERR-4412 means the card has expired and the retry is skipped. "
        "Payments retry up to three times before giving up.",
    ),
    hit(
        "payments#1",
        "ERR-4413 means the card issuer declined the retry. "
        "Contact the issuer before retrying the payment again.",
    ),
]


# ------------------------------------------------------------------------------------------
# split_sentences


def test_splits_on_terminators_followed_by_whitespace() -> None:
    text = "The pool grows on demand. Why does it shrink? It idles out! Then it is closed."
    assert sentences(text) == [
        "The pool grows on demand.",
        "Why does it shrink?",
        "It idles out!",
        "Then it is closed.",
    ]


def test_offsets_point_into_the_text() -> None:
    text = "  First sentence is here.\n\n  Second sentence is there.  "
    spans = split_sentences(text)
    assert spans == [(2, 25), (29, 54)]
    assert [text[s:e] for s, e in spans] == ["First sentence is here.", "Second sentence is there."]


@pytest.mark.parametrize(
    "text",
    [
        "Retries back off, e.g. two seconds then four.",
        "Use a stable key, i.e. the order id of the payment.",
        "Sync vs. async clients behave the same way here.",
        "See Fig. 3 for the full retry timeline.",
        "Smith et al. measured the same latency drop.",
        "Dr. Rivera approved the change to the pool.",
        "Version v2.3.1 fixed the leak in the pool.",
        "Median latency fell to 3.5 ms after the change.",
        "The pool.max_size setting caps open connections.",
        "Apples, pears, etc. and other fruit were listed.",
        "The county is in the U.S. state of Hawaii.",
        "Haymo of Faversham, O.F.M. was an English friar.",
        "He holds a Doctor of Laws (LL.D.) degree from Cambridge.",
        "Christian Moerlein Brewing Co. is a beer company in Cincinnati.",
        "Pick Me Up! is a British weekly magazine.",
        'The episode "Say What?" is the third of the season.',
        "Incumbent Republican U.S. Senator Orrin Hatch won re-election.",
        "At 12:25 a.m. EST, the weather service issued a warning.",
        'John Bernard "J.B." Handelsman drew for the magazine.',
        "Stanley's brother E.B. White documents the invention.",
        "Haymo of Faversham, O.F.M. (died 1244) was an English friar.",
        "The sonata was composed (c. 1711–16) by Handel in London.",
        "He was Minister General of the Order (1240–c. 1243) in Rome.",
        "The Flute Sonata in D, Op. 94, was completed in 1943.",
        "The figure appears in the survey (Gosson 2015, p. 67) of models.",
        "The Damage, Inc. Tour was a concert tour by Metallica.",
        "It flows through Washington, St. Francois, Ste. Genevieve and Perry counties.",
        "Report a lost laptop to the service desk (ext. 4400) within one hour.",
        "The ridge is long (approx. 3 km) and steep at the top.",
        "Call the service desk on ext. 4400 if the laptop is lost.",
    ],
)
def test_does_not_split_abbreviations_numbers_or_identifiers(text: str) -> None:
    assert sentences(text) == [text]


def test_a_long_aside_still_ends_its_sentences() -> None:
    """Only a short parenthetical holds a ``.`` together: one that closes far away, or after
    another sentence end, has sentences of its own."""
    text = "The town grew fast (the census of 2010. It counted three thousand people and more.)"
    assert sentences(text) == [
        "The town grew fast (the census of 2010.",
        "It counted three thousand people and more.)",
    ]
    text = "Its population was 2,913,123 (2017 est.) Density is 35.1 per sq mi (13.5 / km)."
    assert sentences(text) == [  # the aside closes with the first sentence
        "Its population was 2,913,123 (2017 est.)",
        "Density is 35.1 per sq mi (13.5 / km).",
    ]
    assert sentences("It was dark (see the note. Then it rained.) We left early that night.") == [
        "It was dark (see the note.",
        "Then it rained.)",
        "We left early that night.",
    ]


def test_etc_and_no_end_a_sentence_when_they_should() -> None:
    text = "We logged it, etc. Then we left. The answer is no. See No. 5 for details."
    assert sentences(text) == [
        "We logged it, etc.",
        "Then we left.",
        "The answer is no.",
        "See No. 5 for details.",
    ]


def test_initialisms_and_company_abbreviations_end_a_sentence_before_a_sentence_opener() -> None:
    text = (
        "He moved to the U.S. The next year he left. They sold the Co. Then it closed. "
        "We met at 9 a.m. After that we left. Why did it close? Nobody knows why. "
        "The answer is c. The list ends here."
    )
    assert sentences(text) == [
        "He moved to the U.S.",
        "The next year he left.",
        "They sold the Co.",
        "Then it closed.",
        "We met at 9 a.m.",
        "After that we left.",
        "Why did it close?",
        "Nobody knows why.",
        "The answer is c.",
        "The list ends here.",
    ]


def test_closing_quotes_stay_with_their_sentence() -> None:
    text = 'The log said "card declined." Then the retry stopped.'
    assert sentences(text) == ['The log said "card declined."', "Then the retry stopped."]


def test_markdown_blocks_headings_lists_and_tables() -> None:
    text = (
        "# Retry policy\n"
        "\n"
        "Payments are retried with backoff\n"
        "between attempts. The cap is five tries.\n"
        "\n"
        "## Codes\n"
        "- ERR-4412 is an expired card\n"
        "- the issuer declined the retry\n"
        "  after three attempts\n"
        "2. numbered items work too\n"
        "\n"
        "| code | meaning of the code |\n"
        "|------|:-------------------:|\n"
        "| ERR-4413 | issuer declined |\n"
        "---\n"
        "```\n"
        "pool.max_size = 10\n"
        "```\n"
    )
    assert sentences(text) == [
        "Payments are retried with backoff\nbetween attempts.",
        "The cap is five tries.",
        "ERR-4412 is an expired card",
        "the issuer declined the retry\n  after three attempts",
        "numbered items work too",
        "ERR-4413 | issuer declined",  # the header row names columns: not a sentence
        "pool.max_size = 10",
    ]


def test_short_fragments_dropped_unless_they_hold_an_identifier() -> None:
    text = "Yes. Done now. ERR-4413. See pool_size. The retry was declined."
    assert sentences(text) == ["ERR-4413.", "See pool_size.", "The retry was declined."]


def test_long_sentences_are_cut_into_pieces_of_at_most_max_words() -> None:
    text = " ".join(f"word{i}" for i in range(150)) + "."
    pieces = sentences(text)
    assert len(pieces) == 3
    assert all(len(p.split()) <= MAX_WORDS for p in pieces)
    assert " ".join(pieces) == text


@pytest.mark.parametrize("text", ["", "   \n\n  ", "# Only a heading\n", "|---|---|"])
def test_nothing_to_split(text: str) -> None:
    assert split_sentences(text) == []


# ------------------------------------------------------------------------------------------
# select_sentences


def test_the_sentence_naming_the_asked_identifier_wins() -> None:
    picked = select_sentences("What does ERR-4413 mean?", ERRORS)
    top = picked[0]
    assert top.sentence == Sentence(
        hit_index=1,
        chunk_id="payments#1",
        text="ERR-4413 means the card issuer declined the retry.",
        start=0,
        end=50,
    )
    # "mean" frames the question (what kind of answer), it is not what the answer is about
    assert top.matched_terms == ("err-4413", "err", "4413")
    assert top.parts["identifier"] == pytest.approx(IDENTIFIER_BONUS)
    assert top.parts["term_overlap"] == pytest.approx(LEXICAL_WEIGHTS["term_overlap"])
    assert "cosine" not in top.parts
    # the ERR-4412 sentence shares only "err": a third of the overlap, no bonus
    other = next(s for s in picked if s.sentence.chunk_id == "payments#0")
    assert other.parts["identifier"] == 0.0
    assert other.score < top.score
    assert [s.score for s in picked] == sorted((s.score for s in picked), reverse=True)


def test_parts_sum_to_the_score() -> None:
    for s in select_sentences("What does ERR-4413 mean?", ERRORS, encoder=FakeHashEncoder()):
        assert sum(s.parts.values()) == pytest.approx(s.score)


def test_sentences_without_matching_terms_are_skipped() -> None:
    picked = select_sentences("What does ERR-4413 mean?", ERRORS, max_sentences=10)
    assert all(s.matched_terms for s in picked)
    assert "Payments retry up to three times before giving up." not in [
        s.sentence.text for s in picked
    ]


def test_max_per_hit() -> None:
    hits = [
        hit(
            "a#0",
            "The retry cap is five attempts. The retry delay doubles each time. "
            "A retry never runs after a decline.",
        ),
        hit("b#0", "Each retry is logged with its delay."),
    ]
    picked = select_sentences("retry delay", hits, max_sentences=3, max_per_hit=1)
    assert [s.sentence.hit_index for s in picked] == [0, 1]
    picked = select_sentences("retry delay", hits, max_sentences=3, max_per_hit=2)
    assert sorted(s.sentence.hit_index for s in picked) == [0, 0, 1]


def test_near_duplicate_sentences_are_skipped() -> None:
    hits = [
        hit("a#0", "The issuer declined the card retry today."),
        hit("b#0", "Today the issuer declined the card retry!"),
        hit("c#0", "A declined retry is not attempted again by the issuer."),
    ]
    picked = select_sentences("issuer declined retry", hits, max_sentences=3)
    assert [s.sentence.chunk_id for s in picked] == ["a#0", "c#0"]


def test_ties_broken_by_hit_then_position_and_results_are_deterministic() -> None:
    hits = [hit("a#0", "The delay grows slowly. The delay resets daily. The delay is logged.")]
    first = select_sentences("delay", hits, max_sentences=3, max_per_hit=3)
    assert [s.sentence.start for s in first] == [0, 24, 48]
    again = select_sentences("delay", hits, max_sentences=3, max_per_hit=3)
    assert again == first
    enc = select_sentences("What does ERR-4413 mean?", ERRORS, encoder=FakeHashEncoder())
    assert enc == select_sentences("What does ERR-4413 mean?", ERRORS, encoder=FakeHashEncoder())


def test_earlier_hits_win_ties_through_the_rank_prior() -> None:
    hits = [hit("a#0", "The retry delay doubles."), hit("b#0", "The retry delay grows.")]
    picked = select_sentences("retry delay", hits)
    assert [s.sentence.hit_index for s in picked] == [0, 1]
    assert picked[0].parts["chunk_rank"] == pytest.approx(2 * picked[1].parts["chunk_rank"])


def test_idf_weights_the_overlap() -> None:
    hits = [
        hit("a#0", "The payment settles overnight in batches."),
        hit("b#0", "A chargeback reverses the settled funds."),
    ]
    plain = select_sentences("payment chargeback", hits)
    assert plain[0].sentence.chunk_id == "a#0"  # equal overlap, the rank prior decides
    weighted = select_sentences("payment chargeback", hits, idf={"payment": 0.2, "chargeback": 3.0})
    assert weighted[0].sentence.chunk_id == "b#0"
    assert weighted[0].parts["term_overlap"] == pytest.approx(
        LEXICAL_WEIGHTS["term_overlap"] * 3.0 / 3.2
    )


def test_encoder_path_uses_one_batched_call() -> None:
    encoder = CountingEncoder()
    assert isinstance(encoder, Encoder)
    picked = select_sentences("What does ERR-4413 mean?", ERRORS, encoder=encoder)
    assert len(encoder.calls) == 1
    batch = encoder.calls[0]
    assert batch[0] == "What does ERR-4413 mean?"
    assert len(batch) == 1 + sum(len(split_sentences(h.text)) for h in ERRORS)
    top = picked[0]
    assert top.sentence.text == "ERR-4413 means the card issuer declined the retry."
    assert set(top.parts) == {"term_overlap", "cosine", "chunk_rank", "identifier", "answer_type"}
    assert 0.0 < top.parts["cosine"] <= DENSE_WEIGHTS["cosine"]
    assert top.parts["term_overlap"] == pytest.approx(DENSE_WEIGHTS["term_overlap"])


class ConstantEncoder:
    """Every text gets the same unit vector: cosine 1 everywhere (or 0 with ``orthogonal``)."""

    def __init__(self, orthogonal: bool = False) -> None:
        self.orthogonal = orthogonal

    def encode(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[:, 0] = 1.0
        if self.orthogonal:
            out[1:] = np.array([0.0, 1.0], dtype=np.float32)
        return out


def test_encoder_can_select_a_sentence_with_no_term_overlap() -> None:
    hits = [hit("a#0", "Issuer declines are final for the card.")]
    assert select_sentences("refund window", hits) == []
    picked = select_sentences("refund window", hits, encoder=ConstantEncoder())
    assert len(picked) == 1
    assert picked[0].matched_terms == ()
    assert picked[0].parts["cosine"] == pytest.approx(DENSE_WEIGHTS["cosine"])
    assert picked[0].parts["term_overlap"] == 0.0
    # no overlap and no positive cosine: skipped, whatever the rank prior says
    assert select_sentences("refund window", hits, encoder=ConstantEncoder(True)) == []


def test_min_score() -> None:
    picked = select_sentences("What does ERR-4413 mean?", ERRORS, min_score=1.0)
    assert [s.sentence.hit_index for s in picked] == [1]
    assert select_sentences("What does ERR-4413 mean?", ERRORS, min_score=5.0) == []


def test_empty_inputs() -> None:
    assert select_sentences("What does ERR-4413 mean?", []) == []
    assert select_sentences("anything", [hit("a#0", ""), hit("b#0", "# Heading")]) == []
    assert select_sentences("", ERRORS) == []
    assert select_sentences("the of and", ERRORS) == []  # only stop words
    assert select_sentences("What does ERR-4413 mean?", ERRORS, max_sentences=0) == []
    encoder = CountingEncoder()
    assert select_sentences("retry", [hit("a#0", "")], encoder=encoder) == []
    assert encoder.calls == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_sentences": -1}, "max_sentences"),
        ({"max_per_hit": 0}, "max_per_hit"),
        ({"min_score": float("nan")}, "min_score"),
    ],
)
def test_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        select_sentences("retry", ERRORS, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# answer_text


def _selected(hit_index: int, text: str) -> Selected:
    return Selected(Sentence(hit_index, f"c#{hit_index}", text, 0, len(text)), 1.0, {}, ())


def test_answer_text_formats_a_paragraph_with_citations() -> None:
    selected = [_selected(1, "ERR-4413 means a decline."), _selected(0, "Retries stop after it.")]
    assert (
        answer_text(selected, {0: 2, 1: 1})
        == "ERR-4413 means a decline. [1] Retries stop after it. [2]"
    )
    assert answer_text([], {}) == ""


def test_answer_text_end_to_end() -> None:
    picked = select_sentences("What does ERR-4413 mean?", ERRORS, max_sentences=1)
    assert answer_text(picked, {0: 1, 1: 2}) == (
        "ERR-4413 means the card issuer declined the retry. [2]"
    )


def test_answer_text_missing_citation() -> None:
    with pytest.raises(QueryError, match="no citation number for hit 1"):
        answer_text([_selected(1, "A sentence here.")], {0: 1})


def test_a_sentence_that_goes_on_from_a_chosen_one_follows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ "She came from Deliveroo." says where Sofia worked, though it names none of the
    question's terms: it goes on from the chosen sentence (the next one, opening with a
    pronoun), which outweighs another hit's sentence that says one more question term
    ("joined")."""
    hits = [
        hit(
            "a#0",
            "My manager at work is Sofia Mendes, Head of Product Analytics. "
            "She came from Deliveroo. The office has a rooftop garden.",
        ),
        hit("b#0", "Sofia Mendes joined the Bristol office."),
    ]
    question = "Where did Sofia Mendes work before she joined Crumb?"

    def picks() -> list[str]:
        chosen = select_sentences(question, hits, encoder=ConstantEncoder(), max_sentences=2)
        return [s.sentence.text for s in chosen]

    first, second = select_sentences(question, hits, encoder=ConstantEncoder(), max_sentences=2)
    assert first.sentence.text.startswith("My manager at work is Sofia Mendes")
    assert second.sentence.text == "She came from Deliveroo."
    assert second.parts["continues"] == pytest.approx(CONTINUATION_WEIGHT)
    assert second.score == pytest.approx(sum(second.parts.values()))
    assert "continues" not in first.parts
    monkeypatch.setattr("clew.compose.extract.CONTINUATION_WEIGHT", 0.0)
    assert picks()[1] == "Sofia Mendes joined the Bristol office."
    # only a pronoun goes on: the same sentence without one is judged on its own
    hits[0] = hit("a#0", hits[0].text.replace("She came", "Deliveroo came first; she came"))
    monkeypatch.setattr("clew.compose.extract.CONTINUATION_WEIGHT", 0.2)
    assert picks()[1] == "Sofia Mendes joined the Bristol office."


def test_a_definition_is_not_matched_by_its_frame_word_or_a_comparison() -> None:
    """'E104 is different from E105, which means …' says "means" and "E104 is", but defines
    E105, not E104: the heading that says what E104 is goes first, and the sentence under it
    goes on from it."""
    hits = [
        hit(
            "e104#1",
            "If E104 persists for more than 15 minutes, call support. "
            "E104 is different from E105, which means the provider has suspended your account.",
        ),
        replace(
            hit(
                "e104#0",
                "# E104: Upstream link lost\n\n"
                "The modem lost its connection to the network. The status light blinks amber.",
            ),
            title="E104: Upstream link lost",
        ),
    ]
    picked = select_sentences("What does E104 mean?", hits, encoder=ConstantEncoder())
    assert [s.sentence.text for s in picked[:2]] == [
        "E104: Upstream link lost",
        "The modem lost its connection to the network.",
    ]
    assert all("mean" not in s.matched_terms for s in picked)
    assert picked[1].parts["continues"] == pytest.approx(CONTINUATION_WEIGHT)


def test_a_lead_in_comes_with_the_item_it_introduces_or_not_at_all() -> None:
    """ "… relies on session state:" alone is a fragment: the list item after it goes on from
    it and follows it directly; when the item is not chosen, neither is the lead-in."""
    runbook = hit(
        "runbook#1",
        "Transaction pooling breaks anything that relies on session state:\n\n"
        "- SET statements, advisory locks, LISTEN and temp tables.\n"
        "- Prepared statements on the server side.\n",
    )
    other = hit("catalog#3", "Pool exhaustion under transaction pooling hits every service.")
    question = "what breaks under transaction pooling"
    picked = select_sentences(question, [runbook, other], encoder=ConstantEncoder())
    texts = [s.sentence.text for s in picked]
    lead = texts.index("Transaction pooling breaks anything that relies on session state:")
    assert texts[lead + 1] == "SET statements, advisory locks, LISTEN and temp tables."
    assert picked[lead + 1].parts["continues"] == pytest.approx(CONTINUATION_WEIGHT)
    # one sentence only: the lead-in cannot bring its item, so it is left out
    alone = select_sentences(question, [runbook, other], encoder=ConstantEncoder(), max_sentences=1)
    assert [s.sentence.text for s in alone] == []
    # a lead-in to a table introduces no text sentence after the table
    table = hit(
        "limits#0",
        "Transaction pooling breaks anything that relies on session state:\n\n"
        "| feature | under transaction pooling |\n|---|---|\n"
        "| LISTEN and NOTIFY | never delivered |\n\n"
        "Session advisory locks were removed in March.",
    )
    picked = select_sentences(
        question, [table], encoder=ConstantEncoder(), max_sentences=3, max_per_hit=3
    )
    texts = [s.sentence.text for s in picked]
    # the row was the best pick; the lead-in, chosen after it, stands right before it
    assert texts == [
        "Transaction pooling breaks anything that relies on session state:",
        "feature: LISTEN and NOTIFY; under transaction pooling: never delivered",
        "Session advisory locks were removed in March.",
    ]
    assert picked[2].parts["continues"] == 0.0  # the table, not this, follows the lead-in


class KeyedEncoder:
    """The question (the first text) is [1, 0]; a text holding one of ``near`` gets cosine
    ``cosine`` with it, any other text 0.1 (unit vectors, so dot product = cosine)."""

    def __init__(self, near: Sequence[str], cosine: float) -> None:
        self.near, self.cosine = tuple(near), cosine

    def encode(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[0] = [1.0, 0.0]
        for i, text in enumerate(texts[1:], start=1):
            c = self.cosine if any(n in text for n in self.near) else 0.1
            out[i] = [c, float(np.sqrt(1.0 - c * c))]
        return out


def test_a_sentence_that_says_none_of_the_question_needs_a_close_meaning_to_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the channel sentence, "Check the coax cable" (no question term, cosine 0.1) is
    padding from another topic: the answer stops; a sentence as unmatched but close in meaning
    ("Busy blocks …", cosine 0.5) may follow."""
    hits = [
        hit("wifi#0", "Pin channel 1, 6 or 11 in a crowded block of flats."),
        hit("modem#0", "Check that the coax cable is screwed in at both ends."),
    ]
    question = "Which wifi channel should I pick?"
    picked = select_sentences(question, hits, encoder=KeyedEncoder(["Pin"], 0.6))
    assert [s.sentence.chunk_id for s in picked] == ["wifi#0"]
    close = KeyedEncoder(["Pin", "coax"], 0.5)
    assert [s.sentence.chunk_id for s in select_sentences(question, hits, encoder=close)] == [
        "wifi#0",
        "modem#0",
    ]
    monkeypatch.setattr("clew.compose.extract.MIN_UNMATCHED_COSINE", 0.0)
    picked = select_sentences(question, hits, encoder=KeyedEncoder(["Pin"], 0.6))
    assert [s.sentence.chunk_id for s in picked] == ["wifi#0", "modem#0"]
    # without an encoder there is no cosine to ask for: the floor does not apply
    monkeypatch.setattr("clew.compose.extract.MIN_UNMATCHED_COSINE", 0.15)
    assert len(select_sentences("Which channel should I pick?", hits)) == 1  # no term: skipped


def _memory(cid: str, text: str, day: str) -> Hit:
    return replace(hit(cid, text), metadata={"kind": "memory", "created_at": f"{day}T09:15:00Z"})


def test_a_time_question_over_memories_is_answered_by_when_the_memory_was_said() -> None:
    """'when did I switch to the payments team': the memory that says so holds no date, the
    one that holds a date is about something else. Each memory's own time fits the asked type
    (a date in the text fits more), so the terms decide; as plain documents, without times of
    their own, the dated sentence went first."""
    hits = [
        _memory("m1", "The payments team cutover is planned for June 21.", "2026-05-28"),
        _memory("m2", "Work update: I switch teams, I'm on the payments team now.", "2026-04-20"),
    ]  # fmt: skip
    question = "when did I switch to the payments team"
    picked = select_sentences(question, hits, max_sentences=1)
    assert [s.sentence.chunk_id for s in picked] == ["m2"]
    assert picked[0].parts["answer_type"] == pytest.approx(0.25 * MEMORY_TIME_FIT)
    plain = [replace(h, metadata={}) for h in hits]
    assert [s.sentence.chunk_id for s in select_sentences(question, plain, max_sentences=1)] == [
        "m1"
    ]
    # not a time question: a memory's time changes nothing
    other = "which team am I on"
    assert select_sentences(other, hits) == select_sentences(other, plain)


def test_the_answer_shows_the_day_a_memory_was_said_before_its_sentences() -> None:
    picked = select_sentences(
        "when did I switch teams",
        [_memory("m2", "Work update: I switched teams. I'm on payments now.", "2026-04-20")],
    )
    text = answer_text(picked, {0: 1}, {0: "2026-04-20"})
    assert text.startswith("2026-04-20: Work update: I switched teams. [1]")
    assert answer_text(picked, {0: 1}).startswith("Work update: I switched teams. [1]")


def test_a_question_about_now_prefers_the_newer_memory() -> None:
    """'Where do I live now?': the newest memory that says so goes first (its ``newer`` part,
    1 for the newest day, 0 for the oldest); without 'now' the earlier hit does. Documents
    have no day: nothing changes for them."""
    hits = [
        _memory("old", "I live in a flat in Easton with two housemates.", "2025-09-15"),
        _memory("mid", "My sister visited the flat in Easton.", "2025-10-01"),
        _memory("new", "Since the move I live in Bedminster.", "2026-01-20"),
    ]
    now = select_sentences("Where do I live now?", hits, max_sentences=1)
    assert [s.sentence.chunk_id for s in now] == ["new"]
    assert now[0].parts["newer"] == pytest.approx(CURRENT_WEIGHT)
    assert select_sentences("Where do I live?", hits)[0].sentence.chunk_id == "old"
    plain = [replace(h, metadata={}) for h in hits]
    first = select_sentences("Where do I live now?", plain, max_sentences=1)
    assert first[0].sentence.chunk_id == "old" and "newer" not in first[0].parts
