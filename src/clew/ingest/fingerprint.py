"""What an index records about how it was built (embedder, analyzer, concept extractor,
chunking), checked when it is opened and written when it is ingested into: queries must be
embedded by the model the index was built with, and a document's hash includes the settings
that change what is written."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from clew.config import ChunkConfig, EmbedderConfig, EngineConfig
from clew.errors import ConfigError
from clew.ingest.analyze import ANALYZER_VERSION

__all__ = ["INGEST_META", "check_built_with", "encoder_name", "ingest_meta", "record_meta"]

INGEST_META = ("embedder", "embedder_version", "dim", "analyzer", "concepts", "chunk")
"""The store's meta keys an ingest writes."""


class MetaStore(Protocol):
    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, values: Mapping[str, str]) -> None: ...


def encoder_name(encoder: Any, injected: bool, model: str) -> str:
    """What the index records as its embedder: the model spec, or an injected encoder's name."""
    if injected:
        return str(getattr(encoder, "name", None) or type(encoder).__name__)
    return model


def ingest_meta(encoder: Any, name: str, concepts: str, chunk: ChunkConfig) -> dict[str, str]:
    """The meta values an ingest with this encoder, extractor version and chunking writes."""
    return {
        "embedder": name,
        "embedder_version": str(getattr(encoder, "version", "")),
        "dim": str(getattr(encoder, "dim", "")),
        "analyzer": ANALYZER_VERSION,
        "concepts": concepts,
        "chunk": json.dumps([chunk.max_tokens, chunk.overlap_tokens]),
    }


def check_built_with(
    get_meta: Callable[[str], str | None],
    config: EngineConfig,
    encoder: Any,
    injected: bool,
    where: str,
) -> EngineConfig:
    """The config to query the index at ``where`` with: the given one, or with the index's
    embedder when the config names the default model. A ConfigError when the given encoder or
    configured model is not the one the index was built with."""
    stored = get_meta("embedder")
    if stored is None:
        return config
    stored_version = get_meta("embedder_version") or ""
    if injected:
        version = str(getattr(encoder, "version", "") or "")
        name = encoder_name(encoder, True, config.embedder.model)
        same = (version == stored_version) if version and stored_version else (name == stored)
        if not same:
            raise ConfigError(
                f"index at {where!r} was built with embedder {stored!r} "
                f"(version {stored_version or '?'}); the given encoder is "
                f"{name!r} (version {version or '?'}). Re-ingest into a new "
                "index to change models"
            )
        return config
    wanted = config.embedder.model
    if wanted == EmbedderConfig().model and stored != wanted:
        # default config on an index built with another model: query with that model
        config = replace(config, embedder=replace(config.embedder, model=stored))
        wanted = stored
    if stored != wanted:
        raise ConfigError(
            f"index at {where!r} was built with embedder {stored!r}; "
            f"got {wanted!r}. Re-ingest into a new index to change models"
        )
    check_model_version(wanted, stored_version, where)
    return config


def check_model_version(model: str, stored_version: str, where: str) -> None:
    """A ConfigError when ``model`` resolves here to other weights than the index was embedded
    with (``minilm`` is the fp32 export with ``clew[torch]`` installed, the int8 file without):
    vectors of two models must never meet in one index or one query. Resolving costs no export
    and under a millisecond; a model that does not resolve here is left to the encoder's load."""
    if not stored_version:
        return
    from clew.errors import ModelError
    from clew.models.embedder import resolve_model

    try:
        files = resolve_model(model, export=False)
    except ModelError:
        return
    if files.version != stored_version:
        raise ConfigError(
            f"index at {where!r} was embedded by {model!r} version {stored_version}; here "
            f"{model!r} is {files.name} version {files.version} ('minilm' is the fp32 model "
            "with clew[torch] installed, int8 without). Query it where the same model is "
            "installed, or re-ingest into a new index ('minilm-fp32' and 'minilm-int8' pin one)"
        )


def record_meta(store: MetaStore, meta: Mapping[str, str]) -> None:
    """Before the first batch of an ingest (write lock held): refuse another embedder
    dimension, and record ``meta`` when it differs, since it describes what is written."""
    stored = {k: store.get_meta(k) for k in INGEST_META}
    if stored["embedder"] is not None and stored["dim"] != meta["dim"]:
        raise ConfigError(
            f"embedder dimension {meta['dim']} does not match the index ({stored['dim']})"
        )
    if any(stored[k] != meta[k] for k in INGEST_META):
        store.set_meta(meta)
