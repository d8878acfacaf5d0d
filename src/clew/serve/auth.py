"""API keys and scopes: a key maps to a principal whose scope is an access filter.

Keys are random tokens shown once; the keys file stores only their SHA-256 (``sha256:<hex>``),
which is enough for high-entropy tokens (no password stretching needed). A principal's scope is
AND-ed with whatever filter a request asks for, so a caller can narrow what it sees, never widen
it. Keys never appear in logs or traces: only the principal's ``name`` does.

Keys file::

    keys:
      - name: support-bot
        hash: "sha256:9f86d0..."
        scope: {"audience": "public"}   # clew filter JSON; omitted or {} = everything
        admin: false                     # admin: document writes (and, unscoped, every trace)
        metrics: false                   # corpus-wide figures: /metrics and /health counts

Rights:

- **Reading** (search, ask, recall, documents, similar) is open to every key, within its scope.
- **Writing documents** needs ``admin: true``. **Writing memories** needs admin rights or a
  scope with equality fields (its *stamp*).
- **A scoped key writes only inside its scope**, admin or not: its stamp (the equality fields
  of its scope) is written last over user metadata, and the written document must pass the
  scope (else 403 naming the field).
- **Each scope has its own id namespace** (:meth:`Principal.namespace`, :func:`own_id`): an id
  a scoped key writes, reads, relates to or deletes names the document of that id it can see,
  else the one in its namespace (``tenant=acme/`` + the id). Ids are never shared across
  scopes, so no answer says whether another tenant holds an id. (Only an unscoped admin can put
  a document into a namespace; a scoped write that would overwrite one its scope hides is still
  refused, 409, without a word about that document.)
- **Access fields** are the metadata fields named in any configured key's scope
  (:meth:`KeyStore.access_fields`). A scoped writer may set an access field only to the value
  its scope pins (the stamp); any other access field in what it writes is refused (403), so a
  key scoped by ``audience`` cannot write ``tenant: b`` into another tenant's view. Unscoped
  admins (and ``--no-auth``) write anything.
- **Traces and jobs**: a key reads its own; an unscoped admin reads everyone's. A scoped admin
  is an admin of its scope only: other callers' traces and jobs are 404 to it.
- **Service figures** (``GET /metrics``, and the document and chunk counts of ``GET /health``)
  are corpus-wide, so they need ``metrics: true`` or an unscoped admin key. Without one,
  ``/health`` answers only ``{"status": "ok"}`` (liveness, no key needed) and ``/metrics`` is
  401 without a key, 403 with one that lacks the right.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml

from clew.errors import ConfigError, FilterError
from clew.filters import fields_of, matches, parse_filter, to_json

if TYPE_CHECKING:
    from clew.engine import Engine

__all__ = [
    "ANONYMOUS",
    "KeyStore",
    "Principal",
    "WriteRefused",
    "hash_key",
    "new_key",
    "own_id",
    "scope_fields",
]

KEY_PREFIX = "clew_"
_HASH_PREFIX = "sha256:"


def new_key() -> str:
    """A fresh random API key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return _HASH_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()


def own_id(engine: Engine, doc_id: str, scope: Any, namespace: str) -> str:
    """The document ``doc_id`` names for a caller with this scope and namespace
    (:meth:`clew.serve.auth.Principal.namespace`): the id itself when unscoped, when it is in
    the namespace already, or when a document of that id is one the scope lets through; else
    the id in the namespace. A scoped write lands there and a scoped read looks there, so
    neither depends on whether a document the scope hides holds the id."""
    if not namespace or doc_id.startswith(namespace):
        return doc_id
    if engine.document(doc_id, scope=scope) is not None:
        return doc_id
    return namespace + doc_id


def scope_fields(scope: Any) -> set[str]:
    """The metadata fields a scope (filter JSON) names."""
    return fields_of(parse_filter(scope))


