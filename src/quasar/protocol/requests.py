"""Client -> broker command builders (used by tests now and by Quasar's own client).

Each builder mirrors what the C++ 4.2.0 client sends (``lib/Commands.cc``; field by field in
reference/pulsar-protocol.md §6): every ``required`` field, plus the optional fields that client always
sets. Ids are signed int64 on our side and uint64 on the wire (-1 -> 2^64-1). Enum arguments take our IntEnums
or plain ints, cast to the generated enum's value type: protobuf refuses a value outside the enum when it is
assigned. All return one whole frame as ``bytes``; every builder raises
:class:`~quasar.protocol.errors.LocalProtocolError` on a bad argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import cast

from ._build import builder, fill_id, key_values, set_ids, u64
from .enums import MAX_PROTOCOL_VERSION, AckType, InitialPosition, SubType
from .errors import LocalProtocolError
from .frame import encode_command, encode_payload_command
from .message_id import MessageId
from .proto.PulsarApi_pb2 import (
    BaseCommand,
    CommandAck,
    CommandGetTopicsOfNamespace,
    CommandSubscribe,
    KeySharedMeta,
    ProducerAccessMode,
    Schema,
)

__all__ = [
    "new_ack",
    "new_auth_response",
    "new_connect",
    "new_consumer_stats",
    "new_flow",
    "new_get_last_message_id",
    "new_get_schema",
    "new_get_topics_of_namespace",
    "new_lookup",
    "new_partitioned_metadata",
    "new_producer",
    "new_redeliver_unacknowledged_messages",
    "new_seek",
    "new_send",
    "new_subscribe",
    "new_unsubscribe",
]


@builder
def new_connect(
    client_version: str,
    protocol_version: int = MAX_PROTOCOL_VERSION,
    *,
    auth_method_name: str | None = "none",
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
    supports_auth_refresh: bool = False,
    supports_broker_entry_metadata: bool = False,
) -> bytes:
    """CONNECT, the client's first frame (the C++ client sends ``auth_method_name="none"`` without auth)."""
    cmd = BaseCommand(type=BaseCommand.CONNECT)
    body = cmd.connect
    body.client_version = client_version
    body.protocol_version = protocol_version
    if auth_method_name is not None:
        body.auth_method_name = auth_method_name
    if auth_data is not None:
        body.auth_data = auth_data
    if proxy_to_broker_url is not None:
        body.proxy_to_broker_url = proxy_to_broker_url
    flags = body.feature_flags
    flags.supports_auth_refresh = supports_auth_refresh
    flags.supports_broker_entry_metadata = supports_broker_entry_metadata
    return encode_command(cmd)


@builder
def new_auth_response(
    client_version: str,
    auth_method_name: str,
    auth_data: bytes | None,
    protocol_version: int = MAX_PROTOCOL_VERSION,
) -> bytes:
    """AUTH_RESPONSE, the client's answer to an AUTH_CHALLENGE: ``client_version``,
    ``response{auth_method_name, auth_data}`` (``auth_data`` is always set, empty for a method without command
    data, as C++ ``Commands::newAuthResponse`` and Java's do) and ``protocol_version`` (Java sets it; C++ leaves
    the default)."""
    cmd = BaseCommand(type=BaseCommand.AUTH_RESPONSE)
    body = cmd.authResponse
    body.client_version = client_version
    body.response.auth_method_name = auth_method_name
    body.response.auth_data = auth_data or b""
    body.protocol_version = protocol_version
    return encode_command(cmd)


@builder
def new_partitioned_metadata(topic: str, request_id: int) -> bytes:
    """PARTITIONED_METADATA for a fully qualified topic name."""
    cmd = BaseCommand(type=BaseCommand.PARTITIONED_METADATA)
    body = cmd.partitionMetadata
    body.topic = topic
    body.request_id = u64(request_id)
    return encode_command(cmd)


@builder
def new_lookup(
    topic: str, request_id: int, *, authoritative: bool = False, advertised_listener_name: str | None = ""
) -> bytes:
    """LOOKUP (the C++ client always sends ``authoritative`` and ``advertised_listener_name``, ``""``)."""
    cmd = BaseCommand(type=BaseCommand.LOOKUP)
    body = cmd.lookupTopic
    body.topic = topic
    body.request_id = u64(request_id)
    body.authoritative = authoritative
    if advertised_listener_name is not None:
        body.advertised_listener_name = advertised_listener_name
    return encode_command(cmd)


