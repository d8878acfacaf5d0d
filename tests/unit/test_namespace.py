"""A scoped key's document namespace (:meth:`clew.serve.auth.Principal.namespace`): readable for
a scope of equality fields, the scope's digest otherwise, and never the same for two scopes that
see different documents."""

from __future__ import annotations

from typing import Any

import pytest

from clew.filters import parse_filter, to_json
from clew.serve.auth import Principal


def ns(scope: Any) -> str:
    node = parse_filter(scope)
    return Principal("k", None if node is None else to_json(node)).namespace()


def test_an_unscoped_key_has_no_namespace() -> None:
    assert ns(None) == ""


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"tenant": "acme"}, "tenant=acme/"),
        ({"tenant": ["acme"]}, "tenant=acme/"),  # one value is an equality
        ({"and": [{"tenant": "a"}, {"team": "x"}]}, "team=x,tenant=a/"),  # sorted by field
        ({"and": [{"team": "x"}, {"tenant": "a"}]}, "team=x,tenant=a/"),
        ({"t": "a/b,c=d~e"}, "t=a%2Fb%2Cc%3Dd%7Ee/"),  # separators and the digest mark encoded
    ],
)
def test_a_scope_of_string_equalities_reads_as_its_fields(scope: Any, expected: str) -> None:
    assert ns(scope) == expected


def test_any_other_scope_carries_its_digest() -> None:
    narrow = ns({"and": [{"tenant": "a"}, {"not": {"lang": "de"}}]})
    assert narrow.startswith("tenant=a~") and len(narrow) == len("tenant=a~") + 12 + 1
    assert ns({"lang": ["en", "de"]}).startswith("~")
    assert ns({"n": 3}).startswith("n=3~")
    assert ns({"n": 3}) != ns({"n": "3"}) == "n=3/"  # a number and its digits see different docs
    # the same field twice is no equality scope (it sees nothing, or what one of them sees)
    twice = ns({"and": [{"t": "a"}, {"t": "b"}]})
    assert twice.startswith("t=b~") and twice != ns({"t": "b"})


def test_scopes_that_see_different_documents_never_share_a_namespace() -> None:
    scopes: list[Any] = [
        {"tenant": "a"},
        {"tenant": "b"},
        {"and": [{"tenant": "a"}, {"team": "x"}]},
        {"and": [{"tenant": "a"}, {"not": {"lang": "de"}}]},
        {"and": [{"tenant": "a"}, {"lang": ["en", "de"]}]},
        {"or": [{"tenant": "a"}, {"tenant": "b"}]},
        {"n": 3},
        {"n": "3"},
        {"tenant": "a~0123456789ab"},
    ]
    names = [ns(s) for s in scopes]
    assert len(set(names)) == len(names), names
    assert all(n.endswith("/") and n.count("/") == 1 for n in names)
