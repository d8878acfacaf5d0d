"""The real embedding model: ONNX export parity and user-supplied model loading."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from clew.config import EmbedderConfig
from clew.errors import ModelError
from clew.models.embedder import load_encoder, packaged_minilm_dir, resolve_model


def test_minilm_shapes_and_normalization() -> None:
    enc = load_encoder()
    out = enc.encode(["ERR-4012 timeouts", "customer billed twice", ""])
    assert out.shape == (3, 384) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert enc.encode([]).shape == (0, 384)
    assert enc.count_tokens(["hello world"]) == [2]


def test_onnx_matches_sentence_transformers() -> None:
    st = pytest.importorskip("sentence_transformers")
    texts = [
        "A duplicate charge happens when a retry is not idempotent.",
        "pgbouncer pool exhaustion",
        "x " * 400,
    ]
    ref = st.SentenceTransformer(str(packaged_minilm_dir()), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    ours = load_encoder().encode(texts)
    assert np.min(np.sum(ref * ours, axis=1)) > 0.9999


def test_batches_do_not_change_vectors() -> None:
    enc = load_encoder(EmbedderConfig(batch_size=2))
    texts = ["short", "a much longer text about settlement cutoffs and payouts", "mid text"]
    together = enc.encode(texts)
    alone = np.vstack([enc.encode([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_local_onnx_directory_is_loaded(tmp_path: Path) -> None:
    files = resolve_model("minilm")
    shutil.copy(files.onnx_path, tmp_path / "model.onnx")
    shutil.copy(files.tokenizer_path, tmp_path / "tokenizer.json")
    enc = load_encoder(EmbedderConfig(model=str(tmp_path)))
    assert np.allclose(enc.encode(["hello"]), load_encoder().encode(["hello"]), atol=1e-6)


def test_bad_model_names_are_clear() -> None:
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        resolve_model("nobody/no-such-model")
    with pytest.raises(ModelError, match="unknown embedding model"):
        resolve_model("no-such-thing")


def test_directory_without_model_files(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="is not a model directory"):
        resolve_model(str(tmp_path))


def test_index_remembers_its_model_however_it_was_given(sample_index: Path, tmp_path: Path) -> None:
    from clew import Document, Engine
    from clew.errors import ConfigError
    from clew.testing.fakes import FakeHashEncoder

    # built from the default config, queried with the same model passed in
    with Engine(sample_index, encoder=load_encoder()) as engine:
        assert engine.search("ERR-4413", k=1).hits
    with pytest.raises(ConfigError, match="was built with embedder 'minilm'"):
        Engine(sample_index, encoder=FakeHashEncoder())
    # built with the model passed in, reopened from the default config
    with Engine(tmp_path / "i", create=True, encoder=load_encoder()) as engine:
        engine.ingest([Document("d", "D", "ERR-7001 means the vault is sealed.", "d")])
    with Engine(tmp_path / "i") as engine:
        assert engine.search("vault sealed", preset="dense", k=1).hits[0].doc_id == "d"
