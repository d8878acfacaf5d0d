"""Deterministic stand-ins for unit tests. Named as fakes: never use them for real retrieval."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from clew.ingest.analyze import analyze
from clew.protocols import Matrix


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
