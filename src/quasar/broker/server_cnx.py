"""ServerCnx: one Pulsar binary-protocol connection, on asyncio's Protocol API.

Bytes from the socket go into the sans-IO ``FrameDecoder``; each whole frame is dispatched to a handler in
``handlers.CommandHandlers`` (one method per command). A malformed frame (``RemoteProtocolError``) closes this
connection only, with the reason logged; an exception inside a handler is answered with the command's error
reply where the protocol has one, and never escapes to the event loop. Follows Pulsar's ServerCnx
(reference/pulsar-protocol.md §6, §8, §10).

Flow control towards the client: when the transport's write buffer passes its high-water mark the connection
stops being ``writable`` and dispatchers skip its consumers until asyncio calls ``resume_writing``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from quasar.broker.handlers import CommandHandlers
from quasar.ledger.position import Position
from quasar.protocol import NEED_DATA, FrameDecoder, commands
from quasar.protocol.errors import ProtocolError
from quasar.protocol.frame import MESSAGE_SIZE_FRAME_PADDING

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.config import BrokerConfig
    from quasar.broker.consumer import Consumer
    from quasar.broker.producer import Producer

log = logging.getLogger(__name__)

WRITE_BUFFER_HIGH_WATER = 4 * 1024 * 1024  # bytes
WRITE_BUFFER_LOW_WATER = 1 * 1024 * 1024  # bytes


class ServerCnx(CommandHandlers, asyncio.Protocol):
    """One client connection: decoder, producers and consumers by id, keep-alive, write-side flow control."""

    def __init__(self, service: BrokerService, config: BrokerConfig, connections: set[ServerCnx]) -> None:
        self.service = service
        self.config = config
        self._connections = connections
        self._decoder = FrameDecoder(max_frame_size=config.max_message_size + MESSAGE_SIZE_FRAME_PADDING)
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        self.connected = False  # CONNECT received and answered
        # non-persistent publishes not yet answered (Pulsar nonPersistentPendingMessages) and their limit
        self.non_persistent_pending = 0
        self.max_non_persistent_pending = config.max_concurrent_non_persistent_message_per_connection
        self.client_version = ""
        self.protocol_version = 0
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self.closed_producer_ids: set[int] = set()
        self.closed_consumer_ids: set[int] = set()
        self.pending_producer_ids: set[int] = set()  # PRODUCER / SUBSCRIBE still loading their topic
        self.pending_consumer_ids: set[int] = set()
        self._writable = True
        self._closing = False
        self._awaiting_pong = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport is not an asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_WATER, low=WRITE_BUFFER_LOW_WATER)
        self._connections.add(self)
        self._schedule_keepalive()
        log.debug("connection from %s", self.remote_address)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._awaiting_pong = False
        try:
            self._decoder.receive_data(data)
            while not self._closing:
                frame = self._decoder.next_frame()
                if frame is NEED_DATA:
                    break
                self.handle_frame(frame)
        except ProtocolError as exc:
            self.close(f"protocol error: {exc}")
        except Exception:
            log.exception("unexpected error on connection %s", self.remote_address)
            self.close("internal error")

    def eof_received(self) -> bool | None:
        return None  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._connections.discard(self)
        if self._keepalive is not None:
            self._keepalive.cancel()
        for producer in list(self.producers.values()):
            self.detach_producer(producer)
        for consumer in list(self.consumers.values()):
            self.detach_consumer(consumer)
        self.producers.clear()
        self.consumers.clear()
        for task in list(self._tasks):
            task.cancel()
        log.debug("connection from %s closed", self.remote_address)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        for consumer in list(self.consumers.values()):
            consumer.subscription.schedule_dispatch()

    # ------------------------------------------------------------------ plumbing
    @property
    def writable(self) -> bool:
        return self._writable and not self._closing

    def write(self, frame: bytes) -> None:
        if self.transport is not None and not self._closing:
            self.transport.write(frame)

    def close(self, reason: str) -> None:
        """Close this connection only, logging ``reason``; producers and consumers on it are detached."""
        if self._closing:
            return
        log.warning("closing connection from %s: %s", self.remote_address, reason)
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as a task owned by this connection (cancelled when it closes; errors are logged)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection task failed on %s", self.remote_address, exc_info=task.exception())
            self.close("internal error in a command handler")

    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(self.config.keep_alive_interval_s, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if self._closing:
            return
        if self._awaiting_pong:
            self.close("ping timeout: no command received for a whole keep-alive interval")
            return
        if self.connected:
            self._awaiting_pong = True
            self.write(commands.new_ping())
        self._schedule_keepalive()

    # ------------------------------------------------------------------ used by producers / consumers
    def send_receipt(
        self, producer_id: int, sequence_id: int, highest_sequence_id: int, position: Position
    ) -> None:
        self.write(
            commands.new_send_receipt(
                producer_id, sequence_id, position.ledger_id, position.entry_id, highest_sequence_id or None
            )
        )

    def send_send_error(self, producer_id: int, sequence_id: int, error: int, message: str) -> None:
        self.write(commands.new_send_error(producer_id, sequence_id, error, message))

    def send_message(
        self,
        consumer_id: int,
        position: Position,
        partition: int,
        headers_and_payload: memoryview,
        redelivery_count: int,
        ack_set: list[int] | None = None,
    ) -> None:
        if self.transport is None or self._closing:
            return
        self.transport.writelines(
            commands.new_message(
                consumer_id,
                position.ledger_id,
                position.entry_id,
                partition,
                headers_and_payload,
                redelivery_count=redelivery_count,
                ack_set=ack_set,
            )
        )

    def close_producer(self, producer: Producer) -> None:
        """Broker-initiated CLOSE_PRODUCER (backlog quota): detach it; the client reconnects by itself."""
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            self.closed_producer_ids.add(producer.producer_id)
        self.detach_producer(producer)
        self.write(commands.new_close_producer(producer.producer_id, 0))

    def send_close_consumer(self, consumer_id: int) -> None:
        """Broker-initiated CLOSE_CONSUMER (seek, unload): the client re-subscribes by itself."""
        consumer = self.consumers.pop(consumer_id, None)
        if consumer is not None:
            self.closed_consumer_ids.add(consumer_id)
        self.write(commands.new_close_consumer(consumer_id, 0))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        """Failover notification; the client only passes it to a consumer event listener."""
        self.write(commands.new_active_consumer_change(consumer_id, is_active))

    def detach_producer(self, producer: Producer) -> None:
        producer.closed = True
        producer.topic.remove_producer(producer)

    def detach_consumer(self, consumer: Consumer) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        subscription.topic.remove_non_durable_if_idle(subscription)
