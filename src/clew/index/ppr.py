"""The graph leg as Personalized PageRank over passages and concepts (HippoRAG-style, no LLM).

Nodes are the chunks and the concepts of :class:`~clew.index.graph.GraphIndex`; edges are
MENTIONS (chunk ↔ concept, weight ``(1 + ln count) × idf`` of the concept, so a walk leaving a
chunk prefers its specific concepts), NEXT (adjacent chunks of a document) and LINKS_TO
(documents that link, memory relations included: first chunk ↔ first chunk). From a chunk the
walk takes a chunk edge with probability ``graph.next_share`` when it has one.

The walk restarts (probability ``1 - graph.damping`` per step) at the seeds:

- the query's linked concepts, weighted by specificity (their idf); stop-concepts, mentioned by
  more than ``graph.stop_fraction`` of the chunks, seed nothing, and hubs (more than
  ``graph.hub_fraction``) carry no walk through them;
- the top ``graph.seed_passages`` passages of the lexical + dense fusion (HippoRAG 2), which
  together hold ``graph.passage_share`` of the restart mass.

A chunk scores by the mass the walk brings it over edges: a seed passage's own restart mass is
left out (``graph.ppr_keep_restart``), so the leg says how connected a chunk is to the query's
concepts and its other top passages, which the lexical and dense legs cannot say.

Computed as a truncated power iteration over sparse slices: each step moves only the mass of
nodes holding more than ``graph.ppr_epsilon`` of it, so the cost follows the seeds'
neighbourhood, not the corpus. Only the chunks the caller may see are nodes at all: a concept's
out-degree counts only allowed chunks, so a hidden chunk carries no mass, opens no path and
changes no weight. Counts and idf come from ``stats`` (the caller's scope).

Each hit's trail is its strongest path back to a seed (greedy on incoming flow): the seed (a
concept or a passage) and the chunk-to-chunk steps, as graph expansion reports them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from clew.config import GraphConfig
from clew.filters import Mask
from clew.index.graph import GraphIndex, GraphStats, LinkedConcept
from clew.index.topk import top_k
from clew.types import GraphTrail, LegHit, PathStep

Vector = npt.NDArray[np.float64]

MAX_PATH = 4
"""Steps a hit's explanation walks back before it gives up on reaching a seed."""


@dataclass(frozen=True, slots=True)
class Walk:
    """One query's walk: the restart vectors, the mass each node holds (``chunks``: the leg's
    scores), the allowed chunks and the concepts the walk may pass through."""

    seed_concepts: Vector
    seed_chunks: Vector
    concepts: Vector
    chunks: Vector
    allow: npt.NDArray[np.bool_]
    walkable: npt.NDArray[np.bool_]
    """Concepts the walk passes through (neither hubs nor mentioned once)."""


def ppr(
    g: GraphIndex,
    allowed: Mask,
    cfg: GraphConfig,
    linked: Sequence[LinkedConcept],
    passages: Sequence[tuple[int, float]],
    k: int,
    *,
    stats: GraphStats | None = None,
) -> tuple[list[LegHit], Walk | None]:
    """Top-``k`` allowed chunks by Personalized PageRank from ``linked`` concepts and
    ``passages`` ((ordinal, score) of the top fused lexical + dense hits), and the walk, from
    which :func:`explain` tells a hit's path (hits carry no trail: only the returned ones are
    worth the path search)."""
    walk = personalized_pagerank(g, allowed, cfg, linked, passages, stats=stats)
    if walk is None:
        return [], None
    return top_k(walk.chunks.astype(np.float32), k), walk


def explain(
    g: GraphIndex,
    walk: Walk,
    ordinal: int,
    cfg: GraphConfig,
    chunk_id: Callable[[int], str] | None = None,
    load: Callable[[Iterable[int]], None] | None = None,
) -> GraphTrail:
    """A hit's trail: its strongest path back to a seed. ``chunk_id`` names the chunks (after
    ``load`` of their ordinals); without it they are ``#<ordinal>``."""
    seed, steps = _path(g, walk, ordinal, cfg)
    wanted = [o for _, _, o, _ in steps]
    if seed.startswith("#"):
        wanted.append(int(seed[1:]))
    if load is not None:
        load(sorted(set(wanted)))
    name = chunk_id or (lambda o: f"#{o}")
    if seed.startswith("#"):
        seed = name(int(seed[1:]))
    concepts = tuple(dict.fromkeys(via for edge, via, _, _ in steps if edge == "MENTIONS"))
    return GraphTrail(
        concepts=concepts[:5],
        hops=len(steps),
        seed=seed,
        steps=tuple(PathStep(edge, via, name(o)) for edge, via, o, _ in steps),
    )


