"""Deterministic stand-ins for unit tests. Named as fakes: never use them for real retrieval."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clew.ingest.analyze import analyze
from clew.protocols import Matrix

if TYPE_CHECKING:
    from clew.engine import Engine


class FakeHashEncoder:
    """A deterministic FAKE encoder: hashed bag of analyzer tokens, L2-normalized.

    Texts that share words get similar vectors, which is enough to exercise the dense leg in
    unit tests without model weights. It knows nothing about meaning.
    """

    name = "fake-hash"
    version = "fake-hash/1"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def encode(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for tok in analyze(text):
                h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "big")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = float(np.linalg.norm(out[i]))
            if norm > 0:
                out[i] /= norm
            else:
                out[i, 0] = 1.0
        return out


def fake_engine(directory: str | Path, config: Any = None, *, create: bool = True) -> Engine:
    """An engine on ``directory`` with the FAKE hash encoder and identifier-only concepts (no
    model, no spaCy): fast, for tests of everything but retrieval quality."""
    from clew.config import ConceptConfig
    from clew.engine import Engine
    from clew.ingest.concepts import ConceptExtractor

    return Engine(
        directory,
        config,
        create=create,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
