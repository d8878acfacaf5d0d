"""Graph expansion: walk one or two chunk-to-chunk hops from the top fused seeds.

A step goes from a chunk to another chunk over one of these edges:

- ``MENTIONS``: both chunks mention a concept (chunk → concept → chunk). Its weight is the
  concept's idf share over the *allowed* chunks; hub concepts (in more than
  ``graph.hub_fraction`` of them) and concepts only one allowed chunk mentions are skipped.
  Two MENTIONS steps are the RELATED_TO walk (concept → co-occurring concept): the chunk where
  the two concepts co-occur is a node on the path, so it passes the filter like any other.
- ``NEXT``: the adjacent chunk (before or after) of the same document.
- ``LINKS_TO`` / ``LINKED_FROM``: a chunk of a document this one links to, or that links here.

The access mask applies to every chunk the walk reaches, intermediate ones included, and
concept weights are counted over allowed chunks only, so hidden chunks shape nothing. A chunk
reached at ``h`` hops scores ``seed score × Π edge weights × hop_penalty**h`` — always below
its seed, since edge weights are at most 1 and the penalty is below 1. Seeds are never
targets. The best path to each chunk is kept; the ``max_nodes`` best chunks join the pool with
a ``graph_expansion`` contribution (a chunk already in the pool keeps the larger of its fused
and expansion scores; the contribution records what expansion added).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from clew.config import ExpandConfig, GraphConfig
from clew.filters import Mask
from clew.index.graph import GraphIndex
from clew.retrieve.fuse import Fused, order
from clew.types import Contribution, ExpansionPath, PathStep

LEG = "graph_expansion"
_MAX_LINKED_CHUNKS = 8


@dataclass(frozen=True, slots=True)
class ExpandStats:
    seeds: int
    reached: int
    """Chunks the walk reached (before the ``max_nodes`` cap)."""
    added: int
    """Chunks that joined the pool."""
    lifted: int
    """Chunks already in the pool whose score expansion raised."""


_EDGES = ("", "MENTIONS", "NEXT", "LINKS_TO", "LINKED_FROM")
_MENTIONS, _NEXT, _LINKS_TO, _LINKED_FROM = 1, 2, 3, 4

Steps = tuple[
    npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int8], npt.NDArray[np.int64]
]
"""(targets, edge weights, edge codes, via) of one node's neighbours, one entry per target."""


