"""Graph index and graph leg: concepts, MENTIONS, NEXT, HAS_CHUNK, LINKS_TO, PageRank.

Derived from the store in one pass (scipy sparse matrices). The graph leg links query words and
identifiers to concepts (exact normalized match, then one-edit fuzzy match for non-identifiers),
walks to the chunks that mention them (hop 1) and, through RELATED_TO concepts, to the chunks
that mention those (hop 2), and ranks by hop distance, edge weight and PageRank.

RELATED_TO is co-occurrence in a chunk. The leg derives it per query from MENTIONS restricted
to the chunks the caller may see, so a hidden chunk can neither be returned nor create the edge
that leads to a visible one: the access mask applies to every node the walk reaches.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from clew.config import GraphConfig
from clew.filters import Mask
from clew.index.topk import top_k
from clew.ingest.analyze import STOP_WORDS, concept_key, fold_plural, words
from clew.ingest.concepts import find_identifiers, identifier_shaped
from clew.links import CONCEPT_PREFIX, split_link
from clew.protocols import GraphRows
from clew.types import CONCEPT_KINDS, KIND_RANK, GraphTrail, LegHit

T = TypeVar("T")

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LinkedConcept:
    concept_id: int
    key: str
    label: str
    how: str
    """``exact``, ``identifier`` or ``fuzzy``."""
    weight: float
    kind: str = ""
    """The concept's kind: ``identifier``, ``entity`` or ``phrase``."""


@dataclass(frozen=True, slots=True)
class DocLayout:
    doc_chunks: dict[str, tuple[int, ...]]
    """Document → its chunk ordinals in reading order."""
    prev_chunk: dict[int, int]
    linked_from: dict[str, list[str]]
    """Document → documents that link to it."""
    docs: list[str]
    """Document ids, sorted."""
    doc_index: dict[str, int]


class _FuzzyIndex:
    """Deletion variants of concept keys → keys, grown as releases add concepts (building it
    over a large vocabulary takes seconds, so successive graphs share one)."""

    def __init__(self) -> None:
        self.variants: dict[str, list[str]] = {}
        self._keys: dict[str, bool] = {}
        """Key → whether its variants are in (identifiers and short keys have none)."""

    def size(self) -> int:
        return len(self._keys)

    def cover(self, keys: Sequence[str]) -> None:
        """Add the variants of ``keys`` it lacks. Of every key, whatever its kind: whether a
        concept is an identifier (never linked fuzzily) depends on the chunks a caller may see,
        so lookups check the kind (:meth:`GraphStats.kind`)."""
        for key in keys:
            wanted = len(key) >= 5 and fuzzy_linkable(key.split())
            if self._keys.get(key) or (key in self._keys and not wanted):
                continue
            self._keys[key] = wanted
            if wanted:
                for variant in (key, *_deletions(key)):
                    self.variants.setdefault(variant, []).append(key)


@dataclass(frozen=True, slots=True)
class GraphStats:
    """The numbers the graph leg ranks with, over one population of chunks: how many chunks
    mention each concept, how many chunks there are, and PageRank. For a caller's scope they are
    those of a graph built from the scope's chunks alone (:meth:`GraphIndex.stats`), so no
    document outside the scope moves a weight, a hub cut or a PageRank."""

    df: Vector
    n_chunks: int
    kind_rank: npt.NDArray[np.int8]
    """Each concept's kind (its rank in :data:`~clew.types.CONCEPT_KINDS`) over the population:
    the highest its mentions there have, so another tenant's chunk that calls a word an entity
    does not make it one for this scope (0 where the population does not mention it)."""
    _pagerank: Callable[[], Vector]
    """Computes PageRank on first use (only the graph leg and the feature reranker read it)."""
    _memo: list[Vector] = field(default_factory=list, compare=False)

    @property
    def pagerank_chunk(self) -> Vector:
        if not self._memo:
            self._memo.append(self._pagerank())
        return self._memo[0]

    def kind(self, row: int) -> str:
        """The kind of the concept in ``row`` over this population."""
        return CONCEPT_KINDS[int(self.kind_rank[row])]


