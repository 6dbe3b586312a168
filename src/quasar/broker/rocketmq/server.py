"""The RocketMQ gRPC listener: a ``grpc.aio`` server on the broker's event loop serving
``apache.rocketmq.v2.MessagingService`` through one generic servicer.

:class:`Servicer` builds one gRPC method handler per RPC of the service descriptor (``stubs.SERVICE``) and
delegates each call to the handler group that has a method of the RPC's name (``context.py`` describes the
groups). Before a handler runs, every call is checked the proxy's way: ``x-mq-client-id`` is required
(CLIENT_ID_REQUIRED), and with authentication enabled on the broker the caller must authenticate
(``auth.py``: a token as access key, or a TLS client certificate; else UNAUTHORIZED). A handler's
``RocketMQError`` becomes the response's ``Status``; any other exception is logged and answered
INTERNAL_SERVER_ERROR; bytes that do not decode as the RPC's request answer BAD_REQUEST (a Telemetry stream
gets that status written and ends); an RPC no group implements answers NOT_IMPLEMENTED (50100) with a message — always a
Status in a normal response, never a bare gRPC error (the py client needs one).

Handler shapes by RPC kind: unary (``async def QueryRoute(self, request, context) -> response``), server
streaming (ReceiveMessage, PullMessage: an async generator yielding responses), bidirectional (Telemetry: a
coroutine ``(request_iterator, context)`` that writes with ``context.write``, so the broker can push commands
at any time).

:class:`RocketMQListener` owns the gRPC server and the client registry; ``BrokerApp`` starts and stops it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc

from quasar.broker.rocketmq.client_activity import ClientActivity
from quasar.broker.rocketmq.clients import ClientRegistry
from quasar.broker.rocketmq.consume import ConsumeActivity
from quasar.broker.rocketmq.context import RocketMQContext, RocketMQSettings, call_metadata
from quasar.broker.rocketmq.pull import PullActivity
from quasar.broker.rocketmq.route import RouteActivity
from quasar.broker.rocketmq.send import SendActivity
from quasar.broker.rocketmq.status import Code, RocketMQError, new_status, ok_status
from quasar.broker.rocketmq.stubs import SERVICE, SERVICE_NAME, service
from quasar.broker.rocketmq.tls import server_credentials
from quasar.broker.rocketmq.transaction import TransactionActivity, TransactionService

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = ["HANDLER_GROUPS", "RocketMQListener", "Servicer"]

log = logging.getLogger(__name__)

HANDLER_GROUPS: tuple[Callable[[RocketMQContext], object], ...] = (
    RouteActivity,
    ClientActivity,
    SendActivity,
    ConsumeActivity,  # ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue
    PullActivity,  # QueryOffset, PullMessage, GetOffset, UpdateOffset
    TransactionActivity,  # EndTransaction
    # rmqconsume and rmqpull: one line each for their handler group
)
"""The handler groups of the servicer, in lookup order (the first with a method of an RPC's name serves it)."""

MAX_CONCURRENT_RPCS = 10_000
"""Calls in progress at most (long polls included); gRPC answers RESOURCE_EXHAUSTED past it."""


def _response_class(method: Any) -> Any:
    return getattr(service, method.output_type.name)


class MalformedRequest:
    """What a request's bytes decode to when they are not a valid message of the RPC's type: the handler
    answers it BAD_REQUEST with ``reason`` (gRPC would answer UNKNOWN and log a traceback per call)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(request_class: Any) -> Callable[[bytes], Any]:
    parse = request_class.FromString
    name = request_class.DESCRIPTOR.name

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and its kin: bad bytes from outside
            return MalformedRequest(f"malformed {name}: {exc}")

    return deserialize


def _check_well_formed(request: Any) -> None:
    if request.__class__ is MalformedRequest:
        raise RocketMQError(Code.BAD_REQUEST, request.reason)


async def _well_formed(requests: Any) -> AsyncIterator[Any]:
    """A stream's requests; RocketMQError BAD_REQUEST at the first malformed one."""
    async for request in requests:
        _check_well_formed(request)
        yield request


class Servicer:
    """Dispatches every ``MessagingService`` RPC to its handler group (module docstring)."""

    def __init__(
        self, context: RocketMQContext, groups: tuple[Callable[[RocketMQContext], object], ...]
    ) -> None:
        self.context = context
        self.groups = [group(context) for group in groups]

    async def close(self) -> None:
        """Close every handler group that owns tasks or timers (its ``close()``, plain or async); called when
        the listener stops."""
        for group in self.groups:
            close = getattr(group, "close", None)
            if close is None:
                continue
            try:
                result = close()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("closing the RocketMQ handler group %s failed", type(group).__name__)

    def _handler(self, name: str) -> Any:
        for group in self.groups:
            handler = getattr(group, name, None)
            if handler is not None:
                return handler
        return None

    def _admit(self, context: Any) -> None:
        """The checks of every call: a client id, authentication (``auth.py``); then the client's registry
        record is touched."""
        metadata = call_metadata(context)
        self.context.role(context)
        self.context.clients.touch(metadata.client_id)

    def generic_handler(self) -> grpc.GenericRpcHandler:
        """One gRPC method handler per RPC of the service."""
        handlers = {}
        for method in SERVICE.methods:
            request_class = getattr(service, method.input_type.name)
            response_class = _response_class(method)
            handler = self._handler(method.name)
            kwargs = {
                "request_deserializer": _tolerant(request_class),
                "response_serializer": response_class.SerializeToString,
            }
            if method.client_streaming:
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                    self._bidi(method.name, handler, response_class), **kwargs
                )
            elif method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._streaming(method.name, handler, response_class), **kwargs
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(method.name, handler, response_class), **kwargs
                )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _unary(self, name: str, handler: Any, response_class: Any) -> Any:
        async def call(request: Any, context: Any) -> Any:
            try:
                _check_well_formed(request)
                self._admit(context)
                if handler is None:
                    raise RocketMQError(Code.NOT_IMPLEMENTED, f"{name} is not implemented by this broker yet")
                response = await handler(request, context)
            except RocketMQError as exc:
                return response_class(status=new_status(exc.code, exc.message))
            except Exception:
                log.exception("RocketMQ %s failed", name)
                return response_class(status=new_status(Code.INTERNAL_SERVER_ERROR, f"{name} failed"))
            if not response.HasField("status"):
                response.status.CopyFrom(ok_status())
            return response

        return call

    def _streaming(self, name: str, handler: Any, response_class: Any) -> Any:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                _check_well_formed(request)
                self._admit(context)
                if handler is None:
                    raise RocketMQError(Code.NOT_IMPLEMENTED, f"{name} is not implemented by this broker yet")
                async for response in handler(request, context):
                    yield response
            except RocketMQError as exc:
                yield response_class(status=new_status(exc.code, exc.message))
            except Exception:
                log.exception("RocketMQ %s failed", name)
                yield response_class(status=new_status(Code.INTERNAL_SERVER_ERROR, f"{name} failed"))

        return call

    def _bidi(self, name: str, handler: Any, response_class: Any) -> Any:
        async def call(request_iterator: Any, context: Any) -> None:
            try:
                self._admit(context)
                if handler is None:
                    raise RocketMQError(Code.NOT_IMPLEMENTED, f"{name} is not implemented by this broker yet")
            except RocketMQError as exc:
                await context.write(response_class(status=new_status(exc.code, exc.message)))
                return
            try:
                await handler(_well_formed(request_iterator), context)
            except RocketMQError as exc:
                await context.write(response_class(status=new_status(exc.code, exc.message)))
            except Exception:
                log.exception("RocketMQ %s failed", name)

        return call


