"""RocketMQ benchmark: the official ``rocketmq-python-client`` against Quasar's RocketMQ endpoint, next to the
same client against a do-nothing gRPC servicer (the client's own ceiling on this machine, in the same sitting)
and the official ``pulsar-client`` sending and receiving the same messages through Quasar's Pulsar port.

Phases, each on one fresh topic per target (``--size`` byte payloads, no batching anywhere, so one message is
one RPC / one entry):

| Phase          | RocketMQ client                                            | Pulsar client                       |
|----------------|------------------------------------------------------------|-------------------------------------|
| send           | ``Producer.send`` one after the other (``--sync-messages``) | ``Producer.send``                   |
| send_async     | ``Producer.send_async``, at most ``--in-flight`` (256)     | ``send_async`` paced to the RocketMQ |
|                | outstanding (``--messages``)                               | send_async rate (same load)         |
| send_async max | -                                                          | ``send_async`` unpaced              |
| receive        | ``SimpleConsumer.receive(32, 30 s)`` + ``ack`` per message | ``receive`` + ``acknowledge``       |
|                | of everything sent above (group made at the earliest first)|                                     |

Columns: ``msg/s`` (messages / wall time of the phase); ``server µs/msg`` (CPU, user + system of every thread,
of the server process from /proc/<pid>/stat over the phase, per message); for the Quasar rows ``% of
ceiling`` (its msg/s over the do-nothing servicer's for the same phase; issue 18's target: ≥ 80% for send and
receive), ``µs over ceiling`` (its CPU per message minus the do-nothing servicer's: what Quasar adds to the
gRPC layer's own cost) and ``CPU vs pulsar`` (its CPU per message over the Pulsar row's of the same phase;
the target: ≤ 2x for a send). CPU per message depends on the rate (the store's flush and dispatch threads wake
per group of entries), hence the paced Pulsar row. For ``send`` phases ``send p50 µs`` / ``send p99 µs`` are
the client-side latency of each call; for the broker's rows ``fsync µs`` is the mean fdatasync time of a
SYNC_FLUSH group commit round during the phase and ``rounds/msg`` the rounds per message (from ``/metrics``:
``quasar_store_flush_latency_count`` / ``_sum``; empty under ASYNC_FLUSH). A sync send's latency is the
ceiling's round trip plus what a Pulsar sync send pays (docs/rocketmq-benchmark.md, "Sync send latency").

The do-nothing servicer (started here as a subprocess, ``--null-server``, on a free port and stopped by PID)
is a ``grpc.aio`` server on the broker's own generated stubs (``quasar.broker.rocketmq.stubs``) that answers at
once: a one-queue route pointing at itself, Telemetry settings echoed back with the server's parts, OK sends,
OK acks, and for ReceiveMessage the requested number (at most 32) of canned messages with receipt handles, so
the client's receive path does its full work. Quasar runs as a ``quasar standalone`` subprocess (temporary
data directory, ``--flush`` picks ``flush_disk_type``; SYNC_FLUSH, the default, answers a send after its
fsync) unless ``--endpoint``/``--service-url``/``--admin-url``/``--broker-pid`` name a running one. The
client's log goes under a temporary HOME (removed afterwards). Numbers compare paths in one sitting on one
machine; nothing asserts them.

Usage: ``python benchmarks/rocketmq.py [--messages 5000] [--sync-messages 1000] [--size 100] [--flush async]``
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from quasar.testing.broker_process import BrokerProcess

# This file is named like the client's package: keep its directory off the path so ``import rocketmq`` finds
# the client (and so produce_consume.py cannot be imported from here either; cpu_seconds is its twin).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _HERE]

NULL_READY = "null-server ready: "
RECEIVE_BATCH = 32
INVISIBLE_S = 30


# ---------------------------------------------------------------------------------------- do-nothing servicer
class NullServicer:
    """Every MessagingService RPC answered at once (module docstring); ``port`` is set once bound."""

    def __init__(self, body_size: int) -> None:
        from quasar.broker.rocketmq.stubs import definition, service

        self.definition, self.service = definition, service
        self.ok = definition.Status(code=definition.Code.OK, message="OK")
        self.port = 0
        self.body = os.urandom(body_size)
        self.checksum = hashlib.md5(self.body, usedforsecurity=False).hexdigest().upper()
        self.counter = 0

    def generic_handler(self) -> Any:
        import grpc

        from quasar.broker.rocketmq.stubs import SERVICE, SERVICE_NAME

        handlers = {}
        for method in SERVICE.methods:
            request_class = getattr(self.service, method.input_type.name)
            response_class = getattr(self.service, method.output_type.name)
            kwargs = {
                "request_deserializer": request_class.FromString,
                "response_serializer": response_class.SerializeToString,
            }
            behaviour = getattr(self, method.name, None) or self._ok_answer(response_class)
            if method.client_streaming:
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(behaviour, **kwargs)
            elif method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(behaviour, **kwargs)
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(behaviour, **kwargs)
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _ok_answer(self, response_class: Any) -> Callable[[Any, Any], Any]:
        async def answer(_request: Any, _context: Any) -> Any:
            return response_class(status=self.ok)

        return answer

    async def QueryRoute(self, request: Any, _context: Any) -> Any:
        d = self.definition
        endpoints = d.Endpoints(
            scheme=d.AddressScheme.IPv4, addresses=[d.Address(host="127.0.0.1", port=self.port)]
        )
        queue = d.MessageQueue(
            topic=request.topic,
            id=0,
            permission=d.Permission.READ_WRITE,
            broker=d.Broker(name="null", id=0, endpoints=endpoints),
            accept_message_types=[d.MessageType.NORMAL, d.MessageType.FIFO, d.MessageType.DELAY],
        )
        return self.service.QueryRouteResponse(status=self.ok, message_queues=[queue])

    async def SendMessage(self, request: Any, _context: Any) -> Any:
        response = self.service.SendMessageResponse(status=self.ok)
        for offset, message in enumerate(request.messages):
            message_id = message.system_properties.message_id
            response.entries.add(
                status=self.ok, message_id=message_id, transaction_id=message_id, offset=offset
            )
        return response

    def _canned(self, topic: Any) -> Any:
        d = self.definition
        self.counter += 1
        message = d.Message(topic=topic, body=self.body)
        system = message.system_properties
        system.message_id = f"01{self.counter:032X}"
        system.body_digest.type = d.DigestType.MD5
        system.body_digest.checksum = self.checksum
        system.body_encoding = d.Encoding.IDENTITY
        system.message_type = d.MessageType.NORMAL
        system.born_timestamp.GetCurrentTime()
        system.store_timestamp.GetCurrentTime()
        system.born_host = system.store_host = "127.0.0.1"
        system.queue_id = 0
        system.queue_offset = self.counter
        system.receipt_handle = f"null-{self.counter}"
        system.delivery_attempt = 1
        return message

    async def ReceiveMessage(self, request: Any, _context: Any) -> Any:
        service = self.service
        yield service.ReceiveMessageResponse(status=self.ok)
        for _ in range(min(request.batch_size or RECEIVE_BATCH, RECEIVE_BATCH)):
            yield service.ReceiveMessageResponse(message=self._canned(request.message_queue.topic))
        now = service.ReceiveMessageResponse()
        now.delivery_timestamp.GetCurrentTime()
        yield now

    async def AckMessage(self, request: Any, _context: Any) -> Any:
        response = self.service.AckMessageResponse(status=self.ok)
        for entry in request.entries:
            response.entries.add(
                status=self.ok, message_id=entry.message_id, receipt_handle=entry.receipt_handle
            )
        return response

    async def Telemetry(self, request_iterator: Any, context: Any) -> None:
        async for command in request_iterator:
            if command.WhichOneof("command") == "settings":
                reply = self.service.TelemetryCommand(
                    status=self.ok, settings=self._settings(command.settings)
                )
                await context.write(reply)

    def _settings(self, settings: Any) -> Any:
        """The client's settings with the server's parts a broker fills in (as ``client_activity.py``)."""
        reply = self.definition.Settings()
        reply.CopyFrom(settings)
        policy = reply.backoff_policy
        policy.Clear()
        if reply.client_type == self.definition.ClientType.PRODUCER:
            reply.publishing.max_body_size = 4 * 1024 * 1024
            reply.publishing.validate_message_type = True
            policy.max_attempts = 3
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
        else:
            reply.subscription.receive_batch_size = RECEIVE_BATCH
            reply.subscription.long_polling_timeout.FromSeconds(20)
            policy.max_attempts = 17
            policy.customized_backoff.next.add().FromSeconds(1)
        if not reply.HasField("request_timeout"):
            reply.request_timeout.FromSeconds(3)
        reply.metric.Clear()
        reply.metric.on = False
        return reply


async def _serve_null() -> None:
    import grpc

    servicer = NullServicer(int(os.environ.get("NULL_SERVER_BODY", "100")))
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((servicer.generic_handler(),))
    servicer.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"{NULL_READY}127.0.0.1:{servicer.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0.5)


class NullServer:
    """The do-nothing servicer as a subprocess (started on a free port, stopped by PID)."""

    def __init__(self, body_size: int) -> None:
        self._body_size = body_size
        self.process: subprocess.Popen[str] | None = None
        self.endpoint = ""

    def start(self) -> None:
        env = dict(os.environ, NULL_SERVER_BODY=str(self._body_size))
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--null-server"], stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line.startswith(NULL_READY):
                self.endpoint = line[len(NULL_READY) :].strip()
                return
            if not line and self.process.poll() is not None:
                break
        self.stop()
        raise RuntimeError("the do-nothing servicer did not start")

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# ---------------------------------------------------------------------------------------------- measurement
def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads) from /proc/<pid>/stat; None if unavailable."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase on one target: messages done, wall seconds, server CPU seconds (None when unknown); for a
    ``send`` phase the client-side latency of each call (µs, sorted); on Quasar the broker's group commit
    rounds over the phase and their fdatasync time (ms, from ``/metrics``; None without the admin URL)."""

    target: str
    name: str
    messages: int
    seconds: float
    cpu_s: float | None
    latencies_us: tuple[float, ...] = ()
    flush: tuple[int, float] | None = None

    def latency(self, quantile: float) -> float | None:
        """The ``quantile`` (0..1) of :attr:`latencies_us`; None when not measured."""
        values = self.latencies_us
        return values[min(len(values) - 1, int(quantile * len(values)))] if values else None

    @property
    def fsync_us(self) -> float | None:
        """Mean fdatasync time of a group commit round during the phase (µs); None when none ran."""
        if self.flush is None or not self.flush[0]:
            return None
        return self.flush[1] * 1000 / self.flush[0]

    @property
    def rate(self) -> float:
        return self.messages / max(self.seconds, 1e-9)

    @property
    def cpu_us(self) -> float | None:
        return None if self.cpu_s is None or not self.messages else self.cpu_s * 1e6 / self.messages