class GraphIndex:
    def __init__(self) -> None:
        self.release = -1
        self.keys: list[str] = []
        self.labels: list[str] = []
        self.kinds: list[str] = []
        """Each concept's kind over the whole graph (as stored: the highest of its mentions')."""
        self.kind_rank: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        """:attr:`kinds` as ranks in :data:`~clew.types.CONCEPT_KINDS`."""
        self.key_to_row: dict[str, int] = {}
        self.concept_ids: list[int] = []
        self.mentions = sp.csr_matrix((0, 0))
        """concepts × chunks, weight 1 + ln(count); canonical (sorted indices, no duplicates)."""
        self.mention_kind: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        """The kind rank of each mention, aligned with ``mentions.data``: what the chunk's
        extraction called the concept (scoped kinds are the highest over a scope's chunks)."""
        self._named: npt.NDArray[np.int64] | None = None
        """Positions in ``mentions.data`` of the mentions of a kind above phrase (cached)."""
        self.mentions_csc = sp.csc_matrix((0, 0))
        self.df: Vector = np.zeros(0)
        self.pagerank_chunk: Vector = np.zeros(0)
        self.pagerank_concept: Vector = np.zeros(0)
        self.chunk_doc: dict[int, str] = {}
        self.doc_links: dict[str, list[str]] = {}
        self.link_types: dict[str, dict[str, str]] = {}
        """Source document → target document → relation name, for typed links only."""
        self.next_chunk: dict[int, int] = {}
        self.about: dict[int, tuple[str, ...]] = {}
        """Concept row → the documents titled by it (see :func:`title_keys`)."""
        self.n_chunks = 0
        self._fuzzy_index: _FuzzyIndex | None = None
        self._fuzzy_ready = False
        self._fuzzy_lock = threading.Lock()
        self._layout: DocLayout | None = None
        self._adjacency: sp.csr_matrix | None = None
        self._present: npt.NDArray[np.bool_] | None = None
        self.max_words = 1
        self._derived: OrderedDict[tuple[str, bytes], tuple[Any, int]] = OrderedDict()
        self._derived_lock = threading.Lock()

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def build(cls, rows: GraphRows, size: int, release: int) -> GraphIndex:
        g = cls()
        g.release = release
        live = [(cid, key, label, kind) for cid, key, label, kind in rows.concepts]
        live.sort()
        row_of_cid: dict[int, int] = {}
        for r, (cid, key, label, kind) in enumerate(live):
            row_of_cid[cid] = r
            g.concept_ids.append(cid)
            g.keys.append(key)
            g.labels.append(label)
            g.kinds.append(kind)
            g.key_to_row[key] = r
            g.max_words = max(g.max_words, key.count(" ") + 1)
        n_c = len(live)
        g.kind_rank = kind_ranks(g.kinds)
        ranks = g.kind_rank.tolist()
        m_rows, m_cols, m_vals, m_kinds = [], [], [], []
        for m in rows.mentions:
            row = row_of_cid.get(m[1])
            if row is not None and m[0] < size:
                m_rows.append(row)
                m_cols.append(m[0])
                m_vals.append(1.0 + math.log(max(m[2], 1)))
                m_kinds.append(m[3] + 1 if len(m) > 3 else ranks[row] + 1)
        # the same coordinates twice, each made canonical (sorted, (concept, ordinal) unique):
        # the kinds line up with the weights
        g.mentions = sp.csr_matrix((m_vals, (m_rows, m_cols)), shape=(n_c, size))
        kinds = sp.csr_matrix((np.asarray(m_kinds, dtype=np.int8), (m_rows, m_cols)), (n_c, size))
        g.mentions.sum_duplicates()
        kinds.sum_duplicates()
        assert np.array_equal(kinds.indices, g.mentions.indices), "mention kinds out of line"
        g.mention_kind = (kinds.data - 1).astype(np.int8)
        g.mentions_csc = g.mentions.tocsc()
        g.df = np.diff(g.mentions.indptr).astype(np.float64)
        g.n_chunks = len(rows.chunks)
        by_doc: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for ordinal, doc_id, seq in rows.chunks:
            g.chunk_doc[int(ordinal)] = doc_id
            by_doc[doc_id].append((seq, int(ordinal)))
        for items in by_doc.values():
            items.sort()
            for (_, a), (_, b) in itertools.pairwise(items):
                g.next_chunk[a] = b
        g.doc_links, g.link_types = _resolve_links(rows.links, set(by_doc))
        g.about = _titled(g, rows.titles, set(by_doc))
        g.pagerank_chunk, g.pagerank_concept = _pagerank(g, by_doc, size)
        return g

    def _fuzzy(self) -> dict[str, list[str]]:
        """One-deletion neighbourhood of every non-identifier key → the keys (built on first
        use, once, however many threads ask; shared with later releases, see
        :meth:`adopt_fuzzy`)."""
        with self._fuzzy_lock:
            if not self._fuzzy_ready:
                shared = self._fuzzy_index
                if shared is None or shared.size() > 1.25 * len(self.keys) + 1000:
                    shared = self._fuzzy_index = _FuzzyIndex()  # too many stale keys: anew
                shared.cover(self.keys)
                self._fuzzy_ready = True
            assert self._fuzzy_index is not None
            return self._fuzzy_index.variants

    def adopt_fuzzy(self, previous: GraphIndex) -> None:
        """Start from ``previous``'s fuzzy index (an earlier release): only keys it lacks are
        added on first use. Keys gone since are skipped at lookup (not in this graph)."""
        if previous._fuzzy_index is not None and self._fuzzy_index is None:
            self._fuzzy_index = previous._fuzzy_index

    def layout(self) -> DocLayout:
        """Documents' chunks in order, the previous chunk of each, and reverse links (cached)."""
        if self._layout is None:
            prev = {b: a for a, b in self.next_chunk.items()}
            by_doc: dict[str, list[int]] = defaultdict(list)
            for o, d in self.chunk_doc.items():
                by_doc[d].append(o)
            doc_chunks: dict[str, tuple[int, ...]] = {}
            for d, ords in by_doc.items():
                first = [o for o in ords if o not in prev]
                chain: list[int] = []
                cur: int | None = min(first) if first else min(ords)
                while cur is not None and len(chain) < len(ords):
                    chain.append(cur)
                    cur = self.next_chunk.get(cur)
                doc_chunks[d] = tuple(chain)
            linked_from: dict[str, list[str]] = defaultdict(list)
            for src, targets in self.doc_links.items():
                for t in targets:
                    linked_from[t].append(src)
            docs = sorted(doc_chunks)
            self._layout = DocLayout(
                doc_chunks,
                prev,
                {d: sorted(s) for d, s in linked_from.items()},
                docs,
                {d: i for i, d in enumerate(docs)},
            )
        return self._layout

    def derived(
        self,
        key: tuple[str, bytes],
        keep: int,
        build: Callable[[], T],
        *,
        nbytes: Callable[[T], int] = lambda value: 0,
        budget: int = 0,
    ) -> T:
        """A structure derived from this graph and ``key`` (e.g. a mask's view for the PPR
        leg), built on first use and cached. Of a kind (``key[0]``) at most ``keep`` are kept
        and, with a ``budget``, at most that many bytes in all (``nbytes`` of each); the least
        recently used go first, the newest stays whatever its size."""
        with self._derived_lock:
            if key in self._derived:
                self._derived.move_to_end(key)
                return cast(T, self._derived[key][0])
        value = build()
        with self._derived_lock:
            self._derived[key] = (value, nbytes(value))
            same = [k for k in self._derived if k[0] == key[0]]
            total = sum(self._derived[k][1] for k in same)
            while len(same) > 1 and (len(same) > keep or (budget and total > budget)):
                old = same.pop(0)
                total -= self._derived.pop(old)[1]
        return value

    def present(self) -> npt.NDArray[np.bool_]:
        """Mask of the ordinals that are chunks of this graph (cached)."""
        if self._present is None:
            size = self.mentions.shape[1]
            out = np.zeros(size, dtype=bool)
            known = np.fromiter(self.chunk_doc, dtype=np.int64, count=len(self.chunk_doc))
            out[known[known < size]] = True
            self._present = out
        return self._present

    def chunk_adjacency(self) -> sp.csr_matrix:
        """Chunk ↔ chunk edges, undirected, weight 1: NEXT within a document, and LINKS_TO
        between the first chunks of documents that link (cached)."""
        if self._adjacency is None:
            size = self.mentions.shape[1]
            pairs = [(a, b) for a, b in self.next_chunk.items() if a < size and b < size]
            first = {d: ords[0] for d, ords in self.layout().doc_chunks.items() if ords}
            for src, targets in self.doc_links.items():
                a = first.get(src)
                pairs += [(a, first[t]) for t in targets if a is not None and t in first]
            arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
            arr = arr[arr[:, 0] != arr[:, 1]]
            rows = np.concatenate([arr[:, 0], arr[:, 1]])
            cols = np.concatenate([arr[:, 1], arr[:, 0]])
            adj = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(size, size))
            adj.data[:] = 1.0  # a pair that is both NEXT and a link counts once
            self._adjacency = adj
        return self._adjacency

    # -- statistics -------------------------------------------------------------------------

    def stats(self, population: Mask | None = None) -> GraphStats:
        """The leg's statistics over ``population`` (None: the whole graph).

        For a population they are computed on the subgraph of its chunks, the concepts they
        mention and their documents, with nodes in the same relative order as a graph built
        from those documents alone would have: the same numbers, bit for bit."""
        if population is None:
            whole = self.pagerank_chunk
            return GraphStats(self.df, self.n_chunks, self.kind_rank, lambda: whole)
        size = self.mentions.shape[1]
        allow = np.zeros(size, dtype=bool)
        upto = min(size, len(population))
        allow[:upto] = population[:upto]
        present = np.zeros(size, dtype=bool)
        known = np.fromiter(self.chunk_doc, dtype=np.int64, count=len(self.chunk_doc))
        present[known[known < size]] = True
        allow &= present
        m = self.mentions.tocoo()
        inside = allow[m.col]
        df = np.bincount(m.row[inside], minlength=len(self.keys)).astype(np.float64)
        kinds = np.zeros(len(self.keys), dtype=np.int8)
        if self._named is None:
            self._named = np.flatnonzero(self.mention_kind)
        named = self._named[inside[self._named]]  # most mentions are phrases: only the others
        for rank in (1, 2):
            kinds[m.row[named[self.mention_kind[named] == rank]]] = rank
        n_chunks = int(allow.sum())
        return GraphStats(df, n_chunks, kinds, lambda: self._scoped_pagerank(allow, df))

    def scoped_kinds(self, keys: Sequence[str], allowed: Mask) -> dict[str, str]:
        """Kind of each concept among ``keys`` that an allowed chunk mentions, over the allowed
        chunks (the others are left out)."""
        m = self.mentions
        out: dict[str, str] = {}
        upto = min(m.shape[1], len(allowed))
        for key in keys:
            row = self.key_to_row.get(key)
            if row is None:
                continue
            lo, hi = m.indptr[row], m.indptr[row + 1]
            cols = m.indices[lo:hi]
            seen = cols < upto
            seen[seen] = allowed[cols[seen]]
            if seen.any():
                out[key] = CONCEPT_KINDS[int(self.mention_kind[lo:hi][seen].max())]
        return out

    def _scoped_pagerank(self, allow: npt.NDArray[np.bool_], df: Vector) -> Vector:
        """PageRank of the subgraph induced by the allowed chunks, on the ordinal space."""
        size = self.mentions.shape[1]
        chunks = np.flatnonzero(allow)
        out = np.zeros(size)
        if len(chunks) == 0:
            return out
        chunk_pos = np.full(size, -1, dtype=np.int64)
        chunk_pos[chunks] = np.arange(len(chunks))
        rows = np.flatnonzero(df > 0)
        row_pos = np.full(len(self.keys), -1, dtype=np.int64)
        row_pos[rows] = np.arange(len(rows))
        sub = GraphIndex()
        sub.keys = [self.keys[int(r)] for r in rows]
        m = self.mentions.tocoo()
        keep = allow[m.col]
        sub.mentions = sp.csr_matrix(
            (m.data[keep], (row_pos[m.row[keep]], chunk_pos[m.col[keep]])),
            shape=(len(rows), len(chunks)),
        )
        sub.chunk_doc = {int(chunk_pos[o]): d for o, d in self.chunk_doc.items() if allow[o]}
        sub.next_chunk = {
            int(chunk_pos[a]): int(chunk_pos[b])
            for a, b in self.next_chunk.items()
            if allow[a] and b < size and allow[b]
        }
        docs = set(sub.chunk_doc.values())
        sub.doc_links = {
            src: [t for t in targets if t in docs]
            for src, targets in self.doc_links.items()
            if src in docs
        }
        sub.doc_links = {src: t for src, t in sub.doc_links.items() if t}
        # documents' chunks in the order a build from these rows would list them
        by_doc: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for o in sorted(sub.chunk_doc):
            by_doc[sub.chunk_doc[o]].append((o, o))
        pr_chunk, _ = _pagerank(sub, by_doc, len(chunks))
        out[chunks] = pr_chunk
        return out

    # -- linking ----------------------------------------------------------------------------

    def link(
        self,
        query: str,
        *,
        fuzzy: bool = True,
        word_weight: float = 1.0,
        stats: GraphStats | None = None,
    ) -> list[LinkedConcept]:
        """Concepts a query names: identifiers, then word n-grams (exact key, then fuzzy).

        Weight: idf of the concept over chunks; a plain one-word phrase concept (a common noun,
        not an identifier or named entity) is scaled by ``word_weight``. ``stats``: the
        population the idf is computed over (:meth:`stats`); a concept no chunk of it mentions
        is not linked.
        """
        found: dict[int, LinkedConcept] = {}
        st = stats or self.stats()
        n_live = max(st.n_chunks, 1)
        concept_df = st.df

        def add(row: int, how: str) -> None:
            if row in found or concept_df[row] == 0:
                return
            weight = math.log(1.0 + n_live / concept_df[row])
            kind = st.kind(row)
            if kind == "phrase" and " " not in self.keys[row]:
                if word_weight <= 0:
                    return
                weight *= word_weight
            found[row] = LinkedConcept(
                self.concept_ids[row], self.keys[row], self.labels[row], how, weight, kind
            )

        for surface in find_identifiers(query):
            row = self.key_to_row.get(concept_key(surface, identifier=True))
            if row is not None:
                add(row, "identifier")
        tokens = words(query)
        unmatched: list[str] = []
        for n in range(min(self.max_words, 4), 0, -1):
            for i in range(len(tokens) - n + 1):
                gram = tokens[i : i + n]
                if n == 1 and gram[0] in STOP_WORDS:
                    continue
                raw = " ".join(gram)
                row = None
                for key in gram_keys(raw):
                    row = self.key_to_row.get(key)
                    if row is not None:
                        break
                if row is not None:
                    add(row, "exact")
                elif n <= 2 and fuzzy_linkable(gram):
                    unmatched.append(concept_key(raw))
        if fuzzy:
            for key in unmatched:
                if len(key) < 5:
                    continue
                for variant in (key, *_deletions(key)):
                    for found_key in self._fuzzy().get(variant, ()):
                        row = self.key_to_row.get(found_key)
                        if row is None or st.kind(row) == "identifier":
                            continue  # gone since an earlier release, or an identifier
                        if edit_distance_le1(key, self.keys[row]):
                            add(row, "fuzzy")
        return sorted(found.values(), key=lambda c: (-c.weight, c.key))

    def within(self, linked: Sequence[LinkedConcept], allowed: Mask) -> list[LinkedConcept]:
        """The linked concepts with at least one mention in an allowed chunk.

        Linking runs over the whole graph; without this, a caller could learn from the route
        (or the trace) that an identifier exists in documents it may not see."""
        out = []
        m = self.mentions
        upto = min(m.shape[1], len(allowed))
        for c in linked:
            row = self.key_to_row[c.key]
            cols = m.indices[m.indptr[row] : m.indptr[row + 1]]
            cols = cols[cols < upto]
            if len(cols) and bool(allowed[cols].any()):
                out.append(c)
        return out

    # -- the leg ----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        allowed: Mask,
        k: int,
        config: GraphConfig | None = None,
        linked: Sequence[LinkedConcept] | None = None,
        stats: GraphStats | None = None,
    ) -> list[LegHit]:
        """Top-k chunks reached from the linked concepts among ``allowed`` ordinals; ``stats``
        as in :meth:`link` (hub cut, singletons and PageRank over that population)."""
        config = config or GraphConfig()
        st = stats or self.stats()
        if linked is None:
            linked = self.link(
                query, fuzzy=config.fuzzy, word_weight=config.word_weight, stats=stats
            )
        size = self.mentions.shape[1]
        if not linked or size == 0:
            return []
        allow = np.zeros(size, dtype=bool)
        upto = min(size, len(allowed))
        allow[:upto] = allowed[:upto]
        seeds = np.zeros(len(self.keys))
        for c in linked:
            seeds[self.key_to_row[c.key]] = c.weight
        hop1 = self._spread(seeds)
        hop1[~allow] = 0.0
        scores = hop1.copy()
        related_rows: set[int] = set()
        if config.max_hops >= 2:
            reached = np.flatnonzero(hop1 > 0)
            if len(reached):
                # concepts co-occurring with the seeds in allowed chunks (RELATED_TO, per query)
                related = np.asarray(self.mentions_csc[:, reached] @ hop1[reached]).ravel()
                related[seeds > 0] = 0.0
                hub_limit = max(20.0, config.hub_fraction * max(st.n_chunks, 1))
                related[st.df > hub_limit] = 0.0
                related[st.df < 2] = 0.0
                if config.related_weighting == "pmi":  # co-occurrence over what chance gives
                    expected = st.df * (float(hop1[reached].sum()) / max(st.n_chunks, 1))
                    ratio = np.divide(
                        related, expected, out=np.zeros_like(related), where=related > 0
                    )
                    related = np.log(np.maximum(ratio, 1.0))
                keep = np.flatnonzero(related > 0)
                if len(keep) > config.related_per_concept * len(linked):
                    cut = config.related_per_concept * len(linked)
                    order = np.lexsort((keep, -related[keep]))[:cut]
                    keep = keep[order]
                if len(keep):
                    rel = np.zeros(len(self.keys))
                    rel[keep] = related[keep] / related[keep].max() * float(seeds.max())
                    hop2 = self._spread(rel) * config.hop_penalty
                    hop2[~allow] = 0.0
                    scores = np.maximum(hop1, hop2) + 0.1 * np.minimum(hop1, hop2)
                    related_rows = {int(r) for r in keep}
        if config.pagerank_weight > 0 and len(st.pagerank_chunk):
            pr = np.zeros(size)
            m = min(size, len(st.pagerank_chunk))
            pr[:m] = st.pagerank_chunk[:m]
            scores = scores * (1.0 + config.pagerank_weight * pr)
        hits = top_k(scores.astype(np.float32), k)
        seed_rows = {self.key_to_row[c.key] for c in linked}
        out = []
        for h in hits:
            csc = self.mentions_csc
            a, b = csc.indptr[h.ordinal], csc.indptr[h.ordinal + 1]
            rows_here = set(csc.indices[a:b].tolist())
            direct = sorted(self.keys[r] for r in rows_here & seed_rows)
            if direct:
                trail = GraphTrail(concepts=tuple(direct), hops=1)
            else:
                through = sorted(self.keys[r] for r in rows_here & related_rows)[:5]
                trail = GraphTrail(
                    concepts=tuple(sorted(c.key for c in linked))[:5], hops=2, via=tuple(through)
                )
            out.append(LegHit(h.ordinal, h.score, trail))
        return out

    def _spread(self, weights: Vector) -> Vector:
        """Chunk scores: sum over concepts of weight × MENTIONS edge weight (non-zero rows only)."""
        rows = np.flatnonzero(weights)
        out = np.zeros(self.mentions.shape[1])
        if len(rows):
            out = np.asarray(self.mentions[rows].T @ weights[rows]).ravel()
        return out


