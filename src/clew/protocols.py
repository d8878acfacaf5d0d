"""Narrow protocols. Legs and the engine accept any object that satisfies them.

Each index protocol has one query verb and one maintenance verb (``sync``: catch up with the
store's release). A second backend implements the same protocols and passes the same
conformance suite (:mod:`clew.testing.conformance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from clew.filters import Mask, Node
from clew.types import Chunk, Document, DocumentSummary, LegHit, Mention

if TYPE_CHECKING:
    from clew.config import DenseConfig, EngineConfig, GraphConfig, LexicalConfig
    from clew.index.graph import GraphIndex, GraphStats, LinkedConcept

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Encoder(Protocol):
    """Texts → 2-D float32 array of L2-normalized rows, always."""

    def encode(self, texts: Sequence[str]) -> Matrix: ...


@runtime_checkable
class TokenCounter(Protocol):
    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


@runtime_checkable
class AsymmetricEncoder(Encoder, Protocol):
    """An encoder that embeds queries and documents differently (an instruction or prefix per
    side, as e5 or bge models want). The engine embeds queries with :meth:`encode_queries` and
    chunks with :meth:`encode_documents` when the encoder has them (:func:`encode_queries`),
    with :meth:`Encoder.encode` otherwise."""

    def encode_queries(self, texts: Sequence[str]) -> Matrix: ...

    def encode_documents(self, texts: Sequence[str]) -> Matrix: ...


def encode_queries(encoder: Encoder, texts: Sequence[str]) -> Matrix:
    """Queries embedded as ``encoder`` wants queries embedded."""
    side = getattr(encoder, "encode_queries", None)  # not isinstance: that costs per query
    return side(texts) if side is not None else encoder.encode(texts)


def encode_documents(encoder: Encoder, texts: Sequence[str]) -> Matrix:
    """Passages embedded as ``encoder`` wants documents embedded."""
    side = getattr(encoder, "encode_documents", None)
    return side(texts) if side is not None else encoder.encode(texts)


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
    page: int | None = None
    """The page (1-based) the chunk starts on, for a paged document (PDF)."""
    source: str = ""
    """Where its document came from (a file path relative to the ingest root, ``api``...)."""


@dataclass(frozen=True, slots=True)
class GraphRows:
    """What the graph index is derived from."""

    concepts: Sequence[tuple[int, str, str, str]]
    """(concept_id, key, label, kind)."""
    mentions: Sequence[tuple[int, int, int] | tuple[int, int, int, int]]
    """(ordinal, concept_id, count[, kind]): ``kind``, the mention's kind as a rank in
    :data:`clew.types.CONCEPT_KINDS` (what that chunk's extraction called the concept), is the
    concept's stored kind where left out."""
    chunks: Sequence[tuple[int, str, int]]
    """(ordinal, doc_id, seq)."""
    links: Sequence[tuple[str, str]]
    """(doc_id, raw target)."""
    titles: Sequence[tuple[str, str]] = ()
    """(doc_id, title): a concept named like a document's title leads to that document."""


class Store(Protocol):
    """System of record. Writes are transactional; every write bumps the release."""

    def release(self) -> int: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, values: Mapping[str, str]) -> None: ...

    def has_document(self, doc_id: str) -> bool: ...

    def counts(self) -> dict[str, int]: ...

    def documents(
        self, scope: Node | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[DocumentSummary]:
        """The documents (no text) in id order, bytewise: those ``scope`` lets through (as a
        caller's scope: a field a document lacks matches nothing), after the id ``after``
        (exclusive), at most ``limit``; all read from one release."""
        ...

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


class Writer(Protocol):
    """What an ingest needs of the store (a subset of :class:`Store`): the store itself, or a
    scoped writer's view of it (:class:`clew.retrieve.scoped_writer.ScopedWriter`)."""

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]: ...

    def write(self, records: Sequence[DocumentRecord]) -> int: ...

    def concept_kinds(self, keys: Sequence[str]) -> dict[str, str]: ...

    def release(self) -> int: ...


class Where(Protocol):
    """A request's filter, scope and exclusions compiled by one backend for one release
    (:meth:`Snapshot.where`): opaque to the pipeline, which hands it back to the legs."""

    @property
    def filtered(self) -> bool:
        """Whether it hides anything beyond deleted chunks."""
        ...

    @property
    def scoped(self) -> bool:
        """Whether a caller's scope is in it (the dense leg then scans the scope exactly, as
        ``dense.scoped_exact`` says)."""
        ...


@dataclass(frozen=True, slots=True)
class ScopeStats:
    """What query-time statistics are computed over for a scoped caller: BM25's chunk count,
    lengths and document frequencies, answer idf and coverage, concept idf, hub cuts and
    PageRank all come from ``population`` (the scope's live chunks), so no number a response
    carries depends on data outside the scope."""

    population: Mask
    graph: GraphStats
    sql: Any = None
    """PostgreSQL: the scope as BM25's population in SQL, with its corpus statistics
    (:meth:`clew.backends.postgres.snapshot.SqlLegs.population`)."""


