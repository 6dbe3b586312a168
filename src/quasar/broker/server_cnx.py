"""ServerCnx: one Pulsar binary-protocol connection, on asyncio's Protocol API.

Bytes from the socket go into the sans-IO ``FrameDecoder``; each whole frame goes to the handler its command
type maps to in the connection's dispatch table. The table is composed of four command families (package
``quasar.broker.cnx``): ``LookupCommands``, ``SchemaCommands``, ``ProducerCommands`` and ``ConsumerCommands``,
each given this connection through a small typed port (``cnx.ports``). Before CONNECT the table holds CONNECT
only. Follows Pulsar's ServerCnx (reference/pulsar-protocol.md §6, §8, §10).

Failure handling: a malformed frame (``ProtocolError``) closes this connection only, with the reason logged;
a handler answers the errors it expects with the command's error reply (``errors.server_error_of``); anything
else escaping a handler, or a task the connection spawned, is a bug: logged with its traceback, and this
connection is closed. Nothing escapes to the event loop.

Owned background work, cancelled in ``connection_lost``: the keep-alive timer (PING after an idle
``keep_alive_interval_s``, close after a second silent interval), the credential refresh timer of ``auth``
(``cnx.auth.ConnectionAuth``: CONNECT authentication, the role LOOKUP/PRODUCER/SUBSCRIBE are checked against,
AUTH_CHALLENGE when a token expires) and the tasks of ``spawn`` (PRODUCER, SUBSCRIBE and UNSUBSCRIBE that wait
on topic loading or metadata).
``keep_alive_interval_s``, close after a second silent interval; a connection that has not sent CONNECT when
the first interval ends is closed then, as Pulsar's ``PulsarHandler`` closes an incomplete handshake at its
first keep-alive tick) and the tasks of ``spawn`` (PRODUCER, SUBSCRIBE and UNSUBSCRIBE that wait on topic
loading or metadata).

Limits (Pulsar's ServerCnx): a connection over ``broker_max_connections`` / ``broker_max_connections_per_ip``
(``connection_limits.ConnectionController``) is closed in ``connection_made`` before anything is read; above
``max_pending_publish_requests_per_connection`` SENDs without a receipt the socket is no longer read
(``pause_reading``) until the receipts drain to half of it, so one client cannot queue unbounded publishes.

Output is written once per event-loop turn: every frame a turn produces (receipts of a group commit round,
the MESSAGE frames of a dispatch round, replies) is queued, and one ``writelines`` hands them all to the
transport at the end of the turn, or at the end of ``data_received`` for the replies to the commands it read:
one system call where there was one per frame (Pulsar's Netty pipeline consolidates flushes the same way).
Queued output above the high-water mark is handed over at once, and ``close`` hands over what is queued
before it closes.

Flow control towards the client: when the transport's write buffer passes its high-water mark the connection
stops being ``writable`` and dispatchers skip its consumers until asyncio calls ``resume_writing``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, cast

from quasar.broker.cnx.auth import ConnectionAuth
from quasar.broker.cnx.consumers import ConsumerCommands
from quasar.broker.cnx.lookup import LookupCommands
from quasar.broker.cnx.ports import FrameHandler, IdRegistry
from quasar.broker.cnx.producers import ProducerCommands
from quasar.broker.cnx.schemas import SchemaCommands
from quasar.broker.connection_limits import ConnectionController, RateLimitedLog
from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, commands
from quasar.protocol.enums import MAX_PROTOCOL_VERSION, ServerError
from quasar.protocol.errors import ProtocolError
from quasar.protocol.frame import MESSAGE_SIZE_FRAME_PADDING
from quasar.security import peer_certificate_der

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.config import BrokerConfig
    from quasar.broker.consumer import Consumer
    from quasar.broker.errors import BrokerError
    from quasar.broker.producer import Producer
    from quasar.ledger.position import Position
    from quasar.protocol.decoder import Frame

__all__ = ["SERVER_VERSION", "ServerCnx"]

log = logging.getLogger(__name__)
_REFUSALS = RateLimitedLog(log)  # a connection flood must not become a log flood

SERVER_VERSION = "Quasar 0.1.0"
WRITE_BUFFER_HIGH_WATER = 4 * 1024 * 1024  # bytes
WRITE_BUFFER_LOW_WATER = 1 * 1024 * 1024  # bytes


class ServerCnx(asyncio.Protocol):
    """One client connection: decoder, dispatch table, producers and consumers by id, keep-alive, owned
    tasks, write-side flow control. Implements the ports of ``quasar.broker.cnx`` and the
    ``ProducerConnection`` / ``ConsumerConnection`` its producers and consumers answer through."""

    def __init__(
        self,
        service: BrokerService,
        config: BrokerConfig,
        connections: set[ServerCnx],
        controller: ConnectionController | None = None,
    ) -> None:
        self.service = service
        self.config = config
        self._connections = connections
        self._decoder = FrameDecoder(max_frame_size=config.max_message_size + MESSAGE_SIZE_FRAME_PADDING)
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        # DER of the client certificate the TLS handshake verified (for TLS authentication); None on the
        # plain listener or when the client gave none
        self.peer_certificate_der: bytes | None = None
        self.connected = False  # CONNECT received and answered
        self.client_version = ""
        self.protocol_version = 0
        # non-persistent publishes not yet answered (Pulsar nonPersistentPendingMessages) and their limit
        self.non_persistent_pending = 0
        self.max_non_persistent_pending = config.max_concurrent_non_persistent_message_per_connection
        self.producers: IdRegistry[Producer] = IdRegistry()
        self._controller = controller  # connection admission; None: unlimited (unit tests)
        self._admitted_ip: str | None = None  # the IP counted by the controller, released once
        self._pending_publishes = 0  # SENDs without a receipt yet (Pulsar pendingSendRequest)
        self._max_pending_publishes = config.max_pending_publish_requests_per_connection
        self._reading_paused = False
        self.consumers: IdRegistry[Consumer] = IdRegistry()
        self._writable = True
        self._out: list[bytes | memoryview] = []  # frames of this loop turn, written by _write_out
        self._out_bytes = 0
        self._out_scheduled = False
        self._closing = False
        self._awaiting_pong = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.auth = ConnectionAuth(self, service.security, SERVER_VERSION)
        self._producer_commands = ProducerCommands(self)
        self._consumer_commands = ConsumerCommands(self)
        self._connected_handlers: dict[int, FrameHandler] = {
            **LookupCommands(self).handlers(),
            **SchemaCommands(self).handlers(),
            **self._producer_commands.handlers(),
            **self._consumer_commands.handlers(),
            CommandType.AUTH_RESPONSE: self.auth.handle_auth_response,
        }
        self._handlers: Mapping[int, FrameHandler] = {CommandType.CONNECT: self._handle_connect}

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's TCPTransport has the same methods without subclassing asyncio.Transport)
        self.transport = tcp = cast(asyncio.Transport, transport)
        peer = tcp.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self._controller is not None:
            ip = str(peer[0]) if peer else "?"
            refusal = self._controller.try_open(ip)
            if refusal is not None:  # Pulsar: closed in channelActive, before anything is read or allocated
                _REFUSALS.warning("refusing connection from %s: %s", self.remote_address, refusal)
                self._closing = True
                tcp.close()
                return
            self._admitted_ip = ip
        self.peer_certificate_der = peer_certificate_der(tcp.get_extra_info("ssl_object"))
        sock = tcp.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_WATER, low=WRITE_BUFFER_LOW_WATER)
        self._connections.add(self)
        self._schedule_keepalive()
        log.debug("connection from %s", self.remote_address)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._awaiting_pong = False
        decoder = self._decoder
        try:
            decoder.receive_data(data)
            while not self._closing:
                frame = decoder.next_frame()
                if frame is NEED_DATA:
                    break
                handler = self._handlers.get(frame.type)
                if handler is None:
                    self._no_handler(frame)
                else:
                    handler(frame)
        except ProtocolError as exc:
            self.close(f"protocol error: {exc}")
        except Exception:  # last-resort boundary (logged): a handler's bug closes this connection only
            log.exception("unexpected error on connection %s", self.remote_address)
            self.close("internal error")
        else:
            self._write_out()  # the replies to this chunk's commands, in one system call

    def eof_received(self) -> bool | None:
        return None  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._admitted_ip is not None and self._controller is not None:
            self._controller.closed(self._admitted_ip)
            self._admitted_ip = None
        self._out = []
        self._connections.discard(self)
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        self.auth.close()
        self._producer_commands.close_all()
        self._consumer_commands.close_all()
        for task in list(self._tasks):
            task.cancel()
        log.debug("connection from %s closed", self.remote_address)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        for consumer in self.consumers:
            consumer.subscription.schedule_dispatch()

    # ------------------------------------------------------------------ dispatch
    def _handle_connect(self, frame: Frame) -> None:
        """CONNECT: agree on the protocol version, authenticate (``cnx.auth``; a refusal closes the
        connection), answer CONNECTED, and switch to the full dispatch table."""
        connect = frame.command.connect
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        if not self.auth.connect(connect):
            return
        self.connected = True
        self._handlers = self._connected_handlers
        self.write(
            commands.new_connected(SERVER_VERSION, self.protocol_version, self.config.max_message_size)
        )

    def _no_handler(self, frame: Frame) -> None:
        """A command this connection does not serve (yet): before CONNECT anything closes the connection;
        after it, a command with a request id is answered NotAllowedError, any other closes the connection."""
        try:
            name = CommandType(frame.type).name
        except ValueError:
            name = str(frame.type)
        if not self.connected:
            self.close(f"expected CONNECT as the first command, got {name}")
            return
        body = _sub_message(frame)
        if body is not None and body.DESCRIPTOR.fields_by_name.get("request_id") is not None:
            self.write(
                commands.new_error(
                    body.request_id, ServerError.NotAllowedError, f"command {name} is not supported"
                )
            )
            return
        self.close(f"command {name} is not supported and has no request id to answer")

    # ------------------------------------------------------------------ the port (cnx.ports)
    @property
    def role(self) -> str | None:
        """The authenticated role (None with authentication off), checked by LOOKUP, PRODUCER, SUBSCRIBE."""
        return self.auth.role

    @property
    def writable(self) -> bool:
        return self._writable and not self._closing

    def write(self, frame: bytes) -> None:
        """Queue one frame; it reaches the transport at the end of this loop turn (module docstring)."""
        if self._closing or self.transport is None:
            return
        self._out.append(frame)
        self._queued(len(frame))

    def _queued(self, size: int) -> None:
        self._out_bytes += size
        if self._out_bytes >= WRITE_BUFFER_HIGH_WATER:
            self._write_out()
        elif not self._out_scheduled:
            self._out_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_out)

    def _write_out(self) -> None:
        """Hand the queued frames to the transport in one ``writelines``."""
        self._out_scheduled = False
        out = self._out
        if not out:
            return
        self._out = []
        self._out_bytes = 0
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def close(self, reason: str) -> None:
        """Close this connection only, logging ``reason``; producers and consumers on it are detached."""
        if self._closing:
            return
        log.warning("closing connection from %s: %s", self.remote_address, reason)
        self._write_out()  # what was answered before the close still goes out
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task owned by this connection (cancelled when it closes; an exception escaping it
        is logged and closes the connection)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection task failed on %s", self.remote_address, exc_info=task.exception())
            self.close("internal error in a command handler")

    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(self.config.keep_alive_interval_s, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        self._keepalive = None
        if self._closing:
            return
        if not self.connected:
            self.close("handshake not completed within keep_alive_interval_s: no CONNECT received")
            return
        if self._awaiting_pong and not self._reading_paused:  # paused: our own back-pressure, not silence
            self.close("ping timeout: no command received for a whole keep-alive interval")
            return
        self._awaiting_pong = True
        self.write(commands.new_ping())
        self._schedule_keepalive()

    # ------------------------------------------------------------------ pending publishes
    def publish_started(self) -> None:
        """A SEND went to its producer; past ``max_pending_publish_requests_per_connection`` of them without
        a receipt, stop reading the socket (Pulsar ``startSendOperation`` disables auto-read)."""
        self._pending_publishes += 1
        if (
            self._pending_publishes >= self._max_pending_publishes
            and not self._reading_paused
            and self.transport is not None
            and not self._closing
        ):
            self._reading_paused = True
            self.transport.pause_reading()

    def publish_completed(self) -> None:
        """A SEND got its answer (receipt, error, or dropped with its closed producer); read again once half
        of the limit is left (Pulsar ``completedSendOperation``'s resumeReadsThreshold)."""
        self._pending_publishes -= 1
        if self._reading_paused and self._pending_publishes <= self._max_pending_publishes // 2:
            self._reading_paused = False
            if self.transport is not None and not self._closing:
                self.transport.resume_reading()

    # ------------------------------------------------------------------ ProducerConnection
    def send_receipt(
        self, producer_id: int, sequence_id: int, highest_sequence_id: int, position: Position
    ) -> None:
        self.write(
            commands.new_send_receipt(
                producer_id, sequence_id, position.ledger_id, position.entry_id, highest_sequence_id or None
            )
        )

    def send_send_error(self, producer_id: int, sequence_id: int, error: ServerError, message: str) -> None:
        self.write(commands.new_send_error(producer_id, sequence_id, error, message))

    def close_producer(self, producer: Producer) -> None:
        """Broker-initiated CLOSE_PRODUCER (fencing, backlog quota)."""
        self._producer_commands.close_producer(producer)

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        """PRODUCER_SUCCESS for a waiting producer that now holds the topic."""
        self._producer_commands.producer_ready(producer, topic_epoch)

    def refuse_producer(self, producer: Producer, error: BrokerError) -> None:
        """Fail a waiting producer's creation with ``error`` (fenced out while it waited)."""
        self._producer_commands.refuse_producer(producer, error)

    # ------------------------------------------------------------------ ConsumerConnection
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
        parts = commands.new_message(
            consumer_id,
            position.ledger_id,
            position.entry_id,
            partition,
            headers_and_payload,
            redelivery_count=redelivery_count,
            ack_set=ack_set,
        )
        self._out += parts
        self._queued(sum(map(len, parts)))

    def send_close_consumer(self, consumer_id: int) -> None:
        """Broker-initiated CLOSE_CONSUMER (seek, unload): the client re-subscribes by itself."""
        self._consumer_commands.send_close_consumer(consumer_id)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        """Failover notification; the client only passes it to a consumer event listener."""
        self.write(commands.new_active_consumer_change(consumer_id, is_active))

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        """REACHED_END_OF_TOPIC: the topic is terminated and the consumer's subscription has no backlog."""
        self.write(commands.new_reached_end_of_topic(consumer_id))


def _sub_message(frame: Frame) -> Any:
    """The command's sub-message (the one field set besides ``type``), or None."""
    for descriptor, value in frame.command.ListFields():
        if descriptor.name != "type":
            return value
    return None