TITLE_MAX_DOCS = 2
"""A concept leads to the documents it titles only when it titles at most this many of those a
caller may see (more is a generic title such as ``Release notes``)."""
_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")


def title_keys(title: str, max_words: int = 0) -> set[str]:
    """The concept keys a document's title goes by: as written and without a trailing
    qualifier in parentheses (``Charmed (TV series)`` → ``charmed``), folded and as a name, or
    its exact form when the title is one identifier (``ERR-4012``). Not by a part of it: a
    support article titled ``SW-2207: Vehicle not responding`` is not what every mention of
    ``SW-2207`` asks for (on our support dev set such links cost 0.003 nDCG@10 and gained
    nothing). One-word common nouns, stop words, titles over 120 characters and (given
    ``max_words``, the longest concept key's) titles of more words than a concept has go by
    none."""
    title = title.strip()
    if not title or len(title) > 120:
        return set()
    forms = [title]
    if title.endswith(")"):
        bare = _QUALIFIER.sub("", title).strip()
        if bare and bare != title:
            forms.append(bare)
    keys: set[str] = set()
    for form in forms:
        if " " not in form:
            if identifier_shaped(form):
                keys.add(concept_key(form, identifier=True))
                continue
        elif max_words and form.count(" ") >= max_words + 2:
            continue  # longer than any concept, even after dropping punctuation-only words
        name = concept_key(form, fold=False)
        if len(name) < 3:
            continue
        words = name.split()
        if all(w in STOP_WORDS or w.isdigit() for w in words):
            continue
        keys.add(name)
        # a one-word title folds into a common noun: only its name form; words that do not
        # end in "s" fold to themselves
        if len(words) > 1 and "s " in name + " ":
            keys.add(" ".join([fold_plural(w) for w in words]))  # = concept_key(form)
    return keys


