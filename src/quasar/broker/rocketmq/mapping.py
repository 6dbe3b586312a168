"""One model, two protocols: a RocketMQ ``Message`` <-> the Pulsar entry Quasar stores (issue 18 item 2).

**Send direction** — :func:`map_message` validates one ``apache.rocketmq.v2.Message`` (the proxy's rules,
``validation.py``) and returns a :class:`MappedMessage`; :meth:`MappedMessage.entry` then builds the bytes a
Pulsar producer would have sent after its SEND (``[0x0e01][crc32c][metadataSize][MessageMetadata][body]``)
for a given producer name and sequence id, which the broker publishes through its normal producer path.

**Read direction** — :func:`messages_of_entry` turns one stored entry (a ``quasar.ledger.entry.Entry`` of a
topic partition: batched or not, compressed or not) into RocketMQ ``Message`` objects, one per Pulsar message,
with every system property a consumer needs except the consumer-side ones (``receipt_handle``,
``invisible_duration``, ``delivery_attempt``: the receive path sets those on the returned objects)::

    from quasar.broker.rocketmq.mapping import messages_of_entry
    messages = messages_of_entry(entry, topic=resource, queue_id=partition_index, store_host="host:port")
    for message in messages:
        message.system_properties.receipt_handle = ...

Field mapping (docs/rocketmq.md has the same table):

====================================  ===========================================================
RocketMQ                              Pulsar entry (MessageMetadata / SingleMessageMetadata)
====================================  ===========================================================
topic ``T`` in namespace ``ns``       ``persistent://public/<ns or "default">/T`` (``context.py``)
queue id                              partition index (non-partitioned topic: queue 0)
queue offset                          the entry's consume-queue offset (all messages of a batch share it)
body                                  payload (decompressed on read; ``body_encoding`` IDENTITY)
``keys``                              ``partition_key`` = first key, property ``KEYS`` = keys joined by " "
                                      (on read without ``KEYS``: the partition key is the one key)
``tag``                               property ``TAGS``; the consume-queue tag hash = Java hashCode(tag)
``message_group``                     ``ordering_key`` (UTF-8); on read, an ordering key is a message group
``delivery_timestamp``                ``deliver_at_time`` (epoch ms)
``born_timestamp``                    ``event_time`` (epoch ms); on read ``publish_time`` when unset
``born_host``                         property ``__BORNHOST`` (on read: the store host when absent)
``message_id``                        property ``UNIQ_KEY`` (the client-made id); without one (a Pulsar
                                      producer's message) a position id, :func:`position_message_id`
user properties                       properties (minus the names above on read)
``store_timestamp`` / ``store_host``  the store's timestamp / this broker's RocketMQ endpoint
``body_digest``                       MD5 of the body, uppercase hex, computed on read
``message_type``                      FIFO with a message group, DELAY with a delivery time, else NORMAL
                                      (TRANSACTION on send when the client says so: ``transaction.py``)
====================================  ===========================================================

The send direction also gives the store record the properties ``KEYS`` and ``UNIQ_KEY`` (the IndexFile
indexes them, so the admin query by key finds every key and the message id) and the tag hash (the consume
queue unit's tags code, for rmqpull's tag filter).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition
from quasar.broker.rocketmq.validation import (
    check_delivery_timestamp,
    check_keys,
    check_message_group,
    check_properties,
    check_tag,
    check_topic,
)
from quasar.java_hash import java_string_hash
from quasar.ledger.entry import Entry
from quasar.protocol import (
    CompressionError,
    decompress,
    encode_headers_and_payload,
    parse_headers_and_payload,
)
from quasar.protocol.metadata import iter_batch
from quasar.protocol.pb import KeyValue, MessageMetadata

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "PROPERTY_BORN_HOST",
    "PROPERTY_KEYS",
    "PROPERTY_TAGS",
    "PROPERTY_UNIQ_KEY",
    "MappedMessage",
    "consistent_hash",
    "decode_position_message_id",
    "java_string_hash",
    "map_message",
    "messages_of_entry",
    "position_message_id",
]

PROPERTY_TAGS = "TAGS"
"""The tag (RocketMQ ``MessageConst.PROPERTY_TAGS``); Pulsar consumers see it as a property."""
PROPERTY_KEYS = "KEYS"
"""All keys joined by one space (RocketMQ ``PROPERTY_KEYS``: a key containing a space reads back as two)."""
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
"""The client-made message id, 34 hex characters (RocketMQ ``PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX``)."""
PROPERTY_BORN_HOST = "__BORNHOST"
"""The sending client's address (RocketMQ keeps it in the record; Pulsar has no field for it)."""
SYSTEM_PROPERTIES = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_BORN_HOST})
"""Pulsar properties that are RocketMQ system properties: not user properties on read."""

DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024
"""RocketMQ's ``maxMessageSize`` (4 MiB): larger bodies are MESSAGE_BODY_TOO_LARGE."""

_NORMAL, _FIFO, _DELAY = (
    definition.MessageType.NORMAL,
    definition.MessageType.FIFO,
    definition.MessageType.DELAY,
)  # looked up once: protobuf's enum wrapper resolves names through __getattr__ on every access

_POSITION_ID_VERSION = "00"
"""First two hex digits of a position message id; the clients' own ids start with "01" (MessageIdCodec V1)."""


def consistent_hash(key: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)``: the bucket in ``[0, buckets)`` of ``key`` (a signed
    64-bit value), as the RocketMQ proxy picks a FIFO message's queue from ``messageGroup.hashCode()``.
    Raises ValueError for ``buckets`` < 1."""
    if buckets < 1:
        raise ValueError(f"buckets must be positive, got {buckets}")
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        high = state >> 33  # (int) (state >>> 33): 31 bits, never negative
        next_double = (high + 1) / 2147483648.0
        nxt = int((candidate + 1) / next_double)
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def position_message_id(ledger_id: int, entry_id: int, batch_index: int = -1) -> str:
    """The RocketMQ message id of a message that has no ``UNIQ_KEY`` (a Pulsar producer's): 34 uppercase hex
    digits, "00" + ledger id (16) + entry id (12) + batch index + 1 (4, 0 = not batched). Unique per topic
    partition, stable across reads. Raises ValueError when a part does not fit (ledger id outside
    [0, 2^64), entry id outside [0, 2^48), batch index outside [-1, 65534])."""
    if not 0 <= ledger_id < 1 << 64 or not 0 <= entry_id < 1 << 48 or not -1 <= batch_index < 0xFFFF:
        raise ValueError(f"position ({ledger_id}, {entry_id}, {batch_index}) does not fit a message id")
    return f"{_POSITION_ID_VERSION}{ledger_id:016X}{entry_id:012X}{batch_index + 1:04X}"


def decode_position_message_id(message_id: str) -> tuple[int, int, int] | None:
    """Inverse of :func:`position_message_id`: ``(ledger_id, entry_id, batch_index)``, or None for any other
    text (a client-made id, garbage)."""
    if len(message_id) != 34 or not message_id.startswith(_POSITION_ID_VERSION):
        return None
    try:
        ledger_id = int(message_id[2:18], 16)
        entry_id = int(message_id[18:30], 16)
        batch = int(message_id[30:34], 16)
    except ValueError:
        return None
    if not all(c in "0123456789ABCDEF" for c in message_id):
        return None
    return ledger_id, entry_id, batch - 1


def _epoch_ms(timestamp: Any) -> int:
    return int(timestamp.seconds) * 1000 + int(timestamp.nanos) // 1_000_000


@dataclass(slots=True)
class MappedMessage:
    """A validated RocketMQ message, ready to publish: ``metadata`` lacks only the producer name, sequence
    id and publish time (:meth:`entry` sets them); ``store_properties`` go on the commit log record (indexed
    keys), ``tag_hash`` into its consume-queue unit. ``message_group`` (or "") picks the queue of a FIFO
    message; ``message_id`` is the client's ``UNIQ_KEY``; ``message_type`` the ``MessageType`` it is sent as."""

    topic: str
    body: bytes
    metadata: Any
    store_properties: dict[str, str]
    tag_hash: int
    message_id: str
    message_group: str = ""
    message_type: int = 0
    keys: list[str] = field(default_factory=list)

    def entry(self, producer_name: str, sequence_id: int, publish_time_ms: int | None = None) -> bytes:
        """The entry bytes (what a Pulsar producer sends after CommandSend) for this producer and sequence
        id; ``publish_time_ms`` defaults to now."""
        metadata = self.metadata
        metadata.producer_name = producer_name
        metadata.sequence_id = sequence_id
        metadata.publish_time = int(time.time() * 1000) if publish_time_ms is None else publish_time_ms
        return encode_headers_and_payload(metadata, self.body)


def map_message(
    message: Any, *, max_body_size: int = DEFAULT_MAX_BODY_SIZE, now_ms: int | None = None
) -> MappedMessage:
    """Validate ``message`` (an ``apache.rocketmq.v2.Message``) as the proxy does and map it (module table).

    Raises RocketMQError: ILLEGAL_TOPIC, MESSAGE_BODY_EMPTY / MESSAGE_BODY_TOO_LARGE (``max_body_size``
    bytes), ILLEGAL_MESSAGE_ID (no message id), ILLEGAL_MESSAGE_TAG / _KEY / _GROUP /
    _PROPERTY_KEY, MESSAGE_PROPERTIES_TOO_LARGE, ILLEGAL_DELIVERY_TIME (more than a day ahead),
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (a message group together with a delivery time, or either on a
    transactional message). A transactional message (``message_type`` TRANSACTION) maps like a normal one;
    ``transaction.py`` stores it as a half message."""
    body, tag, keys, user_properties, group, delivery_ms = _validated(message, max_body_size, now_ms)
    system = message.system_properties
    message_id = system.message_id
    metadata = MessageMetadata()
    properties = metadata.properties
    for name, value in user_properties.items():
        properties.append(KeyValue(key=name, value=value))
    store_properties = {PROPERTY_UNIQ_KEY: message_id}
    if tag is not None:
        properties.append(KeyValue(key=PROPERTY_TAGS, value=tag))
    if keys:
        joined = " ".join(keys)
        properties.append(KeyValue(key=PROPERTY_KEYS, value=joined))
        store_properties[PROPERTY_KEYS] = joined
        metadata.partition_key = keys[0]
    properties.append(KeyValue(key=PROPERTY_UNIQ_KEY, value=message_id))
    if system.born_host:
        properties.append(KeyValue(key=PROPERTY_BORN_HOST, value=system.born_host))
    born = _epoch_ms(system.born_timestamp) if system.HasField("born_timestamp") else 0
    if born > 0:
        metadata.event_time = born
    if system.message_type == definition.MessageType.TRANSACTION:
        message_type = definition.MessageType.TRANSACTION
    elif group:
        metadata.ordering_key = group.encode()
        message_type = _FIFO
    elif delivery_ms:
        metadata.deliver_at_time = delivery_ms
        message_type = _DELAY
    else:
        message_type = _NORMAL
    return MappedMessage(
        topic=message.topic.name,
        body=body,
        metadata=metadata,
        store_properties=store_properties,
        tag_hash=java_string_hash(tag) if tag else 0,
        message_id=message_id,
        message_group=group,
        message_type=message_type,
        keys=keys,
    )


def _validated(
    message: Any, max_body_size: int, now_ms: int | None
) -> tuple[bytes, str | None, list[str], dict[str, str], str, int]:
    """``(body, tag or None, keys, user properties, message group or "", delivery ms or 0)`` of a message that
    passes the proxy's checks (:func:`map_message` lists the errors)."""
    check_topic(message.topic.name)
    body = bytes(message.body)
    if not body:
        raise RocketMQError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_body_size:
        raise RocketMQError(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body of {len(body)} bytes is larger than {max_body_size}"
        )
    system = message.system_properties
    if not system.message_id.strip():
        raise RocketMQError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be blank")
    tag = system.tag if system.HasField("tag") else None
    if tag is not None:
        check_tag(tag)
    keys = list(system.keys)
    check_keys(keys)
    user_properties = dict(message.user_properties)
    check_properties(user_properties, tag, keys)
    group = system.message_group if system.HasField("message_group") else ""
    if group:
        check_message_group(group)
    delivery_ms = _epoch_ms(system.delivery_timestamp) if system.HasField("delivery_timestamp") else 0
    if delivery_ms and group:
        raise RocketMQError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a message cannot have both a message group (FIFO) and a delivery timestamp (DELAY)",
        )
    if system.message_type == definition.MessageType.TRANSACTION and (group or delivery_ms):
        raise RocketMQError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a transactional message cannot have a message group (FIFO) or a delivery timestamp (DELAY)",
        )
    if delivery_ms:
        check_delivery_timestamp(delivery_ms, now_ms)
    return body, tag, keys, user_properties, group, delivery_ms


