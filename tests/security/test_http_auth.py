"""The admin REST API of a broker with authentication and authorization on (conftest): 401 without or with
bad credentials, 403 for a role lacking the permission, 200/204 otherwise, as Pulsar; only the health page is
open; grants, revokes and listings round-trip with Pulsar's paths and JSON."""

from __future__ import annotations

import base64
import urllib.request
import uuid

from tests.security.conftest import ANONYMOUS, PASSWORDS, SUPER_USER, Secured, quasar_cli


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


PATHS = ("/admin/v2/tenants", "/admin/v2/clusters", "/admin/v2/persistent/public/default",
         "/admin/v2/namespaces/public/default/permissions", "/admin/v2/broker-stats/loop-lag")  # fmt: skip


def test_only_the_health_page_is_open_without_credentials(strict: Secured) -> None:
    with urllib.request.urlopen(f"{strict.broker.admin_url}/status.html", timeout=10) as resp:
        assert resp.status == 200
        assert resp.read() == b"OK"
    for path in PATHS:
        for credentials in (
            {"token": ""},
            {"token": "forged.token.value"},
            {"token": strict.token("alice", expiry_s=-5)},
            {"token": "", "headers": basic("bob", "wrong")},
            {"token": "", "headers": {"Authorization": "Basic !!!"}},
        ):
            status, body = strict.admin("GET", path, **credentials)
            assert status == 401, (path, credentials, body)
            assert "Authentication required" in body["reason"]
    assert (
        strict.admin("GET", "/admin/v2/tenants", token="", headers=basic("bob", PASSWORDS["bob"]))[0] == 403
    )
    assert strict.admin("GET", "/admin/v2/tenants")[0] == 200


def test_with_an_anonymous_role_bad_credentials_fall_back_to_it(secured: Secured) -> None:
    """Pulsar's authenticateHttpRequest: when every provider refuses and anonymousUserRole is set, the request
    runs as that role, whose lack of permission answers 403, never 200."""
    for path in PATHS:
        if path == "/admin/v2/clusters":  # any authenticated role may list clusters
            assert secured.admin("GET", path, token="")[0] == 200
            continue
        assert secured.admin("GET", path, token="")[0] == 403
        assert secured.admin("GET", path, token="forged.token.value")[0] == 403
        assert secured.admin("GET", path, token="", headers=basic("bob", "wrong"))[0] == 403


def test_roles_get_200_or_403_by_permission(secured: Secured) -> None:
    ns = secured.new_namespace("perm")
    status, tenants = secured.admin("GET", "/admin/v2/tenants")
    assert status == 200 and "public" in tenants
    alice = secured.token("alice")
    assert secured.admin("GET", "/admin/v2/tenants", token=alice)[0] == 403
    assert secured.admin("GET", f"/admin/v2/persistent/{ns}", token=alice)[0] == 403
    assert (
        secured.admin("PUT", f"/admin/v2/namespaces/public/x-{uuid.uuid4().hex[:6]}", {}, token=alice)[0]
        == 403
    )
    assert (
        secured.admin("POST", f"/admin/v2/namespaces/{ns}/permissions/alice", ["produce"], token=alice)[0]
        == 403
    )

    assert secured.admin("POST", f"/admin/v2/namespaces/{ns}/permissions/alice", ["consume"])[0] == 204
    status, topics = secured.admin("GET", f"/admin/v2/persistent/{ns}", token=alice)
    assert status == 200 and topics == []
    # consume lets alice read stats and subscriptions, not change policies
    topic = f"persistent/{ns}/t1"
    assert secured.admin("PUT", f"/admin/v2/{topic}")[0] == 204
    assert secured.admin("GET", f"/admin/v2/{topic}/subscriptions", token=alice)[0] == 200
    assert secured.admin("GET", f"/admin/v2/{topic}/stats", token=alice)[0] == 200
    assert secured.admin("POST", f"/admin/v2/{topic}/messageTTL", 60, token=alice)[0] == 403
    assert secured.admin("POST", f"/admin/v2/{topic}/terminate", token=alice)[0] == 403
    assert secured.admin("POST", f"/admin/v2/{topic}/terminate")[0] == 200  # tenant admin / super user
    # schemas and compaction: reading a schema needs produce or consume, changing one a tenant admin
    schema_path = f"/admin/v2/schemas/{ns}/t1/schema"
    assert secured.admin("GET", schema_path, token=alice)[0] == 404  # allowed; the topic has no schema
    assert secured.admin("GET", schema_path, token=secured.token("mallory"))[0] == 403
    upload = {"type": "STRING", "schema": "", "properties": {}}
    assert secured.admin("POST", schema_path, upload, token=alice)[0] == 403
    assert secured.admin("PUT", f"/admin/v2/{topic}/compaction", token=alice)[0] == 403
    assert secured.admin("GET", f"/admin/v2/{topic}/compaction")[0] == 200
    # a basic-authenticated role works the same way
    assert (
        secured.admin("GET", f"/admin/v2/{topic}/stats", token="", headers=basic("bob", PASSWORDS["bob"]))[0]
        == 403
    )


