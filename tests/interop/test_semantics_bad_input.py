"""Bad acknowledgements and permits on a raw connection: each gets Pulsar's error and changes nothing stored."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pulsar
import pytest

from quasar.protocol import CommandType, requests
from tests.interop.test_bad_input import RawConnection

pytestmark = pytest.mark.interop

SHARED = 1
INDIVIDUAL, CUMULATIVE = 0, 1
NOT_ALLOWED = 22


def backlog(broker, topic: str, subscription: str) -> int:
    local = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/persistent/{local}/stats", timeout=10) as r:
        return json.loads(r.read())["subscriptions"][subscription]["msgBacklog"]


def test_bad_acks_get_errors_and_change_nothing(broker):
    topic = f"persistent://public/default/badack-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    conn = RawConnection(broker.service_url)
    try:
        conn.send(requests.new_subscribe(topic, "raw", SHARED, 1, 1, initial_position=1))
        conn.expect(CommandType.SUCCESS)
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"{i}".encode())
        conn.send(requests.new_flow(1, 0xFFFFFFFF))
        conn.send(requests.new_flow(1, 0xFFFFFFFF))  # permits accumulate without overflowing anything
        ids = []
        for _ in range(3):
            message_id = conn.expect(CommandType.MESSAGE).command.message.message_id
            ids.append((message_id.ledgerId, message_id.entryId))

        def ack(message_ids, ack_type, request_id, ack_sets=None):
            conn.send(requests.new_ack(1, message_ids, ack_type, request_id, ack_sets=ack_sets))
            return conn.expect(CommandType.ACK_RESPONSE).command.ackResponse

        missing = ack([(ids[0][0] + 99, 0)], INDIVIDUAL, 10)
        assert missing.HasField("error") and missing.request_id == 10
        too_long = ack([ids[1]], INDIVIDUAL, 11, ack_sets=[[1, 1, 1]])  # 3 words for a 1-message entry
        assert too_long.error == NOT_ALLOWED
        ignored = ack([ids[2]], CUMULATIVE, 12)  # Pulsar ignores cumulative acks on Shared
        assert not ignored.HasField("error")
        assert backlog(broker, topic, "raw") == 3  # nothing was acknowledged
        assert not ack([ids[0]], INDIVIDUAL, 13).HasField("error")
        assert backlog(broker, topic, "raw") == 2
    finally:
        conn.close()
        client.close()
