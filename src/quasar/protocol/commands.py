"""Command builders, one per command, returning encoded frames (Pulsar ``Commands.java`` role).

This module holds the broker -> client commands and the commands both sides send (CLOSE_*, PING, PONG); the
client -> broker requests live in :mod:`quasar.protocol.requests` and are re-exported here, so
``from quasar.protocol.commands import new_send`` works too.

Every builder sets every ``required`` field of its command (the C++ client drops the connection on a command
it cannot parse) and the optional fields the C++ client tests for presence (``response`` in lookup answers,
reference/pulsar-protocol.md §10). ``ledger_id``/``entry_id``/``request_id`` arguments are signed int64 and go
on the wire as uint64 (-1 -> 2^64-1). Error arguments take a :class:`ServerError` (or its int value).

Returns: ``bytes`` (one whole frame) for simple commands; for MESSAGE a list ``[header, stored span]`` to
pass to ``transport.writelines`` without copying the stored bytes.

Raises: every builder raises :class:`~quasar.protocol.errors.LocalProtocolError` on an out-of-range or
mistyped argument.
"""

from __future__ import annotations

from collections.abc import Iterable

from quasar.native import load_twin

from ._build import builder, fill_id, u64, wire_error
from .enums import AckType, CommandType, ServerError, SubType
from .frame import encode_command
from .proto.PulsarApi_pb2 import (
    BaseCommand,
    CommandLookupTopicResponse,
    CommandPartitionedTopicMetadataResponse,
    CommandPing,
    CommandPong,
    Schema,
)
from .requests import (
    new_ack,
    new_auth_response,
    new_connect,
    new_consumer_stats,
    new_flow,
    new_get_last_message_id,
    new_get_schema,
    new_get_topics_of_namespace,
    new_lookup,
    new_partitioned_metadata,
    new_producer,
    new_redeliver_unacknowledged_messages,
    new_seek,
    new_send,
    new_subscribe,
    new_unsubscribe,
)

_frames = load_twin("quasar.protocol._frames")

__all__ = [
    "AckType",
    "CommandType",
    "ServerError",
    "SubType",
    "new_ack",
    "new_ack_response",
    "new_active_consumer_change",
    "new_auth_challenge",
    "new_auth_response",
    "new_close_consumer",
    "new_close_producer",
    "new_connect",
    "new_connected",
    "new_consumer_stats",
    "new_consumer_stats_error",
    "new_consumer_stats_response",
    "new_error",
    "new_flow",
    "new_get_last_message_id",
    "new_get_last_message_id_response",
    "new_get_or_create_schema_response",
    "new_get_schema",
    "new_get_schema_error",
    "new_get_schema_response",
    "new_get_topics_of_namespace",
    "new_get_topics_of_namespace_response",
    "new_lookup",
    "new_lookup_error",
    "new_lookup_response",
    "new_message",
    "new_partitioned_metadata",
    "new_partitioned_metadata_error",
    "new_partitioned_metadata_response",
    "new_ping",
    "new_pong",
    "new_producer",
    "new_producer_success",
    "new_reached_end_of_topic",
    "new_redeliver_unacknowledged_messages",
    "new_seek",
    "new_send",
    "new_send_error",
    "new_send_receipt",
    "new_subscribe",
    "new_success",
    "new_unsubscribe",
]

_LOOKUP_REDIRECT = CommandLookupTopicResponse.Redirect
_LOOKUP_CONNECT = CommandLookupTopicResponse.Connect
_LOOKUP_FAILED = CommandLookupTopicResponse.Failed
_PARTITIONS_SUCCESS = CommandPartitionedTopicMetadataResponse.Success
_PARTITIONS_FAILED = CommandPartitionedTopicMetadataResponse.Failed

_PING = encode_command(BaseCommand(type=BaseCommand.PING, ping=CommandPing()))
_PONG = encode_command(BaseCommand(type=BaseCommand.PONG, pong=CommandPong()))


# --------------------------------------------------------------------------------- both directions --


def new_ping() -> bytes:
    """PING (empty): ``00000009 00000005 08 12 92 01 00``. Keep-alive, sent by either side every 30 s."""
    return _PING


