"""Narrow protocols. Legs and the engine accept any object that satisfies them.

Each index protocol has one query verb and one maintenance verb (``sync``: catch up with the
store's release). A second backend implements the same protocols and passes the same
conformance suite (:mod:`clew.testing.conformance`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from clew.filters import Mask
from clew.types import Chunk, Document, LegHit, Mention

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Encoder(Protocol):
    """Texts → 2-D float32 array of L2-normalized rows, always."""

    def encode(self, texts: Sequence[str]) -> Matrix: ...


@runtime_checkable
class TokenCounter(Protocol):
    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """Everything the store writes for one document, in one transaction with its batch."""

    document: Document
    doc_hash: str
    chunks: tuple[Chunk, ...]
    tokens: tuple[tuple[str, ...], ...]
    """Analyzer tokens per chunk (title and headings included)."""
    vectors: Matrix
    mentions: tuple[tuple[Mention, ...], ...]


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk as the store returns it for rendering a hit."""

    ordinal: int
    chunk_id: str
    doc_id: str
    title: str
    text: str
    content_hash: str
    heading_path: tuple[str, ...]
    metadata: dict[str, Any]
    token_count: int = 0


@dataclass(frozen=True, slots=True)
class GraphRows:
    """What the graph index is derived from."""

    concepts: Sequence[tuple[int, str, str, str]]
    """(concept_id, key, label, kind)."""
    mentions: Sequence[tuple[int, int, int]]
    """(ordinal, concept_id, count)."""
    chunks: Sequence[tuple[int, str, int]]
    """(ordinal, doc_id, seq)."""
    links: Sequence[tuple[str, str]]
    """(doc_id, raw target)."""


class Store(Protocol):
    """System of record. Writes are transactional; every write bumps the release."""

    def release(self) -> int: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, values: Mapping[str, str]) -> None: ...

    def has_document(self, doc_id: str) -> bool: ...

    def counts(self) -> dict[str, int]: ...

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]: ...

    def write(self, records: Sequence[DocumentRecord]) -> int: ...

    def concept_kinds(self, keys: Sequence[str]) -> dict[str, str]: ...

    def delete(self, doc_ids: Sequence[str]) -> int: ...

    def max_ordinal(self) -> int: ...

    def live_ordinals(self) -> npt.NDArray[np.int64]: ...

    def iter_tokens(self, after: int) -> Iterator[tuple[int, tuple[str, ...]]]: ...

    def iter_vectors(self, after: int) -> Iterator[tuple[int, Matrix]]: ...

    def chunk_keys(self, after: int) -> Iterator[tuple[int, tuple[str, str]]]: ...

    def fetch(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]: ...

    def metadata_rows(self) -> Iterator[tuple[list[int], Mapping[str, Any]]]: ...

    def graph_rows(self) -> GraphRows: ...


class LexicalIndex(Protocol):
    def search(
        self, tokens: Sequence[str] | Mapping[str, float], allowed: Mask, k: int
    ) -> list[LegHit]: ...


class VectorIndex(Protocol):
    def search(self, vector: Matrix, allowed: Mask, k: int) -> list[LegHit]: ...


class GraphIndex(Protocol):
    def search(self, query: str, allowed: Mask, k: int) -> list[LegHit]: ...


@dataclass(frozen=True, slots=True)
class RerankCandidate:
    """One candidate as a reranker sees it: its id, its text, and precomputed features."""

    chunk_id: str
    title: str
    text: str
    features: Mapping[str, float]
    """Named, already computed signals (cosine, bm25, legs, pagerank, …) for feature rerankers."""


@dataclass(frozen=True, slots=True)
class RerankScores:
    """A reranker's verdict: one score per candidate, in the order given.

    ``None`` means the candidate got no usable score (an LLM left it out or garbled it); it is
    ranked after every scored candidate, in fused order. ``notes`` report such problems.
    ``explain`` holds, per candidate, what made its score (feature contributions, a grade).
    """

    scores: tuple[float | None, ...]
    notes: tuple[str, ...] = ()
    explain: tuple[Mapping[str, float], ...] = ()


@runtime_checkable
class Reranker(Protocol):
    """Scores candidates for a query. Raising any exception makes the engine fall back to the
    fused order and record the reason; only the caller's cancellation propagates."""

    name: str

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores: ...
