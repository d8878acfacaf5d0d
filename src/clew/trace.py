"""Trace storage and comparison: every search/ask writes one trace; ``clew replay`` diffs two.

A trace is a JSON-able mapping (config, index release, analyzer and model versions, route, every
intermediate list, reranker ran/fell back, timings). This module does not decide what goes in
it; it stores traces under ``<directory>/traces/<trace_id>.json`` and compares two of them.

Storage rules
-------------
* Values are normalized before hashing and writing: tuples become lists, numpy scalars and arrays
  become Python numbers and lists, and **non-finite floats become the strings** ``"nan"``,
  ``"inf"`` and ``"-inf"`` (JSON has no such numbers). Finite floats round-trip bit for bit.
  Mapping keys must be strings. Anything else raises :class:`~clew.errors.StoreError` naming
  the path of the bad value.
* :meth:`TraceStore.write` adds ``created_at`` (UTC ISO 8601, microseconds, ``Z``) and
  ``format`` (:data:`TRACE_VERSION`) when absent, and always sets ``trace_id`` to the content id
  (:func:`trace_id_for`), so a stored trace satisfies ``trace_id_for(t) == t["trace_id"]``.
* Files are written atomically (temporary file in the same folder, then ``os.replace``); a
  reader never sees half a trace. Files are not fsync-ed (a trace is not worth a disk flush on
  the query path).
* Order is write order: each write stamps the file's mtime with a per-process strictly
  increasing nanosecond clock; ties (other processes, coarse file systems) break on the name.
  After a write the oldest files beyond ``keep`` are removed; the file just written is never
  removed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clew.errors import ConfigError, QueryError, StoreError

__all__ = [
    "ABSENT",
    "TRACE_VERSION",
    "VOLATILE",
    "Absent",
    "Difference",
    "TraceStore",
    "diff_traces",
    "summarize_differences",
    "trace_id_for",
]

TRACE_VERSION = "clew-trace/1"

VOLATILE: frozenset[str] = frozenset({"trace_id", "created_at", "timings_ms", "seconds"})
"""Keys whose values differ between identical runs (ignored by diff_traces at any depth)."""

_ID_RE = re.compile(r"tr-[0-9a-f]{20}")
_FILE_RE = re.compile(r"(tr-[0-9a-f]{20})\.json")
_ID_FORM = "'tr-' followed by 20 lowercase hex digits, e.g. 'tr-0123456789abcdef0123'"
_TMP_PREFIX = ".trace-"
_TMP_SUFFIX = ".tmp"
_STALE_TMP_SECONDS = 3600.0
_ALLOWED_VALUES = (
    "allowed: dict with str keys, list, tuple, str, int, float, bool, None "
    "(numpy scalars and arrays are converted)"
)
_MAX_REPR = 200
_log = logging.getLogger(__name__)

_stamp_lock = threading.Lock()
_last_stamp_ns = 0


def _next_stamp_ns() -> int:
    """Wall-clock nanoseconds, strictly increasing within this process by at least 1 µs."""
    global _last_stamp_ns
    with _stamp_lock:
        stamp = max(time.time_ns(), _last_stamp_ns + 1000)
        _last_stamp_ns = stamp
        return stamp


def _iso_utc(stamp_ns: int) -> str:
    seconds, rest = divmod(stamp_ns, 1_000_000_000)
    moment = dt.datetime.fromtimestamp(seconds, tz=dt.UTC).replace(microsecond=rest // 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- normalization


def _key_path(path: str, key: str) -> str:
    if key and not any(c in key for c in ".[]'\""):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _normalize(value: Any, path: str, drop: Collection[str], stack: set[int]) -> Any:
    """A JSON-ready copy of ``value`` (see the module docstring), without keys in ``drop``."""
    kind = type(value)
    if value is None or kind is str or kind is bool or kind is int:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if kind is list and all(
        type(v) is str or type(v) is int or (type(v) is float and math.isfinite(v)) for v in value
    ):
        return list(value)  # the common flat case: nothing to convert, no cycle possible
    if isinstance(value, str):  # str subclasses such as StrEnum members
        return str.__str__(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        if math.isfinite(number):
            return number
        return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")
    if isinstance(value, np.ndarray):
        return _normalize(value.tolist(), path, drop, stack)
    if isinstance(value, Mapping | list | tuple):
        marker = id(value)
        if marker in stack:
            raise StoreError(f"trace value at {path or '<root>'!r} contains itself (a cycle)")
        stack.add(marker)
        try:
            if isinstance(value, Mapping):
                out: dict[str, Any] = {}
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise StoreError(
                            f"trace key {key!r} at {path or '<root>'!r} is a "
                            f"{type(key).__name__}; allowed: str keys only"
                        )
                    if key in drop:
                        continue
                    out[str.__str__(key)] = _normalize(item, _key_path(path, key), drop, stack)
                return out
            return [_normalize(item, f"{path}[{i}]", drop, stack) for i, item in enumerate(value)]
        finally:
            stack.discard(marker)
    raise StoreError(
        f"trace value at {path or '<root>'!r} is a {type(value).__name__} "
        f"({_short_repr(value)}); {_ALLOWED_VALUES}"
    )


def _canonical(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def trace_id_for(trace: Mapping[str, Any]) -> str:
    """Deterministic content id: 'tr-' + first 20 hex chars of sha256 over the canonical JSON
    (sort_keys, separators=(',', ':'), ensure_ascii=False) of the trace WITHOUT volatile keys,
    plus the created_at value (so two identical queries at different times get different ids).

    Volatile keys (:data:`VOLATILE`) are dropped at any depth, the rest is normalized as it is
    for storage, and the hashed text is the canonical JSON of
    ``{"content": <normalized trace>, "created_at": <top-level created_at or null>}``.
    """
    content = _normalize(trace, "", VOLATILE, set())
    created_at = _normalize(trace.get("created_at"), "created_at", (), set())
    return _content_id(content, created_at)


def _content_id(content: Any, created_at: Any) -> str:
    text = _canonical({"content": content, "created_at": created_at})
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"tr-{digest[:20]}"


def _without(value: Any, drop: Collection[str]) -> Any:
    """An already normalized value without the keys in ``drop``, at any depth."""
    if type(value) is dict:
        return {k: _without(v, drop) for k, v in value.items() if k not in drop}
    if type(value) is list:
        return [_without(v, drop) for v in value]
    return value


# --------------------------------------------------------------------------- storage


class TraceStore:
    """Traces as one JSON file each under ``<directory>/traces``; the newest ``keep`` are kept.

    The folder is created on the first write; reading an empty or missing store is not an error
    for :meth:`latest` (it returns ``[]``).
    """

    __slots__ = ("_count", "_dir", "_keep")

    def __init__(self, directory: str | Path, *, keep: int = 1000) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigError(f"keep must be an integer >= 1 (traces to keep), got {keep!r}")
        self._dir = Path(directory) / "traces"
        self._keep = keep
        self._count: int | None = None
        """Traces in the folder as this store last knew (listed once, then counted)."""

    @property
    def directory(self) -> Path:
        """The folder holding the trace files (``<directory>/traces``)."""
        return self._dir

    @property
    def keep(self) -> int:
        return self._keep

    def write(self, trace: Mapping[str, Any]) -> str:
        """Store ``trace`` and return its id (see the module docstring for what is added)."""
        if not isinstance(trace, Mapping):
            raise StoreError(f"a trace must be a mapping with str keys, got {type(trace).__name__}")
        stamp = _next_stamp_ns()
        record = _normalize(trace, "", (), set())
        record.pop("trace_id", None)
        record.setdefault("created_at", _iso_utc(stamp))
        record.setdefault("format", TRACE_VERSION)
        # the same id as trace_id_for(record), without normalizing a second time
        trace_id = _content_id(_without(record, VOLATILE), record["created_at"])
        record["trace_id"] = trace_id
        try:
            text = json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False)
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: fall back to \u escapes (still exact)
            data = json.dumps(record, sort_keys=True, ensure_ascii=True, allow_nan=False).encode()
        target = self._dir / f"{trace_id}.json"
        self._atomic_write(target, data + b"\n", stamp)
        # housekeeping: the folder is listed on the first write, then writes are counted; past
        # ``keep`` the oldest go, down to ``keep`` less a tenth, so a full store is not listed
        # on every write
        if self._count is None:
            self._prune(protect=target.name, keep=self._keep)
        else:
            self._count += 1
            if self._count > self._keep:
                self._prune(protect=target.name, keep=self._keep - self._keep // 10)
        return trace_id

    def read(self, trace_id: str) -> dict[str, Any]:
        """The stored trace with id ``trace_id``.

        Raises :class:`QueryError` for an id of the wrong shape or one not in the store, and
        :class:`StoreError` for a file that cannot be read or parsed.
        """
        if not isinstance(trace_id, str) or _ID_RE.fullmatch(trace_id) is None:
            raise QueryError(f"invalid trace id {trace_id!r}; expected {_ID_FORM}")
        path = self._dir / f"{trace_id}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            newest = self.latest(3)
            known = ", ".join(newest) if newest else "none (the store is empty)"
            raise QueryError(
                f"no trace {trace_id!r} in {self._dir}; the newest are: {known}"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"cannot read trace file {path}: {exc}") from exc
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"trace file {path} is not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise StoreError(
                f"trace file {path} holds a JSON {type(value).__name__}; expected an object"
            )
        return value

    def latest(self, n: int = 10) -> list[str]:
        """Up to ``n`` trace ids, newest first."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"n must be an integer >= 0, got {n!r}")
        if n == 0:
            return []
        ordered = self._ordered()
        return [name[: -len(".json")] for _, name in reversed(ordered[-n:])]

    def __len__(self) -> int:
        return len(self._ordered())

    def __repr__(self) -> str:
        return f"TraceStore({str(self._dir)!r}, keep={self._keep})"

    # ------------------------------------------------------------------ internals

    def _atomic_write(self, target: Path, data: bytes, stamp_ns: int) -> None:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=self._dir)
        except OSError as exc:
            raise StoreError(f"cannot create trace folder or file in {self._dir}: {exc}") from exc
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.utime(tmp_name, ns=(stamp_ns, stamp_ns))
            os.replace(tmp_name, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise StoreError(f"cannot write trace file {target}: {exc}") from exc
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise

    def _entries(self) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self._dir) as it:
                return list(it)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list trace folder {self._dir}: {exc}") from exc

    def _ordered(self) -> list[tuple[int, str]]:
        """(mtime_ns, file name) of every trace file, oldest first."""
        out: list[tuple[int, str]] = []
        for entry in self._entries():
            if _FILE_RE.fullmatch(entry.name) is None:
                continue
            try:
                out.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
            except FileNotFoundError:  # removed by a concurrent prune
                continue
        out.sort()
        return out

    def _prune(self, *, protect: str, keep: int) -> None:
        entries = self._entries()
        now = time.time()
        for entry in entries:  # temp files left behind by a crashed writer
            if entry.name.startswith(_TMP_PREFIX) and entry.name.endswith(_TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    if now - entry.stat(follow_symlinks=False).st_mtime > _STALE_TMP_SECONDS:
                        os.unlink(entry.path)
        count = sum(1 for e in entries if _FILE_RE.fullmatch(e.name) is not None)
        self._count = count
        if count <= keep:
            return
        ordered = [name for _, name in self._ordered() if name != protect]
        excess = len(ordered) + 1 - keep
        self._count = count - max(excess, 0)
        for name in ordered[: max(excess, 0)]:
            try:
                os.unlink(self._dir / name)
            except FileNotFoundError:  # a concurrent prune got there first
                continue
            except OSError as exc:  # housekeeping must not fail the search that wrote a trace
                _log.warning("cannot remove old trace %s: %s", self._dir / name, exc)


# --------------------------------------------------------------------------- comparison


class Absent(enum.Enum):
    """Marks the missing side of an added or removed key (``repr`` is ``<absent>``)."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = Absent.ABSENT


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 1] + "…"


@dataclass(frozen=True, slots=True)
class Difference:
    """One difference between two traces.

    ``before``/``after`` is :data:`ABSENT` for an added/removed key; for a list whose length
    changed, ``path`` ends in ``.length`` and the values are the two lengths.
    """

    path: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {_short_repr(self.before)} -> {_short_repr(self.after)}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _numbers_equal(a: Any, b: Any, tol: float) -> bool:
    x, y = float(a), float(b)
    if isinstance(a, int | np.integer) and isinstance(b, int | np.integer):
        return int(a) == int(b)  # exact, even beyond 2**53
    if x == y or (math.isnan(x) and math.isnan(y)):
        return True
    return tol > 0.0 and abs(x - y) <= tol


def _diff(
    a: Any,
    b: Any,
    path: str,
    ignore: Collection[str],
    tol: float,
    limit: int,
    out: list[Difference],
) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = sorted(set(a) | set(b), key=str)
        for key in keys:
            if len(out) >= limit:
                return
            if key in ignore:
                continue
            sub = _key_path(path, key) if isinstance(key, str) else f"{path}[{key!r}]"
            if key not in a:
                out.append(Difference(sub, ABSENT, b[key]))
            elif key not in b:
                out.append(Difference(sub, a[key], ABSENT))
            else:
                _diff(a[key], b[key], sub, ignore, tol, limit, out)
        return
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            out.append(Difference(f"{path}.length", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if len(out) >= limit:
                return
            _diff(x, y, f"{path}[{i}]", ignore, tol, limit, out)
        return
    if _is_number(a) and _is_number(b):
        if not _numbers_equal(a, b, tol):
            out.append(Difference(path, a, b))
        return
    if type(a) is not type(b) or a != b:
        out.append(Difference(path, a, b))


def diff_traces(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    ignore: Collection[str] = VOLATILE,
    float_tol: float = 0.0,
    limit: int = 50,
) -> list[Difference]:
    """Structural diff: dict keys added/removed/changed, list length changes reported once
    (path with '.length') then element-wise for the common prefix; floats equal when
    |a-b| <= float_tol (0.0 = bit for bit); keys in `ignore` skipped at any depth; at most
    `limit` differences, in deterministic (sorted key) order.

    Numbers compare by value (``1 == 1.0``; ``0.0 == -0.0``; NaN equals NaN); two ints compare
    exactly whatever ``float_tol``; ``True`` is not a number. Tuples and lists compare alike.
    A result of exactly ``limit`` items may be cut short.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be an integer >= 1, got {limit!r}")
    if not isinstance(float_tol, int | float) or not (
        math.isfinite(float_tol) and float_tol >= 0.0
    ):
        raise ConfigError(f"float_tol must be a finite number >= 0, got {float_tol!r}")
    out: list[Difference] = []
    _diff(before, after, "", frozenset(ignore), float(float_tol), limit, out)
    return out


def summarize_differences(diffs: Sequence[Difference], *, limit: int | None = None) -> str:
    """A readable multi-line report; ``"identical"`` when there are no differences.

    Pass the ``limit`` given to :func:`diff_traces` to get a note when the list may be cut short.
    """
    if not diffs:
        return "identical"
    noun = "difference" if len(diffs) == 1 else "differences"
    lines = [f"{len(diffs)} {noun}:"]
    lines.extend(f"  {d}" for d in diffs)
    if limit is not None and len(diffs) >= limit:
        lines.append(f"  (stopped at {limit}; there may be more)")
    return "\n".join(lines)
