"""Producer access modes and producer limits of a topic (Pulsar ``AbstractTopic.addProducer`` and
``incrementTopicEpochIfNeeded``, PIP-68).

The topic keeps an epoch (``topic_epoch``, none until a producer first holds the topic exclusively; the first
exclusive holder gets 0). A client that held the topic sends its epoch back when it reconnects
(CommandProducer.topic_epoch); an epoch older than the topic's means another producer held the topic in between,
so the reconnect is fenced.

- **Shared** (default): any number of producers; ProducerBusy (retried by the client) while an exclusive producer
  holds the topic or waits for it.
- **Exclusive**: ProducerFenced (final) while an exclusive producer holds or waits for the topic, while shared
  producers are connected, or when its epoch is older than the topic's; otherwise it holds the topic at its own
  epoch (a reconnect) or at the topic's epoch + 1.
- **ExclusiveWithFencing**: closes every producer of the topic (CLOSE_PRODUCER) and fails every waiting one with
  ProducerFenced, then holds the topic as Exclusive does; the fenced producers' reconnects carry the older epoch
  and get ProducerFenced.
- **WaitForExclusive**: queued while any producer is connected (PRODUCER_SUCCESS with ``producer_ready=false``);
  when the holder leaves, the first queued producer holds the topic and gets a second PRODUCER_SUCCESS with
  ``producer_ready=true``.

Names are unique per topic (ProducerBusy), and ``max_producers`` (broker ``maxProducersPerTopic``, 0 =
unlimited) bounds the producers of a topic (ProducerBusy "Topic reached max producers limit"). The epoch lives
with the topic object: a broker restart starts it again from the first reconnecting holder's epoch (Pulsar keeps
it in the managed ledger's properties).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import ValuesView
from typing import Generic, Protocol, TypeVar

from quasar.broker.errors import BrokerError, ProducerBusyError, ProducerFencedError

__all__ = ["AccessProducer", "ProducerAccess", "ProducerAccessMode"]


class ProducerAccessMode(enum.IntEnum):
    """``ProducerAccessMode`` of PulsarApi.proto (CommandProducer.producer_access_mode)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class AccessProducer(Protocol):
    """What the access-mode rules need of a producer (``broker.producer.Producer`` implements it)."""

    @property
    def producer_name(self) -> str: ...

    @property
    def access_mode(self) -> ProducerAccessMode: ...

    @property
    def closed(self) -> bool:
        """Closed or disconnected: a waiter that closed is skipped."""
        ...

    @property
    def requested_epoch(self) -> int | None:
        """CommandProducer.topic_epoch: the epoch this producer held the topic at before a reconnect, if any."""
        ...

    def fence(self) -> None:
        """Disconnect the producer (an ExclusiveWithFencing producer took the topic)."""
        ...

    def refuse(self, error: BrokerError) -> None:
        """Fail this waiting (WaitForExclusive) producer's creation with ``error`` and drop it."""
        ...

    def grant(self, topic_epoch: int) -> None:
        """The waiting producer now holds the topic at ``topic_epoch``: tell its client it may send."""
        ...


P = TypeVar("P", bound=AccessProducer)


class ProducerAccess(Generic[P]):
    """The producers of one topic by name, with the access-mode state (exclusive holder, waiters, epoch)."""

    def __init__(self, topic_name: str, *, max_producers: int = 0) -> None:
        self._topic_name = topic_name
        self.max_producers = max_producers
        self.producers: dict[str, P] = {}
        self.exclusive: P | None = None
        self.waiting: deque[P] = deque()
        self.topic_epoch: int | None = None

    def add(self, producer: P) -> bool:
        """Register ``producer``; returns False when it waits (WaitForExclusive on a busy topic). Raises
        ProducerBusyError (name taken, limit reached, Shared against an exclusive holder) or ProducerFencedError
        (Exclusive conflicts, an epoch older than the topic's), with Pulsar's messages."""
        name = producer.producer_name
        existing = self.producers.get(name)
        if existing is not None and existing is not producer:
            raise ProducerBusyError(
                f"Producer with name '{name}' is already connected to topic {self._topic_name}"
            )
        if self.max_producers > 0 and len(self.producers) >= self.max_producers:
            raise ProducerBusyError(f"Topic '{self._topic_name}' reached max producers limit")
        mode = producer.access_mode
        others = [p for p in self.producers.values() if p is not producer]
        if mode == ProducerAccessMode.Shared:
            if self.exclusive is not None or self.waiting:
                raise ProducerBusyError(f"Topic has an existing exclusive producer: {self._holder_name()}")
        elif mode == ProducerAccessMode.Exclusive:
            if self.exclusive is not None or self.waiting:
                raise ProducerFencedError(f"Topic has an existing exclusive producer: {self._holder_name()}")
            if others:
                raise ProducerFencedError("Topic has existing shared producers")
            self._check_epoch(producer)
            self._take(producer)
        elif mode == ProducerAccessMode.ExclusiveWithFencing:
            waiters, self.waiting = list(self.waiting), deque()
            for waiter in waiters:
                waiter.refuse(ProducerFencedError("Fenced out"))
            for other in others:
                other.fence()  # detaches it: remove() runs before the loop goes on
            self._check_epoch(producer)
            self._take(producer)
        elif mode == ProducerAccessMode.WaitForExclusive:
            if others:
                self.waiting.append(producer)
                return False
            self._check_epoch(producer)
            self._take(producer)
        else:
            raise ProducerBusyError(f"Invalid producer access mode: {mode}")
        self.producers[name] = producer
        return True

    def _holder_name(self) -> str | None:
        return self.exclusive.producer_name if self.exclusive is not None else None

    def _check_epoch(self, producer: P) -> None:
        requested = producer.requested_epoch
        current = -1 if self.topic_epoch is None else self.topic_epoch
        if requested is not None and requested < current:
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {current}, Producer epoch: {requested}"
            )

    def _take(self, producer: P) -> None:
        self.exclusive = producer
        requested = producer.requested_epoch
        if requested is not None:
            self.topic_epoch = requested
        else:
            self.topic_epoch = (-1 if self.topic_epoch is None else self.topic_epoch) + 1

    def remove(self, producer: P) -> None:
        """Drop ``producer`` (closed, disconnected or fenced); a free topic goes to the first waiter that is
        still open and whose epoch is not older than the topic's (a stale one is refused with
        ProducerFenced)."""
        if self.producers.get(producer.producer_name) is producer:
            del self.producers[producer.producer_name]
        if producer in self.waiting:
            self.waiting.remove(producer)
        if self.exclusive is producer:
            self.exclusive = None
        while self.waiting and not self.producers:
            waiter = self.waiting.popleft()
            if waiter.closed:
                continue
            try:
                self._check_epoch(waiter)
            except ProducerFencedError as exc:
                waiter.refuse(exc)
                continue
            self._take(waiter)
            self.producers[waiter.producer_name] = waiter
            waiter.grant(self.topic_epoch if self.topic_epoch is not None else 0)

    def values(self) -> ValuesView[P]:
        return self.producers.values()
