"""The messages of one stored entry as compaction sees them (Pulsar ``RawBatchConverter`` and the key
extraction of ``TwoPhaseCompactor``).

A stored entry is the wire form of one SEND (``[0x0e01 crc][metadataSize][MessageMetadata][payload]``). A
batch (``num_messages_in_batch`` present, not encrypted) holds one message per item, each with its own
``SingleMessageMetadata``; anything else is one message. For each message compaction needs its key
(``partition_key``; None when it has none) and whether it deletes the key (empty payload or ``null_value``).

:func:`rebuild_entry` keeps some messages of an entry: a single message is kept as stored; a batch is
rebuilt from its surviving items (same MessageMetadata, ``num_messages_in_batch`` and ``uncompressed_size``
updated, the payload recompressed with the batch's codec, a new CRC32C), as Pulsar's
``RawBatchConverter.rebuildBatchFromRawMessage`` does. Batch indexes of the rebuilt batch are its items'
new order (Pulsar keeps no gaps either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quasar.protocol.compression import compress, decompress
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.metadata import decode_batch, encode_batch, parse_headers_and_payload
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata, SingleMessageMetadata

__all__ = ["EntryMessages", "MessageKey", "read_entry", "rebuild_entry"]


@dataclass(frozen=True, slots=True)
class MessageKey:
    """One message of an entry: its ``key`` (``partition_key``, None when absent) and whether it is a
    ``delete`` (empty payload or ``null_value``: compaction removes the key)."""

    key: str | None
    delete: bool


@dataclass(frozen=True, slots=True)
class EntryMessages:
    """The parsed entry: ``messages`` in batch-index order; ``batch`` is True for a readable batch, whose
    ``items`` (SingleMessageMetadata, payload) and ``metadata`` :func:`rebuild_entry` uses."""

    messages: list[MessageKey]
    batch: bool
    metadata: MessageMetadata
    items: list[tuple[SingleMessageMetadata, memoryview]]


def read_entry(data: bytes | memoryview) -> EntryMessages:
    """Parse a stored entry into its messages (module docstring). Raises ``quasar.protocol`` errors
    (MalformedFrameError, MalformedBatchError, CompressionError) for an entry that cannot be read."""
    parsed = parse_headers_and_payload(data)
    metadata = parsed.metadata
    if not metadata.HasField("num_messages_in_batch") or len(metadata.encryption_keys) > 0:
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        delete = len(parsed.payload) == 0 or (metadata.HasField("null_value") and metadata.null_value)
        return EntryMessages([MessageKey(key, delete)], False, metadata, [])
    payload: bytes | memoryview = parsed.payload
    if metadata.compression:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    items = decode_batch(payload, metadata.num_messages_in_batch)
    messages = [
        MessageKey(
            single.partition_key if single.HasField("partition_key") else None,
            len(item) == 0 or (single.HasField("null_value") and single.null_value),
        )
        for single, item in items
    ]
    return EntryMessages(messages, True, metadata, items)


def rebuild_entry(data: bytes | memoryview, parsed: EntryMessages, keep: Sequence[bool]) -> bytes | None:
    """The entry with only the messages where ``keep`` is True (one flag per message of ``parsed``), or
    None when none is kept. A single message, or a batch kept whole, comes back as stored."""
    if not any(keep):
        return None
    if not parsed.batch or all(keep):
        return bytes(data)
    items = [item for item, kept in zip(parsed.items, keep, strict=True) if kept]
    body = encode_batch(items)
    metadata = MessageMetadata()
    metadata.CopyFrom(parsed.metadata)
    metadata.num_messages_in_batch = len(items)
    metadata.uncompressed_size = len(body)
    payload = compress(metadata.compression, body) if metadata.compression else body
    return encode_headers_and_payload(metadata, payload)
