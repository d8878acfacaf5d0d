"""Answers that read as prose: markdown rendered, tables as column: value, the question's type
steering which sentence comes first, a word budget, and the bridge to a second hop."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clew.compose.clean import plain, split_cells, table_row
from clew.compose.extract import select_sentences
from clew.compose.question import classify, names, type_match
from clew.compose.render import answer_text
from clew.errors import QueryError
from clew.types import ExpansionPath, Hit, PathStep


def hit(cid: str, text: str) -> Hit:
    return Hit(cid, cid.split("#")[0], "", text, 1.0, {}, ())


# -- plain text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("**VX-220** is down", "VX-220 is down"),
        ("see [CHG-1187](chg-1187-pgbouncer-migration.md) first", "see CHG-1187 first"),
        ("set `pool.max_size` to 10", "set pool.max_size to 10"),
        ("the `*not emphasis*` stays", "the *not emphasis* stays"),
        ("max_size and snake_case_name stay", "max_size and snake_case_name stay"),
        ("an _emphasised_ word and ~~struck~~ text", "an emphasised word and struck text"),
        ("a cut `code span", "a cut code span"),
        ("<b>bold</b> &amp; ![diagram](d.png)", "bold & diagram"),
        (r"escaped \*stars\* stay", "escaped *stars* stay"),
        ("see <https://example.org/a>", "see https://example.org/a"),
        ("a\n  soft   wrap", "a soft wrap"),
    ],
)
def test_plain_renders_inline_markdown(raw: str, want: str) -> None:
    assert plain(raw) == want


def test_table_row_pairs_columns_with_the_header() -> None:
    header = split_cells("| Code | Retry? | Key to use |")
    row = split_cells("| ERR-4413 | After `Retry-After` | Same key |")
    assert (
        table_row(header, row) == "Code: ERR-4413; Retry?: After Retry-After; Key to use: Same key"
    )
    assert table_row(None, ["a", "", "b"]) == "a; b"
    assert split_cells("| `a|b` | c \\| d |") == ["`a|b`", "c | d"]


def test_answer_sentences_are_plain_and_tables_read_by_column() -> None:
    text = (
        "## Depots\n\n"
        "| Depot | City | Status |\n"
        "|---|---|---|\n"
        "| Lapa | Porto | **Degraded** |\n"
        "| Baixa | Lisbon | Open |\n\n"
        "The [Lapa depot](lapa.md) is `degraded` since the flood.\n"
    )
    picked = select_sentences("Which depot in Porto is degraded?", [hit("d#0", text)])
    shown = [s.sentence.text for s in picked]
    assert "Depot: Lapa; City: Porto; Status: Degraded" in shown
    assert "The Lapa depot is degraded since the flood." in shown
    assert not any(c in t for t in shown for c in "*`[]|")
    row = next(s for s in picked if s.sentence.kind == "row")
    assert answer_text([row], {0: 1}) == "Depot: Lapa; City: Porto; Status: Degraded. [1]"


# -- question types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "kind", "subject"),
    [
        ("What does ERR-4413 mean?", "definition", "ERR-4413"),
        ("what is pgbouncer", "definition", "pgbouncer"),
        ("How long is an idempotency key kept?", "duration", ""),
        ("how many days until my customer gets their money back", "duration", ""),
        ("How many retries are allowed?", "quantity", ""),
        ("When did the migration start?", "time", ""),
        ("In what year was the club formed?", "time", ""),
        ("Who wrote the runbook?", "person", ""),
        ("The show was written by who?", "person", ""),
        ("Toad Hall is in a university located in what Australian city?", "entity", ""),
        ("Where is the ledger hosted?", "place", ""),
        ("how do I pause collection", "procedure", ""),
        ("how did the outage end", "other", ""),
        ("Is ERR-4412 retryable?", "yesno", ""),
        ("Which is older, Lapa or Baixa?", "comparison", ""),
        ("why were merchant webhooks delayed", "reason", ""),
        ("pgbouncer", "other", ""),
        ("SW-2207", "definition", "SW-2207"),
        ("SW-2209 error", "definition", "SW-2209"),
        ("BAT_CELL_IMBAL", "definition", "BAT_CELL_IMBAL"),
        ("what is error SW-5120", "definition", "SW-5120"),
        ("getting SW-3002 every time I scan a bike", "other", ""),
        # a wh-word that opens a clause asks nothing: "when I scan", "where I found my dog"
        ("getting SW-3002 when I scan", "other", ""),
        ("the name of the rescue centre where I found my dog?", "other", ""),
        ("Kate Ramsay is a character created by who?", "person", ""),
        # a yes/no question after a statement
        ("BAT_HIGH_TEMP pack, can I put it in the van?", "yesno", ""),
        ("dock shows DK-19 after a firmware push, should I power cycle it", "yesno", ""),
        ("Hauler battery swap, do both packs have to be changed?", "yesno", ""),
        ("new dock firmware, is it 4.12.3 or 4.13.0?", "comparison", ""),
    ],
)
def test_question_types(question: str, kind: str, subject: str) -> None:
    assert classify(question).kind == kind
    assert classify(question).subject == subject


def test_type_match_needs_a_span_the_question_does_not_say() -> None:
    q = "How long is an idempotency key kept?"
    assert type_match("duration", "Kept for 24 hours after the first request.", q) == 1.0
    assert type_match("duration", "The key may be reused after that.", q) == 0.0
    assert type_match("time", "It shipped on 2026-02-18.", "When did it ship?") == 1.0
    assert type_match("time", "It shipped in 2026.", "Did it ship in 2026?") == 0.0
    define = "What does ERR-4413 mean?"
    assert type_match("definition", "ERR-4413: Idempotency key in use", define, "ERR-4413") == 1.0
    assert type_match("definition", "ERR-4413 means the key is in use", define, "ERR-4413") == 1.0
    assert type_match("definition", "Retry after ERR-4413 clears", define, "ERR-4413") == 0.0
    assert type_match("definition", "ERR-4413 is a conflict error", define, "ERR-4413") == 1.0
    for said in ("is different from ERR-4412", "is not retried", "is also logged"):
        assert type_match("definition", f"ERR-4413 {said}", define, "ERR-4413") == 0.0
    assert names("The band Rush was formed in Toronto by Geddy Lee's friends.") == [
        "Rush",
        "Toronto",
        "Geddy Lee",
    ]


def test_a_definition_question_is_answered_by_its_heading() -> None:
    text = (
        "## ERR-4413: Idempotency key in use (HTTP 409)\n\n"
        "A request with this key is still being processed. Retry ERR-4413 after a pause.\n"
    )
    picked = select_sentences("What does ERR-4413 mean?", [hit("e#6", text)])
    assert picked[0].sentence.kind == "heading"
    assert picked[0].sentence.text == "ERR-4413: Idempotency key in use (HTTP 409)"
    # a heading is no answer to a question that is not asking for a definition, even one
    # that holds a span of the asked type (a name, a date)
    for question in ("When was ERR-4413 retried?", "Which key is in use?"):
        other = select_sentences(question, [hit("e#6", text)])
        assert all(s.sentence.kind != "heading" for s in other)
    dated = "## Choosing a Wi-Fi channel (2026-02-18)\n\nPin channel 1, 6 or 11 on 2.4 GHz.\n"
    for question in ("Which Wi-Fi channels should I use?", "When did the channel rules change?"):
        picked = select_sentences(question, [hit("w#0", dated)])
        assert [s.sentence.kind for s in picked] == ["text"]


def test_a_hit_titled_by_the_code_asked_about_is_defined_by_its_first_sentence() -> None:
    titled = Hit(
        "kb-47#0",
        "kb-47",
        "SW-2207: Vehicle not responding",
        "The app sent the unlock command but the vehicle did not confirm within 20 seconds. "
        "If SW-2207 repeats, move closer and try again.",
        1.0,
        {},
        (),
    )
    mention = hit("kb-9#0", "The two you are most likely to see are SW-2207 and SW-3002.")
    for question in ("SW-2207", "What does SW-2207 mean?"):
        picked = select_sentences(question, [mention, titled], max_sentences=1)
        assert picked[0].sentence.text.startswith("The app sent the unlock command")
        assert picked[0].parts["answer_type"] > 0 and picked[0].parts["identifier"] > 0
    # only the first sentence of the titled hit stands in for its title
    later = select_sentences("SW-2207", [titled], max_sentences=2)
    assert [s.parts["answer_type"] > 0 for s in later] == [True, False]


def test_a_duration_question_gets_the_sentence_with_a_duration_first() -> None:
    hits = [
        hit("glossary#3", "An idempotency key is a value you send so a retried request runs once."),
        hit("idem#1", "Idempotency keys are kept for 24 hours."),
    ]
    picked = select_sentences("How long is an idempotency key kept?", hits)
    assert picked[0].sentence.text == "Idempotency keys are kept for 24 hours."
    assert picked[0].parts["answer_type"] > 0


def test_the_word_budget_and_the_repeat_check() -> None:
    hits = [
        hit(
            "a#0", "Keys are kept for 24 hours. Keys are kept for 24 hours after the first request."
        ),
        hit("b#0", " ".join(["Keys"] + ["word"] * 40) + " are kept."),
    ]
    picked = select_sentences("how long are keys kept", hits, max_words=20)
    assert [s.sentence.text for s in picked] == ["Keys are kept for 24 hours."]
    with pytest.raises(QueryError, match="max_words"):
        select_sentences("keys", hits, max_words=0)


def test_the_second_sentence_bridges_to_the_second_hop() -> None:
    hits = [
        hit("toad#0", "Toad Hall is a residential hall in Australian National University."),
        hit("other#0", "University Hall is a residential hall at a university in Hong Kong."),
        hit("anu#0", "The Australian National University is located in Canberra."),
    ]
    q = "Toad Hall is a residential hall in a university located in what city?"
    picked = select_sentences(q, hits, max_sentences=2)
    assert [s.sentence.chunk_id for s in picked] == ["toad#0", "anu#0"]
    assert picked[1].parts["bridge"] > 0
    assert sum(picked[1].parts.values()) == pytest.approx(picked[1].score)


def test_a_hit_titled_by_the_bridge_name_is_the_second_hop_and_short_questions_do_not_chain() -> (
    None
):
    ward = Hit(
        "ward#0", "ward", "M. Ward", "Matthew Stephen Ward is a songwriter from Portland, "
        "Oregon.", 1.0, {}, ()
    )  # fmt: skip
    hits = [
        hit("album#0", "Transfiguration of Vincent is the third studio album by M. Ward."),
        hit("other#0", "We Move is the third studio album by an Irish band."),
        ward,
    ]
    q = "Transfiguration of Vincent is the third album by a songwriter from what state?"
    picked = select_sentences(q, hits, max_sentences=2)
    assert [s.sentence.chunk_id for s in picked] == ["album#0", "ward#0"]
    assert picked[1].parts["bridge"] > 0
    short = select_sentences("Which album did M. Ward make third?", hits, max_sentences=2)
    assert all(s.parts.get("bridge", 0.0) == 0.0 for s in short)


def test_a_title_linked_hit_is_the_second_hop_whatever_its_sentences_name() -> None:
    film = "The Curse of the Jade Scorpion is a 2001 crime comedy film by Woody Allen."
    actress = "She starred in the sitcom Mad About You for seven years."
    opener = "Helen Elizabeth Hunt is an American actress, director and screenwriter."
    path = ExpansionPath("film#0", 1, (PathStep("ABOUT", "Helen Hunt", "hunt#0"),), 1.0)
    hunt = Hit(
        "hunt#0", "hunt", "Helen Hunt", f"{opener} {actress}", 1.0, {}, (), expansion=(path,)
    )
    other = hit("allen#0", "Woody Allen directed a 2001 crime comedy film for seven weeks.")
    q = "The Curse of the Jade Scorpion features an actress who starred in what for seven years?"
    picked = select_sentences(q, [hit("film#0", film), other, hunt], max_sentences=2)
    assert [s.sentence.chunk_id for s in picked] == ["film#0", "hunt#0"]
    assert picked[1].sentence.text == actress and picked[1].parts["bridge"] > 0
    unlinked = replace(hunt, expansion=())
    plain = select_sentences(q, [hit("film#0", film), other, unlinked], max_sentences=2)
    assert [s.sentence.chunk_id for s in plain] == ["film#0", "allen#0"]


def test_asides_that_do_not_answer_are_left_out() -> None:
    text = "Kenji Imada (born 17 January 1969 in Hiroshima) wrestled for the Isegahama stable."
    who = select_sentences("Which stable did Kenji Imada wrestle for?", [hit("k#0", text)])
    assert who[0].sentence.text == "Kenji Imada wrestled for the Isegahama stable."
    when = select_sentences("When was Kenji Imada born?", [hit("k#0", text)])
    assert "(born 17 January 1969 in Hiroshima)" in when[0].sentence.text
    assert who[0].sentence.start == when[0].sentence.start  # the span is the chunk's sentence


def test_a_bridging_second_sentence_may_overrun_the_budget_a_little() -> None:
    first = "Toad Hall is a residential hall in Australian National University for students."
    second = "The Australian National University is a national research university in Canberra."
    hits = [hit("toad#0", first), hit("anu#0", second)]
    q = "Toad Hall is a residential hall in a university located in what city?"
    words = len(first.split()) + len(second.split())
    picked = select_sentences(q, hits, max_words=int(words / 1.2))
    assert [s.sentence.chunk_id for s in picked] == ["toad#0", "anu#0"]
    assert len(select_sentences(q, hits, max_words=int(words / 1.4))) == 1


def test_the_span_asked_for_goes_first_when_it_scores_close() -> None:
    hits = [
        hit(
            "glossary#3",
            "An idempotency key is kept by the server so that a retried request runs once. "
            "Keys are kept for 24 hours.",
        )
    ]
    picked = select_sentences("How long is an idempotency key kept?", hits)
    assert picked[0].sentence.text == "Keys are kept for 24 hours."
    # first for its type, not for its score (the second's own, before its repeated terms)
    assert picked[0].score < picked[1].score - picked[1].parts["repeat"]
    assert type_match("duration", "treated as a new charge", "how long") == 0.0  # not "a" + "s"
    # a sentence that only says a duration but is otherwise far off does not jump the queue
    far = [hit("a#0", "An idempotency key makes a retried idempotency key request run once."),
           hit("b#0", "Backups run for 2 hours every night.")]  # fmt: skip
    assert select_sentences("How long is an idempotency key kept?", far)[0].sentence.chunk_id == (
        "a#0"
    )


def test_a_next_sentence_is_worth_the_question_terms_not_yet_said() -> None:
    first = "Philip Carlo was a biographer of Richard Kuklinski, an American contract killer."
    again = "Philip Carlo, the biographer, interviewed the American contract killer in prison."
    answer = "Kuklinski was with members of the DeCavalcante crime family."
    hits = [hit("carlo#0", first), hit("carlo#1", again), hit("kuklinski#0", answer)]
    q = "Philip Carlo was a biographer for an American contract killer in what crime family?"
    picked = select_sentences(q, hits, max_sentences=2)
    assert [s.sentence.chunk_id for s in picked] == ["carlo#0", "kuklinski#0"]
    assert picked[1].parts["repeat"] == 0.0
    assert sum(picked[1].parts.values()) == pytest.approx(picked[1].score)
    # without the rule the restatement would come second: its terms alone outscore the answer
    rest = select_sentences(q, hits[1:], max_sentences=1)
    assert rest[0].sentence.chunk_id == "carlo#1"