def test_tenant_admin_administers_its_tenant_only(secured: Secured) -> None:
    tenant = f"tn-{uuid.uuid4().hex[:6]}"
    status, body = secured.admin(
        "PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["tom"], "allowedClusters": []}
    )
    assert status == 204, body
    tom = secured.token("tom")
    assert secured.admin("PUT", f"/admin/v2/namespaces/{tenant}/ns", {}, token=tom)[0] == 204
    assert secured.admin("GET", f"/admin/v2/namespaces/{tenant}", token=tom) == (200, [f"{tenant}/ns"])
    assert (
        secured.admin("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/ann", ["produce"], token=tom)[0]
        == 204
    )
    assert secured.admin("GET", f"/admin/v2/persistent/{tenant}/ns", token=tom)[0] == 200
    assert secured.admin("GET", "/admin/v2/namespaces/public", token=tom)[0] == 403
    assert secured.admin("PUT", f"/admin/v2/tenants/other-{tenant}", {}, token=tom)[0] == 403


def test_namespace_grant_revoke_list_round_trip(secured: Secured) -> None:
    ns = secured.new_namespace("grants")
    base = f"/admin/v2/namespaces/{ns}/permissions"
    assert secured.admin("GET", base) == (200, {})
    assert secured.admin("POST", f"{base}/alice", ["produce", "consume"])[0] == 204
    assert secured.admin("POST", f"{base}/{ANONYMOUS}", ["consume"])[0] == 204
    assert secured.admin("GET", base) == (200, {"alice": ["consume", "produce"], ANONYMOUS: ["consume"]})
    assert secured.admin("DELETE", f"{base}/alice")[0] == 204
    assert secured.admin("GET", base) == (200, {ANONYMOUS: ["consume"]})
    status, body = secured.admin("POST", f"{base}/alice", ["produce", "fly"])
    assert status == 400 and "fly" in body["reason"]
    assert secured.admin("POST", f"{base}/alice", {"produce": True})[0] == 400
    assert secured.admin("GET", "/admin/v2/namespaces/public/missing-ns/permissions")[0] == 404


def test_topic_and_subscription_grants_round_trip(secured: Secured) -> None:
    ns = secured.new_namespace("tgrants")
    topic = f"/admin/v2/persistent/{ns}/orders"
    assert secured.admin("POST", f"/admin/v2/namespaces/{ns}/permissions/ops", ["consume"])[0] == 204
    assert secured.admin("POST", f"{topic}/permissions/alice", ["produce"])[0] == 204
    # effective permissions: the namespace's united with the topic's
    assert secured.admin("GET", f"{topic}/permissions") == (200, {"alice": ["produce"], "ops": ["consume"]})
    # a topic-level grant opens that topic only, not the namespace's listing nor another topic
    assert secured.admin("PUT", topic)[0] == 204
    alice = secured.token("alice")
    assert secured.admin("GET", f"{topic}/stats", token=alice)[0] == 200
    assert secured.admin("GET", f"/admin/v2/persistent/{ns}/other/stats", token=alice)[0] == 403
    assert secured.admin("GET", f"/admin/v2/persistent/{ns}", token=alice)[0] == 403
    assert secured.admin("GET", f"/admin/v2/persistent/{ns}/bad%00name/stats", token=alice)[0] == 403
    assert secured.admin("DELETE", f"{topic}/permissions/alice")[0] == 204
    assert secured.admin("GET", f"{topic}/permissions") == (200, {"ops": ["consume"]})
    status, body = secured.admin("DELETE", f"{topic}/permissions/ops")
    assert status == 412 and "topic level" in body["reason"]

    subs = f"/admin/v2/namespaces/{ns}/permissions/subscription"
    assert secured.admin("POST", f"{subs}/audit", ["ops", "alice"])[0] == 204
    assert secured.admin("GET", subs) == (200, {"audit": ["alice", "ops"]})
    assert secured.admin("DELETE", f"/admin/v2/namespaces/{ns}/permissions/audit/alice")[0] == 204
    assert secured.admin("GET", subs) == (200, {"audit": ["ops"]})


