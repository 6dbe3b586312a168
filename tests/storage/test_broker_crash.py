"""Crash safety end to end: a real ``quasar standalone`` process under sustained SYNC_FLUSH publishing from
the official pulsar-client is SIGKILLed at random moments; after every restart each receipted message must be
readable, byte for byte, in order, exactly once, under the message id its receipt carried."""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from pathlib import Path

import pytest

from quasar.testing.broker_process import BrokerProcess

pulsar = pytest.importorskip("pulsar")
pytestmark = pytest.mark.interop

TOPIC = "persistent://public/default/crash-test"
SETTINGS = """
flush_disk_type = "SYNC_FLUSH"
commit_log_file_size = 262144
mapped_file_size_consume_queue = 2000
max_hash_slot_num = 1024
max_index_num = 4096
managed_ledger_max_entries_per_ledger = 400
managed_ledger_min_ledger_rollover_time_ms = 0
"""


def payload_for(seq: int) -> bytes:
    """A deterministic payload of 20..~1100 bytes whose first 10 bytes are the sequence number."""
    digest = hashlib.sha256(seq.to_bytes(8, "big")).digest()
    return f"{seq:09d}|".encode() + digest * (seq % 35)


def _publish_until_killed(broker: BrokerProcess, first_seq: int, run_s: float) -> tuple[dict, int]:
    """Publish from ``first_seq`` on for ``run_s`` seconds, SIGKILL the broker, return the receipts
    (seq -> (ledger id, entry id)) and the next sequence number."""
    assert broker.service_url is not None
    receipts: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
    producer = client.create_producer(
        TOPIC,
        batching_enabled=False,
        block_if_queue_full=True,
        max_pending_messages=200,
        send_timeout_millis=5000,
    )

    def on_receipt(seq: int, result: object, message_id: object) -> None:
        if result == pulsar.Result.Ok:
            with lock:
                receipts[seq] = (message_id.ledger_id(), message_id.entry_id())

    seq = first_seq
    deadline = time.monotonic() + run_s
    while time.monotonic() < deadline:
        producer.send_async(
            payload_for(seq), lambda r, m, s=seq: on_receipt(s, r, m), partition_key=f"key-{seq % 11}"
        )
        seq += 1
    broker.kill()
    with lock:
        kept = dict(receipts)
    try:
        client.close()
    except pulsar.PulsarException:  # NotConnected: the broker is gone, which is the point
        pass
    return kept, seq


def _keep_backlog(broker: BrokerProcess) -> None:
    """A durable subscription at the start, so the ledger trims nothing (Pulsar: without a subscription or a
    retention policy, closed ledgers are deleted)."""
    assert broker.service_url is not None
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(TOPIC, "keeper", initial_position=pulsar.InitialPosition.Earliest).close()
    finally:
        client.close()


def _read_all(broker: BrokerProcess) -> list[tuple[int, tuple[int, int], bytes]]:
    assert broker.service_url is not None
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        found = []
        while True:
            try:
                message = reader.read_next(timeout_millis=2000)
            except pulsar.Timeout:
                break
            data = message.data()
            message_id = message.message_id()
            found.append((int(data[:9]), (message_id.ledger_id(), message_id.entry_id()), data))
        reader.close()
        return found
    finally:
        client.close()


def _crash_rounds(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    settings = tmp_path / "broker.toml"
    settings.write_text(SETTINGS)
    broker = BrokerProcess(tmp_path / "data", extra_args=("--config", str(settings)))
    receipts: dict[int, tuple[int, int]] = {}
    seq = 0
    try:
        broker.start()
        _keep_backlog(broker)
        for _ in range(rounds):
            kept, seq = _publish_until_killed(broker, seq, rng.uniform(0.15, 0.9))
            receipts.update(kept)
            broker.start()  # recovers after the SIGKILL
        found = _read_all(broker)
    finally:
        broker.stop()
    seqs = [s for s, _, _ in found]
    assert seqs == sorted(set(seqs)), f"seed {seed}: out of order or duplicated"
    by_seq = {s: (message_id, data) for s, message_id, data in found}
    missing = sorted(set(receipts) - set(by_seq))
    assert not missing, f"seed {seed}: {len(missing)} receipted messages lost, first {missing[:5]}"
    for s, message_id in receipts.items():
        assert by_seq[s] == (message_id, payload_for(s)), f"seed {seed}: message {s} differs"
    assert len(receipts) > rounds  # the test did publish


def _seed() -> int:
    """A fresh seed, or ``QUASAR_CRASH_SEED`` to replay a failure (the seed is in every assertion message)."""
    return int(os.environ.get("QUASAR_CRASH_SEED") or random.randrange(2**32))


def test_sigkill_under_sync_publishing_loses_no_receipted_message(tmp_path: Path):
    _crash_rounds(tmp_path, rounds=3, seed=_seed())


@pytest.mark.slow
def test_twenty_sigkills_under_sync_publishing(tmp_path: Path):
    _crash_rounds(tmp_path, rounds=20, seed=_seed())
