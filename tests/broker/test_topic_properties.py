"""Topic properties (``quasar.broker.topic_properties``): the body checks of PUT .../properties and the
merge; ``message.type`` is normalised and checked (its enforcement: tests/rocketmq/test_rmq_tx_flow.py)."""

from __future__ import annotations

from typing import Any

import pytest

from quasar.broker.topic_properties import MAX_PROPERTIES, merge_properties, parse_properties


def test_message_type_is_normalised_and_other_properties_kept() -> None:
    assert parse_properties({"message.type": " transaction ", "a": "b"}) == {
        "message.type": "TRANSACTION",
        "a": "b",
    }


@pytest.mark.parametrize(
    "body",
    [
        [],
        "FIFO",
        {"message.type": "SOMETIMES"},
        {"message.type": 3},
        {"": "x"},
        {"k": None},
        {"k": "v" * 1025},
        {f"k{i}": "v" for i in range(MAX_PROPERTIES + 1)},
    ],
)
def test_bad_bodies_are_refused(body: Any) -> None:
    with pytest.raises(ValueError):
        parse_properties(body)


def test_merge_updates_and_bounds_the_map() -> None:
    assert merge_properties({"a": "1", "b": "2"}, {"b": "3"}) == {"a": "1", "b": "3"}
    assert merge_properties("garbage from before", {"a": "1"}) == {"a": "1"}
    full = {f"k{i}": "v" for i in range(MAX_PROPERTIES)}
    with pytest.raises(ValueError):
        merge_properties(full, {"one-more": "v"})
