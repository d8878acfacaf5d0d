"""``clew ingest`` on hostile inputs, in-process through ``clew.cli.main`` with the real
embedding model and spaCy pipeline: every one ends in an ingest or in a one-line error.

Speed is not asserted here (``bench/ingest_limits.py`` measures it through the real CLI)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from clew.cli import main

pytestmark = pytest.mark.slow


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def hit_ids(capsys: pytest.CaptureFixture[str], index: Path, query: str) -> list[str]:
    code, out, _ = run(capsys, "search", query, "--index", str(index), "--json", "--k", "5")
    assert code == 0
    return [h["doc_id"] for h in json.loads(out)["hits"]]


def test_a_symlink_out_of_the_corpus_is_not_ingested_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "notes.md").write_text("# Notes\n\nThe pgbouncer pool was resized on Monday.")
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    (corpus / "passwd.txt").symlink_to(secret)
    index = tmp_path / "idx"
    with caplog.at_level(logging.WARNING, logger="clew.ingest.load"):
        code, _, _ = run(capsys, "ingest", str(corpus), "--index", str(index), "--no-progress")
    assert code == 0
    assert any(
        "passwd.txt" in r.getMessage() and "outside" in r.getMessage() for r in caplog.records
    )
    assert "passwd.txt" not in hit_ids(capsys, index, "root:x:0:0")
    code, _, _ = run(
        capsys, "ingest", str(corpus), "--index", str(index), "--no-progress", "--follow-symlinks"
    )
    assert code == 0
    assert hit_ids(capsys, index, "root:x:0:0")[0] == "passwd.txt"


def test_the_file_size_limit_is_a_one_line_error_and_can_be_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.txt"
    big.write_text("lorem ipsum dolor sit amet\n" * 200)  # 5,400 bytes
    small = tmp_path / "small.yaml"
    small.write_text("ingest:\n  max_file_bytes: 4096\n")
    index = tmp_path / "idx"
    code, _, err = run(capsys, "ingest", str(big), "--index", str(index), "--config", str(small))
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "5,400 bytes; allowed: at most 4,096 bytes (ingest.max_file_bytes)" in err
    raised = tmp_path / "raised.yaml"
    raised.write_text("ingest:\n  max_file_bytes: 8192\n")
    code, out, _ = run(
        capsys, "ingest", str(big), "--index", str(index), "--config", str(raised), "--json"
    )
    assert code == 0 and json.loads(out)["added"] == ["big.txt"]


@pytest.mark.parametrize("name", ["corpus.jsonl", "chat.jsonl"])
def test_a_ten_thousand_deep_json_line_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    first = (
        {"_id": "1", "text": "ok"} if name == "corpus.jsonl" else {"speaker": "ana", "text": "hi"}
    )
    path = tmp_path / name
    path.write_text(json.dumps(first) + "\n" + "[" * 10_000 + "]" * 10_000 + "\n")
    code, _, err = run(capsys, "ingest", str(path), "--index", str(tmp_path / "idx"))
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and "RecursionError" not in err
    assert name in err and ("line 2" in err or ":2:" in err) and "nested too deeply" in err


def test_token_less_runs_ingest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """20 KB of ``&`` (spaCy took two minutes), 1.1 million characters without a blank
    (spaCy's E088) and 2.5 MB of ``&amp;`` HTML: all ingest, chunks within the bound."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "amp.txt").write_text("&" * 20_000)
    (corpus / "blob.txt").write_text("x" * 1_100_000)
    (corpus / "amp.html").write_text("<html><body><p>" + "&amp;" * 500_000 + "</p></body></html>")
    index = tmp_path / "idx"
    code, out, err = run(
        capsys, "ingest", str(corpus), "--index", str(index), "--json", "--no-progress"
    )
    assert code == 0, err
    report = json.loads(out)
    assert sorted(report["added"]) == ["amp.html", "amp.txt", "blob.txt"]
    assert report["chunks_written"] <= 3 + (20_000 + 1_100_000 + 500_000) // 32_768 + 3
