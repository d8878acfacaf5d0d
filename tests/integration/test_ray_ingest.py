"""Distributed ingest on a local Ray cluster (2 CPUs) gives the store a single-process ingest
gives: documents, chunks, tokens, concepts, mentions, releases; vectors allclose; same search
results. Most tests use the deterministic FAKE hash encoder (``FakeHashEncoder``) with the real
spaCy concepts; one uses the real default embedder."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clew import Engine
from clew.backends.embedded.store import SQLiteStore
from clew.config import ChunkConfig, ConceptConfig
from clew.errors import ConfigError, LoadError
from clew.ingest.concepts import ConceptExtractor
from clew.ingest.distributed import (
    ContextSpec,
    RayIngestReport,
    engine_ingest_ray,
    engine_spec,
    ingest_ray,
)
from clew.ingest.load import load_path
from clew.ingest.pipeline import ingest
from clew.testing.fakes import FakeHashEncoder
from clew.types import IngestReport

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
QUERIES = (
    "ERR-4413",
    "customer was billed twice",
    "what else broke after the pgbouncer migration",
    "ledger-writer retry policy",
)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    """One local Ray cluster for the module."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=300 * 1024 * 1024,
    )
    yield
    ray.shutdown()


def fake_engine(path: Path, *, spacy: bool = True) -> Engine:
    """The deterministic FAKE hash encoder; real spaCy concepts (entities and phrases) unless
    ``spacy`` is off (identifiers only: faster)."""
    extractor = ConceptExtractor(ConceptConfig(spacy=spacy))
    return Engine(path, create=True, encoder=FakeHashEncoder(), extractor=extractor)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, IngestReport]:
    """The sample corpus ingested single-process (``Engine.ingest``), FAKE encoder, spaCy."""
    path = tmp_path_factory.mktemp("reference") / "idx"
    with fake_engine(path) as engine:
        return path, engine.ingest([SAMPLE])


def dump(index: Path) -> dict[str, Any]:
    """Every row the SQLite store holds (vectors apart), and the vectors by chunk id."""
    conn = sqlite3.connect(f"file:{index / 'clew.sqlite'}?mode=ro", uri=True)
    try:
        out: dict[str, Any] = {
            "meta": conn.execute(  # the store's random identity aside
                "SELECT key, value FROM meta WHERE key <> 'store_id' ORDER BY key"
            ).fetchall(),
            "documents": conn.execute("SELECT * FROM documents ORDER BY doc_id").fetchall(),
            "chunks": conn.execute(
                "SELECT ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
                "heading_path, start_char, end_char, tokens FROM chunks ORDER BY ordinal"
            ).fetchall(),
            "concepts": conn.execute("SELECT * FROM concepts ORDER BY concept_id").fetchall(),
            "mentions": conn.execute(
                "SELECT c.chunk_id, k.key, m.count FROM mentions m "
                "JOIN chunks c USING (ordinal) JOIN concepts k USING (concept_id) "
                "ORDER BY c.ordinal, k.key"
            ).fetchall(),
            "aliases": conn.execute(
                "SELECT * FROM concept_aliases ORDER BY concept_id, surface"
            ).fetchall(),
            "links": conn.execute("SELECT * FROM links ORDER BY doc_id, target").fetchall(),
            "changes": conn.execute("SELECT * FROM changes ORDER BY rowid").fetchall(),
            "releases": conn.execute(
                "SELECT release, added, removed FROM releases ORDER BY release"
            ).fetchall(),
        }
        vectors = {
            cid: np.frombuffer(blob, dtype=np.float32)
            for cid, blob in conn.execute("SELECT chunk_id, vector FROM chunks")
        }
    finally:
        conn.close()
    out["vectors"] = vectors
    return out


def assert_same_store(a: Path, b: Path, *, atol: float = 0.0) -> None:
    da, db = dump(a), dump(b)
    va, vb = da.pop("vectors"), db.pop("vectors")
    for table in da:
        assert da[table] == db[table], table
    assert da["chunks"] and da["mentions"] and da["concepts"]
    assert va.keys() == vb.keys()
    for cid in va:
        np.testing.assert_allclose(va[cid], vb[cid], rtol=0, atol=atol, err_msg=cid)


