"""``clew docs list``, ``clew keys revoke``, the ingest report (skipped files, pruned documents,
exit status) and output cut short by its reader. In-process through ``clew.cli.main`` unless a
real pipe is needed."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clew.cli import BROKEN_PIPE, main
from clew.cli.index import NOTHING_INGESTED, print_ingest
from clew.serve.auth import KeyStore
from clew.testing.fakes import fake_engine
from clew.types import Document, IngestReport, SkippedFile


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _fake_index(path: Path, docs: list[Document]) -> Path:
    with fake_engine(path) as engine:
        engine.ingest(docs)
    return path


# -- clew docs list -------------------------------------------------------------------------------


def test_docs_list_prints_a_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_title = "A very long title " * 6
    index = _fake_index(
        tmp_path / "idx",
        [
            Document("b.md", "Beta", "Beta text about payouts.", "b.md", {"tenant": "x"}),
            Document("a.md", long_title, "Alpha text.\n\n" + "More alpha. " * 300, "a.md"),
        ],
    )
    code, out, _ = run(capsys, "docs", "list", "--index", str(index))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "title", "chunks", "source"]
    assert lines[1].startswith("a.md  ") and lines[2].startswith("b.md  ")
    assert "A very long title" in lines[1] and "…" in lines[1], "long cells are cut"
    assert len(lines[1]) < len(long_title) + 40
    chunks_col = lines[0].index("chunks")
    assert lines[2][chunks_col : chunks_col + 6].strip() == "1"
    assert lines[-1].startswith("2 document(s), ")
    code, out, _ = run(capsys, "docs", "list", "--index", str(index), "--json")
    listed = json.loads(out)
    assert code == 0 and [d["id"] for d in listed] == ["a.md", "b.md"]
    assert listed[1] == {
        "id": "b.md",
        "title": "Beta",
        "source": "b.md",
        "chunks": 1,
        "release": 1,
        "metadata": {"tenant": "x"},
    }
    assert listed[0]["chunks"] > 1


def test_docs_list_of_an_empty_or_missing_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = _fake_index(tmp_path / "idx", [])
    assert run(capsys, "docs", "list", "--index", str(index))[:2] == (0, "no documents\n")
    assert json.loads(run(capsys, "docs", "list", "--index", str(index), "--json")[1]) == []
    code, _, err = run(capsys, "docs", "list", "--index", str(tmp_path / "none"))
    assert code == 2 and "no clew index at" in err and err.count("\n") == 1


# -- clew keys revoke -----------------------------------------------------------------------------


def test_keys_revoke_removes_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys.yaml"
    bob, _ = KeyStore.add(keys, "bob", scope={"tenant": "b"})
    ann, _ = KeyStore.add(keys, "ann", admin=True)
    code, _, err = run(capsys, "keys", "revoke", "bob", "--file", str(keys))
    assert code == 0 and "revoked key 'bob'" in err
    store = KeyStore.load(keys)
    assert [name for name, _ in store.principals()] == ["ann"]
    assert store.authenticate(bob) is None and store.authenticate(ann) is not None
    assert oct(keys.stat().st_mode & 0o777) == "0o600"
    code, out, _ = run(capsys, "keys", "list", "--file", str(keys))
    assert code == 0 and out.startswith("ann\t") and "bob" not in out


def test_keys_revoke_unknown_name_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys.yaml"
    KeyStore.add(keys, "ann")
    before = keys.read_text()
    code, _, err = run(capsys, "keys", "revoke", "bob", "--file", str(keys))
    assert code == 2 and err.count("\n") == 1
    assert "no key named 'bob'" in err and "'ann'" in err, err
    assert keys.read_text() == before, "nothing written"
    code, _, err = run(capsys, "keys", "revoke", "bob", "--file", str(tmp_path / "nope.yaml"))
    assert code == 2 and "does not exist" in err


# -- the ingest report ----------------------------------------------------------------------------


def _report(**kw: Any) -> IngestReport:
    base = IngestReport(
        added=(), updated=(), unchanged=(), chunks_written=0, release=3, seconds=0.5
    )
    return dataclasses.replace(base, **kw)


def test_the_report_lists_skipped_files_and_removed_documents(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _report(
        added=("a.md",),
        chunks_written=2,
        skipped=(
            SkippedFile("scans/page.pdf", "no text layer"),
            SkippedFile("notes/big.txt", "over ingest.max_file_bytes"),
        ),
        removed=("old.md",),
    )
    assert print_ingest(report, as_json=False) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ingested 1 new, 0 updated, 0 unchanged documents; 2 chunks")
    assert out[1:3] == ["removed 1 document(s) whose file is gone:", "  old.md"]
    assert out[3] == "skipped 2 file(s):"
    assert out[4].split() == ["path", "reason"]
    assert out[5].split(None, 1) == ["scans/page.pdf", "no text layer"]
    assert out[6].split(None, 1) == ["notes/big.txt", "over ingest.max_file_bytes"]
    assert out[5].index("no text") == out[6].index("over"), "the reasons line up"
    assert print_ingest(report, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["skipped"] == [
        {"path": "scans/page.pdf", "reason": "no text layer"},
        {"path": "notes/big.txt", "reason": "over ingest.max_file_bytes"},
    ]
    assert data["removed"] == ["old.md"]


def test_nothing_ingested_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    skipped = _report(skipped=(SkippedFile("a.pdf", "corrupt"),))
    assert print_ingest(skipped, as_json=False) == NOTHING_INGESTED == 1
    assert "nothing was ingested (1 file(s) skipped)" in capsys.readouterr().err
    assert print_ingest(_report(removed=("gone.md",)), as_json=True) == 0, "a prune did something"
    assert print_ingest(_report(unchanged=("a.md",)), as_json=False) == 0, "unchanged: loaded"


def test_ingest_of_an_empty_directory_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    index = tmp_path / "idx"
    code, out, err = run(
        capsys, "ingest", str(tmp_path / "empty"), "--index", str(index), "--no-progress", "--json"
    )
    assert code == NOTHING_INGESTED and "nothing was ingested" in err
    assert json.loads(out)["added"] == [] and json.loads(out)["skipped"] == []


def test_prune_cannot_be_combined_with_transcripts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"speaker": "ana", "text": "hello", "time": "2026-03-01"}\n')
    code, _, err = run(
        capsys, "ingest", str(chat), "--index", str(tmp_path / "idx"), "--prune", "--no-progress"
    )
    assert code == 2 and "--prune" in err and "transcripts" in err and err.count("\n") == 1
    assert not (tmp_path / "idx").exists() or not list((tmp_path / "idx").glob("*.sqlite*"))


# These two need the lead's loader work (issue #18): a directory's unloadable files skipped and
# listed in IngestReport.skipped, and Engine.ingest(prune=True) removing the documents whose
# file is gone. Until it lands they fail (a bad file stops the ingest; prune does nothing).


def test_a_directory_ingest_skips_bad_files_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.md").write_text("# Good\n\nA good document about ERR-4012.")
    (corpus / "binary.txt").write_bytes(b"\x00\x01\x02")
    index = str(tmp_path / "idx")
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", index, "--no-progress", "--json")
    report = json.loads(out)
    assert code == 0 and report["added"] == ["good.md"]
    assert [s["path"] for s in report["skipped"]] == ["binary.txt"]
    assert report["skipped"][0]["reason"]
    (corpus / "good.md").unlink()
    code, out, err = run(capsys, "ingest", str(corpus), "--index", index, "--no-progress")
    assert code == NOTHING_INGESTED and "nothing was ingested (1 file(s) skipped)" in err
    assert "skipped 1 file(s):" in out and any(
        line.strip().startswith("binary.txt") for line in out.splitlines()
    )


def test_ingest_prune_removes_documents_whose_file_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Alpha\n\nThe ERR-7001 code means the vault is sealed.")
    (corpus / "b.txt").write_text("Beta\n\nUnrelated text about payouts and settlement.")
    index = str(tmp_path / "idx")
    assert run(capsys, "ingest", str(corpus), "--index", index, "--no-progress")[0] == 0
    (corpus / "b.txt").unlink()
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", index, "--no-progress", "--prune")
    assert code == 0 and "removed 1 document(s) whose file is gone:" in out and "  b.txt" in out
    listed = json.loads(run(capsys, "docs", "list", "--index", index, "--json")[1])
    assert [d["id"] for d in listed] == ["a.md"]
    (corpus / "a.md").unlink()
    code, out, _ = run(
        capsys, "ingest", str(corpus), "--index", index, "--no-progress", "--prune", "--json"
    )
    assert code == 0 and json.loads(out)["removed"] == ["a.md"], "removing is doing something"


# -- output cut short -----------------------------------------------------------------------------


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``clew ... | head -1``: the reader goes away; no traceback, the SIGPIPE status."""
    pad = "x" * 50  # ~170 characters a line: far more than a pipe buffers (64 KiB)
    docs = [
        Document(f"doc-{i:04d}-{pad}", f"Title {i} {pad}", f"Text {i}.", f"{pad}/{i}")
        for i in range(1500)
    ]
    index = _fake_index(tmp_path / "idx", docs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "clew", "docs", "list", "--index", str(index)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # as `head -1` does: one line, then the pipe is closed
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    code = proc.wait(timeout=120)
    assert first.split() == [b"id", b"title", b"chunks", b"source"]
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, (
        err
    )
    assert code == BROKEN_PIPE == 141


# -- a core install ---------------------------------------------------------------------------


def test_a_missing_extra_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without clew[serve], `clew serve` says which extra to install (no traceback)."""
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn: ModuleNotFoundError
    code, out, err = run(capsys, "serve", "--index", str(tmp_path / "idx"), "--no-auth")
    assert code == 2 and out == ""
    assert err == (
        "clew: error: this command needs uvicorn, which is not installed: "
        "pip install 'clew[serve]'\n"
    )
