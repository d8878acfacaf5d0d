from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from clew.errors import ConfigError, LLMError, ModelError
from clew.models.llm import (
    NOT_FOUND,
    ChatClient,
    LLMGrader,
    LLMSettings,
    answer_messages,
    grade_messages,
    parse_cited,
    parse_grades,
)
from clew.protocols import RerankCandidate, Reranker
from clew.testing.chat_server import ChatServer, echo_grades

LABELS = ("c1", "c2", "c3")


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables; the local server must be reached directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    with ChatServer() as srv:
        yield srv


@pytest.fixture
def srv(server: ChatServer) -> ChatServer:
    server.mode = "echo-grades"
    server.reply = ""
    server.delay_s = 5.0
    server.requests.clear()
    server.auth_headers.clear()
    return server


def settings(srv: ChatServer, **kw: object) -> LLMSettings:
    return LLMSettings(base_url=srv.base_url, model="fake-model", **kw)  # type: ignore[arg-type]


def cand(chunk_id: str, text: str, title: str = "T") -> RerankCandidate:
    return RerankCandidate(chunk_id=chunk_id, title=title, text=text, features={})


USER = [{"role": "user", "content": "hello"}]


# --------------------------------------------------------------------------- settings


def test_llm_error_is_a_model_error() -> None:
    assert issubclass(LLMError, ModelError)


@pytest.mark.parametrize(
    ("kw", "pattern"),
    [
        ({"base_url": "ftp://x/v1"}, r"llm.base_url='ftp://x/v1' is invalid; allowed: an http"),
        ({"base_url": "localhost:8000"}, r"llm.base_url='localhost:8000' is invalid"),
        ({"model": "  "}, r"llm.model='  ' is invalid; allowed: a non-empty model name"),
        ({"timeout_s": 0.0}, r"llm.timeout_s=0.0 is invalid; allowed: seconds in \(0, 600\]"),
        ({"timeout_s": 601}, r"llm.timeout_s=601 is invalid"),
        ({"max_tokens": 0}, r"llm.max_tokens=0 is invalid; allowed: an integer >= 1"),
        ({"temperature": -1.0}, r"llm.temperature=-1.0 is invalid; allowed: 0.0..2.0"),
    ],
)
def test_settings_validation_names_value(kw: dict[str, object], pattern: str) -> None:
    args: dict[str, object] = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", **kw}
    with pytest.raises(ConfigError, match=pattern):
        LLMSettings(**args)  # type: ignore[arg-type]


def test_settings_hide_the_key() -> None:
    s = LLMSettings(base_url="https://api.example.com/v1", model="m", api_key="sk-secret")
    assert "sk-secret" not in repr(s)
    d = s.to_dict()
    assert d["api_key_set"] is True and "api_key" not in d
    assert "sk-secret" not in json.dumps(d)
    assert s.endpoint == "https://api.example.com/v1/chat/completions"
    assert (
        LLMSettings(base_url="http://h/v1/", model="m").endpoint == "http://h/v1/chat/completions"
    )
    assert LLMSettings(base_url="http://h/v1", model="m").to_dict()["api_key_set"] is False


def test_from_env() -> None:
    assert LLMSettings.from_env({}) is None
    assert LLMSettings.from_env({"CLEW_LLM_BASE_URL": " ", "CLEW_LLM_MODEL": "m"}) is None
    s = LLMSettings.from_env(
        {
            "CLEW_LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "CLEW_LLM_MODEL": "qwen",
            "CLEW_LLM_API_KEY": "k",
            "CLEW_LLM_TIMEOUT": "2.5",
        }
    )
    assert s == LLMSettings(
        base_url="http://127.0.0.1:9/v1", model="qwen", api_key="k", timeout_s=2.5
    )
    s = LLMSettings.from_env({"CLEW_LLM_BASE_URL": "http://h/v1", "CLEW_LLM_MODEL": "m"})
    assert s is not None and s.timeout_s == 30.0 and s.api_key == ""
    with pytest.raises(ConfigError, match=r"CLEW_LLM_MODEL='' is invalid"):
        LLMSettings.from_env({"CLEW_LLM_BASE_URL": "http://h/v1"})
    with pytest.raises(ConfigError, match=r"CLEW_LLM_TIMEOUT='soon' is invalid"):
        LLMSettings.from_env(
            {"CLEW_LLM_BASE_URL": "http://h/v1", "CLEW_LLM_MODEL": "m", "CLEW_LLM_TIMEOUT": "soon"}
        )


