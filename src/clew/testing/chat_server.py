"""A real local OpenAI-compatible chat server that misbehaves on demand. For tests only.

It listens on ``127.0.0.1`` (a free port), answers ``POST /v1/chat/completions`` in the
chat-completions shape, and records what it received::

    with ChatServer() as srv:
        client = ChatClient(LLMSettings(base_url=srv.base_url, model="fake"))
        srv.mode = "http-500"
        ...
        srv.requests      # every request body, parsed (a dict)
        srv.auth_headers  # every Authorization header (None when absent)

Modes (``srv.mode``), checked when set:

``echo-grades`` (default)
    Grades the candidates of the LAST user message, as :func:`clew.models.llm.grade_messages`
    writes them: every line starting ``[cN]`` is candidate ``cN`` and the rest of that line its
    title and text. Rule: grade **3** when that line contains the word ``relevant`` (any case, as
    a whole word: ``irrelevant`` does not count), otherwise **0**. Content is a JSON object such
    as ``{"c1": 3, "c2": 0}``.
``fixed``
    Content is ``srv.reply``, verbatim (garbled grades, generative answers, an empty string).
``invalid-json``
    Content is prose that is not JSON.
``http-500``
    HTTP 500 with an OpenAI-style error body.
``slow``
    Waits ``srv.delay_s`` seconds (default 5) before answering like ``echo-grades``; closing the
    server cuts the wait short, so a timed-out client never holds up a test.
``garbage-body``
    HTTP 200 whose body is not JSON.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, cast, get_args

from clew.errors import ConfigError

log = logging.getLogger(__name__)

ChatMode = Literal["echo-grades", "fixed", "invalid-json", "http-500", "slow", "garbage-body"]
MODES: tuple[str, ...] = get_args(ChatMode)

CHAT_PATH = "/v1/chat/completions"

_CANDIDATE_LINE = re.compile(r"^\[(c\d+)\](.*)$", re.MULTILINE)
_RELEVANT = re.compile(r"\brelevant\b", re.IGNORECASE)


def echo_grades(user_message: str) -> dict[str, int]:
    """The ``echo-grades`` rule: 3 for a ``[cN]`` line containing the word ``relevant``, else 0."""
    return {
        m.group(1): 3 if _RELEVANT.search(m.group(2)) else 0
        for m in _CANDIDATE_LINE.finditer(user_message)
    }


class _Server(ThreadingHTTPServer):
    # Non-daemon handler threads are tracked, so server_close() joins them: nothing outlives
    # the `with` block.
    daemon_threads = False
    block_on_close = True
    owner: ChatServer

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall on a machine without
        # DNS; the name is not needed.
        socketserver.TCPServer.server_bind(self)
        host, port = self.socket.getsockname()[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("chat server: error while handling %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: handler threads end promptly

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else {}
        except (ValueError, UnicodeDecodeError):
            body = None
        owner._record(
            body if isinstance(body, dict) else {"_unparsed": raw.decode("utf-8", "replace")},
            self.headers.get("Authorization"),
        )
        if self.path.split("?", 1)[0].rstrip("/") != CHAT_PATH:
            self._send_json(404, _error(f"no route {self.path}; allowed: POST {CHAT_PATH}"))
            return
        if not isinstance(body, dict):
            self._send_json(400, _error("request body is not a JSON object"))
            return
        mode = owner.mode
        if mode == "http-500":
            self._send_json(500, _error("simulated server error", "server_error"))
        elif mode == "garbage-body":
            self._send(200, b"<html>this is not JSON</html>", "application/json")
        elif mode == "invalid-json":
            self._send_json(200, _completion(body, "Sure! c1 looks great, c2 not so much."))
        elif mode == "fixed":
            self._send_json(200, _completion(body, owner.reply))
        else:  # echo-grades, slow
            if mode == "slow" and owner._closing.wait(owner.delay_s):
                return  # the server is closing: drop the connection without an answer
            grades = echo_grades(_last_user_message(body))
            self._send_json(200, _completion(body, json.dumps(grades)))

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. it timed out)


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


def _last_user_message(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else ""
    return ""


_ids = itertools.count(1)
_ids_lock = threading.Lock()


def _completion(request: dict[str, Any], content: str) -> dict[str, Any]:
    with _ids_lock:
        n = next(_ids)
    messages = request.get("messages")
    prompt = " ".join(
        str(m.get("content", "")) for m in messages or [] if isinstance(m, dict)
    ).split()
    completion = len(content.split())
    return {
        "id": f"chatcmpl-local-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model", "")),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": completion,
            "total_tokens": len(prompt) + completion,
        },
    }


class ChatServer:
    """A local chat-completions server on ``127.0.0.1``; use it as a context manager."""

    def __init__(
        self, *, mode: ChatMode = "echo-grades", reply: str = "", delay_s: float = 5.0
    ) -> None:
        self.mode = mode
        self.reply = reply
        """Content returned verbatim in ``fixed`` mode."""
        self.delay_s = delay_s
        """How long ``slow`` mode waits before answering."""
        self.requests: list[dict[str, Any]] = []
        """Every request body received, parsed (``{"_unparsed": text}`` when not JSON)."""
        self.auth_headers: list[str | None] = []
        """The ``Authorization`` header of every request, ``None`` when absent."""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def mode(self) -> ChatMode:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ConfigError(f"chat server mode={value!r} is invalid; allowed: {', '.join(MODES)}")
        self._mode = cast(ChatMode, value)

    @property
    def port(self) -> int:
        if self._server is None:
            raise ConfigError("chat server is not running; allowed: use it inside `with`")
        return self._server.server_port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _record(self, body: dict[str, Any], auth: str | None) -> None:
        with self._lock:
            self.requests.append(body)
            self.auth_headers.append(auth)

    def start(self) -> ChatServer:
        if self._server is not None:
            return self
        self._closing.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"clew-chat-server-{server.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._closing.set()
        server.shutdown()
        server.server_close()  # joins the handler threads
        if thread is not None:
            thread.join(timeout=5.0)
        self._server = self._thread = None

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
