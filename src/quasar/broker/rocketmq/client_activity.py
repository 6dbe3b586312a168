"""Heartbeat, Telemetry and NotifyClientTermination (reference rocketmq-grpc.md §4; proxy ``ClientActivity``,
``GrpcClientSettingsManager``).

Telemetry: each ``settings`` command the client writes is validated (a client type; a producer publishes, a
consumer names a valid group) and answered at once with ``TelemetryCommand{status OK, settings}``: the
client's settings merged with the server's — producers get ``backoff_policy`` (3 attempts, exponential 10 ms
-> 1 s, x2), ``publishing.max_body_size`` (4 MiB) and ``validate_message_type``; consumers get
``subscription{receive_batch_size 32, long_polling_timeout 20 s, fifo}`` and ``backoff_policy`` (17 attempts,
RocketMQ's customized delays 1 s 5 s 10 s 30 s 1 m ... 2 h); everyone ``metric.on = false``. The py client
applies a reply only with status OK and settings, so a refused command is answered with its status and no
settings. The stream is the client's session in the registry: when it ends, the client is dropped with its
producers. NotifyClientTermination drops it at once. Heartbeat needs the client's settings first
(UNRECOGNIZED_CLIENT_TYPE otherwise, as the proxy; the client only logs it).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from quasar.broker.rocketmq.clients import MAX_STREAMS_PER_CLIENT, TelemetrySession
from quasar.broker.rocketmq.context import CallMetadata, RocketMQContext, call_metadata
from quasar.broker.rocketmq.status import Code, RocketMQError, new_status, ok_status
from quasar.broker.rocketmq.stubs import definition, service
from quasar.broker.rocketmq.validation import check_consumer_group

__all__ = ["CONSUMER_BACKOFF_S", "ClientActivity"]

log = logging.getLogger(__name__)

CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
"""RocketMQ's default customized retry delays (``CustomizedRetryPolicy``), in seconds."""

_PRODUCER = definition.ClientType.PRODUCER
_CONSUMERS = frozenset(
    {
        definition.ClientType.PUSH_CONSUMER,
        definition.ClientType.SIMPLE_CONSUMER,
        definition.ClientType.PULL_CONSUMER,
    }
)


