"""Schemathesis against the app's own OpenAPI spec: no 5xx, bounded time."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

from ..api.conftest import make_server


def test_openapi_fuzz_finds_no_server_errors(api_settings) -> None:  # noqa: ANN001
    with make_server(api_settings) as srv:
        schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
        failures: list[str] = []
        calls: list[int] = []
        for op in schema.get_all_operations():
            operation = op.ok()

            @settings(max_examples=25, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy())
            def check(case) -> None:  # noqa: ANN001
                response = case.call(timeout=60)
                calls.append(response.status_code)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path}: {response.status_code}")

            check()
        assert failures == []
        assert len(calls) > 50 and any(code < 300 for code in calls)
