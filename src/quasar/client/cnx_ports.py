"""The ports of a :class:`~quasar.client.client_cnx.ClientCnx`: what it needs of its transport
(:class:`StreamTransport`) and what the producers and consumers registered on it receive
(:class:`ProducerHandler`, :class:`ConsumerHandler`; called on the loop thread). The ``cnx`` the handlers get
is the ClientCnx (typed ``Any`` here: this module is below ``client_cnx``, which imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from quasar.protocol import Frame

__all__ = ["ConsumerHandler", "ProducerHandler", "StreamTransport"]


@runtime_checkable
class StreamTransport(Protocol):
    """What a :class:`ClientCnx` needs of its transport: the write side of a stream, checked by capability.

    asyncio's ``Transport`` and uvloop's ``TCPTransport`` (which subclasses none of asyncio's transport classes)
    both qualify; ``isinstance(transport, StreamTransport)`` checks that the methods exist.
    """

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for sending (never blocks)."""

    def writelines(self, list_of_data: list[bytes]) -> None:
        """Queue several buffers for sending, in order (never blocks)."""

    def is_closing(self) -> bool:
        """True once the transport is closing or closed."""

    def close(self) -> None:
        """Flush buffered data, then close; the protocol's ``connection_lost`` follows."""


class ProducerHandler(Protocol):
    """What a producer registered on a connection receives (called on the loop thread)."""

    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> None:
        """A SEND_RECEIPT addressed to the producer: its sequence id and the entry's position (signed int64)."""

    def on_send_error(self, frame: Frame) -> None:
        """A SEND_ERROR addressed to the producer."""

    def on_connection_closed(self, cnx: Any) -> None:
        """``cnx`` is gone, or the broker sent CLOSE_PRODUCER (the producer is no longer registered)."""


class ConsumerHandler(Protocol):
    """What a consumer registered on a connection receives (called on the loop thread)."""

    def on_message(self, frame: Frame) -> None:
        """A MESSAGE addressed to the consumer, from the FrameDecoder (the fast path refused it)."""

    def on_message_parts(
        self, ledger_id: int, entry_id: int, redelivery_count: int, checksum_ok: bool | None, metadata: bytes,
        payload: bytes, *routing: Any,
    ) -> None:  # fmt: skip
        """A MESSAGE addressed to the consumer, decoded by the fast path (no ack_set; see
        :func:`quasar.client.codec.read_frames`): position, redelivery count, whether the CRC matched (None: no
        checksum), the MessageMetadata bytes (checked: they parse), the payload bytes, then the metadata fields
        the consumer routes by (num_messages_in_batch or None, num_chunks_from_msg, compression,
        uncompressed_size)."""

    def on_connection_closed(self, cnx: Any) -> None:
        """``cnx`` is gone, or the broker sent CLOSE_CONSUMER (the consumer is no longer registered)."""

    def on_active_consumer_change(self, is_active: bool) -> None:
        """ACTIVE_CONSUMER_CHANGE (Failover subscriptions)."""
