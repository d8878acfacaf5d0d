"""The web UI: a Streamlit thin client of the HTTP API (``clew ui``).

The app (``app.py``) talks to a running ``clew serve`` over HTTP only; it never opens an index.
:func:`launch` runs it with Streamlit in a child process. The API key travels in the child's
environment (``CLEW_API_KEY``), never on its command line, so it does not show up in ``ps`` or
in logs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from clew.serve.children import stop_child

__all__ = ["API_KEY_ENV", "API_URL_ENV", "app_path", "launch", "streamlit_command"]

API_URL_ENV = "CLEW_API_URL"
API_KEY_ENV = "CLEW_API_KEY"

logger = logging.getLogger(__name__)


def app_path() -> Path:
    """The Streamlit script of the UI."""
    return Path(__file__).resolve().with_name("app.py")


def streamlit_command(*, port: int = 8501, host: str = "127.0.0.1") -> list[str]:
    """The command line that serves the UI (it holds no secret)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_path()),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def launch(
    api_url: str, *, key: str | None = None, port: int = 8501, host: str = "127.0.0.1"
) -> int:
    """Serve the UI for the API at ``api_url`` until Streamlit exits; return its exit code.
    Interrupted (Ctrl-C: 130, or an exception such as a stop signal's), it stops Streamlit and
    waits for it before returning or raising.

    ``key`` is the API key the UI sends as ``Authorization: Bearer``; ``None`` leaves whatever
    ``CLEW_API_KEY`` the environment already holds.
    """
    if not api_url.startswith(("http://", "https://")):
        raise ValueError(f"api_url={api_url!r} is invalid; allowed: an http:// or https:// URL")
    if not 0 < port < 65536:
        raise ValueError(f"port={port!r} is invalid; allowed: 1..65535")
    env = dict(os.environ)
    env[API_URL_ENV] = api_url
    if key is not None:
        env[API_KEY_ENV] = key
    command = streamlit_command(port=port, host=host)
    logger.info(
        "starting the UI on http://%s:%d for %s (%s)",
        host,
        port,
        api_url,
        "with an API key" if env.get(API_KEY_ENV) else "without an API key",
    )
    proc = subprocess.Popen(command, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:  # Ctrl-C, or a stop signal (clew.serve.children.stop_on_signals): stop it first
        stop_child(proc)
