"""Prometheus metrics of one service instance (its own registry, so apps never share counters)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "clew_requests", "HTTP requests", ["method", "endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "clew_request_duration_seconds",
            "HTTP request latency",
            ["method", "endpoint"],
            buckets=_LATENCY,
            registry=r,
        )
        self.stages = Histogram(
            "clew_stage_duration_seconds",
            "Engine stage latency per search or ask (filter, embed, lexical, dense, graph, fuse, "
            "expand, rerank, fetch, assemble, answer, total)",
            ["kind", "stage"],
            buckets=_LATENCY,
            registry=r,
        )
        self.fallbacks = Counter(
            "clew_rerank_fallbacks",
            "Reranker runs that fell back to fused order",
            ["reranker"],
            registry=r,
        )
        self.documents = Counter(
            "clew_ingest_documents", "Documents processed by ingest jobs", ["status"], registry=r
        )
        self.release = Gauge(
            "clew_index_release", "The index's release (read when metrics are read)", registry=r
        )

    def observe_request(self, method: str, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(method, endpoint, str(status)).inc()
        self.latency.labels(method, endpoint).observe(seconds)

    def observe_result(self, kind: str, result: Mapping[str, Any]) -> None:
        """Stage timings and reranker fallbacks of one search or ask result (its JSON form)."""
        for stage, ms in (result.get("timings_ms") or {}).items():
            if isinstance(ms, int | float):
                self.stages.labels(kind, stage).observe(float(ms) / 1000.0)
        rerank = result.get("rerank")
        if isinstance(rerank, Mapping) and not rerank.get("ran", True):
            self.fallbacks.labels(str(rerank.get("reranker", "?"))).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