class WriteRefused(Exception):
    """A scoped writer may not write this metadata (an HTTP 403, an MCP tool error). ``field``
    names the metadata field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a key's name, its scope (a normalized filter or None), admin rights and
    the right to corpus-wide service figures (``metrics``)."""

    name: str
    scope: dict[str, Any] | None = None
    admin: bool = False
    metrics: bool = False

    @property
    def unrestricted(self) -> bool:
        """An unscoped admin: writes anything, reads every trace and job."""
        return self.admin and self.scope is None

    @property
    def may_read_metrics(self) -> bool:
        """Corpus-wide figures (``/metrics``, ``/health`` counts): ``metrics: true`` or an
        unscoped admin."""
        return self.metrics or self.unrestricted

    def owns(self, owner: str | None) -> bool:
        """Whether a trace or job made by ``owner`` (a key name) is this caller's to read."""
        return self.unrestricted or owner == self.name

    def check_write(self, metadata: Mapping[str, Any], access_fields: Collection[str]) -> None:
        """Refuse (:class:`WriteRefused`) user ``metadata`` that sets an access field to a value
        this principal's scope does not pin. Unscoped principals write anything."""
        if self.scope is None:
            return
        guarded = set(access_fields) | scope_fields(self.scope)
        stamp = self.stamp()
        for key in sorted(k for k in metadata if k in guarded):
            value = metadata[key]
            if key not in stamp:
                raise WriteRefused(
                    key,
                    f"metadata field {key!r} is an access field and key {self.name!r}'s scope "
                    f"does not pin it; leave it out (the key's scope decides who sees what it "
                    "writes)",
                )
            if not _same(value, stamp[key]):
                raise WriteRefused(
                    key,
                    f"metadata field {key!r} is an access field; key {self.name!r}'s scope pins "
                    f"it to {stamp[key]!r}, so it may not be set to {_short(value)}",
                )

    def check_visible(self, metadata: Mapping[str, Any], what: str = "document") -> None:
        """Refuse (:class:`WriteRefused`) a written document's full metadata when this
        principal's scope would hide it, naming the first field that fails."""
        if self.scope is None or matches(metadata, self.scope):
            return
        field = failing_field(metadata, self.scope)
        raise WriteRefused(
            field,
            f"key {self.name!r} may not write this {what}: its scope would hide it "
            f"(metadata field {field!r} does not pass the key's scope)",
        )

    def narrow(self, requested: Any) -> dict[str, Any] | None:
        """The filter a request runs with: the scope AND the requested filter.

        The requested filter is validated here, so a malformed one is a :class:`FilterError`
        naming the problem whether or not the caller has a scope."""
        node = parse_filter(requested)
        asked = to_json(node) if node is not None else None
        if self.scope is None:
            return asked
        if asked is None:
            return self.scope
        return {"and": [self.scope, asked]}

    def namespace(self) -> str:
        """Where the documents this principal creates live: ``""`` unscoped, else its stamp as
        ``field=value`` pairs (sorted by field, percent-encoded, joined by ``,``), then, when its
        scope says more than those equality fields, ``~`` and 12 hex digits of the scope's
        digest, then ``/``: ``tenant=acme/``, ``tenant=acme~1f0c…/``, ``~9b2e…/``. Two keys
        share a namespace only when they have the same scope (so the same view), and no id
        another scope writes can fall in it: a scoped write never meets a document it
        cannot see, and no error it gets says whether another tenant holds an id."""
        if self.scope is None:
            return ""
        stamp = self.stamp()
        pairs = ",".join(f"{_part(str(k))}={_part(_scalar(v))}" for k, v in sorted(stamp.items()))
        if _only_equalities(self.scope):
            return pairs + "/"
        canonical = json.dumps(
            self.scope, sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
        return f"{pairs}~{digest}/"

    def stamp(self) -> dict[str, Any]:
        """Metadata that makes a document this principal writes visible to it again: the
        equality fields of its scope (``{"tenant": "acme"}`` → ``tenant: acme``)."""
        out: dict[str, Any] = {}
        scope = self.scope or {}
        parts = scope["and"] if set(scope) == {"and"} else [scope]
        for part in parts:
            if not isinstance(part, Mapping):
                continue
            for key, value in part.items():
                if key in ("and", "or", "not"):
                    continue
                if isinstance(value, str | int | float | bool):
                    out[key] = value
                elif isinstance(value, list) and len(value) == 1:
                    out[key] = value[0]
        return out


ANONYMOUS = Principal(name="anonymous", scope=None, admin=True, metrics=True)
"""The caller when auth is off (``--no-auth``, loopback only): everything, admin."""


def failing_field(metadata: Mapping[str, Any], scope: Any) -> str:
    """The first field (in scope order) of a condition of ``scope`` that ``metadata`` fails."""
    node = parse_filter(scope)
    parts = [to_json(node)]
    while parts:
        part = parts.pop(0)
        if part is None or matches(metadata, part):
            continue
        if set(part) == {"and"}:
            parts = list(part["and"]) + parts
            continue
        return sorted(scope_fields(part))[0]
    return sorted(scope_fields(scope) or {"?"})[0]


def _scalar(value: Any) -> str:
    """A stamp value as a namespace writes it: a string as it is, anything else as JSON (such a
    scope's namespace carries the digest too, so ``3`` and ``"3"`` differ)."""
    return (
        value[0]
        if isinstance(value, list)
        else value
        if isinstance(value, str)
        else json.dumps(value)
    )


def _part(text: str) -> str:
    """Percent-encoded, ``~`` included (it marks the digest)."""
    return quote(text, safe="").replace("~", "%7E")


def _only_equalities(scope: Mapping[str, Any]) -> bool:
    """Whether a normalized scope is nothing but its stamp: field = one string, AND-ed."""
    parts = scope["and"] if set(scope) == {"and"} else [scope]
    seen: set[str] = set()
    for part in parts:
        if not isinstance(part, Mapping) or not part:
            return False
        for key, value in part.items():
            if key in ("and", "or", "not") or key in seen:
                return False
            seen.add(key)
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            if not isinstance(value, str):
                return False
    return True


def _same(a: Any, b: Any) -> bool:
    """JSON equality without Python's ``True == 1``."""
    return type(a) is type(b) and bool(a == b)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    digest: str
    principal: Principal


class KeyStore:
    """The configured keys, by hash. ``authenticate`` compares in constant time."""

    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def principals(self) -> list[tuple[str, Principal]]:
        return [(e.name, e.principal) for e in self._entries]

    def access_fields(self) -> frozenset[str]:
        """The metadata fields named in any key's scope: what decides who sees a document."""
        out: set[str] = set()
        for entry in self._entries:
            out |= scope_fields(entry.principal.scope)
        return frozenset(out)

    @classmethod
    def load(cls, path: str | Path) -> KeyStore:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(
                f"keys file {str(p)!r} does not exist; create one with `clew keys add`"
            )
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"keys file {str(p)!r} is not valid YAML: {exc}") from exc
        return cls.parse(data, where=str(p))

    @classmethod
    def parse(cls, data: Any, *, where: str = "keys") -> KeyStore:
        if not isinstance(data, Mapping) or not isinstance(data.get("keys", []), list):
            raise ConfigError(f"{where}: expected a mapping with a 'keys' list")
        entries: list[_Entry] = []
        seen: set[str] = set()
        for i, raw in enumerate(data.get("keys") or []):
            at = f"{where}: keys[{i}]"
            if not isinstance(raw, Mapping):
                raise ConfigError(f"{at} must be a mapping with name, hash, scope, admin, metrics")
            unknown = set(raw) - {"name", "hash", "scope", "admin", "metrics"}
            if unknown:
                raise ConfigError(
                    f"{at}: unknown field {sorted(unknown)[0]!r}; allowed: name, hash, scope, "
                    "admin, metrics"
                )
            name, digest = raw.get("name"), raw.get("hash")
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"{at}.name={name!r} is invalid; allowed: a non-empty string")
            if name in seen:
                raise ConfigError(f"{at}.name={name!r} is used twice; names must be unique")
            seen.add(name)
            if (
                not isinstance(digest, str)
                or not digest.startswith(_HASH_PREFIX)
                or len(digest) != len(_HASH_PREFIX) + 64
            ):
                raise ConfigError(
                    f"{at}.hash is invalid; allowed: 'sha256:' followed by 64 hex digits "
                    "(never the key itself)"
                )
            admin = raw.get("admin", False)
            if not isinstance(admin, bool):
                raise ConfigError(f"{at}.admin={admin!r} is invalid; allowed: true or false")
            metrics = raw.get("metrics", False)
            if not isinstance(metrics, bool):
                raise ConfigError(f"{at}.metrics={metrics!r} is invalid; allowed: true or false")
            scope = _scope(raw.get("scope"), f"{at}.scope")
            entries.append(_Entry(name, digest, Principal(name, scope, admin, metrics)))
        return cls(entries)

    def authenticate(self, key: str | None) -> Principal | None:
        if not key:
            return None
        digest = hash_key(key)
        found: Principal | None = None
        for entry in self._entries:  # no early exit: time does not depend on which key matched
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found

    @staticmethod
    def add(
        path: str | Path,
        name: str,
        *,
        scope: Any = None,
        admin: bool = False,
        metrics: bool = False,
    ) -> tuple[str, Principal]:
        """Add a key to the keys file (created if missing, written atomically); returns the
        plaintext key, which is not stored anywhere."""
        p = Path(path)
        data: dict[str, Any] = {"keys": []}
        if p.exists():
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {"keys": []}
            KeyStore.parse(data, where=str(p))
        normalized = _scope(scope, "--scope")
        key = new_key()
        entry: dict[str, Any] = {"name": name, "hash": hash_key(key), "admin": admin}
        if normalized is not None:
            entry["scope"] = normalized
        if metrics:
            entry["metrics"] = True
        data.setdefault("keys", []).append(entry)
        KeyStore.parse(data, where=str(p))  # names unique, fields valid
        _write_keys(p, data)
        return key, Principal(name, normalized, admin, metrics)

    @staticmethod
    def revoke(path: str | Path, name: str) -> Principal:
        """Remove the key called ``name`` from the keys file (written atomically); returns the
        principal it was. A running service re-reads the file when it changes, so the key stops
        authenticating there without a restart. An unknown name is a ConfigError listing the
        names there are."""
        p = Path(path)
        store = KeyStore.load(p)  # a missing or invalid file is an error, as for `keys list`
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {"keys": []}
        names = [entry_name for entry_name, _ in store.principals()]
        if name not in names:
            shown = ", ".join(repr(n) for n in names) or "(none)"
            raise ConfigError(f"no key named {name!r} in {str(p)!r}; the keys there: {shown}")
        revoked = dict(store.principals())[name]
        data["keys"] = [k for k in data.get("keys") or [] if k.get("name") != name]
        KeyStore.parse(data, where=str(p))
        _write_keys(p, data)
        return revoked


def _write_keys(path: Path, data: Mapping[str, Any]) -> None:
    """Write a keys file atomically (a temporary file renamed over it), readable by its owner
    only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".keys-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(dict(data), f, sort_keys=False)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _scope(value: Any, where: str) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} is not valid JSON: {exc.msg}") from exc
    try:
        node = parse_filter(value)
    except FilterError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return to_json(node) if node is not None else None