# --------------------------------------------------------------------------- client


def test_client_ok_and_request_shape(srv: ChatServer) -> None:
    srv.mode = "fixed"
    srv.reply = "hi there"
    with ChatClient(settings(srv, max_tokens=64, temperature=0.2)) as client:
        assert client.complete(USER) == "hi there"
    (body,) = srv.requests
    assert body == {
        "model": "fake-model",
        "messages": USER,
        "temperature": 0.2,
        "max_tokens": 64,
    }
    assert srv.auth_headers == [None]


def test_client_sends_key_and_json_mode(srv: ChatServer) -> None:
    srv.mode = "fixed"
    srv.reply = "{}"
    with ChatClient(settings(srv, api_key="sk-test")) as client:
        assert client.complete(USER, json_mode=True) == "{}"
        assert "sk-test" not in repr(client)
    assert srv.auth_headers == ["Bearer sk-test"]
    assert srv.requests[0]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(
    ("mode", "reply", "pattern"),
    [
        ("http-500", "", r"HTTP 500 \(simulated server error\)"),
        ("garbage-body", "", r"response is not JSON"),
        ("fixed", "", r"response content is empty"),
        ("fixed", "   \n", r"response content is empty"),
    ],
)
def test_client_failures_raise_llm_error(
    srv: ChatServer, mode: str, reply: str, pattern: str
) -> None:
    srv.mode = mode  # type: ignore[assignment]
    srv.reply = reply
    with (
        ChatClient(settings(srv, api_key="sk-never-shown")) as client,
        pytest.raises(LLMError, match=pattern) as info,
    ):
        client.complete(USER)
    message = str(info.value)
    assert srv.base_url + "/chat/completions" in message
    assert "sk-never-shown" not in message and "\n" not in message


def test_client_timeout(srv: ChatServer) -> None:
    srv.mode = "slow"
    started = time.perf_counter()
    with (
        ChatClient(settings(srv, timeout_s=0.5)) as client,
        pytest.raises(LLMError, match=r"timed out after 0\.5 s"),
    ):
        client.complete(USER)
    assert time.perf_counter() - started < 3.0


def test_client_cannot_connect() -> None:
    with ChatServer() as srv:
        url = srv.base_url
    with (
        ChatClient(LLMSettings(base_url=url, model="m", timeout_s=2.0)) as client,
        pytest.raises(LLMError, match=r"cannot connect"),
    ):
        client.complete(USER)


def test_client_rejects_malformed_messages(srv: ChatServer) -> None:
    with (
        ChatClient(settings(srv)) as client,
        pytest.raises(LLMError, match=r"message 0 is invalid"),
    ):
        client.complete([{"role": "user"}])
    assert srv.requests == []


def test_server_wrong_path_and_unknown_mode(srv: ChatServer) -> None:
    with (
        ChatClient(LLMSettings(base_url=srv.base_url + "/x", model="m")) as client,
        pytest.raises(LLMError, match=r"HTTP 404"),
    ):
        client.complete(USER)
    with pytest.raises(ConfigError, match=r"mode='loud' is invalid; allowed: echo-grades"):
        srv.mode = "loud"  # type: ignore[assignment]


def test_slow_server_closes_promptly() -> None:
    started = time.perf_counter()
    with (
        ChatServer(mode="slow", delay_s=30.0) as srv,
        ChatClient(LLMSettings(base_url=srv.base_url, model="m", timeout_s=0.2)) as client,
        pytest.raises(LLMError, match="timed out"),
    ):
        client.complete(USER)
    assert time.perf_counter() - started < 3.0