@builder
def new_producer(
    topic: str,
    producer_id: int,
    request_id: int,
    *,
    producer_name: str | None = None,
    user_provided_producer_name: bool | None = None,
    encrypted: bool = False,
    metadata: Mapping[str, str] | None = None,
    schema: Schema | None = None,
    epoch: int = 0,
    producer_access_mode: int = 0,
    topic_epoch: int | None = None,
    initial_subscription_name: str | None = None,
) -> bytes:
    """PRODUCER. ``user_provided_producer_name`` defaults to "a name was given"; ``producer_access_mode``
    is a ProducerAccessMode value (0 Shared, 1 Exclusive, 2 WaitForExclusive, 3 ExclusiveWithFencing)."""
    cmd = BaseCommand(type=BaseCommand.PRODUCER)
    body = cmd.producer
    body.topic = topic
    body.producer_id = producer_id
    body.request_id = u64(request_id)
    if producer_name is not None:
        body.producer_name = producer_name
    body.encrypted = encrypted
    body.metadata.extend(key_values(metadata))
    if schema is not None:
        body.schema.CopyFrom(schema)
    body.epoch = epoch
    body.user_provided_producer_name = (
        producer_name is not None if user_provided_producer_name is None else user_provided_producer_name
    )
    body.producer_access_mode = cast(ProducerAccessMode.ValueType, producer_access_mode)
    if topic_epoch is not None:
        body.topic_epoch = topic_epoch
    if initial_subscription_name is not None:
        body.initial_subscription_name = initial_subscription_name
    return encode_command(cmd)


@builder
def new_send(
    producer_id: int,
    sequence_id: int,
    headers_and_payload: bytes | memoryview,
    num_messages: int | None = None,
    *,
    highest_sequence_id: int | None = None,
    is_chunk: bool = False,
) -> bytes:
    """SEND followed by ``headers_and_payload`` (from
    :func:`~quasar.protocol.frame.encode_headers_and_payload`). ``num_messages`` only for batches,
    ``is_chunk`` only for chunks, as the C++ client."""
    cmd = BaseCommand(type=BaseCommand.SEND)
    body = cmd.send
    body.producer_id = producer_id
    body.sequence_id = sequence_id
    if num_messages is not None:
        body.num_messages = num_messages
    if highest_sequence_id is not None:
        body.highest_sequence_id = highest_sequence_id
    if is_chunk:
        body.is_chunk = True
    return b"".join(encode_payload_command(cmd, headers_and_payload))


@builder
def new_subscribe(
    topic: str,
    subscription: str,
    sub_type: SubType | int,
    consumer_id: int,
    request_id: int,
    *,
    consumer_name: str = "",
    priority_level: int = 0,
    durable: bool = True,
    start_message_id: MessageId | None = None,
    metadata: Mapping[str, str] | None = None,
    read_compacted: bool = False,
    schema: Schema | None = None,
    initial_position: InitialPosition | int = InitialPosition.Latest,
    replicate_subscription_state: bool = False,
    key_shared_meta: KeySharedMeta | None = None,
    subscription_properties: Mapping[str, str] | None = None,
) -> bytes:
    """SUBSCRIBE. ``initial_position``: 0 Latest, 1 Earliest. ``start_message_id`` (readers, durable=False)
    is sent as ledgerId, entryId and batch_index when not -1, as the C++ client does."""
    cmd = BaseCommand(type=BaseCommand.SUBSCRIBE)
    body = cmd.subscribe
    body.topic = topic
    body.subscription = subscription
    body.subType = cast(CommandSubscribe.SubType.ValueType, sub_type)
    body.consumer_id = consumer_id
    body.request_id = u64(request_id)
    body.consumer_name = consumer_name
    body.priority_level = priority_level
    body.durable = durable
    if start_message_id is not None:
        start = body.start_message_id
        fill_id(start, start_message_id.ledger_id, start_message_id.entry_id)
        if start_message_id.batch_index != -1:
            start.batch_index = start_message_id.batch_index
    body.metadata.extend(key_values(metadata))
    body.read_compacted = read_compacted
    if schema is not None:
        body.schema.CopyFrom(schema)
    body.initialPosition = cast(CommandSubscribe.InitialPosition.ValueType, initial_position)
    body.replicate_subscription_state = replicate_subscription_state
    if key_shared_meta is not None:
        body.keySharedMeta.CopyFrom(key_shared_meta)
    body.subscription_properties.extend(key_values(subscription_properties))
    return encode_command(cmd)


@builder
def new_flow(consumer_id: int, message_permits: int) -> bytes:
    """FLOW: grant ``message_permits`` more messages (additive; a batch costs num_messages_in_batch)."""
    cmd = BaseCommand(type=BaseCommand.FLOW)
    body = cmd.flow
    body.consumer_id = consumer_id
    body.messagePermits = message_permits
    return encode_command(cmd)


