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


def _tiny_onnx(path: Path, *, pooled_output: bool) -> None:
    """A tiny ONNX encoder built here: token embeddings, plus a mean-pooled sentence output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.normal(size=(30522, 8)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["tokens"])]
    outputs = [helper.make_tensor_value_info("ids_out", TensorProto.INT64, ["batch", "seq"])]
    nodes.append(helper.make_node("Identity", ["input_ids"], ["ids_out"]))
    if pooled_output:
        nodes.append(helper.make_node("ReduceMean", ["tokens"], ["pooled"], axes=[1], keepdims=0))
        outputs.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 8]))
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        outputs,
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path / "model.onnx"))
    shutil.copy(packaged_minilm_dir() / "tokenizer.json", path / "tokenizer.json")


def test_onnx_model_with_a_pooled_sentence_output(tmp_path: Path) -> None:
    _tiny_onnx(tmp_path, pooled_output=True)
    from clew.models.embedder import OnnxEncoder

    enc = OnnxEncoder(resolve_model(str(tmp_path)))
    out = enc.encode(["pgbouncer pool", "pgbouncer pool", "ledger writer"])
    assert out.shape == (3, 8) and enc.dim == 8
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert np.allclose(out[0], out[1]) and not np.allclose(out[0], out[2])


def test_onnx_model_without_float_output_is_a_clear_error(tmp_path: Path) -> None:
    _tiny_onnx(tmp_path, pooled_output=False)
    from clew.models.embedder import OnnxEncoder

    with pytest.raises(ModelError, match="no float output"):
        OnnxEncoder(resolve_model(str(tmp_path)))
