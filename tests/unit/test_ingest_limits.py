"""Hard limits on what one ingested file may cost (:class:`clew.config.IngestLimits`).

Each limit is checked where it binds: the loader refuses a file over ``max_file_bytes``, the
chunker never makes a chunk over ``max_chunk_chars`` (a whitespace-free run is cut) nor more
than ``max_chunks_per_doc`` chunks, spaCy never sees a text that would hit its ``max_length``
(E088) or a punctuation run its tokenizer peels quadratically, and a document's spaCy time is
budgeted. Directory walks do not leave their root through symlinks; deeply nested JSON is a
one-line LoadError. Work is asserted by counting (what the tokenizer and spaCy are given), never
by timing: the speed itself is measured by ``bench/ingest_limits.py``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from clew.config import ChunkConfig, ConceptConfig, EngineConfig, IngestLimits
from clew.errors import ConfigError, LoadError
from clew.ingest.chunk import (
    MAX_HEADING_PATH_CHARS,
    MAX_PUNCT_RUN,
    PUNCT_KEEP,
    Chunker,
    embedding_text,
    squeeze,
)
from clew.ingest.concepts import (
    SPACY_MAX_CHARS,
    SPACY_MAX_PUNCT_RUN,
    SPACY_MAX_WORD,
    ConceptExtractor,
    load_spacy,
    spacy_pieces,
)
from clew.ingest.load import directory_files, load_path
from clew.ingest.pipeline import IngestContext, build_records
from clew.ingest.transcript import is_transcript, load_transcript
from clew.testing.fakes import FakeHashEncoder
from clew.types import Document

DEEP = "[" * 10_000 + "]" * 10_000


class RecordingCounter:
    """A token counter that records every text it is given: 1 token a character (``&`` in the
    real tokenizer) or 1 a whitespace-separated word (a long run reads as one ``[UNK]``)."""

    def __init__(self, per: str = "char") -> None:
        self.per = per
        self.calls: list[list[int]] = []

    def __call__(self, texts: Sequence[str]) -> list[int]:
        self.calls.append([len(t) for t in texts])
        if self.per == "char":
            return [len(t) for t in texts]
        return [len(t.split()) for t in texts]

    @property
    def longest(self) -> int:
        return max((n for call in self.calls for n in call), default=0)

    @property
    def total(self) -> int:
        return sum(n for call in self.calls for n in call)


def doc(text: str, doc_id: str = "d", title: str = "T") -> Document:
    return Document(doc_id=doc_id, title=title, text=text, source=doc_id)


def exact_slices(d: Document, chunks: Sequence[Any]) -> bool:
    return all(d.text[c.start : c.end] == c.text for c in chunks)


# -- the config record ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("max_file_bytes", 0, "1024..1099511627776"),
        ("max_chunk_chars", 10, "256..1000000"),
        ("max_chunks_per_doc", 0, "1..100000000"),
        ("concept_budget_s", 0.0, "(0, 86400]"),
        ("concept_budget_s", float("nan"), "(0, 86400]"),
    ],
)
def test_limits_are_validated_with_the_value_and_what_is_allowed(
    field: str, value: object, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        IngestLimits(**{field: value})  # type: ignore[arg-type]
    assert f"ingest.{field}=" in str(err.value) and allowed in str(err.value)


def test_limits_are_a_section_of_the_engine_config() -> None:
    config = EngineConfig.from_dict({"ingest": {"max_file_bytes": 2048, "concept_budget_s": 5}})
    assert config.ingest == IngestLimits(max_file_bytes=2048, concept_budget_s=5.0)
    assert EngineConfig().ingest == IngestLimits()
    with pytest.raises(ConfigError, match=r"unknown config field 'ingest\.max_bytes'"):
        EngineConfig.from_dict({"ingest": {"max_bytes": 1}})


# -- file size ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("big.txt", "lorem ipsum\n"),
        ("big.md", "# h\n\nlorem ipsum\n"),
        ("big.html", "<p>lorem ipsum</p>"),
        ("big.jsonl", json.dumps({"_id": "x", "text": "lorem"}) + "\n"),
    ],
)
def test_a_file_over_the_size_limit_is_refused_naming_file_size_and_limit(
    tmp_path: Path, name: str, unit: str
) -> None:
    path = tmp_path / name
    path.write_text(unit * (3000 // len(unit) + 1))
    size = path.stat().st_size
    with pytest.raises(LoadError) as err:
        list(load_path(path, limits=IngestLimits(max_file_bytes=2048)))
    message = str(err.value)
    assert name in message and f"{size:,} bytes" in message
    assert "at most 2,048 bytes (ingest.max_file_bytes)" in message
    assert list(load_path(path, limits=IngestLimits(max_file_bytes=size)))  # at the limit: read
    with pytest.raises(LoadError, match=r"ingest\.max_file_bytes"):  # in a directory too
        list(load_path(tmp_path, limits=IngestLimits(max_file_bytes=2048)))


def test_a_transcript_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"speaker": "ana", "text": "hello " * 500}) + "\n")
    assert is_transcript(chat)
    assert not is_transcript(chat, max_bytes=1024)  # the corpus loader then refuses it
    with pytest.raises(LoadError, match=r"at most 1,024 bytes \(ingest.max_file_bytes\)"):
        load_transcript(chat, limits=IngestLimits(max_file_bytes=1024))
    with pytest.raises(LoadError, match=r"ingest\.max_file_bytes"):
        list(load_path(chat, limits=IngestLimits(max_file_bytes=1024)))
    assert len(load_transcript(chat)) == 1


# -- chunk size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("per", ["char", "word"])
@pytest.mark.parametrize("body", ["&" * 20_000, "x" * 20_000, "ab" * 10_000])
def test_a_whitespace_free_run_is_split_at_the_character_bound(per: str, body: str) -> None:
    """``&`` is a token a character, ``xxxx`` one [UNK] whatever its length: either way no
    chunk is over max_chunk_chars, chunks are exact slices that cover the run, and no text
    longer than the bound is ever given to the token counter."""
    counter = RecordingCounter(per)
    chunker = Chunker(ChunkConfig(), counter, IngestLimits(max_chunk_chars=1000))
    d = doc("intro words here\n\n" + body + "\n\nand an ordinary last paragraph.")
    chunks = chunker.chunk(d)
    assert exact_slices(d, chunks)
    assert max(len(c.text) for c in chunks) <= 1000
    assert "".join(c.text for c in chunks if set(c.text) <= set(body)) == body
    assert counter.longest <= 1000
    assert counter.total <= 4 * len(d.text)  # each character counted a bounded number of times


def test_a_long_run_of_one_token_a_character_is_cut_within_the_token_budget() -> None:
    """A word of 20,000 characters that is a token a character (``a-a-a-…``, CJK) would be one
    chunk of 20,000 tokens (the embedder tokenizes all of it before truncating, hundreds of
    bytes a token): a word longer than LONG_WORD_CHARS is cut within the budget."""
    d = doc("ab" * 10_000 + " and " + "ab" * 100)
    chunks = Chunker(ChunkConfig(max_tokens=64, overlap_tokens=8), RecordingCounter()).chunk(d)
    assert exact_slices(d, chunks)
    long_run = [c for c in chunks if c.end <= 20_000]
    assert "".join(c.text for c in long_run) == "ab" * 10_000
    assert max(c.token_count for c in long_run) <= 64
    assert chunks[-1].text == "ab" * 100  # a word of LONG_WORD_CHARS or fewer stays whole


def test_a_long_punctuation_run_is_one_chunk_embedded_as_a_few_tokens() -> None:
    """20 KB of ``&`` means nothing to the analyzer or the embedder: it is sized and embedded
    squeezed (its first PUNCT_KEEP characters), so it is one chunk, not 80 of 254 tokens."""
    counter = RecordingCounter()
    d = doc("&" * 20_000 + "\n\nan ordinary paragraph")
    (chunk,) = Chunker(ChunkConfig(), counter).chunk(d)
    assert chunk.text == d.text and chunk.token_count <= PUNCT_KEEP + 21 + 5  # 21: the words
    assert embedding_text(d.title, (), chunk.text) == "T\n" + "&" * PUNCT_KEEP + "\n\n" + (
        "an ordinary paragraph"
    )
    assert counter.total < 200  # what the tokenizer was given: squeezed texts
    rule = "=" * MAX_PUNCT_RUN  # a run not longer than MAX_PUNCT_RUN is left as it is
    assert squeeze(f"a {rule} b") == f"a {rule} b"
    assert squeeze(f"a {rule}= b {'-' * 1000}") == f"a {'=' * PUNCT_KEEP} b {'-' * PUNCT_KEEP}"


def test_a_long_paragraph_of_cheap_words_is_cut_by_characters_too() -> None:
    """Words of 300 characters count one token each: a window of 200 of them would be 60 KB."""
    counter = RecordingCounter("word")
    chunker = Chunker(ChunkConfig(), counter, IngestLimits(max_chunk_chars=4096))
    d = doc(" ".join(["y" * 300] * 2000))
    chunks = chunker.chunk(d)
    assert exact_slices(d, chunks) and max(len(c.text) for c in chunks) <= 4096
    assert sum(len(c.text) for c in chunks) <= 2 * len(d.text)  # overlap at most half


def test_words_of_zero_tokens_do_not_make_windows_that_advance_one_word() -> None:
    """The tokenizer drops U+FEFF: a run of them costs nothing, so the overlap stepped back
    over all of it and each window advanced by one word (quadratic). Bounded now."""

    def counter(texts: Sequence[str]) -> list[int]:
        return [0 if set(t) <= {"\ufeff"} else len(t) for t in texts]

    chunker = Chunker(ChunkConfig(), counter, IngestLimits(max_chunk_chars=2000))
    d = doc(("\ufeff " * 20_000) + "&" * 5_000)
    chunks = chunker.chunk(d)
    assert exact_slices(d, chunks) and max(len(c.text) for c in chunks) <= 2000
    assert sum(len(c.text) for c in chunks) <= 3 * len(d.text)


def test_ordinary_documents_chunk_as_before() -> None:
    """The limits bind only past them: the sample's chunks are the same with limits so wide
    that they can never bind (byte-identical output is checked on whole corpora, see the
    report in bench/results/ingest_limits.md)."""
    counter = FakeHashEncoder().count_tokens
    docs = list(load_path(Path(__file__).resolve().parents[2] / "data" / "sample"))
    wide = IngestLimits(max_chunk_chars=1_000_000, max_chunks_per_doc=100_000_000)
    for d in docs:
        assert Chunker(ChunkConfig(), counter).chunk(d) == Chunker(
            ChunkConfig(), counter, wide
        ).chunk(d)


def test_a_heading_path_is_bounded() -> None:
    """Every chunk of a section carries its heading path (embedded, indexed and stored with
    it): a heading line of 10,000 characters is cut, not repeated in each chunk."""
    counter = RecordingCounter("word")
    d = doc("# " + "head " * 2_000 + "\n\n" + "body words " * 300)
    chunks = Chunker(ChunkConfig(), counter).chunk(d)
    assert chunks and exact_slices(d, chunks)
    assert all(sum(map(len, c.heading_path)) <= MAX_HEADING_PATH_CHARS for c in chunks)


# -- chunks per document ------------------------------------------------------------------------


def test_a_document_with_too_many_chunks_is_refused_naming_the_limit() -> None:
    counter = RecordingCounter("word")
    d = doc("".join(f"# heading {i}\n\n" for i in range(200)), doc_id="headings.md")
    chunks = Chunker(ChunkConfig(), counter, IngestLimits(max_chunks_per_doc=200)).chunk(d)
    assert len(chunks) == 200
    counter.calls.clear()
    with pytest.raises(LoadError) as err:
        Chunker(ChunkConfig(), counter, IngestLimits(max_chunks_per_doc=199)).chunk(d)
    assert str(err.value) == (
        "document 'headings.md' makes at least 200 chunks; allowed: at most 199 "
        "(ingest.max_chunks_per_doc)"
    )
    assert not counter.calls  # 200 heading paths: refused before a token is counted


def test_a_document_of_one_section_with_too_many_chunks_is_refused() -> None:
    d = doc("\n\n".join(["ten words " * 5] * 300), doc_id="paragraphs.md")  # 2 a chunk: 150
    chunker = Chunker(
        ChunkConfig(max_tokens=32, overlap_tokens=0),
        RecordingCounter("word"),
        IngestLimits(max_chunks_per_doc=120),
    )
    with pytest.raises(
        LoadError, match=r"'paragraphs\.md' makes 150 chunks; allowed: at most 120 "
    ):
        chunker.chunk(d)


def test_a_big_document_is_refused_before_all_of_it_is_counted() -> None:
    """100 MB of prose is 90,000 chunks: refused once its first megabyte holds more tokens than
    max_chunks_per_doc full chunks, not after the tokenizer has read all of it."""
    counter = RecordingCounter("word")
    d = doc("\n\n".join(["ten words " * 5] * 100_000), doc_id="big.txt")
    chunker = Chunker(
        ChunkConfig(max_tokens=32, overlap_tokens=0), counter, IngestLimits(max_chunks_per_doc=10)
    )
    with pytest.raises(
        LoadError, match=r"'big\.txt' makes at least [\d,]+ chunks; allowed: at most 10 "
    ):
        chunker.chunk(d)
    assert counter.total < len(d.text) // 2


def test_a_long_run_is_refused_as_soon_as_it_passes_the_chunk_limit() -> None:
    """50 MB of ``&`` is 200,000 chunks: refused after a block of it, not after all of it."""
    counter = RecordingCounter()
    chunker = Chunker(ChunkConfig(), counter, IngestLimits(max_chunks_per_doc=10))
    with pytest.raises(LoadError, match="makes at least 11 chunks; allowed: at most 10 "):
        chunker.chunk(doc("&" * 1_000_000))
    assert counter.total < 300_000


# -- spaCy's input ------------------------------------------------------------------------------


def test_spacy_pieces_leave_ordinary_text_alone() -> None:
    text = "The PgBouncer migration (CHG-1187) broke payouts --- see https://x.example/a?b=c."
    assert list(spacy_pieces(text)) == [text]
    rule = "-" * (SPACY_MAX_PUNCT_RUN - 1)
    assert list(spacy_pieces(f"a {rule} b")) == [f"a {rule} b"]


def test_spacy_pieces_drop_punctuation_runs_and_cut_long_words() -> None:
    assert list(spacy_pieces("before " + "&" * 20_000 + " after")) == ["before   after"]
    (cut,) = spacy_pieces("x" * (3 * SPACY_MAX_WORD + 5))
    assert [len(w) for w in cut.split(" ")] == [SPACY_MAX_WORD] * 3 + [5]


def test_spacy_pieces_are_bounded_and_cut_at_blanks() -> None:
    text = " ".join(["word"] * 60_000) + " " + "z" * 250_000
    pieces = list(spacy_pieces(text, max_chars=10_000))
    assert max(map(len, pieces)) <= 10_000
    assert all(p[-1].isspace() for p in pieces[:-1])
    (whole,) = spacy_pieces(text, max_chars=len(text) * 2)
    assert "".join(pieces) == whole  # cut, nothing lost


class RecordingNlp:
    """The real spaCy pipeline, recording the length of every text it is given."""

    def __init__(self, nlp: Any) -> None:
        self.nlp = nlp
        self.max_length = nlp.max_length
        self.lengths: list[int] = []

    def pipe(self, items: Any, **kwargs: Any) -> Iterator[Any]:
        def seen() -> Iterator[Any]:
            for text, context in items:
                self.lengths.append(len(text))
                yield text, context

        return self.nlp.pipe(seen(), **kwargs)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def real_nlp() -> Any:
    return load_spacy()


def recording_extractor(nlp: Any) -> tuple[ConceptExtractor, RecordingNlp]:
    extractor = ConceptExtractor(ConceptConfig())
    recorder = RecordingNlp(nlp)
    extractor._nlp = recorder
    return extractor, recorder


def test_spacy_never_sees_more_than_its_bound_and_never_raises_e088(real_nlp: Any) -> None:
    """1.1 million characters without a blank: spaCy's max_length is 1,000,000 (E088)."""
    extractor, recorder = recording_extractor(real_nlp)
    text = "PgBouncer " + "x" * 1_100_000
    (mentions,) = extractor.extract([text])
    assert recorder.lengths and max(recorder.lengths) <= SPACY_MAX_CHARS < real_nlp.max_length
    assert sum(recorder.lengths) <= len(text) + len(text) // SPACY_MAX_WORD + 1
    assert "pgbouncer" in {m.concept.key for m in mentions}  # the first piece is still read


