"""Keyed messages land on the same partition from the official client and from ours, on topics of 7 and 13
partitions, read back by partition. pulsar-client 3.13 has no ``hashing_scheme`` option: it always uses the C++
default, ``HashingScheme::BoostHash``; ours defaults to BoostHash too."""

from __future__ import annotations

import random

import pulsar
import pytest

import quasar.client as qc
from quasar.client.routing import boost_hash
from tests.interop.helpers import create_partitioned, topic_name

pytestmark = pytest.mark.interop


def _keys() -> list[str]:
    rng = random.Random(7)
    keys = ["a", "ab", "abc", "abcd", "hello", "key-42", "héllo", "日本語", "😀", "k" * 300]
    for length in range(1, 40):
        alphabet = "abcXYZ019-_/é日😀" if length % 3 else "abcdefghijklmnopqrstuvwxyz"
        keys.append("".join(rng.choice(alphabet) for _ in range(length)))
    return keys


def _partition_of_each_key(consumer, count: int) -> dict[str, int]:
    landed: dict[str, int] = {}
    for _ in range(count):
        message = consumer.receive(15_000)
        landed[message.partition_key()] = int(message.topic_name().rsplit("-partition-", 1)[1])
        consumer.acknowledge(message)
    return landed


@pytest.mark.parametrize("partitions", [7, 13])
def test_same_key_same_partition_as_the_official_boost_hash(broker, partitions: int):
    keys = _keys()
    theirs_topic, ours_topic = topic_name("boost-off"), topic_name("boost-q")
    create_partitioned(broker, theirs_topic, partitions)
    create_partitioned(broker, ours_topic, partitions)
    official = pulsar.Client(
        broker.service_url, operation_timeout_seconds=15, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )
    mine = qc.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        reader = official.subscribe(theirs_topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = official.create_producer(theirs_topic, batching_enabled=False)  # C++ default: BoostHash
        sent_theirs = {key: producer.send(b"x", partition_key=key).partition() for key in keys}
        producer.close()
        landed_theirs = _partition_of_each_key(reader, len(keys))

        our_reader = mine.subscribe(ours_topic, "s", initial_position=qc.InitialPosition.Earliest)
        our_producer = mine.create_producer(ours_topic, batching_enabled=False)  # default: BoostHash
        sent_ours = {key: our_producer.send(b"x", partition_key=key).partition for key in keys}
        our_producer.close()
        landed_ours = _partition_of_each_key(our_reader, len(keys))
    finally:
        mine.close()
        official.close()
    assert landed_theirs == sent_theirs
    assert landed_ours == sent_ours
    assert landed_ours == landed_theirs
    assert landed_ours == {key: boost_hash(key) % partitions for key in keys}
    assert len(set(landed_ours.values())) > 1
