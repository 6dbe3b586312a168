"""Producer access modes and producer limits of a topic (Pulsar ``AbstractTopic.addProducer``, PIP-68).

- **Shared** (default): any number of producers; refused (ProducerBusy) while an exclusive producer holds
  the topic.
- **Exclusive**: refused (ProducerBusy) when any other producer is connected; otherwise it holds the topic and
  the topic epoch goes up by one (sent back as ``topic_epoch``).
- **ExclusiveWithFencing**: takes the topic at once; every other producer is disconnected (CLOSE_PRODUCER) and
  its reconnection is refused with ProducerFenced (fatal for the client) while that producer holds the topic.
- **WaitForExclusive**: when the topic is free it is Exclusive; otherwise the broker answers PRODUCER_SUCCESS
  with ``producer_ready=false`` and queues it; when the topic becomes free the first queued producer gets a
  second PRODUCER_SUCCESS with ``producer_ready=true``.

Names are unique per topic (ProducerBusy), and ``max_producers`` (broker ``maxProducersPerTopic``, 0 =
unlimited) bounds the producers of a topic (ProducerBusy "Topic reached max producers limit").
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import ValuesView
from typing import Generic, Protocol, TypeVar

from quasar.broker.errors import ProducerBusyError, ProducerFencedError

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

    def fence(self) -> None:
        """Disconnect the producer (an ExclusiveWithFencing producer took the topic)."""
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
        self.topic_epoch = 0
        self.fenced: set[str] = set()  # names fenced by the current ExclusiveWithFencing holder

    def add(self, producer: P) -> bool:
        """Register ``producer``; returns False when it waits (WaitForExclusive on a busy topic). Raises
        ProducerBusyError (name taken, limit reached, access-mode conflict)."""
        name = producer.producer_name
        existing = self.producers.get(name)
        if existing is not None and existing is not producer:
            raise ProducerBusyError(
                f"Producer with name '{name}' is already connected to topic {self._topic_name}"
            )
        if self.max_producers > 0 and len(self.producers) >= self.max_producers:
            raise ProducerBusyError(f"Topic reached max producers limit {self.max_producers}")
        if name in self.fenced:
            raise ProducerFencedError(f"Producer '{name}' was fenced on topic {self._topic_name}")
        mode = producer.access_mode
        others = [p for p in self.producers.values() if p is not producer]
        if mode == ProducerAccessMode.Shared:
            if self.exclusive is not None:
                raise ProducerBusyError(f"Topic {self._topic_name} has an existing exclusive producer")
        elif mode == ProducerAccessMode.Exclusive:
            if others:
                raise ProducerBusyError(
                    f"Topic {self._topic_name} has existing producers; cannot be exclusive"
                )
            self._take(producer)
        elif mode == ProducerAccessMode.ExclusiveWithFencing:
            self.fenced.update(other.producer_name for other in others)
            for other in others:
                other.fence()
            self._take(producer)
        elif mode == ProducerAccessMode.WaitForExclusive:
            if others:
                self.waiting.append(producer)
                return False
            self._take(producer)
        else:
            raise ProducerBusyError(f"unknown producer access mode {mode}")
        self.producers[name] = producer
        return True

    def _take(self, producer: P) -> None:
        self.exclusive = producer
        self.topic_epoch += 1

    def remove(self, producer: P) -> None:
        """Drop ``producer`` (closed, disconnected or fenced); a free topic goes to the first waiter."""
        if self.producers.get(producer.producer_name) is producer:
            del self.producers[producer.producer_name]
        if producer in self.waiting:
            self.waiting.remove(producer)
        if self.exclusive is producer:
            self.exclusive = None
            self.fenced.clear()
        while self.waiting and not self.producers:
            waiter = self.waiting.popleft()
            if waiter.closed:
                continue
            self._take(waiter)
            self.producers[waiter.producer_name] = waiter
            waiter.grant(self.topic_epoch)

    def values(self) -> ValuesView[P]:
        return self.producers.values()
