"""Property-based test of the admin REST API against its OpenAPI document (schemathesis), on one live broker
process for the module, and regression tests for what that run found.

The run: schemathesis' examples phase (the documented examples name ``my-tenant/my-namespace/my-topic`` with
subscription ``my-subscription``, created first so that the operations reach real state), the coverage phase
with valid inputs plus one undeclared method (PATCH) per path, and the fuzzing phase (valid and invalid
inputs, ``max_examples`` 3 per operation, derandomized). Checks: no 5xx, every status code, content type,
body and header documented, invalid inputs refused (400/404/405/409/412/413/422; 412 is Pulsar's answer to
an invalid name), undeclared methods 405. ``QUASAR_OPENAPI_FULL=1`` runs the coverage phase with invalid
inputs too (every boundary and type mutation, about 3,500 requests instead of about 1,500).

Not checked: ``positive_data_acceptance`` (a valid request may meet a state that refuses it, e.g. deleting
a tenant that has namespaces), ``allow_header_conformance`` (Pulsar's paths overlap: a topic may be named
``partitioned`` and a role ``subscription``, so such a path rightly allows more methods than the document
lists for it), ``ignored_auth`` (this broker runs without authentication; tests/security/test_openapi_auth.py
runs it with).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks
from schemathesis.config import SchemathesisConfig

from quasar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.interop

SPEC = Path(__file__).resolve().parents[2] / "src" / "quasar" / "broker" / "admin" / "openapi.json"
FULL = os.environ.get("QUASAR_OPENAPI_FULL") == "1"
REFUSALS = [400, 401, 403, 404, 405, 409, 412, 413, 422]
COVERAGE: dict[str, Any] = {"unexpected-methods": ["PATCH"]}
if not FULL:
    COVERAGE["generation"] = {"mode": "positive"}
schema = schemathesis.openapi.from_path(
    SPEC,
    config=SchemathesisConfig.from_dict(
        {
            "phases": {"coverage": COVERAGE},
            "checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}},
        }
    ),
)
EXCLUDED = [checks.ignored_auth, checks.positive_data_acceptance, checks.allow_header_conformance]


def call(broker: BrokerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
    """(status, decoded JSON body or None, headers) of an admin call."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        str(broker.admin_url) + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None, dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            text = exc.read()
            assert exc.headers.get_content_type() == "application/json", (exc.code, text)
            return exc.code, json.loads(text) if text else None, dict(exc.headers)


def _produce(service_url: str, topic: str, count: int) -> None:
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(f"message {i}".encode(), partition_key="my-key", properties={"n": str(i)})
    finally:
        client.close()


@pytest.fixture(scope="module")
def api_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module alone, with the entities the document's examples name (and messages with the
    example key in the example subscription's backlog, so that peek and query answer 200 too)."""
    process = BrokerProcess(tmp_path_factory.mktemp("openapi") / "data").start()
    try:
        sub = "/admin/v2/persistent/my-tenant/my-namespace/my-topic/subscription/my-subscription"
        for method, path, body in (
            ("PUT", "/admin/v2/tenants/my-tenant", {"adminRoles": [], "allowedClusters": ["standalone"]}),
            ("PUT", "/admin/v2/namespaces/my-tenant/my-namespace", None),
            ("PUT", sub, {"ledgerId": -1, "entryId": -1}),
        ):
            assert call(process, method, path, body)[0] == 204
        _produce(str(process.service_url), "persistent://my-tenant/my-namespace/my-topic", 5)
        yield process
    finally:
        process.stop()


