"""clew: explainable hybrid retrieval (BM25 + dense + knowledge graph) with provenance."""

from clew.compose.answer import Answer, Citation
from clew.config import PRESETS, EngineConfig, preset_config
from clew.engine import Engine
from clew.errors import (
    ClewError,
    ConfigError,
    FilterError,
    IndexNotFoundError,
    LLMError,
    LoadError,
    ModelError,
    QueryError,
    StoreError,
)
from clew.filters import parse_filter
from clew.ingest.analyze import ANALYZER_VERSION, analyze
from clew.protocols import Encoder, RerankCandidate, Reranker, RerankScores
from clew.retrieve.run import Answered, Replay, Run
from clew.types import (
    Chunk,
    Concept,
    Contribution,
    Document,
    DocumentSummary,
    ExpansionPath,
    GraphTrail,
    Hit,
    IngestReport,
    PathStep,
    RerankNote,
    RerankStatus,
    Route,
    SearchResult,
    SkippedFile,
)

__version__ = "0.1.0"

__all__ = [
    "ANALYZER_VERSION",
    "PRESETS",
    "Answer",
    "Answered",
    "Chunk",
    "Citation",
    "ClewError",
    "Concept",
    "ConfigError",
    "Contribution",
    "Document",
    "DocumentSummary",
    "Encoder",
    "Engine",
    "EngineConfig",
    "ExpansionPath",
    "FilterError",
    "GraphTrail",
    "Hit",
    "IndexNotFoundError",
    "IngestReport",
    "LLMError",
    "LoadError",
    "ModelError",
    "PathStep",
    "QueryError",
    "Replay",
    "RerankCandidate",
    "RerankNote",
    "RerankScores",
    "RerankStatus",
    "Reranker",
    "Route",
    "Run",
    "SearchResult",
    "SkippedFile",
    "StoreError",
    "__version__",
    "analyze",
    "parse_filter",
    "preset_config",
]