def personalized_pagerank(
    g: GraphIndex,
    allowed: Mask,
    cfg: GraphConfig,
    linked: Sequence[LinkedConcept],
    passages: Sequence[tuple[int, float]],
    *,
    stats: GraphStats | None = None,
) -> Walk | None:
    """The walk's visit mass over chunks and concepts (None: no seed among allowed nodes)."""
    size = g.mentions.shape[1]
    n_c = len(g.keys)
    if size == 0:
        return None
    view = allowed_view(g, allowed)
    allow = view.allow
    st = stats or g.stats()
    hub_limit = max(20.0, cfg.hub_fraction * max(st.n_chunks, 1))
    stop_limit = max(20.0, cfg.stop_fraction * max(st.n_chunks, 1))
    df = st.df
    idf = np.log1p(np.divide(max(st.n_chunks, 1), df, out=np.zeros(n_c), where=df > 0))
    walkable = (df >= 2) & (df <= hub_limit)

    seed_k = np.zeros(n_c)
    for c in linked:
        row = g.key_to_row.get(c.key)
        if row is not None and 0 < df[row] <= stop_limit and view.deg[row] > 0:
            seed_k[row] = max(seed_k[row], c.weight)  # seeds only with an allowed chunk
    seed_c = np.zeros(size)
    for o, score in passages:
        if 0 <= o < size and allow[o] and score > 0:
            seed_c[o] = max(seed_c[o], float(score))
    total_k, total_c = float(seed_k.sum()), float(seed_c.sum())
    if total_k <= 0 and total_c <= 0:
        return None
    share = cfg.passage_share if total_k > 0 and total_c > 0 else (1.0 if total_c > 0 else 0.0)
    if total_k > 0:
        seed_k *= (1.0 - share) / total_k
    if total_c > 0:
        seed_c *= share / total_c

    csc = g.mentions_csc
    walk_idf = walkable * idf
    restart = 1.0 - cfg.damping
    eps = cfg.ppr_epsilon
    moves = eps / cfg.damping  # a node moves its mass on while damping × mass > eps
    visits_k, visits_c = seed_k.copy(), seed_c.copy()  # Σ over steps of the mass held
    r_k, r_c = seed_k, seed_c
    for step in range(cfg.ppr_iterations):
        if step:
            visits_k += r_k
            visits_c += r_c
        lost = 0.0
        to_k: list[tuple[npt.NDArray[np.int64], Vector]] = []
        to_c: list[tuple[npt.NDArray[np.int64], Vector]] = []
        rows = np.flatnonzero(r_k > moves)
        if len(rows):  # concept → the allowed chunks that mention it
            owner, chunks, w = _gather(view.m_indptr, view.m_indices, view.m_data, rows)
            moving = cfg.damping * r_k[rows]
            deg = view.deg[rows]
            flow = np.divide(moving, deg, out=np.zeros(len(rows)), where=deg > 0)
            lost += float(moving[deg <= 0].sum())
            to_c.append((chunks, w * flow[owner]))
        cols = np.flatnonzero(r_c > moves)
        if len(cols):  # chunk → its walkable concepts and its allowed neighbour chunks
            owner, concepts, w = _gather(csc.indptr, csc.indices, csc.data, cols)
            w = w * walk_idf[concepts]
            out_deg = np.bincount(owner, w, minlength=len(cols))
            n_near = view.n_near[cols]
            beta = np.where(n_near > 0, np.where(out_deg > 0, cfg.next_share, 1.0), 0.0)
            moving = cfg.damping * r_c[cols]
            has_k = out_deg > 0
            k_flow = np.divide(moving * (1.0 - beta), out_deg, out=np.zeros(len(cols)), where=has_k)
            c_flow = np.divide(moving * beta, n_near, out=np.zeros(len(cols)), where=n_near > 0)
            lost += float(moving[~has_k & (n_near <= 0)].sum())
            to_k.append((concepts, w * k_flow[owner]))
            near_owner, near, _ = _gather(view.adj_indptr, view.adj_indices, None, cols)
            if len(near):
                to_c.append((near, c_flow[near_owner]))
        r_k = _spread(to_k, n_c)
        r_c = _spread(to_c, size)
        if lost > 0:  # a dead end: the walk restarts at the seeds
            r_k += lost * seed_k
            r_c += lost * seed_c
        if float(r_k.sum() + r_c.sum()) < eps:
            break
    mass_k, mass_c = restart * visits_k, restart * visits_c
    if not cfg.ppr_keep_restart:  # a seed passage scores by what the walk brings it
        mass_c = np.maximum(mass_c - restart * seed_c, 0.0)
    mass_c[~allow] = 0.0
    return Walk(seed_k, seed_c, mass_k, mass_c, allow, walkable)


