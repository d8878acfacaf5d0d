"""Which codes a question names that the sources lack (versions after a name included), and
when a definition question's best sentence says the code it asks about."""

from __future__ import annotations

from collections.abc import Sequence

from clew.compose.extract import Selected, Sentence
from clew.compose.respond import absent_codes, defined_code
from clew.types import Hit

NEVER = 12.0


class Tokens:
    """A stand-in for a snapshot's idf: the tokens its chunks have score 1, others NEVER."""

    def __init__(self, *tokens: str) -> None:
        self.tokens = set(tokens)

    def idf(self, terms: Sequence[str], scoped: object) -> dict[str, float]:
        return {t: 1.0 if t in self.tokens else NEVER for t in terms}


def test_a_version_after_a_name_is_a_code_unless_it_is_a_quantity() -> None:
    docs = Tokens("firmware", "3.4", "4.13.0", "dockfw", "2024.11")
    assert absent_codes("does firmware 3.5 fix the guest network", docs, None) == ["firmware 3.5"]
    assert absent_codes("when is dockfw 4.14 coming out", docs, None) == ["dockfw 4.14"]
    assert absent_codes("does firmware 3.4 fix it", docs, None) == []
    assert absent_codes("Fleet Console 2024.11 changes", docs, None) == []
    # quantities: after a function word, before a unit
    assert absent_codes("is 2.5 enough", docs, None) == []
    assert absent_codes("can I ride 2.5 km on one charge", docs, None) == []
    assert absent_codes("the pack lasts 1.5 hours", docs, None) == []
    # the sources' 4.14.2 is the 4.14 asked about
    assert absent_codes("when is dockfw 4.14 coming out", Tokens("4.14.2"), None) == []
    # codes as before
    assert absent_codes("What does ERR-4499 mean?", docs, None) == ["ERR-4499"]


def _hit(title: str, text: str, heading: tuple[str, ...] = ()) -> Hit:
    return Hit("c0", "d0", title, text, 1.0, {}, (), heading_path=heading)


def _best(text: str) -> list[Selected]:
    return [Selected(Sentence(0, "c0", text, 0, len(text)), 1.0, {}, ())]


def test_a_definition_is_found_under_the_code_it_asks_about() -> None:
    row = "Code: E-202; Meaning: DNS timeout; Action: Switch DNS to automatic."
    pool = [_hit("Error codes", row)]
    assert defined_code("What does E-202 mean?", _best(row), pool) == "E-202"
    assert defined_code("e-202", _best(row), pool) == "e-202"
    assert defined_code("What does E-201 mean?", _best(row), pool) == ""  # another code
    assert defined_code("How do I fix E-202?", _best(row), pool) == ""  # not a definition
    assert defined_code("What does idempotency mean?", _best(row), pool) == ""  # no code
    assert defined_code("What does E-202 mean?", [], pool) == ""
    # the title (or innermost heading) of the sentence's hit names it
    body = "The app sent the unlock command but the vehicle did not confirm."
    titled = [_hit("SW-2207: Unlock request timed out", body)]
    assert defined_code("SW-2207", _best(body), titled) == "SW-2207"
    headed = [_hit("Errors", body, ("Errors", "SW-2207"))]
    assert defined_code("what is SW-2207", _best(body), headed) == "SW-2207"