def new_pong() -> bytes:
    """PONG (empty): ``00000009 00000005 08 13 9a 01 00``. The answer to PING."""
    return _PONG


@builder
def new_close_producer(
    producer_id: int,
    request_id: int,
    *,
    assigned_broker_service_url: str | None = None,
    assigned_broker_service_url_tls: str | None = None,
) -> bytes:
    """CLOSE_PRODUCER. Client -> broker: expects SUCCESS. Broker -> client: the client reconnects
    (LOOKUP, PRODUCER with the same producer_id; straight to an assigned URL); request_id ignored."""
    cmd = BaseCommand(type=BaseCommand.CLOSE_PRODUCER)
    body = cmd.close_producer
    body.producer_id = producer_id
    body.request_id = u64(request_id)
    if assigned_broker_service_url is not None:
        body.assignedBrokerServiceUrl = assigned_broker_service_url
    if assigned_broker_service_url_tls is not None:
        body.assignedBrokerServiceUrlTls = assigned_broker_service_url_tls
    return encode_command(cmd)


@builder
def new_close_consumer(
    consumer_id: int,
    request_id: int,
    *,
    assigned_broker_service_url: str | None = None,
    assigned_broker_service_url_tls: str | None = None,
) -> bytes:
    """CLOSE_CONSUMER. Client -> broker: expects SUCCESS. Broker -> client (e.g. on SEEK): the client
    re-subscribes with the same consumer_id and sends a fresh FLOW; request_id ignored."""
    cmd = BaseCommand(type=BaseCommand.CLOSE_CONSUMER)
    body = cmd.close_consumer
    body.consumer_id = consumer_id
    body.request_id = u64(request_id)
    if assigned_broker_service_url is not None:
        body.assignedBrokerServiceUrl = assigned_broker_service_url
    if assigned_broker_service_url_tls is not None:
        body.assignedBrokerServiceUrlTls = assigned_broker_service_url_tls
    return encode_command(cmd)


# --------------------------------------------------------------------------------- broker -> client --


@builder
def new_connected(server_version: str, protocol_version: int, max_message_size: int | None) -> bytes:
    """CONNECTED, the broker's first frame. ``protocol_version`` should be ``min(client's, 20)``;
    ``max_message_size`` in bytes (None leaves it out; the C++ client then assumes 5 MiB - 10 KiB)."""
    cmd = BaseCommand(type=BaseCommand.CONNECTED)
    body = cmd.connected
    body.server_version = server_version
    body.protocol_version = protocol_version
    if max_message_size is not None:
        body.max_message_size = max_message_size
    return encode_command(cmd)


@builder
def new_auth_challenge(
    server_version: str, auth_method_name: str, auth_data: bytes, protocol_version: int
) -> bytes:
    """AUTH_CHALLENGE: the broker asks for (fresh) credentials of method ``auth_method_name``; ``auth_data``
    ``b"refresh"`` asks a connected client to refresh an expired credential (Pulsar ``AuthData.REFRESH``).
    The client answers AUTH_RESPONSE."""
    cmd = BaseCommand(type=BaseCommand.AUTH_CHALLENGE)
    body = cmd.authChallenge
    body.server_version = server_version
    body.protocol_version = protocol_version
    body.challenge.auth_method_name = auth_method_name
    body.challenge.auth_data = auth_data
    return encode_command(cmd)


@builder
def new_partitioned_metadata_response(request_id: int, partitions: int) -> bytes:
    """PARTITIONED_METADATA_RESPONSE success: ``response=Success`` set explicitly, ``partitions`` (0 = not
    partitioned)."""
    cmd = BaseCommand(type=BaseCommand.PARTITIONED_METADATA_RESPONSE)
    body = cmd.partitionMetadataResponse
    body.request_id = u64(request_id)
    body.partitions = partitions
    body.response = _PARTITIONS_SUCCESS
    return encode_command(cmd)