def _titled(
    g: GraphIndex, titles: Sequence[tuple[str, str]], doc_ids: set[str]
) -> dict[int, tuple[str, ...]]:
    """Concept row → the documents whose title it is, all of them: how many a caller may see
    (at most :data:`TITLE_MAX_DOCS` for the concept to lead anywhere) is counted per query over
    the allowed ones, and so is whether a one-word concept is a common noun (a phrase, such as
    ``overview``, titles nothing: :func:`titles_lead`)."""
    about: dict[int, set[str]] = defaultdict(set)
    for doc_id, title in titles:
        if doc_id not in doc_ids:
            continue
        for key in title_keys(title, g.max_words):
            row = g.key_to_row.get(key)
            if row is not None:
                about[row].add(doc_id)
    return {r: tuple(sorted(d)) for r, d in about.items()}


def kind_ranks(kinds: Sequence[str]) -> npt.NDArray[np.int8]:
    """Kinds as ranks in :data:`~clew.types.CONCEPT_KINDS` (an unknown kind: a phrase)."""
    return np.asarray([KIND_RANK.get(k, 0) for k in kinds], dtype=np.int8)


def titles_lead(g: GraphIndex, row: int, stats: GraphStats) -> bool:
    """Whether the concept in ``row`` may lead to the documents it titles, for a caller whose
    population ``stats`` are: a name or a phrase of several words, not a common noun."""
    return row in g.about and (" " in g.keys[row] or stats.kind(row) != "phrase")


