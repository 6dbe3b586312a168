"""The two clients ``quasar perf`` can drive, behind one small adapter.

``--client pulsar`` (default) uses the official ``pulsar-client`` package (C++ core; ``send_async`` callbacks
and message listeners run on its threads); ``--client quasar`` uses Quasar's own blocking client
(:class:`quasar.client.Client`, the same shape; callbacks run on its event-loop thread). Producers are created
as ``pulsar-perf`` creates them: ``block_if_queue_full`` on, ``send_timeout_millis`` 0 (no send timeout), the
given pending-queue size, batching on when the batch window is above 0 ms.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CLIENTS",
    "COMPRESSIONS",
    "SUBSCRIPTION_TYPES",
    "PerfClient",
    "ProducerSettings",
    "probe_service_url",
]

CLIENTS = ("pulsar", "quasar")
#: ``-z`` values: Pulsar's CompressionType names (``pulsar.CompressionType`` spells ZLIB ``ZLib``).
COMPRESSIONS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
#: ``-st`` values: Pulsar's SubscriptionType names (the Python client calls Key_Shared ``KeyShared``).
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651}


def probe_service_url(service_url: str, timeout_s: float = 5.0) -> None:
    """Check that at least one broker of ``service_url`` (``pulsar://h1:p1,h2:p2``) accepts a TCP connection.

    Raises:
        ConnectionError: none does (the message names the URL and the last socket error).
        ValueError: the URL is not ``pulsar://`` or ``pulsar+ssl://`` with at least one host.
    """
    parts = urlsplit(service_url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc:
        raise ValueError(
            f"service URL must be pulsar://host:port or pulsar+ssl://host:port, got {service_url!r}"
        )
    last_error: OSError | None = None
    for host_port in parts.netloc.split(","):
        host, _, port = host_port.rpartition(":") if ":" in host_port else (host_port, "", "")
        try:
            number = int(port) if port else _DEFAULT_PORTS[parts.scheme]
        except ValueError:
            raise ValueError(f"bad port in service URL {service_url!r}: {port!r}") from None
        try:
            with socket.create_connection((host.strip("[]"), number), timeout=timeout_s):
                return
        except OSError as exc:
            last_error = exc
    raise ConnectionError(f"broker unreachable at {service_url}: {last_error}")


@dataclass(frozen=True)
class ProducerSettings:
    """How each producer is made: batch window ``batch_time_ms`` (0 = no batching), ``batch_max_messages``,
    ``compression`` (a :data:`COMPRESSIONS` name), ``max_pending`` messages awaiting a receipt."""

    batch_time_ms: int = 1
    batch_max_messages: int = 1000
    compression: str = "NONE"
    max_pending: int = 1000


class PerfClient:
    """One client shared by every producer or consumer of a run.

    Args:
        kind: ``"pulsar"`` (official client) or ``"quasar"`` (ours).
        service_url: ``pulsar://host:port``.
        auth_token: a JWT for ``AuthenticationToken``, or None.
        operation_timeout_s: the client's ``operation_timeout_seconds`` (lookup, producer/consumer creation).

    Raises:
        ValueError: unknown ``kind``. The client's own errors (bad URL) pass through.
    """

    def __init__(
        self, kind: str, service_url: str, *, auth_token: str | None = None, operation_timeout_s: int = 30
    ) -> None:
        if kind not in CLIENTS:
            raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {kind!r}")
        self.kind = kind
        kwargs: dict[str, Any] = {"operation_timeout_seconds": operation_timeout_s}
        if kind == "pulsar":
            import pulsar

            self._lib: Any = pulsar
            self._ok: Any = pulsar.Result.Ok
            # the C++ client's own console logger at WARN: a Python logging.Logger here makes the process abort
            # now and then at exit ("terminate called without an active exception", pulsar-client-python#256)
            kwargs["logger"] = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
            if auth_token:
                kwargs["authentication"] = pulsar.AuthenticationToken(auth_token)
        else:
            import quasar.client

            self._lib = quasar.client
            self._ok = None
            if auth_token:
                kwargs["authentication"] = quasar.client.AuthenticationToken(auth_token)
        self._client = self._lib.Client(service_url, **kwargs)

    def is_ok(self, result: Any) -> bool:
        """True when a ``send_async`` callback's first argument means success (``pulsar.Result.Ok``; None for
        Quasar's client)."""
        return result is self._ok or result == self._ok

    def create_producer(self, topic: str, settings: ProducerSettings) -> Any:
        """A producer on ``topic`` made as ``pulsar-perf`` makes them (see the module docstring)."""
        lib = self._lib
        name = "ZLib" if settings.compression == "ZLIB" and self.kind == "pulsar" else settings.compression
        return self._client.create_producer(
            topic,
            compression_type=getattr(lib.CompressionType, name),
            batching_enabled=settings.batch_time_ms > 0,
            batching_max_publish_delay_ms=max(settings.batch_time_ms, 1),
            batching_max_messages=settings.batch_max_messages,
            max_pending_messages=settings.max_pending,
            block_if_queue_full=True,
            send_timeout_millis=0,
        )

    def subscribe(
        self, topic: str, subscription: str, *, sub_type: str, earliest: bool, receiver_queue_size: int
    ) -> Any:
        """A consumer of ``subscription`` on ``topic`` (``sub_type`` a :data:`SUBSCRIPTION_TYPES` name; a new
        subscription starts at the earliest message when ``earliest``, else at the latest)."""
        lib = self._lib
        type_name = "KeyShared" if sub_type == "Key_Shared" else sub_type
        position = lib.InitialPosition.Earliest if earliest else lib.InitialPosition.Latest
        return self._client.subscribe(
            topic,
            subscription,
            consumer_type=getattr(lib.ConsumerType, type_name),
            initial_position=position,
            receiver_queue_size=receiver_queue_size,
        )

    def close(self) -> None:
        """Close the client (and whatever it still has open)."""
        self._client.close()
