"""Durable half messages of RocketMQ transactions (reference rocketmq-grpc.md §8; broker
``TransactionalMessageBridge``): where a prepared message waits, and how its resolution survives a restart.

Layout (per namespace ``public/<ns>``, like RocketMQ's per-broker system topics):

- **Half topic** ``persistent://public/<ns>/RMQ_SYS_TRANS_HALF_TOPIC``: a TRANSACTION send stores the
  message here, as the exact entry it will become in its real queue (same Pulsar metadata and body), with
  the store properties ``REAL_TOPIC`` (the real partition's full Pulsar name), ``REAL_QID`` (its queue id),
  ``PGROUP`` (the producer group = the RocketMQ topic name), ``RMQ_NAMESPACE`` (the client's namespace),
  ``TRAN_MSG=true`` and ``UNIQ_KEY`` (the message id = the transaction id). Nobody consumes the real topic's
  queue from here, so neither Pulsar nor RocketMQ consumers of the real topic see a half message.
- **Op record** = the durable subscription ``RMQ_SYS_TRANS_OP_HALF`` on the half topic (RocketMQ's op queue):
  resolving a half (commit, rollback, given up) acknowledges its entry and persists the cursor before the
  EndTransaction answer. After a restart the unresolved halves are exactly the unacknowledged entries; the
  cursor also keeps retention from removing them.
- **Given up** halves (past ``transaction_check_max`` checks) are copied to
  ``persistent://public/<ns>/TRANS_CHECK_MAX_TIME_TOPIC`` and acknowledged.

Writes go through the broker's producer path (:class:`ServiceWriter`: group commit, the store's flush
policy, off the loop thread for fsync); reads are the store's mapped-memory reads on the loop thread, as every
ledger read, in bounded batches. Commit is publish-then-acknowledge: a crash between the two (a window of one
store write) makes the half commit again after the restart, so that narrow case is at-least-once, as in
RocketMQ.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quasar.broker.producer import Producer
from quasar.broker.rocketmq.clients import ClientRecord
from quasar.broker.rocketmq.mapping import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, MappedMessage
from quasar.broker.rocketmq.send import _ProducerLink
from quasar.broker.rocketmq.status import Code, RocketMQError, code_of
from quasar.broker.system_topics import (
    RMQ_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_TRANS_HALF_TOPIC,
    RMQ_TRANS_OP_HALF,
)
from quasar.broker.topic import PersistentTopic
from quasar.java_hash import java_string_hash
from quasar.ledger.entry import Entry
from quasar.ledger.position import Position
from quasar.protocol import TopicName, parse_headers_and_payload
from quasar.protocol.enums import InitialPosition
from quasar.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = [
    "HALF_TOPIC",
    "MAX_TIME_TOPIC",
    "OP_SUBSCRIPTION",
    "HalfMessage",
    "HalfStore",
    "ServiceWriter",
]

log = logging.getLogger(__name__)

HALF_TOPIC = RMQ_TRANS_HALF_TOPIC  # system topics: hidden from listings, deleted with their namespace
MAX_TIME_TOPIC = RMQ_TRANS_CHECK_MAX_TIME_TOPIC
OP_SUBSCRIPTION = RMQ_TRANS_OP_HALF  # Pulsar clients may not subscribe to it (broker/system_topics.py)
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_PGROUP = "PGROUP"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_NAMESPACE = "RMQ_NAMESPACE"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
"""Checks made so far, on a re-put half (RocketMQ's ``MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES``)."""
PROPERTY_PREPARED_MS = "TRAN_PREPARED_STORE_MS"
"""A re-put half's first store time (ms), so its age counts from the prepare, not from the re-put."""
MAX_CHECK_IMMUNITY_S = 3600
"""Longest ``orphaned_transaction_recovery_duration`` a producer may ask for (proxy: BAD_REQUEST past it)."""
_READ_BATCH = 256
_READ_BYTES = 4 * 1024 * 1024


@dataclass(slots=True, eq=False)
class HalfMessage:
    """One unresolved half message: ``transaction_id`` (= its UNIQ_KEY), where it is stored (``namespace``
    ``public/<ns>``, ``position``), where it goes on commit (``real_topic`` partition, ``queue_id``), the
    producer group (``producer_group`` = the RocketMQ topic name, ``client_namespace`` as the client named
    it), ``stored_ms`` (store time), ``immunity_ms`` (no check before ``stored_ms + immunity_ms``: the
    producer's ``orphaned_transaction_recovery_duration``, stored as ``CHECK_IMMUNITY_TIME_IN_SECONDS``; 0 =
    the broker's ``transaction_timeout_s`` alone), ``checks`` made so far (persisted by :meth:`HalfStore.
    recheck`), ``resolving`` while a resolution is in progress and ``rewriting`` while a re-put is."""

    transaction_id: str
    namespace: str
    position: Position
    real_topic: TopicName
    queue_id: int
    producer_group: str
    client_namespace: str
    stored_ms: int
    checks: int = 0
    resolving: bool = False
    immunity_ms: int = 0
    rewriting: asyncio.Future[None] | None = None


class ServiceWriter:
    """Publishes entries as the broker-side producer ``name`` through the same path as a client's send
    (``send._ProducerLink``): one producer per partition written, attached on first use; with ``keep`` it
    stays (the half topics) until :meth:`close`, else it is detached once no write to that partition is in
    flight, so a real topic does not keep a broker-side producer (which would keep it from ever being
    inactive) after a commit."""

    def __init__(self, service: BrokerService, name: str) -> None:
        self._service = service
        self._name = name
        self._record = ClientRecord(client_id=name)
        self._in_flight: dict[str, int] = {}

    async def publish(
        self, partition: TopicName, mapped: MappedMessage, *, keep: bool = False
    ) -> tuple[Position, int]:
        """Store ``mapped`` on ``partition``; returns its position and queue offset. Raises RocketMQError (the
        broker's errors mapped by ``status.code_of``)."""
        key = f"producer:{partition.full_name}"
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            link = await self._link(partition)
            position = await link.publish(mapped)
        except RocketMQError:
            raise
        except Exception as exc:  # noqa: BLE001 - topic loading, admission, the store
            raise RocketMQError(code_of(exc), f"write to {partition.full_name} failed: {exc}") from None
        finally:
            left = self._in_flight.pop(key) - 1
            if left:
                self._in_flight[key] = left
            elif not keep:
                resource = self._record.resources.get(key)
                if resource is not None:
                    resource.close()
        loaded = self._service.topics.get(partition.full_name)
        ledger = getattr(loaded, "ledger", None)
        offset = ledger.table.offset_of(position) if ledger is not None else None
        return position, -1 if offset is None else offset

    async def _link(self, partition: TopicName) -> _ProducerLink:
        key = f"producer:{partition.full_name}"
        existing = self._record.resources.get(key)
        if isinstance(existing, _ProducerLink) and existing.producer is not None:
            return existing
        service = self._service
        refusal = service.read_only or service.write_refusal()
        if refusal is not None:
            raise RocketMQError(Code.TOO_MANY_REQUESTS, refusal)
        topic = await service.get_or_create_topic(partition)
        if not isinstance(topic, PersistentTopic):
            raise RocketMQError(Code.FORBIDDEN, f"{partition.full_name} is not a persistent topic")
        existing = self._record.resources.get(key)
        if isinstance(existing, _ProducerLink) and existing.producer is not None:
            return existing
        link = _ProducerLink(key, self._record)
        producer = Producer(
            producer_id=0, producer_name=self._name, topic=topic, cnx=link, user_provided_name=True
        )
        if not topic.add_producer(producer):
            raise RocketMQError(
                Code.TOO_MANY_REQUESTS, f"{partition.full_name} is held by an exclusive producer"
            )
        link.producer = producer
        link.next_sequence_id = topic.dedup.last_published_sequence_id(self._name) + 1
        self._record.resources[key] = link
        return link

    def close(self) -> None:
        """Detach every producer."""
        self._record.close_resources()


def half_topic(namespace: str) -> TopicName:
    """The half topic of namespace ``public/<ns>``."""
    return TopicName.parse(f"persistent://{namespace}/{HALF_TOPIC}")


def check_immunity_s(message: Any) -> int:
    """Seconds a TRANSACTION ``message`` (``apache.rocketmq.v2.Message``) must not be checked: its
    ``system_properties.orphaned_transaction_recovery_duration`` rounded up (0 without one). Raises RocketMQError
    BAD_REQUEST when it is negative or past :data:`MAX_CHECK_IMMUNITY_S` (the proxy's limit)."""
    system = message.system_properties
    if not system.HasField("orphaned_transaction_recovery_duration"):
        return 0
    duration = system.orphaned_transaction_recovery_duration
    if (
        duration.seconds < 0
        or duration.nanos < 0
        or duration.seconds > MAX_CHECK_IMMUNITY_S
        or (duration.seconds == MAX_CHECK_IMMUNITY_S and duration.nanos > 0)
    ):
        raise RocketMQError(
            Code.BAD_REQUEST,
            f"orphaned_transaction_recovery_duration must be within 0..{MAX_CHECK_IMMUNITY_S} s, got"
            f" {duration.seconds}.{abs(duration.nanos):09d} s",
        )
    return int(duration.seconds) + (1 if duration.nanos else 0)


def real_message(entry: Entry, transaction_id: str) -> MappedMessage:
    """The message a half entry becomes in its real queue: the same metadata and body, the store properties
    ``UNIQ_KEY``/``KEYS`` (indexed) and the tag hash of its ``TAGS``. Raises quasar.protocol.ProtocolError for
    an entry that does not parse."""
    parsed = parse_headers_and_payload(entry.data)
    metadata = parsed.metadata
    store_properties = {PROPERTY_UNIQ_KEY: transaction_id}
    tag = ""
    for item in metadata.properties:
        if item.key == PROPERTY_KEYS:
            store_properties[PROPERTY_KEYS] = str(item.value)
        elif item.key == "TAGS":
            tag = str(item.value)
    return MappedMessage(
        topic=entry.properties.get(PROPERTY_PGROUP, ""),
        body=bytes(parsed.payload),
        metadata=metadata,
        store_properties=store_properties,
        tag_hash=java_string_hash(tag) if tag else 0,
        message_id=transaction_id,
    )


class HalfStore:
    """The half topics and their op subscriptions (module docstring)."""

    def __init__(self, service: BrokerService, writer: ServiceWriter) -> None:
        self._service = service
        self._writer = writer

    async def _loaded(self, namespace: str) -> tuple[PersistentTopic, Any]:
        """The namespace's half topic, loaded, and its op subscription (made at the earliest entry)."""
        topic = await self._service.get_or_create_topic(half_topic(namespace))
        if not isinstance(topic, PersistentTopic):
            raise RocketMQError(
                Code.INTERNAL_SERVER_ERROR, f"{half_topic(namespace).full_name} is not persistent"
            )
        subscription = topic.subscriptions.get(OP_SUBSCRIPTION)
        if subscription is None:
            subscription = await topic.get_or_create_subscription(
                OP_SUBSCRIPTION, durable=True, initial_position=InitialPosition.Earliest
            )
        return topic, subscription

    async def prepare(
        self,
        mapped: MappedMessage,
        real_topic: TopicName,
        queue_id: int,
        client_namespace: str,
        immunity_s: int = 0,
    ) -> tuple[HalfMessage, int]:
        """Store ``mapped`` as a half message bound for ``real_topic`` (queue ``queue_id``; not checked for
        ``immunity_s`` seconds); returns its record and its half-queue offset. Raises RocketMQError."""
        namespace = real_topic.namespace_name
        await self._loaded(namespace)  # the op subscription exists before the first half is written
        half = MappedMessage(
            topic=mapped.topic,
            body=mapped.body,
            metadata=mapped.metadata,
            store_properties={
                **mapped.store_properties,
                PROPERTY_REAL_TOPIC: real_topic.full_name,
                PROPERTY_REAL_QID: str(queue_id),
                PROPERTY_PGROUP: mapped.topic,
                PROPERTY_NAMESPACE: client_namespace,
                PROPERTY_TRAN_MSG: "true",
                **({PROPERTY_CHECK_IMMUNITY: str(immunity_s)} if immunity_s else {}),
            },
            tag_hash=mapped.tag_hash,
            message_id=mapped.message_id,
        )
        position, offset = await self._writer.publish(half_topic(namespace), half, keep=True)
        entry = HalfMessage(
            transaction_id=mapped.message_id,
            namespace=namespace,
            position=position,
            real_topic=real_topic,
            queue_id=queue_id,
            producer_group=mapped.topic,
            client_namespace=client_namespace,
            stored_ms=int(time.time() * 1000),
            immunity_ms=immunity_s * 1000,
        )
        return entry, offset

    async def entry(self, half: HalfMessage) -> Entry:
        """The stored half entry. Raises RocketMQError INTERNAL_SERVER_ERROR when the store lost it."""
        topic, _ = await self._loaded(half.namespace)
        stored = topic.ledger.get_entry(half.position)
        if stored is None:
            raise RocketMQError(
                Code.INTERNAL_SERVER_ERROR, f"half message {half.transaction_id} is no longer in the store"
            )
        return stored

    async def resolve(self, half: HalfMessage) -> None:
        """Record ``half`` as resolved: acknowledge it on the op subscription and persist the cursor. Raises
        RocketMQError when the cursor cannot be written."""
        _, subscription = await self._loaded(half.namespace)
        cursor = subscription.cursor
        try:
            cursor.delete([half.position])
            await cursor.flush()
        except Exception as exc:  # noqa: BLE001 - metadata store or a trimmed position
            raise RocketMQError(
                Code.INTERNAL_SERVER_ERROR, f"recording the end of transaction {half.transaction_id}: {exc}"
            ) from None

    async def recheck(self, half: HalfMessage) -> None:
        """Persist ``half.checks`` as RocketMQ does: re-put the half at the end of the half topic with
        ``TRANSACTION_CHECK_TIMES`` (and its first store time), then acknowledge the old entry; ``half.position``
        moves to the copy. Resolutions wait for it (``half.rewriting``). Raises RocketMQError (the half stays
        where it was)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        half.rewriting = done
        try:
            stored = await self.entry(half)
            try:
                copy = real_message(stored, half.transaction_id)
            except ProtocolError as exc:
                raise RocketMQError(Code.INTERNAL_SERVER_ERROR, f"half message unreadable: {exc}") from None
            copy.store_properties = {
                **stored.properties,
                PROPERTY_CHECK_TIMES: str(half.checks),
                PROPERTY_PREPARED_MS: str(half.stored_ms),
            }
            position, _ = await self._writer.publish(half_topic(half.namespace), copy, keep=True)
            old, half.position = half.position, position
            _, subscription = await self._loaded(half.namespace)
            try:
                subscription.cursor.delete([old])
                await subscription.cursor.flush()
            except Exception as exc:  # noqa: BLE001 - a restart then finds both copies: the later one wins
                raise RocketMQError(
                    Code.INTERNAL_SERVER_ERROR, f"re-putting half {half.transaction_id}: {exc}"
                ) from None
        finally:
            half.rewriting = None
            done.set_result(None)

    async def give_up(self, half: HalfMessage) -> None:
        """Copy the half to the namespace's ``TRANS_CHECK_MAX_TIME_TOPIC`` and resolve it. Raises
        RocketMQError."""
        stored = await self.entry(half)
        copy = real_message(stored, half.transaction_id)
        copy.store_properties.update(
            {PROPERTY_REAL_TOPIC: half.real_topic.full_name, PROPERTY_REAL_QID: str(half.queue_id)}
        )
        target = TopicName.parse(f"persistent://{half.namespace}/{MAX_TIME_TOPIC}")
        await self._writer.publish(target, copy)
        await self.resolve(half)

    async def recover(self) -> list[HalfMessage]:
        """The unresolved halves of every namespace of tenant ``public`` that has a half topic, in store
        order (reads in batches of 256, yielding to the loop between them)."""
        out: list[HalfMessage] = []
        service = self._service
        for namespace in service.namespaces("public"):
            name = half_topic(namespace).full_name
            if name not in set(service.factory.names_with_prefix(name)):
                continue
            try:
                topic, subscription = await self._loaded(namespace)
            except Exception:  # one namespace must not keep the others unrecovered
                log.exception("RocketMQ transactions: %s could not be loaded", name)
                continue
            out.extend(await self._unresolved(namespace, topic, subscription.cursor))
        return out

    async def _unresolved(self, namespace: str, topic: PersistentTopic, cursor: Any) -> list[HalfMessage]:
        ledger = topic.ledger
        offset = ledger.table.offset_after(cursor.mark_delete_position)
        out = []
        while offset < ledger.confirmed_end_offset:
            entries, next_offset = ledger.read_from_offset(offset, _READ_BATCH, _READ_BYTES)
            for stored in entries:
                if cursor.is_acked(stored.position):
                    continue
                half = _half_of(namespace, stored)
                if half is None:
                    log.warning(
                        "RocketMQ transactions: %s holds a bad half entry at %s", namespace, stored.position
                    )
                else:
                    out.append(half)
            if next_offset <= offset:
                break
            offset = next_offset
            await asyncio.sleep(0)
        return out


def _half_of(namespace: str, stored: Entry) -> HalfMessage | None:
    properties = stored.properties
    try:
        return HalfMessage(
            transaction_id=properties[PROPERTY_UNIQ_KEY],
            namespace=namespace,
            position=stored.position,
            real_topic=TopicName.parse(properties[PROPERTY_REAL_TOPIC]),
            queue_id=int(properties[PROPERTY_REAL_QID]),
            producer_group=properties.get(PROPERTY_PGROUP, ""),
            client_namespace=properties.get(PROPERTY_NAMESPACE, ""),
            stored_ms=int(properties.get(PROPERTY_PREPARED_MS, stored.store_timestamp)),
            immunity_ms=int(properties.get(PROPERTY_CHECK_IMMUNITY, 0)) * 1000,
            checks=int(properties.get(PROPERTY_CHECK_TIMES, 0)),
        )
    except (KeyError, ValueError):
        return None