@schema.parametrize()
@settings(
    max_examples=5 if FULL else 3, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
def test_admin_api_conforms_to_its_document(case, api_broker: BrokerProcess) -> None:
    case.call_and_validate(base_url=api_broker.admin_url, timeout=10, excluded_checks=EXCLUDED)


# ---------------------------------------------------------------------- regressions found by the run
@pytest.fixture(scope="module")
def namespace(api_broker: BrokerProcess) -> str:
    """A tenant and namespace of the regression tests (the property run may change my-tenant's)."""
    assert call(api_broker, "PUT", "/admin/v2/tenants/regress")[0] == 204
    assert call(api_broker, "PUT", "/admin/v2/namespaces/regress/ns")[0] == 204
    return "regress/ns"


def test_a_namespace_path_is_never_taken_for_a_topic_in_a_domain_named_namespaces(
    api_broker: BrokerProcess, namespace: str
) -> None:
    # the {domain} templates took PUT .../namespaces/t/ns/topics as "create topic namespaces://t/ns/topics": 412
    status, body, headers = call(api_broker, "PUT", f"/admin/v2/namespaces/{namespace}/topics")
    assert status == 405 and body == {"reason": "Method Not Allowed"}
    assert "GET" in headers["Allow"]
    assert (
        call(api_broker, "DELETE", f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy")[0] == 405
    )
    status, body, _ = call(api_broker, "GET", "/admin/v2/no-such-domain/regress/ns/t/stats")
    assert status == 404 and body == {"reason": "Not Found"}  # JSON, like every admin error


def test_internal_stats_of_the_open_ledger_count_integers(api_broker: BrokerProcess, namespace: str) -> None:
    topic = f"/admin/v2/persistent/{namespace}/open-ledger"
    assert call(api_broker, "PUT", topic)[0] == 204
    status, stats, _ = call(api_broker, "GET", topic + "/internalStats")
    assert status == 200 and stats["ledgers"]
    for ledger in stats["ledgers"]:  # were null for the open ledger; Pulsar's LedgerInfo says 0
        assert type(ledger["entries"]) is int and type(ledger["size"]) is int


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/retention", {"retentionTimeInMinutes": 2**31, "retentionSizeInMB": 0}),
        ("/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 2**63}),
        ("/backlogQuota", {"limitSize": -1, "limitTime": 2**31}),
        ("/backlogQuota", {"limitSize": 2**63, "limitTime": -1}),
        ("/messageTTL", 2**31),
    ],
)
def test_policy_values_past_pulsars_java_types_are_refused(
    api_broker: BrokerProcess, namespace: str, path: str, body: Any
) -> None:
    status, answer, _ = call(api_broker, "POST", f"/admin/v2/namespaces/{namespace}{path}", body)
    assert status == 400 and "must be an integer in [" in answer["reason"]


def test_boolean_query_parameters_take_only_true_or_false(api_broker: BrokerProcess, namespace: str) -> None:
    for path in (
        "/admin/v2/tenants/regress?force=ture",
        f"/admin/v2/namespaces/{namespace}?force=",
        "/admin/v2/tenants/regress?force=true&force=false",
    ):
        status, answer, _ = call(api_broker, "DELETE", path)
        assert status == 400 and "force" in answer["reason"], path
    assert call(api_broker, "GET", "/admin/v2/broker-stats/loop-lag?reset=")[0] == 400
    assert call(api_broker, "GET", "/admin/v2/broker-stats/loop-lag?reset=TRUE")[0] == 200
    assert call(api_broker, "DELETE", "/admin/v2/tenants/regress?force=false")[0] == 409  # still has ns


def test_topic_message_ttl_is_given_once(api_broker: BrokerProcess, namespace: str) -> None:
    path = f"/admin/v2/persistent/{namespace}/ttl/messageTTL"
    status, answer, _ = call(api_broker, "POST", path + "?messageTTL=0", 2**31)
    assert status == 400 and "not both" in answer["reason"]  # the body was ignored: an invalid TTL took
    assert call(api_broker, "POST", path + "?messageTTL=30")[0] == 204
    assert call(api_broker, "GET", path)[:2] == (200, 30)
    assert call(api_broker, "POST", path, 60)[0] == 204
    assert call(api_broker, "GET", path)[:2] == (200, 60)
