"""Schemathesis against the app's own OpenAPI spec: no 5xx, and every answer is one the
document declares (its status code and its media type), a bounded number of cases a route."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from ..api.conftest import make_server

#: Generated cases per route (bounded work).
EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance]


def test_openapi_fuzz_answers_only_what_the_document_declares(api_settings) -> None:
    with make_server(api_settings) as srv:
        schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
        failures: list[str] = []
        calls: list[int] = []
        for op in schema.get_all_operations():
            operation = op.ok()

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy())
            def check(case) -> None:
                response = case.call(timeout=60)
                calls.append(response.status_code)
                try:
                    case.validate_response(response, checks=CHECKS)
                except Exception as exc:
                    failures.append(
                        f"{case.method} {case.formatted_path}: "
                        f"{response.status_code} "
                        f"{response.headers.get('content-type')}: "
                        f"{str(exc).splitlines()[0][:200]}"
                    )

            check()
        assert sorted(set(failures)) == []
        assert len(calls) > 50 and any(code < 300 for code in calls)
