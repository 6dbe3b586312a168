"""The transaction checker honours a half message's immunity time (the producer's
``orphaned_transaction_recovery_duration``, RocketMQ's ``CHECK_IMMUNITY_TIME_IN_SECONDS``; reference
rocketmq-grpc.md §2 and §8), in process: no check before it, BAD_REQUEST past 3600 s, and the stored
properties (immunity, ``TRANSACTION_CHECK_TIMES`` and first store time of a re-put half) read back by recovery.
The re-put itself across a broker kill: ``test_rmq_tx_flow.py::test_check_counts_survive_a_restart``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from quasar.broker.rocketmq.clients import ClientRegistry
from quasar.broker.rocketmq.context import RocketMQContext, RocketMQSettings
from quasar.broker.rocketmq.status import RocketMQError
from quasar.broker.rocketmq.stubs import definition
from quasar.broker.rocketmq.transaction import TransactionService
from quasar.broker.rocketmq.transaction_store import HalfMessage, _half_of, check_immunity_s
from quasar.ledger.position import Position
from quasar.protocol import TopicName

NOW_MS = 10_000_000


def _half(transaction_id: str, age_ms: int, immunity_ms: int = 0) -> HalfMessage:
    return HalfMessage(
        transaction_id=transaction_id,
        namespace="public/default",
        position=Position(1, 0),
        real_topic=TopicName.parse("persistent://public/default/t"),
        queue_id=0,
        producer_group="t",
        client_namespace="",
        stored_ms=NOW_MS - age_ms,
        immunity_ms=immunity_ms,
    )


async def test_a_half_is_not_checked_within_its_immunity_time() -> None:
    settings = RocketMQSettings(transaction_timeout_s=6.0)
    context = RocketMQContext(SimpleNamespace(), settings, ClientRegistry())  # type: ignore[arg-type]
    transactions = TransactionService(context)
    transactions._recovered.set()  # nothing to recover here
    re_put: list[tuple[str, int]] = []

    async def recheck(half: HalfMessage) -> None:  # the store's re-put (needs a broker): recorded
        re_put.append((half.transaction_id, half.checks))

    transactions.store.recheck = recheck  # type: ignore[method-assign]
    immune = _half("immune", age_ms=30_000, immunity_ms=60_000)
    due = _half("due", age_ms=30_000)
    young = _half("young", age_ms=2_000)
    transactions.halves = {h.transaction_id: h for h in (immune, due, young)}
    await transactions.check_once(NOW_MS)
    assert (immune.checks, due.checks, young.checks) == (0, 1, 0)  # no producer listens: counted all the same
    await transactions.check_once(NOW_MS + 31_000)  # immunity over
    assert (immune.checks, due.checks, young.checks) == (1, 2, 1)
    assert re_put == [("due", 1), ("immune", 1), ("due", 2), ("young", 1)]  # each check persisted


def _message(seconds: int | None, nanos: int = 0) -> Any:
    message = definition.Message()
    if seconds is not None:
        message.system_properties.orphaned_transaction_recovery_duration.seconds = seconds
        message.system_properties.orphaned_transaction_recovery_duration.nanos = nanos
    return message


@pytest.mark.parametrize(
    ("seconds", "nanos", "expected"), [(None, 0, 0), (0, 0, 0), (30, 0, 30), (30, 1, 31), (3600, 0, 3600)]
)
def test_the_immunity_time_comes_from_the_recovery_duration(seconds: Any, nanos: int, expected: int) -> None:
    assert check_immunity_s(_message(seconds, nanos)) == expected


@pytest.mark.parametrize(("seconds", "nanos"), [(3601, 0), (3600, 1), (-1, 0), (2**40, 0)])
def test_a_recovery_duration_out_of_range_is_a_bad_request(seconds: int, nanos: int) -> None:
    with pytest.raises(RocketMQError) as raised:
        check_immunity_s(_message(seconds, nanos))
    assert raised.value.code == definition.Code.BAD_REQUEST and "3600" in raised.value.message


def test_a_recovered_half_keeps_its_immunity_time_checks_and_age() -> None:
    stored = SimpleNamespace(
        properties={
            "UNIQ_KEY": "id-1",
            "REAL_TOPIC": "persistent://public/default/t-partition-0",
            "REAL_QID": "0",
            "PGROUP": "t",
            "CHECK_IMMUNITY_TIME_IN_SECONDS": "45",
            "TRANSACTION_CHECK_TIMES": "3",  # a re-put copy: its checks and its first store time
            "TRAN_PREPARED_STORE_MS": str(NOW_MS - 7_000),
        },
        position=Position(3, 4),
        store_timestamp=NOW_MS,
    )
    half = _half_of("public/default", stored)  # type: ignore[arg-type]
    assert half is not None and half.immunity_ms == 45_000
    assert half.checks == 3 and half.stored_ms == NOW_MS - 7_000