def _resolve_links(
    links: Sequence[tuple[str, str]], doc_ids: set[str]
) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """Raw link targets → (source → target documents, source → target → relation name)."""
    by_base: dict[str, list[str]] = defaultdict(list)
    for d in doc_ids:
        by_base[d.rsplit("/", 1)[-1]].append(d)
        by_base[d.rsplit("/", 1)[-1].rsplit(".", 1)[0]].append(d)
    out: dict[str, list[str]] = defaultdict(list)
    types: dict[str, dict[str, str]] = defaultdict(dict)
    for src, raw in links:
        relation, raw = split_link(raw)
        if raw.startswith(CONCEPT_PREFIX) and relation is not None:
            continue  # a relation to a concept is a mention, not a document edge
        target = raw.split("#", 1)[0].strip().removeprefix("./")
        if not target:
            continue
        if (relation is not None and target in doc_ids) or target in doc_ids:
            hits = [target]
        else:
            base = target.rsplit("/", 1)[-1]
            hits = sorted(set(by_base.get(base, []) or by_base.get(base.rsplit(".", 1)[0], [])))
        for dst in hits:
            if dst != src and dst not in out[src]:
                out[src].append(dst)
            if dst != src and relation is not None:
                types[src][dst] = relation
    return dict(out), dict(types)