# --------------------------------------------------------------------------- grader


def test_echo_grades_rule() -> None:
    text = (
        "Query: q\n\nCandidates:\n[c1] title: A | text: Relevant.\n[c2] title: B | text: irrelevant"
    )
    assert echo_grades(text) == {"c1": 3, "c2": 0}


def test_grade_messages_labels_and_truncation() -> None:
    msgs = grade_messages("what   is x?", [cand("a", "x " * 50, "Title\nOne"), cand("b", "y")], 20)
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert "0" in system and "3" in system and '{"c1": 3, "c2": 0}' in system
    assert "Query: what is x?" in user
    lines = [line for line in user.splitlines() if line.startswith("[c")]
    assert lines[0].startswith("[c1] title: Title One | text: ")
    assert lines[0].endswith("…") and len(lines[0].split("text: ")[1]) <= 21
    assert lines[1] == "[c2] title: T | text: y"


def test_grader_end_to_end(srv: ChatServer) -> None:
    candidates = [
        cand("doc#0", "Nothing to see here."),
        cand("doc#1", "This passage is relevant to the question."),
        cand("doc#2", "Multi-line\ntext that is irrelevant."),
    ]
    with ChatClient(settings(srv)) as client:
        grader = LLMGrader(client)
        assert isinstance(grader, Reranker) and grader.name == "llm-grader"
        result = grader.score("which passage?", candidates)
        assert grader.score("q", []).scores == ()
    assert result.scores == (0.0, 3.0, 0.0)
    assert result.explain == ({"grade": 0.0}, {"grade": 3.0}, {"grade": 0.0})
    assert result.notes == ()
    ranked = sorted(range(3), key=lambda i: -(result.scores[i] or 0.0))
    assert candidates[ranked[0]].chunk_id == "doc#1"
    assert srv.requests[0]["response_format"] == {"type": "json_object"}


def test_grader_reports_missing_and_invented(srv: ChatServer) -> None:
    srv.mode = "fixed"
    srv.reply = '```json\n{"c1": 2, "c9": 3}\n```'
    with ChatClient(settings(srv)) as client:
        result = LLMGrader(client).score("q", [cand("a", "x"), cand("b", "y")])
    assert result.scores == (2.0, None)
    assert result.explain == ({"grade": 2.0}, {})
    assert result.notes == ("ignored invented label 'c9'", "no grade for c2")


@pytest.mark.parametrize("mode", ["invalid-json", "http-500"])
def test_grader_failures_raise(srv: ChatServer, mode: str) -> None:
    srv.mode = mode  # type: ignore[assignment]
    with ChatClient(settings(srv)) as client, pytest.raises(LLMError):
        LLMGrader(client).score("q", [cand("a", "x")])


def test_grader_max_chars_validated(srv: ChatServer) -> None:
    with (
        ChatClient(settings(srv)) as client,
        pytest.raises(ConfigError, match=r"llm_grader.max_chars=0 is invalid"),
    ):
        LLMGrader(client, max_chars=0)


# --------------------------------------------------------------------------- parse_grades


@pytest.mark.parametrize(
    "text",
    [
        '{"c1": 3, "c2": 0, "c3": 1}',
        '```json\n{"c1": 3, "c2": 0, "c3": 1}\n```',
        '```\n{"c1": 3, "c2": 0, "c3": 1}\n```',
        '{"grades": {"c1": 3, "c2": 0, "c3": 1}}',
        '[{"label": "c1", "grade": 3}, {"label": "c2", "grade": 0}, {"label": "c3", "grade": 1}]',
        '{"grades": [{"label": "c1", "grade": 3}, {"label": "c2", "grade": 0},'
        ' {"label": "c3", "grade": 1}]}',
        'Here are the grades: {"c1": 3, "c2": 0.0, "c3": "1"}. Hope this helps!',
    ],
)
def test_parse_grades_accepted_forms(text: str) -> None:
    assert parse_grades(text, LABELS) == ({"c1": 3, "c2": 0, "c3": 1}, ())


