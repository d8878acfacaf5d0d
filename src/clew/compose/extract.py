"""Extractive answer selection: the sentences of the retrieved hits that best answer a question.

No LLM. Pure functions; the same question and hits give the same sentences, bit for bit.

**Splitting** (:func:`split_sentences`) works on markdown-ish chunk text. Paragraphs (blank-line
separated), list items, table rows and fenced-code lines are separate units; single newlines
inside a paragraph are soft wraps. Headings (``#`` lines), horizontal rules and table separator
rows are not sentences. Inside a paragraph or list item a sentence ends at ``.``, ``?`` or ``!``
(optionally followed by closing quotes/brackets) followed by whitespace, except after common
abbreviations (``e.g.``, ``i.e.``, ``vs.``, ``Fig.``, ``et al.``, ``Dr.``, ``Ste.`` …) and
single capital initials; after ``No.``, ``Op.``, ``p.``, ``c.`` … before a number; after
``etc.`` and a ``?`` or ``!`` (a title that ends in one: ``Pick Me Up! is a magazine``) before a
lowercase word; and after initialisms (``U.S.``, ``O.F.M.``, ``a.m.``) and company
abbreviations (``Co.``, ``Inc.`` …) unless the next word opens a sentence (``The``, ``He``,
``After`` …: ``U.S. Senator Orrin Hatch`` is one sentence, ``… to the U.S. The next year …``
two); and inside a short parenthetical (``(ext. 4400)``, :data:`ASIDE_REACH`).
Because a boundary needs whitespace after the terminator, numbers and versions
(``3.5 ms``, ``v2.3.1``) and dotted identifiers (``pool.max_size``) are never cut. Sentences over
:data:`MAX_WORDS` whitespace words are cut at whitespace into balanced pieces of at most that
many words; pieces with fewer than :data:`MIN_WORDS` words are dropped unless they contain an
identifier (a word with a digit, ``-`` or ``_``, a dotted path, or CamelCase).

**Scoring** (:func:`select_sentences`), per sentence of every hit, from raw features in [0, 1]:

- ``term_overlap``: idf-weighted share of the question's analyzer terms
  (:func:`clew.ingest.analyze.query_terms`, stop words already removed) found among the
  sentence's analyzer tokens — the same tokens BM25 sees;
- ``cosine``: cosine of the sentence and question embeddings, clipped at 0 (only with an
  encoder; every sentence and the question are encoded in one batched call);
- ``chunk_rank``: ``1 / (1 + hit_index)``, a small prior for earlier hits;
- ``identifier``: share of the identifiers the question names (``ERR-4413``, ``pool.max_size``)
  that the sentence contains exactly (casefolded).

``score = Σ weight × feature`` with :data:`DENSE_WEIGHTS` when an encoder is given and
:data:`LEXICAL_WEIGHTS` (the same weights without ``cosine``, renormalised) otherwise, plus
:data:`IDENTIFIER_BONUS` × ``identifier``. After the first pick, a sentence's ``term_overlap``
counts only the question terms the chosen sentences do not already say (the ``repeat`` part
takes back the rest): what is left of the question decides the next sentence.
``Selected.parts`` holds each weighted term, so ``sum(parts.values()) == score``; divide by
the weight to recover the raw feature.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from clew.compose import dated
from clew.compose.assemble import jaccard
from clew.compose.bridges import (
    TITLE_BRIDGE_WEIGHT,
    novel_names,
    specific,
    title_links,
    titled_by,
)
from clew.compose.clean import plain, split_cells, table_row
from clew.compose.question import FUNCTION_WORDS, Question, classify, type_match
from clew.compose.verdict import Verdict, verdict
from clew.errors import ModelError, QueryError
from clew.ingest.analyze import analyze, query_terms, words
from clew.protocols import AsymmetricEncoder, Encoder
from clew.types import Hit

MAX_WORDS = 60
"""Longest sentence, in whitespace-separated words; longer ones are cut into pieces."""
MIN_WORDS = 3
"""Shortest unit kept, in words, unless it contains an identifier."""
NEAR_DUPLICATE_JACCARD = 0.8
"""A sentence whose analyzer token set overlaps a chosen one by more than this is skipped."""

DENSE_WEIGHTS: Mapping[str, float] = {"cosine": 0.5, "term_overlap": 0.45, "chunk_rank": 0.05}
"""Weights of the raw features when an encoder is given (they sum to 1)."""
LEXICAL_WEIGHTS: Mapping[str, float] = {"term_overlap": 0.9, "chunk_rank": 0.1}
"""Weights without an encoder: :data:`DENSE_WEIGHTS` less ``cosine``, renormalised to 1."""
IDENTIFIER_BONUS = 0.2
"""Added × the share of the question's identifiers the sentence names exactly."""
TYPED_FIRST: frozenset[str] = frozenset({"definition", "duration", "quantity", "time"})
"""Question types whose answer is a span (a duration, a number, a date, a definition): the best
sentence holding one goes first when it scores at least :data:`TYPED_FIRST_SHARE` of the best."""
TYPED_FIRST_SHARE = 0.7
BRIDGE_ROOM = 1.25
"""A second sentence that bridges may take the answer to this many times ``max_words``."""
ANSWER_TYPE_WEIGHT = 0.25
"""Added when the sentence holds a span of the type the question asks for
(:func:`clew.compose.question.type_match`: a duration for "how long", a date for "when" …)."""
BRIDGE_WEIGHT = 0.3
"""Added when the sentence names a name the chosen sentences bring (one the question does not
say): the bridge from the first hop's answer to the second."""
CONTINUATION_WEIGHT = 0.2
"""Added to a sentence that goes on from a chosen one: the next sentence of the same hit, opening
with a pronoun ("She came from Deliveroo." after "My manager is Sofia Mendes."; "It is
headquartered in Canton." after "Dunkin' Brands is a restaurant holding company"), or the first
sentence under a chosen heading (a definition's body under "E104: Upstream link lost"). It says more
of what the chosen one is about but repeats none of its terms. On the train/dev sets, gold in
the answer: HotpotQA 0.56 → 0.57, memory 0.529 → 0.553, MuSiQue and support unchanged (0.15 to
0.25 gave the same; with any next sentence, not only a pronoun's, support lost 0.015)."""
MIN_UNMATCHED_COSINE = 0.15
"""A sentence after the first that names no question term, bridges nothing and goes on from no
chosen one is taken only with at least this cosine to the question (with an encoder): the
answer to "which wifi channels should I use" stops after the channel sentences rather than
going on with "Check that the coax cable is screwed in". On the train/dev sets (answers run
end to end) gold in the answer is the same for 0 to 0.15; at 0.2 support loses one."""
BRIDGE_MIN_WORDS = 12
"""Only a question of at least this many words gets the bridge. A chained question is long
("… the city where Kerry Saxby-Junna was born"); in chat turns and support articles a shorter one
asks one thing, and the names a first sentence brings recur in sentences that do not answer it
(on the train/dev sets: memory +0.012, support +0.046 gold in the answer, multi-hop unchanged)."""


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of one hit."""

    hit_index: int
    """Index into the hits given to :func:`select_sentences`."""
    chunk_id: str
    text: str
    """The sentence with runs of whitespace collapsed to single spaces."""
    start: int
    """Character offset of the sentence's first character in ``hit.text``."""
    end: int
    """Character offset just past its last character (``hit.text[start:end]``)."""
    kind: str = "text"
    """``text`` (prose or a list item), ``row`` (a table row), ``code`` or ``heading``."""


