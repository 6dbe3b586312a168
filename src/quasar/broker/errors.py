"""Broker errors. Each carries the Pulsar ``ServerError`` code that goes back to the client.

    QuasarError
    └── BrokerError                 server_error: int (PulsarApi.proto ServerError)
        ├── TopicNotFoundError      TopicNotFound (11)
        ├── InvalidTopicError       InvalidTopicName (17)
        ├── ProducerBusyError       ProducerBusy (16)
        ├── ConsumerBusyError       ConsumerBusy (5)
        ├── NamespaceNotFoundError  MetadataError (1)
        ├── NotAllowedError         NotAllowedError (22)
        ├── ProducerFencedError     ProducerFenced (25)
        └── PersistenceError        PersistenceError (2)

Codes are the numbers of reference/pulsar-protocol.md §4; the C++ client's reaction to each is §9 there.
"""

from __future__ import annotations

import logging

from quasar.errors import QuasarError
from quasar.protocol.errors import InvalidTopicNameError

log = logging.getLogger("quasar.broker.handlers")

# ServerError values (PulsarApi.proto, 4.2.0), kept here as plain ints so this module needs no protobuf.
UNKNOWN_ERROR = 0
METADATA_ERROR = 1
PERSISTENCE_ERROR = 2
CONSUMER_BUSY = 5
SERVICE_NOT_READY = 6
PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR = 7
PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION = 8
CHECKSUM_ERROR = 9
TOPIC_NOT_FOUND = 11
SUBSCRIPTION_NOT_FOUND = 12
CONSUMER_NOT_FOUND = 13
PRODUCER_BUSY = 16
INVALID_TOPIC_NAME = 17
NOT_ALLOWED = 22
PRODUCER_FENCED = 25


class BrokerError(QuasarError):
    """A failure that is reported to the client as ``ServerError`` ``server_error``."""

    server_error: int = UNKNOWN_ERROR

    def __init__(self, message: str, *, server_error: int | None = None) -> None:
        super().__init__(message)
        if server_error is not None:
            self.server_error = server_error


class TopicNotFoundError(BrokerError):
    server_error = TOPIC_NOT_FOUND


class InvalidTopicError(BrokerError):
    server_error = INVALID_TOPIC_NAME


class ProducerBusyError(BrokerError):
    server_error = PRODUCER_BUSY


class ConsumerBusyError(BrokerError):
    server_error = CONSUMER_BUSY


class NamespaceNotFoundError(BrokerError):
    server_error = METADATA_ERROR


class NotAllowedError(BrokerError):
    server_error = NOT_ALLOWED


class PersistenceError(BrokerError):
    server_error = PERSISTENCE_ERROR


class ProducerFencedError(BrokerError):
    """The producer was fenced by an ExclusiveWithFencing producer (ProducerFenced; fatal for the client)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, server_error=PRODUCER_FENCED)


def error_of(exc: Exception) -> tuple[int, str]:
    """(ServerError code, message) for an exception raised while handling a request: a BrokerError's own code,
    InvalidTopicName, PersistenceError for ledger errors, else UnknownError (logged with its traceback)."""
    if isinstance(exc, BrokerError):
        return exc.server_error, str(exc)
    if isinstance(exc, InvalidTopicNameError):
        return INVALID_TOPIC_NAME, str(exc)
    if isinstance(exc, QuasarError):
        return PERSISTENCE_ERROR if "ledger" in type(exc).__module__ else UNKNOWN_ERROR, str(exc)
    log.error("unexpected error while handling a request", exc_info=exc)
    return UNKNOWN_ERROR, f"internal error: {type(exc).__name__}"
