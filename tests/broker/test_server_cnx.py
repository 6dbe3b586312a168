"""ServerCnx with its command families: dispatch before/after CONNECT, PRODUCER/SUBSCRIBE created in owned
tasks (a CLOSE meanwhile wins), owned tasks and timers cancelled when the connection is lost."""

from __future__ import annotations

import asyncio

from quasar.broker.auth import NO_SECURITY
from quasar.broker.cluster.model import LookupAnswer, LookupKind
from quasar.broker.config import BrokerConfig
from quasar.broker.errors import NamespaceNotFoundError
from quasar.broker.non_persistent import NonPersistentTopic
from quasar.broker.schema import SchemaRegistry
from quasar.broker.server_cnx import ServerCnx
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, TopicName, commands, requests
from quasar.protocol.decoder import Frame
from quasar.protocol.enums import ServerError
from quasar.protocol.frame import encode_command
from quasar.protocol.pb import BaseCommand

TOPIC = "non-persistent://public/default/t"


class FakeTransport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.calls = 0  # write/writelines calls: one per loop turn or data_received

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.calls += 1
        self.out += data

    def writelines(self, parts: list[bytes]) -> None:
        self.calls += 1
        for part in parts:
            self.out += part

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def frames(self) -> list[Frame]:
        """Every frame written since the last call."""
        decoder = FrameDecoder()
        decoder.receive_data(bytes(self.out))
        self.out.clear()
        frames = []
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
        return frames


class FakeService:
    """Just what the command families use; topic loading waits for ``gate``."""

    broker_service_url = "pulsar://test:6650"
    read_only: str | None = None
    security = NO_SECURITY

    def write_refusal(self) -> str | None:
        return None

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.topic = NonPersistentTopic(TopicName.parse(TOPIC))
        self.schemas = SchemaRegistry(MemoryMetadataStore(MemoryData()), lambda namespace: None)

    async def get_or_create_topic(self, topic: TopicName) -> NonPersistentTopic:
        await self.gate.wait()
        return self.topic

    def generate_producer_name(self) -> str:
        return "standalone-1-1"

    def check_subscription_limit(self, topic: object, name: str) -> None:
        pass

    def check_consumer_limits(self, topic: object, subscription: object) -> None:
        pass

    def namespace_exists(self, namespace: str) -> bool:
        return namespace == "public/default"

    def partitions(self, topic: TopicName) -> int:
        return 0

    async def lookup(self, topic: TopicName, *, authoritative: bool, listener: str) -> LookupAnswer:
        if not self.namespace_exists(topic.namespace_name):
            raise NamespaceNotFoundError(f"Namespace {topic.namespace_name} does not exist")
        return LookupAnswer(LookupKind.CONNECT, self.broker_service_url, "", "http://test:8080", True)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def connected() -> tuple[ServerCnx, FakeTransport, FakeService]:
    service = FakeService()
    cnx = ServerCnx(service, BrokerConfig(keep_alive_interval_s=30), set())  # type: ignore[arg-type]
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(requests.new_connect("test-client"))
    assert [f.type for f in transport.frames()] == [CommandType.CONNECTED]
    return cnx, transport, service


async def test_commands_before_connect_close_the_connection():
    cnx = ServerCnx(FakeService(), BrokerConfig(), set())  # type: ignore[arg-type]
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(commands.new_ping())
    assert transport.closed
    cnx.connection_lost(None)


async def test_the_replies_of_one_read_and_of_one_loop_turn_go_out_in_one_write():
    cnx, transport, _ = connected()
    transport.calls = 0
    cnx.data_received(commands.new_ping() * 3)
    assert transport.calls == 1
    assert [f.type for f in transport.frames()] == [CommandType.PONG] * 3
    for consumer_id in (1, 2):  # frames queued outside data_received (as a flush callback does)
        cnx.send_close_consumer(consumer_id)
    assert transport.calls == 1 and transport.out == b""
    await settle()
    assert transport.calls == 2
    assert [f.type for f in transport.frames()] == [CommandType.CLOSE_CONSUMER] * 2
    cnx.connection_lost(None)


async def test_a_second_connect_closes_and_ping_is_answered():
    cnx, transport, _ = connected()
    cnx.data_received(commands.new_ping())
    assert [f.type for f in transport.frames()] == [CommandType.PONG]
    cnx.data_received(requests.new_connect("again"))
    assert transport.closed
    cnx.connection_lost(None)


