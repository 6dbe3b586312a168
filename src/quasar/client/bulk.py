"""The bulk batch-entry encoder: the compiled ``quasar.client._bulk_c`` when it is built, else its pure-Python
twin ``_bulk_py`` (``QUASAR_PURE_PYTHON=1`` forces the twin; DESIGN.md "Compiled hot paths"). The twin's
docstrings are the specification of both.

:func:`encode_entries` turns columns in the Apache Arrow buffer layout (value, key, properties, event time, and
per-row sequence ids) into the uncompressed payloads of Pulsar batch entries, without a Python object per
row; :meth:`quasar.client.Producer.send_entry` sends such a payload as one entry. The Spark sink
(:mod:`quasar.spark.sink_bulk`) is its user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quasar.native import load_twin

__all__ = ["encode_entries"]

if TYPE_CHECKING:
    from ._bulk_py import encode_entries
else:
    encode_entries = load_twin("quasar.client._bulk").encode_entries
