"""Schemathesis over the OpenAPI schema: a bounded number of generated requests per operation
(schema-valid and schema-violating paths, queries and bodies), sent with a live key; not one
may be answered 5xx, and every error is a problem naming what was wrong."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from .conftest import Keys, auth

EXAMPLES_PER_OPERATION = 6  # × 27 operations × 2 modes: ~300 requests


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=lambda m: m.value)
def test_no_generated_request_gets_a_server_error(app: FastAPI, keys: Keys, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25
    sent: list[int] = []
    unsatisfiable: list[str] = []

    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck), database=None)
        def check(case: schemathesis.Case) -> None:
            response = case.call(headers=auth(keys.acme))
            case.validate_response(response, checks=[not_a_server_error])
            sent.append(response.status_code)
            if response.status_code >= 400:
                content_type = response.headers["content-type"]  # schemathesis: a list per header
                assert content_type == ["application/problem+json"], response.text
                assert response.json()["detail"]

        try:
            check()
        except Unsatisfiable:  # no input to violate: negative mode has nothing to send
            unsatisfiable.append(operation.path)
    assert set(unsatisfiable) <= {"/health", "/version"}
    assert len(sent) >= len(operations) - len(unsatisfiable)
