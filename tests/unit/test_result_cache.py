"""The result cache keeps one partition per scope: whether a scope's result is still cached
depends on that scope's own queries only (the scope wall), and memory stays bounded."""

from __future__ import annotations

import pytest

from clew.cache import ResultCache
from clew.config import EngineConfig
from clew.errors import ConfigError


def _key(cache: ResultCache, query: str, scope: object) -> str:
    key = cache.key("search", query, 10, None, scope, None, EngineConfig(), None, None)
    assert key is not None
    return key


def test_another_scopes_queries_never_evict_a_scopes_entries() -> None:
    cache = ResultCache(size=2, scopes=4)
    a = cache.partition({"tenant": "a"})
    key = _key(cache, "ERR-4012", {"tenant": "a"})
    cache.put(key, "v1", "result-a", a)
    b = cache.partition({"tenant": "b"})
    for i in range(50):  # tenant b fills its own partition many times over
        cache.put(_key(cache, f"q{i}", {"tenant": "b"}), "v1", f"result-b{i}", b)
    assert cache.get(key, "v1", a) == "result-a"
    assert cache.get(key, "v1", b) is None  # never served to another scope
    assert len(cache) == 3  # a's one entry, b's last two


def test_a_scopes_own_queries_evict_its_oldest_entries() -> None:
    cache = ResultCache(size=2, scopes=4)
    a = cache.partition({"tenant": "a"})
    keys = [_key(cache, f"q{i}", {"tenant": "a"}) for i in range(3)]
    for i, key in enumerate(keys):
        cache.put(key, "v1", i, a)
    assert [cache.get(k, "v1", a) for k in keys] == [None, 1, 2]


def test_scopes_past_the_cap_drop_the_least_recently_used_partition() -> None:
    cache = ResultCache(size=4, scopes=2)
    parts = [cache.partition({"tenant": t}) for t in "abc"]
    keys = [_key(cache, "q", {"tenant": t}) for t in "abc"]
    for key, part in zip(keys, parts, strict=True):
        cache.put(key, "v1", part, part)
    assert cache.get(keys[0], "v1", parts[0]) is None
    assert [cache.get(k, "v1", p) for k, p in zip(keys[1:], parts[1:], strict=True)] == parts[1:]
    assert len(cache) == 2


def test_the_partition_is_the_normalized_scope() -> None:
    both = {"tenant": "a", "user": "u"}
    assert ResultCache.partition(both) == ResultCache.partition(dict(reversed(both.items())))
    assert ResultCache.partition({"tenant": "a"}) != ResultCache.partition({"tenant": "b"})
    assert ResultCache.partition(None) != ResultCache.partition({"tenant": "a"})


def test_bad_scope_caps_are_named() -> None:
    with pytest.raises(ConfigError, match=r"cache\.scopes.*1\.\.10000"):
        EngineConfig().with_overrides(cache={"scopes": 0})