@builder
def new_partitioned_metadata_error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """PARTITIONED_METADATA_RESPONSE failure: ``response=Failed``, ``error``, ``message``."""
    cmd = BaseCommand(type=BaseCommand.PARTITIONED_METADATA_RESPONSE)
    body = cmd.partitionMetadataResponse
    body.request_id = u64(request_id)
    body.response = _PARTITIONS_FAILED
    body.error = wire_error(error)
    body.message = message
    return encode_command(cmd)


@builder
def new_lookup_response(
    request_id: int,
    broker_service_url: str,
    *,
    authoritative: bool = True,
    broker_service_url_tls: str | None = None,
    proxy_through_service_url: bool = False,
    redirect: bool = False,
) -> bytes:
    """LOOKUP_RESPONSE success: ``response=Connect`` (or ``Redirect`` when ``redirect``: the client looks up
    again at ``brokerServiceUrl``, passing ``authoritative`` on) set explicitly, ``brokerServiceUrl``
    (``pulsar://host:port``), ``authoritative``, ``proxy_through_service_url`` (Java sets both always)."""
    cmd = BaseCommand(type=BaseCommand.LOOKUP_RESPONSE)
    body = cmd.lookupTopicResponse
    body.request_id = u64(request_id)
    body.response = _LOOKUP_REDIRECT if redirect else _LOOKUP_CONNECT
    body.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        body.brokerServiceUrlTls = broker_service_url_tls
    body.authoritative = authoritative
    body.proxy_through_service_url = proxy_through_service_url
    return encode_command(cmd)


@builder
def new_lookup_error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """LOOKUP_RESPONSE failure: ``response=Failed``, ``error``, ``message`` (never ERROR for a LOOKUP)."""
    cmd = BaseCommand(type=BaseCommand.LOOKUP_RESPONSE)
    body = cmd.lookupTopicResponse
    body.request_id = u64(request_id)
    body.response = _LOOKUP_FAILED
    body.error = wire_error(error)
    body.message = message
    return encode_command(cmd)


@builder
def new_producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int = -1,
    schema_version: bytes = b"",
    *,
    topic_epoch: int | None = None,
    producer_ready: bool | None = None,
) -> bytes:
    """PRODUCER_SUCCESS: ``producer_name`` (required; the client adopts it), ``last_sequence_id`` (-1 = none;
    the client continues at +1) and ``schema_version`` (empty = no schema) always set, as Java does."""
    cmd = BaseCommand(type=BaseCommand.PRODUCER_SUCCESS)
    body = cmd.producer_success
    body.request_id = u64(request_id)
    body.producer_name = producer_name
    body.last_sequence_id = last_sequence_id
    body.schema_version = schema_version
    if topic_epoch is not None:
        body.topic_epoch = topic_epoch
    if producer_ready is not None:
        body.producer_ready = producer_ready
    return encode_command(cmd)


@builder
def new_send_receipt(
    producer_id: int,
    sequence_id: int,
    ledger_id: int,
    entry_id: int,
    highest_sequence_id: int | None = None,
) -> bytes:
    """SEND_RECEIPT with ``message_id{ledgerId, entryId}`` (the client fills in partition and batch index).
    Receipts must go out in send order per producer. One per entry on the publish path: encoded by the
    compiled ``_frames_c.encode_send_receipt`` (twin: ``_frames_py``, the protobuf encoding, same bytes)."""
    frame: bytes = _frames.encode_send_receipt(
        producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id
    )
    return frame


@builder
def new_send_error(producer_id: int, sequence_id: int, error: ServerError | int, message: str) -> bytes:
    """SEND_ERROR. Only ``ChecksumError`` fails a single message; any other error makes the C++ client close
    the whole connection."""
    cmd = BaseCommand(type=BaseCommand.SEND_ERROR)
    body = cmd.send_error
    body.producer_id = producer_id
    body.sequence_id = sequence_id
    body.error = wire_error(error)
    body.message = message
    return encode_command(cmd)


