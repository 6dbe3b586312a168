"""Configuration objects: frozen dataclasses with Pulsar's option names, units and defaults.

``InitialPosition`` is the protocol's own (:class:`quasar.protocol.enums.InitialPosition`, the names of
``pulsar.InitialPosition``: ``Latest``, ``Earliest``), re-exported; ``ConsumerType`` keeps the official client's
names and maps each to the protocol's ``SubType`` (see :class:`ConsumerType`).

Names and defaults follow the official Python client (``pulsar/__init__.py`` of pulsar-client 3.x, which
wraps the C++ ``ClientConfiguration`` / ``ProducerConfiguration`` / ``ConsumerConfiguration``; reference
semantics.md Part B5, pulsar-protocol.md §8.3). Units are in the names: ``*_ms`` / ``*_millis`` are
milliseconds, ``*_seconds`` seconds, ``*_bytes`` bytes. Every field is validated in ``__post_init__``:
a wrong type raises ``TypeError`` and a wrong value ``ValueError``, both naming the parameter.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quasar.protocol import CompressionType, MessageId, SubType
from quasar.protocol.enums import InitialPosition

from .auth import Authentication

__all__ = [
    "ClientConfig",
    "CompressionType",
    "ConsumerConfig",
    "ConsumerType",
    "DeadLetterPolicy",
    "HashingScheme",
    "InitialPosition",
    "PartitionsRoutingMode",
    "ProducerConfig",
    "ReaderConfig",
]


class ConsumerType(enum.IntEnum):
    """Subscription type with the names of ``pulsar.ConsumerType``. Each value is the wire
    :class:`~quasar.protocol.enums.SubType` (``CommandSubscribe.SubType``, whose ``Key_Shared`` the official
    client calls ``KeyShared``); :attr:`sub_type` gives that member."""

    Exclusive = int(SubType.Exclusive)
    Shared = int(SubType.Shared)
    Failover = int(SubType.Failover)
    KeyShared = int(SubType.Key_Shared)

    @property
    def sub_type(self) -> SubType:
        """The wire ``SubType`` of this consumer type."""
        return SubType(self.value)


class PartitionsRoutingMode(enum.IntEnum):
    """How a partitioned producer picks a partition for a message without a key (``pulsar.PartitionsRoutingMode``)."""

    RoundRobinDistribution = 0
    UseSinglePartition = 1
    CustomPartition = 2


class HashingScheme(enum.IntEnum):
    """Hash of the partition key (C++ ``ProducerConfiguration::HashingScheme``, same names and values).
    BoostHash is the C++ client's default and the only scheme of the official Python client (pulsar-client
    3.13 has no ``hashing_scheme`` option); JavaStringHash is the Java client's. See :mod:`quasar.client.routing`."""

    BoostHash = 0
    JavaStringHash = 1
    Murmur3_32Hash = 2


def _check_type(name: str, value: Any, types: type | tuple[type, ...]) -> None:
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TypeError(f"{name} must be {_type_names(types)}, got bool")
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {_type_names(types)}, got {type(value).__name__}")


