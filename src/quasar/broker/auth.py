"""The broker's authentication and authorization, composed from ``quasar.security`` and ``BrokerConfig``.

:func:`build_broker_security` turns the settings (``authentication_*``, ``token_*``, ``basic_auth_conf``,
``authorization_enabled``, ``super_user_roles``) into a :class:`BrokerSecurity`, which the binary connections
(``quasar.broker.cnx.auth``) and the admin API (``quasar.broker.admin.auth``) share. Permissions are read from
the broker's in-memory admin metadata (:class:`ResourcesPolicySource`), so a check never waits; grants change
the namespace policy ``auth_policies`` as Pulsar stores it.

With authentication off every connection is anonymous (role None) and nothing is checked, as in Pulsar; with
authorization off authenticated roles may do everything.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quasar.broker.errors import BrokerError
from quasar.protocol import TopicName
from quasar.protocol.enums import ServerError
from quasar.security.authentication import AuthenticationProvider, AuthenticationService
from quasar.security.authorization import AUTH_POLICIES, AuthorizationService
from quasar.security.providers import BasicProvider, TlsProvider, TokenProvider

if TYPE_CHECKING:
    from quasar.broker.config import BrokerConfig
    from quasar.broker.resources import BrokerResources

__all__ = [
    "AuthenticationFailedError",
    "BrokerSecurity",
    "PermissionDeniedError",
    "ResourcesPolicySource",
    "build_authentication",
    "build_broker_security",
]


class AuthenticationFailedError(BrokerError):
    """CONNECT or AUTH_RESPONSE refused (ServerError AuthenticationError; the connection then closes)."""

    server_error = ServerError.AuthenticationError


class PermissionDeniedError(BrokerError):
    """The connection's role lacks the permission (ServerError AuthorizationError; not retried by clients)."""

    server_error = ServerError.AuthorizationError


class ResourcesPolicySource:
    """Tenants' ``adminRoles`` and namespaces' ``auth_policies`` from :class:`BrokerResources`."""

    def __init__(self, resources: BrokerResources) -> None:
        self._resources = resources

    def tenant_admin_roles(self, tenant: str) -> Collection[str]:
        roles = (self._resources.tenants.get(tenant) or {}).get("adminRoles")
        return [r for r in roles if isinstance(r, str)] if isinstance(roles, list) else ()

    def auth_policies(self, namespace: str) -> Mapping[str, Any]:
        value = (self._resources.namespaces.get(namespace) or {}).get(AUTH_POLICIES)
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class BrokerSecurity:
    """``authentication``: None when ``authentication_enabled`` is false; ``authorization``: None when
    ``authorization_enabled`` is false; ``refresh_check_s``: ``authentication_refresh_check_seconds``."""

    authentication: AuthenticationService | None
    authorization: AuthorizationService | None
    refresh_check_s: float = 60.0

    def check_lookup(self, role: str | None, topic: TopicName) -> None:
        """LOOKUP / PARTITIONED_METADATA: produce or consume (or admin). Raises PermissionDeniedError."""
        authz = self.authorization
        if authz is not None and not authz.can_lookup(role, topic.namespace_name, _base(topic)):
            raise PermissionDeniedError(_denied(role, "lookup", topic))

    def check_namespace_lookup(self, role: str | None, namespace: str) -> None:
        """GET_TOPICS_OF_NAMESPACE (Pulsar NamespaceOperation GET_TOPICS): produce or consume granted on the
        namespace (or admin). Raises PermissionDeniedError."""
        authz = self.authorization
        if authz is not None and not authz.can_lookup(role, namespace, None):
            who = f"Client with role {role}" if role is not None else "Anonymous client"
            raise PermissionDeniedError(
                f"{who} is not authorized to list the topics of namespace {namespace}"
            )

    def check_produce(self, role: str | None, topic: TopicName) -> None:
        """PRODUCER: produce (or admin). Raises PermissionDeniedError."""
        authz = self.authorization
        if authz is not None and not authz.can_produce(role, topic.namespace_name, _base(topic)):
            raise PermissionDeniedError(_denied(role, "produce on", topic))

    def check_consume(self, role: str | None, topic: TopicName, subscription: str) -> None:
        """SUBSCRIBE: consume (or admin), and the subscription's roles when it has some. Raises
        PermissionDeniedError."""
        authz = self.authorization
        if authz is not None and not authz.can_consume(
            role, topic.namespace_name, _base(topic), subscription
        ):
            raise PermissionDeniedError(
                _denied(role, f"consume with subscription {subscription} from", topic)
            )


NO_SECURITY = BrokerSecurity(None, None)
"""Authentication and authorization off (Pulsar's defaults)."""


def _base(topic: TopicName) -> str:
    """The name grants are keyed by: a partition is judged by its partitioned topic (Pulsar)."""
    return topic.partitioned_topic_name


def _denied(role: str | None, what: str, topic: TopicName) -> str:
    who = f"Client with role {role}" if role is not None else "Anonymous client"
    return f"{who} is not authorized to {what} topic {topic.full_name}"


def build_authentication(config: BrokerConfig) -> AuthenticationService | None:
    """The authentication service of ``config`` (None when ``authentication_enabled`` is false). Raises
    ValueError for a provider that cannot be built (a missing or unreadable key, a bad htpasswd file, ...),
    naming the setting; ``quasar standalone`` calls it to refuse such a config before starting."""
    authentication = None
    if config.authentication_enabled:
        providers: list[AuthenticationProvider] = []
        for method in config.authentication_providers:
            if method == "token":
                providers.append(
                    TokenProvider(
                        secret_key=config.token_secret_key,
                        public_key=config.token_public_key,
                        public_alg=config.token_public_alg,
                        auth_claim=config.token_auth_claim,
                        audience_claim=config.token_audience_claim,
                        audience=config.token_audience,
                    )
                )
            elif method == "basic":
                if not config.basic_auth_conf:
                    raise ValueError("the basic authentication provider needs basic_auth_conf")
                providers.append(BasicProvider(config.basic_auth_conf))
            else:
                providers.append(TlsProvider())
        authentication = AuthenticationService(providers, config.anonymous_user_role)
    return authentication


def build_broker_security(config: BrokerConfig, resources: BrokerResources) -> BrokerSecurity:
    """The broker's security from ``config``, permissions read from ``resources``. Raises ValueError as
    :func:`build_authentication`."""
    authentication = build_authentication(config)
    authorization = None
    if config.authorization_enabled:
        authorization = AuthorizationService(config.super_user_roles, ResourcesPolicySource(resources))
    return BrokerSecurity(authentication, authorization, config.authentication_refresh_check_seconds)
