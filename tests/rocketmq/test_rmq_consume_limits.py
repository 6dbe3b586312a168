"""ReceiveMessage's polling time and long-poll bounds (``broker/rocketmq/consume.py``), in process."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from quasar.broker.rocketmq import consume
from quasar.broker.rocketmq.clients import ClientRegistry
from quasar.broker.rocketmq.consume import ConsumeActivity
from quasar.broker.rocketmq.context import RocketMQContext, RocketMQSettings
from quasar.broker.rocketmq.status import RocketMQError
from quasar.broker.rocketmq.stubs import service


@pytest.fixture
def activity() -> ConsumeActivity:
    context = RocketMQContext(SimpleNamespace(), RocketMQSettings(), ClientRegistry())  # type: ignore[arg-type]
    made = ConsumeActivity(context)
    assert context.is_fifo_group == made.is_fifo_group  # QueryAssignment and Telemetry read the policy here
    return made


def call(remaining: float | None) -> Any:
    return SimpleNamespace(time_remaining=lambda: remaining)


def receive(polling_s: float | None = None) -> Any:
    request = service.ReceiveMessageRequest(batch_size=1)
    if polling_s is not None:
        request.long_polling_timeout.FromMilliseconds(int(polling_s * 1000))
    return request


@pytest.mark.parametrize(
    ("polling", "remaining", "expected"),
    [
        (2, 30, 5.0),  # clamped up to 5 s
        (60, 90, 20.0),  # clamped down to the pushed 20 s
        (20, 8, 7.0),  # cut to end 1 s before the call's deadline
        (None, 23, 20.0),  # the push consumer's way: deadline minus half the request timeout, clamped
        (None, None, 20.0),
    ],
)
def test_polling_time(
    activity: ConsumeActivity, polling: float | None, remaining: float | None, expected: float
) -> None:
    assert activity._polling_s(receive(polling), call(remaining)) == pytest.approx(expected, abs=0.01)


def test_a_deadline_under_five_seconds_is_an_illegal_polling_time(activity: ConsumeActivity) -> None:
    with pytest.raises(RocketMQError) as raised:
        activity._polling_s(receive(20), call(4.5))
    assert raised.value.code == 40018


def test_long_polls_are_bounded_per_connection_and_in_total(
    activity: ConsumeActivity, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consume, "MAX_LONG_POLLS_PER_CONNECTION", 2)
    monkeypatch.setattr(consume, "MAX_LONG_POLLS", 3)
    with activity._long_poll("peer-a"), activity._long_poll("peer-a"):
        with (
            pytest.raises(RocketMQError, match="on this connection") as raised,
            activity._long_poll("peer-a"),
        ):
            pass
        assert raised.value.code == 42900
        with activity._long_poll("peer-b"):
            with (
                pytest.raises(RocketMQError, match="too many receives") as raised,
                activity._long_poll("peer-c"),
            ):
                pass
            assert raised.value.code == 42900
    with activity._long_poll("peer-a"):  # released on exit
        assert activity._polls == 1
    assert activity._polls == 0 and activity._polls_by_peer == {}