@dataclass(frozen=True, slots=True)
class Selected:
    """A chosen sentence, its score, and what made the score."""

    sentence: Sentence
    score: float
    parts: Mapping[str, float]
    """Weighted terms of the score (``term_overlap``, ``chunk_rank``, ``identifier``, and
    ``cosine`` when an encoder was given); they sum to ``score``."""
    matched_terms: tuple[str, ...]
    """Question terms found in the sentence, in question order (for the "why" trail)."""


# --------------------------------------------------------------------------------------------
# splitting

_ABBREVIATIONS = frozenset({
    "e.g", "i.e", "vs", "fig", "figs", "al", "dr", "mr", "mrs", "ms", "prof", "cf", "approx",
    "eq", "sec", "ch", "vol", "pp", "jr", "sr", "st", "ste", "mt", "gen", "gov", "sen", "rep",
    "col", "lt", "capt", "sgt", "rev", "hon",
})  # fmt: skip
"""Words (lowercased, without their final dot) after which a ``.`` does not end a sentence."""
_LOWERCASE_NEXT = frozenset({"etc", "ca", "resp", "incl", "dept"})
"""Abbreviations that often end a sentence: they only hold it together before a lowercase word
(``apples, pears, etc. and other fruit``, but ``… etc. Then we left``)."""
_COMPANY = frozenset({"co", "inc", "ltd", "corp", "bros", "plc", "llc"})
"""Company abbreviations: like :data:`_INITIALISM`, they end a sentence only before a word that
opens one (``… founded the Co. The next …``), not before the rest of a name (``Moerlein Brewing
Co. is a …``, ``Damage, Inc. Tour was …``)."""
_INITIALISM = re.compile(r"(?:[^\W\d_]{1,2}\.)+[^\W\d_]{1,2}")
"""Letters with inner dots (``U.S``, ``O.F.M``, ``LL.D``, ``a.k.a``, ``a.m``): they hold a
sentence together unless the next word opens a sentence (:data:`_OPENERS`): ``the U.S. state of
Hawaii``, ``U.S. Senator Orrin Hatch``, ``E.B. White``, ``12:25 a.m. EST``, ``O.F.M. (died
1244)``, but ``He moved to the U.S. The next year …``."""
_OPENERS = FUNCTION_WORDS | frozenset(
    {"later", "today", "although", "though", "because", "following", "until", "under", "over"}
    | {"between"}
)
"""Words that open sentences (casefolded): after an initialism or a company abbreviation, one of
them starts a new sentence; any other word (a capitalised name, a number) goes on with it."""
_DIGIT_NEXT = frozenset({"no", "nos", "op", "p", "c", "ca", "b", "d", "fl", "r", "ext", "tel"})
"""Abbreviations only before a number (``No. 5``, ``Op. 94``, ``p. 67``, ``(c. 1711)``, ``(b.
1920)``, ``(r. 209–174 BC)``, ``ext. 4400``); a plain word otherwise (``answer is no.``)."""
ASIDE_REACH = 40
"""A ``.`` inside parentheses that open at most this many characters before it and close at most
this many after it, with no sentence end between, ends no sentence: ``(ext. 4400)``,
``(approx. 3 km)``."""

