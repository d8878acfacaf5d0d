"""Training a small cross-encoder from the packaged MiniLM, and scoring with it (ONNX, torch)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clew.errors import ModelError
from clew.models.cross_encoder import CrossEncoderReranker, load_reranker_meta
from clew.protocols import RerankCandidate, Reranker
from clew.train.cross_encoder import TrainExample, TrainReport, train_cross_encoder

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

TOPICS = (
    ("pgbouncer", "pool exhaustion", "pgbouncer connection pool exhausted under load"),
    ("kafka", "consumer lag", "kafka consumer lag grows when partitions rebalance too often"),
    ("redis", "eviction", "redis evicts keys when maxmemory is reached with allkeys-lru"),
    ("nginx", "upstream timeout", "nginx returns 504 when the upstream times out"),
    ("postgres", "vacuum", "postgres autovacuum falls behind and tables bloat"),
    ("terraform", "state lock", "terraform state lock stays held after a crashed apply"),
    ("kubernetes", "crashloop", "kubernetes pod in crashloopbackoff because the probe fails"),
    ("dns", "negative caching", "dns negative caching hides a new record for minutes"),
    ("tls", "certificate expiry", "tls certificate expired and clients reject the handshake"),
    ("s3", "throttling", "s3 throttles requests with slowdown errors on hot prefixes"),
    ("grpc", "deadline exceeded", "grpc calls fail with deadline exceeded when retries stack"),
    ("elasticsearch", "shard allocation", "elasticsearch shard allocation stuck on a full disk"),
)
PASSAGES = tuple(t[2] for t in TOPICS)
# small on purpose: 24 groups of 4, 3 epochs of 6 steps, 64 tokens (≈10 s on 2 cores)
PARAMS = {"epochs": 3, "group_size": 4, "batch_groups": 4, "lr": 3e-4, "max_length": 64}


def examples() -> list[TrainExample]:
    out = []
    for i, (name, issue, text) in enumerate(TOPICS):
        others = tuple(p for j, p in enumerate(PASSAGES) if j != i)
        for query in (f"{name} {issue}", f"why does {name} have {issue}"):
            out.append(TrainExample(query, (text,), others))
    out.append(TrainExample("no positives", (), PASSAGES))  # skipped
    out.append(TrainExample("no negatives", PASSAGES[:1], ()))  # skipped
    return out


def candidates(texts: tuple[str, ...] = PASSAGES) -> list[RerankCandidate]:
    return [RerankCandidate(f"c{i}", "", t, {}) for i, t in enumerate(texts)]


Trained = tuple[Path, TrainReport, list[tuple[int, float]]]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Train on one thread: on a shared 2-core machine torch's two OpenMP threads contend with
    other processes and run ~8x slower (measured 114 s against 14 s for the fixture)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    out = tmp_path_factory.mktemp("ce") / "model"
    steps: list[tuple[int, float]] = []
    report = train_cross_encoder(
        examples(), out, seed=7, on_step=lambda s, loss: steps.append((s, loss)), **PARAMS
    )
    return out, report, steps


def test_output_directory_and_report(trained: Trained) -> None:
    out, report, steps = trained
    for name in ("model.onnx", "tokenizer.json", "config.json", "clew-reranker.json"):
        assert (out / name).is_file(), name
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
    assert report.examples == 24 and report.groups == 24 and report.steps == 18
    assert [s for s, _ in steps] == list(range(1, 19))
    assert report.final_loss < steps[0][1]
    meta = load_reranker_meta(out)
    assert meta["kind"] == "cross-encoder" and meta["max_length"] == 64
    assert meta["final_loss"] == report.final_loss and meta["seed"] == 7
    assert load_reranker_meta(out.parent) == {}
    assert len(json.loads((out / "config.json").read_text())["id2label"]) == 1


def test_ranks_positive_first(trained: Trained) -> None:
    out, _, _ = trained
    reranker = CrossEncoderReranker(str(out))
    assert isinstance(reranker, Reranker)
    assert reranker.name == "cross-encoder:model"
    assert reranker.backend == "onnx" and reranker.max_length == 64
    assert len(reranker.version) == 16
    right = 0
    for ex in examples()[:24]:
        result = reranker.score(ex.query, candidates())
        scores = [s for s in result.scores if s is not None]
        assert len(scores) == len(PASSAGES)
        assert result.explain == tuple({"logit": s} for s in scores)
        right += PASSAGES[int(np.argmax(scores))] == ex.positives[0]
    assert right >= 20


def test_onnx_and_torch_agree(trained: Trained, tmp_path: Path) -> None:
    out, _, _ = trained
    plain = tmp_path / "plain"
    shutil.copytree(out, plain, ignore=shutil.ignore_patterns("model.onnx"))
    onnx = CrossEncoderReranker(str(out), batch_size=3)
    torch = CrossEncoderReranker(str(plain), batch_size=3)
    assert torch.backend == "torch" and torch.max_length == 64
    titled = [RerankCandidate("t", "Kafka", "consumer lag", {}), *candidates()]
    a = np.array(onnx.score("kafka consumer lag", titled).scores, dtype=np.float64)
    b = np.array(torch.score("kafka consumer lag", titled).scores, dtype=np.float64)
    assert np.abs(a - b).max() < 1e-3


def test_deterministic_and_batch_independent(trained: Trained) -> None:
    out, _, _ = trained
    one = CrossEncoderReranker(str(out), batch_size=1)
    many = CrossEncoderReranker(str(out), batch_size=16)
    first = many.score("redis eviction", candidates())
    assert many.score("redis eviction", candidates()) == first
    again = np.array(one.score("redis eviction", candidates()).scores, dtype=np.float64)
    assert np.abs(again - np.array(first.scores, dtype=np.float64)).max() < 1e-4
    assert many.score("redis eviction", []).scores == ()


def test_long_passage_is_truncated_query_kept(trained: Trained) -> None:
    out, _, _ = trained
    reranker = CrossEncoderReranker(str(out))
    long = PASSAGES[1] + " filler words" * 2_000
    longer = long + " and more" * 500
    s = reranker.score("kafka consumer lag", candidates((long, longer, PASSAGES[2]))).scores
    assert s[0] == pytest.approx(s[1], abs=1e-5)  # both cut to the same passage prefix
    other = reranker.score("redis eviction", candidates((long,))).scores
    assert other[0] != pytest.approx(s[0], abs=1e-3)  # the query still reaches the model


def test_max_length_capped_by_model_positions(trained: Trained) -> None:
    out, _, _ = trained
    assert CrossEncoderReranker(str(out), max_length=100_000).max_length == 512
    assert CrossEncoderReranker(str(out), max_length=32).max_length == 32
    with pytest.raises(ModelError, match="max_length"):
        CrossEncoderReranker(str(out), max_length=2)


def test_bad_paths_raise_model_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ModelError, match="nope") as info:
        CrossEncoderReranker(str(missing))
    assert "tokenizer.json" in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match=r"tokenizer\.json"):
        CrossEncoderReranker(str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="no-such-org/no-such-model"):
        CrossEncoderReranker("no-such-org/no-such-model")
    with pytest.raises(ModelError, match="none has both"):
        train_cross_encoder([TrainExample("q", ("p",), ())], tmp_path / "m")
    with pytest.raises(ModelError, match="group_size"):
        train_cross_encoder(examples(), tmp_path / "m", group_size=1)
    assert not (tmp_path / "m").exists()


def test_same_seed_same_loss(trained: Trained, tmp_path: Path) -> None:
    _, report, steps = trained
    again_steps: list[tuple[int, float]] = []
    again = train_cross_encoder(
        examples(),
        tmp_path / "again",
        seed=7,
        on_step=lambda s, loss: again_steps.append((s, loss)),
        **PARAMS,
    )
    assert again.final_loss == report.final_loss
    assert again_steps == steps
