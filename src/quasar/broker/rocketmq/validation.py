"""Request validation with the RocketMQ proxy's rules and codes (reference rocketmq-grpc.md §2, §3;
proxy ``GrpcValidator``, ``SendMessageActivity``; common ``TopicValidator``).

Each ``check_*`` raises :class:`~quasar.broker.rocketmq.status.RocketMQError` with the proxy's code and a
message naming the bad value; nothing here does I/O.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Mapping

from quasar.broker.rocketmq.status import Code, RocketMQError

__all__ = [
    "MAX_DELIVERY_AHEAD_MS",
    "MAX_MESSAGE_GROUP_BYTES",
    "MAX_PROPERTIES_BYTES",
    "MAX_USER_PROPERTIES",
    "RESERVED_PROPERTY_KEYS",
    "check_consumer_group",
    "check_delivery_timestamp",
    "check_keys",
    "check_message_group",
    "check_properties",
    "check_tag",
    "check_topic",
]

_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 120
MAX_MESSAGE_GROUP_BYTES = 64
"""A message group must be shorter than this many UTF-8 bytes (proxy ``maxMessageGroupSize``)."""
MAX_USER_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024
"""Σ UTF-8 bytes of user property keys + values + tag + keys per message (proxy ``maxUserPropertySize``)."""
MAX_DELIVERY_AHEAD_MS = 24 * 3600 * 1000
"""A delivery timestamp may be at most one day ahead (proxy ``maxDelayTimeMills``)."""

SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
"""RocketMQ ``TopicValidator`` system topics (refused as ILLEGAL_TOPIC), besides the ``rmq_sys_`` prefix."""

RESERVED_PROPERTY_KEYS = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
        "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
        "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
        "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "__SHARDINGKEY", "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "__BORNHOST", "__STARTDELIVERTIME", "TAG_HASH", "__CRC32#",
    }
)  # fmt: skip
"""Property keys a user may not set (RocketMQ ``MessageConst.STRING_HASH_SET``, plus Quasar's ``__BORNHOST``
(mapping.py) and the store's reserved ``TAG_HASH`` / ``__CRC32#``): ILLEGAL_MESSAGE_PROPERTY_KEY."""


def _has_control(text: str) -> bool:
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text)


@functools.lru_cache(maxsize=4096)  # a valid name is checked once (a refusal raises, which is not cached)
def check_topic(name: str) -> None:
    """ILLEGAL_TOPIC for a blank name, more than 127 characters, characters outside ``[%|a-zA-Z0-9_-]``, or a
    system topic."""
    if not name or not name.strip():
        raise RocketMQError(Code.ILLEGAL_TOPIC, "topic name cannot be blank")
    if len(name) > MAX_TOPIC_LENGTH:
        raise RocketMQError(Code.ILLEGAL_TOPIC, f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if not _NAME.match(name):
        raise RocketMQError(
            Code.ILLEGAL_TOPIC, f"topic name {name!r} has characters outside ^[%|a-zA-Z0-9_-]+$"
        )
    if name in SYSTEM_TOPICS or name.startswith("rmq_sys_"):
        raise RocketMQError(Code.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")


def check_consumer_group(name: str) -> None:
    """ILLEGAL_CONSUMER_GROUP for a blank name, more than 120 characters, characters outside
    ``[%|a-zA-Z0-9_-]`` or the ``CID_RMQ_SYS_`` prefix."""
    if not name or not name.strip():
        raise RocketMQError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group cannot be blank")
    if len(name) > MAX_GROUP_LENGTH:
        raise RocketMQError(
            Code.ILLEGAL_CONSUMER_GROUP, f"consumer group is longer than {MAX_GROUP_LENGTH} characters"
        )
    if not _NAME.match(name):
        raise RocketMQError(
            Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r} has characters outside ^[%|a-zA-Z0-9_-]+$"
        )
    if name.startswith("CID_RMQ_SYS_"):
        raise RocketMQError(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r} is a system group")


def check_tag(tag: str) -> None:
    """ILLEGAL_MESSAGE_TAG for a blank tag, one containing ``|`` or a control character."""
    if not tag.strip():
        raise RocketMQError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be blank")
    if "|" in tag:
        raise RocketMQError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} contains '|'")
    if _has_control(tag):
        raise RocketMQError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} contains a control character")


def check_keys(keys: Iterable[str]) -> None:
    """ILLEGAL_MESSAGE_KEY for a blank key or one with a control character."""
    for key in keys:
        if not key.strip():
            raise RocketMQError(Code.ILLEGAL_MESSAGE_KEY, "message key cannot be blank")
        if _has_control(key):
            raise RocketMQError(Code.ILLEGAL_MESSAGE_KEY, f"message key {key!r} contains a control character")


def check_message_group(group: str) -> None:
    """ILLEGAL_MESSAGE_GROUP for a blank group, 64 UTF-8 bytes or more, or a control character."""
    if not group.strip():
        raise RocketMQError(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be blank")
    if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
        raise RocketMQError(
            Code.ILLEGAL_MESSAGE_GROUP, f"message group must be shorter than {MAX_MESSAGE_GROUP_BYTES} bytes"
        )
    if _has_control(group):
        raise RocketMQError(Code.ILLEGAL_MESSAGE_GROUP, "message group contains a control character")


def check_properties(properties: Mapping[str, str], tag: str | None, keys: Iterable[str]) -> None:
    """MESSAGE_PROPERTIES_TOO_LARGE past 128 user properties or 16 KiB (keys + values + tag + message keys,
    UTF-8); ILLEGAL_MESSAGE_PROPERTY_KEY for a reserved or blank key, or control characters in a key or
    value."""
    if len(properties) > MAX_USER_PROPERTIES:
        raise RocketMQError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(properties)} user properties, more than {MAX_USER_PROPERTIES}",
        )
    size = len(tag.encode()) if tag else 0
    if keys:
        size += sum(len(key.encode()) for key in keys)
    for key, value in properties.items():
        if not key.strip():
            raise RocketMQError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "property key cannot be blank")
        if key in RESERVED_PROPERTY_KEYS:
            raise RocketMQError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved by RocketMQ"
            )
        if _has_control(key) or _has_control(value):
            raise RocketMQError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r} contains a control character"
            )
        size += len(key.encode()) + len(value.encode())
    if size > MAX_PROPERTIES_BYTES:
        raise RocketMQError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"properties, tag and keys take {size} bytes, more than {MAX_PROPERTIES_BYTES}",
        )


def check_delivery_timestamp(delivery_ms: int, now_ms: int | None = None) -> None:
    """ILLEGAL_DELIVERY_TIME when ``delivery_ms`` (epoch ms) is more than a day ahead; a past time is
    accepted (delivered at once)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if delivery_ms - now > MAX_DELIVERY_AHEAD_MS:
        raise RocketMQError(
            Code.ILLEGAL_DELIVERY_TIME,
            f"delivery timestamp {delivery_ms} is more than {MAX_DELIVERY_AHEAD_MS // 1000} s ahead",
        )
