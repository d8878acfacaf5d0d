"""``Engine.ingest(DIR, prune=True)``: the index mirrors the directory, within the writer's scope,
and never removes what no file stands for (API documents, memories) or what a skipped file
still holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew import Engine
from clew.errors import ConfigError
from clew.testing.fakes import fake_engine
from clew.types import API_SOURCE, Document


def ids(e: Engine, scope: object = None) -> list[str]:
    return [d.doc_id for d in e.documents(scope=scope)]


def test_prune_removes_only_what_no_file_stands_for(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.md").write_text("# A\n\nalpha")
    (corpus / "sub" / "b.md").write_text("# B\n\nbeta")
    rows = [{"_id": "T-1", "text": "ticket one"}, {"_id": "T-2", "text": "ticket two"}]
    (corpus / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with fake_engine(tmp_path / "idx") as e:
        e.ingest([corpus])
        e.ingest([Document("posted", "Posted", "from the API", API_SOURCE)])
        e.remember("the user prefers dark mode")
        before = set(ids(e))
        (corpus / "sub" / "b.md").unlink()
        (corpus / "t.jsonl").write_text("{broken\n")  # skipped now: its tickets stay
        report = e.ingest([corpus], prune=True)
        assert report.removed == ("sub/b.md",)
        assert [s.path for s in report.skipped] == ["t.jsonl"]
        assert set(ids(e)) == before - {"sub/b.md"}
        assert all(h.doc_id != "sub/b.md" for h in e.search("beta", k=5).hits)
        report = e.ingest([corpus])  # without prune nothing goes
        assert report.removed == ()


def test_prune_stays_inside_the_writers_scope(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with fake_engine(tmp_path / "idx") as e:
        e.ingest(
            [
                Document("mine.md", "Mine", "tenant a", "mine.md", {"tenant": "a"}),
                Document("theirs.md", "Theirs", "tenant b", "theirs.md", {"tenant": "b"}),
            ]
        )
        (corpus / "new.md").write_text("---\ntenant: a\n---\n# New\n\nfresh")
        report = e.ingest([corpus], prune=True, scope={"tenant": "a"})
        assert report.added == ("new.md",) and report.removed == ("mine.md",)
        assert ids(e) == ["new.md", "theirs.md"], "the other tenant's document is untouched"


def test_prune_needs_directories(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("# A\n\nalpha")
    with fake_engine(tmp_path / "idx") as e:
        with pytest.raises(ConfigError, match="every source must be a directory"):
            e.ingest([f], prune=True)
        assert ids(e) == [], "nothing written"


def test_a_directory_file_that_makes_too_many_chunks_is_skipped(tmp_path: Path) -> None:
    """The chunk limit is met after loading: a directory's file over it is left out and listed,
    the rest written; the same file named directly stops the ingest."""
    from dataclasses import replace

    from clew.config import EngineConfig, IngestLimits
    from clew.errors import LoadError

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "small.md").write_text("# Small\n\none paragraph")
    (corpus / "huge.md").write_text(
        "# Huge\n\n" + "\n\n".join(f"part {i} " * 60 for i in range(40))
    )
    config = replace(EngineConfig(), ingest=IngestLimits(max_chunks_per_doc=3))
    with fake_engine(tmp_path / "idx", config) as e:
        report = e.ingest([corpus])
        assert report.added == ("small.md",)
        (skip,) = report.skipped
        assert skip.path == "huge.md" and "max_chunks_per_doc" in skip.reason
        assert ids(e) == ["small.md"]
        with pytest.raises(LoadError, match="max_chunks_per_doc"):
            e.ingest([corpus / "huge.md"])