# ---------------------------------------------------------------------------------------------- read direction
def messages_of_entry(
    entry: Entry,
    *,
    topic: Any,
    queue_id: int,
    store_host: str,
    max_uncompressed_size: int = 5 * 1024 * 1024,
) -> list[Any]:
    """The RocketMQ ``Message`` objects of one stored Pulsar entry, in batch order (module docstring).

    Args:
        entry: the stored entry (``ManagedLedger.read_from_offset`` / cursor reads); its ``queue_offset`` and
            ``store_timestamp`` become the messages' queue offset and store time.
        topic: the ``Resource`` the client named (namespace + topic), copied into ``Message.topic``.
        queue_id: the partition index (0 for a non-partitioned topic).
        store_host: this broker's RocketMQ endpoint, ``host:port``.
        max_uncompressed_size: a compressed entry claiming a larger uncompressed size is refused.

    Raises:
        quasar.protocol.ProtocolError (MalformedFrameError, MalformedBatchError, CompressionError) for an
        entry that cannot be parsed or inflated; the caller skips it (Pulsar consumers discard such entries).
        Encrypted payloads are returned as stored (Quasar does not hold the keys); chunks are not assembled.
    """
    parsed = parse_headers_and_payload(entry.data)
    metadata = parsed.metadata
    payload: bytes | memoryview = parsed.payload
    if metadata.compression:
        if metadata.uncompressed_size > max_uncompressed_size:
            raise CompressionError(
                f"uncompressed size {metadata.uncompressed_size} is larger than {max_uncompressed_size}"
            )
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    ledger_id, entry_id = entry.position
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0
    out = []
    for batch_index, single, body in _items(metadata, payload):
        source = single if single is not None else metadata
        properties = {kv.key: kv.value for kv in source.properties}
        has_group = source.HasField("ordering_key")
        group = bytes(source.ordering_key).decode("utf-8", "replace") if has_group else ""
        event_time = source.event_time or metadata.publish_time
        keys = properties.get(PROPERTY_KEYS, "").split()
        if not keys and source.HasField("partition_key") and source.partition_key:
            keys = [source.partition_key]  # a Pulsar producer's key is the message's one key
        out.append(
            _message(
                topic=topic,
                body=bytes(body),
                properties=properties,
                keys=keys,
                message_id=properties.get(PROPERTY_UNIQ_KEY)
                or position_message_id(ledger_id, entry_id, batch_index),
                born_ms=event_time,
                store_ms=entry.store_timestamp,
                store_host=store_host,
                queue_id=queue_id,
                queue_offset=entry.queue_offset,
                deliver_at=deliver_at,
                group=group,
            )
        )
    return out


