"""The Snapshot conformance suite (:mod:`clew.testing.snapshot_conformance`) on every backend, and
proof that it fails on snapshots that break the protocol."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clew import Engine
from clew.config import ConceptConfig, EngineConfig
from clew.errors import FilterError
from clew.ingest.concepts import ConceptExtractor
from clew.protocols import Snapshot
from clew.testing.fakes import FakeHashEncoder
from clew.testing.snapshot_conformance import (
    check_snapshot_dead_chunks,
    check_snapshot_filters,
    check_snapshot_legs,
    check_snapshot_lookups,
)
from clew.testing.snapshot_releases import (
    check_snapshot_kinds,
    check_snapshot_release,
    check_snapshot_view,
)

# ``backend`` (tests/backends/conftest.py): fresh engines on each backend in turn


def test_snapshot_filters(backend: Any) -> None:
    check_snapshot_filters(backend)


def test_snapshot_legs(backend: Any) -> None:
    check_snapshot_legs(backend)


def test_snapshot_lookups(backend: Any) -> None:
    check_snapshot_lookups(backend)


def test_snapshot_dead_chunks(backend: Any) -> None:
    check_snapshot_dead_chunks(backend)


def test_snapshot_release(backend: Any) -> None:
    check_snapshot_release(backend)


def test_snapshot_view(backend: Any) -> None:
    check_snapshot_view(backend)


def test_snapshot_kinds(backend: Any) -> None:
    check_snapshot_kinds(backend)


# -- the suite can fail ---------------------------------------------------------------------------


class Broken:
    """A snapshot with one method replaced."""

    def __init__(self, snap: Snapshot, name: str, method: Callable[..., Any]) -> None:
        self._snap, self._name, self._method = snap, name, method

    def __getattr__(self, name: str) -> Any:
        return self._method if name == self._name else getattr(self._snap, name)


def _reorder(hits: list[Any]) -> list[Any]:
    return sorted(hits, key=lambda h: (-h.score, -h.ordinal))


def _lenient_where(s: Any) -> Callable[..., Any]:
    def where(filter: Any, scope: Any, exclude: Any = ()) -> Any:
        try:
            return s.where(filter, scope, exclude)
        except FilterError:
            return s.where(None, scope, exclude)

    return where


def _dead_in_mask(s: Any) -> Callable[..., Any]:
    def mask(where: Any) -> Any:
        out = s.mask(where).copy()
        out[: len(out)] |= ~s.live[: len(out)]
        return out

    return mask


MUTATIONS: dict[
    str, tuple[str, Callable[[Any], Callable[..., Any]], Callable[[Any], None], str]
] = {
    "lexical ignores the filter": (
        "lexical",
        lambda s: lambda t, w, c, st: s.lexical(t, s.where(None, None), c, st),
        check_snapshot_legs,
        "lexical",
    ),
    "dense breaks ties by ordinal desc": (
        "dense",
        lambda s: lambda v, w, k: _reorder(s.dense(v, w, k)),
        check_snapshot_legs,
        "ordinal asc",
    ),
    "dense returns one too many": (
        "dense",
        lambda s: lambda v, w, k: s.dense(v, w, k + 1),
        check_snapshot_legs,
        "hits for k=3",
    ),
    "graph ignores the filter": (
        "graph",
        lambda s: lambda q, w, c, linked, st: s.graph(q, s.where(None, None), c, linked, st),
        check_snapshot_legs,
        "graph",
    ),
    "link ignores the filter": (
        "link",
        lambda s: lambda q, c, w, st: s.link(q, c, s.where(None, None), st),
        check_snapshot_legs,
        "link",
    ),
    "mask allows deleted chunks": ("mask", _dead_in_mask, check_snapshot_filters, "mask"),
    "an unknown filter field is ignored": (
        "where",
        _lenient_where,
        check_snapshot_filters,
        "FilterError",
    ),
    "idf ignores the scope": (
        "idf",
        lambda s: lambda terms, st: s.idf(terms, None),
        check_snapshot_lookups,
        "idf",
    ),
    "bm25 is all zeros": (
        "bm25",
        lambda s: lambda t, o, c, st: np.zeros(len(o)),
        check_snapshot_lookups,
        "bm25",
    ),
    "created flags no memory": (
        "created",
        lambda s: lambda o, m: {k: (t, False) for k, (t, _) in (s.created(o, m) or {}).items()},
        check_snapshot_lookups,
        "created",
    ),
    "view is the release": (
        "view",
        lambda s: lambda scope_json: s.release,
        check_snapshot_view,
        "view",
    ),
    "view forgets what left the scope": (
        "view",
        lambda s: lambda scope_json: s.view(scope_json) if scope_json is None else 1,
        check_snapshot_view,
        "view",
    ),
    "visible ignores the scope": (
        "visible",
        lambda s: lambda o, scope: s.visible(o, None),
        check_snapshot_lookups,
        "visible",
    ),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_the_snapshot_suite_catches(mutation: str, tmp_path: Path) -> None:
    method, broken, check, named = MUTATIONS[mutation]

    def open_engine(config: EngineConfig) -> Engine:
        engine = Engine(
            tmp_path / "idx",
            config,
            create=True,
            encoder=FakeHashEncoder(),
            extractor=ConceptExtractor(ConceptConfig(spacy=False)),
        )
        current = engine.snapshot
        engine.snapshot = lambda: Broken(current(), method, broken(current()))  # type: ignore[method-assign]
        return engine

    with pytest.raises(AssertionError, match=named):
        check(open_engine)
