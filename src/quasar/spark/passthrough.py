"""Passthrough options of the Spark connector (``quasar.client.*``, ``quasar.reader.*``, ``quasar.producer.*``):
Spark lower-cases option keys, so each table maps a normalised name (no ``_``, ``.``, ``-``; lower case) to the
:mod:`quasar.client` keyword and its type. Names are the official ``pulsar-client``'s, which quasar.client
shares; a few official-only options are accepted, checked and dropped with a log line.

TLS and authentication (``quasar.client.*``, the Pulsar Spark connector's ``pulsar.client.*`` names, i.e. the
Java client's): ``tlsTrustCertsFilePath``, ``tlsAllowInsecureConnection``, ``tlsHostnameVerificationEnable``
(or ``tlsValidateHostname``), ``useTls``, ``tlsCertificateFilePath`` / ``tlsKeyFilePath``, and
``authPluginClassName`` with ``authParams`` (``org.apache.pulsar.client.impl.auth.AuthenticationToken`` /
``...AuthenticationBasic`` / ``...AuthenticationTls`` or ``token`` / ``basic`` / ``tls``; parameters as the
Java client reads them, see :func:`quasar.client.auth.authentication_from_params`). :func:`client_kwargs`
turns them into :class:`quasar.client.Client` arguments; the same credentials and trust settings are used for
the admin REST calls (:func:`admin_ssl_context`, :func:`admin_headers`).
"""

from __future__ import annotations

import base64
import logging
import ssl
from typing import Any

from quasar.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationToken,
    CompressionType,
    PartitionsRoutingMode,
)
from quasar.client.auth import authentication_from_params
from quasar.client.tls import client_ssl_context
from quasar.spark.errors import OptionError

__all__ = [
    "CLIENT_PARAMS",
    "PRODUCER_PARAMS",
    "READER_PARAMS",
    "admin_headers",
    "admin_ssl_context",
    "client_kwargs",
    "convert",
]

log = logging.getLogger("quasar.spark")


def _norm(name: str) -> str:
    return name.replace("_", "").replace(".", "").replace("-", "").lower()


#: Options of the official client that quasar.client has no use for: accepted (so existing jobs keep
#: working), checked, and dropped with a log line.
_IGNORED = "ignored"

CLIENT_PARAMS = {
    "operationtimeoutseconds": ("operation_timeout_seconds", int),
    "connectiontimeoutms": ("connection_timeout_ms", int),
    "iothreads": ("io_threads", int),  # ignored by quasar.client.Client (one asyncio loop thread)
    "usetls": ("use_tls", bool),
    "tlstrustcertsfilepath": ("tls_trust_certs_file_path", str),
    "tlsallowinsecureconnection": ("tls_allow_insecure_connection", bool),
    "tlshostnameverificationenable": ("tls_validate_hostname", bool),
    "tlsvalidatehostname": ("tls_validate_hostname", bool),
    "tlscertificatefilepath": ("tls_certificate_file_path", str),
    "tlskeyfilepath": ("tls_private_key_file_path", str),
    "tlsprivatekeyfilepath": ("tls_private_key_file_path", str),
    "authpluginclassname": ("auth_plugin_class_name", str),
    "authparams": ("auth_params", str),
}
READER_PARAMS = {
    "receiverqueuesize": ("receiver_queue_size", int),
    "readername": ("reader_name", str),
    "subscriptionroleprefix": ("subscription_role_prefix", str),
    "readcompacted": ("is_read_compacted", bool),
    "isreadcompacted": ("is_read_compacted", bool),
}
PRODUCER_PARAMS = {
    "sendtimeoutmillis": ("send_timeout_millis", int),
    "sendtimeoutms": ("send_timeout_millis", int),
    "compressiontype": ("compression_type", CompressionType),
    "maxpendingmessages": ("max_pending_messages", int),
    "maxpendingmessagesacrosspartitions": ("max_pending_messages_across_partitions", (_IGNORED, int)),
    "blockifqueuefull": ("block_if_queue_full", bool),
    "batchingenabled": ("batching_enabled", bool),
    "enablebatching": ("batching_enabled", bool),
    "batchingmaxmessages": ("batching_max_messages", int),
    "batchingmaxallowedsizeinbytes": ("batching_max_allowed_size_in_bytes", int),
    "batchingmaxpublishdelayms": ("batching_max_publish_delay_ms", int),
    "chunkingenabled": ("chunking_enabled", bool),
    "messageroutingmode": ("message_routing_mode", PartitionsRoutingMode),
    "lazystartpartitionedproducers": ("lazy_start_partitioned_producers", (_IGNORED, bool)),
    "batchingtype": ("batching_type", (_IGNORED, ("Default", "KeyBased"))),
}


