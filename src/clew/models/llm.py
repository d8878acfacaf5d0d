"""Any OpenAI-compatible chat endpoint: settings, a small client, an LLM grader, answer prompts.

clew never needs an LLM: retrieval, reranking and extractive answers run without one. When an
endpoint is configured (``CLEW_LLM_BASE_URL`` and friends, see :meth:`LLMSettings.from_env`) it
can grade candidates (:class:`LLMGrader`, a :class:`~clew.protocols.Reranker`) and write
generative answers with citations (:func:`answer_messages`, :func:`parse_cited`).

Every failure of the endpoint (cannot connect, timeout, non-2xx status, a body that is not the
chat-completions shape, empty content) raises :class:`~clew.errors.LLMError` with a one-line
reason; the engine then falls back (fused order, extractive answer). The API key never appears in
a message, a ``repr`` or :meth:`LLMSettings.to_dict`.

``httpx`` is imported when a :class:`ChatClient` is created, so ``import clew`` stays light.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from clew.errors import ConfigError, LLMError
from clew.protocols import RerankCandidate, RerankScores

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

NOT_FOUND = "NOT_FOUND"
"""What the model is told to reply, exactly, when the passages do not contain the answer."""

MIN_GRADE = 0
MAX_GRADE = 3

_EXCERPT = 160


def _check(cond: bool, name: str, value: object, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{name}={value!r} is invalid; allowed: {allowed}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _redact_url(url: str) -> str:
    """``url`` without user:password (which may hold a credential)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _one_line(text: str, limit: int = _EXCERPT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """Where the OpenAI-compatible endpoint is and how to call it."""

    base_url: str
    """Up to and including the API version, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    api_key: str = field(default="", repr=False)
    """Sent as ``Authorization: Bearer``; never shown in ``repr``, ``to_dict`` or errors."""
    timeout_s: float = 30.0
    max_tokens: int = 512
    temperature: float = 0.0

    def __post_init__(self) -> None:
        url = self.base_url if isinstance(self.base_url, str) else ""
        try:
            parts = urlsplit(url)
            ok_url = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok_url = False
        _check(
            ok_url and url.startswith(("http://", "https://")),
            "llm.base_url",
            _redact_url(url) if url else self.base_url,
            "an http:// or https:// URL with a host, e.g. 'http://127.0.0.1:8000/v1'",
        )
        _check(
            isinstance(self.model, str) and bool(self.model.strip()),
            "llm.model",
            self.model,
            "a non-empty model name",
        )
        _check(isinstance(self.api_key, str), "llm.api_key", type(self.api_key), "a string")
        _check(
            _is_number(self.timeout_s) and 0.0 < self.timeout_s <= 600.0,
            "llm.timeout_s",
            self.timeout_s,
            "seconds in (0, 600]",
        )
        _check(
            isinstance(self.max_tokens, int)
            and not isinstance(self.max_tokens, bool)
            and self.max_tokens >= 1,
            "llm.max_tokens",
            self.max_tokens,
            "an integer >= 1",
        )
        _check(
            _is_number(self.temperature) and 0.0 <= self.temperature <= 2.0,
            "llm.temperature",
            self.temperature,
            "0.0..2.0",
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LLMSettings | None:
        """Settings from ``CLEW_LLM_BASE_URL``, ``CLEW_LLM_MODEL``, ``CLEW_LLM_API_KEY`` and
        ``CLEW_LLM_TIMEOUT`` (seconds); ``None`` when the base URL is unset or empty."""
        env = os.environ if environ is None else environ
        base_url = env.get("CLEW_LLM_BASE_URL", "").strip()
        if not base_url:
            return None
        model = env.get("CLEW_LLM_MODEL", "").strip()
        if not model:
            raise ConfigError(
                f"CLEW_LLM_MODEL={model!r} is invalid; allowed: a non-empty model name "
                "(required when CLEW_LLM_BASE_URL is set)"
            )
        raw_timeout = env.get("CLEW_LLM_TIMEOUT", "").strip()
        timeout_s = 30.0
        if raw_timeout:
            try:
                timeout_s = float(raw_timeout)
            except ValueError:
                timeout_s = math.nan
            _check(
                math.isfinite(timeout_s) and 0.0 < timeout_s <= 600.0,
                "CLEW_LLM_TIMEOUT",
                raw_timeout,
                "seconds in (0, 600]",
            )
        return cls(
            base_url=base_url,
            model=model,
            api_key=env.get("CLEW_LLM_API_KEY", "").strip(),
            timeout_s=timeout_s,
        )

    @property
    def endpoint(self) -> str:
        """The chat-completions URL."""
        return f"{self.base_url.rstrip('/')}/chat/completions"

    def to_dict(self) -> dict[str, Any]:
        """For traces and logs: everything but the key (``api_key_set`` tells whether one is)."""
        return {
            "base_url": _redact_url(self.base_url),
            "model": self.model,
            "api_key_set": bool(self.api_key),
            "timeout_s": self.timeout_s,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }


class ChatClient:
    """A blocking OpenAI chat-completions client. Close it (or use it as a context manager)."""

    def __init__(self, settings: LLMSettings) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - httpx is installed with clew
            raise LLMError(
                f"the LLM client needs httpx, which cannot be imported ({exc}); install httpx"
            ) from exc
        self.settings = settings
        self._url = settings.endpoint
        self._shown_url = _redact_url(self._url)
        headers = {"Accept": "application/json"}
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        self._client: httpx.Client = httpx.Client(timeout=settings.timeout_s, headers=headers)

    def __repr__(self) -> str:
        return f"ChatClient(endpoint={self._shown_url!r}, model={self.settings.model!r})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _error(self, reason: str) -> LLMError:
        message = f"LLM endpoint {self._shown_url}: {reason}"
        if self.settings.api_key:
            message = message.replace(self.settings.api_key, "***")
        return LLMError(_one_line(message, 400))

    def complete(self, messages: Sequence[Mapping[str, str]], *, json_mode: bool = False) -> str:
        """Send ``messages``; return the first choice's content. Raises :class:`LLMError`."""
        import httpx

        body: dict[str, Any] = {
            "model": self.settings.model,
            "messages": [self._message(i, m) for i, m in enumerate(messages)],
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        started = time.perf_counter()
        try:
            response = self._client.post(self._url, json=body)
        except httpx.TimeoutException as exc:
            raise self._error(f"timed out after {float(self.settings.timeout_s)} s") from exc
        except httpx.ConnectError as exc:
            raise self._error(f"cannot connect ({exc})") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise self._error(f"request failed ({type(exc).__name__}: {exc})") from exc
        elapsed = time.perf_counter() - started
        if not 200 <= response.status_code < 300:
            raise self._error(f"HTTP {response.status_code}{self._error_detail(response)}")
        try:
            payload = response.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._error(
                f"response is not JSON (starts {_one_line(response.text, 60)!r})"
            ) from exc
        content = _content(payload)
        if isinstance(content, LLMError):
            raise self._error(str(content))
        log.debug(
            "LLM %s answered %d chars in %.3f s (json_mode=%s)",
            self.settings.model,
            len(content),
            elapsed,
            json_mode,
        )
        return content

    @staticmethod
    def _message(i: int, message: Mapping[str, str]) -> dict[str, str]:
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(role, str) or not isinstance(content, str):
            raise LLMError(
                f"message {i} is invalid ({_one_line(repr(message), 80)}); "
                "allowed: a mapping with string 'role' and 'content'"
            )
        return {"role": role, "content": content}

    @staticmethod
    def _error_detail(response: httpx.Response) -> str:
        try:
            payload = response.json()
        except (ValueError, UnicodeDecodeError):
            text = response.text.strip()
            return f" ({_one_line(text, 120)})" if text else ""
        if isinstance(payload, Mapping):
            error = payload.get("error")
            if isinstance(error, Mapping) and isinstance(error.get("message"), str):
                return f" ({_one_line(error['message'], 120)})"
            if isinstance(error, str):
                return f" ({_one_line(error, 120)})"
        return ""


def _content(payload: object) -> str | LLMError:
    """``choices[0].message.content`` of a chat-completions body, or what is wrong with it."""
    if not isinstance(payload, Mapping):
        return LLMError(f"response is a JSON {type(payload).__name__}, not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        return LLMError("response has no choices")
    first = choices[0]
    message = first.get("message") if isinstance(first, Mapping) else None
    if not isinstance(message, Mapping):
        return LLMError("response has no choices[0].message")
    content = message.get("content")
    if content is None:
        return LLMError("response has no choices[0].message.content")
    if not isinstance(content, str):
        return LLMError(f"choices[0].message.content is a {type(content).__name__}, not a string")
    if not content.strip():
        reason = first.get("finish_reason") if isinstance(first, Mapping) else None
        hint = f" (finish_reason={reason!r})" if reason else ""
        return LLMError(f"response content is empty{hint}")
    return content


# --------------------------------------------------------------------------- grading

GRADE_SYSTEM_PROMPT = """\
You grade how relevant search results are to a query.

Grades:
0 = irrelevant: nothing to do with the query
1 = related: on the topic, but does not help answer the query
2 = partially answers: contains part of the answer
3 = answers: contains the answer to the query

Each candidate has a label (c1, c2, ...), a title and a text. Grade every candidate on its own.
Reply with ONLY a JSON object that maps each label to an integer grade, for example:
{"c1": 3, "c2": 0}
No other keys, no explanations, no markdown."""


def _flat(text: str) -> str:
    return " ".join(text.split())


def _truncate(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars].rstrip() + "…"


def grade_labels(n: int) -> tuple[str, ...]:
    """The labels the grader gives ``n`` candidates, in order: ``c1`` … ``cN``."""
    return tuple(f"c{i}" for i in range(1, n + 1))


def grade_messages(
    query: str, candidates: Sequence[RerankCandidate], max_chars: int = 1200
) -> list[dict[str, str]]:
    """The grading prompt. Each candidate takes one line, ``[cI] title: … | text: …``, with its
    whitespace collapsed and title and text each cut to ``max_chars`` characters."""
    lines = [f"Query: {_flat(query)}", "", "Candidates:"]
    for label, cand in zip(grade_labels(len(candidates)), candidates, strict=True):
        title = _truncate(_flat(cand.title), max_chars)
        text = _truncate(_flat(cand.text), max_chars)
        lines.append(f"[{label}] title: {title} | text: {text}")
    labels = grade_labels(len(candidates))
    span = labels[0] if len(labels) == 1 else f"{labels[0]}..{labels[-1]}" if labels else "none"
    lines += ["", f"Reply with only the JSON object of grades for {span}."]
    return [
        {"role": "system", "content": GRADE_SYSTEM_PROMPT},
        {"role": "user", "content": "\n".join(lines)},
    ]


_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)```", re.DOTALL)


def _load_json(text: str) -> object:
    """Parse ``text`` as JSON, tolerating a fenced block or prose around one object/list."""
    stripped = text.strip()
    attempts = [stripped]
    fence = _FENCE.search(stripped)
    if fence:
        attempts.append(fence.group(1).strip())
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = stripped.find(open_), stripped.rfind(close)
        if 0 <= start < end:
            attempts.append(stripped[start : end + 1])
    for attempt in attempts:
        try:
            return json.loads(attempt)
        except ValueError:
            continue
    raise LLMError(f"grades are not JSON: {_one_line(text, 80)!r}")


def _grade_value(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        grade = value
    elif isinstance(value, float) and value.is_integer():
        grade = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        grade = int(value.strip())
    else:
        return None
    return grade if MIN_GRADE <= grade <= MAX_GRADE else None


def _entries(data: object) -> list[tuple[object, object] | str]:
    """(label, grade) pairs in the order the model wrote them; a string for an entry without
    that shape (the problem to report)."""
    if isinstance(data, Mapping) and isinstance(data.get("grades"), Mapping | list):
        data = data["grades"]
    if isinstance(data, Mapping):
        return list(data.items())
    if isinstance(data, list):
        entries: list[tuple[object, object] | str] = []
        for item in data:
            if isinstance(item, Mapping) and "label" in item and "grade" in item:
                entries.append((item["label"], item["grade"]))
            else:
                entries.append(
                    f"ignored entry {_one_line(json.dumps(item), 60)}: "
                    'allowed {"label": ..., "grade": ...}'
                )
        return entries
    raise LLMError(
        f"grades are a JSON {type(data).__name__}, not an object mapping labels to grades"
    )


def parse_grades(text: str, labels: Sequence[str]) -> tuple[dict[str, int], tuple[str, ...]]:
    """Grades (label → 0..3) from a model's reply, and the problems found in it.

    Accepts ``{"c1": 3, ...}``, the same inside a fenced block or under ``{"grades": ...}``, and
    ``[{"label": "c1", "grade": 3}, ...]``. Grades may be integers, integral floats or digit
    strings. Invented labels, grades outside 0..3, duplicates and ungraded labels are reported
    and skipped. Raises :class:`LLMError` when the reply is not JSON or grades nothing usable.
    """
    data = _load_json(text)
    problems: list[str] = []
    known = {label: label for label in labels}
    folded = {label.strip().lower(): label for label in labels}
    grades: dict[str, int] = {}
    for entry in _entries(data):
        if isinstance(entry, str):
            problems.append(entry)
            continue
        raw_label, raw_grade = entry
        key = raw_label.strip() if isinstance(raw_label, str) else None
        label = None if key is None else known.get(key) or folded.get(key.lower())
        if label is None:
            problems.append(f"ignored invented label {_one_line(repr(raw_label), 40)}")
            continue
        grade = _grade_value(raw_grade)
        if grade is None:
            problems.append(
                f"ignored grade {_one_line(repr(raw_grade), 40)} for {label}: "
                f"allowed integers {MIN_GRADE}..{MAX_GRADE}"
            )
            continue
        if label in grades:
            problems.append(f"ignored second grade {grade} for {label} (kept {grades[label]})")
            continue
        grades[label] = grade
    problems.extend(f"no grade for {label}" for label in labels if label not in grades)
    if labels and not grades:
        detail = "; ".join(problems[:3]) + ("; …" if len(problems) > 3 else "")
        raise LLMError(f"no usable grade in the reply ({detail})")
    return grades, tuple(problems)


class LLMGrader:
    """A :class:`~clew.protocols.Reranker` that asks an LLM to grade each candidate 0..3.

    Scores are the grades as floats; a candidate the model left out or garbled scores ``None``
    (ranked after the graded ones, in fused order) and the problem is reported in ``notes``.
    Endpoint failures and replies with no usable grade raise :class:`LLMError`.
    """

    name = "llm-grader"

    def __init__(self, client: ChatClient, *, max_chars: int = 1200) -> None:
        _check(
            isinstance(max_chars, int) and not isinstance(max_chars, bool) and max_chars >= 1,
            "llm_grader.max_chars",
            max_chars,
            "an integer >= 1",
        )
        self.client = client
        self.max_chars = max_chars

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        if not candidates:
            return RerankScores(scores=())
        labels = grade_labels(len(candidates))
        messages = grade_messages(query, candidates, self.max_chars)
        reply = self.client.complete(messages, json_mode=True)
        grades, problems = parse_grades(reply, labels)
        if problems:
            log.debug("LLM grader: %d problem(s): %s", len(problems), "; ".join(problems))
        scores = tuple(float(grades[lb]) if lb in grades else None for lb in labels)
        explain: tuple[Mapping[str, float], ...] = tuple(
            {"grade": float(grades[lb])} if lb in grades else {} for lb in labels
        )
        return RerankScores(scores=scores, notes=problems, explain=explain)


# --------------------------------------------------------------------------- answers

ANSWER_SYSTEM_PROMPT = f"""\
You answer questions using ONLY the numbered passages you are given.

Rules:
- Use only facts stated in the passages; do not use outside knowledge.
- Cite every claim with the number of its passage in square brackets, e.g. [1], or [1][3] when \
several passages support it. Use only the numbers given to the passages.
- If the passages do not contain the answer, reply exactly {NOT_FOUND} and nothing else.
- Be concise."""


def answer_messages(
    question: str, passages: Sequence[tuple[int, str, str]]
) -> list[dict[str, str]]:
    """The generative-answer prompt; ``passages`` are (citation number, title, text)."""
    blocks = []
    for number, title, text in passages:
        head = f"[{number}] {_flat(title)}" if title.strip() else f"[{number}]"
        blocks.append(f"{head}\n{text.strip()}")
    numbers = ", ".join(f"[{number}]" for number, _, _ in passages) or "none"
    user = (
        "Passages:\n\n"
        + "\n\n".join(blocks)
        + f"\n\nQuestion: {question.strip()}\n\n"
        + f"Answer from the passages, citing them as {numbers}, or reply {NOT_FOUND}."
    )
    return [
        {"role": "system", "content": ANSWER_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


_CITATION = re.compile(r"\[\s*(\d+(?:\s*[,;]\s*\d+)*)\s*\]")


def parse_cited(text: str, allowed: Collection[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Citation numbers in ``text`` (``[1]``, ``[1, 3]``, ``[1][2]``), first appearance first:
    (the allowed ones, the ones not allowed)."""
    seen: set[int] = set()
    good: list[int] = []
    bad: list[int] = []
    for match in _CITATION.finditer(text):
        for part in re.split(r"[,;]", match.group(1)):
            number = int(part.strip())
            if number in seen:
                continue
            seen.add(number)
            (good if number in allowed else bad).append(number)
    return tuple(good), tuple(bad)


def settings_for(
    base_url: str, model: str, timeout_s: float, environ: Mapping[str, str] | None = None
) -> LLMSettings:
    """Settings from config values, each empty one taken from CLEW_LLM_* (the key always is)."""
    env = os.environ if environ is None else environ
    return LLMSettings(
        base_url=base_url or env.get("CLEW_LLM_BASE_URL", ""),
        model=model or env.get("CLEW_LLM_MODEL", ""),
        api_key=env.get("CLEW_LLM_API_KEY", ""),
        timeout_s=timeout_s,
    )
