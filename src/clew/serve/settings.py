"""Service settings: one record, from arguments, ``CLEW_*`` environment variables or a file.

Limits protect the service from one request taking all of it: query length, k, documents per
batch, characters per document, request body bytes, and seconds per request; ``ingest_share``
keeps ingest jobs from taking the cores from searches.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServeSettings", "is_loopback"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServeSettings(BaseSettings):
    """Settings of ``clew serve`` (and of ``create_app``). Environment: ``CLEW_INDEX`` etc."""

    model_config = SettingsConfigDict(env_prefix="CLEW_", extra="forbid", frozen=True)

    index: Path | str = Field(
        description="index directory (created by `clew ingest`) or a PostgreSQL URL"
    )
    config: Path | None = Field(None, description="YAML engine config (sections of EngineConfig)")
    keys: Path | None = Field(None, description="API keys file (`clew keys add` writes it)")
    no_auth: bool = Field(
        False, description="no keys: every caller is an anonymous admin (loopback hosts only)"
    )
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    max_query_chars: int = Field(2_000, ge=1, le=100_000)
    max_k: int = Field(100, ge=1, le=1_000)
    max_batch: int = Field(1_000, ge=1, le=100_000, description="documents per POST /documents")
    max_document_chars: int = Field(5_000_000, ge=1)
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    request_timeout_s: float = Field(60.0, gt=0, le=3_600)
    threads: int = Field(8, ge=1, le=256, description="worker threads for engine calls")
    jobs_kept: int = Field(1_000, ge=1, description="finished ingest jobs remembered")
    ingest_share: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="while searches are being served, the share of time the ingest job thread "
        "may write (it pauses between groups for the rest); 1 = never pause",
    )
    ingest_process: bool = Field(
        True,
        description="run ingest jobs in a writer process (own GIL and encoder, lower CPU "
        "priority) when the service opens the index itself; costs the index's memory again",
    )
    ingest_nice: int = Field(10, ge=0, le=19, description="CPU niceness of the writer process")
    eval_results: Path | None = Field(
        None, description="folder of `clew eval --json` result files (default: <index>/eval)"
    )
    gates: Path | None = Field(None, description="gates YAML for GET /eval/gate")

    @model_validator(mode="after")
    def _auth(self) -> ServeSettings:
        if self.no_auth and self.keys is not None:
            raise ValueError("give either keys (a keys file) or no_auth, not both")
        if self.no_auth and not is_loopback(self.host):
            raise ValueError(
                f"no_auth is allowed only on a loopback host (127.0.0.1, ::1, localhost); "
                f"got host={self.host!r}. Create keys with `clew keys add` instead"
            )
        if not self.no_auth and self.keys is None:
            raise ValueError(
                "no keys file: give keys (create one with `clew keys add --file keys.yaml "
                "--name NAME [--scope JSON] [--admin]`) or no_auth for a loopback-only dev server"
            )
        return self

    @field_validator("index", mode="before")
    @classmethod
    def _index(cls, value: object) -> object:
        """A PostgreSQL URL stays a string; anything else is a directory."""
        if isinstance(value, str) and not value.startswith(("postgresql://", "postgres://")):
            return Path(value)
        return value

    @property
    def eval_dir(self) -> Path:
        if self.eval_results is not None:
            return self.eval_results
        if isinstance(self.index, Path):
            return self.index / "eval"
        from clew.models.embedder import cache_dir

        return Path(cache_dir()) / "postgres" / "eval"
