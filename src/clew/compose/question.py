"""What a question asks for: its type, and the kind of span that would answer it.

Rules on the question's first words, no model: the same question always gets the same type.
A question that opens with a statement is typed by its last wh-word (``The show was written by
who?``), unless that word opens a clause (``getting SW-3002 when I scan``); with none, by a
yes/no question after a comma (``BAT_HIGH_TEMP pack, can I put it in the van?``).

=============  ==========================================  =====================================
type           asked as                                    an answer holds
=============  ==========================================  =====================================
definition     what is / what does X mean / define X /     X's definition: ``X: …`` headings,
               X meaning                                   ``X is / means / refers to …``
duration       how long / how many days, hours …           a number with a unit of time
quantity       how many / how much / what percentage       a number (or a number word)
time           when / what year, date, month, day          a date, year, month or weekday
person         who / whom / whose                          a name (capitalised words)
place          where / what city, country, state …         a name (capitalised words)
entity         which / what + noun                         a name, a code, or a number
procedure      how do I / how to / steps to                an instruction (imperative, a step)
yesno          is / are / does / can / was …               (no span: the supporting sentence)
comparison     … or … / which is more, older, first …      both compared names
reason         why / what caused                           a cause (because, due to, after …)
other          anything else                               (no span)
=============  ==========================================  =====================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "FUNCTION_WORDS",
    "QUESTION_TYPES",
    "Question",
    "classify",
    "codes",
    "names",
    "type_match",
]

QUESTION_TYPES: tuple[str, ...] = (
    "definition",
    "duration",
    "quantity",
    "time",
    "person",
    "place",
    "entity",
    "procedure",
    "yesno",
    "comparison",
    "reason",
    "other",
)

_AUX = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "has",
        "have",
        "had",
        "may",
        "might",
        "must",
        "am",
        "shall",
    ]
)
_WH = frozenset(["what", "which", "who", "whom", "whose", "when", "where", "why", "how"])
_STARTERS = frozenset(
    ["define", "definition", "meaning", "steps", "instructions", "guide", "name", "list"]
)
_TIME_NOUNS = frozenset(
    [
        "year",
        "years",
        "date",
        "day",
        "month",
        "decade",
        "century",
        "era",
        "time",
        "period",
        "season",
        "weekday",
    ]
)
_PLACE_NOUNS = frozenset(
    [
        "city",
        "country",
        "state",
        "county",
        "town",
        "region",
        "province",
        "continent",
        "place",
        "location",
        "river",
        "island",
        "village",
        "capital",
        "district",
        "nation",
        "area",
        "mountain",
        "lake",
    ]
)
_DURATION_UNITS = (
    r"(?:milli)?seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|"
    r"decades?|centur(?:y|ies)|ms|s|h|d"
)
_LONG_UNITS = (
    r"(?:milli)?seconds?|minutes?|hours?|days?|weeks?|months?|years?|decades?|centur(?:y|ies)"
)
_DURATION = re.compile(
    rf"\b\d+(?:[.,]\d+)?[\s-]*(?:{_DURATION_UNITS})\b|"
    rf"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|thirty|"
    rf"forty|fifty|sixty|ninety|a few|several|a|an)[\s-]+(?:{_LONG_UNITS})\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(
    r"\b\d[\d,.]*\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"twenty|thirty|forty|fifty|hundred|thousand|million|billion|dozen|half|twice)\b",
    re.IGNORECASE,
)
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_TIME = re.compile(
    rf"\b(?:1[0-9]{{3}}|20[0-9]{{2}})s?\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b(?:{_MONTHS})\b|"
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|yesterday|"
    r"tomorrow|since|until|before|after)\b|\b\d{1,2}:\d{2}\b|\b(?:century|bc|ad)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"\b[A-Z][\w'’.-]*(?:\s+(?:(?:of|de|von|van|the|and)\s+)?[A-Z][\w'’.-]*)*")
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "in",
        "on",
        "at",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "then",
        "he",
        "she",
        "they",
        "we",
        "i",
        "you",
        "his",
        "her",
        "their",
        "our",
        "my",
        "your",
        "as",
        "by",
        "for",
        "from",
        "of",
        "to",
        "and",
        "but",
        "or",
        "if",
        "when",
        "while",
        "after",
        "before",
        "since",
        "during",
        "with",
        "without",
        "however",
        "also",
        "both",
        "each",
        "every",
        "all",
        "some",
        "many",
        "most",
        "one",
        "two",
    ]
)
"""Function words, casefolded: capitalised only for starting a sentence, never a name's first word
(:func:`names`); they open sentences (:mod:`clew.compose.extract` splits before them)."""
_CODE = re.compile(r"\b[A-Za-z]+[-_.]?\d[\w.-]*\b|\b[A-Z]{2,}\b")
_REASON = re.compile(
    r"\b(?:because|due to|caused|causes|cause|since|as a result|led to|leads to|so that|"
    r"after|root cause|reason|therefore|owing to|triggered)\b",
    re.IGNORECASE,
)
_IMPERATIVE = re.compile(
    r"^(?:\d+[.)]\s*)?(?:to\b|use|set|run|call|send|open|go|click|select|add|remove|create|"
    r"enable|disable|pause|stop|start|check|wait|retry|contact|install|configure|restart|"
    r"choose|enter|make|update|delete|change|pick|turn|follow|ask|give|keep|do not|don't|"
    r"never|always|first|then|next|finally)\b",
    re.IGNORECASE,
)
_DEFINES = re.compile(
    r"\b(?:is|are|means|mean|refers to|stands for|denotes|indicates|is defined as|"
    r"is called|describes)\b",
    re.IGNORECASE,
)
_WORDS = re.compile(r"[\w'’-]+")
_CLAUSE_SUBJECTS = frozenset(
    ["i", "we", "you", "he", "she", "they", "it", "my", "our", "your", "his", "her", "their"]
)
"""Words after which a wh-word inside a statement opens a clause, not a question (``getting
SW-3002 when I scan``, ``the centre where I found my dog``)."""
_ASKED_AFTER_COMMA = re.compile(
    r"[,:;-]\s*(?:is|are|was|were|do|does|did|can|could|should|would|will|may|must)\s+"
    r"(?:i|we|you|it|they|he|she|both|the|my|this|that)\b"
)
"""A yes/no question after a statement: ``…, should I power cycle it``, ``…, can I put it in
the van?``."""
_NOT_DEFINING = re.compile(
    r"(?:is|are|was|were)\s+(?:not|different|similar|like|unlike|also|only|usually|often|"
    r"sometimes|still|now|more|less|easy|hard|rare|common)\b"
)
"""``X is …`` that compares or qualifies X rather than saying what it is."""


@dataclass(frozen=True, slots=True)
class Question:
    """A question's type, and the words it is about (``subject``: for a definition, the thing
    defined, as written; empty otherwise)."""

    kind: str
    subject: str = ""


def _subject_after(text: str, start: int) -> str:
    rest = text[start:].strip(" ?.!\"'")
    rest = re.sub(r"\s+(?:mean|means|stand for|do|refer to)\s*$", "", rest, flags=re.IGNORECASE)
    rest = re.sub(r"^(?:a|an|the)\s+", "", rest, flags=re.IGNORECASE)
    return rest.strip(" \"'`")


def codes(text: str) -> list[str]:
    """The code-shaped identifiers of ``text``, in order: those of
    :func:`clew.ingest.concepts.identifier_spans` with a digit or an underscore (``SW-2207``,
    ``E31``, ``BAT_CELL_IMBAL``, ``4.12.3``), not a CamelCase name such as ``PgBouncer``."""
    from clew.ingest.concepts import identifier_spans

    return [s for s, _, _ in identifier_spans(text) if any(c.isdigit() or c == "_" for c in s)]


def _code_subject(subject: str) -> str:
    """A definition's subject, narrowed to the one code it holds (``error SW-5120``)."""
    found = codes(subject)
    return found[0] if len(found) == 1 else subject


