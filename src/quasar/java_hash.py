"""Java's ``String.hashCode()``, shared by the layers that must agree with RocketMQ on it: the IndexFile's key
slots (``storage.index_file``), the consume queue's tag hash (``broker.tag_hash``, RocketMQ ``tagsCode``) and the
RocketMQ front end's FIFO queue choice (``messageGroup.hashCode()``). Imports nothing of quasar."""

from __future__ import annotations

import struct

__all__ = ["java_string_hash"]

_U16 = struct.Struct(">H")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: ``sum(u[i] * 31 ** (n - 1 - i))`` over its UTF-16 code units
    ``u`` (a character outside the BMP counts as its two surrogates), wrapped to a signed 32-bit int, as Java's
    ``int`` arithmetic does. ``""`` → 0, ``"a"`` → 97, ``"ab"`` → 3105. Lone surrogates are hashed as the code
    units they are. Raises TypeError for a non-str."""
    if not isinstance(text, str):
        raise TypeError(f"java_string_hash takes a str, not {type(text).__name__}")
    value = 0
    if text.isascii():
        for byte in text.encode():
            value = (value * 31 + byte) & 0xFFFFFFFF
    else:
        for (unit,) in _U16.iter_unpack(text.encode("utf-16-be", "surrogatepass")):
            value = (value * 31 + unit) & 0xFFFFFFFF
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value
