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

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.filters import Mask
from clew.index.files import LOAD_ERRORS, data_path, publish, read_manifest, staged
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
    ) -> list[LegHit]:
        """Top-k chunks by BM25 among ``allowed`` ordinals (score desc, ordinal asc).

        ``tokens``: analyzer tokens (repeats count as query term frequency), or a mapping of
        term to weight (:func:`clew.ingest.analyze.query_terms`)."""
        scores = self.scores(tokens, len(allowed), k1=k1, b=b)
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
    ) -> npt.NDArray[np.float32] | None:
        """BM25 of every ordinal below ``size`` (None when no query term is indexed)."""
        if not tokens or self.n_docs == 0:
            return None
        weighted = tokens.items() if isinstance(tokens, Mapping) else Counter(tokens).items()
        qtf = {t: float(w) for t, w in weighted if t in self.vocab and w > 0}
        if not qtf:
            return None
        scores = np.zeros(size, dtype=np.float32)
        avgdl = self.total_len / max(self.n_docs, 1)
        n = self.n_docs
        for term, weight in qtf.items():
            tid = self.vocab[term]
            df = float(self.df[tid])
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            for seg in self.segments:
                rows, tf = seg.postings(tid)
                if len(rows) == 0:
                    continue
                inside = rows < size
                if not inside.all():
                    rows, tf = rows[inside], tf[inside]
                norm = k1 * (1.0 - b + b * self.doclen[rows] / avgdl)
                scores[rows] += np.float32(idf * weight) * (tf * (k1 + 1.0) / (tf + norm))
        return scores

    def idf(self, term: str) -> float:
        """BM25 idf of an analyzer token; a token no chunk has gets the highest idf (df 0)."""
        tid = self.vocab.get(term)
        df = 0.0 if tid is None else float(self.df[tid])
        return math.log(1.0 + (self.n_docs - df + 0.5) / (df + 0.5))

    # -- persistence ------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        arrays: dict[str, npt.NDArray[np.generic]] = {"df": self.df, "doclen": self.doclen}
        for i, seg in enumerate(self.segments):
            arrays[f"indptr{i}"] = seg.indptr
            arrays[f"rows{i}"] = seg.rows
            arrays[f"tfs{i}"] = seg.tfs
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        meta = {
            "format": FORMAT,
            "release": self.release,
            "last_ordinal": self.last_ordinal,
            "n_docs": self.n_docs,
            "total_len": self.total_len,
            "analyzer": self.analyzer,
            "segments": len(self.segments),
        }
        with staged(directory, "lexical") as stamp:
            np.savez(data_path(directory, "lexical", stamp, ".npz"), **arrays)  # type: ignore[arg-type]
            data_path(directory, "lexical", stamp, ".terms").write_text(
                "\n".join(terms), encoding="utf-8"
            )
            publish(directory, "lexical", stamp, meta)

    @classmethod
    def load(cls, directory: Path) -> BM25Index | None:
        """The saved index, or None when it is missing, torn or inconsistent (then rebuild)."""
        meta = read_manifest(directory, "lexical", FORMAT)
        if meta is None:
            return None
        try:
            return cls._load(directory, meta)
        except LOAD_ERRORS:
            return None

    @classmethod
    def _load(cls, directory: Path, meta: dict[str, Any]) -> BM25Index | None:
        stamp = str(meta["stamp"])
        n_segments = int(meta["segments"])
        with np.load(data_path(directory, "lexical", stamp, ".npz")) as data:
            arrays = {key: data[key] for key in data.files}
        terms = data_path(directory, "lexical", stamp, ".terms").read_text(encoding="utf-8")
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


def top_k(scores: npt.NDArray[np.float32], k: int) -> list[LegHit]:
    """Positive scores only, ordered by (score desc, ordinal asc)."""
    candidates = np.flatnonzero(scores > 0)
    if len(candidates) == 0:
        return []
    if len(candidates) > k:
        part = np.argpartition(-scores[candidates], k - 1)[:k]
        kth = scores[candidates[part]].min()
        # keep every tie at the boundary so the order below is by ordinal, not by partition
        candidates = candidates[scores[candidates] >= kth]
    order = np.lexsort((candidates, -scores[candidates]))[:k]
    chosen = candidates[order]
    return [LegHit(int(o), float(scores[o])) for o in chosen]
