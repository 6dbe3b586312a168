"""Exceptions raised by :mod:`quasar.replication`::

QuasarError                          quasar.errors
└── ReplicationError                 any replication failure
    ├── HAProtocolError              malformed bytes on the HA channel (bad magic, a limit exceeded,
    │                                a field out of range, the stream ended mid-frame); the caller
    │                                closes that connection and logs the reason
    ├── HandshakeRefusedError        the master answered HANDSHAKE with WRONG_GROUP or NOT_MASTER
    │                                (``.status``); the slave retries later, perhaps elsewhere
    ├── TransferOffsetMismatchError  a TRANSFER frame's offset is not the slave's max offset; the slave
    │                                closes and resynchronises from its own offset (RocketMQ HAClient)
    └── DivergedHistoryError         master and slave share no epoch and the slave holds data; the
                                     slave refuses to replicate (an operator must empty the replica)
"""

from __future__ import annotations

from quasar.errors import QuasarError

__all__ = [
    "DivergedHistoryError",
    "HAProtocolError",
    "HandshakeRefusedError",
    "ReplicationError",
    "TransferOffsetMismatchError",
]


class ReplicationError(QuasarError):
    """Root of the replication package's errors."""


class HAProtocolError(ReplicationError):
    """The peer sent bytes that are not a valid HA frame; the decoder refuses further input."""


class HandshakeRefusedError(ReplicationError):
    """The master refused the slave's HELLO; ``status`` is the HandshakeStatus it answered."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class TransferOffsetMismatchError(ReplicationError):
    """A TRANSFER frame started at ``offset`` while the slave's commit log ends at ``expected`` (bytes)."""

    def __init__(self, message: str, *, expected: int, offset: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.offset = offset


class DivergedHistoryError(ReplicationError):
    """The slave's epochs share nothing with the master's and the slave holds data: it will not truncate
    everything on its own."""
