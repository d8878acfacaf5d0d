from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew.config import ChunkConfig
from clew.errors import LoadError
from clew.ingest.chunk import Chunker, content_hash
from clew.ingest.load import load_path
from clew.types import Document

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"


def words(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def test_markdown_front_matter_title_and_links() -> None:
    (doc,) = load_path(SAMPLE / "postmortem-inc-2031.md")
    assert doc.doc_id == "postmortem-inc-2031.md"
    assert doc.metadata["audience"] == "sre"
    assert "created_at" in doc.metadata and "title" not in doc.metadata
    assert not doc.text.startswith("---")
    assert "pgbouncer-runbook.md" in doc.links


def test_html_drops_script_and_style_and_keeps_headings() -> None:
    (doc,) = load_path(SAMPLE / "status-2026-02-12.html")
    assert "LP-STATUS-ANALYTICS-9931" not in doc.text
    assert "incident-banner--pulse" not in doc.text
    assert doc.title
    assert any(line.startswith("#") for line in doc.text.splitlines())


def test_jsonl_beir_layout_keeps_metadata_verbatim() -> None:
    docs = list(load_path(SAMPLE / "tickets.jsonl"))
    assert len(docs) >= 4
    first = json.loads((SAMPLE / "tickets.jsonl").read_text().splitlines()[0])
    assert docs[0].doc_id == first["_id"] and docs[0].metadata == first["metadata"]


def test_directory_is_recursive_and_sorted(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.md").write_text("# X\n\nbody")
    (tmp_path / "a.txt").write_text("A title\n\nbody")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    (tmp_path / ".hidden.md").write_text("hidden")
    assert [d.doc_id for d in load_path(tmp_path)] == ["a.txt", "b/x.md"]


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("bin.txt", b"abc\x00def", "binary file"),
        ("latin.md", "caf\xe9".encode("latin-1"), "not valid UTF-8"),
        ("bad.jsonl", b'{"_id": "1", "text": "ok"}\n{nope\n', "line 2: invalid JSON"),
        ("noid.jsonl", b'{"text": "ok"}\n', "missing or empty '_id'"),
        ("x.pdf", b"%PDF", r"not a readable PDF \(corrupt\?\)"),
        ("x.exe", b"MZ", "unsupported file type '.exe'"),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    f = tmp_path / name
    f.write_bytes(data)
    with pytest.raises(LoadError, match=message):
        list(load_path(f))


def test_missing_path() -> None:
    with pytest.raises(LoadError, match="no such file"):
        list(load_path("/nonexistent/clew"))


def make_doc(text: str) -> Document:
    return Document(doc_id="d", title="T", text=text, source="d")


def test_chunks_are_exact_slices_with_heading_paths() -> None:
    text = "# Top\n\nintro para\n\n## Sub A\n\nalpha beta\n\n## Sub B\n\ngamma delta"
    chunks = Chunker(ChunkConfig(max_tokens=64, overlap_tokens=0), words).chunk(make_doc(text))
    assert [c.heading_path for c in chunks] == [("Top",), ("Top", "Sub A"), ("Top", "Sub B")]
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.content_hash == content_hash(c.text)
    assert [c.seq for c in chunks] == [0, 1, 2]
    assert len({c.chunk_id for c in chunks}) == 3


def test_long_sections_split_within_budget_with_overlap() -> None:
    sentence = " ".join(f"w{i}" for i in range(30)) + "."
    text = " ".join([sentence] * 10)  # one paragraph of 300 words
    cfg = ChunkConfig(max_tokens=64, overlap_tokens=8)
    chunks = Chunker(cfg, words).chunk(make_doc(text))
    assert len(chunks) > 4
    for c in chunks:
        assert c.token_count <= 64
        assert text[c.start : c.end] == c.text
    one_sentence_chunks = Chunker(cfg, words).chunk(make_doc(" ".join(f"x{i}" for i in range(200))))
    first, second = one_sentence_chunks[0], one_sentence_chunks[1]
    assert second.start < first.end, "word windows overlap"
    assert all(c.token_count <= 64 for c in one_sentence_chunks)


def test_title_only_document_gets_one_chunk() -> None:
    chunks = Chunker(ChunkConfig(), words).chunk(make_doc(""))
    assert len(chunks) == 1 and chunks[0].text == ""
