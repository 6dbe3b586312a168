"""AuthorizationService rules (Pulsar PulsarAuthorizationProvider) and the grant bookkeeping of
``auth_policies``; BrokerConfig's authentication settings."""

from __future__ import annotations

import pytest

from quasar.broker.config import BrokerConfig
from quasar.security.authorization import AuthorizationService, parse_actions, updated_auth_policies


class Source:
    def __init__(self) -> None:
        self.admins = {"acme": ["acme-admin"]}
        self.policies: dict[str, dict] = {}

    def tenant_admin_roles(self, tenant: str):
        return self.admins.get(tenant, ())

    def auth_policies(self, namespace: str):
        return self.policies.get(namespace, {})


NS = "acme/orders"
TOPIC = "persistent://acme/orders/t"


@pytest.fixture
def authz() -> tuple[AuthorizationService, Source]:
    source = Source()
    policies = updated_auth_policies(None, role="writer", actions=["produce"])
    policies = updated_auth_policies(policies, role="reader", actions=["consume"])
    policies = updated_auth_policies(policies, topic=TOPIC, role="topic-writer", actions=["produce"])
    policies = updated_auth_policies(policies, subscription="audit", roles=["reader"])
    source.policies[NS] = policies
    return AuthorizationService(["root"], source), source


def test_namespace_topic_and_admin_grants(authz) -> None:
    service, _ = authz
    assert service.can_produce("writer", NS, TOPIC) and not service.can_consume("writer", NS, TOPIC)
    assert service.can_consume("reader", NS, TOPIC) and not service.can_produce("reader", NS, TOPIC)
    assert service.can_produce("topic-writer", NS, TOPIC)
    assert not service.can_produce("topic-writer", NS, "persistent://acme/orders/other")
    for role in ("root", "acme-admin"):
        assert service.can_produce(role, NS, TOPIC) and service.can_consume(role, NS, TOPIC, "audit")
    assert not service.can_produce("acme-admin", "other/ns", "persistent://other/ns/t")
    for role in ("stranger", None):
        assert not service.can_lookup(role, NS, TOPIC)
    assert service.can_lookup("writer", NS, TOPIC) and service.can_lookup("reader", NS, None)


def test_subscription_roles_limit_consumers(authz) -> None:
    service, source = authz
    policies = updated_auth_policies(source.policies[NS], role="other-reader", actions=["consume"])
    source.policies[NS] = policies
    assert service.can_consume("reader", NS, TOPIC, "audit")
    assert not service.can_consume("other-reader", NS, TOPIC, "audit")
    assert service.can_consume("other-reader", NS, TOPIC, "mine")


def test_grant_bookkeeping_revokes_and_validates() -> None:
    policies = updated_auth_policies(None, topic=TOPIC, role="a", actions=["consume", "produce", "consume"])
    assert policies["destination_auth"] == {TOPIC: {"a": ["consume", "produce"]}}
    policies = updated_auth_policies(policies, topic=TOPIC, role="a", actions=None)
    assert policies["destination_auth"] == {}
    policies = updated_auth_policies(policies, subscription="s", roles=["x"])
    assert updated_auth_policies(policies, subscription="s", roles=None)["subscription_auth_roles"] == {}
    assert parse_actions(["consume", "produce", "consume"]) == ["consume", "produce"]
    for bad in ("produce", ["fly"], [1], {"produce": 1}):
        with pytest.raises(ValueError):
            parse_actions(bad)


def test_config_validates_authentication_settings(tmp_path) -> None:
    config = BrokerConfig.from_mapping(
        {"authentication_enabled": True, "authentication_providers": ["token"], "super_user_roles": ["a"]}
    )
    assert config.authentication_providers == ("token",) and config.super_user_roles == ("a",)
    for values, match in (
        ({"authentication_providers": ["kerberos"]}, "unknown methods"),
        ({"authentication_providers": "token"}, "list of strings"),
        ({"authentication_enabled": True}, "authentication_providers"),
        ({"authentication_refresh_check_seconds": 0}, "positive"),
    ):
        with pytest.raises(ValueError, match=match):
            BrokerConfig.from_mapping(values)


def test_standalone_refuses_an_unusable_security_config(tmp_path) -> None:
    from tests.security.conftest import quasar_cli

    config = tmp_path / "broker.toml"
    for body, reason in (
        (
            'authentication_enabled = true\nauthentication_providers = ["token"]\n',
            b"exactly one of token_secret_key",
        ),
        (
            'authentication_enabled = true\nauthentication_providers = ["token"]\n'
            'token_secret_key = "file:///nonexistent/secret.key"\n',
            b"cannot read key file /nonexistent/secret.key",
        ),
        ('authentication_enabled = true\nauthentication_providers = ["basic"]\n', b"needs basic_auth_conf"),
    ):
        config.write_text(body)
        made = quasar_cli("standalone", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--admin-port", "0")  # fmt: skip
        assert made.returncode == 2 and reason in made.stderr, made.stderr
        assert not (tmp_path / "data").exists()  # refused before anything was created


def test_ill_typed_stored_policies_grant_nothing_and_never_raise() -> None:
    source = Source()
    service = AuthorizationService([], source)
    for policies in (
        {"namespace_auth": ["produce"]},
        {"namespace_auth": {"r": "produce"}},
        {"destination_auth": {TOPIC: ["r"]}},
        {"destination_auth": [TOPIC]},
        {"subscription_auth_roles": {"s": "r"}, "namespace_auth": {"r": ["consume"]}},
        {"namespace_auth": None},
    ):
        source.policies[NS] = policies
        assert not service.can_produce("r", NS, TOPIC)
    source.policies[NS] = {"subscription_auth_roles": {"s": "r"}, "namespace_auth": {"r": ["consume"]}}
    assert service.can_consume("r", NS, TOPIC, "s")  # an ill-typed subscription entry restricts nothing