def test_twenty_kilobytes_of_ampersands_give_spacy_nothing_to_peel(real_nlp: Any) -> None:
    """20 KB of ``&`` took spaCy two minutes (each ``&`` peeled off the rest of the run): the
    whole chain (chunker, then extractor) now hands spaCy a few characters."""
    d = doc("&" * 20_000, title="amp")
    chunks = Chunker(ChunkConfig(), RecordingCounter("char")).chunk(d)
    extractor, recorder = recording_extractor(real_nlp)
    texts = [f"{d.title}\n{c.text}" if c.seq == 0 else c.text for c in chunks]
    extractor.extract(texts)
    assert len(recorder.lengths) == len(texts)
    assert sum(recorder.lengths) <= 10 * len(texts)


# -- the time budget ----------------------------------------------------------------------------


class FakeEnt:
    label_ = "ORG"

    def __init__(self, text: str, start: int) -> None:
        self.text = text
        self.start_char, self.end_char = start, start + len(text)


class FakeDoc(list[Any]):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.ents = [FakeEnt(m.group(), m.start()) for m in re.finditer(r"\S+", text)]
        self.ents = [e for e in self.ents if e.text.istitle()]


class SlowFakeNlp:
    """A FAKE pipeline: one entity per title-case word, each text costing one clock second."""

    max_length = 1_000_000

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.fed: list[str] = []

    def pipe(self, items: Any, **kwargs: Any) -> Iterator[tuple[FakeDoc, Any]]:
        assert kwargs.get("as_tuples")
        for text, context in items:
            self.fed.append(text)
            self.clock[0] += 1.0
            yield FakeDoc(text), context


