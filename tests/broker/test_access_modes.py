"""ProducerAccess against Pulsar's AbstractTopic.incrementTopicEpochIfNeeded table (reference/security.md §6)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from quasar.broker.access_modes import ProducerAccess, ProducerAccessMode
from quasar.broker.errors import BrokerError, ProducerBusyError, ProducerFencedError

Mode = ProducerAccessMode


@dataclass(eq=False)
class FakeProducer:
    producer_name: str
    access_mode: ProducerAccessMode = Mode.Shared
    requested_epoch: int | None = None
    closed: bool = False
    access: ProducerAccess[FakeProducer] | None = None
    events: list[tuple[str, object]] = field(default_factory=list)

    def fence(self) -> None:
        self.events.append(("fenced", None))
        self.closed = True
        assert self.access is not None
        self.access.remove(self)

    def refuse(self, error: BrokerError) -> None:
        self.events.append(("refused", error))
        self.closed = True
        assert self.access is not None
        self.access.remove(self)

    def grant(self, topic_epoch: int) -> None:
        self.events.append(("granted", topic_epoch))


def make(
    access: ProducerAccess[FakeProducer], name: str, mode: Mode, epoch: int | None = None
) -> FakeProducer:
    return FakeProducer(name, mode, epoch, access=access)


def test_epochs_start_at_zero_and_move_with_each_exclusive_holder() -> None:
    access: ProducerAccess[FakeProducer] = ProducerAccess("t")
    assert access.topic_epoch is None
    first = make(access, "a", Mode.Exclusive)
    assert access.add(first) and access.topic_epoch == 0
    access.remove(first)
    second = make(access, "b", Mode.Exclusive)
    assert access.add(second) and access.topic_epoch == 1


def test_a_reconnecting_holder_keeps_its_epoch_and_a_stale_one_is_fenced() -> None:
    access: ProducerAccess[FakeProducer] = ProducerAccess("t")
    holder = make(access, "a", Mode.Exclusive)
    access.add(holder)
    access.remove(holder)  # connection dropped
    back = make(access, "a", Mode.Exclusive, epoch=0)
    assert access.add(back) and access.topic_epoch == 0
    fencer = make(access, "f", Mode.ExclusiveWithFencing)
    assert access.add(fencer) and access.topic_epoch == 1
    assert back.events == [("fenced", None)]
    with pytest.raises(ProducerFencedError, match="Topic has an existing exclusive producer: f"):
        access.add(make(access, "a", Mode.Exclusive, epoch=0))
    access.remove(fencer)
    with pytest.raises(ProducerFencedError, match="Topic epoch has already moved"):
        access.add(make(access, "a", Mode.Exclusive, epoch=0))
    with pytest.raises(ProducerFencedError, match="Topic epoch has already moved"):
        access.add(make(access, "a", Mode.ExclusiveWithFencing, epoch=0))


def test_shared_is_busy_while_an_exclusive_producer_holds_or_waits() -> None:
    access: ProducerAccess[FakeProducer] = ProducerAccess("t")
    holder = make(access, "h", Mode.Exclusive)
    access.add(holder)
    with pytest.raises(ProducerBusyError, match="existing exclusive producer: h"):
        access.add(make(access, "s", Mode.Shared))
    access.remove(holder)
    shared = make(access, "s", Mode.Shared)
    assert access.add(shared)
    with pytest.raises(ProducerFencedError, match="existing shared producers"):
        access.add(make(access, "x", Mode.Exclusive))


def test_waiters_get_the_topic_in_order_and_fencing_fails_them() -> None:
    access: ProducerAccess[FakeProducer] = ProducerAccess("t")
    holder = make(access, "h", Mode.Exclusive)
    access.add(holder)
    first, second = make(access, "w1", Mode.WaitForExclusive), make(access, "w2", Mode.WaitForExclusive)
    assert not access.add(first) and not access.add(second)
    access.remove(holder)
    assert first.events == [("granted", 1)] and access.exclusive is first
    assert second.events == []
    fencer = make(access, "f", Mode.ExclusiveWithFencing)
    assert access.add(fencer)
    assert first.events[-1] == ("fenced", None)
    kind, error = second.events[-1]
    assert kind == "refused" and isinstance(error, ProducerFencedError)
    assert list(access.waiting) == [] and access.exclusive is fencer and access.topic_epoch == 2


def test_names_are_unique_and_the_producer_limit_is_busy() -> None:
    access: ProducerAccess[FakeProducer] = ProducerAccess("t", max_producers=1)
    access.add(make(access, "a", Mode.Shared))
    with pytest.raises(ProducerBusyError, match="already connected"):
        access.add(make(access, "a", Mode.Shared))
    with pytest.raises(ProducerBusyError, match="max producers limit"):
        access.add(make(access, "b", Mode.Shared))
