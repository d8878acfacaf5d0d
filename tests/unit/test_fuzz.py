"""Fuzzing the untrusted inputs: files, analyzer text, filters and HTTP bodies.

The contract for every input: a clear clew error (a ``ClewError`` subclass whose message names
the problem) or a 4xx, never another exception type, a ``RecursionError``, a hang or a 5xx, with
memory a small multiple of the input. Hangs are caught with a SIGALRM deadline: it interrupts
Python code and the regex engine alike, so a catastrophic pattern fails its test instead of
stalling the run.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import string
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clew import Engine
from clew.config import ChunkConfig
from clew.errors import ClewError, FilterError, LoadError
from clew.filters import (
    MAX_CONDITIONS,
    MAX_DEPTH,
    MetadataColumns,
    Node,
    parse_filter,
    to_json,
)
from clew.ingest.analyze import analyze, concept_key, query_terms, words
from clew.ingest.chunk import Chunker
from clew.ingest.concepts import find_identifiers
from clew.ingest.load import MAX_TITLE_CHARS, SUPPORTED_SUFFIXES, load_path
from clew.serve.api import create_app
from clew.serve.auth import KeyStore
from clew.serve.settings import ServeSettings
from clew.testing.fakes import FakeHashEncoder, fake_engine
from clew.types import Document

T = TypeVar("T")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(FUZZ, max_examples=40)


class Hang(BaseException):
    """Raised by the deadline; a BaseException so no ``except Exception`` swallows it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail the test when the block runs longer than ``seconds`` (not nestable)."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except Hang as exc:
        pytest.fail(f"hang: {exc}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def clean(fn: Callable[[], T], seconds: float = 10.0) -> T | ClewError:
    """Run ``fn``: its value, or the ClewError it raised (with a message); anything else fails."""
    with deadline(seconds):
        try:
            return fn()
        except ClewError as exc:
            assert str(exc).strip(), f"{type(exc).__name__} without a message"
            return exc


def sound_documents(docs: list[Document]) -> None:
    """What the rest of the pipeline relies on: UTF-8-encodable text, plain JSON metadata."""
    for d in docs:
        for text in (d.doc_id, d.title, d.text, d.source, *d.links):
            assert isinstance(text, str)
            text.encode("utf-8")  # no unpaired surrogate
        assert d.doc_id.strip()
        assert len(d.title) <= MAX_TITLE_CHARS
        json.dumps(d.metadata, allow_nan=False, ensure_ascii=False).encode("utf-8")


def load(path: Path, seconds: float = 10.0) -> list[Document] | ClewError:
    out = clean(lambda: list(load_path(path)), seconds)
    if not isinstance(out, ClewError):
        sound_documents(out)
    return out


# -- loaders ------------------------------------------------------------------------------------

SUFFIXES = (*SUPPORTED_SUFFIXES, ".MD", ".pdf", ".bin", "")
MARKUP = [
    "<",
    ">",
    "</",
    "<a href='x.md'>",
    '<a href="',
    "<!--",
    "-->",
    "<![CDATA[",
    "<?",
    "<script>",
    "</script>",
    "<title>",
    "<h2>",
    "&amp;",
    "&#",
    "&#x1F600;",
    "[",
    "]",
    "](",
    ")",
    "![x](y.png)",
    "[l](doc.md)",
    "# ",
    "#",
    "###### ",
    "\n",
    "\n\n",
    "\r\n",
    "\r",
    " ",
    "\t",
    "---\n",
    "title: x\n",
    "&",
    "*",
    "{",
    "}",
    '"',
    ":",
    ",",
    "[[",
    '{"_id": "1", "text": "t"}',
    '"metadata": {',
    "\u2028",
    "\u0085",
    "\x0c",
    "\x00",
    "\ufeff",
    "ERR-4012",
    "RetryPolicy.MaxAttempts",
    "payments-gateway",
    "ünïcödé",
    "\u202e",
]
markup = st.lists(st.sampled_from(MARKUP) | st.text(max_size=12), max_size=60).map("".join)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
jsonl_objects = st.fixed_dictionaries(
    {},
    optional={
        "_id": st.text(max_size=10) | st.integers() | st.booleans() | st.none(),
        "title": st.text(max_size=20) | st.integers() | st.none(),
        "text": st.text(max_size=40) | st.lists(st.text(max_size=3), max_size=2),
        "metadata": json_values,
    },
)
jsonl_lines = st.lists(
    jsonl_objects.map(json.dumps)
    | jsonl_objects.map(lambda o: json.dumps(o, ensure_ascii=False))
    | json_values.map(json.dumps)
    | markup,
    max_size=8,
).map("\n".join)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_bytes(data)
    return path


@FUZZ
@given(data=st.binary(max_size=3_000), suffix=st.sampled_from(SUFFIXES))
def test_loaders_on_arbitrary_bytes(scratch: Path, data: bytes, suffix: str) -> None:
    out = load(write(scratch, f"bytes{suffix}", data))
    if suffix.lower() not in SUPPORTED_SUFFIXES:
        assert isinstance(out, LoadError) and "unsupported file type" in str(out)


@FUZZ
@given(text=markup, suffix=st.sampled_from((".md", ".html", ".txt", ".jsonl")))
def test_loaders_on_markup_soup(scratch: Path, text: str, suffix: str) -> None:
    out = load(write(scratch, f"soup{suffix}", text))
    if "\x00" in text:
        assert isinstance(out, LoadError) and "binary file" in str(out)


@FUZZ
@given(text=jsonl_lines)
def test_jsonl_garbage_lines(scratch: Path, text: str) -> None:
    out = load(write(scratch, "corpus.jsonl", text))
    if isinstance(out, LoadError):
        assert "line " in str(out) or "binary" in str(out)


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


LAUGHS = (
    "---\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))
    + "---\nbody\n"
)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        # catastrophic backtracking in the heading patterns: minutes for 5 000 blanks before
        ("heading.md", "# a" + " " * 50_000 + "b\n\ntext", None),
        ("heading-tabs.md", "## x" + " \t" * 20_000 + "#", None),
        ("heading-blank.md", "#" + " " * 50_000, None),
        # quadratic link pattern: every '[' or '](' scanned to the end of the file
        ("brackets.md", "[" * 300_000, None),
        ("open-links.md", "[](" * 100_000, None),
        # html.parser (Python 3.11) is quadratic on unterminated tags and comments
        ("tags.html", "<a" * 200_000, None),
        ("text-lt.html", "a<" * 200_000, None),
        ("comments.html", "<!--" * 100_000, None),
        ("marked.html", "<![" * 100_000, None),
        ("unclosed-title.html", "<title>" + "x " * 100_000, None),
        ("spaces.txt", " " * 1_000_000 + "x", None),
        ("blank-lines.jsonl", '{"_id": "1", "text": "t"}' + "\n" * 2_000_000, None),
        # JSON and YAML that Python parses into trouble
        (
            "deep.jsonl",
            '{"_id": "1", "text": "t", "metadata": {"x": ' + nested(50_000) + "}}",
            "nested",
        ),
        (
            "deep-ok-json.jsonl",
            '{"_id": "1", "text": "t", "metadata": {"x": ' + nested(500) + "}}",
            "deeper than 32",
        ),
        (
            "digits.jsonl",
            '{"_id": "1", "text": "t", "metadata": {"x": ' + "9" * 5000 + "}}",
            "invalid JSON",
        ),
        ("nan.jsonl", '{"_id": "1", "text": "t", "metadata": {"x": NaN}}', "finite numbers"),
        ("infinity.jsonl", '{"_id": "1", "text": "t", "metadata": {"x": [-Infinity]}}', "finite"),
        ("surrogate.jsonl", '{"_id": "1", "text": "a \\ud800 b"}', "unpaired surrogate"),
        (
            "surrogate-meta.jsonl",
            '{"_id": "1", "text": "t", "metadata": {"\\udfff": 1}}',
            "surrogate",
        ),
        ("bool-id.jsonl", '{"_id": true, "text": "t"}', "_id"),
        (
            "long-title.jsonl",
            json.dumps({"_id": "1", "title": "t" * 5000, "text": "x"}),
            "title has 5000",
        ),
        ("deep-front.md", "---\nx: " + nested(20_000) + "\n---\nbody", "nested too deeply"),
        ("laughs.md", LAUGHS, "more than 100000 values"),
        ("set.md", "---\ntags: !!set {a, b}\n---\nbody", "set value is not allowed"),
        ("binary.md", "---\nblob: !!binary aGVsbG8=\n---\nbody", "bytes value is not allowed"),
        ("nan.md", "---\nscore: .nan\n---\nbody", "finite numbers"),
        ("digits.md", "---\nx: " + "9" * 5000 + "\n---\nbody", "malformed front matter"),
        ("list-front.md", "---\n- a\n- b\n---\nbody", "must be a mapping"),
        ("long-title.md", "---\ntitle: " + "t" * 2000 + "\n---\nbody", "title has 2000"),
        ("latin1.txt", "café".encode("latin-1"), "not valid UTF-8"),
        ("nul.html", b"<p>a\x00b</p>", "binary file"),
        ("empty.md", b"", None),
        ("empty.txt", b"", None),
        ("empty.html", b"", None),
        ("empty.jsonl", b"", None),
        ("bom-only.md", "\ufeff".encode(), None),
        ("doc.pdf", b"%PDF-1.7", "not a readable PDF (corrupt?)"),
        ("doc.docx", b"PK\x03\x04junk", "not a readable DOCX file (corrupt?)"),
        ("doc.pptx", b"not a zip", "not a readable PPTX file (corrupt?)"),
        ("doc.exe", b"MZ", "unsupported file type '.exe'"),
        ("noext", b"text", "unsupported file type '(none)'"),
    ],
)
def test_hostile_files(scratch: Path, name: str, data: str | bytes, message: str | None) -> None:
    out = load(write(scratch, name, data), seconds=20)
    if message is None:
        assert not isinstance(out, ClewError), out
    else:
        assert isinstance(out, LoadError), out
        assert message in str(out)
        assert name in str(out)  # the message names the file