def classify(question: str) -> Question:
    """The type of ``question`` (see the module table); ``other`` when no rule applies."""
    text = " ".join(question.split())
    low = text.casefold()
    words = _WORDS.findall(low)
    if not words:
        return Question("other")
    named = codes(text)
    if len(named) == 1 and words[0] not in _WH and words[0] not in _AUX:
        rest = _WORDS.findall(low.replace(named[0].casefold(), " "))
        if len(rest) <= 2:  # "SW-2207", "SW-2209 error", "LOCK-E33 meaning": what the code means
            return Question("definition", named[0])
    if words[0] not in _WH and words[0] not in _AUX and words[0] not in _STARTERS:
        # "… founded by who?"; not a clause's "when I scan", "where I found my dog"
        inner = [
            i
            for i, w in enumerate(words)
            if w in _WH and (i + 1 == len(words) or words[i + 1] not in _CLAUSE_SUBJECTS)
        ]
        if inner:
            words = words[inner[-1] :]
        else:  # "BAT_HIGH_TEMP pack, can I put it in the van?"
            asks = _ASKED_AFTER_COMMA.search(low)
            if asks:
                return Question("comparison" if " or " in low[asks.start() :] else "yesno")
    first = words[0]
    second = words[1] if len(words) > 1 else ""
    m = re.match(r"(?:what|wht)\s+(?:is|are|was|were)\s+(?:an?\s+|the\s+)?(.+?)\??$", low)
    if m and len(m.group(1).split()) <= 4 and not re.search(r"\b(of|for|in|on|by)\b", m[1]):
        subject = _subject_after(text, len(text) - len(m.group(1)) - 1)
        return Question("definition", _code_subject(subject))
    m = re.match(r"what\s+(?:does|do|did)\s+(.+?)\s+(?:mean|stand for|refer to)\b", low)
    if m:
        start = low.index(m.group(1))
        return Question("definition", text[start : start + len(m.group(1))].strip(" \"'`"))
    m = re.match(r"(?:define|definition of|meaning of)\s+(.+)", low)
    if m:
        return Question("definition", _subject_after(text, low.index(m.group(1))))
    if re.search(r"\bmeaning\s*\??$", low) and len(words) <= 5:
        return Question("definition", _subject_after(text, 0).rsplit(" ", 1)[0])
    if first == "how":
        if second in ("long", "often", "soon", "late", "early", "frequently"):
            return Question("duration")
        if second in ("many", "much", "old", "big", "large", "far", "tall", "high", "few"):
            unit = words[2] if len(words) > 2 else ""
            if re.fullmatch(_DURATION_UNITS, unit):
                return Question("duration")
            return Question("quantity")
        third = words[2] if len(words) > 2 else ""
        if second == "to" or (second in _AUX and third in ("i", "we", "you", "one")):
            return Question("procedure")
        return Question("other")
    if first in ("when",):
        return Question("time")
    if first in ("who", "whom", "whose"):
        return Question("person")
    if first == "where":
        return Question("place")
    if first == "why":
        return Question("reason")
    if first in ("what", "which") and len(words) > 1:
        if second in _TIME_NOUNS:
            return Question("time")
        if second in _PLACE_NOUNS:
            return Question("place")
        if second in ("percentage", "percent", "number", "amount", "size", "fraction", "rate"):
            return Question("quantity")
        if " or " in low:
            return Question("comparison")
        if second in ("caused", "causes", "led"):
            return Question("reason")
        return Question("entity")
    if first in ("steps", "instructions") or low.startswith("guide to"):
        return Question("procedure")
    if first in ("name", "list"):
        return Question("entity")
    if first in _AUX:
        return Question("comparison" if " or " in low else "yesno")
    if " or " in low and len(words) <= 20:
        return Question("comparison")
    return Question("other")


