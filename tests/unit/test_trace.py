from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clew.errors import ClewError, ConfigError, QueryError, StoreError
from clew.trace import (
    ABSENT,
    TRACE_VERSION,
    VOLATILE,
    Difference,
    TraceStore,
    diff_traces,
    summarize_differences,
    trace_id_for,
)

ID_RE = re.compile(r"tr-[0-9a-f]{20}")


def sample(**extra: Any) -> dict[str, Any]:
    trace: dict[str, Any] = {
        "query": "how does the réranker fall back? 日本語 🙂",
        "release": 7,
        "route": {"legs": {"lexical": 1.0, "dense": 1.0, "graph": False}},
        "lists": {
            "fused": [
                {"chunk_id": "a#0", "score": 0.1 + 0.2},
                {"chunk_id": "b#1", "score": 1 / 3},
            ],
        },
        "reranker": {"ran": True, "fell_back": False},
        "timings_ms": {"fuse": 0.42},
    }
    trace.update(extra)
    return trace


# --------------------------------------------------------------------------- ids


def test_id_is_deterministic_and_content_sensitive() -> None:
    t = sample(created_at="2026-01-01T00:00:00.000000Z")
    first = trace_id_for(t)
    assert ID_RE.fullmatch(first)
    assert trace_id_for(dict(reversed(list(t.items())))) == first  # key order is irrelevant
    assert trace_id_for(sample(created_at="2026-01-01T00:00:00.000000Z", release=8)) != first
    assert trace_id_for(sample(created_at="2026-01-01T00:00:00.000001Z")) != first


def test_id_ignores_volatile_keys_at_any_depth() -> None:
    t = sample(created_at="2026-01-01T00:00:00.000000Z")
    other = sample(created_at="2026-01-01T00:00:00.000000Z", trace_id="tr-" + "0" * 20)
    other["timings_ms"] = {"fuse": 99.0}
    other["route"]["seconds"] = 3.5
    assert trace_id_for(other) == trace_id_for(t)


def test_id_normalizes_tuples_and_numpy() -> None:
    a = {"xs": [1, 2.5], "created_at": "x"}
    b = {"xs": (np.int64(1), np.float32(2.5)), "created_at": "x"}
    assert trace_id_for(a) == trace_id_for(b)


# --------------------------------------------------------------------------- store


