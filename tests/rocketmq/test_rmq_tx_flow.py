"""RocketMQ transactions and topic message types (issue 18 part 4, rmqtx) with the official clients against
one broker process of this module, whose checker runs fast (``transaction_check_interval`` 1 s,
``transaction_time_out`` 3 s, ``transaction_check_max`` 2): commit makes a half message visible to a Pulsar
consumer (not before), rollback never, an unresolved half is asked about over the producer's Telemetry stream
and the answer applies, an unanswered one is given up to ``TRANS_CHECK_MAX_TIME_TOPIC``, a SIGKILL between
send and commit loses nothing and commits once; topic ``message.type`` set over admin REST is enforced and
shown in QueryRoute. The restart test runs last (it restarts the module's broker)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin, metadata

pulsar = pytest.importorskip("pulsar")
pytestmark = pytest.mark.interop

_CONFIG = """is_delayed_delivery_deliver_at_time_strict = true
transaction_check_interval = 1000
transaction_time_out = 3000
transaction_check_max = 2
"""


@pytest.fixture(scope="module")
def rmq_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """This module's broker (overrides conftest's: a fast transaction checker)."""
    directory = tmp_path_factory.mktemp("rmq-tx-broker")
    config = Path(directory) / "broker.toml"
    config.write_text(_CONFIG)
    process = BrokerProcess(directory / "data", rocketmq_port=0, extra_args=("--config", str(config)))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _topic() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


class _Checker:
    """A TransactionChecker answering ``resolution`` (None: UNSPECIFIED) and recording what it was asked."""

    def __init__(self, resolution: Any = None) -> None:
        from rocketmq import TransactionResolution

        self.resolution = (
            TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED if resolution is None else resolution
        )
        self.asked: list[tuple[str, str, bytes]] = []
        self.event = threading.Event()

    def check(self, message: Any) -> Any:
        self.asked.append((message.topic, message.message_id, bytes(message.body)))
        self.event.set()
        return self.resolution


@pytest.fixture
def producer_factory(rmq_config: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    from rocketmq import Producer, TransactionChecker

    made: list[Any] = []

    def make(*topics: str, checker: Any = None) -> Any:
        if checker is not None:
            TransactionChecker.register(type(checker))
        producer = Producer(rmq_config(), topics, checker=checker)
        producer.startup()
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.shutdown()


def _message(topic: str, body: bytes, **props: str) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    for key, value in props.items():
        message.add_property(key, value)
    return message


def _subscribe(client: Any, topic: str) -> Any:
    return client.subscribe(
        f"persistent://public/default/{topic}", "s", initial_position=pulsar.InitialPosition.Earliest
    )


def _nothing(consumer: Any, wait_ms: int) -> bool:
    try:
        consumer.receive(timeout_millis=wait_ms)
    except pulsar.Timeout:
        return True
    return False


def test_commit_makes_the_half_visible_and_rollback_drops_it(
    rmq_broker: BrokerProcess, producer_factory: Callable[..., Any], pulsar_client: Any
) -> None:
    topic = _topic()
    consumer = _subscribe(pulsar_client, topic)
    producer = producer_factory(topic, checker=_Checker())
    committed = producer.begin_transaction()
    receipt = producer.send(_message(topic, b"paid", order="7"), committed)
    assert receipt.transaction_id == receipt.message_id
    rolled_back = producer.begin_transaction()
    producer.send(_message(topic, b"cancelled"), rolled_back)
    assert _nothing(consumer, 700)  # a half message is not delivered
    rolled_back.rollback()
    committed.commit()
    got = consumer.receive(timeout_millis=10_000)
    assert got.data() == b"paid"
    assert got.properties()["order"] == "7" and got.properties()["UNIQ_KEY"] == receipt.message_id
    consumer.acknowledge(got)
    assert _nothing(consumer, 500)  # the rolled back one never comes
    status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
    assert status == 200 and stats["publishers"] == []  # the commit's broker-side producer is detached
    from rocketmq.v5.exception import ClientException

    with pytest.raises(ClientException, match="transaction"):  # resolved: no transaction data any more
        committed.commit()


def test_end_transaction_validation(stub: Any) -> None:
    from tests.rocketmq.test_rmq_core_stub import _pb

    d, s = _pb()
    blank = stub.EndTransaction(
        s.EndTransactionRequest(topic=d.Resource(name="T"), transaction_id="  "), metadata=metadata()
    )
    assert blank.status.code == d.Code.INVALID_TRANSACTION_ID
    unknown = stub.EndTransaction(
        s.EndTransactionRequest(
            topic=d.Resource(name="T"),
            transaction_id="01" + "0" * 32,
            resolution=d.TransactionResolution.COMMIT,
        ),
        metadata=metadata(),
    )
    assert unknown.status.code == d.Code.INTERNAL_SERVER_ERROR and unknown.status.message


def test_the_checker_asks_the_producer_and_applies_its_answer(
    producer_factory: Callable[..., Any], pulsar_client: Any
) -> None:
    from rocketmq import TransactionResolution

    answered, silent = _topic(), _topic()
    consumer = _subscribe(pulsar_client, answered)
    given_up = pulsar_client.subscribe(
        "persistent://public/default/TRANS_CHECK_MAX_TIME_TOPIC",
        f"s-{silent}",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    committing = _Checker(TransactionResolution.COMMIT)
    unsure = _Checker()  # answers UNSPECIFIED: the half stays until the checks run out
    producer = producer_factory(answered, checker=committing)
    other = producer_factory(silent, checker=unsure)
    receipt = producer.send(_message(answered, b"orphan"), producer.begin_transaction())
    lost = other.send(_message(silent, b"undecided"), other.begin_transaction())
    # timeout 3 s, then a check per 1 s round: the producer's checker commits it
    got = consumer.receive(timeout_millis=20_000)
    assert got.data() == b"orphan" and got.properties()["UNIQ_KEY"] == receipt.message_id
    assert committing.asked[0] == (answered, receipt.message_id, b"orphan")
    # two checks answered UNSPECIFIED, then the half is given up to TRANS_CHECK_MAX_TIME_TOPIC
    moved = None
    deadline = time.monotonic() + 20
    while moved is None and time.monotonic() < deadline:
        candidate = given_up.receive(timeout_millis=20_000)
        if candidate.properties().get("UNIQ_KEY") == lost.message_id:
            moved = candidate
    assert moved is not None and moved.data() == b"undecided"
    assert len(unsure.asked) == 2 and {m for _, m, _ in unsure.asked} == {lost.message_id}
    assert _nothing(_subscribe(pulsar_client, silent), 300)  # never reached its real topic


def test_topic_message_type_is_enforced_and_routed(
    rmq_broker: BrokerProcess, stub: Any, producer_factory: Callable[..., Any]
) -> None:
    from tests.rocketmq.test_rmq_core_stub import _pb, _send_request

    d, s = _pb()
    topic = _topic()
    path = f"/admin/v2/persistent/public/default/{topic}/properties"

    def route_types() -> list[int]:
        answer = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=metadata())
        assert answer.status.code == d.Code.OK
        return list(answer.message_queues[0].accept_message_types)

    all_four = [d.MessageType.NORMAL, d.MessageType.FIFO, d.MessageType.DELAY, d.MessageType.TRANSACTION]
    assert route_types() == all_four  # no type set: everything RocketMQ clients send is accepted
    assert admin(rmq_broker, "PUT", path, {"message.type": "fifo", "owner": "team-a"})[0] == 204
    assert admin(rmq_broker, "GET", path) == (200, {"message.type": "FIFO", "owner": "team-a"})
    assert route_types() == [d.MessageType.FIFO]
    normal = stub.SendMessage(_send_request(topic), metadata=metadata())
    assert (
        normal.status.code == d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and "FIFO" in normal.status.message
    )
    fifo = stub.SendMessage(_send_request(topic, message_group="g"), metadata=metadata())
    assert fifo.status.code == d.Code.OK
    half = stub.SendMessage(_send_request(topic, message_type=d.MessageType.TRANSACTION), metadata=metadata())
    assert half.status.code == d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE

    assert admin(rmq_broker, "PUT", path, {"message.type": "SOMETIMES"})[0] == 400
    assert admin(rmq_broker, "PUT", path, {"message.type": "TRANSACTION"})[0] == 204
    assert route_types() == [d.MessageType.TRANSACTION]
    producer = producer_factory(topic, checker=_Checker())
    from rocketmq.v5.exception import IllegalArgumentException

    with pytest.raises(IllegalArgumentException):  # the py client refuses a normal message here
        producer.send(_message(topic, b"plain"))
    transaction = producer.begin_transaction()
    producer.send(_message(topic, b"tx"), transaction)
    transaction.rollback()

    assert admin(rmq_broker, "PUT", path, {"message.type": "MIXED"})[0] == 204
    assert route_types() == all_four
    assert stub.SendMessage(_send_request(topic), metadata=metadata()).status.code == d.Code.OK
    assert admin(rmq_broker, "DELETE", f"{path}?key=message.type")[0] == 204
    assert admin(rmq_broker, "GET", path) == (200, {"owner": "team-a"})


class _RawProducer:
    """A producer of ``topic`` speaking raw gRPC: its Telemetry stream records the checks pushed to it."""

    def __init__(self, endpoint: str, topic: str) -> None:
        import queue

        import grpc
        from rocketmq.grpc_protocol import MessagingServiceStub

        from tests.rocketmq.test_rmq_core_stub import _pb

        d, s = self._pb = _pb()
        self.client_id = f"raw@{uuid.uuid4().hex[:8]}"
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = MessagingServiceStub(self.channel)
        self._out: queue.Queue[Any] = queue.Queue()
        self._out.put(
            s.TelemetryCommand(
                settings=d.Settings(
                    client_type=d.ClientType.PRODUCER,
                    publishing=d.Publishing(topics=[d.Resource(name=topic)]),
                )
            )
        )
        self._call = self.stub.Telemetry(iter(self._out.get, None), metadata=metadata(self.client_id))
        self.checks: queue.Queue[str] = queue.Queue()
        assert next(self._call).status.code == d.Code.OK
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for command in self._call:
                if command.HasField("recover_orphaned_transaction_command"):
                    self.checks.put(command.recover_orphaned_transaction_command.transaction_id)
        except Exception:  # noqa: BLE001 - the stream ends with the broker or close()
            return

    def send_half(self, topic: str, message_id: str) -> None:
        d, s = self._pb
        message = d.Message(topic=d.Resource(name=topic), body=b"counted")
        message.system_properties.message_id = message_id
        message.system_properties.body_encoding = d.Encoding.IDENTITY
        message.system_properties.message_type = d.MessageType.TRANSACTION
        answer = self.stub.SendMessage(
            s.SendMessageRequest(messages=[message]), metadata=metadata(self.client_id), timeout=10
        )
        assert answer.status.code == d.Code.OK

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self.channel.close()
        self._reader.join(5)


def test_check_counts_survive_a_restart(rmq_broker: BrokerProcess, pulsar_client: Any) -> None:
    """transaction_check_max 2: one check before a SIGKILL, so after the restart exactly one more check
    comes before the half is given up (two more if the count had been lost)."""
    import queue

    topic = _topic()
    message_id = f"0102FC0000000142960B18A1FE{uuid.uuid4().hex[:8].upper()}"
    given_up = pulsar_client.subscribe(
        "persistent://public/default/TRANS_CHECK_MAX_TIME_TOPIC",
        f"s-{topic}",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    assert rmq_broker.rocketmq_address is not None
    producer = _RawProducer(rmq_broker.rocketmq_address, topic)
    try:
        producer.send_half(topic, message_id)
        assert producer.checks.get(timeout=15) == message_id  # timeout 3 s, then the first check
        rmq_broker.restart(kill=True)
    finally:
        producer.close()
    assert rmq_broker.rocketmq_address is not None
    producer = _RawProducer(rmq_broker.rocketmq_address, topic)
    try:
        deadline = time.monotonic() + 25
        moved = None
        while moved is None and time.monotonic() < deadline:
            try:
                candidate = given_up.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            if candidate.properties().get("UNIQ_KEY") == message_id:
                moved = candidate
        assert moved is not None and moved.data() == b"counted"
        asked = []
        while True:
            try:
                asked.append(producer.checks.get_nowait())
            except queue.Empty:
                break
        assert asked == [message_id]
    finally:
        producer.close()


def test_a_half_survives_a_broker_kill_and_commits_once(
    rmq_broker: BrokerProcess, rmq_config: Callable[..., Any]
) -> None:
    from rocketmq import Producer

    from tests.rocketmq.test_rmq_core_stub import _pb

    d, s = _pb()
    topic = _topic()
    producer = Producer(rmq_config(), (topic,), checker=_Checker())
    producer.startup()
    try:
        receipt = producer.send(_message(topic, b"survivor"), producer.begin_transaction())
        resolved = producer.send(_message(topic, b"rolled"), transaction := producer.begin_transaction())
        transaction.rollback()
    finally:
        producer.shutdown()
    rmq_broker.restart(kill=True)  # SIGKILL between send and commit

    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub

    assert rmq_broker.rocketmq_address is not None
    with grpc.insecure_channel(rmq_broker.rocketmq_address) as channel:
        stub = MessagingServiceStub(channel)

        def end(transaction_id: str, topic_name: str = topic) -> Any:
            request = s.EndTransactionRequest(
                topic=d.Resource(name=topic_name),
                message_id=transaction_id,
                transaction_id=transaction_id,
                resolution=d.TransactionResolution.COMMIT,
                source=d.TransactionSource.SOURCE_CLIENT,
            )
            return stub.EndTransaction(request, metadata=metadata(), timeout=10)

        assert end(receipt.transaction_id, "elsewhere").status.code == d.Code.INTERNAL_SERVER_ERROR
        assert end(receipt.transaction_id).status.code == d.Code.OK
        assert end(receipt.transaction_id).status.code == d.Code.INTERNAL_SERVER_ERROR  # once only
        assert end(resolved.transaction_id).status.code == d.Code.INTERNAL_SERVER_ERROR  # rolled back before
    client = pulsar.Client(rmq_broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = _subscribe(client, topic)
        got = consumer.receive(timeout_millis=10_000)
        assert got.data() == b"survivor" and got.properties()["UNIQ_KEY"] == receipt.message_id
        assert _nothing(consumer, 700)
    finally:
        client.close()