def _parse(text: str, kind: Any) -> Any:
    """One passthrough value of ``kind`` (bool, int, str, an enum class or a tuple of names); ValueError."""
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return text.lower() == "true"
    if kind is int:
        return int(text)
    if kind is str:
        return text
    names = kind if isinstance(kind, tuple) else tuple(kind.__members__)
    for name in names:
        if name.lower() == text.lower():
            return name if isinstance(kind, tuple) else kind[name]
    raise ValueError(f"expected one of {', '.join(names)}")


def convert(conf: tuple[tuple[str, str], ...], table: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Map passthrough pairs to :mod:`quasar.client` keyword arguments (the official client's names, which
    quasar.client shares); OptionError for unknown keys or bad values. Official-client options quasar.client
    does not have are checked and dropped (logged)."""
    out: dict[str, Any] = {}
    for key, raw in conf:
        entry = table.get(_norm(key))
        if entry is None:
            valid = ", ".join(sorted({prefix + name for name in table}))
            raise OptionError(f"unknown option {prefix + key!r}; valid: {valid}")
        name, kind = entry
        ignored = isinstance(kind, tuple) and kind[0] == _IGNORED
        try:
            value = _parse(str(raw).strip(), kind[1] if ignored else kind)
        except ValueError as exc:
            raise OptionError(f"option {prefix + key!r}: bad value {raw!r}: {exc}") from None
        if ignored:
            log.info("option %s=%s has no equivalent in quasar.client; ignored", prefix + key, value)
        else:
            out[name] = value
    return out


def client_kwargs(conf: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """``quasar.client.*`` pairs as :class:`quasar.client.Client` keyword arguments: :func:`convert` with
    ``authPluginClassName`` + ``authParams`` turned into an ``authentication`` object. Raises OptionError for an
    unknown option, a bad value, or authentication parameters the plugin cannot use."""
    kwargs = convert(conf, CLIENT_PARAMS, "quasar.client.")
    plugin = kwargs.pop("auth_plugin_class_name", None)
    params = kwargs.pop("auth_params", None)
    if plugin is None and params is not None:
        raise OptionError("option 'quasar.client.authParams' needs 'quasar.client.authPluginClassName'")
    if plugin is not None:
        try:
            kwargs["authentication"] = authentication_from_params(plugin, params or "")
        except (TypeError, ValueError) as exc:
            raise OptionError(f"options 'quasar.client.authPluginClassName' / 'authParams': {exc}") from None
    return kwargs


def admin_ssl_context(kwargs: dict[str, Any]) -> ssl.SSLContext:
    """The TLS context of ``https://`` admin REST calls, from :func:`client_kwargs`'s result: the same trust
    file, insecure and host name settings as the client, and its client certificate (``AuthenticationTLS`` or
    ``tlsCertificateFilePath``). Raises OptionError when a file cannot be read."""
    certificate = None
    if kwargs.get("tls_certificate_file_path") and kwargs.get("tls_private_key_file_path"):
        certificate = (kwargs["tls_certificate_file_path"], kwargs["tls_private_key_file_path"])
    try:
        return client_ssl_context(
            trust_certs_file_path=kwargs.get("tls_trust_certs_file_path"),
            allow_insecure_connection=kwargs.get("tls_allow_insecure_connection", False),
            validate_hostname=kwargs.get("tls_validate_hostname", False),
            authentication=kwargs.get("authentication"),
            certificate=certificate,
        )
    except ValueError as exc:
        raise OptionError(f"TLS options (quasar.client.tls*): {exc}") from None


def admin_headers(authentication: Authentication | None) -> dict[str, str]:
    """The ``Authorization`` header of admin REST calls for ``authentication`` (Pulsar's HTTP forms): token ->
    ``Bearer <jwt>``, basic -> ``Basic base64(user:password)``; none for TLS (the certificate is in the
    handshake) or no authentication."""
    if isinstance(authentication, AuthenticationToken):
        return {"Authorization": "Bearer " + authentication.auth_data().decode()}
    if isinstance(authentication, AuthenticationBasic):
        return {"Authorization": "Basic " + base64.b64encode(authentication.auth_data()).decode("ascii")}
    return {}
