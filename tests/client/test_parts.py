"""The small objects the producer and the consumer are composed of, without a broker: the batcher and its
timer, the encoder's size limit and chunks, flow control, the acknowledger's timer and close, the receiver
queue and the blocking facade's listener bridge."""

from __future__ import annotations

import asyncio
import threading

import pytest

from quasar.client.batch import BatchMessageContainer, BuiltBatch
from quasar.client.config import ConsumerConfig, ConsumerType, InitialPosition, ProducerConfig
from quasar.client.consumer_acks import Acknowledger
from quasar.client.consumer_flow import FlowControl
from quasar.client.errors import AlreadyClosedError, MessageTooBigError, ReceiveTimeoutError
from quasar.client.message import Message, OutgoingMessage, ReceivedEntry
from quasar.client.producer_batch import Batcher
from quasar.client.producer_encode import MessageEncoder
from quasar.client.receiver_queue import ReceiverQueue
from quasar.client.sync_loop import ListenerBridge, LoopThread
from quasar.protocol import NEED_DATA, FrameDecoder, MessageId, SubType, pb
from quasar.protocol import enums as wire


class FakeCnx:
    """Records the frames written (decoded back to commands)."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.frames: list = []

    def write(self, data: bytes) -> None:
        self.decoder.receive_data(data)
        while (frame := self.decoder.next_frame()) is not NEED_DATA:
            self.frames.append(frame)

    write_now = write

    def commands(self, name: str) -> list:
        return [getattr(f.command, name) for f in self.frames if f.command.HasField(name)]


def _entry(consumer: object = None, flow: object = None) -> ReceivedEntry:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    return ReceivedEntry(3, 4, -1, 0, "persistent://public/default/t", metadata, 0, consumer, flow)


# -- vocabulary -------------------------------------------------------------------------------------------


def test_client_enums_are_the_protocol_vocabulary():
    assert InitialPosition is wire.InitialPosition
    assert ConsumerType.KeyShared.sub_type is SubType.Key_Shared
    assert [t.sub_type for t in ConsumerType] == list(SubType)
    assert ConsumerConfig(consumer_type=3).consumer_type is ConsumerType.KeyShared


# -- producer parts ---------------------------------------------------------------------------------------


async def test_batcher_sends_when_full_and_after_the_publish_delay():
    built: list[BuiltBatch] = []
    batcher = Batcher(BatchMessageContainer(2, 0, 1 << 20), 0.02, asyncio.get_running_loop(), built.append)
    assert batcher.add_plain(b"a", 0, None)
    assert batcher.timer is not None and not built
    assert batcher.add_plain(b"b", 1, None)  # full: closed at once, timer cancelled
    assert [b.num_messages for b in built] == [2] and batcher.timer is None
    batcher.add(OutgoingMessage(b"c", partition_key="k"), 2, None)
    await asyncio.sleep(0.05)
    assert [b.num_messages for b in built] == [2, 1] and batcher.is_empty


async def test_batcher_close_cancels_its_timer_and_discard_returns_the_waiters():
    built: list[BuiltBatch] = []
    batcher = Batcher(BatchMessageContainer(10, 0, 1 << 20), 0.01, asyncio.get_running_loop(), built.append)
    batcher.add_plain(b"a", 0, "w0")
    batcher.close()
    await asyncio.sleep(0.03)
    assert not built and batcher.timer is None
    assert batcher.discard() == ["w0"] and batcher.is_empty


def test_encoder_refuses_a_frame_above_max_message_size_and_chunks_when_enabled():
    encoder = MessageEncoder(7, ProducerConfig())
    encoder.connected("prod", b"", 1000)
    with pytest.raises(MessageTooBigError):
        encoder.encode_single(OutgoingMessage(b"x" * 2000), 0, None)
    (op,) = encoder.encode_single(OutgoingMessage(b"x" * 10), 5, "waiter")
    assert (op.sequence_id, op.num_messages, op.waiters, op.permits) == (5, 1, ["waiter"], 1)
    chunking = MessageEncoder(7, ProducerConfig(chunking_enabled=True, chunk_max_message_size=400))
    chunking.connected("prod", b"", 1000)
    ops = chunking.encode_single(OutgoingMessage(b"x" * 1000), 9, "waiter")
    assert len(ops) == 3  # ceil(1000 / 400)
    assert [op.waiters for op in ops] == [[], [], ["waiter"]]  # only the last chunk completes the message
    assert [op.permits for op in ops] == [0, 0, 1]


# -- consumer parts ---------------------------------------------------------------------------------------


def test_flow_control_refills_at_half_the_receiver_queue():
    cnx = FakeCnx()
    flow = FlowControl(4, 10, unacked=None, track_last_dequeued=False)
    flow.attach(cnx)  # type: ignore[arg-type]
    assert [c.messagePermits for c in cnx.commands("flow")] == [10]
    message = Message(b"x", _entry(flow=flow))
    for _ in range(4):
        flow.handed_out(message)
    assert len(cnx.commands("flow")) == 1
    flow.handed_out(message)
    assert [c.messagePermits for c in cnx.commands("flow")] == [10, 5]


def test_flow_control_of_a_zero_queue_and_of_a_reader():
    cnx = FakeCnx()
    zero = FlowControl(4, 0, unacked=None, track_last_dequeued=False)
    zero.attach(cnx)  # type: ignore[arg-type]
    zero.on_empty_receive()
    assert [c.messagePermits for c in cnx.commands("flow")] == [1]
    reader = FlowControl(5, 10, unacked=None, track_last_dequeued=True)
    message = Message(b"x", _entry(flow=reader))
    reader.handed_out(message)
    assert reader.last_dequeued == MessageId(3, 4)
    reader.forget_last_dequeued()
    assert reader.last_dequeued is None


async def test_acknowledger_groups_acks_on_its_timer_and_refuses_acks_after_close():
    cnx = FakeCnx()
    config = ConsumerConfig(acknowledgements_group_time_ms=20)
    acker = Acknowledger(1, "t", config, shared=False, unacked=None, ready=asyncio.Event())
    acker.attach(cnx)  # type: ignore[arg-type]
    acker.acknowledge(MessageId(3, 4))
    assert not cnx.commands("ack")
    await asyncio.sleep(0.05)
    (ack,) = cnx.commands("ack")
    assert (ack.message_id[0].ledgerId, ack.message_id[0].entryId) == (3, 4)
    acker.acknowledge(MessageId(3, 5))
    acker.close()  # flushes now and cancels the timer
    assert len(cnx.commands("ack")) == 2
    with pytest.raises(AlreadyClosedError):
        acker.acknowledge(MessageId(3, 6))


async def test_acknowledger_refuses_cumulative_acks_on_shared_subscriptions():
    acker = Acknowledger(1, "t", ConsumerConfig(), shared=True, unacked=None, ready=asyncio.Event())
    with pytest.raises(ValueError, match="Shared"):
        acker.acknowledge_cumulative(MessageId(1, 1))
    with pytest.raises(TypeError):
        acker.acknowledge("not an id")  # type: ignore[arg-type]


async def test_receiver_queue_hands_out_and_wakes_receivers_on_close():
    handed: list[Message] = []
    flow = type("Flow", (), {"handed_out": lambda self, m: handed.append(m)})()
    queue = ReceiverQueue("consumer on t")
    message = Message(b"x", _entry(flow=flow))
    queue.enqueue_many([message])
    assert await queue.receive(0) is message and handed == [message]
    with pytest.raises(ReceiveTimeoutError):
        await queue.receive(10)
    waiting = asyncio.ensure_future(queue.receive())
    await asyncio.sleep(0)
    queue.close()
    with pytest.raises(AlreadyClosedError):
        await waiting
    assert queue.drop_from(None) == 0


# -- blocking facade --------------------------------------------------------------------------------------


def test_listener_bridge_passes_the_bound_facade_object():
    runner = LoopThread()
    try:
        seen: list[tuple[object, Message]] = []
        done = threading.Event()

        def listener(target: object, message: Message) -> None:
            seen.append((target, message))
            done.set()

        bridge = ListenerBridge(listener, runner)
        message = Message(b"x", _entry())
        future = asyncio.run_coroutine_threadsafe(bridge("async consumer", message), runner.loop)
        bridge.bind("facade")  # a message that came first waits for the facade object
        future.result(5)
        assert done.wait(5) and seen == [("facade", message)]
        with pytest.raises(TypeError):
            ListenerBridge("not callable", runner)  # type: ignore[arg-type]
    finally:
        runner.stop()
    with pytest.raises(AlreadyClosedError):
        runner.run(asyncio.sleep(0))
