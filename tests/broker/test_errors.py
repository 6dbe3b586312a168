"""The exception -> ServerError table of broker.errors (walked along the MRO, BrokerError carries its own)."""

from __future__ import annotations

import pytest

from quasar.broker.errors import (
    BacklogQuotaExceededError,
    ConsumerAssignError,
    NamespaceNotFoundError,
    PersistenceError,
    send_error_of,
    server_error_of,
)
from quasar.errors import QuasarError
from quasar.ledger.errors import (
    CursorNotFoundError,
    InvalidCursorPositionError,
    ManagedLedgerFencedError,
    TooManyRequestsError,
)
from quasar.metadata.errors import BadVersionError
from quasar.protocol.enums import ServerError
from quasar.protocol.errors import InvalidTopicNameError


class FencedAgain(ManagedLedgerFencedError):
    """A subclass not in the table: the MRO finds its nearest listed ancestor."""


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (NamespaceNotFoundError("ns"), ServerError.MetadataError),
        (ConsumerAssignError("ranges"), ServerError.ConsumerAssignError),
        (
            BacklogQuotaExceededError(
                "quota", server_error=ServerError.ProducerBlockedQuotaExceededException
            ),
            ServerError.ProducerBlockedQuotaExceededException,
        ),
        (InvalidTopicNameError("bad"), ServerError.InvalidTopicName),
        (ManagedLedgerFencedError("fenced"), ServerError.ServiceNotReady),
        (FencedAgain("fenced"), ServerError.ServiceNotReady),
        (CursorNotFoundError("gone"), ServerError.SubscriptionNotFound),
        (InvalidCursorPositionError("past the end", position=None), ServerError.PersistenceError),
        (TooManyRequestsError("busy"), ServerError.PersistenceError),
        (BadVersionError("raced"), ServerError.MetadataError),
        (QuasarError("other"), ServerError.UnknownError),
    ],
)
def test_server_error_of(exc, code):
    assert server_error_of(exc) == (code, str(exc))


def test_a_bug_is_unknown_error_without_its_internals(caplog):
    code, message = server_error_of(KeyError("secret"))
    assert code == ServerError.UnknownError
    assert "secret" not in message and "KeyError" in message
    assert "unexpected error" in caplog.text  # logged with its traceback


def test_send_errors_are_persistence_errors_unless_the_broker_chose():
    assert send_error_of(ManagedLedgerFencedError("fenced"))[0] == ServerError.PersistenceError
    assert send_error_of(PersistenceError("in flight")) == (ServerError.PersistenceError, "in flight")
    assert send_error_of(RuntimeError("bug"))[0] == ServerError.PersistenceError