def _pagerank(
    g: GraphIndex,
    by_doc: dict[str, list[tuple[int, int]]],
    size: int,
    damping: float = 0.85,
    iterations: int = 50,
) -> tuple[Vector, Vector]:
    """PageRank over chunks, concepts and documents; returned scaled to [0, 1] by the max."""
    n_c = len(g.keys)
    docs = sorted(by_doc)
    doc_row = {d: size + n_c + i for i, d in enumerate(docs)}
    n = size + n_c + len(docs)
    src: list[npt.NDArray[np.int64]] = []
    dst: list[npt.NDArray[np.int64]] = []
    coo = g.mentions.tocoo()
    concept_nodes = coo.row.astype(np.int64) + size
    chunk_nodes = coo.col.astype(np.int64)
    src += [chunk_nodes, concept_nodes]  # MENTIONS, both directions
    dst += [concept_nodes, chunk_nodes]
    pairs = [(a, b) for a, b in g.next_chunk.items()]
    for d, items in by_doc.items():
        pairs += [(doc_row[d], o) for _, o in items]  # HAS_CHUNK
    for s, targets in g.doc_links.items():
        pairs += [(doc_row[s], doc_row[t]) for t in targets]  # LINKS_TO (directed)
    if pairs:
        arr = np.asarray(pairs, dtype=np.int64)
        undirected = np.asarray([not (a >= size + n_c and b >= size + n_c) for a, b in pairs])
        src += [arr[:, 0], arr[undirected, 1]]
        dst += [arr[:, 1], arr[undirected, 0]]
    s_all = np.concatenate(src) if src else np.zeros(0, dtype=np.int64)
    d_all = np.concatenate(dst) if dst else np.zeros(0, dtype=np.int64)
    if n == 0 or len(s_all) == 0:
        return np.zeros(size), np.zeros(n_c)
    adj = sp.csr_matrix((np.ones(len(s_all)), (s_all, d_all)), shape=(n, n))
    out_deg = np.asarray(adj.sum(axis=1)).ravel()
    inv = np.divide(1.0, out_deg, out=np.zeros(n), where=out_deg > 0)
    transition = sp.diags(inv) @ adj
    present = np.zeros(n, dtype=bool)
    present[list(g.chunk_doc)] = True
    present[size:] = True
    base = present / present.sum()
    rank = base.copy()
    for _ in range(iterations):
        dangling = rank[out_deg == 0].sum()
        new = damping * (transition.T @ rank + dangling * base) + (1 - damping) * base
        if np.abs(new - rank).sum() < 1e-9:
            rank = new
            break
        rank = new
    chunk_pr = rank[:size]
    concept_pr = rank[size : size + n_c]
    return _scale(chunk_pr), _scale(concept_pr)


def _scale(v: Vector) -> Vector:
    top = float(v.max()) if len(v) else 0.0
    return v / top if top > 0 else v


def gram_keys(raw: str) -> tuple[str, ...]:
    """The concept keys a query n-gram may name, in the order tried: as an identifier, as a
    name (not plural-folded), as a phrase."""
    return tuple(
        dict.fromkeys(
            (
                concept_key(raw, identifier=True),
                concept_key(raw, fold=False),
                concept_key(raw),
            )
        )
    )


def fuzzy_linkable(gram: Sequence[str]) -> bool:
    """Whether words may link one edit away: never an identifier-shaped word or one with a
    digit (``4.2.0`` is not ``4.2.1``, ``BMS-E17`` is not ``BMS-E18``)."""
    return not any(any(c.isdigit() for c in w) or identifier_shaped(w) for w in gram)


def _deletions(key: str) -> list[str]:
    return [key[:i] + key[i + 1 :] for i in range(len(key))]


def edit_distance_le1(a: str, b: str) -> bool:
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long_[i]:
        i += 1
    return short[i:] == long_[i + 1 :]