def assert_same_search(a: Engine, b: Engine) -> None:
    for q in QUERIES:
        ra, rb = a.search(q, k=8), b.search(q, k=8)
        assert [h.chunk_id for h in ra.hits] == [h.chunk_id for h in rb.hits], q
        np.testing.assert_allclose(
            [h.score for h in ra.hits], [h.score for h in rb.hits], rtol=1e-5, atol=1e-6
        )


def same_report(single: Any, dist: RayIngestReport) -> None:
    assert dist.added == single.added
    assert dist.updated == single.updated
    assert dist.unchanged == single.unchanged
    assert dist.chunks_written == single.chunks_written
    assert dist.release == single.release


def test_same_store_as_engine_ingest(reference: tuple[Path, IngestReport], tmp_path: Path) -> None:
    index, single = reference
    with fake_engine(tmp_path / "ray") as b:
        dist = engine_ingest_ray(b, [SAMPLE], workers=2)
        same_report(single, dist)
        assert dist.failed == ()
        assert_same_store(index, tmp_path / "ray")
        with Engine(index, read_only=True, encoder=FakeHashEncoder()) as a:
            assert_same_search(a, b)


def test_many_write_batches_and_build_units(tmp_path: Path) -> None:
    """Small write batches (entity resolution sees the store between them) cut into units of
    two documents, built by two actors: the driver still writes the single-process batches in
    order."""
    with fake_engine(tmp_path / "single") as a, fake_engine(tmp_path / "ray") as b:
        spec = replace(engine_spec(a), batch_chunks=8)
        ctx = spec.build()
        single = ingest([d for d in load_path(SAMPLE)], a.store, ctx)
        dist = ingest_ray([SAMPLE], b.store, spec, workers=2, batch_docs=2)
        assert single.release > 5  # many transactions
        same_report(single, dist)
        assert_same_store(tmp_path / "single", tmp_path / "ray")


def _corrupt_copy(root: Path) -> Path:
    corpus = root / "corpus"
    shutil.copytree(SAMPLE, corpus)
    (corpus / "broken.md").write_bytes(b"# Broken\n\nnot utf-8: \xff\xfe\n")
    (corpus / "bad.jsonl").write_text(
        '{"_id": "x1", "title": "ok", "text": "fine"}\n{"_id": "x2", "title": \n',
        encoding="utf-8",
    )
    return corpus


def test_load_errors_are_reported_and_the_rest_ingested(tmp_path: Path) -> None:
    corpus = _corrupt_copy(tmp_path)
    index = tmp_path / "single"
    with fake_engine(index, spacy=False) as a, fake_engine(tmp_path / "ray", spacy=False) as b:
        single = a.ingest([SAMPLE])  # the same corpus without the bad files
        dist = engine_ingest_ray(b, [corpus, tmp_path / "missing.md"], workers=2)
        same_report(single, dist)
        failed = {f.source: f for f in dist.failed}
        assert set(failed) == {"bad.jsonl", "broken.md", str(tmp_path / "missing.md")}
        assert failed["broken.md"].doc_id == "broken.md"
        assert "not valid UTF-8" in failed["broken.md"].error
        assert failed["bad.jsonl"].doc_id is None and "line 2" in failed["bad.jsonl"].error
        assert "no such file" in failed[str(tmp_path / "missing.md")].error
        assert dist.to_dict()["failed"]
        assert_same_store(index, tmp_path / "ray")


