"""Broker errors, and the table that turns any exception into the Pulsar ``ServerError`` sent to the client.

    QuasarError
    └── BrokerError                     server_error: ServerError (its own code)
        ├── TopicNotFoundError          TopicNotFound
        ├── ProducerBusyError           ProducerBusy
        ├── ConsumerBusyError           ConsumerBusy
        ├── ConsumerAssignError         ConsumerAssignError (Key_Shared placement)
        ├── ConsumerNotFoundError       ConsumerNotFound
        ├── NamespaceNotFoundError      MetadataError
        ├── NotAllowedError             NotAllowedError
        ├── ServiceNotReadyError        ServiceNotReady (retryable: "already being created", "was closed")
        ├── ProducerFencedError         ProducerFenced
        ├── TopicTerminatedError        TopicTerminatedError
        ├── BacklogQuotaExceededError   ProducerBlockedQuotaExceededError / ...Exception (by the quota's policy)
        └── PersistenceError            PersistenceError

Errors of other layers map through :data:`SERVER_ERRORS`, an explicit table keyed by exception type and
walked along the exception's MRO (the most specific class listed wins), as httpcore's ``map_exceptions``
does and as Pulsar's ``BrokerServiceException.getClientErrorCode`` chooses a code per exception class. The
codes are PulsarApi.proto's (reference/pulsar-protocol.md §4); the C++ client's reaction to each is §9 there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType

from quasar.errors import QuasarError
from quasar.ledger.errors import (
    CursorNotFoundError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
)
from quasar.metadata.errors import MetadataStoreError
from quasar.protocol.enums import ServerError
from quasar.protocol.errors import InvalidTopicNameError

__all__ = [
    "SERVER_ERRORS",
    "BacklogQuotaExceededError",
    "BrokerError",
    "ConsumerAssignError",
    "ConsumerBusyError",
    "ConsumerNotFoundError",
    "NamespaceNotFoundError",
    "NotAllowedError",
    "PersistenceError",
    "ProducerBusyError",
    "ProducerFencedError",
    "ServiceNotReadyError",
    "TopicNotFoundError",
    "TopicTerminatedError",
    "send_error_of",
    "server_error_of",
]

log = logging.getLogger(__name__)


class BrokerError(QuasarError):
    """A failure reported to the client as ``server_error`` (a class default, or given per instance)."""

    server_error: ServerError = ServerError.UnknownError

    def __init__(self, message: str, *, server_error: ServerError | None = None) -> None:
        super().__init__(message)
        if server_error is not None:
            self.server_error = server_error


class TopicNotFoundError(BrokerError):
    server_error = ServerError.TopicNotFound


class ProducerBusyError(BrokerError):
    server_error = ServerError.ProducerBusy


class ConsumerBusyError(BrokerError):
    server_error = ServerError.ConsumerBusy


class ConsumerAssignError(BrokerError):
    """A Key_Shared consumer cannot be placed (overlapping STICKY ranges, mixed modes)."""

    server_error = ServerError.ConsumerAssignError


class ConsumerNotFoundError(BrokerError):
    server_error = ServerError.ConsumerNotFound


class NamespaceNotFoundError(BrokerError):
    """Unknown namespace or tenant: MetadataError, as Pulsar answers a lookup in a missing namespace."""

    server_error = ServerError.MetadataError


class NotAllowedError(BrokerError):
    server_error = ServerError.NotAllowedError


class ServiceNotReadyError(BrokerError):
    """The request cannot be served now but may succeed when retried (the client retries ServiceNotReady)."""

    server_error = ServerError.ServiceNotReady


class PersistenceError(BrokerError):
    server_error = ServerError.PersistenceError


class ProducerFencedError(BrokerError):
    """The producer was fenced by an ExclusiveWithFencing producer (ProducerFenced; fatal for the client)."""

    server_error = ServerError.ProducerFenced


class TopicTerminatedError(BrokerError):
    """The topic was terminated: no producer may attach or publish (Pulsar TopicTerminatedException; the
    official client fails the producer and its pending sends for good)."""

    server_error = ServerError.TopicTerminatedError


class BacklogQuotaExceededError(BrokerError):
    """A new producer is refused while the topic's backlog quota is exceeded; ``server_error`` is
    ProducerBlockedQuotaExceededError (policy ``producer_request_hold``) or ...Exception
    (``producer_exception``), given by the caller."""


SERVER_ERRORS: Mapping[type[BaseException], ServerError] = MappingProxyType(
    {
        InvalidTopicNameError: ServerError.InvalidTopicName,
        # Pulsar TopicFencedException: the ledger refuses writes until it is reopened; retryable
        ManagedLedgerFencedError: ServerError.ServiceNotReady,
        ManagedLedgerTerminatedError: ServerError.TopicTerminatedError,
        CursorNotFoundError: ServerError.SubscriptionNotFound,
        # Pulsar wraps managed-ledger failures in PersistenceException
        ManagedLedgerError: ServerError.PersistenceError,
        # Pulsar ServerMetadataException
        MetadataStoreError: ServerError.MetadataError,
        QuasarError: ServerError.UnknownError,
    }
)
"""ServerError per exception class, for exceptions that are not BrokerErrors (which carry their own)."""


def server_error_of(exc: BaseException) -> tuple[ServerError, str]:
    """(ServerError code, message) for an exception raised while handling a request.

    A BrokerError answers its own code; any other exception the code of the first class of its MRO listed in
    :data:`SERVER_ERRORS`. An exception outside Quasar's tree is a bug: UnknownError, logged with its
    traceback, with a message that does not leak internals.
    """
    if isinstance(exc, BrokerError):
        return exc.server_error, str(exc)
    for klass in type(exc).__mro__:
        code = SERVER_ERRORS.get(klass)
        if code is not None:
            return code, str(exc)
    log.error("unexpected error while handling a request", exc_info=exc)
    return ServerError.UnknownError, f"internal error: {type(exc).__name__}"


def send_error_of(exc: BaseException) -> tuple[ServerError, str]:
    """(ServerError code, message) for a SEND whose entry was not persisted. As Pulsar's
    ``PersistentTopic.addFailed`` wraps every add failure in PersistenceException, anything but a BrokerError
    (which keeps its code, e.g. the dedup ``PersistenceError``) answers PersistenceError; a terminated
    ledger answers TopicTerminatedError."""
    if isinstance(exc, BrokerError):
        return exc.server_error, str(exc)
    if isinstance(exc, ManagedLedgerTerminatedError):  # Pulsar addFailed: TopicTerminatedException
        return ServerError.TopicTerminatedError, f"Topic was already terminated: {exc}"
    if isinstance(exc, QuasarError):
        return ServerError.PersistenceError, f"failed to persist entry: {exc}"
    log.error("unexpected error while persisting an entry", exc_info=exc)
    return ServerError.PersistenceError, "internal error while persisting entry"
