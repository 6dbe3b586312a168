"""Exceptions raised by :mod:`quasar.protocol`.

The split follows h11/wsproto: *local* errors mean "you asked this library to do something illegal"
(encode a command with an out-of-range field, ...), *remote* errors mean "the peer sent bytes that break the
protocol" — the caller should answer (if it can) and close that one connection::

    QuasarError                          quasar.errors
    └── ProtocolError
        ├── LocalProtocolError           bad arguments to an encoder / builder
        │   └── InvalidTopicNameError    a topic name that Pulsar would reject
        ├── RemoteProtocolError          malformed input from the peer
        │   ├── FrameTooLargeError       totalSize above the decoder's max_frame_size (has .size, .max_size)
        │   ├── MalformedFrameError      framing, protobuf or header layout broken
        │   └── MalformedBatchError      batch payload does not match num_messages_in_batch / payload_size
        └── CompressionError             a compressed payload does not decompress to uncompressed_size

``CompressionError`` sits directly under ``ProtocolError``: corrupt compressed data may come from the peer,
from storage or from a caller, so it is neither strictly local nor remote. ``InvalidTopicNameError`` is local
because topic names reach this layer as arguments (the broker answers a bad name with ServerError
``InvalidTopicName`` instead of dropping the connection).
"""

from __future__ import annotations

from quasar.errors import QuasarError

__all__ = [
    "CompressionError",
    "FrameTooLargeError",
    "InvalidTopicNameError",
    "LocalProtocolError",
    "MalformedBatchError",
    "MalformedFrameError",
    "ProtocolError",
    "RemoteProtocolError",
]


class ProtocolError(QuasarError):
    """Root of the protocol layer's errors."""


class LocalProtocolError(ProtocolError):
    """The caller asked the protocol layer to produce something illegal (bad argument, missing field...)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that violate the Pulsar binary protocol; close the connection."""


class FrameTooLargeError(RemoteProtocolError):
    """A frame announced a ``totalSize`` above the decoder's limit.

    Attributes:
        size: the announced totalSize in bytes (the 4-byte length prefix itself not counted).
        max_size: the decoder's ``max_frame_size`` in bytes.
    """

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum frame size of {max_size} bytes")
        self.size = size
        self.max_size = max_size

    def __reduce__(self) -> tuple[type[FrameTooLargeError], tuple[int, int]]:
        return (type(self), (self.size, self.max_size))


class MalformedFrameError(RemoteProtocolError):
    """A frame is structurally invalid: sizes that do not add up, an unparsable or incomplete BaseCommand,
    a type without its sub-message, or a payload header (magic, checksum, metadataSize) that runs past the
    frame."""


class MalformedBatchError(RemoteProtocolError):
    """A batch payload does not split into ``num_messages_in_batch`` items (Pulsar: BatchDeSerializeError)."""


class CompressionError(ProtocolError):
    """A payload failed to decompress, or decompressed to a size other than ``uncompressed_size``
    (Pulsar: DecompressionError / UncompressedSizeCorruption)."""


class InvalidTopicNameError(LocalProtocolError):
    """A topic name that Pulsar's TopicName parser rejects (maps to ServerError.InvalidTopicName)."""