_TAIL = re.compile(r"[^\W\d_]+(?:\.[^\W\d_]+)*$")
_NEXT_WORD = re.compile(r"\s*[\"'“‘(\[]*([^\W\d_]*)")
_BOUNDARY = re.compile(r"[.?!]+[\"'”’)\]]*(?=\s)")
_ENDS = re.compile(r"[.?!](?=[\s\"'”’]|$)")  # a sentence end inside an aside ("… rained.)")
_LIST_MARKER = re.compile(r"[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:\s|$)")
_RULE = re.compile(r"[ \t]*([-*_=])(?:[ \t]*\1){2,}[ \t]*$")
_FENCE = re.compile(r"[ \t]*(?:```|~~~)")
_TABLE_SEPARATOR = re.compile(r"[\s|:\-]*$")
_QUOTE = re.compile(r"[ \t]*(?:>[ \t]?)+")
_WORD = re.compile(r"[^\W_]+(?:[-_./:][^\W_]+)*", re.UNICODE)
_WS_TOKEN = re.compile(r"\S+")


def _is_identifier(word: str) -> bool:
    """A word with a digit, ``-`` or ``_``, a dotted path with parts longer than one letter
    (``pool.max``, not ``e.g``), or CamelCase (``RetryPolicy``). ``word`` keeps its case."""
    if any(c.isdigit() for c in word) or "-" in word or "_" in word:
        return True
    if "." in word and all(len(p) > 1 for p in word.split(".")):
        return True
    return any(a.islower() and b.isupper() for a, b in pairwise(word))


def identifiers(text: str) -> frozenset[str]:
    """Identifier words of ``text``, NFKC-normalised and casefolded."""
    norm = unicodedata.normalize("NFKC", text)
    return frozenset(m.group(0).casefold() for m in _WORD.finditer(norm) if _is_identifier(m[0]))


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _next_char(text: str, at: int) -> str:
    """The first non-space character of ``text`` from ``at`` on ("" at the end)."""
    while at < len(text) and text[at].isspace():
        at += 1
    return text[at : at + 1]


def _holds_together(text: str, block_start: int, dot: int, after: int) -> bool:
    """Whether the ``.`` at ``dot`` belongs to an abbreviation or an initial, not a sentence end.

    ``after`` is the position of the whitespace that follows the terminator.
    """
    ws = dot - 1
    while ws >= block_start and not text[ws].isspace():
        ws -= 1
    tail = _TAIL.search(text, ws + 1, dot)  # the letters it ends in: "(c", "1240–c", '"J.B'
    word = tail.group(0) if tail else ""
    lower = word.casefold()
    if lower in _ABBREVIATIONS or (len(word) == 1 and word.isupper()):
        return True
    following = _next_char(text, after)
    if lower in _DIGIT_NEXT and following.isdigit():
        return True
    if lower in _LOWERCASE_NEXT:
        return following.islower()
    if lower in _COMPANY or _INITIALISM.fullmatch(word):
        return not _opens(text, after)
    return _in_aside(text, block_start, dot, after)


def _in_aside(text: str, block_start: int, dot: int, after: int) -> bool:
    """Whether the ``.`` at ``dot`` stands in a short parenthetical (:data:`ASIDE_REACH`)."""
    if ")" in text[dot:after]:  # "(2017 est.) Density …": the aside closes with the sentence
        return False
    depth, i = 0, dot - 1
    while i >= max(block_start, dot - ASIDE_REACH):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                close = text.find(")", after, after + ASIDE_REACH)
                return close >= 0 and not _ENDS.search(text[after:close])
            depth -= 1
        i -= 1
    return False


def _opens(text: str, at: int) -> bool:
    """Whether the word after ``at`` opens a sentence: one of :data:`_OPENERS`, capitalised (or
    after an opening quote or bracket)."""
    m = _NEXT_WORD.match(text, at)  # always matches (an empty word before a digit or the end)
    word = m.group(1) if m else ""
    return word[:1].isupper() and word.casefold() in _OPENERS