def _items(metadata: Any, payload: bytes | memoryview) -> Iterator[tuple[int, Any, bytes | memoryview]]:
    """``(batch index or -1, SingleMessageMetadata or None, body)`` per message of the entry."""
    if metadata.HasField("num_messages_in_batch"):
        for index, (single, item) in enumerate(iter_batch(payload, metadata.num_messages_in_batch)):
            yield index, single, item
    else:
        yield -1, None, payload


def _message(
    *,
    topic: Any,
    body: bytes,
    properties: dict[str, str],
    keys: list[str],
    message_id: str,
    born_ms: int,
    store_ms: int,
    store_host: str,
    queue_id: int,
    queue_offset: int,
    deliver_at: int,
    group: str,
) -> Any:
    message = definition.Message(body=body)
    message.topic.CopyFrom(topic)
    for name, value in properties.items():
        if name not in SYSTEM_PROPERTIES:
            message.user_properties[name] = value
    system = message.system_properties
    tag = properties.get(PROPERTY_TAGS)
    if tag:
        system.tag = tag
    if keys:
        system.keys.extend(keys)
    system.message_id = message_id
    system.body_digest.type = definition.DigestType.MD5
    system.body_digest.checksum = hashlib.md5(body, usedforsecurity=False).hexdigest().upper()
    system.body_encoding = definition.Encoding.IDENTITY
    system.born_timestamp.FromMilliseconds(born_ms)
    system.born_host = properties.get(PROPERTY_BORN_HOST) or store_host
    system.store_timestamp.FromMilliseconds(store_ms)
    system.store_host = store_host
    system.queue_id = queue_id
    system.queue_offset = queue_offset
    if group:
        system.message_group = group
        system.message_type = definition.MessageType.FIFO
    elif deliver_at:
        system.delivery_timestamp.FromMilliseconds(deliver_at)
        system.message_type = definition.MessageType.DELAY
    else:
        system.message_type = definition.MessageType.NORMAL
    return message
