"""CRC-32C (Castagnoli), the checksum of Pulsar payload frames.

Reflected polynomial 0x82F63B78, initial value 0xFFFFFFFF, final xor 0xFFFFFFFF; the check value of
``b"123456789"`` is 0xE3069283. In a SEND/MESSAGE frame it covers everything after the 4-byte checksum field:
``[metadataSize u32][metadata][payload]`` (Pulsar ``Commands.java`` / C++ ``Commands.cc newSend``,
``ClientConnection::verifyChecksum``). The work is done by the ``crc32c`` package (hardware accelerated, and
it releases the GIL for large buffers).
"""

from __future__ import annotations

import crc32c as _crc32c

__all__ = ["crc32c"]


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return the CRC-32C of ``data`` as an unsigned 32-bit int.

    Args:
        data: any bytes-like object (bytes, bytearray, memoryview); it is not copied.
        value: the CRC of the preceding bytes, to continue a running checksum over several pieces:
            ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    return _crc32c.crc32c(data, value)