def test_jsonl_splits_lines_at_newlines_only(scratch: Path) -> None:
    """U+2028, U+0085 and form feeds are legal raw inside JSON strings; splitlines() split
    there and called a valid corpus invalid JSON."""
    rows = [{"_id": str(i), "text": f"a{sep}b"} for i, sep in enumerate("\u2028\u2029\u0085")]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n\n  \n"
    docs = load(write(scratch, "seps.jsonl", text))
    assert not isinstance(docs, ClewError), docs
    assert [d.text for d in docs] == [r["text"] for r in rows]
    assert [d.source for d in docs] == ["seps.jsonl:1", "seps.jsonl:2", "seps.jsonl:3"]


def test_long_heading_is_not_a_title(scratch: Path) -> None:
    docs = load(write(scratch, "wide.md", "# " + "w" * (MAX_TITLE_CHARS + 1) + "\n\nbody"))
    assert not isinstance(docs, ClewError)
    assert docs[0].title == "wide"


def test_a_fifo_is_refused_not_read_forever(scratch: Path) -> None:
    fifo = scratch / "pipe.md"
    if not fifo.exists():
        os.mkfifo(fifo)
    out = load(fifo, seconds=5)
    assert isinstance(out, LoadError) and "not a regular file" in str(out)


def test_html_text_links_and_title(scratch: Path) -> None:
    html = (
        "<html><head><title>T &amp; U</title><style>p{}</style></head><body>"
        "<h1>Head <b>bold</b></h1><p>a &lt;1&gt; x < y</p><a href='other.html#s'>l</a>"
        '<a href="https://ext">e</a><A HREF=up/Page.htm>p</A><!-- <p>hidden</p> -->'
        "<script>if (a<b) { s = '</div>' }</script>after</body></html>"
    )
    docs = load(write(scratch, "page.html", html))
    assert not isinstance(docs, ClewError)
    (doc,) = docs
    assert doc.title == "T & U"
    assert doc.text.startswith("# Head bold\n\na <1> x < y")
    assert "hidden" not in doc.text and "</div>" not in doc.text and doc.text.endswith("after")
    assert doc.links == ("other.html#s", "up/Page.htm")


