"""The connection ports the command families of ServerCnx are given, and the id registries behind them.

Each family (``lookup``, ``producers``, ``consumers``) sees its connection only through a small Protocol:
write a frame, close the connection with a reason, spawn a task the connection owns, the registry of its
producers or consumers, the peer's address, the broker config and the BrokerService. ``ServerCnx`` implements
all of them; tests can drive a family with a fake.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from quasar.broker.consumer import ConsumerConnection
from quasar.broker.producer import ProducerConnection

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.config import BrokerConfig
    from quasar.broker.consumer import Consumer
    from quasar.broker.producer import Producer
    from quasar.protocol.decoder import Frame

__all__ = ["CommandPort", "ConsumerPort", "FrameHandler", "HandlerTable", "IdRegistry", "ProducerPort"]

FrameHandler = Callable[["Frame"], None]
"""Handles one decoded frame of one command type."""

HandlerTable = Mapping[int, FrameHandler]
"""``CommandType`` value -> bound handler (what a family contributes to the connection's dispatch table)."""

T = TypeVar("T")


class IdRegistry(Generic[T]):
    """Producers or consumers of one connection by the client's id (Pulsar ServerCnx ``producers`` /
    ``consumers``), with the ids still being created and the ids closed on this connection.

    ``active``: id -> object, served now. ``pending``: ids whose PRODUCER / SUBSCRIBE is still loading its
    topic (a retry with the same id is refused meanwhile). ``closed``: the last ``MAX_CLOSED_IDS`` ids closed
    by the client or the broker, oldest first, so late commands for them are ignored instead of closing the
    connection, and a CLOSE that arrives while the id is pending wins over the creation. The bound keeps a
    long-lived connection that opens and closes producers forever from growing without limit; a command for
    an id closed longer ago than that is treated as one for an unknown id.
    """

    __slots__ = ("active", "closed", "pending")

    MAX_CLOSED_IDS = 4096

    def __init__(self) -> None:
        self.active: dict[int, T] = {}
        self.pending: set[int] = set()
        self.closed: dict[int, None] = {}  # an insertion-ordered set

    def __len__(self) -> int:
        return len(self.active)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self.active.values()))

    def get(self, ident: int) -> T | None:
        """The active object with client id ``ident``, or None."""
        return self.active.get(ident)

    def reserve(self, ident: int) -> None:
        """``ident`` is being created: pending, and no longer closed (a CLOSE from now on wins)."""
        self.pending.add(ident)
        self.closed.pop(ident, None)

    def release(self, ident: int) -> None:
        """Creation of ``ident`` finished (added, refused or abandoned)."""
        self.pending.discard(ident)

    def add(self, ident: int, item: T) -> None:
        """Serve ``item`` under client id ``ident`` from now on."""
        self.active[ident] = item

    def close(self, ident: int) -> T | None:
        """Remove ``ident`` (a CLOSE_* from the client or the broker); returns the object it named, if any.
        The id is remembered as closed when it was active or pending."""
        item = self.active.pop(ident, None)
        if item is not None or ident in self.pending:
            self.closed.pop(ident, None)
            self.closed[ident] = None
            if len(self.closed) > self.MAX_CLOSED_IDS:
                del self.closed[next(iter(self.closed))]
        return item

    def was_closed(self, ident: int) -> bool:
        """Whether ``ident`` is among the ids closed recently on this connection."""
        return ident in self.closed

    def clear(self) -> list[T]:
        """Forget everything (the connection closed); returns the objects that were active."""
        items = list(self.active.values())
        self.active.clear()
        self.pending.clear()
        return items


class CommandPort(Protocol):
    """What every command family needs from its connection."""

    @property
    def remote_address(self) -> str:
        """``host:port`` of the client."""
        ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def role(self) -> str | None:
        """The connection's authenticated role (None with authentication off)."""
        ...

    @property
    def service(self) -> BrokerService: ...

    def write(self, frame: bytes) -> None:
        """Send one encoded frame (dropped once the connection is closing)."""
        ...

    def close(self, reason: str) -> None:
        """Close this connection only, logging ``reason``."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task owned by the connection: cancelled when it closes; an exception escaping it
        is logged and closes the connection."""
        ...


class ProducerPort(CommandPort, ProducerConnection, Protocol):
    """The producer family's connection: the common port, the producers by id, and the connection as the
    ``ProducerConnection`` its producers answer through."""

    @property
    def producers(self) -> IdRegistry[Producer]: ...

    def publish_started(self) -> None:
        """One SEND was handed to its producer (counted against the pending-publish limit)."""


class ConsumerPort(CommandPort, ConsumerConnection, Protocol):
    """The consumer family's connection: the common port, the consumers by id, and the connection as the
    ``ConsumerConnection`` its consumers receive through."""

    @property
    def consumers(self) -> IdRegistry[Consumer]: ...
