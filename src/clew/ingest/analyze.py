"""THE analyzer: one function turns documents and queries into lexical tokens.

Steps: Unicode NFKC, then compound tokens (words joined by ``-``, ``_``, ``.``, ``/``, ``:``)
are kept whole (casefolded) AND split into their parts, each part also split at CamelCase and
letter/digit boundaries; plain words are casefolded and plural-folded (a light S-stemmer, no
aggressive stemming); stop words are dropped. The version string is stored with every index:
an index built by another analyzer version is re-analyzed on open.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

ANALYZER_VERSION = "clew-analyzer/1"

# A word: letters/digits (Unicode aware), optionally joined by -, _, ., /, : to more words.
_COMPOUND = re.compile(r"[^\W_]+(?:[-_./:][^\W_]+)*|[^\W_]*_[\w]+", re.UNICODE)
_SEPARATORS = re.compile(r"[-_./:]+")


def _camel_split(piece: str) -> list[str]:
    """Split at CamelCase and letter/digit boundaries, Unicode-aware.

    ``MaxAttempts`` → Max, Attempts; ``HTTP2Server`` → HTTP, 2, Server; ``café`` → café.
    """
    out: list[str] = []
    start = 0
    n = len(piece)
    for i in range(1, n):
        prev, cur = piece[i - 1], piece[i]
        boundary = (
            (prev.isdigit() != cur.isdigit())
            or (prev.islower() and cur.isupper())
            or (prev.isupper() and cur.isupper() and i + 1 < n and piece[i + 1].islower())
        )
        if boundary:
            out.append(piece[start:i])
            start = i
    out.append(piece[start:])
    return out


STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)

_NO_FOLD_ENDINGS = ("ss", "us", "is", "ous", "ics")


def fold_plural(word: str) -> str:
    """Light plural folding: ``policies``→``policy``, ``retries``→``retry``, ``keys``→``key``.

    Words of four letters or fewer, words with digits, and endings like ``-ss``, ``-us``, ``-is``
    are left alone, so identifiers and short words keep their form.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith(("ches", "shes", "xes", "zes")) and len(word) > 5:
        return word[:-2]
    if word.endswith("s") and not word.endswith(_NO_FOLD_ENDINGS) and len(word) > 4:
        return word[:-1]
    return word


def normalize(text: str) -> str:
    """NFKC then casefold: the text form every comparison in clew uses."""
    return unicodedata.normalize("NFKC", text).casefold()


def _parts(compound: str) -> list[str]:
    """Split a compound on separators and CamelCase/digit boundaries (original case)."""
    out: list[str] = []
    for piece in _SEPARATORS.split(compound):
        if not piece:
            continue
        folded = piece.casefold()
        out.append(folded)
        sub = _camel_split(piece)
        if len(sub) > 1:
            out.extend(s.casefold() for s in sub)
    return out


@lru_cache(maxsize=65_536)
def _analyze_word(word: str) -> tuple[str, ...]:
    is_compound = bool(_SEPARATORS.search(word)) or len(_camel_split(word)) > 1
    if not is_compound:
        w = word.casefold()
        if w in STOP_WORDS:
            return ()
        return (fold_plural(w),)
    tokens: list[str] = [word.casefold()]
    seen = {tokens[0]}
    for part in _parts(word):
        if part in STOP_WORDS or part in seen:
            continue
        seen.add(part)
        tokens.append(part)
        folded = fold_plural(part)
        if folded != part and folded not in seen:
            seen.add(folded)
            tokens.append(folded)
    return tuple(tokens)


def _word_tokens(text: str) -> Iterator[tuple[str, ...]]:
    """Analyzer tokens word by word: a compound's whole token first, then its parts."""
    for match in _COMPOUND.finditer(unicodedata.normalize("NFKC", text)):
        word = match.group(0).strip("_")
        if word:
            yield _analyze_word(word)


def analyze(text: str) -> list[str]:
    """Tokens for the lexical index and the query: the same function for both."""
    return [tok for tokens in _word_tokens(text) for tok in tokens]


def query_terms(text: str, part_weight: float = 1.0) -> dict[str, float]:
    """Weighted query terms for BM25: the analyzer's tokens, where the parts of a compound
    (``err``, ``4413`` of ``ERR-4413``) count ``part_weight`` and the whole token counts 1, so
    a chunk with the exact identifier outranks one that only shares its pieces."""
    out: dict[str, float] = {}
    for tokens in _word_tokens(text):
        for i, tok in enumerate(tokens):
            out[tok] = out.get(tok, 0.0) + (1.0 if i == 0 else part_weight)
    return out


def words(text: str) -> list[str]:
    """Plain normalized words (no compound splitting, stop words kept) for phrase matching."""
    return [m.group(0).strip("_") for m in _COMPOUND.finditer(normalize(text)) if m.group(0)]


_KEY_DROP = frozenset(
    {
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "our",
        "their",
        "its",
        "my",
        "your",
        "his",
        "her",
        "some",
        "any",
        "each",
        "every",
        "all",
    }
)
_KEY_PUNCT = re.compile(r"[^\w\s\-./:]+", re.UNICODE)


def concept_key(surface: str, *, identifier: bool = False, fold: bool = True) -> str:
    """Normalized key of a concept, so that aliases merge.

    Identifiers keep their exact (casefolded) form: ``ERR-4412`` and ``ERR-4413`` never merge.
    Other surfaces drop punctuation and leading determiners and fold plurals word by word:
    ``the PgBouncer migrations`` → ``pgbouncer migration``; ``fold=False`` (names: ``Rui
    Matos``) keeps the words as they are.
    """
    text = normalize(surface).strip()
    if identifier:
        return text.strip(".,;:!?()[]{}\"'`")
    text = _KEY_PUNCT.sub(" ", text)
    parts = [p.strip("-./:") for p in text.split()]
    parts = [p for p in parts if p]
    while parts and parts[0] in _KEY_DROP:
        parts = parts[1:]
    return " ".join(fold_plural(p) for p in parts) if fold else " ".join(parts)