def test_a_document_past_its_time_budget_gets_identifiers_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [0.0]
    monkeypatch.setattr("clew.ingest.concepts.time.perf_counter", lambda: clock[0])
    nlp = SlowFakeNlp(clock)
    extractor = ConceptExtractor(ConceptConfig(), IngestLimits(concept_budget_s=2.5))
    extractor._nlp = nlp
    names = ("alpha", "beta", "gamma", "delta", "eta", "zeta")
    slow = [f"Acme{n} ERR-{4000 + i}" for i, n in enumerate(names)]
    other = ["Globex ERR-5000", "Initech ERR-5001"]
    with caplog.at_level(logging.WARNING, logger="clew.ingest.concepts"):
        mentions = extractor.extract([*slow, *other], [("slow.md", 6), ("other.md", 2)])
    kinds = [{m.concept.kind for m in ms} for ms in mentions]
    assert kinds[:3] == [{"identifier", "entity"}] * 3  # 3 s > 2.5 s after the third
    assert kinds[3:6] == [{"identifier"}] * 3  # the rest: regex identifiers only
    assert kinds[6:] == [{"identifier", "entity"}] * 2  # the next document has its own budget
    assert nlp.fed == [*slow[:3], *other]  # the rest of slow.md never reached spaCy
    (record,) = caplog.records
    assert "'slow.md'" in record.getMessage() and "ingest.concept_budget_s" in record.getMessage()
    assert "3 of its 6 chunks" in record.getMessage()


