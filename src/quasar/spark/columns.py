"""Stored entries -> Arrow record batches of the read schema, with no Python object per message.

The executors' bulk path: a reader with ``deliver_entries`` (:class:`quasar.client.StoredEntry`) hands out
whole entries; :func:`entries_to_batch` has the compiled decoder (``quasar.spark._columns_c``, twin
``_columns_py``, picked by :func:`quasar.native.load_twin`; ``QUASAR_PURE_PYTHON=1`` forces the twin) build
every column's buffers in one pass with the GIL released, and wraps them with ``pyarrow.Array.from_buffers``
(zero copy). ``topic`` and ``partition`` are constant per input partition: their buffers are repeated
bytes (not ``pyarrow.repeat`` of a ``pyarrow.scalar``, which imports pandas, 0.3 s in every Python worker).

The rows are the message path's (:func:`quasar.spark.schema.to_arrow_batches` of the same range) byte for
byte: the decoder's docstring lists each column's source.
"""

from __future__ import annotations

import logging
from array import array
from typing import Any

from quasar.native import load_twin
from quasar.spark.schema import arrow_read_schema

__all__ = ["decode_entries", "entries_to_batch"]

log = logging.getLogger("quasar.spark")

_impl = load_twin("quasar.spark._columns")
#: ``decode_entries(entries, partition, start, end) -> (rows, buffers, bad)`` (see ``_columns_py``).
decode_entries = _impl.decode_entries


def entries_to_batch(
    entries: list[tuple[int, int, bytes, bytes, int]],
    topic: str,
    partition: int,
    start: tuple[int, int, int],
    end: tuple[int, int, int],
) -> Any:
    """One ``pyarrow.RecordBatch`` (:func:`~quasar.spark.schema.arrow_read_schema`) of the messages with keys
    in ``(start, end]`` of ``entries`` (``(ledgerId, entryId, metadata bytes, payload bytes, redelivery
    count)``, uncompressed, in order) of one topic partition; ``topic`` is the topic's name (of a partitioned
    topic: its parent's) and ``partition`` its index (-1 when not partitioned).

    An entry that does not parse is logged and skipped (the message path discards it too).

    Raises:
        OverflowError: a variable-size column would pass 2 GiB (decode fewer entries at once).
    """
    import pyarrow as pa

    rows, buffers, bad = decode_entries(entries, partition, start, end)
    for ledger, entry, reason in bad:
        log.warning("skipping the malformed entry %d:%d of %s (partition %d): %s", ledger, entry, topic,
                    partition, reason)  # fmt: skip
    (key_valid, key_off, key, value_off, value, id_off, id_data, ledger_ids, entry_ids, batch_index, publish,
     event_valid, event, props_off, pk_off, pk, pv_off, pv, redelivery) = map(pa.py_buffer, buffers)  # fmt: skip
    schema = arrow_read_schema()
    ts = schema.field("publishTime").type
    props_type = schema.field("properties").type
    kv_count = len(buffers[14]) // 4 - 1
    keys = pa.Array.from_buffers(pa.string(), kv_count, [None, pk_off, pk])
    values = pa.Array.from_buffers(pa.string(), kv_count, [None, pv_off, pv])
    kv = pa.StructArray.from_arrays([keys, values], fields=[props_type.key_field, props_type.item_field])
    columns = [
        pa.Array.from_buffers(pa.string(), rows, [key_valid, key_off, key]),
        pa.Array.from_buffers(pa.binary(), rows, [None, value_off, value]),
        _constant_string(pa, topic, rows),
        pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(array("i", [partition]) * rows)]),
        pa.Array.from_buffers(pa.binary(), rows, [None, id_off, id_data]),
        pa.Array.from_buffers(pa.int64(), rows, [None, ledger_ids]),
        pa.Array.from_buffers(pa.int64(), rows, [None, entry_ids]),
        pa.Array.from_buffers(pa.int32(), rows, [None, batch_index]),
        pa.Array.from_buffers(ts, rows, [None, publish]),
        pa.Array.from_buffers(ts, rows, [event_valid, event]),
        pa.Array.from_buffers(props_type, rows, [None, props_off], children=[kv]),
        pa.Array.from_buffers(pa.int32(), rows, [None, redelivery]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _constant_string(pa: Any, text: str, rows: int) -> Any:
    """A string array of ``rows`` times ``text``."""
    raw = text.encode()
    offsets = array("i", range(0, (rows + 1) * len(raw), len(raw))) if raw else array("i", [0]) * (rows + 1)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(raw * rows)])