def test_parse_grades_invented_and_garbled() -> None:
    grades, problems = parse_grades(
        '{"c1": 3, "c99": 2, "c2": "high", "c3": 7, "c4": null, "c5": true, "c6": 1.5}',
        ("c1", "c2", "c3", "c4", "c5", "c6"),
    )
    assert grades == {"c1": 3}
    assert problems == (
        "ignored invented label 'c99'",
        "ignored grade 'high' for c2: allowed integers 0..3",
        "ignored grade 7 for c3: allowed integers 0..3",
        "ignored grade None for c4: allowed integers 0..3",
        "ignored grade True for c5: allowed integers 0..3",
        "ignored grade 1.5 for c6: allowed integers 0..3",
        "no grade for c2",
        "no grade for c3",
        "no grade for c4",
        "no grade for c5",
        "no grade for c6",
    )


def test_parse_grades_missing_label_and_list_quirks() -> None:
    grades, problems = parse_grades(
        '[{"label": "c1", "grade": 2}, {"label": "c1", "grade": 0}, {"id": "c2"}]', LABELS
    )
    assert grades == {"c1": 2}
    assert problems[0] == "ignored second grade 0 for c1 (kept 2)"
    assert problems[1].startswith('ignored entry {"id": "c2"}')
    assert problems[2:] == ("no grade for c2", "no grade for c3")


def test_parse_grades_is_deterministic() -> None:
    text = '{"c3": 1, "c1": 0, "cX": 2}'
    assert parse_grades(text, LABELS) == parse_grades(text, LABELS)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("c1 is great, c2 is not", r"grades are not JSON: 'c1 is great, c2 is not'"),
        ('{"c1": 3', r"grades are not JSON"),
        ("3", r"grades are a JSON int"),
        ('{"c1": "high", "c7": 2}', r"no usable grade in the reply \(ignored grade 'high' for c1"),
        ("{}", r"no usable grade in the reply \(no grade for c1"),
        ("[]", r"no usable grade"),
    ],
)
def test_parse_grades_unusable_raises(text: str, pattern: str) -> None:
    with pytest.raises(LLMError, match=pattern):
        parse_grades(text, LABELS)


# --------------------------------------------------------------------------- answers


def test_answer_messages() -> None:
    msgs = answer_messages(
        "  What is the error code?  ",
        [(1, "Guide", "Error E42 means disk full."), (3, "", "Unrelated.")],
    )
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert NOT_FOUND in system and "[1]" in system and "only" in system.lower()
    assert "[1] Guide\nError E42 means disk full." in user
    assert "[3]\nUnrelated." in user
    assert "Question: What is the error code?" in user
    assert "[1], [3]" in user


def test_generative_answer_round_trip(srv: ChatServer) -> None:
    srv.mode = "fixed"
    srv.reply = "E42 means the disk is full [1]."
    msgs = answer_messages("What is E42?", [(1, "Guide", "Error E42 means disk full.")])
    with ChatClient(settings(srv)) as client:
        text = client.complete(msgs)
    assert parse_cited(text, {1}) == ((1,), ())
    assert srv.requests[0]["messages"] == msgs
    assert "response_format" not in srv.requests[0]


@pytest.mark.parametrize(
    ("text", "allowed", "expected"),
    [
        ("A [1]. B [2].", {1, 2}, ((1, 2), ())),
        ("A [1, 3].", {1, 2, 3}, ((1, 3), ())),
        ("A [2][1] and again [1].", {1, 2}, ((2, 1), ())),
        ("A [ 4 ; 1 ] B [7]", range(1, 5), ((4, 1), (7,))),
        ("A [9][1][9]", [1], ((1,), (9,))),
        ("no citations, [x], [], [1a]", {1}, ((), ())),
        (NOT_FOUND, {1}, ((), ())),
    ],
)
def test_parse_cited(
    text: str, allowed: set[int] | range | list[int], expected: tuple[tuple[int, ...], ...]
) -> None:
    assert parse_cited(text, allowed) == expected
