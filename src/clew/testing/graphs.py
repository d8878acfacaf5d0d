"""A denser graph for graph-leg tests and benches: the sample corpus's concepts plus phrases.

The sample corpus ingested without spaCy has identifier concepts only, so n-gram linking, fuzzy
matching and the second hop rarely fire. :func:`densified` adds every word (five letters or more)
and word pair that two or more chunks share as a ``phrase`` concept, with its mentions."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clew.ingest.analyze import STOP_WORDS, concept_key, words
from clew.protocols import GraphRows
from clew.testing.fakes import fake_engine

__all__ = ["DenseGraph", "densified"]

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"


@dataclass(frozen=True, slots=True)
class DenseGraph:
    rows: GraphRows
    added: dict[str, int]
    """Each added phrase key → how many chunks mention it."""
    docs: list[str]
    """Document ids, sorted."""


def densified(directory: Path, *, label: Callable[[str], str] = str) -> DenseGraph:
    """Ingest the sample corpus into ``directory`` (FAKE hash encoder, no spaCy) and return its
    graph rows plus the shared words and word pairs as phrase concepts (``label(key)`` as label)."""

    with fake_engine(directory) as engine:
        engine.ingest([SAMPLE])
        base = engine.store.graph_rows()
        texts = {o: r.text for o, r in engine.store.fetch([o for o, _, _ in base.chunks]).items()}
    concepts = [(int(a), str(b), str(c), str(d)) for a, b, c, d in base.concepts]
    # (ordinal, concept, count, kind): added phrases are mentioned as phrases (their kind)
    mentions: list[Any] = [tuple(int(v) for v in m) for m in base.mentions]
    taken = {c[1] for c in concepts}
    per_chunk: dict[int, Counter[str]] = {}
    for o, text in texts.items():
        toks = [t for t in words(text) if t.isalpha()]
        found: Counter[str] = Counter(
            concept_key(t) for t in toks if t not in STOP_WORDS and len(t) >= 5
        )
        for a, b in itertools.pairwise(toks):
            if a not in STOP_WORDS and b not in STOP_WORDS and len(a) >= 4 and len(b) >= 4:
                found[concept_key(f"{a} {b}")] += 1
        per_chunk[o] = found
    df = Counter(key for found in per_chunk.values() for key in found)
    next_id = max(c[0] for c in concepts) + 1
    ids: dict[str, int] = {}
    for key in sorted(df):
        if df[key] >= 2 and key and key not in taken:
            ids[key] = next_id
            concepts.append((next_id, key, label(key), "phrase"))
            next_id += 1
    for o, found in sorted(per_chunk.items()):
        mentions += [(o, ids[key], n) for key, n in sorted(found.items()) if key in ids]
    rows = GraphRows(
        concepts=concepts,
        mentions=mentions,
        chunks=[(int(o), str(d), int(q)) for o, d, q in base.chunks],
        links=[(str(d), str(t)) for d, t in base.links],
    )
    return DenseGraph(rows, {k: df[k] for k in ids}, sorted({d for _, d, _ in base.chunks}))