def test_the_pipeline_gives_the_extractor_each_documents_chunks() -> None:
    seen: list[Any] = []

    class Recording(ConceptExtractor):
        def extract(
            self, texts: Sequence[str], documents: Sequence[tuple[str, int]] | None = None
        ) -> list[list[Any]]:
            seen.append(documents)
            return super().extract(texts, documents)

    encoder = FakeHashEncoder()
    ctx = IngestContext(
        chunker=Chunker(ChunkConfig(max_tokens=32, overlap_tokens=0), encoder.count_tokens),
        encoder=encoder,
        extractor=Recording(ConceptConfig(spacy=False)),
        fingerprint="t",
    )
    docs = [doc("one two three", "a"), doc("\n\n".join(["word " * 20] * 3), "b")]
    records = build_records(docs, ctx)
    assert seen == [[("a", len(records[0].chunks)), ("b", len(records[1].chunks))]]


# -- symlinks -----------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ with a file, a subdirectory and a dot-directory; outside/ holds a secret."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / ".private").mkdir()
    (root / "a.md").write_text("# A\n\nalpha")
    (root / "sub" / "b.md").write_text("# B\n\nbeta")
    (root / ".private" / "c.md").write_text("# C\n\ngamma")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd.txt").write_text("root:x:0:0:root:/root:/bin/bash")
    return root


