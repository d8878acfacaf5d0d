"""Schemathesis against the API's own OpenAPI schema: generated requests never get a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode

from clew import Engine
from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor
from clew.serve.api import create_app
from clew.serve.auth import KeyStore
from clew.serve.settings import ServeSettings
from clew.testing.fakes import FakeHashEncoder

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
_KEY: dict[str, str] = {}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("schema")
    engine = Engine(
        root / "idx",
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    engine.ingest([SAMPLE / "error-codes.md", SAMPLE / "faq.md", SAMPLE / "tickets.jsonl"])
    _KEY["admin"], _ = KeyStore.add(root / "keys.yaml", "fuzz", admin=True)
    app = create_app(
        ServeSettings(index=root / "idx", keys=root / "keys.yaml", request_timeout_s=30), engine
    )
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    app.state.clew.close()
    engine.close()


def test_no_generated_request_gets_a_server_error(api_schema: Any) -> None:
    """Every operation, about 30 generated requests each (schema-valid and invalid bodies)."""
    headers = {"Authorization": f"Bearer {_KEY['admin']}"}
    tested = []
    statuses: list[int] = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        tested.append(f"{operation.method.upper()} {operation.path}")
        strategy = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
            GenerationMode.NEGATIVE
        )

        @given(case=strategy)
        @settings(
            max_examples=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case: Any) -> None:
            response = case.call_and_validate(headers=headers, checks=[not_a_server_error])
            statuses.append(response.status_code)

        run()
    assert len(statuses) > 200
    assert {200, 422} <= set(statuses)  # both valid and invalid requests were made
    assert {"POST /search", "POST /ask", "POST /documents", "GET /eval/gate"} <= set(tested)
