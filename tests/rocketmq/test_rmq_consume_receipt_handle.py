"""The receipt-handle codec: every handle round-trips, anything else is refused (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.broker.rocketmq.receipt_handle import InvalidReceiptHandleError, ReceiptHandle, decode

i64 = st.integers(min_value=0, max_value=(1 << 63) - 1)
names = st.from_regex(r"[A-Za-z0-9_.:-]{1,127}", fullmatch=True)
handles = st.builds(
    ReceiptHandle,
    retrieve_time_ms=i64,
    invisible_time_ms=i64,
    broker_name=names,
    queue_id=st.integers(min_value=0, max_value=65535),
    offset=i64,
    batch_index=st.none() | st.integers(min_value=0, max_value=10_000),
)


@given(handles)
def test_every_handle_round_trips(handle: ReceiptHandle) -> None:
    text = handle.encode()
    assert decode(text) == handle
    assert text.split(" ")[0] == text.split(" ")[7] == str(handle.offset)  # RocketMQ field order


@settings(max_examples=300)
@given(st.text(alphabet="0123456789 ab-", max_size=60) | st.text(max_size=300))
def test_arbitrary_text_is_a_handle_only_if_it_re_encodes_identically(text: str) -> None:
    try:
        handle = decode(text)
    except InvalidReceiptHandleError:
        return
    assert handle.encode() == text  # strict: one spelling per handle


@given(handles, st.sampled_from(["+1", "01", "-1", "1e3", " ", "x", "9" * 20, "1.0"]), st.integers(0, 8))
def test_a_tampered_number_field_is_refused(handle: ReceiptHandle, bad: str, field: int) -> None:
    fields = handle.encode().split(" ")
    field = min(6 if field == 5 else field, len(fields) - 1)  # every field but the broker name
    fields[field] = bad
    with pytest.raises(InvalidReceiptHandleError):
        decode(" ".join(fields))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("2 2 3 0 0 b 0 1", "start offset"),
        ("1 2 3 7 0 b 0 1", "revive"),
        ("1 2 3 0 1 b 0 1", "retry topic"),
        ("1 2 3 0 0 b 0", "7 fields"),
        ("1 2 3 0 0 b 0 1 0 0", "10 fields"),
        ("1  2 3 0 0 b 0 1", "valid number"),
        ("1 2 3 0 0 b@d 0 1", "broker name"),
        ("1 2 3 0 0 b 0 1 " + "1" * 600, "longer"),
    ],
)
def test_malformed_handles_say_why(text: str, reason: str) -> None:
    with pytest.raises(InvalidReceiptHandleError, match=reason.split()[-1]):
        decode(text)
