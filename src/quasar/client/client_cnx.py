"""ClientCnx: one TCP connection to a broker, driving the sans-IO :class:`~quasar.protocol.FrameDecoder`.

Follows the C++ ``ClientConnection`` / Java ``ClientCnx`` (reference/pulsar-protocol.md §6.1-6.3, §8, §9):

* CONNECT is the first frame; the connection is usable once CONNECTED arrives (``connection_timeout_ms``),
  whose ``max_message_size`` (bytes) and ``protocol_version`` are kept.
* Requests are matched to futures by ``request_id`` (one dict, one client-wide id counter, so ids never
  collide); each has a timer of ``operation_timeout_seconds`` -> :class:`OperationTimeoutError`. Failures come
  back as :class:`BrokerResponseError` with the ServerError code (ERROR, a failed LOOKUP/PARTITIONED_METADATA
  response, ...).
* Producers and consumers register by id (separate maps: ids overlap) and get SEND_RECEIPT / SEND_ERROR /
  MESSAGE / CLOSE_* routed to them.
* Keep-alive: a PING every ``keep_alive_interval_seconds``; if the previous PING is still unanswered (no frame
  at all received since), the connection is closed. Broker PINGs are answered with PONG at once.
* When the connection ends for any reason every pending request fails with :class:`ConnectionClosedError`
  and every registered producer/consumer is told (it then reconnects); the keep-alive task is owned and
  cancelled.
* Frames are read by the compiled fast path (:func:`quasar.client.codec.read_frames`: SEND_RECEIPT and MESSAGE,
  the commands that arrive once per message, decoded without protobuf command objects) and by the sans-IO
  :class:`~quasar.protocol.FrameDecoder` for every other frame and any the fast path refuses (the decoder's
  protocol errors close the connection, as before).
* Frames are written once per event-loop turn: :meth:`ClientCnx.write` queues a frame and the first one of a
  turn schedules one ``transport.writelines`` of everything queued (``call_soon``), so a burst of sends or acks
  costs one system call instead of one per frame (the C++ client's write queue does the same); 32 KiB queued
  are written at once (a long burst keeps the broker busy), a FLOW goes out at once (:meth:`ClientCnx.write_now`);
  order is kept, and :meth:`ClientCnx.close` writes what is queued before closing.
* TLS and authentication (:mod:`quasar.client.tls`, :mod:`quasar.client.auth`): with an ``ssl_context`` the
  connection is TLS from the first byte (the host name is checked when the context says so); CONNECT carries the
  authentication's method name and data (``"none"`` without one) and ``supports_auth_refresh``; an
  AUTH_CHALLENGE is answered with AUTH_RESPONSE carrying freshly asked credentials (C++
  ``ClientConnection::handleAuthChallenge``). An ERROR before CONNECTED (the broker refused the credentials)
  fails the handshake with that error (:class:`~quasar.client.errors.AuthenticationError`: not retried).
* Any event loop works: the transport is checked for what the connection uses (:class:`StreamTransport`), not
  for its class, because uvloop's ``TCPTransport`` has the methods of ``asyncio.Transport`` without subclassing
  it. A handshake that fails (refused, reset, a transport that cannot write, a bad first frame) is reported with
  its cause at once, never as a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

from quasar.protocol import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MAX_PROTOCOL_VERSION,
    MESSAGE_SIZE_FRAME_PADDING,
    NEED_DATA,
    CommandType,
    Frame,
    FrameDecoder,
    ProtocolError,
    commands,
)
from quasar.protocol.ack_set import to_int64

from ._tasks import TaskOwner
from .auth import Authentication
from .cnx_ports import ConsumerHandler, ProducerHandler, StreamTransport
from .codec import read_frames as _read_frames
from .errors import (
    ConnectError,
    ConnectionClosedError,
    OperationTimeoutError,
    response_error,
)

__all__ = ["CLIENT_VERSION", "ClientCnx", "ConsumerHandler", "ProducerHandler", "StreamTransport"]

log = logging.getLogger("quasar.client")

#: ``client_version`` sent in CONNECT.
CLIENT_VERSION = "Quasar-Python-Client"

#: Queued bytes that are written at once instead of at the next event-loop turn.
_WRITE_NOW_BYTES = 32 * 1024
_RECEIPT = CommandType.SEND_RECEIPT.value
_MESSAGE = CommandType.MESSAGE.value
_LOOKUP_FAILED = 2
_PARTITIONS_FAILED = 1


class ClientCnx(asyncio.Protocol):
    """One connection (an ``asyncio.Protocol``; create it with :meth:`connect`).

    Attributes:
        address: ``(host, port)`` of the broker.
        max_message_size: bytes, from CONNECTED (5 MiB if the broker did not say).
        protocol_version: the broker's protocol version from CONNECTED.
    """

    def __init__(
        self,
        address: tuple[str, int],
        *,
        next_request_id: Callable[[], int],
        operation_timeout: float,
        keep_alive_interval: float,
        authentication: Authentication | None = None,
    ) -> None:
        self.address = address
        self.authentication = authentication
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.protocol_version = 0
        self.next_request_id = next_request_id
        self._operation_timeout = operation_timeout
        self._keep_alive_interval = keep_alive_interval
        self._decoder = FrameDecoder()
        self._transport: StreamTransport | None = None
        self._loop = asyncio.get_running_loop()
        self._connected: asyncio.Future[None] = self._loop.create_future()
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._ping_pending = False
        self._out: list[bytes] = []  # frames queued for the next writelines
        self._out_bytes = 0
        self._in = bytearray()  # an incomplete frame received so far
        self._tasks = TaskOwner(f"cnx {address[0]}:{address[1]}")
        self._close_reason: BaseException | None = None
        self._handlers: dict[int, Callable[[Frame], None]] = {
            CommandType.CONNECTED: self._handle_connected,
            CommandType.SEND_RECEIPT: self._handle_send_receipt,
            CommandType.SEND_ERROR: self._handle_send_error,
            CommandType.MESSAGE: self._handle_message,
            CommandType.PING: self._handle_ping,
            CommandType.PONG: _ignore,
            CommandType.SUCCESS: self._handle_response,
            CommandType.ERROR: self._handle_error,
            CommandType.PRODUCER_SUCCESS: self._handle_producer_success,
            CommandType.LOOKUP_RESPONSE: self._handle_lookup_response,
            CommandType.PARTITIONED_METADATA_RESPONSE: self._handle_partitions_response,
            CommandType.GET_LAST_MESSAGE_ID_RESPONSE: self._handle_response,
            CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE: self._handle_response,
            CommandType.GET_SCHEMA_RESPONSE: self._handle_schema_response,
            CommandType.CONSUMER_STATS_RESPONSE: self._handle_response,
            CommandType.ACK_RESPONSE: self._handle_ack_response,
            CommandType.CLOSE_PRODUCER: self._handle_close_producer,
            CommandType.CLOSE_CONSUMER: self._handle_close_consumer,
            CommandType.ACTIVE_CONSUMER_CHANGE: self._handle_active_consumer_change,
            CommandType.REACHED_END_OF_TOPIC: _ignore,
            CommandType.AUTH_CHALLENGE: self._handle_auth_challenge,
        }

    # ------------------------------------------------------------------------------------------ life --

    @classmethod
    async def connect(
        cls,
        address: tuple[str, int],
        *,
        next_request_id: Callable[[], int],
        operation_timeout: float,
        keep_alive_interval: float,
        connection_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        authentication: Authentication | None = None,
    ) -> ClientCnx:
        """Open a TCP connection (TLS with ``ssl_context``), send CONNECT and wait for CONNECTED.

        Args:
            address: ``(host, port)``.
            connection_timeout: seconds for TCP connect, TLS handshake and CONNECT handshake.
            ssl_context: a client TLS context (:func:`quasar.client.tls.client_ssl_context`); None = plain TCP.
            authentication: the credentials CONNECT carries (None: ``auth_method_name="none"``).

        Raises:
            AuthenticationError / AuthorizationError / BrokerResponseError: the broker answered CONNECT with
                ERROR (e.g. refused credentials); not retryable.
            ConnectError: refused, unreachable, the transport unusable, the connection closed or the broker's
                first frame not CONNECTED during the handshake (each with its cause), or no CONNECTED within
                ``connection_timeout`` (the message says whether TCP connect or the handshake timed out).
        """
        loop = asyncio.get_running_loop()

        def factory() -> ClientCnx:
            return cls(
                address,
                next_request_id=next_request_id,
                operation_timeout=operation_timeout,
                keep_alive_interval=keep_alive_interval,
                authentication=authentication,
            )

        where = f"{address[0]}:{address[1]}"
        cnx: ClientCnx | None = None
        try:
            async with asyncio.timeout(connection_timeout):
                _, cnx = await loop.create_connection(
                    factory,
                    address[0],
                    address[1],
                    ssl=ssl_context,
                    server_hostname=address[0] if ssl_context is not None else None,
                )
                await cnx.wait_connected()
        except BaseException as exc:
            if cnx is not None:
                cnx.close()  # a handshake that timed out or failed must not leave its socket open
            if isinstance(exc, TimeoutError):
                step = "TCP connect" if cnx is None else "the CONNECT -> CONNECTED handshake"
                raise ConnectError(
                    f"connecting to {where} timed out after {connection_timeout:g} s ({step})"
                ) from None
            if isinstance(exc, OSError):
                raise ConnectError(f"cannot connect to {where}: {exc}") from exc
            if isinstance(exc, ConnectionClosedError):
                raise ConnectError(f"handshake with {where} failed: {exc}") from exc
            raise
        return cnx

    async def wait_connected(self) -> None:
        """Wait for CONNECTED.

        Raises:
            ConnectionClosedError: the connection ended before CONNECTED arrived.
        """
        await asyncio.shield(self._connected)

    @property
    def is_closed(self) -> bool:
        """True once the connection is closed or lost."""
        return self._closed.done()

    async def wait_closed(self) -> None:
        """Wait until the connection is gone."""
        await asyncio.shield(self._closed)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Send CONNECT. A transport without the :class:`StreamTransport` methods, or a failing first write,
        fails the handshake with that cause and closes the transport (an exception raised here would only be
        logged by the loop, and the caller would wait for CONNECTED until it timed out)."""
        if not isinstance(transport, StreamTransport):
            kind = type(transport)
            self._fail_handshake(
                transport,
                ConnectError(
                    f"cannot connect to {self.address[0]}:{self.address[1]}: transport "
                    f"{kind.__module__}.{kind.__qualname__} lacks write(), writelines(), is_closing() or close()"
                ),
            )
            return
        self._transport = transport
        try:
            auth = self.authentication
            transport.write(
                commands.new_connect(
                    CLIENT_VERSION,
                    MAX_PROTOCOL_VERSION,
                    auth_method_name=auth.method_name if auth is not None else "none",
                    auth_data=auth.auth_data() if auth is not None else None,
                    supports_auth_refresh=True,
                )
            )
        except Exception as exc:
            log.warning("writing CONNECT to %s:%s failed", *self.address, exc_info=True)
            error = ConnectError(f"cannot connect to {self.address[0]}:{self.address[1]}: CONNECT: {exc!r}")
            error.__cause__ = exc
            self._fail_handshake(transport, error)

    def _fail_handshake(self, transport: asyncio.BaseTransport, error: ConnectError) -> None:
        self._close_reason = error
        if not self._connected.done():
            self._connected.set_exception(error)
            self._connected.exception()  # mark retrieved
        transport.close()

    def data_received(self, data: bytes) -> None:
        """Cut the frames received so far: SEND_RECEIPT and MESSAGE through the compiled fast path
        (:func:`quasar.client.codec.read_frames`), every other frame (and any the fast path refuses) through the
        :class:`FrameDecoder`, in stream order; an incomplete frame waits in ``_in`` for the next call."""
        if self._decoder.errored:
            return
        pending = self._in
        if pending:
            pending += data
            buffer: bytes | bytearray = pending
        else:
            buffer = data
        end = 0
        try:
            events, end = _read_frames(buffer, 0, self._decoder.max_frame_size)
            if events:
                self._ping_pending = False
                self._dispatch(events, buffer)
        except (ProtocolError, ConnectionClosedError) as exc:
            log.warning("closing connection to %s:%s: %s", *self.address, exc)
            self.close(exc)
        finally:
            if pending:
                del pending[:end]
            elif end < len(data):
                self._in = bytearray(data[end:])

    def _dispatch(self, events: list[tuple[Any, ...]], buffer: bytes | bytearray) -> None:
        producers = self._producers
        consumers = self._consumers
        for event in events:
            kind = event[0]
            if kind == _RECEIPT:
                producer = producers.get(event[1])
                if producer is not None:
                    producer.on_receipt(event[2], event[3], event[4])
            elif kind == _MESSAGE:
                consumer = consumers.get(event[1])
                if consumer is not None:
                    consumer.on_message_parts(*event[2:])
            else:
                self._decode(buffer[event[1] : event[2]])

    def _decode(self, frame: bytes | bytearray) -> None:
        """One whole frame (or, when its length prefix is refused, the rest of the stream) through the
        FrameDecoder, which raises its protocol error on anything malformed."""
        decoder = self._decoder
        handlers = self._handlers
        decoder.receive_data(frame)
        while True:
            decoded = decoder.next_frame()
            if decoded is NEED_DATA:
                break
            handler = handlers.get(decoded.type)
            if handler is None:
                raise ConnectionClosedError(
                    f"unexpected command {CommandType(decoded.type).name} from broker"
                )
            handler(decoded)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self._close_reason or exc
        error = ConnectionClosedError(
            f"connection to {self.address[0]}:{self.address[1]} closed" + (f": {reason}" if reason else "")
        )
        if not self._connected.done():
            self._connected.set_exception(error)
            self._connected.exception()  # mark retrieved
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        if not self._closed.done():
            self._closed.set_result(None)
        self._tasks.cancel()
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer.on_connection_closed(self)
        for consumer in consumers.values():
            consumer.on_connection_closed(self)

    def close(self, reason: BaseException | None = None) -> None:
        """Close the connection (pending requests fail with ConnectionClosedError)."""
        if self._close_reason is None:
            self._close_reason = reason
        if self._transport is not None and not self._transport.is_closing():
            self._write_queued()
            self._transport.close()

    # ----------------------------------------------------------------------------------- sending --

    def write(self, data: bytes) -> None:
        """Queue one encoded frame; the frames queued during this event-loop turn go out in one ``writelines``
        at the next turn, in order, or at once when ``_WRITE_NOW_BYTES`` are queued (so a long burst keeps the
        broker busy instead of waiting for the burst to end). Dropped silently if the connection is closing:
        the owner resends."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            out = self._out
            if not out:
                self._loop.call_soon(self._write_queued)
            out.append(data)
            self._out_bytes += len(data)
            if self._out_bytes >= _WRITE_NOW_BYTES:
                self._write_queued()

    def write_now(self, data: bytes) -> None:
        """Write one frame now, after whatever is queued (FLOW: the broker must not wait for the end of this
        event-loop turn to dispatch more)."""
        self.write(data)
        self._write_queued()

    def _write_queued(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        self._out_bytes = 0
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.writelines(out)

    async def request(self, frame: bytes, request_id: int, timeout: float | None = None) -> Any:
        """Send a request frame and wait for the response with the same ``request_id``.

        Returns:
            The response's sub-message (e.g. ``CommandSuccess``, ``CommandLookupTopicResponse``).

        Raises:
            BrokerResponseError: the broker answered with an error (``.code`` = ServerError).
            OperationTimeoutError: no answer within ``timeout`` (default ``operation_timeout_seconds``).
            ConnectionClosedError: the connection is or went down.
        """
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self.address[0]}:{self.address[1]} is closed")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[request_id] = future
        timer = self._loop.call_later(
            self._operation_timeout if timeout is None else timeout, self._expire, request_id
        )
        try:
            self.write(frame)
            return await future
        finally:
            timer.cancel()
            self._pending.pop(request_id, None)

    def _expire(self, request_id: int) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(OperationTimeoutError(f"request {request_id} got no answer in time"))

    def register_producer(self, producer_id: int, producer: ProducerHandler) -> None:
        """Route SEND_RECEIPT / SEND_ERROR / CLOSE_PRODUCER of ``producer_id`` to ``producer``."""
        self._producers[producer_id] = producer

    def remove_producer(self, producer_id: int) -> None:
        """Stop routing to the producer."""
        self._producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, consumer: ConsumerHandler) -> None:
        """Route MESSAGE / CLOSE_CONSUMER / ACTIVE_CONSUMER_CHANGE of ``consumer_id`` to ``consumer``."""
        self._consumers[consumer_id] = consumer

    def remove_consumer(self, consumer_id: int) -> None:
        """Stop routing to the consumer."""
        self._consumers.pop(consumer_id, None)

    # ---------------------------------------------------------------------------------- handlers --

    def _resolve(self, request_id: int, result: Any = None, error: BaseException | None = None) -> None:
        future = self._pending.get(request_id)
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def _handle_connected(self, frame: Frame) -> None:
        body = frame.command.connected
        self.protocol_version = body.protocol_version
        if body.HasField("max_message_size") and body.max_message_size > 0:
            self.max_message_size = body.max_message_size
            self._decoder.max_frame_size = body.max_message_size + MESSAGE_SIZE_FRAME_PADDING
        if not self._connected.done():
            self._connected.set_result(None)
            if self.protocol_version >= 1:
                self._tasks.spawn(self._keep_alive(), name="keep-alive")

    async def _keep_alive(self) -> None:
        while not self.is_closed:
            await asyncio.sleep(self._keep_alive_interval)
            if self._ping_pending:
                log.warning("broker %s:%s did not answer PING; closing", *self.address)
                self.close(ConnectionClosedError("keep-alive PING unanswered"))
                return
            self._ping_pending = True
            self.write(commands.new_ping())

    def _handle_ping(self, frame: Frame) -> None:
        self.write(commands.new_pong())

    def _handle_send_receipt(self, frame: Frame) -> None:
        body = frame.command.send_receipt
        producer = self._producers.get(body.producer_id)
        if producer is not None:
            mid = body.message_id
            producer.on_receipt(body.sequence_id, to_int64(mid.ledgerId), to_int64(mid.entryId))

    def _handle_send_error(self, frame: Frame) -> None:
        producer = self._producers.get(frame.command.send_error.producer_id)
        if producer is not None:
            producer.on_send_error(frame)

    def _handle_message(self, frame: Frame) -> None:
        consumer = self._consumers.get(frame.command.message.consumer_id)
        if consumer is not None:
            consumer.on_message(frame)

    def _handle_response(self, frame: Frame) -> None:
        body: Any = frame.body
        self._resolve(body.request_id, body)

    def _handle_error(self, frame: Frame) -> None:
        body = frame.command.error
        error = response_error(body.error, body.message)
        if (
            not self._connected.done()
        ):  # CONNECT refused (Pulsar answers ERROR and closes): fail the handshake
            log.warning("broker %s:%s refused CONNECT: %s", *self.address, error)
            self._close_reason = error
            self._connected.set_exception(error)
            self._connected.exception()  # mark retrieved
            return
        self._resolve(body.request_id, error=error)

    def _handle_auth_challenge(self, frame: Frame) -> None:
        """AUTH_CHALLENGE: answer with AUTH_RESPONSE carrying the credentials asked for again (a token
        supplier is called again, so a refreshed token goes out). Credentials that cannot be produced close
        the connection (the broker would close it when the old ones expire)."""
        auth = self.authentication
        try:
            if auth is None:
                raise ConnectionClosedError(
                    "the broker sent AUTH_CHALLENGE but the client has no authentication"
                )
            response = commands.new_auth_response(CLIENT_VERSION, auth.method_name, auth.auth_data())
        except Exception as exc:  # noqa: BLE001  # a token supplier may raise anything: logged, connection closed
            log.warning("cannot answer the AUTH_CHALLENGE of %s:%s: %s; closing", *self.address, exc)
            self.close(exc if isinstance(exc, ConnectionClosedError) else ConnectionClosedError(str(exc)))
            return
        self.write_now(response)

    def _handle_producer_success(self, frame: Frame) -> None:
        body = frame.command.producer_success
        if body.HasField("producer_ready") and not body.producer_ready:
            return  # WaitForExclusive: a second PRODUCER_SUCCESS with producer_ready=true follows
        self._resolve(body.request_id, body)

    def _handle_lookup_response(self, frame: Frame) -> None:
        body = frame.command.lookupTopicResponse
        if body.response == _LOOKUP_FAILED or not body.HasField("response"):
            self._resolve(body.request_id, error=response_error(body.error, body.message or "lookup failed"))
        else:
            self._resolve(body.request_id, body)

    def _handle_partitions_response(self, frame: Frame) -> None:
        body = frame.command.partitionMetadataResponse
        if body.response == _PARTITIONS_FAILED or not body.HasField("response"):
            error = response_error(body.error, body.message or "partitioned metadata failed")
            self._resolve(body.request_id, error=error)
        else:
            self._resolve(body.request_id, body)

    def _handle_schema_response(self, frame: Frame) -> None:
        body = frame.command.getSchemaResponse
        if body.HasField("error_code"):
            self._resolve(body.request_id, error=response_error(body.error_code, body.error_message))
        else:
            self._resolve(body.request_id, body)

    def _handle_ack_response(self, frame: Frame) -> None:
        body = frame.command.ackResponse
        if not body.HasField("request_id"):
            return
        if body.HasField("error"):
            self._resolve(body.request_id, error=response_error(body.error, body.message))
        else:
            self._resolve(body.request_id, body)

    def _handle_close_producer(self, frame: Frame) -> None:
        producer = self._producers.pop(frame.command.close_producer.producer_id, None)
        if producer is not None:
            producer.on_connection_closed(self)

    def _handle_close_consumer(self, frame: Frame) -> None:
        consumer = self._consumers.pop(frame.command.close_consumer.consumer_id, None)
        if consumer is not None:
            consumer.on_connection_closed(self)

    def _handle_active_consumer_change(self, frame: Frame) -> None:
        body = frame.command.active_consumer_change
        consumer = self._consumers.get(body.consumer_id)
        if consumer is not None:
            consumer.on_active_consumer_change(body.is_active)


def _ignore(frame: Frame) -> None:
    return None