class RocketMQListener:
    """The RocketMQ endpoint of one broker: :meth:`bind` binds ``host:port`` (0 = a free port; ``port`` holds
    the bound one), :meth:`start` serves (binding first if needed), :meth:`stop` ends the calls in progress
    (1 s grace) and drops every client. Binding raises OSError when the port cannot be bound."""

    def __init__(self, service: BrokerService, settings: RocketMQSettings, host: str, port: int) -> None:
        self.host = host
        self.requested_port = port
        self.context = RocketMQContext(
            service,
            settings,
            ClientRegistry(idle_timeout_s=settings.client_idle_timeout_s, max_clients=settings.max_clients),
        )
        self._server: grpc.aio.Server | None = None
        self._serving = False
        self._servicer: Servicer | None = None
        self.transactions = TransactionService(self.context)
        self.context.transactions = self.transactions

    @property
    def port(self) -> int:
        return self.context.port

    @property
    def address(self) -> str:
        """``host:port`` of this endpoint (the broker's advertised host)."""
        return f"{self.context.settings.host_name}:{self.port}"

    @property
    def tls_address(self) -> str:
        """``host:port`` of the TLS endpoint; "" without one."""
        port = self.context.tls_port
        return f"{self.context.settings.host_name}:{port}" if port else ""

    def bind(self) -> None:
        """Create the gRPC server and bind its port (nothing is served before :meth:`start`)."""
        if self._server is not None:
            return
        settings = self.context.settings
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_body_size + 2 * 1024 * 1024),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
        )
        self._servicer = Servicer(self.context, HANDLER_GROUPS)
        server.add_generic_rpc_handlers((self._servicer.generic_handler(),))
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            bound = server.add_insecure_port(f"{host}:{self.requested_port}")
        except RuntimeError as exc:  # grpc: "Failed to bind to address"
            raise OSError(
                f"cannot bind the RocketMQ gRPC port {self.host}:{self.requested_port}: {exc}"
            ) from None
        if bound == 0:
            raise OSError(f"cannot bind the RocketMQ gRPC port {self.host}:{self.requested_port}")
        self.context.port = bound
        if settings.tls is not None and settings.tls_port is not None:
            tls_address = f"{host}:{settings.tls_port}"
            try:
                tls_bound = server.add_secure_port(tls_address, server_credentials(settings.tls))
            except RuntimeError as exc:
                raise OSError(f"cannot bind the RocketMQ gRPC TLS port {tls_address}: {exc}") from None
            if tls_bound == 0:
                raise OSError(f"cannot bind the RocketMQ gRPC TLS port {tls_address}")
            self.context.tls_port = tls_bound
        self._server = server

    async def start(self) -> None:
        self.bind()
        assert self._server is not None
        if self._serving:
            return
        await self._server.start()
        self._serving = True
        self.context.clients.start()
        self.transactions.start()
        log.info(
            "RocketMQ gRPC endpoint listening on %s:%d%s",
            self.host,
            self.port,
            f" (TLS on port {self.context.tls_port})" if self.context.tls_port else "",
        )

    def stats(self) -> dict[str, int]:
        """What the endpoint holds now (``GET /admin/v2/broker-stats/rocketmq``, docs/rocketmq-limits.md):
        ``clients`` (registry records), ``telemetryStreams`` (open ones), ``producers`` (broker-side producers
        made for clients), ``receivesWaiting`` / ``pullsWaiting`` (long polls waiting)."""
        records = self.context.clients.records()
        groups = self._servicer.groups if self._servicer is not None else []
        receives = sum(group.long_polls_waiting for group in groups if isinstance(group, ConsumeActivity))
        pulls = sum(group.engine.holds.waiting for group in groups if isinstance(group, PullActivity))
        return {
            "clients": len(records),
            "telemetryStreams": sum(len(r.streams) for r in records),
            "producers": sum(len(r.resources) for r in records),
            "receivesWaiting": receives,
            "pullsWaiting": pulls,
        }

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(1.0)
        self._serving = False
        await self.transactions.stop()
        servicer, self._servicer = self._servicer, None
        if servicer is not None:
            await servicer.close()
        await self.context.clients.stop()
