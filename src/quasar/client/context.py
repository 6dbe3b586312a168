"""The port through which producers and consumers reach their client (:class:`~quasar.client.AsyncClient`
implements it): the client-wide settings, connection pool, lookup service and id counters, producer creation
(dead-letter and retry-letter producers) and the registry of open handles."""

from __future__ import annotations

from typing import Any, Protocol

from .config import ClientConfig
from .connection_pool import ConnectionPool, LookupService

__all__ = ["ClientContext"]


class ClientContext(Protocol):
    """What a producer, consumer or reader needs from the client that created it."""

    config: ClientConfig
    pool: ConnectionPool
    lookup: LookupService

    def next_producer_id(self) -> int:
        """Client-wide producer id counter (from 0)."""
        ...

    def next_consumer_id(self) -> int:
        """Client-wide consumer id counter (from 0)."""
        ...

    def forget(self, handle: object) -> None:
        """Stop tracking a producer / consumer that closed itself (``close`` of the client skips it)."""
        ...

    async def create_producer(self, topic: str, config: Any = None, **kwargs: Any) -> Any:
        """A started producer of ``topic`` (``ProducerConfig`` fields as keywords)."""
        ...
