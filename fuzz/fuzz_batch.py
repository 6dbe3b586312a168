"""(c) Batch payloads and compressed payloads, with bounded sizes.

Input: the first byte picks the mode, the next two bytes a number ``n``, the rest is the body.

- 0: ``decode_batch(body, n % 1024)`` (the uncompressed batch format); every item's payload lies inside the
  body and the items tile it exactly.
- 1: the body is a stored entry (``headers_and_payload``): ``scan_entry`` of both twins of ``_entry_keys``
  must agree (same keys and fields, or the same error class), and ``entry_keys`` with a 64 KiB bound on
  ``uncompressed_size`` may only raise ``ProtocolError`` (malformed entry, batch or compression).
- 2: ``batch_keys(body, n % 1024)`` of both twins: same keys or the same error class.
- 3: ``decompress(codec n % 5, body, size)`` with ``size = n * 16`` (at most 1 MiB): the output is exactly
  ``size`` bytes or ``CompressionError``.

Run: ``python fuzz/fuzz_batch.py --runs 1000000`` (README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["quasar.protocol"]):
    from quasar.protocol import (
        _entry_keys_c,  # type: ignore[attr-defined]
        _entry_keys_py,  # type: ignore[attr-defined]
        decode_batch,
        decompress,
    )
    from quasar.protocol.entry_keys import entry_keys
    from quasar.protocol.errors import CompressionError, ProtocolError

import _harness
import _seeds

KEY_BOUND = 64 * 1024


def _result(function: Any, *args: Any) -> Any:
    try:
        return ("ok", function(*args))
    except (ProtocolError, ValueError, OverflowError) as exc:
        return ("error", type(exc).__name__)


def _batch(body: bytes, n: int) -> None:
    items = decode_batch(body, n % 1024)
    covered = sum(4 + len(single.SerializeToString()) + len(payload) for single, payload in items)
    if covered > len(body):
        raise AssertionError(f"items cover {covered} bytes of a {len(body)}-byte batch")


def _entry(body: bytes, _n: int) -> None:
    c_result, py_result = _result(_entry_keys_c.scan_entry, body), _result(_entry_keys_py.scan_entry, body)
    if c_result != py_result:
        raise AssertionError(f"scan_entry twins differ: {c_result!r} != {py_result!r}")
    entry_keys(body, max_uncompressed_size=KEY_BOUND)


def _keys(body: bytes, n: int) -> None:
    count = n % 1024
    c_result, py_result = (
        _result(_entry_keys_c.batch_keys, body, count),
        _result(_entry_keys_py.batch_keys, body, count),
    )
    if c_result != py_result:
        raise AssertionError(f"batch_keys twins differ: {c_result!r} != {py_result!r}")


def _decompress(body: bytes, n: int) -> None:
    size = n * 16
    try:
        out = decompress(n % 5, body, size)
    except CompressionError:
        return
    if n % 5 and len(out) != size:
        raise AssertionError(f"decompressed {len(out)} bytes, expected {size}")


_MODES = (_batch, _entry, _keys, _decompress)


def test(data: bytes) -> None:
    if len(data) < 3:
        return
    _MODES[data[0] % len(_MODES)](data[3:], int.from_bytes(data[1:3], "big"))


def seeds() -> list[bytes]:
    raw = _seeds.batch(4)
    out = [b"\x00\x00\x04" + raw, b"\x02\x00\x04" + raw]
    out += [b"\x01\x00\x00" + span for span in _seeds.spans()]
    for codec in range(1, 5):
        compressed = _seeds.spans()[3 + codec]  # the codec's span; its payload is after the metadata
        out.append(b"\x03" + (len(raw) // 16 * 5 + codec).to_bytes(2, "big") + compressed)
    return out


if __name__ == "__main__":
    _harness.run("fuzz_batch", test, (ProtocolError,), seeds)
