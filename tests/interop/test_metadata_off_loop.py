"""Issue 12 §1: creating many topics and subscriptions never stalls the broker's event loop.

While 200 topics and 500 durable subscriptions are created concurrently (four official clients, one per
thread), a producer publishes at a fixed 200 msg/s on another topic. The broker's own loop-lag monitor (an
owned ticker task, ``GET /admin/v2/broker-stats/loop-lag``) must report no tick later than 50 ms: metadata
reads and fsyncs run on the metadata store's writer thread, not on the loop.
"""

from __future__ import annotations

import threading
import time
import uuid

import pulsar
import pytest

from .helpers import admin, new_client

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPICS = 200
SUBSCRIPTIONS = 500
WORKERS = 4
RATE = 200.0
MAX_LAG_MS = 50.0


def _create(service_url: str, prefix: str, worker: int, errors: list[BaseException]) -> None:
    """Worker ``worker``: its share of the topics, each with a producer and 2 or 3 subscriptions."""
    client = pulsar.Client(
        service_url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        for t in range(worker, TOPICS, WORKERS):
            topic = f"persistent://public/default/{prefix}-t{t}"
            producer = client.create_producer(topic)
            subs = 3 if t < SUBSCRIPTIONS - 2 * TOPICS else 2  # 100 topics x 3 + 100 x 2 = 500
            for k in range(subs):
                client.subscribe(topic, f"sub-{k}").close()
            producer.close()
    except pulsar.PulsarException as exc:  # reported by the test thread
        errors.append(exc)
    finally:
        client.close()


class _Paced:
    """Sends on a fixed schedule from its own thread (send_async; receipts counted)."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self._producer = client.create_producer(topic, batching_enabled=False)
        self._stop = threading.Event()
        self.sent = self.acked = self.failed = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def _done(self, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        with self._lock:
            if result == pulsar.Result.Ok:
                self.acked += 1
            else:
                self.failed += 1

    def _run(self) -> None:
        interval = 1 / RATE
        due = time.perf_counter()
        while not self._stop.is_set():
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
                continue
            self._producer.send_async(b"x" * 100, self._done)
            self.sent += 1
            due += interval

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._producer.flush()
        self._producer.close()


def _loop_lag(broker, *, reset: bool = False) -> dict[str, float]:
    status, body = admin(broker, "GET", "/admin/v2/broker-stats/loop-lag" + ("?reset=true" if reset else ""))
    assert status == 200 and isinstance(body, dict), body
    return body


def test_metadata_burst_does_not_stall_the_event_loop(broker):
    prefix = f"burst-{uuid.uuid4().hex[:6]}"
    client = new_client(broker)
    try:
        paced = _Paced(client, f"persistent://public/default/{prefix}-paced")
        paced.start()
        time.sleep(0.5)
        _loop_lag(broker, reset=True)  # measure the burst only
        errors: list[BaseException] = []
        workers = [
            threading.Thread(target=_create, args=(broker.service_url, prefix, w, errors), daemon=True)
            for w in range(WORKERS)
        ]
        started = time.monotonic()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=max(1.0, 240 - (time.monotonic() - started)))
        assert not any(worker.is_alive() for worker in workers), "the creation burst did not finish in 240 s"
        lag = _loop_lag(broker)
        paced.stop()
    finally:
        client.close()
    assert not errors, errors[:3]
    status, topics = admin(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200 and sum(1 for t in topics if f"{prefix}-t" in t) == TOPICS
    assert lag["ticks"] > 10, lag  # the monitor was running during the burst
    assert lag["maxLagMs"] < MAX_LAG_MS, lag
    assert paced.failed == 0 and paced.acked == paced.sent > 0
