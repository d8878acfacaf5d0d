"""One ``backend`` fixture over every storage backend, for tests that must hold on each.

A test that takes ``backend`` runs once per backend: ``embedded`` (SQLite and in-memory derived
indexes, in ``tmp_path``) and ``postgres`` (a fresh schema on the session's PostgreSQL server,
started on first use only, so an embedded-only run never starts one). The fixture is a
:class:`BackendFactory`: ``backend(config)`` opens a fresh, empty engine with the fake encoder
and identifier-only concepts; ``backend.target()`` is a fresh empty target for a block (a
hypothesis example). Everything it made is closed and removed afterwards (schemas dropped, with
the local folder a PostgreSQL-backed engine keeps beside the database).
"""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clew import Engine
from clew.config import ConceptConfig, EngineConfig
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder
from clew.testing.pgserver import PgServer

BACKENDS = ["embedded", "postgres"]


class BackendFactory:
    """Fresh, empty indexes on one backend."""

    def __init__(
        self, name: str, make: Callable[[], str | Path], drop: Callable[[str | Path], None]
    ) -> None:
        self.name = name
        self._make = make
        self._drop = drop
        self._opened: list[tuple[Engine, str | Path]] = []

    def __call__(self, config: EngineConfig | None = None) -> Engine:
        """A fresh, empty engine (closed and removed when the test ends)."""
        target = self._make()
        engine = open_fake_engine(target, config)
        self._opened.append((engine, target))
        return engine

    @contextmanager
    def target(self) -> Iterator[str | Path]:
        """A fresh, empty target (a directory or a PostgreSQL URL), removed when the block
        ends; whatever opened it must be closed by then."""
        target = self._make()
        try:
            yield target
        finally:
            self._drop(target)

    def close(self) -> None:
        while self._opened:
            engine, target = self._opened.pop()
            try:
                engine.close()
            finally:
                self._drop(target)


def open_fake_engine(target: str | Path, config: EngineConfig | None = None) -> Engine:
    """An engine at ``target`` with the FAKE hash encoder and identifier-only concepts."""
    return Engine(
        target,
        config,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )


def _embedded(tmp_path: Path) -> BackendFactory:
    counter = itertools.count()

    def make() -> Path:
        return tmp_path / f"idx-{next(counter)}"

    def drop(target: str | Path) -> None:
        shutil.rmtree(target, ignore_errors=True)

    return BackendFactory("embedded", make, drop)


def _postgres(server: PgServer) -> BackendFactory:
    import psycopg  # clew[postgres]

    from clew.backends.postgres.backend import state_dir

    def make() -> str:
        return f"{server.url}&schema=t_{uuid.uuid4().hex[:12]}"

    def drop(target: str | Path) -> None:
        schema = str(target).rsplit("&schema=", 1)[1]
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        # the engine's local folder (keyed by the whole URL, so this schema's alone)
        shutil.rmtree(state_dir(str(target)), ignore_errors=True)

    return BackendFactory("postgres", make, drop)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    """Fresh, empty engines on each backend in turn (see the module docstring)."""
    if request.param == "postgres":
        factory = _postgres(request.getfixturevalue("pg_server"))
    else:
        factory = _embedded(tmp_path)
    try:
        yield factory
    finally:
        factory.close()
