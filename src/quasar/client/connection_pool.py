"""Connection pool (one connection per broker address) and the binary-protocol lookup service.

* :class:`ConnectionPool` keeps one :class:`ClientCnx` per ``(host, port)`` shared by every producer,
  consumer and lookup (C++ ``connectionsPerBroker = 1``, reference/pulsar-protocol.md §8.5); concurrent
  callers wait for the same handshake; a closed connection is replaced on the next ``get``.
* With ``ClientConfig.use_tls`` every connection is TLS (one client context,
  :func:`quasar.client.tls.client_ssl_context`, built when the pool is) and lookups take the broker's
  ``brokerServiceUrlTls`` (C++ ``ClientConfiguration::isUseTls``); every CONNECT carries the configured
  authentication.
* :class:`LookupService` sends PARTITIONED_METADATA / LOOKUP / GET_TOPICS_OF_NAMESPACE on the service-URL
  connection and follows LOOKUP redirects (``response = Redirect``) up to ``max_lookup_redirects`` (20),
  re-asking the redirect target with the returned ``authoritative`` flag (§6.4, §6.5). Retryable failures
  (connection loss, retryable ServerErrors) are retried with exponential backoff until
  ``operation_timeout_seconds`` (C++ ``RetryableLookupService``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

from quasar.protocol import TopicName, commands

from .client_cnx import ClientCnx
from .config import ClientConfig
from .errors import BrokerResponseError, ClientError, ConnectError, ConnectionClosedError, LookupError_
from .tls import client_ssl_context

__all__ = ["ConnectionPool", "LookupService", "parse_service_url", "service_url_uses_tls"]

T = TypeVar("T")

_LOOKUP_REDIRECT = 0
DEFAULT_PORT = 6650
DEFAULT_PORT_TLS = 6651
_TLS_SCHEMES = ("pulsar+ssl", "nameserver+ssl")


def service_url_uses_tls(url: str) -> bool:
    """True for a ``pulsar+ssl://`` (or ``nameserver+ssl://``) service URL: brokers are reached over TLS."""
    return isinstance(url, str) and urlsplit(url).scheme in _TLS_SCHEMES