class ClientActivity:
    """Heartbeat, Telemetry, NotifyClientTermination."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        """OK for a client whose settings arrived; UNRECOGNIZED_CLIENT_TYPE before; ILLEGAL_CONSUMER_GROUP
        for a bad group."""
        metadata = call_metadata(context)
        if request.HasField("group") and request.group.name:
            check_consumer_group(request.group.name)
        record = self.context.clients.get(metadata.client_id)
        if record is None or record.settings is None:
            raise RocketMQError(
                Code.UNRECOGNIZED_CLIENT_TYPE, f"no settings received from client {metadata.client_id} yet"
            )
        return service.HeartbeatResponse()

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        """Drop the client and what the broker made for it (its producers). UNRECOGNIZED_CLIENT_TYPE when it
        never sent settings (cleaned up all the same)."""
        metadata = call_metadata(context)
        record = self.context.clients.remove(metadata.client_id, "terminated")
        if record is None or record.settings is None:
            raise RocketMQError(
                Code.UNRECOGNIZED_CLIENT_TYPE, f"no settings received from client {metadata.client_id}"
            )
        return service.NotifyClientTerminationResponse()

    async def Telemetry(self, request_iterator: Any, context: Any) -> None:
        """The client's session stream (module docstring)."""
        metadata = call_metadata(context)
        clients = self.context.clients
        record = clients.touch(metadata.client_id)
        session = TelemetrySession(context)
        record.streams.append(session)
        record.telemetry = session  # the newest stream carries the broker's commands
        while len(record.streams) > MAX_STREAMS_PER_CLIENT:
            record.streams.pop(0).end()
        settings_timeout_s = clients.idle_timeout_s
        try:
            while True:
                try:  # until its settings came, a stream is held open at most the channel expiry
                    command = await session.receive(
                        request_iterator, None if record.settings is not None else settings_timeout_s
                    )
                except TimeoutError:
                    context.set_code(grpc.StatusCode.FAILED_PRECONDITION)
                    context.set_details(
                        f"no client settings within {settings_timeout_s:g} s of opening Telemetry"
                    )
                    return
                if command is None or session.closed:
                    return  # the client ended it, or the broker did (client dropped, too many streams)
                record = clients.touch(metadata.client_id)
                await self._command(command, record, session, metadata, context)
        finally:
            session.end()
            self._stream_closed(metadata.client_id, session)

    def _stream_closed(self, client_id: str, session: TelemetrySession) -> None:
        """Forget ``session``; the client goes (with its producers) when it was its last open stream."""
        clients = self.context.clients
        current = clients.get(client_id)
        if current is None:
            return
        if session in current.streams:
            current.streams.remove(session)
        if current.telemetry is session:
            current.telemetry = current.streams[-1] if current.streams else None
            if current.telemetry is None:
                clients.remove(client_id, "telemetry stream closed")

    async def _command(
        self, command: Any, record: Any, session: TelemetrySession, metadata: CallMetadata, context: Any
    ) -> None:
        if command.WhichOneof("command") != "settings":
            return  # thread stack traces, verify results: nothing asked them
        try:
            reply = self._settings_reply(command.settings, metadata)
        except RocketMQError as exc:
            await session.send(service.TelemetryCommand(status=new_status(exc.code, exc.message)))
            return
        record.client_type = command.settings.client_type
        record.settings = reply
        if command.settings.HasField("subscription"):
            record.group = command.settings.subscription.group.name
            await self._register_group(command.settings.subscription, metadata, context)
        await session.send(service.TelemetryCommand(status=ok_status(), settings=reply))

    def _settings_reply(self, settings: Any, metadata: CallMetadata) -> Any:
        """The client's settings merged with the server's. Raises RocketMQError UNRECOGNIZED_CLIENT_TYPE
        (no or an unknown client type), BAD_REQUEST (a producer without publishing, a consumer without
        subscription), ILLEGAL_CONSUMER_GROUP."""
        ours = self.context.settings
        reply = definition.Settings()
        reply.CopyFrom(settings)
        client_type = settings.client_type
        if client_type == _PRODUCER:
            if not settings.HasField("publishing"):
                raise RocketMQError(Code.BAD_REQUEST, "producer settings without publishing")
            reply.publishing.max_body_size = ours.max_body_size
            reply.publishing.validate_message_type = True
            policy = reply.backoff_policy
            policy.Clear()
            policy.max_attempts = ours.producer_max_attempts
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
        elif client_type in _CONSUMERS:
            if not settings.HasField("subscription"):
                raise RocketMQError(Code.BAD_REQUEST, "consumer settings without subscription")
            group = settings.subscription.group.name
            check_consumer_group(group)
            subscription = reply.subscription
            subscription.receive_batch_size = ours.receive_batch_size
            subscription.long_polling_timeout.FromSeconds(ours.long_polling_timeout_s)
            subscription.fifo = any(
                self._is_fifo(entry.topic, group, metadata) for entry in settings.subscription.subscriptions
            )
            policy = reply.backoff_policy
            policy.Clear()
            policy.max_attempts = self._max_attempts(settings.subscription, metadata)
            for seconds in CONSUMER_BACKOFF_S:
                policy.customized_backoff.next.add().FromSeconds(seconds)
        else:
            raise RocketMQError(Code.UNRECOGNIZED_CLIENT_TYPE, f"unrecognized client type {client_type}")
        if not reply.HasField("request_timeout"):
            reply.request_timeout.FromSeconds(ours.request_timeout_s)
        reply.metric.Clear()
        reply.metric.on = False
        return reply

    def _is_fifo(self, resource: Any, group: str, metadata: CallMetadata) -> bool:
        try:
            topic = self.context.topic_name(resource, metadata)
        except RocketMQError:
            return False
        return self.context.consumer_groups.is_fifo_group(topic, group)

    def _max_attempts(self, subscription: Any, metadata: CallMetadata) -> int:
        """The group's deliveries before its dead-letter topic (its policy's ``retryMaxTimes`` + 1, read in
        the namespace of its first valid topic; RocketMQ's 17 without one)."""
        groups = self.context.consumer_groups
        for entry in subscription.subscriptions:
            try:
                topic = self.context.topic_name(entry.topic, metadata)
            except RocketMQError:
                continue
            return groups.max_delivery_attempts(topic, subscription.group.name)
        return self.context.settings.consumer_max_attempts

    async def _register_group(self, subscription: Any, metadata: CallMetadata, context: Any) -> None:
        """Create the group's subscriptions on every declared topic now (``ConsumerGroups.register``), so a
        message sent after the consumer started is not skipped by a first receive that comes later. A topic
        that cannot be registered is logged, not fatal: its receives answer the reason."""
        role = self.context.role(context)
        for entry in subscription.subscriptions:
            try:
                topic = self.context.topic_name(entry.topic, metadata)
                await self.context.consumer_groups.register(subscription.group.name, topic, role)
            except RocketMQError as exc:
                log.info(
                    "consumer group %s of client %s not registered on %s: %s",
                    subscription.group.name,
                    metadata.client_id,
                    entry.topic.name,
                    exc.message,
                )