def ids(root: Path, **kwargs: Any) -> list[str]:
    return [d.doc_id for d in load_path(root, **kwargs)]


def test_a_symlink_out_of_the_root_is_skipped_with_a_warning(
    tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tree / "passwd.txt").symlink_to(tree.parent / "outside" / "passwd.txt")
    (tree / "out").symlink_to(tree.parent / "outside", target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="clew.ingest.load"):
        assert ids(tree) == ["a.md", "sub/b.md"]
    skipped = sorted(r.getMessage() for r in caplog.records)
    assert len(skipped) == 2 and all("outside" in m and "--follow-symlinks" in m for m in skipped)
    assert str(tree / "passwd.txt") in skipped[1]


def test_a_symlink_out_of_the_root_is_followed_when_allowed(tree: Path) -> None:
    (tree / "passwd.txt").symlink_to(tree.parent / "outside" / "passwd.txt")
    (tree / "out").symlink_to(tree.parent / "outside", target_is_directory=True)
    docs = list(load_path(tree, follow_symlinks=True))
    # one real file, listed once: under the first link that reaches it ("out" < "passwd.txt")
    assert [d.doc_id for d in docs] == ["a.md", "out/passwd.txt", "sub/b.md"]
    assert "root:x:0:0" in docs[1].text


def test_a_symlinked_file_named_directly_is_the_callers_choice(tree: Path) -> None:
    link = tree / "passwd.txt"
    link.symlink_to(tree.parent / "outside" / "passwd.txt")
    (d,) = load_path(link)
    assert d.doc_id == "passwd.txt" and "root:x:0:0" in d.text


