"""MessageMetadata access and the batch payload codec.

:func:`parse_headers_and_payload` reads the headers of a stored or received SEND/MESSAGE span (layout in
:mod:`quasar.protocol.frame`) and parses only the MessageMetadata; the payload stays an opaque memoryview (the
publish path never unpacks batches).

Batch payload (reference/pulsar-protocol.md §7.2; C++ ``Commands::serializeSingleMessageInBatchWithPayload``),
before compression — one item per message, ``num_messages_in_batch`` items::

    | Field                        | Width   | Meaning                                              |
    |------------------------------|---------|------------------------------------------------------|
    | singleMetadataSize           | u32 BE  | length of the SingleMessageMetadata                  |
    | SingleMessageMetadata        | n bytes | protobuf; ``payload_size`` (required) = item length  |
    | item payload                 | p bytes | ``payload_size`` bytes                               |

The concatenation is then compressed as a whole and ``MessageMetadata.uncompressed_size`` is its length.
Batch detection is the *presence* of ``num_messages_in_batch`` (the C++ consumer tests ``has_``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError, EncodeError

from quasar.native import load_twin

from ._entry_keys_py import MIN_BATCH_ITEM_SIZE
from ._layout import split_headers
from ._pb import find_invalid_utf8, missing_required_fields
from .errors import LocalProtocolError, MalformedBatchError, MalformedFrameError
from .proto.PulsarApi_pb2 import BrokerEntryMetadata, MessageMetadata, SingleMessageMetadata

__all__ = [
    "ParsedPayload",
    "decode_batch",
    "encode_batch",
    "entry_dispatch_info",
    "iter_batch",
    "num_messages",
    "parse_headers_and_payload",
]

_frames = load_twin("quasar.protocol._frames")

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class ParsedPayload:
    """The parts of a SEND/MESSAGE ``headers_and_payload`` span.

    Attributes:
        checksum: the stored CRC32C (u32), or None when the span has no 0x0e01 magic. Not verified here (the
            decoder reports ``Frame.checksum_ok``).
        broker_entry_metadata: parsed 0x0e02 broker entry metadata, or None.
        metadata: the parsed MessageMetadata.
        payload: the payload bytes (a memoryview into the span; possibly a compressed batch).
        metadata_bytes: the serialized MessageMetadata (a memoryview into the span).
    """

    checksum: int | None
    broker_entry_metadata: BrokerEntryMetadata | None
    metadata: MessageMetadata
    payload: memoryview
    metadata_bytes: memoryview


def parse_headers_and_payload(span: bytes | memoryview) -> ParsedPayload:
    """Split ``[0x0e02 bem]? [0x0e01 crc]? [metadataSize][metadata][payload]`` and parse the metadata.

    The payload is neither copied nor read.

    Args:
        span: the bytes after a SEND/MESSAGE command (``Frame.headers_and_payload``, or a stored entry).

    Returns:
        A :class:`ParsedPayload` whose memoryviews point into ``span``.

    Raises:
        MalformedFrameError: a header runs past the span, or the (broker entry) metadata is unparsable, lacks
            a required field (producer_name, sequence_id, publish_time), has invalid UTF-8 in a string, or has
            a top-level field of wire type 3/4 (a group) or 6/7. upb keeps such a field as an unknown one, but
            PulsarApi.proto has no groups and the readers of stored entries (``entry_dispatch_info``,
            ``entry_keys``, compiled and pure) refuse them, as the SEND fast path declines them: accepted at
            publish, such an entry could be stored but never dispatched ("dispatch failed" on every read of
            its subscriptions; found by fuzz/fuzz_commands.py).
    """
    view = span if isinstance(span, memoryview) else memoryview(span)
    bem_start, bem_end, checksum, _, metadata_start, metadata_end = split_headers(view)
    broker_entry_metadata = None
    if bem_start >= 0:
        broker_entry_metadata = BrokerEntryMetadata()
        try:
            # protobuf parses any buffer without a copy; types-protobuf's stub says bytes only
            broker_entry_metadata.ParseFromString(view[bem_start:bem_end])  # type: ignore[arg-type]
        except DecodeError as exc:
            raise MalformedFrameError(f"unparsable BrokerEntryMetadata: {exc}") from exc
    metadata_bytes = view[metadata_start:metadata_end]
    metadata = MessageMetadata()
    try:
        # protobuf parses any buffer without a copy; types-protobuf's stub says bytes only
        metadata.ParseFromString(metadata_bytes)  # type: ignore[arg-type]
    except DecodeError as exc:
        raise MalformedFrameError(f"unparsable MessageMetadata: {exc}") from exc
    if not metadata.IsInitialized():
        missing = missing_required_fields(metadata)
        raise MalformedFrameError(f"MessageMetadata is missing required fields: {missing}")
    bad = find_invalid_utf8(metadata)
    if bad is not None:
        raise MalformedFrameError(f"MessageMetadata field '{bad}' is not valid UTF-8")
    try:  # upb keeps a group (wire type 3/4) as an unknown field; the compiled readers of entries refuse it
        _frames.entry_dispatch_info(view)
    except ValueError as exc:
        raise MalformedFrameError(
            f"MessageMetadata wire format: {exc} (a group or undefined wire type)"
        ) from None
    return ParsedPayload(checksum, broker_entry_metadata, metadata, view[metadata_end:], metadata_bytes)


def entry_dispatch_info(entry: bytes | memoryview) -> tuple[int, int]:
    """``(messages in the entry, deliver_at_time in ms or 0)`` of a stored entry, read straight from its
    MessageMetadata's wire format without a protobuf object (compiled ``_frames_c.entry_dispatch_info``; twin
    ``_frames_py``): what a dispatcher charges against permits and whether the entry is delayed, per entry on
    the consume path. The entry was validated when it was published, so only the wire format is checked.

    Raises:
        MalformedFrameError: the headers or the metadata are truncated or malformed.
    """
    try:
        info: tuple[int, int] = _frames.entry_dispatch_info(entry)
    except ValueError as exc:
        raise MalformedFrameError(f"stored entry: {exc}") from None
    return info


def num_messages(metadata: MessageMetadata) -> int:
    """Messages in the entry: ``num_messages_in_batch`` when present (a batch), else 1.

    This is what a broker charges against a consumer's flow permits for the entry.
    """
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


def encode_batch(items: Sequence[tuple[SingleMessageMetadata, bytes | memoryview]]) -> bytes:
    """Build an uncompressed batch payload from ``(SingleMessageMetadata, payload)`` pairs.

    ``payload_size`` is set on each SingleMessageMetadata passed in (it is required and must equal the item's
    length).

    Returns:
        The concatenation of ``[u32 size][SingleMessageMetadata][payload]`` per item; compress it and put its
        length in ``MessageMetadata.uncompressed_size``, and ``len(items)`` in ``num_messages_in_batch``.

    Raises:
        LocalProtocolError: an item's ``payload_size`` was set to a different length.
    """
    parts: list[bytes | memoryview] = []
    for single, payload in items:
        size = len(payload)
        if single.HasField("payload_size") and single.payload_size != size:
            raise LocalProtocolError(f"payload_size {single.payload_size} != item payload length {size}")
        single.payload_size = size
        try:
            encoded = single.SerializeToString()
        except EncodeError as exc:  # pragma: no cover - payload_size is the only required field
            raise LocalProtocolError(str(exc)) from exc
        parts.append(_U32.pack(len(encoded)) + encoded)
        parts.append(payload)
    return b"".join(parts)


def decode_batch(payload: bytes | memoryview, count: int) -> list[tuple[SingleMessageMetadata, memoryview]]:
    """Split an uncompressed batch payload into ``count`` ``(SingleMessageMetadata, item payload)`` pairs.

    Args:
        payload: the (decompressed) entry payload.
        count: ``num_messages_in_batch`` from the entry's MessageMetadata.

    Returns:
        The items in order; each payload is a memoryview into ``payload`` (no copy).

    Raises:
        MalformedBatchError: a size runs past the payload, a SingleMessageMetadata is unparsable or lacks
            payload_size, a negative size, a negative ``count``, or bytes left over after ``count`` items.
    """
    return list(iter_batch(payload, count))


def iter_batch(payload: bytes | memoryview, count: int) -> Iterator[tuple[SingleMessageMetadata, memoryview]]:
    """:func:`decode_batch` one item at a time (memory for one item, whatever ``count``); raises the same
    errors when the bad item is reached (a ``count`` that the payload's bytes cannot hold, 6 bytes per item
    at least, before the first)."""
    if count < 0:
        raise MalformedBatchError(f"negative message count {count}")
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    size = len(view)
    if count > size // MIN_BATCH_ITEM_SIZE:
        raise MalformedBatchError(
            f"num_messages_in_batch {count} cannot fit in {size} bytes "
            f"(a batch item takes at least {MIN_BATCH_ITEM_SIZE})"
        )
    pos = 0
    for index in range(count):
        if size - pos < 4:
            raise MalformedBatchError(f"batch item {index} of {count}: no room for its metadata size")
        metadata_size = _U32.unpack_from(view, pos)[0]
        start = pos + 4
        end = start + metadata_size
        if end > size:
            raise MalformedBatchError(f"batch item {index}: metadata size {metadata_size} runs past the end")
        single = SingleMessageMetadata()
        try:
            # protobuf parses any buffer without a copy; types-protobuf's stub says bytes only
            single.ParseFromString(view[start:end])  # type: ignore[arg-type]
        except DecodeError as exc:
            raise MalformedBatchError(f"batch item {index}: unparsable SingleMessageMetadata: {exc}") from exc
        if not single.HasField("payload_size"):
            raise MalformedBatchError(f"batch item {index}: SingleMessageMetadata without payload_size")
        bad = find_invalid_utf8(single)
        if bad is not None:
            raise MalformedBatchError(f"batch item {index}: field '{bad}' is not valid UTF-8")
        item_size = single.payload_size
        if item_size < 0 or end + item_size > size:
            raise MalformedBatchError(f"batch item {index}: payload_size {item_size} runs past the payload")
        pos = end + item_size
        yield single, view[end:pos]
    if pos != size:
        raise MalformedBatchError(f"{size - pos} bytes left over after {count} batch items")
