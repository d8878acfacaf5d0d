"""Errors raised by clew. Every message names the bad value and what is allowed.

::

    ClewError
    ├── ConfigError          invalid config field, unknown preset
    ├── LoadError            unreadable, binary or non-UTF-8 input; unsupported format
    ├── FilterError          malformed filter or a field that no document has
    ├── QueryError           empty or over-long query, bad k
    ├── StoreError           missing or incompatible index, failed write
    │   └── IndexNotFoundError
    └── ModelError           embedding model or spaCy pipeline cannot be loaded
        └── LLMError         an LLM endpoint failed or answered something unusable
"""

from __future__ import annotations


class ClewError(Exception):
    """Root of every error clew raises on purpose."""


class ConfigError(ClewError):
    """A configuration value is out of range or a preset name is unknown."""


class LoadError(ClewError):
    """An input file cannot be read as a document."""


class FilterError(ClewError):
    """An access filter is malformed or names a field no document has."""


class QueryError(ClewError):
    """A query or its parameters are invalid."""


class StoreError(ClewError):
    """The store cannot be opened, is incompatible, or a write failed."""


class IndexNotFoundError(StoreError):
    """No clew index exists at the given location."""


class ModelError(ClewError):
    """A model (embedding weights, tokenizer, spaCy pipeline) cannot be loaded."""


class LLMError(ModelError):
    """An LLM endpoint failed or answered something unusable."""
