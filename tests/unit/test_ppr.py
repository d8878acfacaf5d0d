"""The graph leg as Personalized PageRank on hand-built graphs: seeds, paths, and the wall."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clew.config import GraphConfig
from clew.errors import ConfigError
from clew.index.graph import GraphIndex, LinkedConcept
from clew.index.ppr import explain, ppr
from clew.protocols import GraphRows

# ordinal: doc, seq (the graph of test_expand: two error codes, a shared "pool", links a → e)
CHUNKS = [(0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "c", 0), (4, "d", 0), (5, "e", 0)]
CHUNKS += [(6, "f", 0)] + [(7 + i, f"x{i}", 0) for i in range(40)]
CONCEPTS = [
    (1, "err-1", "ERR-1", "identifier"),
    (2, "pool", "pool", "phrase"),
    (3, "err-2", "ERR-2", "identifier"),
]
MENTIONS = [(0, 1, 1), (0, 2, 1), (2, 1, 1), (3, 2, 1), (3, 3, 1), (4, 3, 1), (6, 3, 1)]
PPR = GraphConfig(method="ppr")


def graph() -> GraphIndex:
    return GraphIndex.build(GraphRows(CONCEPTS, MENTIONS, CHUNKS, [("a", "e")]), len(CHUNKS), 1)


def everything(g: GraphIndex) -> np.ndarray:
    return np.ones(g.mentions.shape[1], dtype=bool)


def steps(g: GraphIndex, walk: object, o: int) -> list[tuple[str, str, str]]:
    trail = explain(g, walk, o, PPR)  # type: ignore[arg-type]
    return [(s.edge, s.via, s.to) for s in trail.steps]


def test_concept_seeds_rank_their_chunks_first_and_reach_further() -> None:
    g = graph()
    hits, walk = ppr(g, everything(g), PPR, g.link("ERR-1"), [], 10)
    order = [h.ordinal for h in hits]
    assert set(order[:2]) == {0, 2}  # the chunks that mention ERR-1
    assert order.index(3) < order.index(4)  # one shared concept away, then two
    assert {1, 5} <= set(order)  # NEXT of chunk 0, and the document a links to
    assert walk is not None and all(h.score > 0 for h in hits)


def test_each_hit_explains_its_strongest_path_from_a_seed() -> None:
    g = graph()
    _, walk = ppr(g, everything(g), PPR, g.link("ERR-1"), [], 10)
    assert explain(g, walk, 0, PPR).seed == "err-1"  # type: ignore[arg-type]
    assert steps(g, walk, 0) == [("MENTIONS", "err-1", "#0")]
    assert steps(g, walk, 4) == [
        ("MENTIONS", "err-1", "#0"),
        ("MENTIONS", "pool", "#3"),
        ("MENTIONS", "err-2", "#4"),
    ]
    assert steps(g, walk, 1)[-1] == ("NEXT", "", "#1")
    assert steps(g, walk, 5)[-1] == ("LINKS_TO", "e", "#5")
    named = explain(g, walk, 3, PPR, chunk_id=lambda o: f"c{o}")  # type: ignore[arg-type]
    assert [s.to for s in named.steps] == ["c0", "c3"] and named.hops == 2


def test_passage_seeds_alone_spread_to_their_neighbours() -> None:
    g = graph()
    hits, walk = ppr(g, everything(g), PPR, [], [(3, 1.0)], 10)
    assert hits[0].ordinal == 3
    assert {0, 4, 6} <= {h.ordinal for h in hits}
    assert explain(g, walk, 3, PPR).seed == "#3"  # type: ignore[arg-type]
    assert steps(g, walk, 4) == [("MENTIONS", "err-2", "#4")]


def test_a_seed_passage_scores_by_what_the_walk_brings_it() -> None:
    g = graph()
    keep = GraphConfig(method="ppr", ppr_keep_restart=True)
    (walked, _), (kept, _) = (ppr(g, everything(g), c, [], [(3, 1.0)], 10) for c in (PPR, keep))
    first = {h.ordinal: h.score for h in walked}
    second = {h.ordinal: h.score for h in kept}
    assert second[3] - first[3] == pytest.approx(1.0 - PPR.damping, rel=1e-6)
    assert all(second[o] == pytest.approx(s) for o, s in first.items() if o != 3)


def test_no_seed_no_hits() -> None:
    g = graph()
    assert ppr(g, everything(g), PPR, [], [], 10) == ([], None)
    stop = [LinkedConcept(1, "err-1", "ERR-1", "identifier", 1.0)]
    hidden = np.zeros(g.mentions.shape[1], dtype=bool)
    hidden[[1, 3, 4]] = True  # neither chunk that mentions ERR-1 is allowed
    assert ppr(g, hidden, PPR, stop, [], 10) == ([], None)


def test_stop_concepts_seed_nothing() -> None:
    # "pool" in every chunk: past the hub cut, it neither seeds nor carries the walk
    mentions = MENTIONS + [(o, 2, 1) for o, _, _ in CHUNKS if o not in (0, 3)]
    g = GraphIndex.build(GraphRows(CONCEPTS, mentions, CHUNKS, []), len(CHUNKS), 1)
    assert ppr(g, everything(g), PPR, g.link("pool"), [], 10) == ([], None)


@pytest.mark.parametrize(
    "bad", [{"method": "bfs"}, {"damping": 1.0}, {"passage_share": 1.5}, {"ppr_iterations": 0}]
)
def test_config_is_checked(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=f"graph.{next(iter(bad))}="):
        GraphConfig(**bad)  # type: ignore[arg-type]


# -- the wall: hidden documents carry no mass and change nothing -----------------------------

docs = st.integers(3, 8)


@st.composite
def corpora(draw: st.DrawFn) -> tuple[GraphRows, int, set[str], list[int], list[tuple[int, float]]]:
    n_docs = draw(docs)
    chunks: list[tuple[int, str, int]] = []
    for d in range(n_docs):
        for seq in range(draw(st.integers(1, 3))):
            chunks.append((len(chunks), f"d{d}", seq))
    n_c = draw(st.integers(1, 6))
    concepts = [(i + 1, f"k{i}", f"K{i}", "phrase") for i in range(n_c)]
    pairs = draw(
        st.sets(st.tuples(st.integers(0, len(chunks) - 1), st.integers(1, n_c)), max_size=30)
    )
    mentions = [(o, c, draw(st.integers(1, 3))) for o, c in sorted(pairs)]
    links = draw(
        st.lists(st.tuples(st.integers(0, n_docs - 1), st.integers(0, n_docs - 1)), max_size=6)
    )
    hidden = {f"d{d}" for d in draw(st.sets(st.integers(0, n_docs - 1), max_size=n_docs - 1))}
    seeds = draw(st.lists(st.integers(1, n_c), max_size=3, unique=True))
    passages = draw(
        st.lists(st.tuples(st.integers(0, len(chunks) - 1), st.floats(0.1, 1.0)), max_size=4)
    )
    rows = GraphRows(concepts, mentions, chunks, [(f"d{a}", f"d{b}") for a, b in links])
    return rows, len(chunks), hidden, seeds, passages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora())
def test_hidden_chunks_carry_no_mass(case: tuple) -> None:  # type: ignore[type-arg]
    """PPR with a mask over a graph that holds hidden documents equals, bit for bit, PPR over
    the graph built without them (scope statistics), and never returns a hidden chunk."""
    rows, size, hidden, seeds, passages = case
    full = GraphIndex.build(rows, size, 1)
    visible = GraphRows(
        rows.concepts,
        [m for m in rows.mentions if rows.chunks[m[0]][1] not in hidden],
        [c for c in rows.chunks if c[1] not in hidden],
        [(a, b) for a, b in rows.links if a not in hidden and b not in hidden],
    )
    alone = GraphIndex.build(visible, size, 1)
    mask = np.array([c[1] not in hidden for c in rows.chunks])
    linked = [LinkedConcept(c, f"k{c - 1}", f"K{c - 1}", "exact", 1.0 + c) for c in seeds]
    got, walk = ppr(full, mask, PPR, linked, passages, 50, stats=full.stats(mask))
    want, _ = ppr(alone, mask, PPR, linked, passages, 50, stats=alone.stats(mask))
    assert [(h.ordinal, h.score) for h in got] == [(h.ordinal, h.score) for h in want]
    assert all(mask[h.ordinal] for h in got)
    if walk is not None:
        assert not walk.chunks[~mask].any()
        for h in got:
            trail = explain(full, walk, h.ordinal, PPR)
            assert all(mask[int(s.to[1:])] for s in trail.steps)


def test_a_masks_view_is_built_once_and_the_least_recent_dropped() -> None:
    from clew.index.ppr import VIEWS, allowed_view

    g = graph()
    first = everything(g)
    first[5] = False
    view = allowed_view(g, first)
    assert allowed_view(g, first.copy()) is view  # keyed by the mask's content
    assert not view.allow[5] and view.n_near[0] == 1  # chunk 0's neighbours: 1 (NEXT); 5 hidden
    others = []
    for i in range(VIEWS):
        mask = everything(g)
        mask[7 + i] = False
        others.append(allowed_view(g, mask))
    assert allowed_view(g, first) is not view  # the oldest of VIEWS + 1 was dropped
    assert allowed_view(g, first).allow.tolist() == view.allow.tolist()
    last = everything(g)
    last[7 + VIEWS - 1] = False
    assert allowed_view(g, last) is others[-1]


def test_a_view_copies_only_what_its_mask_hides_and_views_stay_in_a_byte_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clew.index import ppr as ppr_module
    from clew.index.ppr import allowed_view

    g = graph()
    full = allowed_view(g, everything(g))
    assert full.m_indices is g.mentions.indices and full.adj_indices is g.chunk_adjacency().indices
    edgeless = everything(g)
    edgeless[40] = False  # a chunk no edge touches: nothing to copy, but a mask of its own
    same = allowed_view(g, edgeless)
    assert same is not full and same.m_indices is g.mentions.indices
    assert same.deg.tolist() == full.deg.tolist() and same.n_near.tolist() == full.n_near.tolist()
    hidden = everything(g)
    hidden[4] = False  # mentions ERR-2, NEXT of nothing
    part = allowed_view(g, hidden)
    assert part.m_indices is not g.mentions.indices and 4 not in part.m_indices.tolist()
    err2 = g.key_to_row["err-2"]
    assert part.deg[err2] == full.deg[err2] - 1.0  # weights count allowed chunks only
    assert full.owned < part.owned
    monkeypatch.setattr(ppr_module, "VIEW_BUDGET", 1e-9)  # room for the newest view only
    monkeypatch.setattr(ppr_module, "VIEW_FLOOR", 0)
    g2 = graph()
    first = allowed_view(g2, hidden)
    allowed_view(g2, everything(g2))
    assert allowed_view(g2, hidden) is not first  # dropped for the newer one