FlushProbe = Callable[[], "tuple[int, float] | None"]
"""``probe()``: the broker's group commit rounds so far and their summed fdatasync time (ms), or None."""


def flush_probe(admin_url: str | None) -> FlushProbe:
    """Reads ``quasar_store_flush_latency_count`` / ``_sum`` from the broker's ``/metrics`` (SYNC_FLUSH group
    commit rounds and their fdatasync milliseconds; None when unavailable)."""

    def probe() -> tuple[int, float] | None:
        if admin_url is None:
            return None
        try:
            with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as response:
                text = response.read().decode()
        except OSError:
            return None
        found: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            name = name.split("{", 1)[0]
            if name in ("quasar_store_flush_latency_count", "quasar_store_flush_latency_sum"):
                found[name] = found.get(name, 0.0) + float(value.split()[0])
        if len(found) < 2:
            return None
        return int(found["quasar_store_flush_latency_count"]), found["quasar_store_flush_latency_sum"]

    return probe


def _no_probe() -> None:
    return None


def _measure(
    target: str,
    name: str,
    pid: int | None,
    run: Callable[[], int],
    probe: FlushProbe = _no_probe,
    latencies: list[float] | None = None,
) -> Phase:
    flush_start = probe()
    cpu_start = cpu_seconds(pid)
    start = time.perf_counter()
    done = run()
    seconds = time.perf_counter() - start
    cpu_end = cpu_seconds(pid)
    flush_end = probe()
    cpu = None if cpu_start is None or cpu_end is None else cpu_end - cpu_start
    flush = None
    if flush_start is not None and flush_end is not None:
        flush = (flush_end[0] - flush_start[0], flush_end[1] - flush_start[1])
    return Phase(target, name, done, seconds, cpu, tuple(sorted(latencies or ())), flush)