@dataclass(frozen=True, slots=True)
class AllowedView:
    """What the walk needs of one caller's mask, computed once per mask and graph: the mask
    (clipped to the graph's chunks), MENTIONS restricted to the allowed chunks with each
    concept's total weight to them, and each chunk's allowed chunk neighbours."""

    allow: npt.NDArray[np.bool_]
    m_indptr: npt.NDArray[np.integer[Any]]
    m_indices: npt.NDArray[np.integer[Any]]
    m_data: npt.NDArray[np.floating[Any]]
    deg: Vector
    adj_indptr: npt.NDArray[np.integer[Any]]
    adj_indices: npt.NDArray[np.integer[Any]]
    n_near: Vector
    owned: int = 0
    """Bytes this view holds of its own (a view of every chunk shares the graph's arrays)."""


VIEWS = 8
"""Masks whose :class:`AllowedView` a graph keeps (least recently used dropped first)."""
VIEW_BUDGET = 2.0
"""The views of one graph hold at most this many times the graph's own MENTIONS and chunk
adjacency bytes, or :data:`VIEW_FLOOR` if more (the newest view stays whatever its size), so
memory stays bounded however many scopes ask."""
VIEW_FLOOR = 32 << 20
"""Bytes the views of a small graph may always hold."""


def allowed_view(g: GraphIndex, allowed: Mask) -> AllowedView:
    """The view of ``allowed`` over ``g`` (cached on the graph by the mask's content: the
    same filter and scope on the same release cost one build)."""
    size = g.mentions.shape[1]
    allow = np.zeros(size, dtype=bool)
    upto = min(size, len(allowed))
    allow[:upto] = allowed[:upto]
    allow &= g.present()
    key = hashlib.blake2b(np.packbits(allow).tobytes(), digest_size=16).digest()
    m, adj = g.mentions, g.chunk_adjacency()
    own = sum(a.nbytes for a in (m.indptr, m.indices, m.data, adj.indptr, adj.indices))
    return g.derived(
        ("ppr-view", key),
        VIEWS,
        lambda: _build_view(g, allow),
        nbytes=lambda view: view.owned,
        budget=max(1, int(VIEW_BUDGET * own), VIEW_FLOOR),
    )


def _build_view(g: GraphIndex, allow: npt.NDArray[np.bool_]) -> AllowedView:
    m, adj = g.mentions, g.chunk_adjacency()
    m_indptr, m_indices, m_rows, keep = _restrict(m, allow)
    weights = (m.data if keep is None else m.data[keep]).astype(np.float64)  # float64 once
    deg = np.asarray(np.bincount(m_rows, weights, minlength=m.shape[0]), dtype=np.float64)
    adj_indptr, adj_indices, _, _ = _restrict(adj, allow)
    n_near = np.diff(adj_indptr).astype(np.float64)
    parts = (allow, m_indptr, m_indices, weights, deg, adj_indptr, adj_indices, n_near)
    shared = {id(a) for a in (m.indptr, m.indices, adj.indptr, adj.indices)}
    owned = sum(a.nbytes for a in parts if id(a) not in shared)
    return AllowedView(*parts, owned)


def _restrict(
    matrix: sp.csr_matrix, allow: npt.NDArray[np.bool_]
) -> tuple[
    npt.NDArray[np.integer[Any]],
    npt.NDArray[np.integer[Any]],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_] | None,
]:
    """``matrix`` (rows × chunks) without the entries of hidden chunks: its indptr, indices,
    the row of each entry, and which entries were kept (None: all of them, and the arrays are
    the matrix's own, not copies)."""
    rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
    keep = allow[matrix.indices]
    if keep.all():
        return matrix.indptr, matrix.indices, rows, None
    rows = rows[keep]
    indptr = np.zeros(matrix.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=matrix.shape[0]), out=indptr[1:])
    return indptr, matrix.indices[keep], rows, keep


def _spread(parts: list[tuple[npt.NDArray[np.int64], Vector]], size: int) -> Vector:
    """The mass the parts' (node, mass) entries bring each of ``size`` nodes."""
    parts = [p for p in parts if len(p[0])]  # (numpy counts an empty list in integers)
    if not parts:
        return np.zeros(size)
    if len(parts) == 1:
        nodes, mass = parts[0]
    else:
        nodes = np.concatenate([p[0] for p in parts])
        mass = np.concatenate([p[1] for p in parts])
    return np.asarray(np.bincount(nodes, mass, minlength=size), dtype=np.float64)