async def test_close_producer_while_it_is_being_created_wins():
    cnx, transport, service = connected()
    cnx.data_received(requests.new_producer(TOPIC, 1, 10))
    cnx.data_received(requests.new_producer(TOPIC, 1, 11))  # retried while pending: refused
    cnx.data_received(commands.new_close_producer(1, 12))
    await settle()
    refused, closed = transport.frames()
    assert refused.command.error.request_id == 11
    assert refused.command.error.error == ServerError.ServiceNotReady
    assert closed.type == CommandType.SUCCESS and closed.command.success.request_id == 12
    service.gate.set()
    await settle()
    (answer,) = transport.frames()
    assert answer.command.error.request_id == 10
    assert answer.command.error.error == ServerError.ServiceNotReady
    assert service.topic.producers == {}  # the CLOSE won: nothing stays attached
    cnx.data_received(requests.new_producer(TOPIC, 1, 13))  # the id may be used again
    await settle()
    (success,) = transport.frames()
    assert success.type == CommandType.PRODUCER_SUCCESS and success.command.producer_success.request_id == 13
    assert list(service.topic.producers) == ["standalone-1-1"]
    cnx.connection_lost(None)
    assert service.topic.producers == {}


async def test_close_consumer_while_it_is_being_created_wins():
    cnx, transport, service = connected()
    cnx.data_received(requests.new_subscribe(TOPIC, "s", 0, 7, 20))
    cnx.data_received(commands.new_close_consumer(7, 21))
    service.gate.set()
    await settle()
    closed, answer = transport.frames()
    assert closed.command.success.request_id == 21
    assert answer.command.error.request_id == 20 and answer.command.error.error == ServerError.ServiceNotReady
    assert service.topic.subscriptions == {}  # the subscription left with its only consumer
    cnx.connection_lost(None)


async def test_connection_lost_cancels_owned_tasks_and_keepalive():
    cnx, transport, service = connected()
    cnx.data_received(requests.new_producer(TOPIC, 1, 10))
    await settle()
    assert cnx.producers.pending == {1}
    cnx.connection_lost(None)
    await settle()
    assert cnx.producers.pending == set()  # the creating task was cancelled
    service.gate.set()
    await settle()
    assert service.topic.producers == {}
    assert transport.frames() == []


async def test_lookup_and_unknown_commands():
    """LOOKUP answers come from the service's lookup (after a task switch); an unknown command is refused at
    once."""
    cnx, transport, _ = connected()
    cnx.data_received(requests.new_lookup("persistent://nope/ns/t", 3))
    cnx.data_received(requests.new_lookup("persistent://public/default/t", 4))
    unknown = BaseCommand(type=BaseCommand.NEW_TXN)
    unknown.newTxn.request_id = 5
    cnx.data_received(encode_command(unknown))
    await settle()  # lookups are answered by a task of the connection
    refused, missing, found = transport.frames()
    assert missing.command.lookupTopicResponse.error == ServerError.TopicNotFound
    assert found.command.lookupTopicResponse.brokerServiceUrl == "pulsar://test:6650"
    assert (
        refused.command.error.request_id == 5 and refused.command.error.error == ServerError.NotAllowedError
    )
    assert not transport.closed
    cnx.connection_lost(None)


async def test_send_for_an_unknown_producer_closes_the_connection():
    cnx, transport, _ = connected()
    cnx.data_received(requests.new_send(9, 0, b"\x00\x00\x00\x00payload"))
    assert transport.closed
    cnx.connection_lost(None)


def test_closed_ids_are_bounded_and_keep_the_most_recent():
    """A connection that opens and closes producers forever keeps at most MAX_CLOSED_IDS closed ids."""
    from quasar.broker.cnx.ports import IdRegistry

    registry: IdRegistry[object] = IdRegistry()
    cap = IdRegistry.MAX_CLOSED_IDS
    for ident in range(cap + 10):
        registry.add(ident, object())
        assert registry.close(ident) is not None
    assert len(registry.closed) == cap
    assert registry.was_closed(cap + 9) and registry.was_closed(10)
    assert not registry.was_closed(9)  # the oldest fell out
    registry.reserve(cap + 9)  # the id is reused: no longer closed
    assert not registry.was_closed(cap + 9)