class _Walker:
    def __init__(
        self, graph: GraphIndex, allow: Mask, config: ExpandConfig, graph_config: GraphConfig
    ) -> None:
        self.g = graph
        self.allow = allow
        self.config = config
        self.n_allowed = max(int(allow.sum()), 1)
        self.df_limit = min(
            float(config.max_concept_chunks),
            max(20.0, graph_config.hub_fraction * self.n_allowed),
        )
        self._share: dict[int, float] = {}
        self.layout = graph.layout()
        # unfiltered: every live chunk is allowed, and the graph's df counts exactly those
        self.unfiltered = self.n_allowed == graph.n_chunks

    def shares(self, rows: npt.NDArray[np.int32]) -> npt.NDArray[np.float64]:
        """idf share of each concept over the allowed chunks; 0 for common ones and singletons."""
        if self.unfiltered:
            df = self.g.df[rows]
        else:
            df = np.asarray([self._df(int(r)) for r in rows], dtype=np.float64)
        ok = (df >= 2) & (df <= self.df_limit)
        out = np.zeros(len(rows))
        out[ok] = np.log1p(self.n_allowed / df[ok]) / math.log1p(self.n_allowed)
        return out

    def _df(self, row: int) -> float:
        df = self._share.get(row)
        if df is None:
            m = self.g.mentions
            chunks = m.indices[m.indptr[row] : m.indptr[row + 1]]
            df = self._share[row] = float(self.allow[chunks].sum())
        return df

    def neighbours(self, node: int) -> Steps:
        """Every allowed chunk one step from ``node``, with its best edge (one per target)."""
        cfg = self.config
        targets: list[npt.NDArray[np.int64]] = []
        weights: list[npt.NDArray[np.float64]] = []
        codes: list[npt.NDArray[np.int8]] = []
        vias: list[npt.NDArray[np.int64]] = []

        def add(
            t: npt.NDArray[np.int64],
            w: npt.NDArray[np.float64],
            code: int,
            via: npt.NDArray[np.int64],
        ) -> None:
            if len(t):
                targets.append(t)
                weights.append(w)
                codes.append(np.full(len(t), code, dtype=np.int8))
                vias.append(via)

        if cfg.mention_weight > 0:
            mt, mw, _, mv = self._mentions(node)
            add(mt, mw, _MENTIONS, mv)
        if cfg.next_weight > 0:
            near = [
                o
                for o in (self.layout.prev_chunk.get(node), self.g.next_chunk.get(node))
                if o is not None and self.allow[o]
            ]
            arr = np.asarray(near, dtype=np.int64)
            add(
                arr,
                np.full(len(arr), cfg.next_weight),
                _NEXT,
                np.full(len(arr), -1, dtype=np.int64),
            )
        doc = self.g.chunk_doc.get(node)
        if cfg.link_weight > 0 and doc is not None:
            for code, docs in (
                (_LINKS_TO, self.g.doc_links.get(doc, ())),
                (_LINKED_FROM, self.layout.linked_from.get(doc, ())),
            ):
                for other in docs:
                    chunks = self.layout.doc_chunks.get(other, ())[:_MAX_LINKED_CHUNKS]
                    arr = np.asarray([o for o in chunks if self.allow[o]], dtype=np.int64)
                    w = (
                        np.where(arr == chunks[0], 1.0, 0.5) * cfg.link_weight
                        if len(arr)
                        else np.zeros(0)
                    )
                    add(
                        arr,
                        w,
                        code,
                        np.full(len(arr), self.layout.doc_index[other], dtype=np.int64),
                    )
        if not targets:
            empty = np.zeros(0, dtype=np.int64)
            return empty, np.zeros(0), np.zeros(0, dtype=np.int8), empty
        t = np.concatenate(targets)
        w = np.concatenate(weights)
        c = np.concatenate(codes)
        v = np.concatenate(vias)
        keep = t != node
        t, w, c, v = t[keep], w[keep], c[keep], v[keep]
        # one entry per target: its strongest edge (ties: lower edge code, then lower via)
        idx = np.lexsort((v, c, -w, t))
        t, w, c, v = t[idx], w[idx], c[idx], v[idx]
        first = np.r_[True, t[1:] != t[:-1]] if len(t) else np.zeros(0, dtype=bool)
        return t[first], w[first], c[first], v[first]

    def _mentions(self, node: int) -> Steps:
        g = self.g
        csc = g.mentions_csc
        rows = csc.indices[csc.indptr[node] : csc.indptr[node + 1]]
        m = g.mentions
        shares = self.shares(rows)
        used = rows[shares > 0]
        if not len(used):
            empty = np.zeros(0, dtype=np.int64)
            return empty, np.zeros(0), np.zeros(0, dtype=np.int8), empty
        parts = [m.indices[m.indptr[r] : m.indptr[r + 1]] for r in used.tolist()]
        sizes = [len(x) for x in parts]
        t = np.concatenate(parts).astype(np.int64)
        s = np.repeat(shares[shares > 0], sizes)
        v = np.repeat(used.astype(np.int64), sizes)
        inside = self.allow[t]
        t, s, v = t[inside], s[inside], v[inside]
        if not len(t):
            return t, s, np.zeros(0, dtype=np.int8), v
        # per target: the summed share of shared concepts (capped at 1); label = the strongest
        idx = np.lexsort((v, -s, t))
        t, s, v = t[idx], s[idx], v[idx]
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        sums = np.minimum(np.add.reduceat(s, starts), 1.0) * self.config.mention_weight
        return t[starts], sums, np.full(len(starts), _MENTIONS, dtype=np.int8), v[starts]

    def edge_name(self, code: int, source: int, via_doc: str) -> str:
        """``LINKS_TO`` / ``LINKED_FROM``, or the typed relation of the link (``CAUSED_BY``;
        walked backwards: ``CAUSED_BY (reverse)``)."""
        if code in (_LINKS_TO, _LINKED_FROM):
            src_doc = self.g.chunk_doc.get(source)
            if src_doc is not None:
                a, b = (src_doc, via_doc) if code == _LINKS_TO else (via_doc, src_doc)
                relation = self.g.link_types.get(a, {}).get(b)
                if relation:
                    return relation.upper() + ("" if code == _LINKS_TO else " (reverse)")
        return _EDGES[code]

    def via_label(self, code: int, via: int) -> str:
        if code == _MENTIONS:
            return self.g.keys[via]
        if code in (_LINKS_TO, _LINKED_FROM):
            return self.layout.docs[via]
        return ""


