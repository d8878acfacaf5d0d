"""BM25 over analyzer tokens: an in-memory inverted index in numpy, derived from the store.

Postings are column-compressed per term (ordinals and term frequencies). BM25 is computed at
query time from term frequencies, so ``k1`` and ``b`` are query-time settings. The access mask is
applied inside scoring, before the top-k: a hidden chunk never enters the candidate list.

Catching up: new chunks since the last sync become a small extra segment; deleted chunks drop
out through the live mask the engine ANDs into every query. When extra segments pile up
(more than 4, or a fifth of the postings) the index is rebuilt from the store in one segment.
``bench/lexical.py`` compares it with tantivy and SQLite FTS5 on the same tokens.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.backends.embedded.files import Origin, Source, load_saved, saving
from clew.filters import Mask
from clew.index import bm25
from clew.index.topk import top_k
from clew.types import LegHit

FORMAT = "clew-bm25/1"


@dataclass(frozen=True, slots=True)
class _Segment:
    indptr: npt.NDArray[np.int64]
    """Per term id t: postings are rows[indptr[t]:indptr[t+1]] (terms beyond len-1: none)."""
    rows: npt.NDArray[np.int32]
    tfs: npt.NDArray[np.float32]

    def postings(self, tid: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        if tid + 1 >= len(self.indptr):
            return self.rows[:0], self.tfs[:0]
        a, b = int(self.indptr[tid]), int(self.indptr[tid + 1])
        return self.rows[a:b], self.tfs[a:b]


@dataclass(slots=True)
class _PopulationCounts:
    mask: weakref.ref[Mask]
    corpus: tuple[int, float]
    """Chunk count and total length."""
    df: dict[int, float] = field(default_factory=dict)
    """Term id → chunks of the population that contain it (filled as terms are asked for)."""


class BM25Index:
    """Inverted index with BM25 scoring and in-index filtering."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.df: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.doclen: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self.segments: list[_Segment] = []
        self.n_docs = 0
        self.total_len = 0.0
        self.last_ordinal = 0
        self.release = -1
        self.analyzer = ""
        self._populations: dict[int, _PopulationCounts] = {}

    # -- building ---------------------------------------------------------------------------

    def add(self, docs: Iterable[tuple[int, Sequence[str]]]) -> int:
        """Add chunks (ordinal, tokens) as one new segment; returns how many were added."""
        term_ids: list[int] = []
        rows: list[int] = []
        tfs: list[int] = []
        lengths: dict[int, int] = {}
        vocab = self.vocab
        for ordinal, tokens in docs:
            counts = Counter(tokens)
            lengths[ordinal] = len(tokens)
            for term, tf in counts.items():
                tid = vocab.get(term)
                if tid is None:
                    tid = len(vocab)
                    vocab[term] = tid
                term_ids.append(tid)
                rows.append(ordinal)
                tfs.append(tf)
        if not lengths:
            return 0
        self._populations = {}
        n_terms = len(vocab)
        tid_arr = np.asarray(term_ids, dtype=np.int64)
        order = np.argsort(tid_arr, kind="stable")
        counts_per_term = np.bincount(tid_arr, minlength=n_terms)
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts_per_term, out=indptr[1:])
        seg = _Segment(
            indptr,
            np.asarray(rows, dtype=np.int32)[order],
            np.asarray(tfs, dtype=np.float32)[order],
        )
        self.segments.append(seg)
        if len(self.df) < n_terms:
            self.df = np.concatenate([self.df, np.zeros(n_terms - len(self.df), dtype=np.int64)])
        self.df += counts_per_term
        top = max(lengths)
        if len(self.doclen) <= top:
            grown = np.zeros(max(top + 1, int(len(self.doclen) * 1.25)), dtype=np.float32)
            grown[: len(self.doclen)] = self.doclen
            self.doclen = grown
        for ordinal, n in lengths.items():
            self.doclen[ordinal] = n
        self.n_docs += len(lengths)
        self.total_len += float(sum(lengths.values()))
        self.last_ordinal = max(self.last_ordinal, top)
        return len(lengths)

    def needs_merge(self) -> bool:
        if len(self.segments) <= 1:
            return False
        extra = sum(len(s.rows) for s in self.segments[1:])
        return len(self.segments) > 5 or extra > 0.2 * len(self.segments[0].rows)

    # -- querying ---------------------------------------------------------------------------

    def search(
        self,
        tokens: Sequence[str] | Mapping[str, float],
        allowed: Mask,
        k: int,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        population: Mask | None = None,
    ) -> list[LegHit]:
        """Top-k chunks by BM25 among ``allowed`` ordinals (score desc, ordinal asc).

        ``tokens``: analyzer tokens (repeats count as query term frequency), or a mapping of
        term to weight (:func:`clew.ingest.analyze.query_terms`). ``population``: the chunks
        whose statistics (count, average length, document frequencies) BM25 uses — a caller's
        scope, so that nothing outside it shifts a score; None = the whole index."""
        scores = self.scores(tokens, len(allowed), k1=k1, b=b, population=population)
        if scores is None:
            return []
        scores[~allowed] = 0.0
        return top_k(scores, k)

    def scores(
        self,
        tokens: Sequence[str] | Mapping[str, float],
        size: int,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        population: Mask | None = None,
    ) -> npt.NDArray[np.float32] | None:
        """BM25 of every ordinal below ``size`` (None when no query term is indexed).

        ``population`` as in :meth:`search`: statistics over those chunks only, and a term no
        chunk of it contains scores nothing (as in an index of those chunks alone)."""
        if not tokens or self.n_docs == 0:
            return None
        weighted = tokens.items() if isinstance(tokens, Mapping) else Counter(tokens).items()
        qtf = {t: float(w) for t, w in weighted if t in self.vocab and w > 0}
        if population is not None:
            qtf = {t: w for t, w in qtf.items() if self._df(self.vocab[t], population) > 0}
        if not qtf:
            return None
        scores = np.zeros(size, dtype=np.float32)
        n, total = self._corpus(population)
        avgdl = bm25.average_length(total, n)
        for term, weight in qtf.items():
            tid = self.vocab[term]
            idf = bm25.idf(n, self._df(tid, population))
            for seg in self.segments:
                rows, tf = seg.postings(tid)
                if len(rows) == 0:
                    continue
                inside = rows < size
                if not inside.all():
                    rows, tf = rows[inside], tf[inside]
                norm = bm25.length_norms(self.doclen[rows], avgdl, k1, b)
                scores[rows] += bm25.term_scores(idf, weight, tf, norm, k1)
        return scores

    def idf(self, term: str, population: Mask | None = None) -> float:
        """BM25 idf of an analyzer token; a token no chunk has gets the highest idf (df 0).
        ``population`` as in :meth:`search`."""
        tid = self.vocab.get(term)
        df = 0.0 if tid is None else self._df(tid, population)
        n, _ = self._corpus(population)
        return bm25.idf(n, df)

    def _corpus(self, population: Mask | None) -> tuple[int, float]:
        """Chunk count and total length of the population (None: the whole index)."""
        if population is None:
            return self.n_docs, self.total_len
        return self._counts(population).corpus

    def _df(self, tid: int, population: Mask | None) -> float:
        """Chunks of the population that contain term ``tid``."""
        if population is None:
            return float(self.df[tid])
        counts = self._counts(population)
        found = counts.df.get(tid)
        if found is None:
            n = 0
            for seg in self.segments:
                rows, _ = seg.postings(tid)
                rows = rows[rows < len(population)]
                n += int(np.count_nonzero(population[rows]))
            found = counts.df[tid] = float(n)
        return found

    def _counts(self, population: Mask) -> _PopulationCounts:
        """The population's statistics, counted once per population (masks are cached per
        scope and snapshot by the engine) and forgotten when chunks are added."""
        cached = self._populations.get(id(population))
        if cached is not None and cached.mask() is population:
            return cached
        inside = population[: len(self.doclen)]
        lengths = self.doclen[: len(inside)][inside]
        counts = _PopulationCounts(
            weakref.ref(population), (len(lengths), float(lengths.astype(np.float64).sum()))
        )
        self._populations[id(population)] = counts
        while len(self._populations) > 8:
            self._populations.pop(next(iter(self._populations)))
        return counts

    # -- persistence ------------------------------------------------------------------------

    def save(self, directory: Path, origin: Origin | None = None) -> None:
        """Save under a sealed manifest; ``origin``: the store release this index reflects
        (a load checked against the store rejects a manifest without it)."""
        arrays: dict[str, npt.NDArray[np.generic]] = {"df": self.df, "doclen": self.doclen}
        for i, seg in enumerate(self.segments):
            arrays[f"indptr{i}"] = seg.indptr
            arrays[f"rows{i}"] = seg.rows
            arrays[f"tfs{i}"] = seg.tfs
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        fields = {
            "last_ordinal": self.last_ordinal,
            "n_docs": self.n_docs,
            "total_len": self.total_len,
            "analyzer": self.analyzer,
            "segments": len(self.segments),
        }
        with saving(directory, "lexical", FORMAT, self.release, fields, origin) as path:
            np.savez(path(".npz"), **arrays)  # type: ignore[arg-type]
            path(".terms").write_text("\n".join(terms), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, *, source: Source | None = None) -> BM25Index | None:
        """The saved index, or None when it is missing, torn, damaged, inconsistent or (given
        ``source``) not derived from that store at a release it has (then rebuild); see
        :func:`clew.backends.embedded.files.read_manifest`."""
        return load_saved(
            directory,
            "lexical",
            FORMAT,
            cls._load,
            source=source,
            misfit="its arrays do not fit together",
        )

    @classmethod
    def _load(cls, meta: dict[str, Any], file: Callable[[str], Path]) -> BM25Index | None:
        n_segments = int(meta["segments"])
        with np.load(file(".npz")) as data:
            arrays = {key: data[key] for key in data.files}
        terms = file(".terms").read_text(encoding="utf-8")
        idx = cls()
        lines = terms.split("\n") if terms else []
        idx.vocab = {t: i for i, t in enumerate(lines)}
        idx.df = arrays["df"]
        idx.doclen = arrays["doclen"]
        idx.segments = [
            _Segment(arrays[f"indptr{i}"], arrays[f"rows{i}"], arrays[f"tfs{i}"])
            for i in range(n_segments)
        ]
        idx.n_docs = int(meta["n_docs"])
        idx.total_len = float(meta["total_len"])
        idx.last_ordinal = int(meta["last_ordinal"])
        idx.release = int(meta["release"])
        idx.analyzer = str(meta["analyzer"])
        if len(idx.df) != len(lines) or len(idx.vocab) != len(lines):
            return None
        for seg in idx.segments:
            if (
                len(seg.indptr) > len(idx.vocab) + 1
                or len(seg.rows) != len(seg.tfs)
                or (len(seg.indptr) and int(seg.indptr[-1]) != len(seg.rows))
                or (len(seg.rows) and int(seg.rows.max()) >= len(idx.doclen))
            ):
                return None
        return idx
