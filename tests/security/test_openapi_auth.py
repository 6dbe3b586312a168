"""The admin API's OpenAPI document against a broker with authentication on (``strict``: no anonymous role):
every operation without credentials answers 401 (documented, ``{"reason": ...}``); the document itself, the
health page, ``/metrics`` (``authenticate_metrics_endpoint`` off) and the dashboard's files stay open; and
schemathesis' ``ignored_auth`` check finds no operation that takes forged credentials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks
from schemathesis.config import SchemathesisConfig

pytestmark = pytest.mark.interop

SPEC = Path(__file__).resolve().parents[2] / "src" / "quasar" / "broker" / "admin" / "openapi.json"
OPEN = {"/status.html", "/admin/v2/openapi.json", "/metrics", "/dashboard", "/dashboard/", "/dashboard/static/{name}"}
# the fuzzing phase only, valid requests: one per operation (max_examples=1), no credentials
schema = schemathesis.openapi.from_path(
    SPEC,
    config=SchemathesisConfig.from_dict(
        {
            "generation": {"mode": "positive"},
            "phases": {
                "examples": {"enabled": False},
                "coverage": {"enabled": False},
                "stateful": {"enabled": False},
            },
        }
    ),
)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.ignored_auth,
]


@schema.parametrize()
@settings(max_examples=1, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_without_credentials_is_a_documented_401(case, strict) -> None:
    response = case.call_and_validate(base_url=strict.broker.admin_url, timeout=10, checks=CHECKS)
    if case.path in OPEN:  # a dashboard file name the generator made up is a documented 404
        assert response.status_code in ((200, 404) if case.path.endswith("{name}") else (200, 308))
    else:
        assert response.status_code == 401, (case.method, case.formatted_path, response.text)
        assert json.loads(response.text)["reason"].startswith("Authentication required")
        assert "401" in case.operation.definition.raw["responses"]


def test_the_document_is_served_without_credentials(strict) -> None:
    status, document = strict.admin("GET", "/admin/v2/openapi.json", token="")
    assert status == 200
    assert document == json.loads(SPEC.read_text(encoding="utf-8"))
    assert strict.admin("GET", "/admin/v2/tenants", token="")[0] == 401
    assert strict.admin("GET", "/admin/v2/tenants")[0] == 200  # the super user's token