@builder
def new_ack(
    consumer_id: int,
    message_ids: Iterable[MessageId | tuple[int, int]],
    ack_type: AckType | int,
    request_id: int | None = None,
    *,
    ack_sets: Sequence[Sequence[int] | None] | None = None,
    validation_error: int | None = None,
) -> bytes:
    """ACK of one or more entries, by ``{ledgerId, entryId}`` only (as the C++ client).

    Args:
        ack_sets: optional, aligned with ``message_ids``: the batch-index ack set of each id (bit i set = item
            i still unacked), or None for a whole entry.
        request_id: set only when an ACK_RESPONSE is wanted.
        validation_error: a ``CommandAck.ValidationError`` value when discarding a corrupt message.
    """
    cmd = BaseCommand(type=BaseCommand.ACK)
    body = cmd.ack
    body.consumer_id = consumer_id
    body.ack_type = cast(CommandAck.AckType.ValueType, ack_type)
    set_ids(body.message_id, message_ids)
    if ack_sets is not None:
        if len(ack_sets) != len(body.message_id):
            raise LocalProtocolError(f"{len(ack_sets)} ack sets for {len(body.message_id)} message ids")
        for message_id, ack_set in zip(body.message_id, ack_sets, strict=True):
            if ack_set is not None:
                message_id.ack_set.extend(ack_set)
    if validation_error is not None:
        body.validation_error = cast(CommandAck.ValidationError.ValueType, validation_error)
    if request_id is not None:
        body.request_id = u64(request_id)
    return encode_command(cmd)


@builder
def new_redeliver_unacknowledged_messages(
    consumer_id: int,
    message_ids: Iterable[MessageId | tuple[int, int]] | None = None,
    *,
    consumer_epoch: int | None = None,
) -> bytes:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: the given entries (Shared/Key_Shared), or all unacked ones when
    ``message_ids`` is None (Exclusive/Failover)."""
    cmd = BaseCommand(type=BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    body = cmd.redeliverUnacknowledgedMessages
    body.consumer_id = consumer_id
    if message_ids is not None:
        set_ids(body.message_ids, message_ids)
    if consumer_epoch is not None:
        body.consumer_epoch = consumer_epoch
    return encode_command(cmd)


@builder
def new_unsubscribe(consumer_id: int, request_id: int) -> bytes:
    """UNSUBSCRIBE: delete the consumer's subscription; expects SUCCESS."""
    cmd = BaseCommand(type=BaseCommand.UNSUBSCRIBE)
    body = cmd.unsubscribe
    body.consumer_id = consumer_id
    body.request_id = u64(request_id)
    return encode_command(cmd)


@builder
def new_seek(
    consumer_id: int,
    request_id: int,
    *,
    message_id: MessageId | tuple[int, int] | None = None,
    message_publish_time: int | None = None,
) -> bytes:
    """SEEK to ``message_id`` (ledgerId/entryId only) or to ``message_publish_time`` (ms) — exactly one.

    Raises:
        LocalProtocolError: neither or both targets given.
    """
    if (message_id is None) == (message_publish_time is None):
        raise LocalProtocolError("new_seek needs exactly one of message_id and message_publish_time")
    cmd = BaseCommand(type=BaseCommand.SEEK)
    body = cmd.seek
    body.consumer_id = consumer_id
    body.request_id = u64(request_id)
    if message_id is not None:
        if isinstance(message_id, MessageId):
            fill_id(body.message_id, message_id.ledger_id, message_id.entry_id)
        else:
            fill_id(body.message_id, message_id[0], message_id[1])
    elif message_publish_time is not None:
        body.message_publish_time = message_publish_time
    return encode_command(cmd)


@builder
def new_get_last_message_id(consumer_id: int, request_id: int) -> bytes:
    """GET_LAST_MESSAGE_ID (needs a broker at protocol_version >= 12)."""
    cmd = BaseCommand(type=BaseCommand.GET_LAST_MESSAGE_ID)
    body = cmd.getLastMessageId
    body.consumer_id = consumer_id
    body.request_id = u64(request_id)
    return encode_command(cmd)


@builder
def new_get_topics_of_namespace(request_id: int, namespace: str, mode: int = 0) -> bytes:
    """GET_TOPICS_OF_NAMESPACE for ``"tenant/ns"``; ``mode`` 0 PERSISTENT, 1 NON_PERSISTENT, 2 ALL."""
    cmd = BaseCommand(type=BaseCommand.GET_TOPICS_OF_NAMESPACE)
    body = cmd.getTopicsOfNamespace
    body.request_id = u64(request_id)
    body.namespace = namespace
    body.mode = cast(CommandGetTopicsOfNamespace.Mode.ValueType, mode)
    return encode_command(cmd)


@builder
def new_get_schema(request_id: int, topic: str, schema_version: bytes | None = None) -> bytes:
    """GET_SCHEMA of a topic (latest, or ``schema_version``)."""
    cmd = BaseCommand(type=BaseCommand.GET_SCHEMA)
    body = cmd.getSchema
    body.request_id = u64(request_id)
    body.topic = topic
    if schema_version is not None:
        body.schema_version = schema_version
    return encode_command(cmd)


@builder
def new_consumer_stats(request_id: int, consumer_id: int) -> bytes:
    """CONSUMER_STATS for one consumer."""
    cmd = BaseCommand(type=BaseCommand.CONSUMER_STATS)
    body = cmd.consumerStats
    body.request_id = u64(request_id)
    body.consumer_id = consumer_id
    return encode_command(cmd)