def _gather(
    indptr: npt.NDArray[np.integer[Any]],
    indices: npt.NDArray[np.integer[Any]],
    data: npt.NDArray[np.floating[Any]] | None,
    rows: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], Vector]:
    """The entries of compressed rows ``rows``: (position in ``rows``, column, value) each,
    without building a sparse matrix (its checks cost more than the work on small slices)."""
    starts = indptr[rows].astype(np.int64)
    lengths = indptr[rows + 1].astype(np.int64) - starts
    total = int(lengths.sum())
    owner = np.repeat(np.arange(len(rows)), lengths)
    offsets = np.cumsum(lengths) - lengths
    at = np.arange(total, dtype=np.int64) - np.repeat(offsets, lengths) + np.repeat(starts, lengths)
    values = np.ones(total) if data is None else np.asarray(data[at], dtype=np.float64)
    return owner, indices[at].astype(np.int64), values


def _path(
    g: GraphIndex, walk: Walk, hit: int, cfg: GraphConfig
) -> tuple[str, list[tuple[str, str, int, float]]]:
    """The strongest path from a seed to ``hit``: (seed, steps), steps as (edge, via, to
    ordinal, flow) in walk order. The seed is a concept key, ``#<ordinal>`` for a passage, or
    empty when no seed is reached within :data:`MAX_PATH` steps."""
    back: list[tuple[str, str, int, float]] = []
    cur = hit
    seen = {hit}
    seed = ""
    csc = g.mentions_csc
    for _ in range(MAX_PATH):
        if walk.seed_chunks[cur] > 0 and cur != hit:
            seed = f"#{cur}"  # the hit itself may be a seed: what it scores came from elsewhere
            break
        a, b = csc.indptr[cur], csc.indptr[cur + 1]
        rows, weights = csc.indices[a:b], csc.data[a:b]
        seeded = walk.seed_concepts[rows] > 0
        if seeded.any():  # it mentions a query concept: one step from it
            best = int(np.argmax(np.where(seeded, walk.seed_concepts[rows] * weights, -1.0)))
            r = int(rows[best])
            back.append(("MENTIONS", g.keys[r], cur, float(walk.concepts[r])))
            seed = g.keys[r]
            break
        step = _best_incoming(g, walk, cur, rows, weights, seen, cfg)
        if step is None:
            break
        edge, via, prev, flow = step
        back.append((edge, via, cur, flow))
        seen.add(prev)
        cur = prev
    if not seed and walk.seed_chunks[cur] > 0:
        seed = f"#{cur}"
    if not seed and walk.seed_chunks[hit] > 0:
        return f"#{hit}", []  # a seed passage whose walked mass came round from itself
    return seed, back[::-1]


def _best_incoming(
    g: GraphIndex,
    walk: Walk,
    cur: int,
    rows: npt.NDArray[np.int32],
    weights: Vector,
    seen: set[int],
    cfg: GraphConfig,
) -> tuple[str, str, int, float] | None:
    """The chunk the most mass reached ``cur`` from: through a shared concept (the concept with
    the most inflow, then its chunk with the most outflow) or a NEXT / LINKS_TO edge."""
    best: tuple[str, str, int, float] | None = None
    ok = walk.walkable[rows] & (walk.concepts[rows] > 0)
    if ok.any():
        r = int(rows[int(np.argmax(np.where(ok, walk.concepts[rows] * weights, -1.0)))])
        a, b = g.mentions.indptr[r], g.mentions.indptr[r + 1]
        chunks = g.mentions.indices[a:b]
        score = np.where(walk.allow[chunks], walk.chunks[chunks], 0.0)
        score[np.isin(chunks, np.fromiter(seen, dtype=np.int64, count=len(seen)))] = 0.0
        if len(score) and score.max() > 0:
            prev = int(chunks[int(np.argmax(score))])
            best = ("MENTIONS", g.keys[r], prev, float(score.max()))
    adjacency = g.chunk_adjacency()
    a, b = adjacency.indptr[cur], adjacency.indptr[cur + 1]
    for u in adjacency.indices[a:b].tolist():
        flow = float(walk.chunks[u]) * cfg.next_share
        if u in seen or not walk.allow[u] or flow <= 0:
            continue
        if best is None or flow > best[3]:
            edge, via = _chunk_edge(g, u, cur)
            best = (edge, via, u, flow)
    return best


def _chunk_edge(g: GraphIndex, src: int, dst: int) -> tuple[str, str]:
    """The edge from chunk ``src`` to ``dst`` and its label, as graph expansion names them:
    ``NEXT``; ``LINKS_TO`` (or the link's relation) via the target document; ``LINKED_FROM``
    (or ``RELATION (reverse)``) via the document that links."""
    if g.next_chunk.get(src) == dst or g.next_chunk.get(dst) == src:
        return "NEXT", ""
    a, b = g.chunk_doc.get(src, ""), g.chunk_doc.get(dst, "")
    if b in g.doc_links.get(a, ()):
        relation = g.link_types.get(a, {}).get(b)
        return (relation.upper() if relation else "LINKS_TO"), b
    relation = g.link_types.get(b, {}).get(a)
    return (f"{relation.upper()} (reverse)" if relation else "LINKED_FROM"), b