def parse_service_url(url: str) -> tuple[str, int]:
    """``pulsar://host[:port][,host2:port2...][/]`` or ``pulsar+ssl://...`` -> ``(host, port)`` of the first host
    (default port 6650, 6651 for ``pulsar+ssl``).

    Raises:
        TypeError: ``url`` is not a str.
        ValueError: not a ``pulsar://`` / ``pulsar+ssl://`` URL, or no host.
    """
    if not isinstance(url, str):
        raise TypeError(f"service_url must be a str, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise ValueError(f"service_url must start with pulsar:// or pulsar+ssl:// (got {url!r})")
    first = parts.netloc.split(",")[0]
    if not first:
        raise ValueError(f"service_url has no host: {url!r}")
    host, sep, port_text = first.rpartition(":")
    if not sep or first.endswith("]"):
        return first.strip("[]"), DEFAULT_PORT_TLS if parts.scheme == "pulsar+ssl" else DEFAULT_PORT
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"service_url has a bad port: {url!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"service_url port out of range: {url!r}")
    return host.strip("[]"), port


class ConnectionPool:
    """One :class:`ClientCnx` per broker address.

    Args:
        config: the client configuration (timeouts, keep-alive, TLS, authentication).

    Raises:
        ValueError: with ``use_tls``, a trust file or client certificate that cannot be read.
    """

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.ssl_context = (
            client_ssl_context(
                trust_certs_file_path=config.tls_trust_certs_file_path,
                allow_insecure_connection=config.tls_allow_insecure_connection,
                validate_hostname=config.tls_validate_hostname,
                authentication=config.authentication,
                certificate=(
                    (config.tls_certificate_file_path, config.tls_private_key_file_path)
                    if config.tls_certificate_file_path and config.tls_private_key_file_path
                    else None
                ),
            )
            if config.use_tls
            else None
        )
        self._ids = itertools.count()
        self._connections: dict[tuple[str, int], ClientCnx] = {}
        self._connecting: dict[tuple[str, int], asyncio.Future[ClientCnx]] = {}
        self._closed = False

    def next_request_id(self) -> int:
        """The client-wide request id counter (starts at 0)."""
        return next(self._ids)

    async def get(self, address: tuple[str, int]) -> ClientCnx:
        """Return the live connection to ``address``, opening it if needed.

        Raises:
            ConnectError: the connection could not be made.
            ClientError: the pool is closed.
        """
        if self._closed:
            raise ClientError("client is closed")
        cnx = self._connections.get(address)
        if cnx is not None and not cnx.is_closed:
            return cnx
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[ClientCnx] = asyncio.get_running_loop().create_future()
        self._connecting[address] = future
        try:
            cnx = await ClientCnx.connect(
                address,
                next_request_id=self.next_request_id,
                operation_timeout=self.config.operation_timeout_seconds,
                keep_alive_interval=self.config.keep_alive_interval_seconds,
                connection_timeout=self.config.connection_timeout_ms / 1000,
                ssl_context=self.ssl_context,
                authentication=self.config.authentication,
            )
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else ConnectError("cancelled"))
            future.exception()
            raise
        finally:
            del self._connecting[address]
        if self._closed:
            cnx.close()
            raise ClientError("client is closed")
        self._connections[address] = cnx
        future.set_result(cnx)
        return cnx

    async def aclose(self) -> None:
        """Close every connection and wait for them to go down."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for cnx in connections:
            cnx.close()
        for cnx in connections:
            await cnx.wait_closed()


async def retry_until(
    deadline: float,
    operation: Callable[[], Awaitable[T]],
    config: ClientConfig,
    *,
    is_closed: Callable[[], bool] = lambda: False,
) -> T:
    """Run ``operation`` until it succeeds, a fatal error happens, or ``deadline`` (monotonic s) passes.

    Retryable: ConnectError, ConnectionClosedError, OperationTimeoutError and BrokerResponseError with
    ``retryable``; backoff from ``initial_backoff_interval_ms`` doubling to ``max_backoff_interval_ms``.
    """
    backoff = config.initial_backoff_interval_ms / 1000
    while True:
        try:
            return await operation()
        except BrokerResponseError as exc:
            if not exc.retryable:
                raise
            error: ClientError = exc
        except (ConnectError, ConnectionClosedError, TimeoutError) as exc:
            error = exc if isinstance(exc, ClientError) else ConnectError(str(exc))
        remaining = deadline - time.monotonic()
        if remaining <= 0 or is_closed():
            raise error
        await asyncio.sleep(min(backoff, remaining))
        backoff = min(backoff * 2, config.max_backoff_interval_ms / 1000)


class LookupService:
    """Topic lookups over the binary protocol, on the service-URL connection.

    Args:
        pool: the connection pool.
        service_address: ``(host, port)`` of the service URL.
    """

    def __init__(self, pool: ConnectionPool, service_address: tuple[str, int]) -> None:
        self.pool = pool
        self.service_address = service_address

    def _deadline(self) -> float:
        return time.monotonic() + self.pool.config.operation_timeout_seconds

    async def get_partitioned_metadata(self, topic: str) -> int:
        """Partition count of ``topic`` (full name); 0 = not partitioned.

        Raises:
            BrokerResponseError / ConnectError / OperationTimeoutError once retries are exhausted.
        """

        async def once() -> int:
            cnx = await self.pool.get(self.service_address)
            request_id = cnx.next_request_id()
            body = await cnx.request(commands.new_partitioned_metadata(topic, request_id), request_id)
            return int(body.partitions)

        return await retry_until(self._deadline(), once, self.pool.config)

    async def lookup(self, topic: str) -> tuple[str, int]:
        """Address ``(host, port)`` of the broker owning ``topic`` (a full, non-partitioned or partition name).

        Raises:
            LookupError_: more than ``max_lookup_redirects`` redirects, or an unusable broker URL.
            BrokerResponseError / ConnectError / OperationTimeoutError once retries are exhausted.
        """
        return await retry_until(self._deadline(), lambda: self._lookup_once(topic), self.pool.config)

    async def _lookup_once(self, topic: str) -> tuple[str, int]:
        address = self.service_address
        authoritative = False
        for _ in range(self.pool.config.max_lookup_redirects + 1):
            cnx = await self.pool.get(address)
            request_id = cnx.next_request_id()
            listener = self.pool.config.listener_name or ""
            frame = commands.new_lookup(
                topic, request_id, authoritative=authoritative, advertised_listener_name=listener
            )
            body = await cnx.request(frame, request_id)
            url = body.brokerServiceUrl
            if self.pool.config.use_tls:
                url = body.brokerServiceUrlTls
                if not url:
                    raise LookupError_(
                        f"lookup of {topic}: the broker has no TLS listener (no brokerServiceUrlTls in its answer)"
                    )
            try:
                target = parse_service_url(url)
            except ValueError as exc:
                raise LookupError_(f"lookup of {topic} returned an unusable URL: {exc}") from None
            if body.response != _LOOKUP_REDIRECT:
                if body.proxy_through_service_url:
                    return self.service_address
                return target
            address = target
            authoritative = body.authoritative
        raise LookupError_(f"lookup of {topic}: more than {self.pool.config.max_lookup_redirects} redirects")

    async def get_topics_of_namespace(self, namespace: str) -> list[str]:
        """Persistent topics of ``tenant/namespace``, partitions folded to their base names, de-duplicated."""

        async def once() -> list[str]:
            cnx = await self.pool.get(self.service_address)
            request_id = cnx.next_request_id()
            body = await cnx.request(commands.new_get_topics_of_namespace(request_id, namespace), request_id)
            names: dict[str, None] = {}
            for name in body.topics:
                names[TopicName.parse(name).partitioned_topic_name] = None
            return list(names)

        return await retry_until(self._deadline(), once, self.pool.config)

    async def aclose(self) -> None:
        """Release what the lookup service holds (nothing here; name-server lookups close their connections)."""