class Snapshot(Protocol):
    """One release of an index as a request reads it: the legs (one verb each, every one with
    the same compiled :class:`Where`), and what the later stages read (keys, rows, idf,
    per-candidate signals). Each backend has one; the pipeline never asks which it has. The
    suite in :mod:`clew.testing.conformance` runs against every backend's snapshot."""

    @property
    def release(self) -> int: ...

    @property
    def live(self) -> Mask:
        """Chunks alive in this release, as a mask over ordinals."""
        ...

    @property
    def keys(self) -> Mapping[int, tuple[str, str]]:
        """Ordinal → (chunk id, content hash), for fusion ties, dedup, paths and traces."""
        ...

    @property
    def store(self) -> Any:
        """The system of record this release was read from."""
        ...

    @property
    def graph_index(self) -> GraphIndex:
        """The in-memory graph (expansion, PageRank, concept overlap)."""
        ...

    def where(
        self, filter: Node | None, scope: Node | None, exclude_docs: Sequence[str] = ()
    ) -> Where:
        """Compile a request's filter (strict: a field no document in scope has is a
        FilterError), the caller's scope (not strict) and hidden documents."""
        ...

    def mask(self, where: Where) -> Mask:
        """What ``where`` allows, as a mask over ordinals (for walks of the in-memory graph)."""
        ...

    def scope_stats(self, scope_json: str | None) -> ScopeStats | None:
        """The statistics population of a caller's scope (None: unscoped)."""
        ...

    def view(self, scope_json: str | None) -> int:
        """The release a caller with this scope sees: the last one, up to this snapshot's, that
        wrote a chunk the scope lets through or removed a document it let through (the
        snapshot's release when unscoped), so the release a scoped response carries, and the
        result cache keyed on it, do not move when another tenant writes."""
        ...

    def link(
        self, query: str, cfg: GraphConfig, where: Where, stats: ScopeStats | None
    ) -> list[LinkedConcept]:
        """Concepts the query names, among those ``where`` allows chunks to mention."""
        ...

    def lexical(
        self, terms: Mapping[str, float], where: Where, cfg: LexicalConfig, stats: ScopeStats | None
    ) -> list[LegHit]: ...

    def dense(self, vector: Matrix, where: Where, k: int) -> list[LegHit]: ...

    def graph(
        self,
        query: str,
        where: Where,
        cfg: GraphConfig,
        linked: Sequence[LinkedConcept],
        stats: ScopeStats | None,
    ) -> list[LegHit]: ...

    def load_keys(self, ordinals: Iterable[int]) -> None:
        """Make the keys of these ordinals cheap to read."""
        ...

    def rows(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]:
        """The chunks to render (a chunk deleted since is absent)."""
        ...

    def idf(self, terms: Sequence[str], stats: ScopeStats | None) -> dict[str, float]: ...

    def cosines(self, ordinals: npt.NDArray[np.int64], vector: Matrix) -> npt.NDArray[np.float64]:
        """Cosine of each chunk's vector with ``vector`` (0 where a chunk has none)."""
        ...

    def bm25(
        self,
        terms: Mapping[str, float],
        ordinals: npt.NDArray[np.int64],
        cfg: LexicalConfig,
        stats: ScopeStats | None,
    ) -> npt.NDArray[np.float64]:
        """BM25 of each chunk for ``terms`` (as float32 scores, widened)."""
        ...

    def vectors(self, ordinals: Sequence[int]) -> dict[int, Matrix]:
        """The stored vectors of these chunks (those that have one)."""
        ...

    def created(
        self, ordinals: Sequence[int], memories: bool
    ) -> Mapping[int, tuple[float, bool]] | None:
        """(created_at in epoch seconds or NaN, whether a memory) of each chunk; None when no
        chunk of the release has a creation time."""
        ...

    def has_memories(self) -> bool: ...

    def visible(self, ordinals: Sequence[int], scope: Node | None) -> bool:
        """Whether every given chunk is live and passes ``scope``."""
        ...

    def uses_hnsw(self, dense: DenseConfig) -> bool: ...


class Backend(Protocol):
    """Where an index lives: its system of record and how a release becomes a
    :class:`Snapshot`. ``clew.engine.BACKENDS`` maps each kind of target to one."""

    name: str
    store: Any
    directory: Path
    """A local folder for what the engine keeps beside the store (traces, the write lock)."""
    url: str | None

    def snapshot(self, current: Snapshot | None, config: EngineConfig) -> Snapshot:
        """The store's current release, catching up from ``current`` where it can."""
        ...

    def close(self) -> None: ...


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
