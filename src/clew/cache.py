"""The result cache: search and ask results keyed by everything they depend on.

A key holds the normalized query, k, the config (and so the route), filter, scope and caller,
the time constraint, and, per snapshot, the release, analyzer and model versions, so a new
release makes every older entry unreachable. Least recently used entries go first.

Each scope keeps its own partition of ``cache.size`` entries, so whether a scope's result is
still cached (the ``cached`` flag it is served with) depends on that scope's own queries only,
never on how many other tenants asked meanwhile. ``cache.scopes`` partitions are kept (memory
stays bounded whatever scopes callers pass); past that the least recently used scope's
partition goes whole."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from typing import Any, Generic, TypeVar

from clew.config import EngineConfig
from clew.filters import filter_key, parse_filter, to_json

__all__ = ["Lru", "ResultCache"]

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A bounded map, least recently used first out; thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> list[V]:
        """The values, least recently used first (a copy; recency is not touched)."""
        with self._lock:
            return list(self._entries.values())


class ResultCache:
    def __init__(self, size: int, scopes: int = 16) -> None:
        self.size = size
        self.scopes = scopes
        self._partitions: Lru[str, Lru[str, Any]] = Lru(scopes)
        self._lock = threading.Lock()

    @staticmethod
    def partition(scope: Any) -> str:
        """The partition a scope's entries live in: its filter key, however it is spelled (the
        unscoped caller has one of its own)."""
        return filter_key(parse_filter(scope)) or "null"

    def key(
        self,
        kind: str,
        query: Any,
        k: int | None,
        filter: Any,
        scope: Any,
        preset: str | None,
        cfg: EngineConfig,
        as_of: float | None,
        caller: str | None,
    ) -> str | None:
        """Everything a result depends on but the snapshot, or None when results of this config
        are not cached (caching off, or an external model answers)."""
        if cfg.cache.size == 0 or self.size == 0 or not isinstance(query, str):
            return None
        if cfg.rerank.kind == "llm" or (kind == "ask" and cfg.answer.mode == "generative"):
            return None  # an external model answers: not a function of the index alone
        node, scope_node = parse_filter(filter), parse_filter(scope)
        recency = cfg.recency.weight > 0 and (cfg.recency.documents or cfg.recency.memories)
        moment = as_of if as_of is not None else (int(time.time() // 60) if recency else None)
        return json.dumps(
            [
                kind,
                " ".join(query.split()),
                k,
                to_json(node),
                to_json(scope_node),
                caller,
                preset,
                cfg.to_dict(),
                moment,
            ],
            sort_keys=True,
            default=str,
        )

    def get(self, key: str | None, version: str, partition: str = "null") -> Any:
        """The entry for ``key`` at ``version`` (release, analyzer and models) in the scope's
        ``partition`` (:meth:`partition`), or None."""
        if key is None:
            return None
        entries = self._partitions.get(partition)
        return None if entries is None else entries.get(f"{version}|{key}")

    def put(self, key: str | None, version: str, value: Any, partition: str = "null") -> None:
        rerank = getattr(value, "rerank", None)
        if key is None or (rerank is not None and not rerank.ran):
            return  # a reranker that fell back may work next time
        with self._lock:
            entries = self._partitions.get(partition)
            if entries is None:
                entries = Lru(self.size)
                self._partitions.put(partition, entries)
        entries.put(f"{version}|{key}", value)

    def __len__(self) -> int:
        """Entries held, over every partition."""
        return sum(len(entries) for entries in self._partitions.values())

    def clear(self) -> None:
        self._partitions.clear()