@builder
def new_success(request_id: int, *, schema: Schema | None = None) -> bytes:
    """SUCCESS: answers SUBSCRIBE, UNSUBSCRIBE, SEEK, CLOSE_PRODUCER, CLOSE_CONSUMER."""
    cmd = BaseCommand(type=BaseCommand.SUCCESS)
    body = cmd.success
    body.request_id = u64(request_id)
    if schema is not None:
        body.schema.CopyFrom(schema)
    return encode_command(cmd)


@builder
def new_error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """ERROR for PRODUCER, SUBSCRIBE, UNSUBSCRIBE, SEEK, CLOSE_*, GET_LAST_MESSAGE_ID,
    GET_TOPICS_OF_NAMESPACE (``request_id`` -1 for connection-level failures, as Java)."""
    cmd = BaseCommand(type=BaseCommand.ERROR)
    body = cmd.error
    body.request_id = u64(request_id)
    body.error = wire_error(error)
    body.message = message
    return encode_command(cmd)


@builder
def new_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    headers_and_payload: bytes | memoryview,
    *,
    redelivery_count: int = 0,
    ack_set: Iterable[int] | None = None,
    consumer_epoch: int | None = None,
) -> list[bytes | memoryview]:
    """MESSAGE carrying a stored entry (Java ``newMessageCommand``).

    Args:
        consumer_id: the consumer on this connection.
        ledger_id, entry_id: the entry's position.
        partition: partition index of the topic, -1 when not partitioned (always set).
        headers_and_payload: the stored bytes after the producer's SEND command, forwarded verbatim.
        redelivery_count: set only when > 0.
        ack_set: for a partially acknowledged batch: bit i set = item i still to deliver (longs, LSB first).
        consumer_epoch: optional, ignored by the 4.2.0 client.

    Returns:
        ``[header bytes, headers_and_payload]`` for ``transport.writelines`` (no copy of the entry); the header
        comes from the compiled ``_frames_c.encode_message_header`` (twin: the protobuf encoding, same bytes).
    """
    header: bytes = _frames.encode_message_header(
        consumer_id,
        ledger_id,
        entry_id,
        partition,
        redelivery_count,
        ack_set,
        consumer_epoch,
        len(headers_and_payload),
    )
    return [header, headers_and_payload]


@builder
def new_ack_response(
    consumer_id: int, request_id: int, error: ServerError | int | None = None, message: str | None = None
) -> bytes:
    """ACK_RESPONSE, only for an ACK that carried ``request_id``; ``error``/``message`` on failure."""
    cmd = BaseCommand(type=BaseCommand.ACK_RESPONSE)
    body = cmd.ackResponse
    body.consumer_id = consumer_id
    body.request_id = u64(request_id)
    if error is not None:
        body.error = wire_error(error)
    if message is not None:
        body.message = message
    return encode_command(cmd)


@builder
def new_get_last_message_id_response(
    request_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    batch_index: int,
    mark_delete: tuple[int, int] | None = None,
) -> bytes:
    """GET_LAST_MESSAGE_ID_RESPONSE: ``last_message_id{ledgerId, entryId, partition, batch_index}`` (-1/-1 for
    an empty topic; batch_index = num_messages_in_batch - 1 for a batched last entry, else -1) and, when
    given, ``consumer_mark_delete_position{ledgerId, entryId}`` from
    ``mark_delete = (ledger_id, entry_id)``."""
    cmd = BaseCommand(type=BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE)
    body = cmd.getLastMessageIdResponse
    body.request_id = u64(request_id)
    last = body.last_message_id
    fill_id(last, ledger_id, entry_id)
    last.partition = partition
    last.batch_index = batch_index
    if mark_delete is not None:
        fill_id(body.consumer_mark_delete_position, mark_delete[0], mark_delete[1])
    return encode_command(cmd)


