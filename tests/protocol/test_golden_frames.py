"""Golden frames: every builder's bytes equal a frame built by hand from the reference's field tables
(reference/pulsar-protocol.md §3-§6), and decoding the hand-built frame gives the command back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from quasar import protocol as p
from quasar.protocol import CommandType as T
from quasar.protocol import Frame, MessageId, ServerError

from ._helpers import (
    MODES,
    base_command,
    f_bytes,
    f_double,
    f_varint,
    feed,
    payload_frame,
    simple_frame,
    span,
)

U64_MAX = (1 << 64) - 1
STORED = span(f_bytes(1, "fake-0") + f_varint(2, 0) + f_varint(3, 1_700_000_000_000), b"hello")


def mid(ledger: int, entry: int, *extra: bytes) -> bytes:
    return f_varint(1, ledger) + f_varint(2, entry) + b"".join(extra)


@dataclass
class Golden:
    built: bytes
    expected: bytes
    check: Callable[[Frame], object]


def _join(parts: list[bytes | memoryview]) -> bytes:
    return b"".join(parts)


GOLDEN: dict[str, Golden] = {
    # ------------------------------------------------------------------------ both directions
    "ping": Golden(p.new_ping(), bytes.fromhex("00000009 00000005 08 12 92 01 00"), lambda f: f.command.ping),
    "pong": Golden(p.new_pong(), bytes.fromhex("00000009 00000005 08 13 9a 01 00"), lambda f: f.command.pong),
    "close_producer": Golden(
        p.new_close_producer(3, 15),
        simple_frame(base_command(15, f_varint(1, 3) + f_varint(2, 15))),
        lambda f: f.body.producer_id == 3 and f.body.request_id == 15,
    ),
    "close_consumer_assigned": Golden(
        p.new_close_consumer(0, 16, assigned_broker_service_url="pulsar://b:6650"),
        simple_frame(base_command(16, f_varint(1, 0) + f_varint(2, 16) + f_bytes(3, "pulsar://b:6650"))),
        lambda f: f.body.assignedBrokerServiceUrl == "pulsar://b:6650",
    ),
    # ------------------------------------------------------------------------ broker -> client
    "connected": Golden(
        p.new_connected("Quasar 0.1.0", 20, 5 * 1024 * 1024),
        simple_frame(base_command(3, f_bytes(1, "Quasar 0.1.0") + f_varint(2, 20) + f_varint(3, 5242880))),
        lambda f: f.body.server_version == "Quasar 0.1.0" and f.body.max_message_size == 5242880,
    ),
    "partitioned_metadata_response": Golden(
        p.new_partitioned_metadata_response(1, 3),
        simple_frame(base_command(22, f_varint(1, 3) + f_varint(2, 1) + f_varint(3, 0))),
        lambda f: f.body.HasField("response") and f.body.partitions == 3,
    ),
    "partitioned_metadata_response_zero": Golden(
        p.new_partitioned_metadata_response(1, 0),
        simple_frame(base_command(22, f_varint(1, 0) + f_varint(2, 1) + f_varint(3, 0))),
        lambda f: f.body.HasField("partitions") and f.body.partitions == 0,
    ),
    "partitioned_metadata_error": Golden(
        p.new_partitioned_metadata_error(4, ServerError.TopicNotFound, "no such topic"),
        simple_frame(
            base_command(22, f_varint(2, 4) + f_varint(3, 1) + f_varint(4, 11) + f_bytes(5, "no such topic"))
        ),
        lambda f: f.body.error == ServerError.TopicNotFound,
    ),
    "lookup_response": Golden(
        p.new_lookup_response(2, "pulsar://127.0.0.1:6650"),
        simple_frame(
            base_command(
                24,
                f_bytes(1, "pulsar://127.0.0.1:6650")
                + f_varint(3, 1)
                + f_varint(4, 2)
                + f_varint(5, 1)
                + f_varint(8, 0),
            )
        ),
        lambda f: f.body.response == 1 and f.body.authoritative,
    ),
    "lookup_error": Golden(
        p.new_lookup_error(2, ServerError.ServiceNotReady, "busy"),
        simple_frame(base_command(24, f_varint(3, 2) + f_varint(4, 2) + f_varint(6, 6) + f_bytes(7, "busy"))),
        lambda f: f.body.response == 2 and f.body.message == "busy",
    ),
    "producer_success": Golden(
        p.new_producer_success(1, "standalone-0-3"),
        simple_frame(
            base_command(
                17, f_varint(1, 1) + f_bytes(2, "standalone-0-3") + f_varint(3, -1) + f_bytes(4, b"")
            )
        ),
        lambda f: f.body.last_sequence_id == -1 and f.body.HasField("schema_version"),
    ),
    "producer_success_last_sequence": Golden(
        p.new_producer_success(1, "p", 41, b"\x00\x01"),
        simple_frame(
            base_command(17, f_varint(1, 1) + f_bytes(2, "p") + f_varint(3, 41) + f_bytes(4, b"\0\1"))
        ),
        lambda f: f.body.last_sequence_id == 41,
    ),
    "send_receipt": Golden(
        p.new_send_receipt(0, 5, 7, 3),
        simple_frame(base_command(7, f_varint(1, 0) + f_varint(2, 5) + f_bytes(3, mid(7, 3)))),
        lambda f: (f.body.message_id.ledgerId, f.body.message_id.entryId) == (7, 3),
    ),
    "send_receipt_highest": Golden(
        p.new_send_receipt(0, 5, 7, 3, highest_sequence_id=9),
        simple_frame(
            base_command(7, f_varint(1, 0) + f_varint(2, 5) + f_bytes(3, mid(7, 3)) + f_varint(4, 9))
        ),
        lambda f: f.body.highest_sequence_id == 9,
    ),
    "send_error": Golden(
        p.new_send_error(0, 5, ServerError.ChecksumError, "Checksum failed on the broker"),
        simple_frame(
            base_command(
                8,
                f_varint(1, 0)
                + f_varint(2, 5)
                + f_varint(3, 9)
                + f_bytes(4, "Checksum failed on the broker"),
            )
        ),
        lambda f: f.body.error == ServerError.ChecksumError,
    ),
    "success": Golden(
        p.new_success(16), simple_frame(base_command(13, f_varint(1, 16))), lambda f: f.body.request_id == 16
    ),
    "error": Golden(
        p.new_error(1, ServerError.ProducerBusy, "busy"),
        simple_frame(base_command(14, f_varint(1, 1) + f_varint(2, 16) + f_bytes(3, "busy"))),
        lambda f: f.body.error == ServerError.ProducerBusy,
    ),
    "error_connection_level": Golden(
        p.new_error(-1, ServerError.AuthenticationError, "denied"),
        simple_frame(base_command(14, f_varint(1, U64_MAX) + f_varint(2, 3) + f_bytes(3, "denied"))),
        lambda f: f.body.request_id == U64_MAX,
    ),
    "message": Golden(
        _join(p.new_message(0, 7, 0, -1, STORED)),
        payload_frame(base_command(9, f_varint(1, 0) + f_bytes(2, mid(7, 0, f_varint(3, -1)))), STORED),
        lambda f: f.body.message_id.partition == -1 and bytes(f.headers_and_payload) == STORED,
    ),
    "message_redelivered_partial_batch": Golden(
        _join(p.new_message(2, 7, 1, 3, STORED, redelivery_count=1, ack_set=[5, -1])),
        payload_frame(
            base_command(
                9,
                f_varint(1, 2)
                + f_bytes(2, mid(7, 1, f_varint(3, 3)))
                + f_varint(3, 1)
                + f_varint(4, 5)
                + f_varint(4, -1),
            ),
            STORED,
        ),
        lambda f: list(f.body.ack_set) == [5, -1] and f.body.redelivery_count == 1,
    ),
    "ack_response": Golden(
        p.new_ack_response(0, 8),
        simple_frame(base_command(38, f_varint(1, 0) + f_varint(6, 8))),
        lambda f: not f.body.HasField("error"),
    ),
    "ack_response_error": Golden(
        p.new_ack_response(0, 8, ServerError.TransactionConflict, "conflict"),
        simple_frame(
            base_command(38, f_varint(1, 0) + f_varint(4, 23) + f_bytes(5, "conflict") + f_varint(6, 8))
        ),
        lambda f: f.body.error == 23,
    ),
    "get_last_message_id_response": Golden(
        p.new_get_last_message_id_response(3, 7, 9, 2, 4, mark_delete=(7, 5)),
        simple_frame(
            base_command(
                30,
                f_bytes(1, mid(7, 9, f_varint(3, 2) + f_varint(4, 4)))
                + f_varint(2, 3)
                + f_bytes(3, mid(7, 5)),
            )
        ),
        lambda f: f.body.last_message_id.batch_index == 4,
    ),
    "get_last_message_id_response_empty_topic": Golden(
        p.new_get_last_message_id_response(3, -1, -1, -1, -1),
        simple_frame(
            base_command(
                30, f_bytes(1, mid(U64_MAX, U64_MAX, f_varint(3, -1) + f_varint(4, -1))) + f_varint(2, 3)
            )
        ),
        lambda f: MessageId.from_pb(f.body.last_message_id) == p.EARLIEST,
    ),
    "get_topics_of_namespace_response": Golden(
        p.new_get_topics_of_namespace_response(
            5, ["persistent://public/default/a", "persistent://public/default/b"]
        ),
        simple_frame(
            base_command(
                33,
                f_varint(1, 5)
                + f_bytes(2, "persistent://public/default/a")
                + f_bytes(2, "persistent://public/default/b"),
            )
        ),
        lambda f: len(f.body.topics) == 2,
    ),
    "get_schema_error": Golden(
        p.new_get_schema_error(6, ServerError.TopicNotFound, "no schema"),
        simple_frame(base_command(35, f_varint(1, 6) + f_varint(2, 11) + f_bytes(3, "no schema"))),
        lambda f: f.body.HasField("error_code"),
    ),
    "active_consumer_change": Golden(
        p.new_active_consumer_change(1, True),
        simple_frame(base_command(31, f_varint(1, 1) + f_varint(2, 1))),
        lambda f: f.body.is_active,
    ),
    "consumer_stats_error": Golden(
        p.new_consumer_stats_error(2, ServerError.ConsumerNotFound, "gone"),
        simple_frame(base_command(26, f_varint(1, 2) + f_varint(2, 13) + f_bytes(3, "gone"))),
        lambda f: f.body.error_code == 13,
    ),
    "consumer_stats_response": Golden(
        p.new_consumer_stats_response(
            2, msg_rate_out=1.5, consumer_name="c", available_permits=10, type="Shared"
        ),
        simple_frame(
            base_command(
                26,
                f_varint(1, 2)
                + f_double(4, 1.5)
                + f_double(5, 0.0)
                + f_double(6, 0.0)
                + f_bytes(7, "c")
                + f_varint(8, 10)
                + f_varint(9, 0)
                + f_varint(10, 0)
                + f_bytes(11, "")
                + f_bytes(12, "")
                + f_bytes(13, "Shared")
                + f_double(14, 0.0)
                + f_varint(15, 0)
                + f_double(16, 0.0),
            )
        ),
        lambda f: f.body.msgRateOut == 1.5,
    ),
    # ------------------------------------------------------------------------ client -> broker
    "connect": Golden(
        # Observed from the C++ 4.2.0 client: totalSize 0x29, commandSize 0x25 (reference §1.1).
        p.new_connect(
            "Pulsar-CPP-v4.2.0", 20, supports_auth_refresh=True, supports_broker_entry_metadata=True
        ),
        bytes.fromhex("00000029 00000025")
        + base_command(
            2,
            f_bytes(1, "Pulsar-CPP-v4.2.0")
            + f_varint(4, 20)
            + f_bytes(5, "none")
            + f_bytes(10, f_varint(1, 1) + f_varint(2, 1)),
        ),
        lambda f: f.body.client_version == "Pulsar-CPP-v4.2.0",
    ),
    "partitioned_metadata": Golden(
        p.new_partitioned_metadata("persistent://public/default/t1", 1),
        simple_frame(base_command(21, f_bytes(1, "persistent://public/default/t1") + f_varint(2, 1))),
        lambda f: f.body.topic.endswith("/t1"),
    ),
    "lookup": Golden(
        p.new_lookup("persistent://public/default/t1", 2),
        simple_frame(
            base_command(
                23,
                f_bytes(1, "persistent://public/default/t1")
                + f_varint(2, 2)
                + f_varint(3, 0)
                + f_bytes(7, ""),
            )
        ),
        lambda f: f.body.HasField("advertised_listener_name"),
    ),
    "producer": Golden(
        # Observed (no name given): {topic, producer_id:0, request_id:1, encrypted:false, epoch:0,
        # user_provided_producer_name:false, producer_access_mode:0}
        p.new_producer("persistent://public/default/t1", 0, 1),
        simple_frame(
            base_command(
                5,
                f_bytes(1, "persistent://public/default/t1")
                + f_varint(2, 0)
                + f_varint(3, 1)
                + f_varint(5, 0)
                + f_varint(8, 0)
                + f_varint(9, 0)
                + f_varint(10, 0),
            )
        ),
        lambda f: not f.body.user_provided_producer_name,
    ),
    "producer_named": Golden(
        p.new_producer("persistent://public/default/t1", 0, 1, producer_name="me", metadata={"k": "v"}),
        simple_frame(
            base_command(
                5,
                f_bytes(1, "persistent://public/default/t1")
                + f_varint(2, 0)
                + f_varint(3, 1)
                + f_bytes(4, "me")
                + f_varint(5, 0)
                + f_bytes(6, f_bytes(1, "k") + f_bytes(2, "v"))
                + f_varint(8, 0)
                + f_varint(9, 1)
                + f_varint(10, 0),
            )
        ),
        lambda f: f.body.user_provided_producer_name and f.body.metadata[0].key == "k",
    ),
    "send": Golden(
        p.new_send(0, 0, STORED),
        payload_frame(base_command(6, f_varint(1, 0) + f_varint(2, 0)), STORED),
        lambda f: f.checksum_ok is True and not f.body.HasField("num_messages"),
    ),
    "send_batch_chunk": Golden(
        p.new_send(1, 10, STORED, 3, is_chunk=True),
        payload_frame(
            base_command(6, f_varint(1, 1) + f_varint(2, 10) + f_varint(3, 3) + f_varint(7, 1)), STORED
        ),
        lambda f: f.body.num_messages == 3 and f.body.is_chunk,
    ),
    "subscribe": Golden(
        # Observed: {topic, subscription:"sub1", subType:0, consumer_id:0, request_id:0,
        # consumer_name:"2accae3ab4", priority_level:0, durable:true, read_compacted:false, initialPosition:1,
        # replicate_subscription_state:false}
        p.new_subscribe(
            "persistent://public/default/t1", "sub1", 0, 0, 0, consumer_name="2accae3ab4", initial_position=1
        ),
        simple_frame(
            base_command(
                4,
                f_bytes(1, "persistent://public/default/t1")
                + f_bytes(2, "sub1")
                + f_varint(3, 0)
                + f_varint(4, 0)
                + f_varint(5, 0)
                + f_bytes(6, "2accae3ab4")
                + f_varint(7, 0)
                + f_varint(8, 1)
                + f_varint(11, 0)
                + f_varint(13, 1)
                + f_varint(14, 0),
            )
        ),
        lambda f: f.body.initialPosition == 1,
    ),
    "subscribe_reader": Golden(
        p.new_subscribe("t", "reader-1", 0, 1, 2, durable=False, start_message_id=MessageId(7, 3, 0, 2)),
        simple_frame(
            base_command(
                4,
                f_bytes(1, "t")
                + f_bytes(2, "reader-1")
                + f_varint(3, 0)
                + f_varint(4, 1)
                + f_varint(5, 2)
                + f_bytes(6, "")
                + f_varint(7, 0)
                + f_varint(8, 0)
                + f_bytes(9, mid(7, 3, f_varint(4, 2)))
                + f_varint(11, 0)
                + f_varint(13, 0)
                + f_varint(14, 0),
            )
        ),
        lambda f: not f.body.durable and f.body.start_message_id.batch_index == 2,
    ),
    "flow": Golden(
        p.new_flow(0, 1000),
        simple_frame(base_command(11, f_varint(1, 0) + f_varint(2, 1000))),
        lambda f: f.body.messagePermits == 1000,
    ),
    "ack": Golden(
        # Observed: ACK {consumer_id:0, ack_type:0, message_id:[{7,0},{7,1},{7,2}]}
        p.new_ack(0, [(7, 0), (7, 1), MessageId(7, 2, 5, 1)], p.AckType.Individual),
        simple_frame(
            base_command(
                10,
                f_varint(1, 0)
                + f_varint(2, 0)
                + f_bytes(3, mid(7, 0))
                + f_bytes(3, mid(7, 1))
                + f_bytes(3, mid(7, 2)),
            )
        ),
        lambda f: len(f.body.message_id) == 3,
    ),
    "ack_batch_index_with_receipt": Golden(
        p.new_ack(0, [(7, 0)], p.AckType.Individual, 4, ack_sets=[[5]]),
        simple_frame(
            base_command(
                10, f_varint(1, 0) + f_varint(2, 0) + f_bytes(3, mid(7, 0, f_varint(5, 5))) + f_varint(8, 4)
            )
        ),
        lambda f: list(f.body.message_id[0].ack_set) == [5],
    ),
    "ack_cumulative": Golden(
        p.new_ack(0, [(7, 2)], p.AckType.Cumulative),
        simple_frame(base_command(10, f_varint(1, 0) + f_varint(2, 1) + f_bytes(3, mid(7, 2)))),
        lambda f: f.body.ack_type == 1,
    ),
    "redeliver_all": Golden(
        p.new_redeliver_unacknowledged_messages(0),
        simple_frame(base_command(20, f_varint(1, 0))),
        lambda f: len(f.body.message_ids) == 0,
    ),
    "redeliver_ids": Golden(
        p.new_redeliver_unacknowledged_messages(0, [(7, 1)]),
        simple_frame(base_command(20, f_varint(1, 0) + f_bytes(2, mid(7, 1)))),
        lambda f: f.body.message_ids[0].entryId == 1,
    ),
    "unsubscribe": Golden(
        p.new_unsubscribe(0, 3),
        simple_frame(base_command(12, f_varint(1, 0) + f_varint(2, 3))),
        lambda f: True,
    ),
    "seek_earliest": Golden(
        # Observed: SEEK to MessageId.earliest carries ledgerId = entryId = 2^64-1.
        p.new_seek(0, 4, message_id=p.EARLIEST),
        simple_frame(base_command(28, f_varint(1, 0) + f_varint(2, 4) + f_bytes(3, mid(U64_MAX, U64_MAX)))),
        lambda f: MessageId.from_pb(f.body.message_id) == p.EARLIEST,
    ),
    "seek_time": Golden(
        p.new_seek(0, 4, message_publish_time=1_700_000_000_000),
        simple_frame(base_command(28, f_varint(1, 0) + f_varint(2, 4) + f_varint(4, 1_700_000_000_000))),
        lambda f: f.body.message_publish_time == 1_700_000_000_000,
    ),
    "get_last_message_id": Golden(
        p.new_get_last_message_id(0, 5),
        simple_frame(base_command(29, f_varint(1, 0) + f_varint(2, 5))),
        lambda f: True,
    ),
    "get_topics_of_namespace": Golden(
        p.new_get_topics_of_namespace(6, "public/default"),
        simple_frame(base_command(32, f_varint(1, 6) + f_bytes(2, "public/default") + f_varint(3, 0))),
        lambda f: f.body.namespace == "public/default",
    ),
    "get_schema": Golden(
        p.new_get_schema(7, "persistent://public/default/t1"),
        simple_frame(base_command(34, f_varint(1, 7) + f_bytes(2, "persistent://public/default/t1"))),
        lambda f: not f.body.HasField("schema_version"),
    ),
    "consumer_stats": Golden(
        p.new_consumer_stats(8, 1),
        simple_frame(base_command(25, f_varint(1, 8) + f_varint(4, 1))),
        lambda f: f.body.consumer_id == 1,
    ),
}


@pytest.mark.parametrize("name", GOLDEN)
def test_builder_matches_hand_built_frame(name: str) -> None:
    golden = GOLDEN[name]
    assert golden.built.hex(" ") == golden.expected.hex(" ")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", GOLDEN)
def test_hand_built_frame_decodes(name: str, mode: str) -> None:
    golden = GOLDEN[name]
    frames = feed(mode, golden.expected)
    assert len(frames) == 1
    frame = frames[0]
    assert frame.command.type == frame.type
    assert golden.check(frame)
    # Re-encoding the decoded command gives the same bytes back.
    if frame.headers_and_payload is None:
        assert p.encode_command(frame.command) == golden.expected
    else:
        assert b"".join(p.encode_payload_command(frame.command, frame.headers_and_payload)) == golden.expected


def test_every_broker_to_client_type_handled_by_the_cpp_client_has_a_golden_frame() -> None:
    decoded = {feed("whole", g.expected)[0].type for g in GOLDEN.values()}
    handled_by_client = {
        T.CONNECTED, T.SEND_RECEIPT, T.SEND_ERROR, T.MESSAGE, T.SUCCESS, T.ERROR, T.CLOSE_PRODUCER,
        T.CLOSE_CONSUMER, T.PRODUCER_SUCCESS, T.PING, T.PONG, T.PARTITIONED_METADATA_RESPONSE,
        T.LOOKUP_RESPONSE, T.CONSUMER_STATS_RESPONSE, T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.ACTIVE_CONSUMER_CHANGE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE,
    }  # fmt: skip
    assert handled_by_client <= decoded


def test_encode_headers_and_payload_matches_hand_built_span() -> None:
    metadata = p.pb.MessageMetadata(producer_name="fake-0", sequence_id=0, publish_time=1_700_000_000_000)
    assert p.encode_headers_and_payload(metadata, b"hello") == STORED
    assert p.encode_headers_and_payload(metadata.SerializeToString(), b"hello") == STORED
    assert p.encode_headers_and_payload(metadata, b"hello", checksum=False) == STORED[6:]
