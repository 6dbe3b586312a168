"""The producer's encoder: batches, single messages and chunks become SEND frames wrapped in
:class:`~quasar.client.op_send.OpSendMsg` (reference/pulsar-protocol.md §7; seed 000 for the batching rules).

* A closed batch (:class:`~quasar.client.batch.BuiltBatch`) is compressed as a whole; its entry metadata takes
  the first item's partition and ordering keys (as the C++ producer) and ``highest_sequence_id`` when it holds
  more than one message.
* A single message carries its own metadata; with ``chunking_enabled`` one above the broker's
  ``max_message_size`` is split into chunks sharing a uuid ``<producer name>-<sequence id>``; only the last
  chunk's op carries the waiter and the pending-queue permit, so only its receipt completes the message.
* A frame larger than ``max_message_size`` raises :class:`MessageTooBigError` (nothing is encoded).

The MessageMetadata and the whole SEND frame (command, CRC-32C, metadata, payload) are built in one call each by
the compiled codec (``quasar.client._codec_c``, twin ``_codec_py``), byte-identical to protobuf's serialization.
The encoder holds no queue and does no I/O: :class:`~quasar.client.producer.Producer` hands it messages and
pushes the ops it returns.
"""

from __future__ import annotations

import time
from typing import Any

from quasar.protocol import DEFAULT_MAX_MESSAGE_SIZE, CompressionType, compress

from .batch import BuiltBatch
from .chunking import split_chunks
from .codec import encode_metadata as _encode_metadata
from .codec import encode_send as _encode_send
from .config import ProducerConfig
from .errors import MessageTooBigError
from .message import OutgoingMessage
from .op_send import OpSendMsg

__all__ = ["MessageEncoder"]

#: MessageMetadata fields 1 to 19 of :func:`encode_metadata` (the chunk fields follow per chunk).
_Fields = tuple[Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any]
_CRC_AND_SIZE = 10  # [0x0e01 u16][crc u32][metadataSize u32]
_CHUNK_METADATA_SLACK = 64  # uuid digits and chunk fields beyond the base metadata


class MessageEncoder:
    """SEND frames of one producer.

    Args:
        producer_id: the producer id of the SEND commands.
        config: compression, chunking and chunk size settings.

    Attributes:
        producer_name / schema_version / max_message_size: what the broker said in PRODUCER_SUCCESS and
            CONNECTED (set with :meth:`connected`; ``max_message_size`` in bytes).
    """

    __slots__ = ("_chunk_max", "_chunking", "_compression", "max_message_size", "producer_id", "producer_name",
                 "schema_version")  # fmt: skip

    def __init__(self, producer_id: int, config: ProducerConfig) -> None:
        self.producer_id = producer_id
        self.producer_name = config.producer_name or ""
        self.schema_version = b""
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._compression = config.compression_type
        self._chunking = config.chunking_enabled
        self._chunk_max = config.chunk_max_message_size

    def connected(self, producer_name: str, schema_version: bytes, max_message_size: int) -> None:
        """Take the producer name and schema version of PRODUCER_SUCCESS and the connection's
        ``max_message_size`` (bytes), used by every frame encoded from now on."""
        self.producer_name = producer_name
        self.schema_version = schema_version
        self.max_message_size = max_message_size

    def encode_batch(self, built: BuiltBatch) -> OpSendMsg:
        """The SEND of a closed batch (one entry of ``built.num_messages`` messages, one waiter each).

        Raises:
            MessageTooBigError: the compressed entry exceeds ``max_message_size``.
        """
        first = built.first
        count = built.num_messages
        highest = built.highest_sequence_id if count > 1 else None
        payload, compression, uncompressed = self._compress(built.payload)
        metadata = _encode_metadata(
            self.producer_name, built.sequence_id, time.time_ns() // 1_000_000, None, first.partition_key,
            first.replication_clusters or None, compression, uncompressed, count, None, self.schema_version,
            first.ordering_key, None, highest, None, None, None, None,
        )  # fmt: skip
        size = _CRC_AND_SIZE + len(metadata) + len(payload)
        if size > self.max_message_size:
            raise MessageTooBigError(
                f"batch of {size} bytes exceeds max_message_size {self.max_message_size}"
            )
        frame = _encode_send(self.producer_id, built.sequence_id, count, highest, False, metadata, payload)
        return OpSendMsg(built.sequence_id, built.highest_sequence_id, count, frame, built.waiters, count)

    def encode_single(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> list[OpSendMsg]:
        """The SEND of one non-batched message, or one SEND per chunk (chunking on and the message too big).

        Raises:
            MessageTooBigError: not chunked and the frame exceeds ``max_message_size``.
        """
        payload, compression, uncompressed = self._compress(message.payload)
        fields: _Fields = (
            self.producer_name, sequence_id, time.time_ns() // 1_000_000, message.properties or None,
            message.partition_key, message.replication_clusters or None, compression, uncompressed, None,
            message.event_timestamp, self.schema_version, message.ordering_key, message.deliver_at,
        )  # fmt: skip
        metadata = _encode_metadata(*fields, None, None, None, None, None)
        max_size = self.max_message_size
        overhead = len(metadata) + _CRC_AND_SIZE
        if self._chunking and len(payload) + overhead > max_size:
            chunk_size = max_size - overhead - _CHUNK_METADATA_SLACK
            if self._chunk_max is not None:
                chunk_size = min(chunk_size, self._chunk_max)
            return self._encode_chunks(fields, payload, sequence_id, waiter, max(1, chunk_size))
        size = overhead + len(payload)
        if size > max_size:
            raise MessageTooBigError(f"message of {size} bytes exceeds max_message_size {max_size}")
        frame = _encode_send(self.producer_id, sequence_id, None, None, False, metadata, payload)
        return [OpSendMsg(sequence_id, sequence_id, 1, frame, [waiter], 1)]

    def _compress(self, payload: bytes) -> tuple[bytes, int | None, int | None]:
        """``(payload, compression, uncompressed_size)``: the metadata fields are None without compression."""
        kind = self._compression
        if kind == CompressionType.NONE:
            return payload, None, None
        return compress(kind, payload), int(kind), len(payload)

    def _encode_chunks(
        self,
        fields: _Fields,
        payload: bytes,
        sequence_id: int,
        waiter: Any,
        chunk_size: int,
    ) -> list[OpSendMsg]:
        chunks = split_chunks(payload, chunk_size)
        uuid = f"{self.producer_name}-{sequence_id}"
        last = len(chunks) - 1
        ops = []
        for chunk_id, chunk in enumerate(chunks):
            metadata = _encode_metadata(*fields, None, uuid, len(chunks), len(payload), chunk_id)
            frame = _encode_send(self.producer_id, sequence_id, None, None, True, metadata, chunk)
            is_last = chunk_id == last
            ops.append(
                OpSendMsg(
                    sequence_id, sequence_id, 1, frame, [waiter] if is_last else [], 1 if is_last else 0
                )
            )
        return ops
