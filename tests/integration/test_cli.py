"""The command line, in-process through ``clew.cli.main`` (FAKE encoder is not used here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_search_json_shape(sample_index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "search", "ERR-4413", "--index", str(sample_index), "--json", "--k", "3"
    )
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"query", "route", "hits", "release", "timings_ms"}
    assert set(data["route"]) == {
        "legs",
        "features",
        "expand",
        "weighed_by",
        "reason",
        "signals",
        "plan",
    }
    assert data["route"]["weighed_by"].startswith("router-")
    assert [s["step"] for s in data["route"]["plan"]] == [
        "lexical",
        "dense",
        "graph.walk",
        "graph.titles",
    ]
    assert len(data["hits"]) == 3
    hit = data["hits"][0]
    assert set(hit) >= {
        "chunk_id",
        "doc_id",
        "title",
        "text",
        "score",
        "metadata",
        "contributions",
        "graph",
    }
    assert set(hit["contributions"][0]) == {"leg", "rank", "raw_score", "fused_part"}
    assert "ERR-4413" in hit["text"]


def test_explain_prints_contribution_table(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "search",
        "what else broke after the pgbouncer migration",
        "--index",
        str(sample_index),
        "--explain",
        "--k",
        "3",
    )
    assert code == 0
    assert "leg        rank   raw score   fused part" in out
    assert "route:" in out and "graph" in out


def test_filter_on_the_command_line(sample_index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "search",
        "pgbouncer",
        "--index",
        str(sample_index),
        "--json",
        "--filter",
        '{"audience": "public"}',
        "--k",
        "20",
    )
    assert code == 0
    hits = json.loads(out)["hits"]
    assert hits and all(h["metadata"].get("audience") == "public" for h in hits)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "   "], "query is empty"),
        (["search", "x", "--filter", "{bad"], "not valid JSON"),
        (["search", "x", "--filter", '{"nope": 1}'], "appear in no document"),
        (["search", "x", "--k", "0"], "k=0 is invalid"),
        (["delete", "missing.md"], "no document with id 'missing.md'"),
    ],
)
def test_bad_input_one_line_error(
    sample_index: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv[:2], "--index", str(sample_index), *argv[2:])
    assert code == 2
    assert err.startswith("clew: error: ") and message in err
    assert err.count("\n") == 1


def test_unknown_preset_is_rejected(sample_index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["search", "x", "--index", str(sample_index), "--preset", "turbo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'turbo'" in err and "default" in err
    assert err.count("\n") == 1, "one-line error"


def test_missing_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "search", "x", "--index", str(tmp_path / "none"))
    assert code == 2 and "no clew index at" in err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("binary.txt", b"\x00\x01\x02", "binary file"),
        ("latin.md", "r\xe9sum\xe9".encode("latin-1"), "not valid UTF-8"),
    ],
)
def test_bad_file_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes, message: str
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.md").write_text("# Good\n\nA good document about ERR-4012.")
    (corpus / name).write_bytes(data)
    index = tmp_path / "idx"
    # named directly, a file that cannot be loaded is an error (in a directory walk it is
    # skipped instead: test_cli_commands.py)
    code, _, err = run(
        capsys,
        *("ingest", str(corpus / "good.md"), str(corpus / name)),
        *("--index", str(index), "--no-progress"),
    )
    assert code == 2 and message in err
    code, out, _ = run(capsys, "stats", "--index", str(index))
    stats = json.loads(out)
    assert stats["documents"] == 0 and stats["chunks"] == 0 and stats["release"] == 0


def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys,
        "ingest",
        str(tmp_path / "absent.md"),
        "--index",
        str(tmp_path / "idx"),
        "--no-progress",
    )
    assert code == 2 and "no such file or directory" in err


def test_ingest_reingest_and_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Alpha\n\nThe ERR-7001 code means the vault is sealed.")
    (corpus / "b.txt").write_text("Beta\n\nUnrelated text about payouts and settlement.")
    index = str(tmp_path / "idx")
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", index, "--json", "--no-progress")
    assert code == 0 and json.loads(out)["added"] == ["a.md", "b.txt"]
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", index, "--json", "--no-progress")
    report = json.loads(out)
    assert report["added"] == [] and report["unchanged"] == ["a.md", "b.txt"]
    code, out, _ = run(capsys, "delete", "a.md", "--index", index)
    assert code == 0
    code, out, _ = run(capsys, "search", "ERR-7001", "--index", index, "--json")
    assert all(h["doc_id"] != "a.md" for h in json.loads(out)["hits"])


def test_ask_json_cites_and_replays(sample_index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "ask", "What does ERR-4413 mean?", "--index", str(sample_index), "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"answer", "abstained", "citations", "hits", "dropped", "trace_id"}
    assert not data["abstained"], data["evidence"]
    assert "ERR-4413" in data["answer"] and "[1]" in data["answer"]
    cited = data["citations"][0]
    assert set(cited) == {
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
    assert cited["page"] is None, "a markdown source has no pages"
    assert cited["doc_id"].startswith("error-codes")
    assert cited["why"]["trail"] and cited["why"]["legs"]
    code, out, _ = run(capsys, "replay", data["trace_id"], "--index", str(sample_index))
    assert code == 0 and "identical" in out


def test_ask_abstains_on_an_unrelated_question(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "ask",
        "Which volcano erupted in Iceland in 2010 and grounded flights across Europe?",
        "--index",
        str(sample_index),
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["abstained"], data["evidence"]
    assert data["citations"] == [] and data["nearest"]


def test_ask_text_shows_why(sample_index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "ask",
        "which services are affected if pgbouncer-core runs out of connections",
        "--index",
        str(sample_index),
        "--expand",
        "--rerank",
        "features",
    )
    assert code == 0
    assert "[1]" in out and "why:" in out and "found by:" in out and "trace: tr-" in out
    code, out, _ = run(capsys, "ask", "What does ERR-4413 mean?", "--index", str(sample_index))
    walked = [line for line in out.splitlines() if "why: PageRank from" in line]
    assert code == 0 and walked, out  # a question naming an identifier: the PageRank plan
    assert all("{" not in line for line in walked)  # a sentence, not a raw JSON step
    assert any("PageRank from concept err-4413 → MENTIONS 'err-4413' → " in w for w in walked)


def test_replay_unknown_trace_is_a_one_line_error(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "replay", "tr-nope", "--index", str(sample_index))
    assert code == 2 and err.startswith("clew: error: invalid trace id")
    assert err.count("\n") == 1


@pytest.mark.slow
def test_remember_recall_forget_and_transcripts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = str(tmp_path / "mem")
    chat = tmp_path / "inc-7.jsonl"
    chat.write_text(
        '{"speaker": "ana", "text": "pgbouncer ran out of connections", "time": "2026-03-01"}\n'
        '{"speaker": "bo", "text": "ERR-4012 timeouts followed", "time": "2026-03-01T00:05Z"}\n'
    )
    code, out, _ = run(capsys, "ingest", str(chat), "--index", index, "--json", "--no-progress")
    assert code == 0 and len(json.loads(out)["added"]) == 2
    code, out, _ = run(
        capsys,
        *("remember", "Raised max_client_conn to 400", "--index", index),
        *("--session", "inc-7", "--time", "2026-03-02T10:00:00Z", "--meta", '{"by": "ana"}'),
        *("--relation", "related_to=concept:pgbouncer", "--json"),
    )
    assert code == 0
    memory_id = json.loads(out)["id"]
    code, out, _ = run(
        capsys, "recall", "pgbouncer connections", "--index", index, "--session", "inc-7", "--json"
    )
    hits = json.loads(out)["hits"]
    assert code == 0 and memory_id in {h["doc_id"] for h in hits}
    assert {h["metadata"]["session"] for h in hits} == {"inc-7"}
    code, out, _ = run(
        capsys, "recall", "pgbouncer", "--index", index, "--as-of", "2026-03-01T01:00Z", "--json"
    )
    assert memory_id not in {h["doc_id"] for h in json.loads(out)["hits"]}
    code, out, _ = run(capsys, "forget", memory_id, "--index", index)
    assert code == 0 and out.startswith(f"forgot {memory_id}")
    code, _, err = run(capsys, "forget", memory_id, "--index", index)
    assert code == 2 and "no memory" in err
    code, _, err = run(capsys, "remember", "x", "--index", index, "--relation", "caused_by")
    assert code == 2 and "TYPE=TARGET" in err
