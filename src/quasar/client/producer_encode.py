"""The encoding half of :class:`~quasar.client.producer.Producer`: batches, single messages and chunks become
SEND frames (reference/pulsar-protocol.md §7; seed 000 for the batching rules).

* A batch is sent when full (see :class:`~quasar.client.batch.BatchMessageContainer`) or
  ``batching_max_publish_delay_ms`` after its first message; the whole batch is compressed, and its entry
  metadata takes the first item's partition and ordering keys (as the C++ producer).
* A single message carries its own metadata; with ``chunking_enabled`` one above the broker's
  ``max_message_size`` is split into chunks sharing a uuid ``<producer name>-<sequence id>``; only the last
  chunk's receipt completes the message.
* A frame larger than ``max_message_size`` fails its messages with :class:`MessageTooBigError`.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from quasar.protocol import CompressionType, commands, compress, encode_headers_and_payload, pb

from .batch import BatchMessageContainer, BuiltBatch
from .chunking import split_chunks
from .config import ProducerConfig
from .errors import MessageTooBigError
from .message import OutgoingMessage
from .op_send import OpSendMsg, fail_waiter

__all__ = ["ProducerEncoding"]

_CRC_AND_SIZE = 10  # [0x0e01 u16][crc u32][metadataSize u32]
_CHUNK_METADATA_SLACK = 64  # uuid digits and chunk fields beyond the base metadata


class ProducerEncoding:
    """Mixin of :class:`~quasar.client.producer.Producer` (which provides the attributes below)."""

    config: ProducerConfig
    producer_id: int
    _loop: asyncio.AbstractEventLoop
    _batch: BatchMessageContainer | None
    _batch_timer: asyncio.TimerHandle | None
    _producer_name: str | None
    _schema_version: bytes
    _max_message_size: int
    _pending: collections.deque[OpSendMsg]

    def _release(self, count: int) -> None:
        raise NotImplementedError

    def _push(self, op: OpSendMsg) -> None:
        raise NotImplementedError

    # --------------------------------------------------------------------------------- batching --

    def _start_batch_timer(self) -> None:
        delay = self.config.batching_max_publish_delay_ms / 1000
        self._batch_timer = self._loop.call_later(delay, self._on_batch_timer)

    def _on_batch_timer(self) -> None:
        self._batch_timer = None
        if self._batch is not None and not self._batch.is_empty:
            self._send_batch()

    def _batch_send_and_add(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> None:
        assert self._batch is not None
        if not self._batch.is_empty:
            self._send_batch()
        if self._batch.add(message, sequence_id, waiter):
            self._send_batch()
        elif self._batch_timer is None:
            self._start_batch_timer()

    def _send_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        assert self._batch is not None
        built: BuiltBatch = self._batch.build()
        metadata = self._new_metadata(built.first, built.sequence_id)
        metadata.num_messages_in_batch = built.num_messages
        if built.first.partition_key is not None:
            metadata.partition_key = built.first.partition_key
        if built.first.ordering_key is not None:
            metadata.ordering_key = built.first.ordering_key
        highest = built.highest_sequence_id if built.num_messages > 1 else None
        if highest is not None:
            metadata.highest_sequence_id = highest
        payload = self._compress(metadata, built.payload)
        span = encode_headers_and_payload(metadata, payload)
        if len(span) > self._max_message_size:
            error = MessageTooBigError(
                f"batch of {len(span)} bytes exceeds max_message_size {self._max_message_size}"
            )
            self._release(built.num_messages)
            for waiter in built.waiters:
                fail_waiter(waiter, error)
            return
        frame = commands.new_send(
            self.producer_id, built.sequence_id, span, built.num_messages, highest_sequence_id=highest
        )
        self._push(
            OpSendMsg(
                built.sequence_id,
                built.highest_sequence_id,
                built.num_messages,
                frame,
                built.waiters,
                built.num_messages,
            )
        )

    # ------------------------------------------------------------------------------ single/chunk --

    def _new_metadata(self, message: OutgoingMessage, sequence_id: int) -> pb.MessageMetadata:
        metadata = pb.MessageMetadata(
            producer_name=self._producer_name,
            sequence_id=sequence_id,
            publish_time=time.time_ns() // 1_000_000,
        )
        if message.replication_clusters:
            metadata.replicate_to.extend(message.replication_clusters)
        if self._schema_version:
            metadata.schema_version = self._schema_version
        return metadata

    def _compress(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        kind = self.config.compression_type
        if kind == CompressionType.NONE:
            return payload
        metadata.compression = kind
        metadata.uncompressed_size = len(payload)
        return compress(kind, payload)

    def _send_single(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> None:
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
        max_size = self._max_message_size
        overhead = metadata.ByteSize() + _CRC_AND_SIZE
        if self.config.chunking_enabled and len(payload) + overhead > max_size:
            chunk_size = max_size - overhead - _CHUNK_METADATA_SLACK
            if self.config.chunk_max_message_size is not None:
                chunk_size = min(chunk_size, self.config.chunk_max_message_size)
            self._send_chunks(metadata, payload, sequence_id, waiter, max(1, chunk_size))
            return
        span = encode_headers_and_payload(metadata, payload)
        if len(span) > max_size:
            raise MessageTooBigError(f"message of {len(span)} bytes exceeds max_message_size {max_size}")
        frame = commands.new_send(self.producer_id, sequence_id, span)
        self._push(OpSendMsg(sequence_id, sequence_id, 1, frame, [waiter], 1))

    def _send_chunks(
        self,
        metadata: pb.MessageMetadata,
        payload: bytes,
        sequence_id: int,
        waiter: Any,
        chunk_size: int,
    ) -> None:
        chunks = split_chunks(payload, chunk_size)
        metadata.uuid = f"{self._producer_name}-{sequence_id}"
        metadata.num_chunks_from_msg = len(chunks)
        metadata.total_chunk_msg_size = len(payload)
        last = len(chunks) - 1
        for chunk_id, chunk in enumerate(chunks):
            metadata.chunk_id = chunk_id
            span = encode_headers_and_payload(metadata, chunk)
            frame = commands.new_send(self.producer_id, sequence_id, span, is_chunk=True)
            is_last = chunk_id == last
            self._push(
                OpSendMsg(
                    sequence_id, sequence_id, 1, frame, [waiter] if is_last else [], 1 if is_last else 0
                )
            )
