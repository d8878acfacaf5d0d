"""Logistic regression over named, standardized features: fit, explain, save, load.

Used by the feature reranker (``clew train-reranker --kind features``) and by the abstention
calibration (``clew calibrate``). Deterministic (Newton's method), numpy only; saved as JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.errors import ConfigError, ModelError


@dataclass(frozen=True, slots=True)
class LogisticModel:
    features: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    info: dict[str, Any]

    def parts(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Each feature's contribution to the logit: weight × standardized value, per row."""
        z = (x - np.array(self.mean)) / np.array(self.std)
        return np.asarray(z * np.array(self.weights), dtype=np.float64)

    def logits(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.asarray(self.parts(x).sum(axis=1) + self.bias, dtype=np.float64)

    def probability(self, values: Mapping[str, float]) -> float:
        x = np.array([[values.get(f, 0.0) for f in self.features]], dtype=np.float64)
        logit = float(self.logits(x)[0])
        return 1.0 / (1.0 + math.exp(-max(min(logit, 50.0), -50.0)))

    def to_json(self, fmt: str) -> dict[str, Any]:
        return {
            "format": fmt,
            "features": list(self.features),
            "mean": list(self.mean),
            "std": list(self.std),
            "weights": list(self.weights),
            "bias": self.bias,
            "info": self.info,
        }

    @classmethod
    def from_json(
        cls,
        data: Mapping[str, Any],
        *,
        fmt: str,
        features: Sequence[str],
        source: str,
        redo: str,
        subset: bool = False,
    ) -> LogisticModel:
        """Load and check: the file's format and feature list must match this clew's (with
        ``subset``, the file may use any of ``features``, each once, in any order)."""
        if data.get("format") != fmt:
            raise ModelError(f"{source!r} is not a {fmt} file")
        found = [str(f) for f in data.get("features", ())]
        fits = (
            bool(found) and set(found) <= set(features) and len(set(found)) == len(found)
            if subset
            else found == list(features)
        )
        if not fits:
            unknown = [f for f in found if f not in features]
            raise ModelError(
                f"{source!r} was fitted on features {data.get('features')}"
                + (f" ({', '.join(map(repr, unknown))} unknown)" if unknown else "")
                + f"; this clew computes {list(features)}: {redo}"
            )
        try:
            return cls(
                tuple(data["features"]),
                tuple(float(v) for v in data["mean"]),
                tuple(float(v) for v in data["std"]),
                tuple(float(v) for v in data["weights"]),
                float(data["bias"]),
                dict(data.get("info", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{source!r} is incomplete or malformed: {exc}") from exc


def fit_logistic(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    features: Sequence[str],
    *,
    l2: float = 1.0,
    iterations: int = 50,
    info: Mapping[str, Any] | None = None,
    sample_weight: npt.NDArray[np.float64] | None = None,
) -> LogisticModel:
    """L2-regularised logistic regression by Newton's method (deterministic). With
    ``sample_weight``, each row's loss counts that much (e.g. 1 / rows of its dataset)."""
    if x.ndim != 2 or x.shape[1] != len(features) or len(x) != len(y):
        raise ConfigError(f"training matrix has shape {x.shape}; expected (n, {len(features)})")
    if len(set(y.tolist())) < 2:
        raise ConfigError("training needs both positive and negative examples")
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std < 1e-9] = 1.0
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    reg = np.full(z.shape[1], l2)
    reg[-1] = 0.0
    sw = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if sw.shape != y.shape or not (sw > 0).all():
        raise ConfigError(f"sample weights must be {len(y)} positive values")
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (sw * (p - y)) + reg * w
        hess = (z * (sw * p * (1 - p))[:, None]).T @ z + np.diag(reg) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return LogisticModel(
        tuple(features),
        tuple(float(v) for v in mean),
        tuple(float(v) for v in std),
        tuple(float(v) for v in w[:-1]),
        float(w[-1]),
        dict(info or {}),
    )
