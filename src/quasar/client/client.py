"""AsyncClient: the asyncio core of Quasar's client (shaped like ``pulsar.Client``; reference §8.3).

``create_producer`` / ``subscribe`` / ``create_reader`` send PARTITIONED_METADATA first and build one
producer/consumer per partition when the topic is partitioned. Producer and consumer ids are client-wide
counters from 0 (C++ ``ClientImpl``); request ids come from one client-wide counter.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
from dataclasses import replace
from typing import Any

from quasar.protocol import MessageId

from .config import (
    ClientConfig,
    ConsumerConfig,
    ConsumerType,
    ProducerConfig,
    ReaderConfig,
    check_subscription_name,
    check_topics,
)
from .connection_pool import ConnectionPool, LookupService, parse_service_url, service_url_uses_tls
from .consumer import Consumer
from .errors import AlreadyClosedError
from .multi_consumer import MultiTopicsConsumer
from .nameserver_lookup import NameServerLookupService, is_nameserver_url, parse_nameserver_url
from .op_send import full_topic
from .partitioned_producer import PartitionedProducer
from .producer import Producer
from .reader import Reader
from .retry_letter import retry_policy, retry_topics

__all__ = ["AsyncClient"]


class AsyncClient:
    """Asyncio Pulsar client. Use it inside a running event loop; ``async with AsyncClient(url) as client``.

    Args:
        service_url: ``pulsar://host:port``, ``pulsar+ssl://host:port`` (TLS), or
            ``nameserver://host:port;host:port`` / ``nameserver+ssl://...`` to find brokers through name servers
            (:mod:`quasar.client.nameserver_lookup`).
        config: a :class:`ClientConfig`, or keyword arguments with its field names
            (``operation_timeout_seconds``, ``connection_timeout_ms``, ``authentication``,
            ``tls_trust_certs_file_path``, ...). A ``+ssl`` URL turns ``use_tls`` on.

    Raises:
        TypeError / ValueError: bad URL or settings, or (TLS) a trust / certificate file that cannot be read.
    """

    def __init__(self, service_url: str, config: ClientConfig | None = None, **kwargs: Any) -> None:
        nameservers = is_nameserver_url(service_url)
        self.service_address = (
            parse_nameserver_url(service_url)[0] if nameservers else parse_service_url(service_url)
        )
        self.service_url = service_url
        if config is not None and kwargs:
            raise TypeError("pass either config or keyword settings, not both")
        self.config = config if config is not None else ClientConfig(**kwargs)
        if service_url_uses_tls(service_url) and not self.config.use_tls:
            self.config = replace(self.config, use_tls=True)
        self.pool = ConnectionPool(self.config)
        self.lookup = (
            NameServerLookupService(self.pool, service_url)
            if nameservers
            else LookupService(self.pool, self.service_address)
        )
        self._producer_ids = itertools.count()
        self._consumer_ids = itertools.count()
        self._handles: set[Any] = set()
        self._closed = False

    def next_producer_id(self) -> int:
        """Client-wide producer id counter (from 0)."""
        return next(self._producer_ids)

    def next_consumer_id(self) -> int:
        """Client-wide consumer id counter (from 0)."""
        return next(self._consumer_ids)

    def forget(self, handle: object) -> None:
        """Stop tracking a producer / consumer that closed itself (they call it at the end of ``close``)."""
        self._handles.discard(handle)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosedError("client is closed")

    async def create_producer(
        self, topic: str, config: ProducerConfig | None = None, **kwargs: Any
    ) -> Producer | PartitionedProducer:
        """Create a producer (``ProducerConfig`` fields as keyword arguments, e.g. ``batching_enabled=True``).

        Raises:
            TypeError / ValueError: bad topic or settings. BrokerResponseError (e.g. ProducerBusy),
            ConnectError, OperationTimeoutError.
        """
        self._check_open()
        name = full_topic(topic)
        config = _config(ProducerConfig, config, kwargs)
        partitions = await self.lookup.get_partitioned_metadata(name.full_name)
        producer: Producer | PartitionedProducer
        if partitions > 0:
            producer = PartitionedProducer(self, name, config, partitions)
        else:
            producer = Producer(self, name.full_name, config)
        await producer.start()
        self._handles.add(producer)
        return producer

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        config: ConsumerConfig | None = None,
        **kwargs: Any,
    ) -> Consumer | MultiTopicsConsumer:
        """Subscribe to a topic, a list of topics or a regex pattern (``ConsumerConfig`` fields as keywords).

        With ``retry_enable=True`` (Java ``enableRetry``) the retry-letter topic of the first topic is
        subscribed too and the result is a :class:`MultiTopicsConsumer` (see :mod:`quasar.client.retry_letter`).

        Raises:
            TypeError / ValueError: bad arguments (also ``retry_enable`` with a regex pattern).
            BrokerResponseError (e.g. ConsumerBusy), ConnectError, OperationTimeoutError.
        """
        self._check_open()
        topics = check_topics(topic)
        check_subscription_name(subscription_name)
        config = _config(ConsumerConfig, config, kwargs)
        consumer: Consumer | MultiTopicsConsumer
        if config.retry_enable:
            if isinstance(topics, re.Pattern):
                raise ValueError("retry_enable needs a topic name or a list of topics, not a regex pattern")
            listed = [topics] if isinstance(topics, str) else topics
            names = list(dict.fromkeys(full_topic(t).full_name for t in listed))
            policy = retry_policy(config.dead_letter_policy, names[0], subscription_name)
            config = replace(config, dead_letter_policy=policy)
            consumer = MultiTopicsConsumer(self, retry_topics(names, policy), subscription_name, config)
        elif isinstance(topics, re.Pattern):
            pattern_text = topics.pattern
            if "://" not in pattern_text:
                pattern_text = "persistent://public/default/" + pattern_text
            pattern = re.compile(pattern_text)
            tenant_ns = pattern_text.split("://", 1)[1].split("/")[:2]
            if len(tenant_ns) != 2 or not all(tenant_ns):
                raise ValueError(
                    f"topic pattern must look like persistent://tenant/ns/regex, got {pattern_text!r}"
                )
            namespace = "/".join(tenant_ns)
            names = [t for t in await self.lookup.get_topics_of_namespace(namespace) if pattern.fullmatch(t)]
            consumer = MultiTopicsConsumer(
                self, names, subscription_name, config, pattern=pattern, namespace=namespace
            )
        elif isinstance(topics, list):
            names = list(dict.fromkeys(full_topic(t).full_name for t in topics))
            consumer = MultiTopicsConsumer(self, names, subscription_name, config)
        else:
            parsed = full_topic(topics)
            name = parsed.full_name
            partitions = await self.lookup.get_partitioned_metadata(name)
            if partitions > 0:
                consumer = MultiTopicsConsumer(self, [name], subscription_name, config)
            else:  # one topic, or one partition: its ids carry that partition's index (Java, C++)
                consumer = Consumer(self, name, subscription_name, config, partition=parsed.partition_index)
        await consumer.start()
        self._handles.add(consumer)
        return consumer

    async def create_reader(
        self, topic: str, start_message_id: MessageId, config: ReaderConfig | None = None, **kwargs: Any
    ) -> Reader:
        """Create a reader from ``start_message_id`` (a MessageId, or EARLIEST / LATEST).

        Raises:
            TypeError / ValueError: bad arguments; connection / broker errors as ``subscribe``.
        """
        self._check_open()
        parsed = full_topic(topic)
        name = parsed.full_name
        if config is None:
            config = ReaderConfig(start_message_id, **kwargs)
        elif kwargs:
            raise TypeError("pass either config or keyword settings, not both")
        subscription = f"{config.subscription_role_prefix or 'reader'}-{secrets.token_hex(5)}"
        consumer_config = ConsumerConfig(
            consumer_type=ConsumerType.Exclusive,
            receiver_queue_size=config.receiver_queue_size,
            consumer_name=config.reader_name,
            is_read_compacted=config.is_read_compacted,
            start_message_id_inclusive=config.start_message_id_inclusive,
        )
        partitions = await self.lookup.get_partitioned_metadata(name)
        consumer: Consumer | MultiTopicsConsumer
        if partitions > 0 and config.deliver_entries:
            raise ValueError(f"deliver_entries reads one topic partition; {name} has {partitions} partitions")
        if partitions > 0:
            consumer = MultiTopicsConsumer(
                self, [name], subscription, consumer_config, durable=False,
                start_message_id=config.start_message_id, start_inclusive=config.start_message_id_inclusive,
            )  # fmt: skip
        else:
            consumer = Consumer(
                self, name, subscription, consumer_config, partition=parsed.partition_index, durable=False,
                start_message_id=config.start_message_id, start_inclusive=config.start_message_id_inclusive,
                deliver_entries=config.deliver_entries,
            )  # fmt: skip
        await consumer.start()
        reader = Reader(consumer, config.start_message_id, config.start_message_id_inclusive)
        if config.reader_listener is not None:
            listener = config.reader_listener
            consumer.start_listener(lambda _c, m: listener(reader, m), reader)
        self._handles.add(consumer)
        return reader

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """Partition names of ``topic`` (``[topic]`` itself when not partitioned)."""
        self._check_open()
        name = full_topic(topic)
        count = await self.lookup.get_partitioned_metadata(name.full_name)
        if count == 0:
            return [name.full_name]
        return [name.partition(i).full_name for i in range(count)]

    async def close(self) -> None:
        """Close every producer, consumer and reader, then every connection."""
        if self._closed:
            return
        self._closed = True
        handles = list(self._handles)
        await asyncio.gather(*(h.close() for h in handles), return_exceptions=True)
        await self.lookup.aclose()
        await self.pool.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _config(cls: Any, config: Any, kwargs: dict[str, Any]) -> Any:
    if config is not None:
        if kwargs:
            raise TypeError("pass either config or keyword settings, not both")
        if not isinstance(config, cls):
            raise TypeError(f"config must be a {cls.__name__}, got {type(config).__name__}")
        return config
    try:
        return cls(**kwargs)
    except TypeError as exc:
        if "unexpected keyword" in str(exc):
            raise TypeError(f"unknown {cls.__name__} option: {exc}") from None
        raise
