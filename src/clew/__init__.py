"""clew: explainable hybrid retrieval (BM25 + dense + knowledge graph) with provenance."""

from clew.config import PRESETS, EngineConfig, preset_config
from clew.errors import (
    ClewError,
    ConfigError,
    FilterError,
    IndexNotFoundError,
    LoadError,
    ModelError,
    QueryError,
    StoreError,
)
from clew.filters import parse_filter
from clew.ingest.analyze import ANALYZER_VERSION, analyze
from clew.retrieve.engine import Engine
from clew.types import (
    Chunk,
    Concept,
    Contribution,
    Document,
    GraphTrail,
    Hit,
    IngestReport,
    Route,
    SearchResult,
)

__version__ = "0.1.0"

__all__ = [
    "ANALYZER_VERSION",
    "PRESETS",
    "Chunk",
    "ClewError",
    "Concept",
    "ConfigError",
    "Contribution",
    "Document",
    "Engine",
    "EngineConfig",
    "FilterError",
    "GraphTrail",
    "Hit",
    "IndexNotFoundError",
    "IngestReport",
    "LoadError",
    "ModelError",
    "QueryError",
    "Route",
    "SearchResult",
    "StoreError",
    "__version__",
    "analyze",
    "parse_filter",
    "preset_config",
]
