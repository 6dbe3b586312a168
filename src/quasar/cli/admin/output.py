"""How ``quasar admin`` prints answers: ``--json`` gives the admin API's JSON as it came (indented), else
rich tables of the fields operators look at, names one per line (as ``pulsar-admin`` prints lists, so shell
loops keep working), and peeked messages as ``pulsar-admin topics peek-messages`` prints them (a header
block and Netty's ``ByteBufUtil.prettyHexDump`` of the payload)."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

__all__ = ["echo_json", "echo_lines", "fields_table", "hex_dump", "print_tables", "rows_table"]


def echo_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (Pulsar's admin shapes, unchanged)."""
    click.echo(json.dumps(data, indent=2))


def echo_lines(items: Iterable[Any]) -> None:
    """One item per line (``pulsar-admin`` list output)."""
    for item in items:
        click.echo(str(item))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def fields_table(title: str, data: Mapping[str, Any], keys: Sequence[str] | None = None) -> Table:
    """A two-column table (field, value) of the ``keys`` present in ``data`` (every key when None); lists
    and objects are shown as JSON, None as ``-``."""
    table = Table(title=title, title_justify="left", min_width=len(title))
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for key in keys if keys is not None else list(data):
        if key in data:
            table.add_row(key, _cell(data[key]))
    return table


def rows_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A table of ``rows`` under ``columns`` (None shows as ``-``); a column after the first that is None in
    every row is left out (a field this broker does not report, e.g. a rate)."""
    rows = [list(row) for row in rows]
    kept = [i for i in range(len(columns)) if i == 0 or any(row[i] is not None for row in rows)]
    table = Table(title=title, title_justify="left", min_width=len(title))
    for i in kept:
        table.add_column(columns[i], overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row[i]) for i in kept))
    return table


def print_tables(*tables: Table) -> None:
    """Print ``tables`` on stdout; a table without rows prints its title and ``(none)``."""
    console = Console(soft_wrap=False, highlight=False)
    for table in tables:
        if table.row_count == 0:
            console.print(f"{table.title}: (none)")
        else:
            console.print(table)


def hex_dump(data: bytes) -> str:
    """Netty ``ByteBufUtil.prettyHexDump``: 16 bytes a row, offset, hex, printable ASCII (``.`` otherwise)."""
    lines = [
        "         +-------------------------------------------------+",
        "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
        "+--------+-------------------------------------------------+----------------+",
    ]
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk).ljust(47)
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk).ljust(16)
        lines.append(f"|{offset:08x}| {hex_part} |{text}|")
    lines.append("+--------+-------------------------------------------------+----------------+")
    return "\n".join(lines)


def format_ms(ms: int) -> str:
    """ms since the epoch -> local ISO 8601 time with ms (``2026-11-22T05:00:00.123``)."""
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")


def payload_text(encoded: str) -> str:
    """A base64 payload of the admin API -> its text (cut at 200 characters) when it is UTF-8, else
    ``<N bytes>``."""
    data = base64.b64decode(encoded)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return f"<{len(data)} bytes>"
    return text if len(text) <= 200 else text[:200] + "…"