FIFTY_MB = 50 * 1024 * 1024


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("big.txt", "lorem ipsum ERR-4012 dolor sit amet\n"),
        ("big.md", "## Part\n\nlorem ipsum [ERR-4012](errors.md) dolor sit amet.\n\n"),
        ("big.jsonl", json.dumps({"_id": "x", "text": "lorem ipsum " * 80_000}) + "\n"),
    ],
)
def test_fifty_megabytes_load_in_bounded_memory(scratch: Path, name: str, unit: str) -> None:
    path = scratch / name
    with path.open("w", encoding="utf-8") as f:
        for _ in range(FIFTY_MB // len(unit)):
            f.write(unit)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        with deadline(120):
            count = 0
            for doc in load_path(path):  # one document at a time, as the pipeline reads them
                count += 1
                del doc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        path.unlink()
    assert count >= 1
    assert peak < 3 * size, f"peak {peak / size:.1f}x the file size"


def test_chunker_on_hostile_headings() -> None:
    """The chunker shares the heading pattern: blanks after a heading took minutes."""
    text = "# a" + " " * 50_000 + "b\n\n## " + "#" * 20_000 + "\n\nbody text"
    doc = Document(doc_id="d", title="T", text=text, source="d")
    chunker = Chunker(ChunkConfig(max_tokens=64, overlap_tokens=8), FakeHashEncoder().count_tokens)
    with deadline(10):
        chunks = chunker.chunk(doc)
    assert chunks and all(text[c.start : c.end] == c.text for c in chunks)
    # the heading path is cut to MAX_HEADING_PATH_CHARS (2,000): "a" and blanks, then stripped
    assert chunks[-1].heading_path == ("a",)


@FUZZ
@given(
    text=st.text(alphabet=" \n\tabcdef.A#", max_size=300),
    budget=st.integers(min_value=1, max_value=20),
    overlap=st.integers(min_value=0, max_value=15),
    cost=st.sampled_from(["one", "length", "zero-some"]),
)
def test_word_windows_read_in_blocks(text: str, budget: int, overlap: int, cost: str) -> None:
    """Long sentences are split into word windows reading words a block at a time (memory for
    a block, not for every word of a 50 MB paragraph): the windows do not depend on the block
    size, cover every word in order, and stay within budget unless one word is over it."""
    import clew.ingest.chunk as chunk_module
    from clew.ingest.chunk import _Span

    per_word = {
        "one": lambda w: 1,
        "length": lambda w: 1 + len(w) // 3,
        "zero-some": lambda w: len(w) % 3,
    }[cost]
    chunker = Chunker(
        ChunkConfig(max_tokens=64, overlap_tokens=overlap), lambda ts: [per_word(t) for t in ts]
    )
    text = "pre-amble " + text  # the sentence starts inside the document
    span = _Span(10, len(text), ())
    runs = []
    for block in (1, 3, 4096):
        saved, chunk_module._WORD_BLOCK = chunk_module._WORD_BLOCK, block
        try:
            runs.append([(w.start, w.end) for w in chunker._word_windows(text, span, budget)])
        finally:
            chunk_module._WORD_BLOCK = saved
    assert runs[0] == runs[1] == runs[2]
    words = [(m.start() + 10, m.end() + 10) for m in re.finditer(r"\S+", text[10:])]
    covered = {w for a, b in runs[0] for w in words if a <= w[0] and w[1] <= b}
    assert covered == set(words)
    starts = [a for a, _ in runs[0]]
    assert starts == sorted(set(starts))
    for a, b in runs[0]:
        inside = [w for w in words if a <= w[0] and w[1] <= b]
        assert (a, b) == (inside[0][0], inside[-1][1])
        assert len(inside) == 1 or sum(per_word(text[x:y]) for x, y in inside) <= budget


def test_a_bad_file_in_a_directory_is_skipped_and_named(tmp_path: Path) -> None:
    """A directory ingest leaves out (and lists, with the reason) a file that cannot be loaded
    and ingests the rest; what an earlier ingest wrote stays intact. Named directly, the same
    file stops the ingest with nothing written."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Alpha\n\nERR-4012 alpha notes")
    (corpus / "b.txt").write_text("Beta\n\nERR-4012 beta notes")
    with _engine(tmp_path / "idx") as engine:
        first = engine.ingest([corpus])
        assert set(first.added) == {"a.md", "b.txt"}
        (corpus / "c.md").write_text("# Gamma\n\nERR-4012 gamma notes")
        (corpus / "d.jsonl").write_text('{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": ')
        report = engine.ingest([corpus])
        assert report.added == ("c.md",) and set(report.unchanged) == {"a.md", "b.txt"}
        (skip,) = report.skipped
        assert skip.path == "d.jsonl" and skip.reason.startswith("line 2: invalid JSON")
        assert engine.document("d1") is None, "none of a bad file's documents"
        release = engine.store.release()
        with pytest.raises(LoadError, match=r"d\.jsonl' line 2: invalid JSON"):
            engine.ingest([corpus / "d.jsonl"])
        assert engine.store.release() == release
        hits = engine.search("ERR-4012", k=10).hits
        assert {h.doc_id for h in hits} == {"a.md", "b.txt", "c.md"}
        (corpus / "d.jsonl").write_text('{"_id": "d1", "text": "ok ERR-4012"}\n')
        again = engine.ingest([corpus])
        assert again.added == ("d1",) and again.skipped == ()


def test_empty_and_title_only_files_ingest(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("e.md", "e.txt", "e.html", "e.jsonl"):
        (corpus / name).write_text("")
    (corpus / "t.html").write_text("<title>Only a title</title>")
    with _engine(tmp_path / "idx") as engine:
        report = engine.ingest([corpus])
        assert set(report.added) == {"e.md", "e.txt", "e.html", "t.html"}
        assert engine.search("title", k=5).hits[0].doc_id == "t.html"


@contextmanager
def _engine(path: Path) -> Iterator[Engine]:
    engine = fake_engine(path)
    try:
        yield engine
    finally:
        engine.close()


# -- analyzer -----------------------------------------------------------------------------------

any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300) | st.lists(
    st.sampled_from([*MARKUP, "_", "-", ".", "/", ":", "A", "a", "1", "ß", "İ"])
).map("".join)


@FUZZ
@given(text=any_text)
def test_analyzer_on_arbitrary_text(text: str) -> None:
    with deadline(5):
        tokens = analyze(text)
        terms = query_terms(text, part_weight=0.5)
        key = concept_key(text)
        ident = concept_key(text, identifier=True)
        found = find_identifiers(text)
        plain = words(text)
    assert all(isinstance(t, str) and t for t in tokens)
    assert tokens == analyze(text)  # deterministic
    assert set(terms) == set(tokens)
    assert all(w > 0 for w in terms.values())
    assert isinstance(key, str) and isinstance(ident, str)
    assert all(isinstance(s, str) and s for s in found)
    assert all(isinstance(w, str) for w in plain)
    for tok in tokens:
        tok.encode("utf-8")


@pytest.mark.parametrize(
    "text",
    [
        "a" * 1_000_000,
        "aB" * 500_000,
        "a1" * 500_000,
        "a-" * 500_000,
        "_a" * 500_000,
        "Ab.cD" * 200_000,
        "x " * 500_000,
        "\ufdfa" * 100_000,  # NFKC expands it eighteenfold
        "a" + "\u0301" * 1_000_000,
        "".join(map(chr, range(32))) * 30_000,
    ],
    ids=[
        "word",
        "camel",
        "digits",
        "kebab",
        "snake",
        "dotted",
        "many",
        "nfkc",
        "combining",
        "ctrl",
    ],
)
def test_analyzer_on_huge_tokens(text: str) -> None:
    with deadline(10):
        analyze(text)
        query_terms(text)
        concept_key(text)
        find_identifiers(text)


# -- filter parser ------------------------------------------------------------------------------

FIELDS = ["tenant", "audience", "level", "created_at", "and", "or", "not", "", " ", "gt"]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.sampled_from([2**1100, -(2**1100), 0.5, 1.0, -0.0])
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["2026-01-01", "2026-02-12T08:00:00Z", "2026-13-45", "NaN"])
)
filter_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from([*FIELDS, "lt", "gte", "lte", "eq"]) | st.text(max_size=6),
            inner,
            max_size=4,
        )
    ),
    max_leaves=25,
)


def round_trip(node: Node | None) -> None:
    if node is not None:
        assert parse_filter(to_json(node)) == node
        assert parse_filter(json.dumps(to_json(node))) == node


@FUZZ
@given(spec=filter_like)
def test_filter_parser_on_arbitrary_json(spec: Any) -> None:
    parsed = clean(lambda: parse_filter(spec), 5)
    if isinstance(parsed, ClewError):
        assert isinstance(parsed, FilterError)
        return
    round_trip(parsed)
    if not isinstance(spec, str):  # a string is already JSON text
        try:
            text = json.dumps(spec, allow_nan=False)
        except ValueError:
            return
        assert parse_filter(text) == parsed


metadata_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=6,
)


@FUZZ
@given(
    spec=filter_like,
    rows=st.lists(
        st.dictionaries(st.sampled_from(FIELDS[:4]), metadata_values, max_size=4), max_size=5
    ),
)
def test_filter_masks_over_arbitrary_metadata(spec: Any, rows: list[dict[str, Any]]) -> None:
    """Any metadata (NaN, infinities, integers beyond float range, nesting) and any filter:
    building columns and evaluating never raises anything but a FilterError."""
    cols = clean(lambda: MetadataColumns.build(len(rows), [([i], r) for i, r in enumerate(rows)]))
    assert isinstance(cols, MetadataColumns)
    node = clean(lambda: parse_filter(spec))
    if node is None or isinstance(node, ClewError):
        return
    for strict in (False, True):
        mask = clean(lambda: cols.mask(node, strict=strict))  # noqa: B023
        if isinstance(mask, ClewError):
            assert strict and "appear in no document" in str(mask)
        else:
            assert mask.dtype == np.bool_ and mask.shape == (len(rows),)


def deep(depth: int, key: str = "not") -> dict[str, Any]:
    spec: dict[str, Any] = {"tenant": "a"}
    for _ in range(depth):
        spec = {key: spec} if key == "not" else {key: [spec]}
    return spec


def deep_text(depth: int, key: str = "not") -> str:
    """The JSON text of ``deep`` (json.dumps itself recurses too deep to write it)."""
    start, end = (f'{{"{key}": ', "}") if key == "not" else (f'{{"{key}": [', "]}")
    return start * depth + '{"tenant": "a"}' + end * depth


@pytest.mark.parametrize("key", ["not", "and", "or"])
def test_filter_depth_ten_thousand(key: str) -> None:
    assert json.loads(deep_text(3, key)) == deep(3, key)
    for spec in (deep(10_000, key), deep_text(10_000, key), deep_text(900, key)):
        with deadline(5), pytest.raises(FilterError, match=f"nested .*{MAX_DEPTH}"):
            parse_filter(spec)
    assert parse_filter(deep(MAX_DEPTH - 1, key)) is not None
    text = '{"not": ' * 100_000 + "{}" + "}" * 100_000  # too deep for Python's json itself
    with deadline(5), pytest.raises(FilterError, match="nested too deeply"):
        parse_filter(text)


def test_filter_with_a_hundred_thousand_keys() -> None:
    wide = {f"field{i}": i for i in range(100_000)}
    with deadline(5), pytest.raises(FilterError, match=f"more than {MAX_CONDITIONS} conditions"):
        parse_filter(wide)
    with deadline(5), pytest.raises(FilterError, match=f"allowed: at most {MAX_CONDITIONS}"):
        parse_filter({"tenant": list(range(100_000))})
    with deadline(5), pytest.raises(FilterError, match=f"more than {MAX_CONDITIONS} conditions"):
        parse_filter({"or": [{"tenant": str(i)} for i in range(100_000)]})
    ok = {f"field{i}": i for i in range(100)}
    cols = MetadataColumns.build(2, [([0], ok), ([1], {"field0": 0})])
    node = parse_filter(ok)
    assert node is not None and cols.mask(node).tolist() == [True, False]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"level": math.nan}, "numbers must be finite"),
        ({"level": [1, math.inf]}, "numbers must be finite"),
        ({"level": {"gt": 10**400}}, "is not a number or ISO 8601 time"),
        ({"level": {"gt": -math.inf}}, "is not a number or ISO 8601 time"),
        ('{"level": ' + "9" * 5000 + "}", "not valid JSON"),
        ('{"level": NaN}', "numbers must be finite"),
        (b'{"level": [', "not valid JSON"),
        ({"level": {"gt": {"lt": 1}}}, "is not a number"),
        ({"level": {"between": [1, 2], "gt": 1}}, "unknown range operator(s) ['between']"),
        ({"x" * 10_000: {"nope": 1}}, "unknown range operator"),
        ([{"tenant": "a"}], "must be a JSON object, got list"),
        ({"and": [{"tenant": "a"}, 3]}, "filter.and[1]: expected an object, got 3"),
    ],
)
def test_filter_values_that_could_not_be_served(spec: Any, message: str) -> None:
    with deadline(5), pytest.raises(FilterError) as err:
        parse_filter(spec)
    assert message in str(err.value)
    assert len(str(err.value)) < 1_000  # bounded, even for a 10 000-character field name


def test_integers_beyond_float_range_filter_like_any_value() -> None:
    """A document with a 400-digit integer made every filtered search raise OverflowError."""
    huge = 10**400
    cols = MetadataColumns.build(
        3, [([0], {"level": huge}), ([1], {"level": 3}), ([2], {"level": [huge, "x"]})]
    )
    for spec, expected in [
        ({"level": huge}, [True, False, True]),
        ({"level": 3}, [False, True, False]),
        ({"level": {"gte": 1}}, [False, True, False]),
        ({"not": {"level": huge}}, [False, True, False]),
    ]:
        node = parse_filter(spec)
        assert node is not None
        assert cols.mask(node).tolist() == expected, spec


# -- API bodies ---------------------------------------------------------------------------------


class Client:
    def __init__(self, app: Any, key: str) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://clew.test",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )

    def post(self, url: str, content: bytes, content_type: str = "application/json") -> Any:
        return self.loop.run_until_complete(
            self.http.post(url, content=content, headers={"content-type": content_type})
        )

    def get(self, url: str) -> Any:
        return self.loop.run_until_complete(self.http.get(url))

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()
        self.app.state.clew.close()


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        engine = fake_engine(root / "idx")
        engine.ingest(
            [
                Document("a", "Alpha", "ERR-4012 retries in payments-gateway", "t", {"level": 1}),
                Document("b", "Beta", "RetryPolicy.MaxAttempts for ledger", "t", {"tenant": "b"}),
            ]
        )
        key, _ = KeyStore.add(root / "keys.yaml", "ops", admin=True)
        settings_ = ServeSettings(
            index=root / "idx", keys=root / "keys.yaml", max_body_bytes=100_000
        )
        c = Client(create_app(settings_, engine), key)
        yield c
        c.close()


def check_response(r: Any, body: bytes) -> None:
    assert r.status_code < 500, f"{r.status_code} for {body[:200]!r}: {r.text[:500]}"
    if r.status_code >= 400:
        detail = r.json()["detail"]
        assert detail, r.text
        text = json.dumps(detail)
        assert len(text) < 20_000  # the body is not echoed back


ENDPOINTS = ("/search", "/ask", "/documents")


@FEW
@given(body=st.binary(max_size=500), url=st.sampled_from(ENDPOINTS))
def test_api_raw_bytes(client: Client, body: bytes, url: str) -> None:
    with deadline(30):
        r = client.post(url, body)
    check_response(r, body)
    assert r.status_code in (400, 422) or body.strip().startswith((b"{", b"["))


search_like = st.fixed_dictionaries(
    {},
    optional={
        "query": st.text(max_size=30) | json_values,
        "question": st.text(max_size=30) | json_values,
        "k": st.integers(min_value=-5, max_value=2_000) | json_values,
        "filter": filter_like,
        "preset": st.sampled_from(["default", "graph", "nope"]) | json_values,
        "expand": st.booleans() | json_values,
        "rerank": st.sampled_from(["none", "features", "bogus"]),
        "mode": st.sampled_from(["extractive", "generative", "x"]),
        "extra": json_values,
    },
)


@FEW
@given(body=search_like | json_values, url=st.sampled_from(("/search", "/ask")))
def test_api_search_and_ask_bodies(client: Client, body: Any, url: str) -> None:
    raw = json.dumps(body).encode()
    with deadline(30):
        r = client.post(url, raw)
    check_response(r, raw)


documents_like = st.fixed_dictionaries(
    {
        "documents": st.lists(
            st.fixed_dictionaries(
                {"id": st.text(string.ascii_letters + "-./#", min_size=1, max_size=8)},
                optional={
                    "text": st.text(max_size=60) | json_values,
                    "title": st.text(max_size=10) | st.none(),
                    "metadata": st.dictionaries(st.text(max_size=5), metadata_values, max_size=3),
                    "links": st.lists(st.text(max_size=8), max_size=3),
                },
            ),
            max_size=3,
        )
    }
)


@FEW
@given(body=documents_like | json_values)
def test_api_documents_bodies(client: Client, body: Any) -> None:
    try:
        raw = json.dumps(body).encode()
    except ValueError:
        return
    with deadline(30):
        r = client.post("/documents?wait=true", raw)
    check_response(r, raw)
    if r.status_code == 200:  # the job ran: each document landed or failed with a clew message
        job = r.json()
        assert job["state"] in ("done", "failed"), job
        for d in job["documents"]:
            assert not (d["error"] or "").startswith("internal error"), d


def nested_json(depth: int) -> bytes:
    return (
        b'{"query": "x", "filter": ' + b'{"not": ' * depth + b'{"level": 1}' + b"}" * depth + b"}"
    )


@pytest.mark.parametrize(
    ("url", "body", "status", "message"),
    [
        ("/search", nested_json(20), 422, "nested deeper than 16"),
        ("/search", nested_json(5_000), 400, "parsing the body"),
        ("/search", b"[" * 50_000 + b"]" * 50_000, 400, "parsing the body"),
        ("/search", b'{"query": "x", "filter": {"level": NaN}}', 422, "finite numbers"),
        ("/search", b'{"query": "x", "filter": {"level": ' + b"9" * 400 + b"}}", 200, None),
        ("/search", b'{"query": "x", "filter": {"level": {"gt": 1e999}}}', 422, "finite"),
        ("/search", b'{"query": "x", "filter": {"level": "\\ud800"}}', 422, "unpaired surrogate"),
        ("/search", b'{"query": "\\ud800"}', 422, "valid string"),
        ("/search", b'{"query": "x", "k": true}', 422, "valid integer"),
        ("/search", b'{"query": "x", "k": 1e400}', 422, "k"),
        ("/search", b'{"query": "x", "filter": {"level": ' + b"9" * 5000 + b"}}", 400, "parsing"),
        ("/search", b'{"query": "x", "filter": {"nope": 1}}', 422, "appear in no document"),
        ("/search", b'{"query": "' + b"x" * 150_000 + b'"}', 413, "max_body_bytes"),
        ("/ask", b'{"question": "   "}', 422, "query is empty"),
        ("/ask", b"\xff\xfe", 422, "JSON decode error"),
        ("/ask", b"\xff\xfe\x00", 400, "parsing the body"),
        ("/ask", b"", 422, "Field required"),
        (
            "/documents",
            b'{"documents": [{"id": "n", "text": "t", "metadata": {"x": NaN}}]}',
            422,
            "finite",
        ),
        (
            "/documents",
            b'{"documents": [{"id": "s", "text": "t", "metadata": {"x": ["\\udc00"]}}]}',
            422,
            "surrogate",
        ),
        ("/documents", b'{"documents": [{"id": "d", "text": "\\ud800"}]}', 422, "valid string"),
        ("/documents", b'{"documents": [{"id": "x\\u0000", "text": "t"}]}', 422, "pattern"),
    ],
)
def test_api_hostile_bodies(
    client: Client, url: str, body: bytes, status: int, message: str | None
) -> None:
    with deadline(30):
        r = client.post(url, body)
    assert r.status_code == status, r.text[:500]
    if message is not None:
        assert message in r.text


def test_api_keeps_serving_filtered_search_after_odd_metadata(client: Client) -> None:
    """A document whose metadata holds a 400-digit integer used to make every filtered (and
    every scoped) search a 500 for every caller."""
    body = {"documents": [{"id": "big", "text": "huge number", "metadata": {"level": 10**400}}]}
    r = client.post("/documents?wait=true", json.dumps(body).encode())
    assert r.status_code == 200 and r.json()["state"] == "done", r.text
    for spec in ({"level": 1}, {"level": 10**400}, {"level": {"gte": 0}}, {"not": {"level": 1}}):
        raw = json.dumps({"query": "huge number ERR-4012", "filter": spec}).encode()
        r = client.post("/search", raw)
        assert r.status_code == 200, r.text
    t = time.perf_counter()
    assert client.get("/documents/big").json()["metadata"]["level"] == 10**400
    assert time.perf_counter() - t < 10
