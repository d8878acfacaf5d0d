from __future__ import annotations

import numpy as np
import pytest

from clew.errors import FilterError
from clew.filters import MetadataColumns, filter_key, parse_filter, to_json

DOCS = [
    (
        [0, 1],
        {
            "audience": "public",
            "tenant": "acme",
            "created_at": "2026-01-10T00:00:00Z",
            "priority": 3,
        },
    ),
    (
        [2],
        {
            "audience": "internal",
            "tenant": "globex",
            "created_at": "2026-02-12T08:00:00Z",
            "priority": 1,
        },
    ),
    ([3, 4], {"audience": ["sre", "internal"], "created_at": "2026-03-01", "flag": True}),
]


@pytest.fixture
def cols() -> MetadataColumns:
    return MetadataColumns.build(6, DOCS)


def hits(cols: MetadataColumns, spec: object) -> list[int]:
    node = parse_filter(spec)
    assert node is not None
    return [int(i) for i in np.flatnonzero(cols.mask(node))]


def test_equality_membership_and_list_fields(cols: MetadataColumns) -> None:
    assert hits(cols, {"audience": "public"}) == [0, 1]
    assert hits(cols, {"audience": "internal"}) == [2, 3, 4]
    assert hits(cols, {"audience": ["public", "sre"]}) == [0, 1, 3, 4]
    assert hits(cols, {"flag": True}) == [3, 4]
    assert hits(cols, {"priority": 3}) == [0, 1]
    assert hits(cols, {"priority": 3.0}) == [0, 1]


def test_ranges_numbers_and_iso_times(cols: MetadataColumns) -> None:
    assert hits(cols, {"created_at": {"gte": "2026-02-01", "lt": "2026-03-01"}}) == [2]
    assert hits(cols, {"created_at": {"gte": "2026-02-12T08:00:00+00:00"}}) == [2, 3, 4]
    assert hits(cols, {"priority": {"gt": 1}}) == [0, 1]


def test_boolean_combinations_and_implicit_and(cols: MetadataColumns) -> None:
    assert hits(cols, {"audience": "internal", "tenant": "globex"}) == [2]
    assert hits(cols, {"or": [{"tenant": "acme"}, {"flag": True}]}) == [0, 1, 3, 4]
    assert hits(cols, {"not": {"audience": "public"}}) == [2, 3, 4, 5]
    assert hits(cols, {"and": [{"not": {"tenant": "acme"}}, {"audience": "internal"}]}) == [2, 3, 4]


def test_empty_filter_means_no_filter() -> None:
    assert parse_filter(None) is None
    assert parse_filter({}) is None
    assert parse_filter("{}") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "must be a JSON object"),
        ({"audience": []}, "empty list"),
        ({"created_at": {"after": "2026-01-01"}}, "unknown range operator"),
        ({"created_at": {"gte": "yesterday"}}, "not a number or ISO 8601 time"),
        ({"and": {"a": 1}}, "non-empty list"),
        ({"not": [1]}, "expected a filter object"),
        ({"audience": {"eq": "x"}}, "allowed: gt, gte, lt, lte"),
        ({"audience": [{"x": 1}]}, "values must be strings"),
    ],
)
def test_malformed_filters_name_the_problem(spec: object, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        parse_filter(spec)


def test_unknown_field_is_an_error_naming_known_fields(cols: MetadataColumns) -> None:
    node = parse_filter({"audiance": "public"})
    assert node is not None
    with pytest.raises(FilterError, match=r"audiance.*known fields: audience"):
        cols.mask(node)


def test_canonical_json_round_trip() -> None:
    spec = {"and": [{"audience": ["public"]}, {"not": {"tenant": "acme"}}]}
    assert to_json(parse_filter(spec)) == spec


def test_filter_key_does_not_depend_on_how_the_parts_are_ordered() -> None:
    """Caches of masks and scope statistics, and a scope's calibration file, are keyed by
    what a filter allows, not by the order its parts were written in."""
    one = {"tenant": "acme", "audience": ["public", "internal"]}
    two = {"audience": ["public", "internal"], "tenant": "acme"}
    assert to_json(parse_filter(one)) != to_json(parse_filter(two))  # spelled apart
    assert filter_key(parse_filter(one)) == filter_key(parse_filter(two))
    nested_one = {"or": [{"tenant": "acme"}, {"and": [{"a": 1}, {"b": 2}]}]}
    nested_two = {"or": [{"and": [{"b": 2}, {"a": 1}]}, {"tenant": "acme"}]}
    assert filter_key(parse_filter(nested_one)) == filter_key(parse_filter(nested_two))
    assert filter_key(parse_filter({"tenant": "acme"})) != filter_key(parse_filter(one))
    assert filter_key(parse_filter(None)) is None