def expand(
    fused: Sequence[Fused],
    graph: GraphIndex,
    allowed: Mask,
    config: ExpandConfig,
    chunk_id: Callable[[int], str],
    graph_config: GraphConfig | None = None,
    load_keys: Callable[[Iterable[int]], None] | None = None,
) -> tuple[list[Fused], ExpandStats]:
    """Add the chunks a short walk from the top seeds reaches; returns the re-ordered pool.

    ``load_keys`` is told every chunk on the chosen paths before ``chunk_id`` is asked for
    them (a store that reads keys on demand fetches them in one go)."""
    pool = list(fused)
    size = graph.mentions.shape[1]
    seeds = [f for f in pool[: config.seeds] if f.ordinal < size]
    if not seeds or size == 0:
        return pool, ExpandStats(len(seeds), 0, 0, 0)
    allow = np.zeros(size, dtype=bool)
    upto = min(size, len(allowed))
    allow[:upto] = allowed[:upto]
    walker = _Walker(graph, allow, config, graph_config or GraphConfig())
    pen = config.hop_penalty
    seed_ords = np.asarray([f.ordinal for f in seeds], dtype=np.int64)

    # one layer per hop: best score, where it came from (seed or hop-1 parent), edge, via
    layers: list[
        tuple[
            npt.NDArray[np.float64],
            npt.NDArray[np.int64],
            npt.NDArray[np.int8],
            npt.NDArray[np.int64],
        ]
    ] = []
    frontier = [(f.ordinal, f.score) for f in seeds]
    for _ in range(config.max_hops):
        score = np.zeros(size)
        source = np.full(size, -1, dtype=np.int64)
        edge = np.zeros(size, dtype=np.int8)
        via = np.full(size, -1, dtype=np.int64)
        for node, node_score in frontier:
            t, w, c, v = walker.neighbours(node)
            # 12 decimals: equal products computed in another order (another seed, another
            # backend's float path) differ in their last bit, which must not decide a tie
            cand = np.round(node_score * w * pen, 12)
            better = cand > score[t]  # strict: an earlier (better) source keeps a tie
            t, cand, c, v = t[better], cand[better], c[better], v[better]
            score[t], source[t], edge[t], via[t] = cand, node, c, v
        score[seed_ords] = 0.0
        layers.append((score, source, edge, via))
        reached = np.flatnonzero(score > 0)
        top = reached[np.lexsort((reached, -score[reached]))][: config.seeds]
        frontier = [(int(o), float(score[o])) for o in top]
        if not frontier:
            break

    best = np.max(np.vstack([layer[0] for layer in layers]), axis=0)
    reached = np.flatnonzero(best > 0)
    chosen = reached[np.lexsort((reached, -best[reached]))][: config.max_nodes]
    index = {f.ordinal: i for i, f in enumerate(pool)}
    seed_score = {f.ordinal: f.score for f in seeds}
    added = lifted = 0
    stacked = np.vstack([layer[0] for layer in layers])
    hops = np.argmax(stacked[:, chosen], axis=0)  # first layer with the best score
    if load_keys is not None:
        on_paths = set(chosen.tolist())
        for end, hop in zip(chosen.tolist(), hops.tolist(), strict=True):
            step = end
            for h in range(hop, -1, -1):
                step = int(layers[h][1][step])
                on_paths.add(step)
        load_keys(on_paths)
    for rank, (o, hop) in enumerate(zip(chosen.tolist(), hops.tolist(), strict=True), start=1):
        steps: list[PathStep] = []
        weight = 1.0
        node = o
        for h in range(hop, -1, -1):
            _, source, edge, via = layers[h]
            code, src = int(edge[node]), int(source[node])
            label = walker.via_label(code, int(via[node]))
            steps.append(PathStep(walker.edge_name(code, src, label), label, chunk_id(node)))
            node = src
        steps.reverse()
        reach = float(best[o])
        weight = reach / (seed_score[node] * pen ** len(steps))
        path = ExpansionPath(chunk_id(node), len(steps), tuple(steps), round(weight, 6))
        i = index.get(o)
        if i is None:
            contribution = Contribution(LEG, rank, reach, reach)
            pool.append(Fused(o, reach, (contribution,), None, (), (path,)))
            added += 1
            continue
        f = pool[i]
        part = max(0.0, reach - f.score)
        lifted += part > 0
        pool[i] = replace(
            f,
            score=f.score + part,
            contributions=(*f.contributions, Contribution(LEG, rank, reach, part)),
            expansion=(*f.expansion, path),
        )
    order(pool, chunk_id)
    return pool, ExpandStats(len(seeds), len(reached), added, lifted)
