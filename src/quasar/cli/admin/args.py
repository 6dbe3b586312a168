"""Arguments of ``quasar admin`` commands, parsed as ``pulsar-admin`` parses them.

- Topic names: ``persistent://tenant/ns/x``, ``non-persistent://...``, ``tenant/ns/x`` or ``x`` (Pulsar
  ``TopicName.get``: ``x`` is ``persistent://public/default/x``); :func:`topic_path` gives the REST path part
  ``persistent/tenant/ns/x`` with each part URL-quoted.
- Namespaces: ``tenant/ns`` (:func:`namespace_path`).
- Sizes (``-s 10G``): an integer with an optional ``k/K``, ``m/M``, ``g/G``, ``t/T`` suffix, powers of 1024,
  bytes without one (Pulsar ``ByteUnitUtil``); ``-1`` = unlimited.
- Relative times (``-t 3d``): an integer with an optional ``s``, ``m``, ``h``, ``d``, ``w``, ``y`` suffix,
  seconds without one (Pulsar ``RelativeTimeUtil.parseRelativeTimeInSeconds``); ``-1`` = unlimited.
- Message ids (``-m``): ``ledgerId:entryId``, ``earliest`` or ``latest``.

Bad values raise ``click.BadParameter`` (exit 2, as a usage error).
"""

from __future__ import annotations

import datetime
import re
from typing import Any
from urllib.parse import quote

import click

from quasar.protocol import TopicName
from quasar.protocol.errors import InvalidTopicNameError
from quasar.protocol.topic_name import check_named_entity

__all__ = [
    "LATEST",
    "message_id",
    "namespace_path",
    "parse_relative_seconds",
    "parse_size",
    "topic_name",
    "topic_path",
]

LATEST = 2**63 - 1
"""Java ``Long.MAX_VALUE``: ``MessageId.latest``'s ledger and entry ids."""

_SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_NUMBER = re.compile(r"-?[0-9]+")


def parse_time_ms(value: str) -> int:
    """``"1700000000000"`` -> 1700000000000; ``"2026-11-22T05:00:00+00:00"`` -> its ms since the epoch.
    Raises click.BadParameter otherwise."""
    value = value.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"not ms since the epoch nor an ISO 8601 time: {value!r}") from None
    return int(moment.timestamp() * 1000)


def topic_name(value: str) -> TopicName:
    """The full name of a topic argument (module docstring); click.BadParameter for an invalid one."""
    try:
        return TopicName.parse(value.strip())
    except InvalidTopicNameError as exc:
        raise click.BadParameter(f"{value!r} is not a topic name: {exc}") from None


def _quoted(*parts: str) -> str:
    return "/".join(quote(part, safe="") for part in parts)


def topic_path(value: str | TopicName) -> str:
    """``x`` -> ``persistent/public/default/x`` (URL-quoted parts) for ``/admin/v2/<path>``."""
    name = topic_name(value) if isinstance(value, str) else value
    return f"{name.domain}/" + _quoted(name.tenant, name.namespace, name.local_name)


def namespace_path(value: str) -> str:
    """``tenant/ns`` -> the URL-quoted ``tenant/ns``; click.BadParameter for another shape or bad names."""
    parts = value.strip().split("/")
    if len(parts) != 2:
        raise click.BadParameter(f"{value!r} is not a namespace: expected tenant/namespace")
    try:
        check_named_entity("tenant", parts[0])
        check_named_entity("namespace", parts[1])
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from None
    return _quoted(*parts)


def tenant_path(value: str) -> str:
    """A tenant name, URL-quoted; click.BadParameter for an invalid one."""
    try:
        check_named_entity("tenant", value)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from None
    return _quoted(value)


def _split_unit(value: str, units: dict[str, int], what: str, example: str) -> int:
    text = value.strip()
    if not text:
        raise click.BadParameter(f"empty {what}")
    multiplier = 1
    unit = text[-1].lower()
    if unit in units:
        multiplier, text = units[unit], text[:-1]
    if not _NUMBER.fullmatch(text):
        raise click.BadParameter(f"{value!r} is not a {what} (e.g. {example})")
    number = int(text)
    if number < -1:
        raise click.BadParameter(f"{what} {value!r}: only -1 (unlimited) may be negative")
    return -1 if number == -1 else number * multiplier


def parse_size(value: str) -> int:
    """``"10G"`` -> 10737418240 bytes; ``"-1"`` -> -1 (unlimited). click.BadParameter otherwise."""
    return _split_unit(value, _SIZE_UNITS, "size", "4096, 10M, 16G, 3T")


def parse_relative_seconds(value: str) -> int:
    """``"3d"`` -> 259200 seconds, ``"120"`` -> 120; ``"-1"`` -> -1 (unlimited). click.BadParameter
    otherwise."""
    return _split_unit(value, _TIME_UNITS, "time", "120, 100m, 3h, 2d, 5w")


def message_id(value: str) -> dict[str, Any]:
    """``"12:3"`` -> ``{"ledgerId": 12, "entryId": 3}``; ``earliest`` -> -1/-1; ``latest`` -> Long.MAX_VALUE
    (Pulsar ``MessageId.earliest`` / ``latest``). click.BadParameter otherwise."""
    text = value.strip().lower()
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if text == "latest":
        return {"ledgerId": LATEST, "entryId": LATEST}
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(_NUMBER.fullmatch(p) for p in parts):
        raise click.BadParameter(f"{value!r} is not a message id (ledgerId:entryId, earliest or latest)")
    return {"ledgerId": int(parts[0]), "entryId": int(parts[1])}