def test_on_error_raise_stops_where_single_process_skips(tmp_path: Path) -> None:
    """A single-process directory ingest skips (and lists) the files Ray reports as failed;
    ``on_error="raise"`` stops at the first of them instead, with nothing written."""
    corpus = _corrupt_copy(tmp_path)
    with (
        fake_engine(tmp_path / "single", spacy=False) as a,
        fake_engine(tmp_path / "ray", spacy=False) as b,
    ):
        single = a.ingest([corpus])
        assert [s.path for s in single.skipped] == ["bad.jsonl", "broken.md"]
        assert "line 2" in single.skipped[0].reason
        assert "not valid UTF-8" in single.skipped[1].reason
        with pytest.raises(LoadError, match=r"bad\.jsonl|broken\.md"):
            engine_ingest_ray(b, [corpus], workers=1, on_error="raise")
        assert b.store.release() == 0
        assert b.store.counts()["documents"] == 0
        report = engine_ingest_ray(b, [corpus], workers=1)
        assert sorted(s.path for s in report.skipped) == ["bad.jsonl", "broken.md"]
        assert set(report.added) == set(single.added)


def test_reingest_is_idempotent_and_updates_like_single_process(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLE, corpus)
    single_path, ray_path = tmp_path / "single", tmp_path / "ray"
    with fake_engine(single_path, spacy=False) as a, fake_engine(ray_path, spacy=False) as b:
        a.ingest([corpus])
        first = engine_ingest_ray(b, [corpus], workers=2)
        before = dump(tmp_path / "ray")
        again = engine_ingest_ray(b, [corpus], workers=2)
        assert again.added == again.updated == () and again.chunks_written == 0
        assert set(again.unchanged) == set(first.added)
        assert again.release == first.release
        after = dump(tmp_path / "ray")
        assert after.pop("vectors").keys() == before.pop("vectors").keys()
        assert after == before

        # an edited and a new document: replaced and added exactly as single-process does
        faq = corpus / "faq.md"
        faq.write_text(faq.read_text(encoding="utf-8") + "\nNew: ERR-9999 means retry.\n")
        (corpus / "new.txt").write_text("A new note about PgBouncer.\n", encoding="utf-8")
        single = a.ingest([corpus])
        dist = engine_ingest_ray(b, [corpus], workers=2)
        same_report(single, dist)
        assert dist.updated == ("faq.md",) and dist.added == ("new.txt",)
        assert_same_store(tmp_path / "single", tmp_path / "ray")
        assert_same_search(a, b)


def test_missing_ray_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    store = SQLiteStore(tmp_path / "idx", create=True)
    spec = ContextSpec(FakeHashEncoder, ChunkConfig(), ConceptConfig(spacy=False), "fp")
    try:
        with pytest.raises(ConfigError, match=r"pip install 'ray\[data\]==2\.60\.0'"):
            ingest_ray([SAMPLE], store, spec)
    finally:
        store.close()


def test_spec_is_picklable_for_workers() -> None:
    import pickle

    spec = ContextSpec(partial(FakeHashEncoder, 32), ChunkConfig(), ConceptConfig(), "fp")
    ctx = pickle.loads(pickle.dumps(spec)).build()
    assert ctx.encoder.encode(["x"]).shape == (1, 32)


def test_a_worker_with_another_model_refuses_to_embed() -> None:
    """A node whose 'minilm' is another model (int8 without clew[torch]) must not mix vectors."""
    fp = json.dumps({"embedder": "minilm", "embedder_version": "53aa51172d142c89"})
    with pytest.raises(ConfigError, match="embedder is version fake-hash/1, the driver's 53aa"):
        ContextSpec(partial(FakeHashEncoder, 32), ChunkConfig(), ConceptConfig(), fp).build()
    same = json.dumps({"embedder": "fake", "embedder_version": "fake-hash/1"})
    assert ContextSpec(partial(FakeHashEncoder, 32), ChunkConfig(), ConceptConfig(), same).build()


@pytest.mark.slow
def test_real_embedder_matches_single_process(sample_index: Path, tmp_path: Path) -> None:
    """The real default embedder (MiniLM on onnxruntime) and spaCy, against the session's
    single-process ingest of the same corpus."""
    with Engine(tmp_path / "ray", create=True) as b:
        dist = engine_ingest_ray(b, [SAMPLE], workers=2)
        assert dist.failed == () and dist.release == 1
        assert_same_store(sample_index, tmp_path / "ray", atol=1e-5)
        with Engine(sample_index, read_only=True) as a:
            assert_same_search(a, b)
