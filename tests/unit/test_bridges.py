"""Which names lead an answer to its second hop: a hit named by its title, not a name most hits
say (clew.compose.bridges, used by select_sentences)."""

from __future__ import annotations

from clew.compose.bridges import novel_names, specific, titled_by
from clew.compose.extract import select_sentences
from clew.types import Hit


def _hit(cid: str, title: str, text: str) -> Hit:
    return Hit(cid, cid.split("#")[0], title, text, 1.0, {}, ())


def test_a_sentence_names_a_hit_by_its_title_without_its_qualifier() -> None:
    titles = ["Dick Humbert", "Philadelphia Eagles", "Brooklyn Dodgers (NFL)", "Eagles"]
    text = "He played for the Philadelphia Eagles and once against the Brooklyn Dodgers."
    assert titled_by(text, titles, "dick humbert played for which team?", own=0) == {1, 2, 3}
    assert titled_by(text, titles, "did the philadelphia eagles win?", own=0) == {2}
    assert titled_by("Eaglesfield is a village.", titles, "", own=0) == set()


def test_the_names_a_sentence_brings_are_those_the_question_does_not_say() -> None:
    text = "Anna Benson is married to Kris Benson, a pitcher for the New York Mets."
    asked = "who is anna benson's husband?"
    assert novel_names(text, asked) == {"kris benson", "new york mets"}
    assert novel_names(text, "did kris benson pitch for the new york mets?") == {"anna benson"}


def test_a_name_most_other_hits_say_is_no_bridge() -> None:
    hits = [
        _hit("a#0", "A", "He played in the National Football League for the Eagles."),
        _hit("b#0", "B", "The Eagles play in the National Football League."),
        _hit("c#0", "C", "The Dodgers played in the National Football League."),
        _hit("d#0", "D", "The 1946 National Football League season."),
    ]
    names = {"national football league", "eagles"}
    assert specific(names, hits, own=0) == {"eagles"}
    assert specific(names, hits[:2], own=0) == names  # one other hit: it may say both


def test_the_hit_a_chosen_sentence_names_by_title_answers_the_second_hop() -> None:
    hits = [
        _hit("dick#0", "Dick Humbert", "Dick Humbert was an end in the National Football "
             "League. He played for the Philadelphia Eagles from 1945 to 1949."),
        _hit("season#0", "1946 NFL season", "The 1946 season of the National Football League "
             "had ten teams."),
        _hit("eagles#0", "Philadelphia Eagles", "The Eagles are a franchise based in "
             "Philadelphia, Pennsylvania."),
        _hit("dodgers#0", "Brooklyn Dodgers (NFL)", "The Dodgers were a Brooklyn team of the "
             "National Football League."),
    ]  # fmt: skip
    q = "In 1945 Dick Humbert played for a National Football League team based in what state?"
    picked = select_sentences(q, hits, max_sentences=3)
    ids = [s.sentence.chunk_id for s in picked]
    assert ids[0] == "dick#0" and "eagles#0" in ids
    assert "dodgers#0" not in ids[: ids.index("eagles#0")]
    eagles = next(s for s in picked if s.sentence.chunk_id == "eagles#0")
    assert eagles.parts["bridge"] > 0.3
