"""An encoder with a query side and a document side is used that way by every stage."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clew import Document, Engine
from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor
from clew.protocols import AsymmetricEncoder, Matrix, encode_documents, encode_queries
from clew.testing.fakes import FakeHashEncoder


class PrefixingFake(FakeHashEncoder):
    """A FAKE asymmetric encoder (as e5 prefixes "query: " / "passage: "), counting its calls."""

    name = "fake-prefix"
    version = "fake-prefix/1"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def encode_queries(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(("query", len(texts)))
        return self.encode([f"question {t}" for t in texts])

    def encode_documents(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(("document", len(texts)))
        return self.encode(list(texts))


def test_the_helpers_pick_the_side() -> None:
    enc, plain = PrefixingFake(), FakeHashEncoder()
    assert isinstance(enc, AsymmetricEncoder) and not isinstance(plain, AsymmetricEncoder)
    assert (encode_queries(enc, ["x"]) == enc.encode(["question x"])).all()
    assert (encode_documents(enc, ["x"]) == enc.encode(["x"])).all()
    assert (encode_queries(plain, ["x"]) == plain.encode(["x"])).all()
    assert enc.calls == [("query", 1), ("document", 1)]


def test_ingest_embeds_documents_and_search_embeds_queries(tmp_path: Path) -> None:
    enc = PrefixingFake()
    extractor = ConceptExtractor(ConceptConfig(spacy=False))
    with Engine(tmp_path / "idx", create=True, encoder=enc, extractor=extractor) as engine:
        engine.ingest([Document("a", "A", "ERR-4012 means the pool is exhausted.", "a.md")])
        assert [side for side, _ in enc.calls] == ["document"]
        enc.calls.clear()
        engine.search("what does ERR-4012 mean", preset="dense")
        assert enc.calls == [("query", 1)]
        enc.calls.clear()
        engine.ask("what does ERR-4012 mean")
        # retrieval embeds the question; sentence selection embeds it as a query too, and
        # the candidate sentences as documents
        assert any(side == "document" for side, _ in enc.calls)
        assert enc.calls.count(("query", 1)) == 2