def test_symlinks_inside_the_root_work_and_each_real_file_is_loaded_once(tree: Path) -> None:
    (tree / "alias.md").symlink_to("a.md")  # a second name for a file the walk reaches
    (tree / "zz").symlink_to("sub", target_is_directory=True)  # a second name for sub/
    (tree / "pub").symlink_to(".private", target_is_directory=True)  # only reached by the link
    assert ids(tree) == ["a.md", "pub/c.md", "sub/b.md"]


@pytest.mark.parametrize("follow", [False, True])
def test_a_symlink_loop_ends_the_walk_with_a_warning(
    tree: Path, caplog: pytest.LogCaptureFixture, follow: bool
) -> None:
    (tree / "sub" / "up").symlink_to("..", target_is_directory=True)  # back to the root
    (tree / "sub" / "self").symlink_to(".", target_is_directory=True)
    (tree / "pub").symlink_to(".private", target_is_directory=True)  # reached by a link only,
    (tree / ".private" / "again").symlink_to(".", target_is_directory=True)  # then a loop
    (tree / "x.md").symlink_to("y.md")
    (tree / "y.md").symlink_to("x.md")  # links that lead to each other
    outside = tree.parent / "outside"
    (outside / "back").symlink_to(tree, target_is_directory=True)
    (tree / "out").symlink_to(outside, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="clew.ingest.load"):
        files = directory_files(tree, follow_symlinks=follow)
    names = [f.relative_to(tree).as_posix() for f in files]
    expected = ["a.md", "out/passwd.txt", "pub/c.md", "sub/b.md"]
    assert names == (expected if follow else [n for n in expected if not n.startswith("out/")])
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "a symlink loop" in messages and str(tree / "sub" / "up") in messages
    assert str(tree / "x.md") in messages and str(tree / "y.md") in messages
    assert str(tree / "pub" / "again") in messages
    assert "skipping directory" not in messages  # not walked until the system says ELOOP


