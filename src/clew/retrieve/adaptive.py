"""The learned router: per-query signals → how to split weight between lexical and dense.

A router model is one logistic unit over standardized signals (:mod:`clew.retrieve.signals`)::

    share = sigmoid(bias + Σ weight_i · (signal_i - mean_i) / std_i)
    lexical = fusion.lexical_weight · 2 · (1 - share)
    dense   = fusion.dense_weight · 2 · share

``share`` 0.5 leaves the config's weights as they are; 1 runs on dense alone, 0 on lexical alone
(clamped to ``[min_share, max_share]``). The graph leg keeps the rules' weight. The model is a
small JSON file (``clew train-router`` writes one; clew ships ``router.json``, trained on train
splits only), versioned by the hash of its content, so every route names the model that
weighed it and the signals that moved it most.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from clew.errors import ConfigError
from clew.retrieve.signals import SIGNALS

__all__ = ["SHIPPED", "RouterModel", "dense_share", "load_router", "reasons"]

SHIPPED = Path(__file__).with_name("router.json")
KIND = "clew-router"
LABELS: dict[str, str] = {
    "lexical_top_z": "lexical top z",
    "lexical_gap": "lexical gap@10",
    "lexical_fill": "lexical hits/depth",
    "lexical_cover": "lexical idf cover",
    "dense_top_z": "dense top z",
    "dense_gap": "dense gap@10",
    "dense_fill": "dense hits/depth",
    "agree_10": "leg overlap@10",
    "lexical_top_in_dense": "lexical top in dense top 10",
    "dense_top_in_lexical": "dense top in lexical top 10",
    "identifier": "identifier",
    "quoted": "quoted phrase",
    "entity": "names a concept",
    "relation": "relation cue",
    "question": "question",
    "terms": "log(1 + terms)",
}


@dataclass(frozen=True, slots=True)
class RouterModel:
    """One logistic unit over standardized signals (see the module docstring)."""

    signals: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    min_share: float = 0.0
    max_share: float = 1.0
    version: str = ""
    """``router-`` + the first 12 hex digits of the SHA-256 of the model's canonical JSON."""
    info: dict[str, Any] = field(default_factory=dict)
    """What it was trained on and how (not used at run time)."""

    def __post_init__(self) -> None:
        n = len(self.signals)
        unknown = [s for s in self.signals if s not in SIGNALS]
        if unknown:
            raise ConfigError(
                f"router model signal {unknown[0]!r} is unknown; allowed: {', '.join(SIGNALS)}"
            )
        for name in ("mean", "std", "weights"):
            if len(getattr(self, name)) != n:
                raise ConfigError(
                    f"router model {name} has {len(getattr(self, name))} values; "
                    f"allowed: one per signal ({n})"
                )
        if any(not s > 0 for s in self.std):
            raise ConfigError("router model std must be > 0 for every signal")
        if not 0.0 <= self.min_share <= self.max_share <= 1.0:
            raise ConfigError(
                f"router model shares ({self.min_share}, {self.max_share}) are invalid; "
                "allowed: 0 <= min_share <= max_share <= 1"
            )

    def payload(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "signals": list(self.signals),
            "mean": list(self.mean),
            "std": list(self.std),
            "weights": list(self.weights),
            "bias": self.bias,
            "min_share": self.min_share,
            "max_share": self.max_share,
            "info": self.info,
        }

    def versioned(self) -> RouterModel:
        """This model with its content version set."""
        return RouterModel(**{**_fields(self), "version": _version(self.payload())})

    def to_json(self) -> str:
        body = self.payload()
        return json.dumps({**body, "version": _version(body)}, indent=1, sort_keys=True) + "\n"

    def contributions(self, values: Mapping[str, float]) -> dict[str, float]:
        """Each signal's term ``weight · standardized value`` (positive: towards dense)."""
        return {
            s: w * (values.get(s, 0.0) - m) / sd
            for s, m, sd, w in zip(self.signals, self.mean, self.std, self.weights, strict=True)
        }


def _version(body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "router-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def dense_share(model: RouterModel, values: Mapping[str, float]) -> float:
    """The dense leg's share of the lexical + dense weight for these signal values."""
    logit = model.bias + sum(model.contributions(values).values())
    share = 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit))))
    return min(model.max_share, max(model.min_share, share))


def reasons(model: RouterModel, values: Mapping[str, float], top: int = 2) -> str:
    """The model's prior share (its bias alone) and the signals that moved the share most,
    each with its value and the leg it pushed towards."""
    prior = 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, model.bias))))
    parts = sorted(
        ((c, s) for s, c in model.contributions(values).items() if abs(c) >= 0.005),
        key=lambda cs: (-abs(cs[0]), cs[1]),
    )[:top]
    pushes = [
        f"{LABELS.get(s, s)} {values.get(s, 0.0):.2g} → {'dense' if c > 0 else 'lexical'}"
        for c, s in parts
    ]
    return "; ".join([f"prior dense share {prior:.2f}", *pushes])


def parse_router(data: Any, where: str) -> RouterModel:
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ConfigError(f"{where} is not a router model; allowed: a file from clew train-router")
    try:
        model = RouterModel(
            signals=tuple(str(s) for s in data["signals"]),
            mean=tuple(float(x) for x in data["mean"]),
            std=tuple(float(x) for x in data["std"]),
            weights=tuple(float(x) for x in data["weights"]),
            bias=float(data["bias"]),
            min_share=float(data.get("min_share", 0.0)),
            max_share=float(data.get("max_share", 1.0)),
            info=dict(data.get("info") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where} is not a valid router model: {exc!r}") from exc
    version = _version(model.payload())
    if data.get("version") not in (None, version):
        raise ConfigError(
            f"{where} version {data.get('version')!r} does not match its content ({version}); "
            "allowed: a file as clew train-router wrote it"
        )
    return model.versioned()


def _fields(model: RouterModel) -> dict[str, Any]:
    return {name: getattr(model, name) for name in RouterModel.__dataclass_fields__}


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> RouterModel:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read router model {path!r}: {exc}") from exc
    return parse_router(data, f"router model {path!r}")


@lru_cache(maxsize=1)
def _shipped() -> RouterModel:
    return _load(str(SHIPPED), SHIPPED.stat().st_mtime_ns)


def load_router(path: str = "") -> RouterModel:
    """The model at ``path`` ("" = the one shipped with clew, read once per process); a
    user's file is read again when it changes (one ``stat`` per query)."""
    if not path:
        return _shipped()
    target = Path(path)
    try:
        mtime = target.stat().st_mtime_ns
    except OSError as exc:
        raise ConfigError(
            f"router.model={path!r} cannot be read ({exc.strerror or exc}); "
            "allowed: a file from clew train-router, or '' for the shipped model"
        ) from exc
    return _load(str(target), mtime)


def fit_summary(model: RouterModel) -> list[tuple[str, float]]:
    """(signal, weight per standard deviation), largest first: what the model listens to."""
    pairs: Sequence[tuple[str, float]] = list(zip(model.signals, model.weights, strict=True))
    return sorted(pairs, key=lambda p: (-abs(p[1]), p[0]))
