"""Options of ``format("quasar")``, checked once on the driver into frozen, picklable config objects.

Spark hands a data source its options with lower-cased keys; names below are matched case-insensitively.
Names follow the Kafka and Pulsar Spark connectors where they mean the same thing (reference/spark.md §2).

| option                   | read | write | meaning                                                         |
|--------------------------|------|-------|-----------------------------------------------------------------|
| ``service.url``          | yes  | yes   | ``pulsar://host:port`` or ``pulsar+ssl://`` (default            |
|                          |      |       | ``pulsar://127.0.0.1:6650``)                                    |
| ``admin.url``            | yes  | yes   | admin REST ``http(s)://host:port`` (default: service host, 8080; |
|                          |      |       | ``https://host:8443`` for a ``pulsar+ssl://`` service URL)       |
| ``topic``                | yes  | yes   | one topic (write: overrides the ``topic`` column)               |
| ``topics``               | yes  |       | comma-separated topics                                          |
| ``topicsPattern``        | yes  |       | regex over ``persistent://tenant/ns/topic`` names of one ns     |
| ``startingOffsets``      | yes  |       | ``earliest`` / ``latest`` / JSON (see positions.py)             |
| ``endingOffsets``        | batch|       | ``latest`` / JSON                                               |
| ``startingTimestamp``    | yes  |       | publish time (ms since epoch) to start at; wins over offsets    |
| ``failOnDataLoss``       | yes  |       | ``true`` (default): fail on a trimmed range; else log and skip  |
| ``maxMessagesPerTrigger``| strm |       | cap on messages per micro-batch (``maxOffsetsPerTrigger`` too)  |
| ``minPartitions``        | yes  |       | split ranges so there are at least this many Spark partitions   |
| ``pollTimeoutMs``        | yes  |       | a reader waiting longer than this for a message fails (120000)  |
| ``subscription``         | strm |       | durable subscription moved in ``commit(end)`` (retention only)   |
| ``quasar.client.*``      | yes  | yes   | passed to the client (e.g. ``operationTimeoutSeconds``; TLS and |
|                          |      |       | auth: ``tlsTrustCertsFilePath``, ``tlsAllowInsecureConnection``, |
|                          |      |       | ``tlsHostnameVerificationEnable``, ``authPluginClassName``,      |
|                          |      |       | ``authParams``: see passthrough.py; also used for admin calls)   |
| ``quasar.reader.*``      | yes  |       | passed to each reader (e.g. ``receiverQueueSize``)              |
| ``quasar.producer.*``    |      | yes   | passed to each producer (``batchingEnabled``, ``compressionType``) |

Spark itself adds ``path`` (taken as ``topic`` when no ``topic`` is given), ``checkpointLocation`` and
``queryName`` to writer options; these are accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from quasar.spark.errors import OptionError
from quasar.spark.positions import StartSpec, normalize_topic, parse_offsets_option

__all__ = ["READ_OPTIONS", "WRITE_OPTIONS", "ReadConfig", "WriteConfig", "parse_read", "parse_write"]

_COMMON = {"service.url", "admin.url"}
_SPARK_ADDED = {"path", "checkpointlocation", "queryname"}
#: Read option names as documented (the check is case-insensitive).
READ_OPTIONS = (
    "service.url",
    "admin.url",
    "topic",
    "topics",
    "topicsPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "failOnDataLoss",
    "maxMessagesPerTrigger",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "pollTimeoutMs",
    "subscription",
    "quasar.client.*",
    "quasar.reader.*",
)
#: Write option names as documented.
WRITE_OPTIONS = ("service.url", "admin.url", "topic", "quasar.client.*", "quasar.producer.*")

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"


def _check_names(
    options: Mapping[str, str], valid: tuple[str, ...], prefixes: tuple[str, ...], kind: str
) -> None:
    allowed = {name.lower() for name in valid if not name.endswith("*")} | _SPARK_ADDED
    for key in options:
        low = key.lower()
        if low in allowed or any(low.startswith(prefix) and len(low) > len(prefix) for prefix in prefixes):
            continue
        raise OptionError(
            f"unknown {kind} option {key!r} for format 'quasar'; valid options: {', '.join(valid)}"
        )


def _passthrough(options: Mapping[str, str], prefix: str) -> tuple[tuple[str, str], ...]:
    """``prefix``-stripped (key, value) pairs, keys lower-cased, sorted (hashable and picklable)."""
    return tuple(
        sorted(
            (key.lower()[len(prefix) :], value)
            for key, value in options.items()
            if key.lower().startswith(prefix)
        )
    )


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name!r}: {raw!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"option {name!r}: must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name!r}: expected 'true' or 'false', got {raw!r}")
    return text == "true"


def _urls(options: Mapping[str, str]) -> tuple[str, str]:
    service_url = options.get("service.url", DEFAULT_SERVICE_URL)
    parts = urlsplit(service_url)
    if parts.scheme not in ("pulsar", "pulsar+ssl") or not parts.hostname:
        raise OptionError(f"option 'service.url': {service_url!r} is not a pulsar://host:port URL")
    default_admin = (
        f"https://{parts.hostname}:8443" if parts.scheme == "pulsar+ssl" else f"http://{parts.hostname}:8080"
    )
    admin_url = options.get("admin.url") or default_admin
    if urlsplit(admin_url).scheme not in ("http", "https"):
        raise OptionError(f"option 'admin.url': {admin_url!r} is not an http(s):// URL")
    return service_url, admin_url.rstrip("/")


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """Checked read options. ``topics`` are full names; ``topics_pattern`` is a regex; exactly one is set."""

    service_url: str
    admin_url: str
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    starting: StartSpec | dict[str, StartSpec] | None = None
    ending: StartSpec | dict[str, StartSpec] = field(default_factory=lambda: StartSpec("latest"))
    starting_timestamp_ms: int | None = None
    fail_on_data_loss: bool = True
    max_messages_per_trigger: int | None = None
    min_partitions: int | None = None
    poll_timeout_ms: int = 120_000
    subscription: str | None = None
    client_conf: tuple[tuple[str, str], ...] = ()
    reader_conf: tuple[tuple[str, str], ...] = ()

    def starting_or(self, default: str) -> StartSpec | dict[str, StartSpec]:
        """The starting spec, ``default`` (``earliest`` or ``latest``) when the option was not given."""
        return self.starting if self.starting is not None else StartSpec(default)


def parse_read(options: Mapping[str, str]) -> ReadConfig:
    """Check read options (keys any case). Raises OptionError naming the option at fault."""
    options = {key.lower(): value for key, value in options.items()}
    _check_names(options, READ_OPTIONS, ("quasar.client.", "quasar.reader."), "read")
    service_url, admin_url = _urls(options)
    given = [name for name in ("topic", "topics", "topicspattern") if options.get(name)]
    if not given and options.get("path"):
        options["topic"], given = options["path"], ["topic"]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'topic', 'topics' or 'topicsPattern' must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    topics: tuple[str, ...] = ()
    pattern = None
    if given[0] == "topicspattern":
        import re

        pattern = options["topicspattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'topicsPattern': {pattern!r} is not a valid regex: {exc}") from None
        if "/" not in pattern:
            pattern = r"persistent://public/default/" + pattern
    else:
        names = [n for n in options[given[0]].split(",") if n.strip()]
        if not names:
            raise OptionError(f"option {given[0]!r} names no topic")
        topics = tuple(dict.fromkeys(normalize_topic(n, what=f"option {given[0]!r}") for n in names))
    starting = None
    if options.get("startingoffsets") is not None:
        starting = parse_offsets_option("startingOffsets", options["startingoffsets"])
    ending: StartSpec | dict[str, StartSpec] = StartSpec("latest")
    if options.get("endingoffsets") is not None:
        ending = parse_offsets_option("endingOffsets", options["endingoffsets"])
        specs = ending.values() if isinstance(ending, dict) else [ending]
        if any(spec.kind == "earliest" for spec in specs):
            raise OptionError("option 'endingOffsets': 'earliest' is not allowed as an end")
    max_per_trigger = _int(options, "maxMessagesPerTrigger", None, 1)
    if max_per_trigger is None:
        max_per_trigger = _int(options, "maxOffsetsPerTrigger", None, 1)
    return ReadConfig(
        service_url=service_url,
        admin_url=admin_url,
        topics=topics,
        topics_pattern=pattern,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=_int(options, "startingTimestamp", None, 0),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        max_messages_per_trigger=max_per_trigger,
        min_partitions=_int(options, "minPartitions", None, 1),
        poll_timeout_ms=_int(options, "pollTimeoutMs", 120_000, 1) or 120_000,
        subscription=options.get("subscription") or None,
        client_conf=_passthrough(options, "quasar.client."),
        reader_conf=_passthrough(options, "quasar.reader."),
    )


@dataclass(frozen=True, slots=True)
class WriteConfig:
    """Checked write options; ``topic`` is a full name or None (then rows carry a ``topic`` column)."""

    service_url: str
    admin_url: str
    topic: str | None = None
    client_conf: tuple[tuple[str, str], ...] = ()
    producer_conf: tuple[tuple[str, str], ...] = ()


def parse_write(options: Mapping[str, str]) -> WriteConfig:
    """Check write options (keys any case). Raises OptionError naming the option at fault."""
    options = {key.lower(): value for key, value in options.items()}
    _check_names(options, WRITE_OPTIONS, ("quasar.client.", "quasar.producer."), "write")
    service_url, admin_url = _urls(options)
    topic = options.get("topic") or options.get("path") or None
    return WriteConfig(
        service_url=service_url,
        admin_url=admin_url,
        topic=normalize_topic(topic, what="option 'topic'") if topic else None,
        client_conf=_passthrough(options, "quasar.client."),
        producer_conf=_passthrough(options, "quasar.producer."),
    )