def test_a_broken_symlink_is_skipped(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tree / "gone.md").symlink_to("nowhere.md")
    with caplog.at_level(logging.WARNING, logger="clew.ingest.load"):
        assert ids(tree) == ["a.md", "sub/b.md"]
    assert "broken symlink" in caplog.records[0].getMessage()


# -- deeply nested JSON -------------------------------------------------------------------------


def test_a_deep_corpus_line_is_a_one_line_error(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "1", "text": "ok"}) + "\n" + DEEP + "\n")
    with pytest.raises(LoadError) as err:
        list(load_path(corpus))
    assert str(err.value) == (
        f"{str(corpus)!r} line 2: JSON is nested too deeply; allowed: at most 32 levels of metadata"
    )
    first = tmp_path / "first.jsonl"  # the CLI asks is_transcript first: no RecursionError
    first.write_text(DEEP + "\n")
    assert not is_transcript(first)
    with pytest.raises(LoadError, match="line 1: JSON is nested too deeply"):
        list(load_path(first))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"speaker": "ana", "text": "hi", "x": ' + DEEP + "}", "chat.jsonl:2: JSON is nested"),
        (
            '{"speaker": "ana", "text": "hi", "x": ' + "[" * 500 + "]" * 500 + "}",
            "chat.jsonl:2: JSON is nested deeper than 33 levels",
        ),
        ('{"speaker": "ana", "text": "hi", "n": ' + "9" * 5000 + "}", "chat.jsonl:2: not JSON"),
    ],
)
def test_a_deep_transcript_line_is_a_one_line_error(
    tmp_path: Path, line: str, message: str
) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"speaker": "ana", "text": "hello"}) + "\n" + line + "\n")
    assert is_transcript(chat)
    with pytest.raises(LoadError) as err:
        load_transcript(chat)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_deep_front_matter_is_a_one_line_error(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("---\nx: " + "[" * 10_000 + "\n---\n# Page\n\nbody\n")
    with pytest.raises(LoadError, match="front matter is nested too deeply"):
        list(load_path(page))


# -- reading at most the limit ------------------------------------------------------------------


def test_the_loader_reads_at_most_the_limit_whatever_the_size_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose size the system does not report (0 under /proc) is still cut off."""
    path = tmp_path / "grows.txt"
    path.write_text("x" * 4096)
    real_fstat = os.fstat

    def size_zero(fd: int) -> os.stat_result:
        st = list(real_fstat(fd))
        st[6] = 0  # st_size
        return os.stat_result(st)

    monkeypatch.setattr("clew.ingest.load.os.fstat", size_zero)
    with pytest.raises(LoadError, match="more than 2,048 bytes; allowed: at most 2,048"):
        list(load_path(path, limits=IngestLimits(max_file_bytes=2048)))