def test_round_trip_exact_floats_and_unicode(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    floats = [0.1 + 0.2, 1 / 3, 5e-324, 1.7976931348623157e308, -0.0, 2.0**-1074 * 3]
    t = sample(floats=floats, big=2**70)
    trace_id = store.write(t)
    assert ID_RE.fullmatch(trace_id)
    assert (store.directory / f"{trace_id}.json").is_file()
    assert store.directory == tmp_path / "traces"
    back = store.read(trace_id)
    assert back["trace_id"] == trace_id
    assert back["format"] == TRACE_VERSION
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", back["created_at"])
    assert back["query"] == t["query"]
    assert back["big"] == 2**70
    assert [x.hex() for x in back["floats"]] == [x.hex() for x in floats]
    assert back["lists"] == t["lists"]
    assert trace_id_for(back) == trace_id  # a stored trace verifies against its id
    assert "日本語" in (store.directory / f"{trace_id}.json").read_text(encoding="utf-8")
    assert t.keys().isdisjoint({"trace_id", "created_at", "format"})  # input not mutated


def test_given_created_at_and_format_are_kept_and_stale_id_replaced(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    t = sample(
        created_at="2025-05-05T05:05:05.000000Z", format="custom/2", trace_id="tr-" + "f" * 20
    )
    trace_id = store.write(t)
    back = store.read(trace_id)
    assert back["created_at"] == "2025-05-05T05:05:05.000000Z"
    assert back["format"] == "custom/2"
    assert trace_id == trace_id_for(back) != "tr-" + "f" * 20


def test_identical_content_written_twice_gets_two_ids(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    assert store.write(sample()) != store.write(sample())
    assert len(store) == 2


def test_non_finite_floats_are_stored_as_strings(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    back = store.read(store.write({"x": [math.nan, math.inf, -math.inf, np.float64("nan")]}))
    assert back["x"] == ["nan", "inf", "-inf", "nan"]


def test_unjsonable_values_are_rejected_with_their_path(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    with pytest.raises(StoreError, match=r"'lists\.fused\[1\]' is a set"):
        store.write({"lists": {"fused": [1, {2}]}})
    with pytest.raises(StoreError, match=r"trace key 3 at 'route' is a int; allowed: str keys"):
        store.write({"route": {3: "x"}})
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(StoreError, match="cycle"):
        store.write(cyclic)
    assert not store.directory.exists() or not any(store.directory.iterdir())


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    ids = [store.write(sample(i=i)) for i in range(5)]
    names = sorted(p.name for p in store.directory.iterdir())
    assert names == sorted(f"{i}.json" for i in ids)


def test_stale_temp_files_are_swept(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    store.directory.mkdir(parents=True)
    stale = store.directory / ".trace-crashed.tmp"
    fresh = store.directory / ".trace-inflight.tmp"
    stale.write_text("{")
    fresh.write_text("{")
    os.utime(stale, (1.0, 1.0))
    store.write(sample())
    assert not stale.exists()
    assert fresh.exists()
    assert len(store.latest()) == 1  # temp files are never listed


def test_pruning_keeps_the_newest(tmp_path: Path) -> None:
    store = TraceStore(tmp_path, keep=3)
    ids = [store.write(sample(i=i)) for i in range(7)]
    assert store.latest(10) == ids[::-1][:3]
    assert sorted(p.stem for p in store.directory.glob("*.json")) == sorted(ids[-3:])
    with pytest.raises(QueryError, match="no trace"):
        store.read(ids[0])


def test_keep_one_never_removes_the_trace_just_written(tmp_path: Path) -> None:
    store = TraceStore(tmp_path, keep=1)
    for i in range(5):
        trace_id = store.write(sample(i=i))
        assert store.latest() == [trace_id]


def test_latest_is_newest_first(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    assert store.latest() == []  # no folder yet: not an error
    ids = [store.write(sample(i=i)) for i in range(12)]
    assert store.latest() == ids[::-1][:10]
    assert store.latest(2) == [ids[-1], ids[-2]]
    assert store.latest(0) == []
    assert store.latest(100) == ids[::-1]


@pytest.mark.parametrize("bad", ["../x", "tr-../../etc/passwd", "tr-ABCDEF0123456789abcd", "x", ""])
def test_bad_id_shape_is_a_query_error(tmp_path: Path, bad: str) -> None:
    store = TraceStore(tmp_path)
    with pytest.raises(QueryError) as info:
        store.read(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert "'tr-' followed by 20 lowercase hex digits" in message


def test_path_traversal_cannot_reach_outside(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")
    store = TraceStore(tmp_path / "idx")
    with pytest.raises(QueryError, match=re.escape("invalid trace id '../x'")):
        store.read("../x")
    with pytest.raises(QueryError, match="invalid trace id"):
        store.read("tr-0123456789abcdef0123/../../x")


def test_unknown_id_names_the_folder_and_newest(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    missing = "tr-" + "0" * 20
    with pytest.raises(QueryError) as info:
        store.read(missing)
    assert str(info.value) == (
        f"no trace {missing!r} in {store.directory}; the newest are: none (the store is empty)"
    )
    ids = [store.write(sample(i=i)) for i in range(5)]
    with pytest.raises(QueryError) as info:
        store.read(missing)
    assert str(info.value).endswith("the newest are: " + ", ".join(ids[::-1][:3]))
    assert isinstance(info.value, ClewError)


def test_corrupt_file_is_a_store_error(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    trace_id = store.write(sample())
    (store.directory / f"{trace_id}.json").write_text("{not json")
    with pytest.raises(StoreError, match="not valid JSON"):
        store.read(trace_id)
    (store.directory / f"{trace_id}.json").write_text("[1]")
    with pytest.raises(StoreError, match="expected an object"):
        store.read(trace_id)


def test_bad_parameters() -> None:
    with pytest.raises(ConfigError, match="keep must be an integer >= 1"):
        TraceStore("x", keep=0)
    with pytest.raises(ConfigError, match="n must be an integer >= 0, got -1"):
        TraceStore("x").latest(-1)
    with pytest.raises(ConfigError, match="limit must be"):
        diff_traces({}, {}, limit=0)
    with pytest.raises(ConfigError, match="float_tol must be"):
        diff_traces({}, {}, float_tol=-1.0)


# --------------------------------------------------------------------------- diff


def test_identical_traces_have_no_differences() -> None:
    assert diff_traces(sample(), sample()) == []
    assert summarize_differences([]) == "identical"


def test_replayed_trace_is_identical_after_storage(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    first = store.read(store.write(sample()))
    second = store.read(store.write(sample(timings_ms={"fuse": 7.0})))
    assert first["trace_id"] != second["trace_id"]
    assert diff_traces(first, second) == []


def test_changed_scalar() -> None:
    after = sample()
    after["lists"]["fused"][1]["chunk_id"] = "z#9"
    diffs = diff_traces(sample(), after)
    assert diffs == [Difference("lists.fused[1].chunk_id", "b#1", "z#9")]
    assert str(diffs[0]) == "lists.fused[1].chunk_id: 'b#1' -> 'z#9'"


def test_added_and_removed_keys_in_sorted_order() -> None:
    before = sample()
    after = sample(zeta=1)
    del after["route"]["legs"]["graph"]
    after["route"]["legs"]["alpha"] = 0.5
    diffs = diff_traces(before, after)
    assert diffs == [
        Difference("route.legs.alpha", ABSENT, 0.5),
        Difference("route.legs.graph", False, ABSENT),
        Difference("zeta", ABSENT, 1),
    ]
    assert str(diffs[1]) == "route.legs.graph: False -> <absent>"


def test_list_length_change_then_common_prefix() -> None:
    before = {"xs": [1, 2, 3, 4]}
    after = {"xs": [1, 9]}
    assert diff_traces(before, after) == [
        Difference("xs.length", 4, 2),
        Difference("xs[1]", 2, 9),
    ]


def test_nested_list_of_dicts() -> None:
    before = {"lists": {"reranked": [{"id": "a", "why": [{"edge": "e1"}]}, {"id": "b"}]}}
    after = {"lists": {"reranked": [{"id": "a", "why": [{"edge": "e2"}]}, {"id": "b", "x": 1}]}}
    assert diff_traces(before, after) == [
        Difference("lists.reranked[0].why[0].edge", "e1", "e2"),
        Difference("lists.reranked[1].x", ABSENT, 1),
    ]


def test_type_changes_are_differences() -> None:
    assert diff_traces({"a": 1}, {"a": "1"}) == [Difference("a", 1, "1")]
    assert diff_traces({"a": True}, {"a": 1}) == [Difference("a", True, 1)]
    assert diff_traces({"a": [1]}, {"a": {"0": 1}}) == [Difference("a", [1], {"0": 1})]
    assert diff_traces({"a": (1, 2)}, {"a": [1, 2]}) == []
    assert diff_traces({"a": 1}, {"a": 1.0}) == []


def test_float_tolerance() -> None:
    a = {"score": 0.30000000000000004}
    b = {"score": 0.3}
    assert diff_traces(a, b) == [Difference("score", 0.30000000000000004, 0.3)]
    assert diff_traces(a, b, float_tol=1e-12) == []
    assert diff_traces({"s": 1.0}, {"s": 1.1}, float_tol=1e-3) == [Difference("s", 1.0, 1.1)]
    assert diff_traces({"s": math.nan}, {"s": math.nan}) == []
    assert diff_traces({"s": math.inf}, {"s": math.inf}, float_tol=1.0) == []
    assert diff_traces({"n": 2**60}, {"n": 2**60 + 1}, float_tol=10.0) == [
        Difference("n", 2**60, 2**60 + 1)
    ]


def test_ignored_keys_at_any_depth() -> None:
    before = {"a": {"b": [{"timings_ms": 1, "seconds": 2, "v": 1}]}, "trace_id": "x"}
    after = {"a": {"b": [{"timings_ms": 5, "v": 1}]}, "trace_id": "y", "created_at": "now"}
    assert diff_traces(before, after) == []
    assert {"timings_ms", "seconds", "trace_id", "created_at"} == VOLATILE
    diffs = diff_traces(before, after, ignore={"v"})
    assert [d.path for d in diffs] == [
        "a.b[0].seconds",
        "a.b[0].timings_ms",
        "created_at",
        "trace_id",
    ]


def test_limit_and_summary() -> None:
    before = {"xs": list(range(100))}
    after = {"xs": [x + 1 for x in range(100)]}
    diffs = diff_traces(before, after, limit=5)
    assert [d.path for d in diffs] == [f"xs[{i}]" for i in range(5)]
    report = summarize_differences(diffs, limit=5)
    assert report.splitlines() == [
        "5 differences:",
        "  xs[0]: 0 -> 1",
        "  xs[1]: 1 -> 2",
        "  xs[2]: 2 -> 3",
        "  xs[3]: 3 -> 4",
        "  xs[4]: 4 -> 5",
        "  (stopped at 5; there may be more)",
    ]
    one = summarize_differences([Difference("a", 1, 2)])
    assert one == "1 difference:\n  a: 1 -> 2"


def test_odd_keys_are_quoted_in_paths_and_long_values_shortened() -> None:
    diffs = diff_traces({"p@10": {"a.b": 1}}, {"p@10": {"a.b": 2}})
    assert [d.path for d in diffs] == ["p@10['a.b']"]
    text = str(Difference("x", "y" * 1000, ABSENT))
    assert len(text) < 300
    assert text.endswith("… -> <absent>")


def test_diff_is_json_safe_for_stored_traces(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    before = store.read(store.write(sample()))
    changed = sample()
    changed["lists"]["fused"].append({"chunk_id": "c#2", "score": 0.0})
    after = store.read(store.write(changed))
    diffs = diff_traces(before, after)
    assert diffs == [Difference("lists.fused.length", 2, 3)]
    json.dumps([[d.path, d.before, d.after] for d in diffs])


def test_a_full_store_prunes_a_tenth_at_a_time(tmp_path: Path) -> None:
    store = TraceStore(tmp_path, keep=20)
    ids = [store.write(sample(i=i)) for i in range(30)]
    on_disk = sorted(p.stem for p in store.directory.glob("*.json"))
    assert 18 <= len(on_disk) <= 20
    assert set(ids[-18:]) <= set(on_disk)  # the newest always stay
    fresh = TraceStore(tmp_path, keep=20)  # a second store lists the folder once, then counts
    fresh.write(sample(i=99))
    assert len(list(store.directory.glob("*.json"))) <= 20


def test_stored_id_is_the_content_id_of_what_was_stored(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    nested = sample(i=3)
    nested["inner"] = {"timings_ms": {"a": 1.5}, "kept": (1, 2.5, "x")}
    back = store.read(store.write(nested))
    assert trace_id_for(back) == back["trace_id"]
