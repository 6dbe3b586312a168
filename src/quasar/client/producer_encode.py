"""The producer's encoder: batches, single messages and chunks become SEND frames wrapped in
:class:`~quasar.client.op_send.OpSendMsg` (reference/pulsar-protocol.md §7; seed 000 for the batching rules).

* A closed batch (:class:`~quasar.client.batch.BuiltBatch`) is compressed as a whole; its entry metadata takes
  the first item's partition and ordering keys (as the C++ producer) and ``highest_sequence_id`` when it holds
  more than one message.
* A single message carries its own metadata; with ``chunking_enabled`` one above the broker's
  ``max_message_size`` is split into chunks sharing a uuid ``<producer name>-<sequence id>``; only the last
  chunk's op carries the waiter and the pending-queue permit, so only its receipt completes the message.
* A frame larger than ``max_message_size`` raises :class:`MessageTooBigError` (nothing is encoded).

The encoder holds no queue and does no I/O: :class:`~quasar.client.producer.Producer` hands it messages and
pushes the ops it returns.
"""

from __future__ import annotations

import time
from typing import Any, cast

from quasar.protocol import (
    DEFAULT_MAX_MESSAGE_SIZE,
    CompressionType,
    commands,
    compress,
    encode_headers_and_payload,
    pb,
)

from .batch import BuiltBatch
from .chunking import split_chunks
from .config import ProducerConfig
from .errors import MessageTooBigError
from .message import OutgoingMessage
from .op_send import OpSendMsg

__all__ = ["MessageEncoder"]

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
        metadata = self._new_metadata(first, built.sequence_id)
        metadata.num_messages_in_batch = built.num_messages
        if first.partition_key is not None:
            metadata.partition_key = first.partition_key
        if first.ordering_key is not None:
            metadata.ordering_key = first.ordering_key
        highest = built.highest_sequence_id if built.num_messages > 1 else None
        if highest is not None:
            metadata.highest_sequence_id = highest
        payload = self._compress(metadata, built.payload)
        span = encode_headers_and_payload(metadata, payload)
        if len(span) > self.max_message_size:
            raise MessageTooBigError(
                f"batch of {len(span)} bytes exceeds max_message_size {self.max_message_size}"
            )
        frame = commands.new_send(
            self.producer_id, built.sequence_id, span, built.num_messages, highest_sequence_id=highest
        )
        return OpSendMsg(
            built.sequence_id,
            built.highest_sequence_id,
            built.num_messages,
            frame,
            built.waiters,
            built.num_messages,
        )

    def encode_single(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> list[OpSendMsg]:
        """The SEND of one non-batched message, or one SEND per chunk (chunking on and the message too big).

        Raises:
            MessageTooBigError: not chunked and the frame exceeds ``max_message_size``.
        """
        metadata = self._new_metadata(message, sequence_id)
        if message.properties:
            for key, value in message.properties.items():
                metadata.properties.add(key=key, value=value)
        if message.partition_key is not None:
            metadata.partition_key = message.partition_key
        if message.ordering_key is not None:
            metadata.ordering_key = message.ordering_key
        if message.event_timestamp is not None:
            metadata.event_time = message.event_timestamp
        if message.deliver_at is not None:
            metadata.deliver_at_time = message.deliver_at
        payload = self._compress(metadata, message.payload)
        max_size = self.max_message_size
        overhead = metadata.ByteSize() + _CRC_AND_SIZE
        if self._chunking and len(payload) + overhead > max_size:
            chunk_size = max_size - overhead - _CHUNK_METADATA_SLACK
            if self._chunk_max is not None:
                chunk_size = min(chunk_size, self._chunk_max)
            return self._encode_chunks(metadata, payload, sequence_id, waiter, max(1, chunk_size))
        span = encode_headers_and_payload(metadata, payload)
        if len(span) > max_size:
            raise MessageTooBigError(f"message of {len(span)} bytes exceeds max_message_size {max_size}")
        frame = commands.new_send(self.producer_id, sequence_id, span)
        return [OpSendMsg(sequence_id, sequence_id, 1, frame, [waiter], 1)]

    def _new_metadata(self, message: OutgoingMessage, sequence_id: int) -> pb.MessageMetadata:
        metadata = pb.MessageMetadata(
            producer_name=self.producer_name,
            sequence_id=sequence_id,
            publish_time=time.time_ns() // 1_000_000,
        )
        if message.replication_clusters:
            metadata.replicate_to.extend(message.replication_clusters)
        if self.schema_version:
            metadata.schema_version = self.schema_version
        return metadata

    def _compress(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        kind = self._compression
        if kind == CompressionType.NONE:
            return payload
        metadata.compression = cast(pb.CompressionType.ValueType, kind)
        metadata.uncompressed_size = len(payload)
        return compress(kind, payload)

    def _encode_chunks(
        self,
        metadata: pb.MessageMetadata,
        payload: bytes,
        sequence_id: int,
        waiter: Any,
        chunk_size: int,
    ) -> list[OpSendMsg]:
        chunks = split_chunks(payload, chunk_size)
        metadata.uuid = f"{self.producer_name}-{sequence_id}"
        metadata.num_chunks_from_msg = len(chunks)
        metadata.total_chunk_msg_size = len(payload)
        last = len(chunks) - 1
        ops = []
        for chunk_id, chunk in enumerate(chunks):
            metadata.chunk_id = chunk_id
            span = encode_headers_and_payload(metadata, chunk)
            frame = commands.new_send(self.producer_id, sequence_id, span, is_chunk=True)
            is_last = chunk_id == last
            ops.append(
                OpSendMsg(
                    sequence_id, sequence_id, 1, frame, [waiter] if is_last else [], 1 if is_last else 0
                )
            )
        return ops
