"""``clew serve | ui | mcp | keys``: the service commands (imported only when used)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from clew.errors import ConfigError
from clew.serve.children import stop_child, stop_on_signals

__all__ = ["run_service_command", "settings_from"]


def settings_from(values: dict[str, Any]) -> Any:
    """ServeSettings from CLI values (unset ones come from ``CLEW_*`` variables), with
    pydantic's errors turned into one clear ConfigError."""
    from clew.serve.settings import ServeSettings

    try:
        return ServeSettings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "settings"
            parts.append(f"{where}: {err.get('msg', '')}".replace("Value error, ", ""))
        raise ConfigError("; ".join(parts)) from None


def run_service_command(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    if args.command == "ui":
        return _ui(args)
    if args.command == "mcp":
        from clew.serve.mcp import main as mcp_main

        return mcp_main(list(args.mcp_args))
    return _keys(args)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from clew.engine import Engine, display_target
    from clew.serve.api import create_app

    settings = settings_from(
        {
            "index": args.index,
            "config": args.config,
            "keys": args.keys,
            "no_auth": True if args.no_auth else None,
            "host": args.host,
            "port": args.port,
            "eval_results": args.eval_results,
            "gates": args.gates,
        }
    )
    engine = None
    if args.create:
        from clew.config import EngineConfig

        config = EngineConfig.from_yaml(settings.config) if settings.config else None
        engine = Engine(
            settings.index, config, create=True, write_timeout=settings.request_timeout_s
        )
    app = create_app(settings, engine)
    print(
        f"clew serve: index {display_target(settings.index)} on "
        f"http://{settings.host}:{settings.port} "
        f"({'no auth, loopback only' if settings.no_auth else 'API keys required'}); "
        "OpenAPI at /docs",
        file=sys.stderr,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level)
    if engine is not None:
        engine.close()
    return 0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ui(args: argparse.Namespace) -> int:
    """``clew ui``: the UI for a running API (``--api``), or for ``--index`` with a loopback
    ``clew serve`` of its own. SIGTERM and SIGHUP (and Ctrl-C) stop the children it started,
    waiting for them to exit, before it exits itself (status 128 + the signal's number)."""
    from clew.serve.ui import launch

    key = os.environ.get("CLEW_API_KEY")
    with stop_on_signals():
        if args.api:
            return launch(args.api, key=key, port=args.port, host=args.host)
        if not args.index:
            raise ConfigError("give --api URL (a running `clew serve`) or --index DIR to serve one")
        port = _free_port("127.0.0.1")
        cmd = [
            sys.executable,
            "-m",
            "clew",
            "serve",
            "--store"
            if str(args.index).startswith(("postgresql://", "postgres://"))
            else "--index",
            args.index,
            "--no-auth",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        if args.eval_results:
            cmd += ["--eval-results", args.eval_results]
        if args.gates:
            cmd += ["--gates", args.gates]
        server: subprocess.Popen[bytes] | None = None
        url = f"http://127.0.0.1:{port}"
        try:
            server = subprocess.Popen(cmd)
            _wait_healthy(url, server, timeout=120)
            return launch(url, key=None, port=args.port, host=args.host)
        finally:
            if server is not None:
                stop_child(server)


def _wait_healthy(url: str, server: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise ConfigError(f"`clew serve` exited with code {server.returncode}; see above")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise ConfigError(f"`clew serve` did not answer at {url}/health within {timeout:g} s")


def _keys(args: argparse.Namespace) -> int:
    from clew.serve.auth import KeyStore

    if args.keys_command == "add":
        key, principal = KeyStore.add(
            Path(args.file),
            args.name,
            scope=args.scope,
            admin=args.admin,
            metrics=bool(getattr(args, "metrics", False)),  # `--metrics`, where the parser has it
        )
        print(key)
        print(
            f"added key {principal.name!r} (scope {json.dumps(principal.scope)}, "
            f"admin {str(principal.admin).lower()}, metrics {str(principal.metrics).lower()}) "
            f"to {args.file}; the key is shown only now",
            file=sys.stderr,
        )
        return 0
    if args.keys_command == "revoke":
        revoked = KeyStore.revoke(Path(args.file), args.name)
        print(
            f"revoked key {args.name!r} (scope {json.dumps(revoked.scope)}, admin "
            f"{str(revoked.admin).lower()}) in {args.file}; it no longer authenticates",
            file=sys.stderr,
        )
        return 0
    store = KeyStore.load(args.file)
    for name, principal in store.principals():
        line = f"{name}\tadmin={str(principal.admin).lower()}\tscope={json.dumps(principal.scope)}"
        if principal.metrics:
            line += "\tmetrics=true"
        print(line)
    return 0