@builder
def new_get_topics_of_namespace_response(request_id: int, topics: Iterable[str]) -> bytes:
    """GET_TOPICS_OF_NAMESPACE_RESPONSE with fully qualified topic names."""
    cmd = BaseCommand(type=BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    body = cmd.getTopicsOfNamespaceResponse
    body.request_id = u64(request_id)
    body.topics.extend(topics)
    return encode_command(cmd)


@builder
def new_get_schema_response(request_id: int, schema: Schema, schema_version: bytes) -> bytes:
    """GET_SCHEMA_RESPONSE success with the schema and its version."""
    cmd = BaseCommand(type=BaseCommand.GET_SCHEMA_RESPONSE)
    body = cmd.getSchemaResponse
    body.request_id = u64(request_id)
    body.schema.CopyFrom(schema)
    body.schema_version = schema_version
    return encode_command(cmd)


@builder
def new_get_schema_error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """GET_SCHEMA_RESPONSE failure (``error_code`` presence = failure; never ERROR for GET_SCHEMA)."""
    cmd = BaseCommand(type=BaseCommand.GET_SCHEMA_RESPONSE)
    body = cmd.getSchemaResponse
    body.request_id = u64(request_id)
    body.error_code = wire_error(error)
    body.error_message = message
    return encode_command(cmd)


@builder
def new_get_or_create_schema_response(
    request_id: int,
    schema_version: bytes = b"",
    *,
    error: ServerError | int | None = None,
    message: str = "",
) -> bytes:
    """GET_OR_CREATE_SCHEMA_RESPONSE: the schema version, or (``error`` given) the failure."""
    cmd = BaseCommand(type=BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE)
    body = cmd.getOrCreateSchemaResponse
    body.request_id = u64(request_id)
    if error is not None:
        body.error_code = wire_error(error)
        body.error_message = message
    else:
        body.schema_version = schema_version
    return encode_command(cmd)


@builder
def new_active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    """ACTIVE_CONSUMER_CHANGE (Failover subscriptions; optional, harmless for the C++ client)."""
    cmd = BaseCommand(type=BaseCommand.ACTIVE_CONSUMER_CHANGE)
    body = cmd.active_consumer_change
    body.consumer_id = consumer_id
    body.is_active = is_active
    return encode_command(cmd)


@builder
def new_reached_end_of_topic(consumer_id: int) -> bytes:
    """REACHED_END_OF_TOPIC: the consumer's topic was terminated and everything in it was acknowledged."""
    cmd = BaseCommand(type=BaseCommand.REACHED_END_OF_TOPIC)
    cmd.reachedEndOfTopic.consumer_id = u64(consumer_id)
    return encode_command(cmd)


@builder
def new_consumer_stats_response(
    request_id: int,
    *,
    msg_rate_out: float = 0.0,
    msg_throughput_out: float = 0.0,
    msg_rate_redeliver: float = 0.0,
    consumer_name: str = "",
    available_permits: int = 0,
    unacked_messages: int = 0,
    blocked_consumer_on_unacked_msgs: bool = False,
    address: str = "",
    connected_since: str = "",
    type: str = "",
    msg_rate_expired: float = 0.0,
    msg_backlog: int = 0,
    message_ack_rate: float = 0.0,
) -> bytes:
    """CONSUMER_STATS_RESPONSE success (rates in messages/s, throughput in bytes/s); all fields set."""
    cmd = BaseCommand(type=BaseCommand.CONSUMER_STATS_RESPONSE)
    body = cmd.consumerStatsResponse
    body.request_id = u64(request_id)
    body.msgRateOut = msg_rate_out
    body.msgThroughputOut = msg_throughput_out
    body.msgRateRedeliver = msg_rate_redeliver
    body.consumerName = consumer_name
    body.availablePermits = available_permits
    body.unackedMessages = unacked_messages
    body.blockedConsumerOnUnackedMsgs = blocked_consumer_on_unacked_msgs
    body.address = address
    body.connectedSince = connected_since
    body.type = type
    body.msgRateExpired = msg_rate_expired
    body.msgBacklog = msg_backlog
    body.messageAckRate = message_ack_rate
    return encode_command(cmd)


@builder
def new_consumer_stats_error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """CONSUMER_STATS_RESPONSE failure (``error_code``, ``error_message``)."""
    cmd = BaseCommand(type=BaseCommand.CONSUMER_STATS_RESPONSE)
    body = cmd.consumerStatsResponse
    body.request_id = u64(request_id)
    body.error_code = wire_error(error)
    body.error_message = message
    return encode_command(cmd)