def _type_names(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def _check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> None:
    _check_type(name, value, int)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")


def _check_optional_str(name: str, value: Any, *, empty_ok: bool = False) -> None:
    if value is None:
        return
    _check_type(name, value, str)
    if not value and not empty_ok:
        raise ValueError(f"{name} must not be empty")


def _check_enum(name: str, value: Any, enum_type: type[enum.IntEnum]) -> Any:
    if isinstance(value, enum_type):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum_type(value)
        except ValueError:
            raise ValueError(f"{name} must be a {enum_type.__name__}, got {value}") from None
    raise TypeError(f"{name} must be a {enum_type.__name__}, got {type(value).__name__}")


def check_properties(name: str, value: Any) -> None:
    """Raise TypeError (naming ``name``) unless ``value`` is None or a mapping of str to str."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{name} must map str to str, got {key!r}: {item!r}")


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Client-wide settings (``pulsar.Client`` keyword arguments).

    Attributes:
        operation_timeout_seconds: timeout of every request to the broker (lookup, PRODUCER, SUBSCRIBE, ...),
            seconds; 30 (C++ ``operationTimeoutSeconds``).
        connection_timeout_ms: TCP connect + CONNECTED handshake timeout, ms; 10 000.
        keep_alive_interval_seconds: PING interval; a connection whose PING is unanswered one interval later is
            closed; 30 (C++ ``keepAliveIntervalInSeconds``).
        initial_backoff_interval_ms / max_backoff_interval_ms: reconnection backoff, doubled per attempt;
            100 / 60 000 (C++ ``initialBackoffIntervalMs`` / ``maxBackoffIntervalMs``).
        max_lookup_redirects: LOOKUP redirects followed before failing; 20.
        partitions_update_interval_seconds: how often partitioned producers/consumers re-read the partition
            count; 60 (C++ ``partitionsUpdateInterval``).
        listener_name: the broker's advertised listener to connect to (``pulsar.Client(listener_name=...)``):
            sent in LOOKUP, and picks that listener's URL from name-server routes; None = the default URL.
        use_tls: connect to brokers over TLS and take the ``pulsar+ssl://`` URLs of lookups (set by a
            ``pulsar+ssl://`` or ``nameserver+ssl://`` service URL; the official client's deprecated ``use_tls``).
        tls_trust_certs_file_path / tls_allow_insecure_connection / tls_validate_hostname: the official client's
            TLS options (see :mod:`quasar.client.tls`); None / False / False.
        tls_certificate_file_path / tls_private_key_file_path: a client certificate and key (PEM) presented in
            the TLS handshake without naming an authentication method (the official client's options);
            ``AuthenticationTLS`` presents its own instead.
        authentication: an :class:`~quasar.client.auth.Authentication` (``AuthenticationToken``,
            ``AuthenticationBasic``, ``AuthenticationTLS``); None = CONNECT says ``auth_method_name="none"``.
    """

    operation_timeout_seconds: float = 30
    connection_timeout_ms: int = 10_000
    keep_alive_interval_seconds: float = 30
    initial_backoff_interval_ms: int = 100
    max_backoff_interval_ms: int = 60_000
    max_lookup_redirects: int = 20
    partitions_update_interval_seconds: float = 60
    listener_name: str | None = None
    use_tls: bool = False
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    tls_certificate_file_path: str | None = None
    tls_private_key_file_path: str | None = None
    authentication: Authentication | None = None

    def __post_init__(self) -> None:
        for name in (
            "operation_timeout_seconds",
            "keep_alive_interval_seconds",
            "partitions_update_interval_seconds",
        ):
            value = getattr(self, name)
            _check_type(name, value, (int, float))
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        _check_int("connection_timeout_ms", self.connection_timeout_ms, 1)
        _check_int("initial_backoff_interval_ms", self.initial_backoff_interval_ms, 1)
        _check_int("max_backoff_interval_ms", self.max_backoff_interval_ms, self.initial_backoff_interval_ms)
        _check_int("max_lookup_redirects", self.max_lookup_redirects, 0)
        if self.listener_name is not None:
            _check_type("listener_name", self.listener_name, str)
        for name in ("use_tls", "tls_allow_insecure_connection", "tls_validate_hostname"):
            _check_type(name, getattr(self, name), bool)
        for name in ("tls_trust_certs_file_path", "tls_certificate_file_path", "tls_private_key_file_path"):
            _check_optional_str(name, getattr(self, name))
        if (self.tls_certificate_file_path is None) != (self.tls_private_key_file_path is None):
            raise ValueError("tls_certificate_file_path and tls_private_key_file_path go together")
        if self.authentication is not None and not isinstance(self.authentication, Authentication):
            raise TypeError(
                "authentication must be an AuthenticationToken, AuthenticationBasic or AuthenticationTLS,"
                f" got {type(self.authentication).__name__}"
            )


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Producer settings (``Client.create_producer`` keyword arguments).

    Attributes:
        producer_name: None = the broker assigns one (PRODUCER_SUCCESS.producer_name).
        initial_sequence_id: first sequence id; None = broker's ``last_sequence_id + 1`` (0 on a new name).
        send_timeout_millis: a message without receipt after this long fails with SendTimeoutError; 30 000;
            0 = never.
        compression_type: NONE, LZ4, ZLIB, ZSTD or SNAPPY (whole batch compressed).
        max_pending_messages: messages sent but not yet acknowledged by a receipt; 1000 (C++).
        block_if_queue_full: False = ProducerQueueIsFullError at the limit; True = wait for room.
        batching_enabled: False (the Python wrapper's default).
        batching_max_messages: 1000; batching_max_allowed_size_in_bytes: 128 KiB;
        batching_max_publish_delay_ms: 10 (C++; Java uses 1).
        chunking_enabled: split messages above the broker's max_message_size; exclusive with batching.
        chunk_max_message_size: bytes per chunk; None = the broker's max_message_size.
        message_routing_mode / hashing_scheme / message_router: partition choice, see ``routing.py``;
            hashing_scheme defaults to BoostHash, as the official Python/C++ client.
        properties: producer metadata sent in PRODUCER.
        partition_switch_frequency_by_publish_delay: RoundRobinDistribution with batching stays on one
            partition at most this many publish delays (Java ``batchingPartitionSwitchFrequencyByPublishDelay``,
            10); it moves on sooner once a batch's worth of messages went there (C++), see ``routing.py``.
        initial_subscription_name: a durable subscription the broker creates on the topic (at Earliest) when
            the producer connects (``CommandProducer.initial_subscription_name``; Java
            ``ProducerBuilderImpl.initialSubscriptionName``, used by the dead-letter producer).
    """

    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30_000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    chunking_enabled: bool = False
    chunk_max_message_size: int | None = None
    message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution
    hashing_scheme: HashingScheme = HashingScheme.BoostHash
    message_router: Callable[[Any, int], int] | None = None
    properties: Mapping[str, str] | None = None
    partition_switch_frequency_by_publish_delay: int = 10
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        _check_optional_str("producer_name", self.producer_name)
        _check_optional_str("initial_subscription_name", self.initial_subscription_name)
        if self.initial_sequence_id is not None:
            _check_int("initial_sequence_id", self.initial_sequence_id, -1)
        _check_int("send_timeout_millis", self.send_timeout_millis, 0)
        object.__setattr__(
            self, "compression_type", _check_enum("compression_type", self.compression_type, CompressionType)
        )
        _check_int("max_pending_messages", self.max_pending_messages, 1)
        _check_type("block_if_queue_full", self.block_if_queue_full, bool)
        _check_type("batching_enabled", self.batching_enabled, bool)
        _check_int("batching_max_messages", self.batching_max_messages, 1)
        _check_int("batching_max_allowed_size_in_bytes", self.batching_max_allowed_size_in_bytes, 1)
        _check_int("batching_max_publish_delay_ms", self.batching_max_publish_delay_ms, 0)
        _check_type("chunking_enabled", self.chunking_enabled, bool)
        if self.chunking_enabled and self.batching_enabled:
            raise ValueError("chunking_enabled and batching_enabled cannot both be True (Pulsar forbids it)")
        if self.chunk_max_message_size is not None:
            _check_int("chunk_max_message_size", self.chunk_max_message_size, 1)
        object.__setattr__(
            self,
            "message_routing_mode",
            _check_enum("message_routing_mode", self.message_routing_mode, PartitionsRoutingMode),
        )
        object.__setattr__(
            self, "hashing_scheme", _check_enum("hashing_scheme", self.hashing_scheme, HashingScheme)
        )
        if self.message_router is not None and not callable(self.message_router):
            raise TypeError(f"message_router must be callable, got {type(self.message_router).__name__}")
        if self.message_routing_mode == PartitionsRoutingMode.CustomPartition and self.message_router is None:
            raise ValueError("message_routing_mode CustomPartition needs a message_router")
        check_properties("properties", self.properties)
        _check_int(
            "partition_switch_frequency_by_publish_delay", self.partition_switch_frequency_by_publish_delay, 1
        )


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """Dead-letter policy (``pulsar.ConsumerDeadLetterPolicy``; Java ``DeadLetterPolicy``).

    Attributes:
        max_redeliver_count: a message redelivered this many times goes to the dead-letter topic at its next
            negative ack / ack timeout instead of being redelivered; must be > 0. With
            ``ConsumerConfig.retry_enable`` it is also the number of ``reconsume_later`` hops a message may make
            (``RECONSUMETIMES`` 1..max) before the next one sends it to the dead-letter topic.
        dead_letter_topic: default ``<topic>-<subscription>-DLQ``.
        retry_letter_topic: the topic ``reconsume_later`` publishes to and that a ``retry_enable`` consumer
            also subscribes to; default ``<topic>-<subscription>-RETRY`` (Java ``ConsumerBuilderImpl``).
            Unused without ``retry_enable``.
        initial_subscription_name: a subscription created on the DLQ topic with its producer.
    """

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    retry_letter_topic: str | None = None
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        _check_int("max_redeliver_count", self.max_redeliver_count, 1)
        _check_optional_str("dead_letter_topic", self.dead_letter_topic)
        _check_optional_str("retry_letter_topic", self.retry_letter_topic)
        _check_optional_str("initial_subscription_name", self.initial_subscription_name)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Consumer settings (``Client.subscribe`` keyword arguments).

    Attributes:
        consumer_type: Exclusive (default), Shared, Failover, KeyShared.
        receiver_queue_size: messages prefetched; FLOW(receiver_queue_size) after SUBSCRIBE and a refill FLOW
            once half of it was handed out; 1000. 0 = one FLOW(1) per receive.
        consumer_name: None = 10 random hex characters (as the C++ client).
        unacked_messages_timeout_ms: ack timeout, ms; None/0 = off; else >= 10 000 (C++ minimum).
        tick_duration_ms: ack-timeout check period, ms; 1000.
        negative_ack_redelivery_delay_ms: 60 000.
        negative_ack_backoff: optional ``f(redelivery_count) -> delay ms`` (Java ``negativeAckRedeliveryBackoff``).
        acknowledgements_group_time_ms: ack grouping window, ms; 100; 0 = every ack sent at once.
        ack_group_max_size: pending individual acks that force a flush; 1000.
        ack_receipt_enabled: wait for ACK_RESPONSE (the ack carries a request_id).
        initial_position: Latest (default) or Earliest, for a new subscription.
        properties: consumer metadata sent in SUBSCRIBE.
        is_read_compacted, replicate_subscription_state_enabled: passed on in SUBSCRIBE.
        pattern_auto_discovery_period: seconds between topic re-discovery of a pattern consumer; 60.
        max_pending_chunked_message: incomplete chunked messages kept; 10.
        auto_ack_oldest_chunked_message_on_queue_full: False = drop the oldest (it will be redelivered).
        expire_time_of_incomplete_chunked_message_ms: 60 000.
        start_message_id_inclusive: after seek / for readers, deliver the start id itself; False.
        batch_index_ack_enabled: acks of single batch items go out with an ack_set; False.
        dead_letter_policy: see :class:`DeadLetterPolicy`.
        message_listener: ``f(consumer, message)`` called for each message instead of ``receive``.
        max_total_receiver_queue_size_across_partitions: 50 000; bounds each partition's queue.
        subscription_properties: properties of the subscription, sent in SUBSCRIBE.
        retry_enable: Java ``ConsumerBuilder.enableRetry``; False. With it ``subscribe(topic, sub)`` also
            subscribes to the retry-letter topic (``dead_letter_policy.retry_letter_topic``, default
            ``<topic>-<subscription>-RETRY``; ``<topic>`` is the first topic of a list; not for a regex) and
            returns a multi-topics consumer over both, and ``reconsume_later`` is allowed. Without a
            ``dead_letter_policy`` the policy is ``max_redeliver_count=16`` (Java
            ``RetryMessageUtil.MAX_RECONSUMETIMES``) with the default topics. Any subscription type is
            accepted (as Java), but Quasar's broker honours the retry delay (``deliver_after``) on Shared
            subscriptions only (semantics.md B6): on Exclusive / Failover / KeyShared a retried message comes
            back as soon as it is read.
    """

    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    tick_duration_ms: int = 1000
    negative_ack_redelivery_delay_ms: int = 60_000
    negative_ack_backoff: Callable[[int], int] | None = None
    acknowledgements_group_time_ms: int = 100
    ack_group_max_size: int = 1000
    ack_receipt_enabled: bool = False
    initial_position: InitialPosition = InitialPosition.Latest
    properties: Mapping[str, str] | None = None
    is_read_compacted: bool = False
    replicate_subscription_state_enabled: bool = False
    pattern_auto_discovery_period: int = 60
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    start_message_id_inclusive: bool = False
    batch_index_ack_enabled: bool = False
    dead_letter_policy: DeadLetterPolicy | None = None
    message_listener: Callable[[Any, Any], Any] | None = None
    max_total_receiver_queue_size_across_partitions: int = 50_000
    subscription_properties: Mapping[str, str] | None = field(default=None)
    retry_enable: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "consumer_type", _check_enum("consumer_type", self.consumer_type, ConsumerType)
        )
        _check_int("receiver_queue_size", self.receiver_queue_size, 0)
        _check_optional_str("consumer_name", self.consumer_name)
        if self.unacked_messages_timeout_ms is not None:
            _check_int("unacked_messages_timeout_ms", self.unacked_messages_timeout_ms, 0)
            if 0 < self.unacked_messages_timeout_ms < 10_000:
                raise ValueError(
                    f"unacked_messages_timeout_ms must be 0 or >= 10000, got {self.unacked_messages_timeout_ms}"
                )
        _check_int("tick_duration_ms", self.tick_duration_ms, 1)
        _check_int("negative_ack_redelivery_delay_ms", self.negative_ack_redelivery_delay_ms, 0)
        if self.negative_ack_backoff is not None and not callable(self.negative_ack_backoff):
            raise TypeError("negative_ack_backoff must be callable")
        _check_int("acknowledgements_group_time_ms", self.acknowledgements_group_time_ms, 0)
        _check_int("ack_group_max_size", self.ack_group_max_size, 1)
        _check_type("ack_receipt_enabled", self.ack_receipt_enabled, bool)
        object.__setattr__(
            self, "initial_position", _check_enum("initial_position", self.initial_position, InitialPosition)
        )
        check_properties("properties", self.properties)
        check_properties("subscription_properties", self.subscription_properties)
        _check_type("is_read_compacted", self.is_read_compacted, bool)
        _check_type("replicate_subscription_state_enabled", self.replicate_subscription_state_enabled, bool)
        _check_int("pattern_auto_discovery_period", self.pattern_auto_discovery_period, 1)
        _check_int("max_pending_chunked_message", self.max_pending_chunked_message, 1)
        _check_type(
            "auto_ack_oldest_chunked_message_on_queue_full",
            self.auto_ack_oldest_chunked_message_on_queue_full,
            bool,
        )
        _check_int(
            "expire_time_of_incomplete_chunked_message_ms",
            self.expire_time_of_incomplete_chunked_message_ms,
            1,
        )
        _check_type("start_message_id_inclusive", self.start_message_id_inclusive, bool)
        _check_type("batch_index_ack_enabled", self.batch_index_ack_enabled, bool)
        if self.dead_letter_policy is not None:
            _check_type("dead_letter_policy", self.dead_letter_policy, DeadLetterPolicy)
        _check_type("retry_enable", self.retry_enable, bool)
        if self.message_listener is not None and not callable(self.message_listener):
            raise TypeError(f"message_listener must be callable, got {type(self.message_listener).__name__}")
        _check_int(
            "max_total_receiver_queue_size_across_partitions",
            self.max_total_receiver_queue_size_across_partitions,
            1,
        )


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """Reader settings (``Client.create_reader`` keyword arguments).

    Attributes:
        start_message_id: a MessageId, or EARLIEST / LATEST from :mod:`quasar.protocol`.
        receiver_queue_size: 1000. reader_name: None. subscription_role_prefix: ``"reader"``.
        start_message_id_inclusive: deliver ``start_message_id`` itself; False.
        reader_listener: ``f(reader, message)``.
        deliver_entries: queue whole entries (:class:`~quasar.client.entries.StoredEntry`, read with
            ``read_entries``) instead of messages; a Quasar extension for bulk readers, one topic partition
            (or non-partitioned topic) only, no listener. False.
    """

    start_message_id: MessageId
    receiver_queue_size: int = 1000
    reader_name: str | None = None
    subscription_role_prefix: str | None = None
    is_read_compacted: bool = False
    start_message_id_inclusive: bool = False
    reader_listener: Callable[[Any, Any], Any] | None = None
    deliver_entries: bool = False

    def __post_init__(self) -> None:
        _check_type("start_message_id", self.start_message_id, MessageId)
        _check_int("receiver_queue_size", self.receiver_queue_size, 0)
        _check_optional_str("reader_name", self.reader_name)
        _check_optional_str("subscription_role_prefix", self.subscription_role_prefix)
        _check_type("is_read_compacted", self.is_read_compacted, bool)
        _check_type("start_message_id_inclusive", self.start_message_id_inclusive, bool)
        if self.reader_listener is not None and not callable(self.reader_listener):
            raise TypeError(f"reader_listener must be callable, got {type(self.reader_listener).__name__}")
        _check_type("deliver_entries", self.deliver_entries, bool)
        if self.deliver_entries and self.reader_listener is not None:
            raise ValueError("deliver_entries does not work with a reader_listener")


def check_subscription_name(name: Any) -> str:
    """Validate a subscription name (non-empty str)."""
    _check_type("subscription_name", name, str)
    if not name:
        raise ValueError("subscription_name must not be empty")
    return str(name)


def check_topics(topic: Any) -> str | list[str] | re.Pattern[str]:
    """Validate ``topic`` of ``subscribe``: a str, a non-empty list of str, or a compiled regex."""
    if isinstance(topic, re.Pattern):
        return topic
    if isinstance(topic, str):
        if not topic:
            raise ValueError("topic must not be empty")
        return topic
    if isinstance(topic, (list, tuple)):
        if not topic:
            raise ValueError("topic list must not be empty")
        for item in topic:
            if not isinstance(item, str) or not item:
                raise TypeError(f"topic list items must be non-empty str, got {item!r}")
        return list(topic)
    raise TypeError(f"topic must be a str, a list of str or a re.Pattern, got {type(topic).__name__}")