def names(text: str) -> list[str]:
    """Runs of capitalised words (``Kris Benson``, ``Bank of England``), less function words
    that are capitalised only for starting a sentence (``The``, ``In``)."""
    out = []
    for m in _NAME.finditer(text):
        parts = m.group(0).split()
        while parts and parts[0].casefold() in FUNCTION_WORDS:
            parts = parts[1:]
        name = re.sub(r"['’]s$", "", " ".join(parts)).rstrip(".'’-")
        if name:
            out.append(name)
    return out


def type_match(kind: str, sentence: str, question: str, subject: str = "") -> float:
    """1.0 when ``sentence`` holds a span of the kind ``kind`` asks for that the question does
    not already say (a duration, a number, a date, a name …), else 0.0. ``definition`` matches a
    sentence that names ``subject`` and defines it (``X: …``, ``X is …``)."""
    asked = question.casefold()

    def new(spans: list[str]) -> bool:
        return any(s.strip().casefold() not in asked for s in spans if s.strip())

    if kind == "duration":
        return float(new(_DURATION.findall(sentence)))
    if kind == "quantity":
        return float(new(_NUMBER.findall(sentence)))
    if kind == "time":
        return float(new(_TIME.findall(sentence)))
    if kind in ("person", "place"):
        return float(new(names(sentence)))
    if kind == "entity":
        return float(new(names(sentence)) or new(_CODE.findall(sentence)))
    if kind == "reason":
        return float(bool(_REASON.search(sentence)))
    if kind == "procedure":
        return float(bool(_IMPERATIVE.match(sentence.strip())))
    if kind == "definition":
        low = sentence.casefold()
        s = subject.casefold()
        if not s or s not in low:
            return 0.0
        after = low.split(s, 1)[1].lstrip()
        if _NOT_DEFINING.match(after):  # "E104 is different from E105, which means …"
            return 0.0
        return float(bool(after[:1] in (":", "—", "-", "–", "(", "=") or _DEFINES.match(after)))
    return 0.0
