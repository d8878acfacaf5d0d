"""After fusion: expansion under a filter, rerank fallbacks against a real local LLM server,
answers with citations and abstention, traces and replay. FAKE hash encoder (fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew import Document, Engine
from clew.compose.answer import EVIDENCE, fit_calibration
from clew.config import EngineConfig
from clew.errors import QueryError
from clew.testing.chat_server import ChatServer

DOCS = [
    Document(
        "inc-1",
        "INC-1 postmortem",
        "ERR-4012 timeouts in payments-gateway after CHG-7 changed the pgbouncer pool size. "
        "The ledger-writer retried five times.",
        "inc-1",
        metadata={"audience": "sre"},
        links=("inc-2", "secret-inc"),
    ),
    Document(
        "inc-2",
        "INC-2 postmortem",
        "Duplicate charges followed the retry storm in ledger-writer. Refunds went out the "
        "next day.",
        "inc-2",
        metadata={"audience": "sre"},
    ),
    Document(
        "secret-inc",
        "INC-3 postmortem",
        "The settlement-batcher stalled after the pgbouncer change. Relevant to finance only.",
        "secret-inc",
        metadata={"audience": "finance"},
    ),
    Document(
        "codes",
        "Error codes",
        "ERR-4412 means a reused idempotency key. ERR-4413 means the key expired.",
        "codes",
        metadata={"audience": "public"},
    ),
    Document(
        "faq",
        "FAQ",
        "Customers billed twice get a refund within five days. This answer is relevant to "
        "billing questions.",
        "faq",
        metadata={"audience": "public"},
    ),
]


@pytest.fixture
def engine(fake_engine: Engine) -> Engine:
    fake_engine.ingest(DOCS)
    return fake_engine


def cfg(**sections: dict[str, object]) -> EngineConfig:
    return EngineConfig().with_overrides(**sections)  # type: ignore[arg-type]


# -- expansion ----------------------------------------------------------------------------------


def test_expansion_adds_linked_chunks_with_paths(engine: Engine) -> None:
    result = engine.search("CHG-7", k=10, config=cfg(expand={"enabled": True, "seeds": 1}))
    expanded = {h.doc_id: h for h in result.hits if h.expansion}
    assert "inc-2" in expanded
    path = expanded["inc-2"].expansion[0]
    assert path.seed.startswith("inc-1#")
    assert any(s.edge == "LINKS_TO" and s.via == "inc-2" for s in path.steps)
    assert any(c.leg == "graph_expansion" for c in expanded["inc-2"].contributions)
    assert result.timings_ms["expand"] >= 0


def test_expansion_respects_the_filter(engine: Engine) -> None:
    config = cfg(expand={"enabled": True, "seeds": 1})
    open_ = engine.search("CHG-7 pgbouncer", k=20, config=config)
    assert "secret-inc" in {h.doc_id for h in open_.hits}
    hidden = engine.search("CHG-7 pgbouncer", k=20, filter={"audience": "sre"}, config=config)
    assert {h.doc_id for h in hidden.hits} <= {"inc-1", "inc-2"}
    for h in hidden.hits:
        for p in h.expansion:
            assert all(not s.to.startswith("secret-inc") for s in p.steps)


# -- rerank fallbacks ---------------------------------------------------------------------------


def llm(server: ChatServer, timeout: float = 5.0) -> EngineConfig:
    return cfg(
        rerank={"kind": "llm", "base_url": server.base_url, "model": "m", "timeout_s": timeout}
    )


def test_llm_grader_reorders(engine: Engine) -> None:
    with ChatServer() as server:
        result = engine.search("refund for charges billed twice", k=5, config=llm(server))
    assert result.rerank is not None and result.rerank.ran, result.rerank
    assert "relevant" in result.hits[0].text  # the echo server grades those 3
    assert result.hits[0].rerank is not None and result.hits[0].rerank.score == 3.0


@pytest.mark.parametrize(
    ("mode", "reply", "reason"),
    [
        ("invalid-json", "", "LLMError"),
        ("http-500", "", "HTTP 500"),
        ("garbage-body", "", "not JSON"),
        ("fixed", '{"c99": 3}', "LLMError"),
        ("slow", "", "timed out"),
    ],
)
def test_llm_failures_fall_back_to_fused_order(
    engine: Engine, mode: str, reply: str, reason: str
) -> None:
    plain = engine.search("refund for charges billed twice", k=5, config=cfg())
    with ChatServer(mode=mode, reply=reply, delay_s=3) as server:  # type: ignore[arg-type]
        result = engine.search("refund for charges billed twice", k=5, config=llm(server, 0.5))
    assert result.rerank is not None and not result.rerank.ran
    assert reason in result.rerank.reason
    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in plain.hits]
    assert all(h.rerank is None for h in result.hits)


def test_invented_labels_are_reported_and_ignored(engine: Engine) -> None:
    with ChatServer(mode="fixed", reply='{"c1": 0, "c2": 3, "c77": 3, "c3": "high"}') as server:
        result = engine.search("refund for charges billed twice", k=5, config=llm(server))
    assert result.rerank is not None and result.rerank.ran
    notes = " | ".join(result.rerank.notes)
    assert "c77" in notes and "high" in notes


def test_missing_cross_encoder_falls_back_with_the_path(engine: Engine, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    config = cfg(rerank={"kind": "cross-encoder", "model": str(missing)})
    result = engine.search("refund", k=3, config=config)
    assert result.rerank is not None and not result.rerank.ran
    assert "no-such-model" in result.rerank.reason


def test_feature_reranker_explains_every_hit(engine: Engine) -> None:
    from clew.retrieve.rerank import shipped_feature_model

    shipped = set(shipped_feature_model().features)
    assert {"cosine", "bm25", "fused", "graph"} <= shipped
    result = engine.search("ERR-4413 expired key", k=5, config=cfg(rerank={"kind": "features"}))
    assert result.rerank is not None and result.rerank.ran
    assert result.rerank.reranker == "features"  # the shipped weights
    for h in result.hits:
        assert h.rerank is not None
        assert set(h.rerank.explain) == shipped
    blend = cfg(rerank={"kind": "features", "model": "blend"})
    result = engine.search("ERR-4413 expired key", k=5, config=blend)
    assert result.rerank is not None and result.rerank.reranker == "features:blend"
    for h in result.hits:
        assert h.rerank is not None
        assert set(h.rerank.explain) == {"cosine", "concept_overlap", "pagerank"}


# -- answers ------------------------------------------------------------------------------------


def calibration(tmp_path: Path, threshold_side: str) -> str:
    """A calibration fitted on synthetic evidence: 'strict' abstains on everything here."""
    good = [dict.fromkeys(EVIDENCE, 5.0 + i * 0.01) for i in range(20)]
    bad = [dict.fromkeys(EVIDENCE, 4.0 + i * 0.01) for i in range(20)]
    if threshold_side == "lenient":
        good, bad = (
            [dict.fromkeys(EVIDENCE, 0.0 + i * 0.01) for i in range(20)],
            [dict.fromkeys(EVIDENCE, -5.0 + i * 0.01) for i in range(20)],
        )
    cal = fit_calibration(good, bad)
    path = tmp_path / f"{threshold_side}.json"
    path.write_text(json.dumps(cal.to_json()))
    return str(path)


def test_extractive_answer_cites_its_sources(engine: Engine, tmp_path: Path) -> None:
    config = cfg(answer={"calibration": calibration(tmp_path, "lenient")})
    answer = engine.ask("What does ERR-4413 mean?", config=config)
    assert not answer.abstained, answer.evidence
    assert "ERR-4413 means the key expired" in answer.answer and "[1]" in answer.answer
    first = answer.citations[0]
    assert first.n == 1 and first.doc_id == "codes" and first.title == "Error codes"
    trail = first.why["trail"]
    assert any(step["from"] == "query terms" and "err-4413" in step["terms"] for step in trail)
    assert first.why["legs"]
    data = answer.to_dict()
    for key in ("answer", "abstained", "citations", "hits", "dropped", "trace_id"):
        assert key in data
    assert set(data["citations"][0]) == {
        "n",
        "doc_id",
        "chunk_id",
        "title",
        "url",
        "page",
        "why",
        "spans",
        "sentences",
    }
    cited_text = next(h.text for h in answer.hits if h.chunk_id == first.chunk_id)
    assert len(first.spans) == len(first.sentences) >= 1
    for (a, b), sentence in zip(first.spans, first.sentences, strict=True):
        assert sentence.split()[0] in cited_text[a:b]
    assert data["trace_id"] and data["trace_id"].startswith("tr-")


def test_abstains_and_shows_nearest_misses(engine: Engine, tmp_path: Path) -> None:
    config = cfg(answer={"calibration": calibration(tmp_path, "strict")})
    answer = engine.ask("Why was the idempotency key rejected?", config=config)
    assert answer.abstained and answer.citations == ()
    assert "do not contain" in answer.answer
    assert answer.nearest and answer.confidence < answer.threshold
    # a code's definition found under the code answers whatever the confidence
    defined = engine.ask("What does ERR-4413 mean?", config=config)
    assert defined.confidence < defined.threshold and defined.evidence["code_defined"] == 1.0
    assert not defined.abstained and defined.citations


def test_generative_answer_and_its_fallbacks(engine: Engine, tmp_path: Path) -> None:
    lenient = calibration(tmp_path, "lenient")

    def gen(server: ChatServer) -> EngineConfig:
        return cfg(
            answer={
                "calibration": lenient,
                "mode": "generative",
                "base_url": server.base_url,
                "model": "m",
                "timeout_s": 1.0,
            }
        )

    with ChatServer(mode="fixed", reply="The key expired [1].") as server:
        answer = engine.ask("What does ERR-4413 mean?", config=gen(server))
        assert answer.mode == "generative" and answer.answer == "The key expired [1]."
        assert [c.n for c in answer.citations] == [1]
        server.reply = "It expired."  # no citation: falls back
        answer = engine.ask("What does ERR-4413 mean?", config=gen(server))
        assert answer.mode == "extractive" and "cites no source" in answer.fallback
        assert answer.citations
        server.reply = "NOT_FOUND"
        answer = engine.ask("What does ERR-4413 mean?", config=gen(server))
        assert answer.abstained
        server.mode = "http-500"
        answer = engine.ask("What does ERR-4413 mean?", config=gen(server))
        assert answer.mode == "extractive" and "HTTP 500" in answer.fallback


# -- traces -------------------------------------------------------------------------------------


def test_search_trace_replays_identically(engine: Engine) -> None:
    config = cfg(expand={"enabled": True}, rerank={"kind": "features"})
    result = engine.search("CHG-7 pgbouncer", k=5, filter={"audience": "sre"}, config=config)
    assert result.trace_id
    from clew.trace import TraceStore

    trace = TraceStore(engine.directory).read(result.trace_id)
    assert set(trace["lists"]) >= {"lexical", "dense", "fused", "expanded", "reranked", "hits"}
    assert trace["release"] == result.release and trace["analyzer"]
    assert trace["rerank"]["ran"] is True and "rerank" in trace["timings_ms"]
    report = engine.replay(result.trace_id)
    assert report.identical, report.differences


def test_ask_trace_replays_and_notices_a_changed_index(engine: Engine, tmp_path: Path) -> None:
    config = cfg(answer={"calibration": calibration(tmp_path, "lenient")})
    answer = engine.ask("What does ERR-4413 mean?", config=config)
    assert answer.trace_id
    assert engine.replay(answer.trace_id).identical
    engine.delete("codes")
    report = engine.replay(answer.trace_id)
    assert not report.identical
    assert report.release_now > report.release_then
    assert any("release" in d for d in report.differences)


def test_unknown_trace_is_a_clear_error(engine: Engine) -> None:
    with pytest.raises(QueryError, match="no trace"):
        engine.replay("tr-" + "0" * 20)


def test_tracing_can_be_turned_off(engine: Engine) -> None:
    result = engine.search("refund", config=cfg(trace={"enabled": False}))
    assert result.trace_id is None