def _split_block(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Cut a paragraph or list item at sentence ends."""
    out: list[tuple[int, int]] = []
    cur = start
    for m in _BOUNDARY.finditer(text, start, end):
        mark = m.group(0).rstrip("\"'”’)]")
        if mark == "." and _holds_together(text, start, m.start(), m.end()):
            continue
        if mark in ("!", "?") and _next_char(text, m.end()).islower():
            continue  # a title that ends in one: "Pick Me Up! is a British weekly magazine"
        out.append((cur, m.end()))
        cur = m.end()
    out.append((cur, end))
    return out


@dataclass(frozen=True, slots=True)
class _Unit:
    start: int
    end: int
    kind: str
    """``text`` (a paragraph or list item, split into sentences later), ``row`` (a table row),
    ``code`` (a fenced-code line) or ``heading``."""
    header: tuple[str, ...] | None = None
    """A table row's column names (None: the table has no header row)."""


def _units(text: str) -> list[_Unit]:
    """Units of the text in order: paragraphs and list items (split into sentences later), table
    rows and code lines (kept whole), headings."""
    units: list[_Unit] = []
    block: list[int] = []  # [start, end] of the open paragraph or list item
    in_fence = False
    header: tuple[str, ...] | None = None

    def flush() -> None:
        if block:
            units.append(_Unit(block[0], block[1], "text"))
            block.clear()

    lines = text.splitlines(keepends=True)
    pos = 0
    for n, raw in enumerate(lines):
        line_start = pos
        pos += len(raw)
        line = raw.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        line_end = line_start + len(line)
        stripped = line.strip()
        if _FENCE.match(line):
            flush()
            in_fence = not in_fence
            continue
        if in_fence:
            if stripped:
                units.append(_Unit(line_start, line_end, "code"))
            continue
        if not stripped.startswith("|"):
            header = None
        if not stripped or _RULE.match(line):
            flush()
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            s, e = _trim(text, line_start + heading.end(), line_end)
            while e > s and text[e - 1] == "#":  # closing hashes
                e -= 1
            s, e = _trim(text, s, e)
            if e > s:
                units.append(_Unit(s, e, "heading"))
            continue
        if stripped.startswith("|"):
            flush()
            if _TABLE_SEPARATOR.match(stripped):
                continue
            following = lines[n + 1].strip() if n + 1 < len(lines) else ""
            if following.startswith("|") and _TABLE_SEPARATOR.match(following):
                header = tuple(split_cells(stripped))  # the header row names the columns
                continue
            s = line_start + line.index("|") + 1
            e = _trim(text, s, line_end)[1]
            if e > s and text[e - 1] == "|":
                e -= 1
            units.append(_Unit(s, e, "row", header))
            continue
        marker = _LIST_MARKER.match(line)
        if marker:
            flush()
            block[:] = [line_start + marker.end(), line_end]
            continue
        quote = _QUOTE.match(line)
        body_start = line_start + (quote.end() if quote else 0)
        if block:
            block[1] = line_end
        else:
            block[:] = [body_start, line_end]
    flush()
    return units


def _cut_long(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Cut a span of more than :data:`MAX_WORDS` words into balanced pieces at whitespace."""
    tokens = list(_WS_TOKEN.finditer(text, start, end))
    if len(tokens) <= MAX_WORDS:
        return [(start, end)]
    pieces = math.ceil(len(tokens) / MAX_WORDS)
    size = math.ceil(len(tokens) / pieces)
    return [
        (tokens[i].start(), tokens[min(i + size, len(tokens)) - 1].end())
        for i in range(0, len(tokens), size)
    ]


def _keep(fragment: str) -> bool:
    if len(words(fragment)) >= MIN_WORDS:
        return True
    return bool(identifiers(fragment))


def _spans(text: str, *, headings: bool = False) -> list[tuple[int, int, _Unit, bool]]:
    """(start, end, unit, whole) of each sentence; ``whole`` is False for the pieces of a
    sentence cut at :data:`MAX_WORDS`."""
    out: list[tuple[int, int, _Unit, bool]] = []
    for unit in _units(text):
        if unit.kind == "heading" and not headings:
            continue
        if unit.kind == "text":
            spans = _split_block(text, unit.start, unit.end)
        else:
            spans = [(unit.start, unit.end)]
        for s0, e0 in spans:
            s, e = _trim(text, s0, e0)
            if s >= e:
                continue
            pieces = [(s, e)] if unit.kind == "row" else _cut_long(text, s, e)
            for ps, pe in pieces:
                if unit.kind == "heading" or _keep(text[ps:pe]):
                    out.append((ps, pe, unit, len(pieces) == 1))
    return out


def split_sentences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the sentences of ``text``, in order.

    ``text[start:end]`` is the sentence without surrounding whitespace, list markers or outer
    table pipes. See the module docstring for the rules.
    """
    return [(s, e) for s, e, _, _ in _spans(text)]


# --------------------------------------------------------------------------------------------
# selection


@dataclass(frozen=True, slots=True)
class _Scored:
    sentence: Sentence
    score: float
    parts: dict[str, float]
    matched: tuple[str, ...]
    tokens: frozenset[str]


def _rendered(raw: str, unit: _Unit, whole: bool) -> str:
    """A sentence as the answer shows it: plain text, a table row as ``column: value`` pairs, a
    piece of a cut sentence marked with ``…``."""
    if unit.kind == "row":
        return table_row(unit.header, split_cells(raw))
    if unit.kind == "code":
        return " ".join(raw.split())
    text = plain(raw)
    if not whole and text:
        text = f"{text} …" if not text.endswith((".", "!", "?")) else text
    return text


def _sentences(hits: Sequence[Hit]) -> list[Sentence]:
    out: list[Sentence] = []
    for i, hit in enumerate(hits):
        for start, end, unit, whole in _spans(hit.text, headings=True):
            text = _rendered(hit.text[start:end], unit, whole)
            if text:
                out.append(Sentence(i, hit.chunk_id, text, start, end, unit.kind))
    return out


def _cosines(encoder: Encoder, question: str, sentences: Sequence[Sentence]) -> list[float]:
    """Cosine of each sentence with the question, from ONE batched encode call."""
    texts = [s.text for s in sentences]
    if isinstance(encoder, AsymmetricEncoder):  # the question as a query, sentences as passages
        vectors = np.vstack([encoder.encode_queries([question]), encoder.encode_documents(texts)])
    else:
        vectors = np.asarray(encoder.encode([question, *texts]))
    if vectors.ndim != 2 or vectors.shape[0] != len(sentences) + 1:
        raise ModelError(
            f"encoder returned shape {vectors.shape} for {len(sentences) + 1} texts; "
            f"expected ({len(sentences) + 1}, dim)"
        )
    sims = vectors[1:] @ vectors[0]
    return [float(x) for x in sims]


_ASIDE = re.compile(r"\s*\(([^()]{0,160})\)")


def _compact(text: str, terms: Mapping[str, float], asked: Question, question: str) -> str:
    """``text`` without the parenthetical asides that name no question term and, for a time,
    duration or quantity question, hold no span of that type (``(born 17 January 1969)`` goes
    for a "which team" question, stays for a "when was he born" one): the answer's words go to
    what it asks."""

    def aside(m: re.Match[str]) -> str:
        inner = m.group(1)
        if set(analyze(inner)) & set(terms):
            return m.group(0)
        numeric = asked.kind in ("time", "duration", "quantity")
        if numeric and type_match(asked.kind, inner, question, asked.subject) > 0:
            return m.group(0)
        return ""

    out = _ASIDE.sub(aside, text)
    return out if len(out.split()) >= MIN_WORDS else text


def _repeats(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether one sentence says what the other does: token sets overlapping by more than
    :data:`NEAR_DUPLICATE_JACCARD`, or the smaller held in the larger."""
    if jaccard(a, b) > NEAR_DUPLICATE_JACCARD:
        return True
    small = min(len(a), len(b))
    return small > 0 and len(a & b) >= NEAR_DUPLICATE_JACCARD * small


_DEFINITION_FRAME = frozenset(
    analyze("mean means meaning meant stand stands refer refers define defined definition")
)
"""Analyzer terms of the words that frame a definition question (``what does X mean``, ``X
meaning``, ``define X``): they say what kind of answer is asked, not what it is about, so a
sentence does not match the question by saying "which means" about something else."""

_ANAPHORS = frozenset(
    {"he", "she", "it", "they", "his", "her", "its", "their", "this", "these", "those"}
    | {"he's", "she's", "it's", "they're", "they've", "that's"}
)


def _anaphoric(text: str) -> bool:
    """Whether a sentence opens with a pronoun that points back (``She came from …``)."""
    first = text.split(maxsplit=1)[:1]
    return bool(first) and first[0].casefold().replace("’", "'").rstrip(",;:") in _ANAPHORS


def _leads_in(sentence: Sentence) -> bool:
    """Whether a text sentence introduces what follows it ("… relies on session state:" before
    a list): alone, it is a fragment."""
    return sentence.kind == "text" and sentence.text.endswith(":")


def _previous(sentences: Sequence[Sentence]) -> dict[tuple[int, int], tuple[int, int, bool]]:
    """``(hit_index, start)`` of each text sentence → that of the text sentence or heading
    before it in the same hit, and whether that one introduces it (a heading, or a lead-in
    ending with a colon). The first table row or code line after a lead-in maps to the lead-in
    too, and no text sentence after them does."""
    out: dict[tuple[int, int], tuple[int, int, bool]] = {}
    last: dict[int, tuple[int, int, bool]] = {}
    lead_in: dict[int, bool] = {}  # whether the hit's last text sentence is a lead-in
    for s in sentences:
        key = (s.hit_index, s.start)
        before = last.get(s.hit_index)
        if s.kind in ("text", "heading"):
            if s.kind == "text" and before is not None:
                out[key] = before
            leads = _leads_in(s)
            last[s.hit_index] = (s.hit_index, s.start, s.kind == "heading" or leads)
            lead_in[s.hit_index] = leads
        elif before is not None and lead_in.get(s.hit_index, False):
            out[key] = before  # the table or code the lead-in introduces
            del last[s.hit_index]
    return out


def _without_dangling(
    chosen: list[_Scored], previous: Mapping[tuple[int, int], tuple[int, int, bool]]
) -> list[_Scored]:
    """``chosen`` without a lead-in whose next sentence was not chosen; a chosen lead-in and
    the chosen sentence it introduces stand together, where the first of them was chosen."""
    by_key = {(c.sentence.hit_index, c.sentence.start): c for c in chosen}
    follows: dict[tuple[int, int], tuple[int, int]] = {}  # lead-in → the sentence after it
    for key, (hit, start, _) in previous.items():
        before = by_key.get((hit, start))
        if key in by_key and before is not None and _leads_in(before.sentence):
            follows[(hit, start)] = key
    led = {after: first for first, after in follows.items()}
    placed: set[tuple[int, int]] = set()
    out: list[_Scored] = []
    for c in chosen:
        key = (c.sentence.hit_index, c.sentence.start)
        head = led.get(key, key)
        if head in placed or (_leads_in(c.sentence) and key not in follows):
            continue
        for part in (head, follows.get(head)):
            if part is not None:
                out.append(by_key[part])
                placed.add(part)
    return out


def _openers(sentences: Sequence[Sentence]) -> set[tuple[int, int]]:
    """``(hit_index, start)`` of each hit's first text sentence (not a heading, row or code)."""
    first: dict[int, int] = {}
    for s in sentences:
        if s.kind == "text":
            first.setdefault(s.hit_index, s.start)
    return set(first.items())


def _titled(hits: Sequence[Hit], subject: str) -> set[int]:
    """The hits whose title or innermost heading names ``subject`` (casefolded, whole)."""
    low = subject.casefold().strip()
    if not low:
        return set()
    pattern = re.compile(rf"(?<![\w-]){re.escape(low)}(?![\w-])")
    out = set()
    for i, hit in enumerate(hits):
        heads = [hit.title, *hit.heading_path[-1:]]
        if any(pattern.search(h.casefold()) for h in heads if h):
            out.add(i)
    return out


def select_sentences(
    question: str,
    hits: Sequence[Hit],
    *,
    encoder: Encoder | None = None,
    idf: Mapping[str, float] | None = None,
    max_sentences: int = 3,
    max_per_hit: int = 2,
    min_score: float = 0.0,
    max_words: int | None = None,
    embed_limit: int | None = None,
) -> list[Selected]:
    """The best ``max_sentences`` sentences of ``hits`` for ``question``, best first.

    At most ``max_per_hit`` per hit; a sentence is skipped when it scores below ``min_score``,
    matches no question term and has no positive cosine, or its analyzer token set overlaps an
    already chosen sentence by more than :data:`NEAR_DUPLICATE_JACCARD`. With ``max_words``, a
    sentence after the first is taken only while the answer stays within that many words (a
    second sentence that bridges, within :data:`BRIDGE_ROOM` times that). Parenthetical asides
    that name no question term and hold no span of the asked type are left out.
    Headings compete only as the definition a definition question asks for. After the first
    pick, a sentence naming a name the chosen ones bring and the question does not say gains
    :data:`BRIDGE_WEIGHT` (the second hop of a multi-hop question; a hit's first sentence names
    the hit's title too), in a question of at least :data:`BRIDGE_MIN_WORDS` words; so does,
    in any question, a sentence of a hit that a chosen sentence's hit names by its title (the
    title link that brought it up is the second hop itself; on the train sets: HotpotQA
    0.50 → 0.52, MuSiQue 0.23 → 0.25 gold in the answer, support and memory unchanged; a hit
    named by its title gains more, a name most hits say bridges nothing: `clew.compose.bridges`).
    A question term that a chosen sentence already says adds nothing to the next one's
    ``term_overlap`` (its ``repeat`` part is the negative of what it would have added): a
    sentence that restates the first hop ("Philip Carlo was a biographer of …") gives way to
    one that says the rest ("… associated with members of what crime family") — on the
    train/dev sets: HotpotQA 0.52 → 0.56, MuSiQue 0.25 → 0.28, memory 0.518 → 0.529, support
    0.538 → 0.523 gold in the answer.
    A sentence that goes on from a chosen one (the next of the same hit, opening with a
    pronoun: "She came from Deliveroo."; or the first under a chosen heading: "The modem lost
    its connection …" under "E104: Upstream link lost") gains :data:`CONTINUATION_WEIGHT` (its
    ``continues`` part) and, like a bridge, the wider room. A sentence after the first that names
    no question term and neither bridges nor goes on needs a cosine of at least
    :data:`MIN_UNMATCHED_COSINE` (with an encoder). A lead-in ending with a colon ("… relies
    on session state:") is a fragment alone: the list item, table row or code line after it goes
    on from it, stands right after it, and without it the lead-in is left out. In a definition
    question, the words that frame it ("mean" in "what does X mean") are not question terms.
    Over memories, a time question fits each memory's own day and a question about the present
    ("… now?") favours the newer ones (the ``newer`` part): :mod:`clew.compose.dated`.
    With ``embed_limit``, only that many sentences are embedded (the best by the other
    features); the rest score no cosine. Ties are broken by (hit_index, start). ``idf``
    weights question terms (missing terms weigh 1.0, negative ones 0). See the module
    docstring for the score.
    """
    if max_sentences < 0:
        raise QueryError(f"max_sentences must be >= 0, got {max_sentences}")
    if max_per_hit < 1:
        raise QueryError(f"max_per_hit must be >= 1, got {max_per_hit}")
    if not math.isfinite(min_score):
        raise QueryError(f"min_score must be a finite number, got {min_score}")
    if embed_limit is not None and embed_limit < 1:
        raise QueryError(f"embed_limit must be >= 1, got {embed_limit}")
    if max_words is not None and max_words < 1:
        raise QueryError(f"max_words must be >= 1, got {max_words}")
    if max_sentences == 0:
        return []
    asked_type = classify(question)
    defines = asked_type.kind == "definition"
    sentences = [
        s
        for s in _sentences(hits)
        if s.kind != "heading"
        or (defines and type_match("definition", s.text, question, asked_type.subject) > 0)
    ]
    if not sentences:
        return []

    terms = query_terms(question, 1.0)
    if defines:  # "mean" in "what does X mean" asks, it is not asked
        terms = {t: q for t, q in terms.items() if t not in _DEFINITION_FRAME} or terms
    else:  # a definition keeps its asides: "(HTTP 409)"
        sentences = [
            replace(x, text=_compact(x.text, terms, asked_type, question))
            if x.kind == "text"
            else x
            for x in sentences
        ]
    idf = idf or {}
    weight = {t: q * max(0.0, idf.get(t, 1.0)) for t, q in terms.items()}
    total = sum(weight.values())
    asked = identifiers(question)
    weights = DENSE_WEIGHTS if encoder is not None else LEXICAL_WEIGHTS

    titled = _titled(hits, asked_type.subject) if asked_type.kind == "definition" else set()
    openers = _openers(sentences)
    lexical: list[tuple[frozenset[str], tuple[str, ...], dict[str, float]]] = []
    days = dated.memory_days(hits)
    newness = dated.newer(question, days)  # a question about now: newer memories say it
    subject_terms = frozenset(analyze(asked_type.subject))
    for sentence in sentences:
        tokens = frozenset(analyze(sentence.text))
        # a hit titled by what a definition question asks about: its first sentence defines it
        # ("SW-2207: Vehicle not responding" opens "The app sent the unlock command but …"),
        # and reads as naming it
        heads = (sentence.hit_index, sentence.start) in openers and sentence.hit_index in titled
        said = tokens | subject_terms if heads else tokens
        matched = tuple(t for t in terms if t in said)
        overlap = sum(weight[t] for t in matched) / total if total > 0 else 0.0
        found = identifiers(sentence.text)
        if heads:
            found |= identifiers(asked_type.subject)
        named = len(asked & found) / len(asked) if asked else 0.0
        fits = type_match(asked_type.kind, sentence.text, question, asked_type.subject)
        fits = max(fits, float(heads))
        if asked_type.kind == "time" and sentence.hit_index in days:
            fits = max(fits, dated.MEMORY_TIME_FIT)
        parts = {
            "term_overlap": weights["term_overlap"] * overlap,
            "chunk_rank": weights["chunk_rank"] / (1 + sentence.hit_index),
            "identifier": IDENTIFIER_BONUS * named,
            "answer_type": ANSWER_TYPE_WEIGHT * fits,
        }
        if sentence.hit_index in newness:
            parts["newer"] = newness[sentence.hit_index]
        lexical.append((tokens, matched, parts))
    cosines: dict[int, float] = {}
    if encoder is not None:
        embed = list(range(len(sentences)))
        if embed_limit is not None and len(embed) > embed_limit:
            # only the best by everything but meaning are embedded: the costly part of an answer
            embed.sort(key=lambda n: (-sum(lexical[n][2].values()), n))
            firsts = {n for n in embed if (sentences[n].hit_index, sentences[n].start) in openers}
            embed = sorted(set(embed[:embed_limit]) | firsts)  # each hit's opener, too
        sims = _cosines(encoder, question, [sentences[n] for n in embed])
        cosines = dict(zip(embed, sims, strict=True))

    scored: list[_Scored] = []
    for n, sentence in enumerate(sentences):
        tokens, matched, lexical_parts = lexical[n]
        parts = {"term_overlap": lexical_parts["term_overlap"]}
        cosine = 0.0
        if encoder is not None:
            cosine = max(0.0, cosines.get(n, 0.0))
            parts["cosine"] = weights["cosine"] * cosine
        parts.update((k, v) for k, v in lexical_parts.items() if k != "term_overlap")
        score = sum(parts.values())
        if (not matched and cosine <= 0.0) or score < min_score:
            continue
        scored.append(_Scored(sentence, score, parts, matched, tokens))

    scored.sort(key=lambda s: (-s.score, s.sentence.hit_index, s.sentence.start))
    titles = [h.title.casefold() for h in hits]
    chained = len(question.split()) >= BRIDGE_MIN_WORDS
    linked_from = title_links(hits)
    linked: set[int] = set()  # hits that hits of chosen sentences name by their title
    previous = _previous(sentences)
    picked: set[tuple[int, int]] = set()  # (hit_index, start) of the chosen sentences
    low_question = question.casefold()
    chosen: list[_Scored] = []
    per_hit: dict[int, int] = {}
    bridges: set[str] = set()
    named_hits: set[int] = set()  # hits that chosen sentences name by their title
    covered: set[str] = set()
    words_used = 0
    pool = list(scored)
    first = -1  # a span of the asked type first ("Kept for 24 hours." for "how long …")
    if asked_type.kind in TYPED_FIRST and pool:
        typed = [i for i, c in enumerate(pool) if c.parts.get("answer_type", 0.0) > 0]
        if typed and pool[typed[0]].score >= TYPED_FIRST_SHARE * pool[0].score:
            first = typed[0]
    while pool and len(chosen) < max_sentences:
        best_at, best_score, best_parts = -1, -math.inf, {}
        for at, cand in enumerate(pool):
            if first >= 0 and at != first:
                continue
            if per_hit.get(cand.sentence.hit_index, 0) >= max_per_hit:
                continue
            if any(_repeats(cand.tokens, c.tokens) for c in chosen):
                continue
            length = len(cand.sentence.text.split())
            bridge = 0.0
            if bridges and chained:
                here = cand.sentence.text.casefold()
                if (cand.sentence.hit_index, cand.sentence.start) in openers:
                    # a hit's first sentence reads as naming the hit's title ("M. Ward")
                    here = f"{titles[cand.sentence.hit_index]}\n{here}"
                bridge = BRIDGE_WEIGHT * any(b in here for b in bridges)
            if cand.sentence.hit_index in linked:
                bridge = BRIDGE_WEIGHT
            if cand.sentence.hit_index in named_hits:
                bridge = max(bridge, TITLE_BRIDGE_WEIGHT)
            # terms the chosen sentences already say count no more: what the question asks
            # besides them (the second hop's relation) decides the next sentence
            again = sum(weight[t] for t in cand.matched if t in covered)
            repeat = -weights["term_overlap"] * again / total if again > 0 else 0.0
            # the next sentence of a chosen one, opening with a pronoun, goes on about it
            key = (cand.sentence.hit_index, cand.sentence.start)
            before = previous.get(key)
            goes_on = (
                before is not None
                and before[:2] in picked
                and (before[2] or _anaphoric(cand.sentence.text))
            )
            continues = CONTINUATION_WEIGHT if goes_on else 0.0
            if chosen and max_words is not None:
                wider = bridge + continues > 0 and len(chosen) == 1
                room = max_words * (BRIDGE_ROOM if wider else 1.0)
                if words_used + length > room:
                    continue
            if chosen and not cand.matched and bridge + continues <= 0:
                # says none of the question and does not go on from the answer: only a
                # sentence close in meaning may follow, not padding from another topic
                floor = MIN_UNMATCHED_COSINE * weights.get("cosine", 0.0)
                if cand.parts.get("cosine", floor) < floor:
                    continue
            gain = cand.score + bridge + continues + repeat
            if gain > best_score + 1e-12:
                best_at, best_score = at, gain
                best_parts = {"bridge": bridge, "continues": continues, "repeat": repeat}
        if best_at < 0:
            break
        first = -1
        cand = pool.pop(best_at)
        if chosen:
            cand = _Scored(
                cand.sentence,
                cand.score + sum(best_parts.values()),
                {**cand.parts, **best_parts},
                cand.matched,
                cand.tokens,
            )
        chosen.append(cand)
        picked.add((cand.sentence.hit_index, cand.sentence.start))
        words_used += len(cand.sentence.text.split())
        per_hit[cand.sentence.hit_index] = per_hit.get(cand.sentence.hit_index, 0) + 1
        bridges |= specific(
            novel_names(cand.sentence.text, low_question), hits, cand.sentence.hit_index
        )
        named_hits |= titled_by(cand.sentence.text, titles, low_question, cand.sentence.hit_index)
        linked |= linked_from.get(cand.sentence.hit_index, set())
        covered |= set(cand.matched)
    chosen = _without_dangling(chosen, previous)
    return [Selected(c.sentence, c.score, c.parts, c.matched) for c in chosen]


def yes_no(question: str, hits: Sequence[Hit]) -> tuple[Verdict, list[Selected]] | None:
    """For a yes/no question about named subjects, the verdict from the sentences of ``hits``
    (:func:`clew.compose.verdict.verdict`) and, as its grounds, the sentence it read for each
    subject (in the question's order); None for another question or when there is no verdict."""
    if classify(question).kind != "yesno":
        return None
    sentences = [s for s in _sentences(hits) if s.kind != "heading"]
    openers = _openers(sentences)
    found = verdict(
        question,
        [s.text for s in sentences],
        firsts=[(s.hit_index, s.start) in openers for s in sentences],
        titles=[hits[s.hit_index].title for s in sentences],
    )
    if found is None:
        return None
    terms = query_terms(question, 1.0)
    grounds = []
    for i in dict.fromkeys(found.evidence):
        tokens = set(analyze(sentences[i].text))
        matched = tuple(t for t in terms if t in tokens)
        grounds.append(Selected(sentences[i], 1.0, {"verdict": 1.0}, matched))
    return found, grounds