def _timed(call: Callable[[Any], object], argument: Any, latencies: list[float]) -> None:
    """``call(argument)``, its duration appended to ``latencies`` (µs, client-side perf_counter)."""
    start = time.perf_counter()
    call(argument)
    latencies.append((time.perf_counter() - start) * 1e6)


def _rmq_message(topic: str, payload: bytes) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = payload
    return message


def rocketmq_phases(
    target: str,
    endpoint: str,
    pid: int | None,
    prepare_group: Callable[[str, str], None],
    size: int,
    sync_messages: int,
    messages: int,
    in_flight: int,
    probe: FlushProbe = _no_probe,
) -> list[Phase]:
    """send, send_async and receive through the official client against ``endpoint``."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

    topic = f"rmqbench-{uuid.uuid4().hex[:10]}"
    group = f"rmqbench-{uuid.uuid4().hex[:10]}"
    prepare_group(topic, group)
    payload = os.urandom(size)
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    phases = []
    try:
        producer.send(_rmq_message(topic, payload))  # warm: route, connection, broker-side producer

        latencies: list[float] = []

        def send() -> int:
            for _ in range(sync_messages):
                _timed(producer.send, _rmq_message(topic, payload), latencies)
            return sync_messages

        def send_async() -> int:
            window = threading.BoundedSemaphore(in_flight)
            failures: list[BaseException] = []

            def done(future: Any) -> None:
                if future.exception() is not None:
                    failures.append(future.exception())
                window.release()

            for _ in range(messages):
                window.acquire()
                producer.send_async(_rmq_message(topic, payload)).add_done_callback(done)
            for _ in range(in_flight):
                window.acquire()
            if failures:
                raise RuntimeError(f"{len(failures)} send_async failures, first: {failures[0]!r}")
            return messages

        phases.append(_measure(target, "send", pid, send, probe, latencies))
        phases.append(_measure(target, "send_async", pid, send_async, probe))
    finally:
        producer.shutdown()

    total = sync_messages + messages + 1
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, 5)
    consumer.startup()
    try:

        def receive() -> int:
            received = 0
            deadline = time.monotonic() + 120
            while received < total and time.monotonic() < deadline:
                for message in consumer.receive(min(RECEIVE_BATCH, total - received), INVISIBLE_S):
                    consumer.ack(message)
                    received += 1
            return received

        phases.append(_measure(target, "receive", pid, receive))
    finally:
        consumer.shutdown()
    return phases


def pulsar_phases(
    service_url: str,
    pid: int | None,
    paced_rate: float | None,
    size: int,
    sync_messages: int,
    messages: int,
    in_flight: int,
    probe: FlushProbe = _no_probe,
) -> list[Phase]:
    """The same phases through the official pulsar-client (no batching: one message, one entry); with
    ``paced_rate`` (msg/s) the send_async phase is held to that rate (the RocketMQ send_async rate, so the
    CPU per message of both is compared at the same load) and an unpaced ``send_async max`` phase follows."""
    import pulsar

    # the C++ core's console logger at Warn (its Info lines would bury the table)
    client = pulsar.Client(
        service_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )
    topic = f"persistent://public/default/rmqbench-pulsar-{uuid.uuid4().hex[:10]}"
    try:
        consumer = client.subscribe(
            topic, "bench", consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )  # fmt: skip
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=in_flight
        )
        payload = os.urandom(size)
        producer.send(payload)

        latencies: list[float] = []

        def send() -> int:
            for _ in range(sync_messages):
                _timed(producer.send, payload, latencies)
            return sync_messages

        def send_async(rate: float | None) -> int:
            failed = [0]

            def done(result: Any, _msg_id: Any) -> None:
                if result != pulsar.Result.Ok:
                    failed[0] += 1

            start = time.perf_counter()
            for i in range(messages):
                if rate is not None and i % 16 == 0:  # paced: message i leaves at start + i / rate
                    ahead = start + i / rate - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
                producer.send_async(payload, done)
            producer.flush()
            if failed[0]:
                raise RuntimeError(f"{failed[0]} pulsar send_async failures")
            return messages

        phases = [
            _measure("pulsar", "send", pid, send, probe, latencies),
            _measure("pulsar", "send_async", pid, lambda: send_async(paced_rate), probe),
        ]
        if paced_rate is not None:
            phases.append(_measure("pulsar", "send_async max", pid, lambda: send_async(None), probe))
        producer.close()
        total = sync_messages + messages * len(phases[1:]) + 1

        def receive() -> int:
            received = 0
            while received < total:
                try:
                    message = consumer.receive(30_000)
                except pulsar.Timeout:
                    break
                consumer.acknowledge(message)
                received += 1
            return received

        phases.append(_measure("pulsar", "receive", pid, receive))
        consumer.close()
        return phases
    finally:
        client.close()


def _admin_group(admin_url: str) -> Callable[[str, str], None]:
    """Creates the consumer group's subscription at the earliest position (a new group starts at the end)."""

    def prepare(topic: str, group: str) -> None:
        request = urllib.request.Request(
            f"{admin_url}/admin/v2/persistent/public/default/{topic}/subscription/{group}",
            data=json.dumps({"ledgerId": -1, "entryId": -1}).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 204:
                raise RuntimeError(f"creating group {group}: HTTP {response.status}")

    return prepare


def results_table(phases: list[Phase], title: str) -> Table:
    table = Table(title=title)
    columns = ("target", "phase", "messages", "msg/s", "server µs/msg", "% of ceiling", "µs over ceiling")
    latency_columns = ("CPU vs pulsar", "send p50 µs", "send p99 µs", "fsync µs", "rounds/msg")
    for column in (*columns, *latency_columns):
        table.add_column(column, justify="right")
    by_key = {(p.target, p.name): p for p in phases}
    for p in phases:
        ceiling = by_key.get(("ceiling", p.name))
        share = over = ""
        if p.target == "quasar" and ceiling:
            share = f"{100 * p.rate / ceiling.rate:.0f}%"
            if p.cpu_us is not None and ceiling.cpu_us is not None:
                over = f"{p.cpu_us - ceiling.cpu_us:.0f}"
        pulsar_phase = by_key.get(("pulsar", p.name))
        cpu_ratio = ""
        if p.target == "quasar" and pulsar_phase and p.cpu_us and pulsar_phase.cpu_us:
            cpu_ratio = f"{p.cpu_us / pulsar_phase.cpu_us:.2f}x"
        p50, p99, fsync = p.latency(0.5), p.latency(0.99), p.fsync_us
        table.add_row(
            p.target,
            p.name,
            f"{p.messages:,}",
            f"{p.rate:,.0f}",
            "-" if p.cpu_us is None else f"{p.cpu_us:.0f}",
            share,
            over,
            cpu_ratio,
            "" if p50 is None else f"{p50:,.0f}",
            "" if p99 is None else f"{p99:,.0f}",
            "" if fsync is None else f"{fsync:,.0f}",
            "" if p.flush is None or not p.flush[0] or not p.messages else f"{p.flush[0] / p.messages:.2f}",
        )
    return table


def _import_client(home: Path) -> None:
    """Import the official client with HOME at ``home`` (its log directory is fixed at import) and its
    local-IP probe pinned to loopback (it would connect a UDP socket to a public address)."""
    previous = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        import rocketmq  # noqa: F401
        from rocketmq.v5.util.misc import Misc
    finally:
        if previous is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = previous
    Misc._Misc__LOCAL_IP = "127.0.0.1"  # noqa: SLF001


@click.command()
@click.option("--messages", type=click.IntRange(min=1), default=5_000, show_default=True, help="send_async.")
@click.option("--sync-messages", type=click.IntRange(min=1), default=1_000, show_default=True, help="send.")
@click.option("--size", type=click.IntRange(min=1), default=100, show_default=True, help="Payload bytes.")
@click.option("--in-flight", type=click.IntRange(min=1), default=256, show_default=True, help="send_async.")
@click.option(
    "--endpoint", default=None, help="RocketMQ host:port of a running broker (else one is started)."
)
@click.option("--service-url", default=None, help="Its pulsar:// URL (with --endpoint).")
@click.option("--admin-url", default=None, help="Its http:// admin URL (with --endpoint).")
@click.option("--broker-pid", type=int, default=None, help="Its PID, for CPU per message (with --endpoint).")
@click.option("--skip-pulsar", is_flag=True, help="Leave out the Pulsar rows.")
@click.option(
    "--skip-ceiling", is_flag=True, help="Leave out the do-nothing servicer (e.g. while profiling)."
)
@click.option(
    "--flush",
    type=click.Choice(["sync", "async"]),
    default="sync",
    show_default=True,
    help="The started broker's flush_disk_type: SYNC_FLUSH (receipts after fsync, the default) or ASYNC_FLUSH.",
)
@click.option("--null-server", is_flag=True, hidden=True, help="Run the do-nothing servicer (internal).")
def main(
    messages: int,
    sync_messages: int,
    size: int,
    in_flight: int,
    endpoint: str | None,
    service_url: str | None,
    admin_url: str | None,
    broker_pid: int | None,
    skip_pulsar: bool,
    skip_ceiling: bool,
    flush: str,
    null_server: bool,
) -> None:
    if null_server:
        asyncio.run(_serve_null())
        return
    if endpoint is not None and (service_url is None or admin_url is None):
        raise click.UsageError("--endpoint needs --service-url and --admin-url")
    console = Console(width=180)
    scratch = Path(tempfile.mkdtemp(prefix="rmqbench-"))
    broker: BrokerProcess | None = None
    null = NullServer(size)
    try:
        _import_client(scratch)
        if endpoint is None:
            config = scratch / "broker.toml"
            config.write_text(f'flush_disk_type = "{flush.upper()}_FLUSH"\n')
            broker = BrokerProcess(scratch / "data", rocketmq_port=0, extra_args=("--config", str(config)))
            broker.start()
            assert broker.rocketmq_address is not None
            endpoint, service_url, admin_url = broker.rocketmq_address, broker.service_url, broker.admin_url
            broker_pid = broker.pid
        assert service_url is not None and admin_url is not None
        args = (size, sync_messages, messages, in_flight)
        phases = []
        if not skip_ceiling:
            null.start()
            phases += rocketmq_phases("ceiling", null.endpoint, null.pid, lambda _t, _g: None, *args)
            null.stop()
        probe = flush_probe(admin_url)
        phases += rocketmq_phases("quasar", endpoint, broker_pid, _admin_group(admin_url), *args, probe)
        if not skip_pulsar:
            paced = next((p.rate for p in phases if (p.target, p.name) == ("quasar", "send_async")), None)
            phases += pulsar_phases(service_url, broker_pid, paced, *args, probe)
        where = f"{flush.upper()}_FLUSH broker" if broker is not None else "running broker"
        console.print(
            results_table(phases, f"RocketMQ client vs its ceiling and the Pulsar path: {size} B, {where}")
        )
    finally:
        null.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
