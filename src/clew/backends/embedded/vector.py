"""Dense leg: exact inner-product search, with an HNSW index (faiss) above a size threshold.

Filter-aware without silent recall loss: when the access mask allows at most
``exact_max_allowed`` chunks, the allowed rows are scanned exactly; otherwise HNSW searches with
the mask as an ID selector inside the graph walk. A caller's scope is always scanned exactly
(``dense.scoped_exact``): the walk passes through every tenant's vectors, so what it finds of
the scope's would depend on data outside it. ``bench/search.py`` measures HNSW recall against
exact search, with and without filters.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.backends.embedded.files import Origin, Source, load_saved, saving
from clew.config import DenseConfig
from clew.filters import Mask
from clew.index.topk import top_k
from clew.types import LegHit

FORMAT = "clew-vectors/1"
Matrix = npt.NDArray[np.float32]


class VectorIndex:
    """Row ``o`` of the matrix is the vector of chunk ordinal ``o`` (zeros for gaps)."""

    def __init__(self, dim: int, config: DenseConfig) -> None:
        self.dim = dim
        self.config = config
        self.matrix: Matrix = np.zeros((0, dim), dtype=np.float32)
        self.count = 0
        self.last_ordinal = 0
        self.release = -1
        self.model = ""
        self.hnsw: Any = None
        self._hnsw_rows = 0
        self._gathers: dict[int, tuple[weakref.ref[Mask], npt.NDArray[np.int64], Matrix | None]]
        self._gathers = {}

    def add(self, rows: Iterable[tuple[int, Matrix]]) -> int:
        items = list(rows)
        if not items:
            return 0
        top = max(o for o, _ in items)
        if top >= len(self.matrix):
            grown = np.zeros(
                (max(top + 1, int(len(self.matrix) * 1.25)), self.dim), dtype=np.float32
            )
            grown[: len(self.matrix)] = self.matrix
            self.matrix = grown
        for ordinal, vec in items:
            self.matrix[ordinal] = vec
        self._gathers.clear()
        self.count += len(items)
        self.last_ordinal = max(self.last_ordinal, top)
        self._maybe_hnsw()
        return len(items)

    def _maybe_hnsw(self) -> None:
        if self.count < self.config.hnsw_min_chunks:
            return
        import faiss

        if self.hnsw is None:
            self.hnsw = faiss.IndexHNSWFlat(
                self.dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT
            )
            self.hnsw.hnsw.efConstruction = self.config.ef_construction
            self._hnsw_rows = 0
        upto = self.last_ordinal + 1
        if upto > self._hnsw_rows:
            # faiss ids are insertion positions: add every row up to the last ordinal, so that
            # position == ordinal (gap rows are zero vectors, never allowed by the live mask)
            self.hnsw.add(np.ascontiguousarray(self.matrix[self._hnsw_rows : upto]))
            self._hnsw_rows = upto

    def search(self, vector: Matrix, allowed: Mask, k: int, *, exact: bool = False) -> list[LegHit]:
        """Top-k allowed rows by inner product (score desc, ordinal asc). ``exact``: scan every
        allowed row whatever their number (a caller's scope: the hits then depend on no row
        outside ``allowed``, which an HNSW walk through the other rows cannot promise)."""
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        ids, rows = self._allowed_rows(allowed)
        if len(ids) == 0:
            return []
        if exact or self.hnsw is None or len(ids) <= self.config.exact_max_allowed:
            sims = (self.matrix @ q)[ids] if rows is None else rows @ q
            scores = np.zeros(len(self.matrix), dtype=np.float32)
            # cosine can be <= 0; shift into (0, 2] so top_k keeps every allowed row
            scores[ids] = sims + np.float32(1.0 + 1e-6)
            return [LegHit(h.ordinal, h.score - (1.0 + 1e-6)) for h in top_k(scores, k)]
        return self._hnsw_search(q, allowed, k)

    def _allowed_rows(self, allowed: Mask) -> tuple[npt.NDArray[np.int64], Matrix | None]:
        """Allowed ordinals and, for a small allowed set, their rows gathered once per mask.

        Masks are cached per filter by the engine, so the gather (the costly part of an exact
        scan over a selective filter) is paid on the first query with that filter only. When
        most rows are allowed, one contiguous matrix-vector product beats a gather: ``None``.
        """
        cached = self._gathers.get(id(allowed))
        if cached is not None and cached[0]() is allowed:
            return cached[1], cached[2]
        ids = np.flatnonzero(allowed[: len(self.matrix)])
        rows = None
        if len(ids) * 3 < len(self.matrix) and len(ids) <= max(
            self.config.exact_max_allowed, self.config.hnsw_min_chunks
        ):
            rows = np.ascontiguousarray(self.matrix[ids])
        self._gathers[id(allowed)] = (weakref.ref(allowed), ids, rows)
        while len(self._gathers) > 4:
            self._gathers.pop(next(iter(self._gathers)))
        return ids, rows

    def _hnsw_search(self, q: Matrix, allowed: Mask, k: int) -> list[LegHit]:
        import faiss

        hnsw_rows = self._hnsw_rows
        mask = np.zeros(hnsw_rows, dtype=bool)
        upto = min(hnsw_rows, len(allowed))
        mask[:upto] = allowed[:upto]
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        allowed_share = max(float(mask.mean()), 1e-6)
        # a filter hides part of the graph walk: widen the beam in proportion, so a filter that
        # keeps half the chunks searches about twice as many candidates
        params.efSearch = int(min(4096, max(self.config.ef_search, k) / allowed_share))
        if not mask.all():
            bits = np.packbits(mask, bitorder="little")
            params.sel = faiss.IDSelectorBitmap(hnsw_rows, faiss.swig_ptr(bits))
        dist, idx = self.hnsw.search(q.reshape(1, -1), k, params=params)
        out = [(int(i), float(d)) for d, i in zip(dist[0], idx[0], strict=True) if i >= 0]
        out.sort(key=lambda t: (-t[1], t[0]))
        return [LegHit(o, s) for o, s in out]

    # -- persistence ------------------------------------------------------------------------

    def save(self, directory: Path, origin: Origin | None = None) -> None:
        """Save under a sealed manifest; ``origin``: the store release this index reflects
        (a load checked against the store rejects a manifest without it)."""
        fields = {
            "last_ordinal": self.last_ordinal,
            "count": self.count,
            "dim": self.dim,
            "model": self.model,
            "hnsw_rows": self._hnsw_rows if self.hnsw is not None else 0,
            "hnsw_m": self.config.hnsw_m,
        }
        with saving(directory, "vectors", FORMAT, self.release, fields, origin) as path:
            np.save(path(".npy"), self.matrix[: self.last_ordinal + 1])
            if self.hnsw is not None:
                import faiss

                faiss.write_index(self.hnsw, str(path(".hnsw")))

    @classmethod
    def load(
        cls, directory: Path, config: DenseConfig, *, source: Source | None = None
    ) -> VectorIndex | None:
        """The saved index, or None when it is missing, torn, damaged, inconsistent, built with
        other HNSW settings or (given ``source``) not derived from that store at a release it
        has (then rebuild); see :func:`clew.backends.embedded.files.read_manifest`."""

        def other_settings(meta: dict[str, Any]) -> str | None:
            if meta.get("hnsw_m") != config.hnsw_m:
                return f"built with hnsw_m={meta.get('hnsw_m')!r}, configured {config.hnsw_m}"
            return None

        return load_saved(
            directory,
            "vectors",
            FORMAT,
            lambda meta, file: cls._load(config, meta, file),
            source=source,
            misfit="its arrays do not fit together",
            refuse=other_settings,
        )

    @classmethod
    def _load(
        cls, config: DenseConfig, meta: dict[str, Any], file: Callable[[str], Path]
    ) -> VectorIndex | None:
        matrix = np.load(file(".npy"))
        idx = cls(int(meta["dim"]), config)
        idx.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        idx.count = int(meta["count"])
        idx.last_ordinal = int(meta["last_ordinal"])
        idx.release = int(meta["release"])
        idx.model = str(meta["model"])
        if idx.matrix.ndim != 2 or idx.matrix.shape[1] != idx.dim:
            return None
        if len(idx.matrix) != idx.last_ordinal + 1 and idx.count:
            return None
        if meta.get("hnsw_rows"):
            import faiss

            idx.hnsw = faiss.read_index(str(file(".hnsw")))
            idx._hnsw_rows = int(meta["hnsw_rows"])
            if idx.hnsw.ntotal != idx._hnsw_rows or idx.hnsw.d != idx.dim:
                return None
            idx.hnsw.hnsw.efSearch = config.ef_search
        return idx