def test_consume_role_may_peek_skip_and_reset_on_its_topic_only(secured: Secured) -> None:
    """Pulsar's PEEK_MESSAGES, SKIP, EXPIRE_MESSAGES, RESET_CURSOR and SUBSCRIBE topic operations need consume
    on the topic (and the subscription's roles); unload, tenant and namespace reads need a tenant admin."""
    mine, theirs = secured.new_namespace("peek"), secured.new_namespace("other")
    assert secured.admin("POST", f"/admin/v2/namespaces/{mine}/permissions/alice", ["consume"])[0] == 204
    alice = secured.token("alice")
    for ns in (mine, theirs):
        assert secured.admin("PUT", f"/admin/v2/persistent/{ns}/t")[0] == 204
        assert secured.admin("PUT", f"/admin/v2/persistent/{ns}/t/subscription/s")[0] == 204
    calls = (
        ("GET", "/subscription/s/position/1", 404),  # allowed: the topic is empty
        ("POST", "/subscription/s/skip/1", 204),
        ("POST", "/subscription/s/skip_all", 204),
        ("POST", "/subscription/s/expireMessages/10", 204),
        ("POST", "/all_subscription/expireMessages/10", 204),
        ("POST", "/subscription/s/resetcursor/0", 204),
        ("PUT", "/subscription/s2", 204),
    )
    for method, suffix, allowed in calls:
        status, body = secured.admin(method, f"/admin/v2/persistent/{mine}/t{suffix}", token=alice)
        assert status == allowed, (method, suffix, body)
        status, body = secured.admin(method, f"/admin/v2/persistent/{theirs}/t{suffix}", token=alice)
        assert status == 403, (method, suffix, body)
    assert secured.admin("GET", f"/admin/v2/persistent/{mine}/t/partitioned-stats", token=alice)[0] == 404
    assert secured.admin("GET", f"/admin/v2/persistent/{theirs}/t/partitioned-stats", token=alice)[0] == 403
    assert secured.admin("PUT", f"/admin/v2/persistent/{mine}/t/unload", token=alice)[0] == 403
    assert secured.admin("PUT", f"/admin/v2/persistent/{mine}/t/unload")[0] == 204
    assert secured.admin("DELETE", f"/admin/v2/persistent/{mine}/t", token=alice)[0] == 403
    assert secured.admin("GET", f"/admin/v2/namespaces/{mine}/topics", token=alice) == (
        200,
        [f"persistent://{mine}/t"],
    )
    assert secured.admin("GET", f"/admin/v2/namespaces/{theirs}/topics", token=alice)[0] == 403
    assert secured.admin("GET", f"/admin/v2/namespaces/{mine}", token=alice)[0] == 403
    assert secured.admin("DELETE", f"/admin/v2/namespaces/{mine}", token=alice)[0] == 403
    assert secured.admin("GET", "/admin/v2/tenants/public", token=alice)[0] == 403
    assert secured.admin("GET", "/admin/v2/tenants/public")[0] == 200
    assert secured.admin("POST", "/admin/v2/tenants/public", {}, token=alice)[0] == 403
    assert secured.admin("DELETE", "/admin/v2/tenants/public", token=alice)[0] == 403


def test_super_user_token_is_required_for_broker_level_routes(secured: Secured) -> None:
    assert secured.admin("GET", "/admin/v2/broker-stats/loop-lag")[0] == 200
    assert secured.admin("GET", "/admin/v2/broker-stats/loop-lag", token=secured.token("alice"))[0] == 403
    assert secured.admin("GET", "/admin/v2/broker-stats/loop-lag", token=secured.token(SUPER_USER))[0] == 200


def test_quasar_admin_sends_its_auth_token(strict: Secured) -> None:
    args = ("admin", "broker-group", "status", "g", "--admin-url", strict.broker.admin_url)
    without = quasar_cli(*args)
    assert without.returncode != 0 and b"answered 401" in without.stderr, without.stderr
    with_token = quasar_cli("admin", "--auth-token", strict.token(SUPER_USER), *args[1:])
    assert b"answered 401" not in with_token.stderr and b"no live broker of group 'g'" in with_token.stderr


def test_metrics_are_open_without_credentials_by_default(strict: Secured) -> None:
    """Pulsar serves /metrics without authentication unless authenticateMetricsEndpoint is set."""
    with urllib.request.urlopen(f"{strict.broker.admin_url}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert b"quasar_store_commit_log_max_offset_bytes" in resp.read()


def test_quasar_admin_commands_send_the_token_from_the_option_or_the_environment(strict: Secured) -> None:
    from click.testing import CliRunner

    from quasar.cli.admin import admin

    url = ["--admin-url", strict.broker.admin_url]
    refused = CliRunner().invoke(admin, [*url, "tenants", "list"])
    assert refused.exit_code == 1 and "GET /admin/v2/tenants answered 401" in refused.stderr, refused.output
    token = strict.token(SUPER_USER)
    served = CliRunner().invoke(admin, [*url, "--auth-token", token, "tenants", "list"])
    assert served.exit_code == 0 and "public" in served.stdout.splitlines(), served.output
    from_env = CliRunner(env={"QUASAR_AUTH_TOKEN": token}).invoke(admin, [*url, "tenants", "get", "public"])
    assert from_env.exit_code == 0 and "allowedClusters" in from_env.stdout, from_env.output
    alice = CliRunner().invoke(admin, [*url, "--auth-token", strict.token("alice"), "tenants", "list"])
    assert alice.exit_code == 1 and "answered 403" in alice.stderr, alice.output
