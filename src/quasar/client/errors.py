"""Exceptions raised by :mod:`quasar.client` (one documented tree under :class:`~quasar.errors.QuasarError`).

Wrong argument types and values raise the built-in ``TypeError`` / ``ValueError`` at the call, naming the
parameter; everything that goes wrong at run time raises one of these::

    QuasarError                              quasar.errors
    └── ClientError
        ├── ConnectError                     TCP connect or CONNECT/CONNECTED handshake failed
        ├── ConnectionClosedError            the connection died with the request pending
        ├── OperationTimeoutError            (also a builtin TimeoutError) no answer in operation_timeout
        │   ├── SendTimeoutError             a message got no receipt within send_timeout_millis
        │   └── ReceiveTimeoutError          receive(timeout_millis) expired with nothing to hand out
        ├── LookupError_                     lookup failed: too many redirects, bad broker URL
        ├── BrokerResponseError              the broker answered ERROR / *_RESPONSE error / SEND_ERROR;
        │   │                                ``.code`` is the Pulsar ServerError
        │   ├── AuthenticationError          the broker refused the credentials (never retried)
        │   └── AuthorizationError           the role may not do this (never retried)
        ├── AlreadyClosedError               the producer / consumer / client is closed
        ├── ProducerQueueIsFullError         max_pending_messages reached and block_if_queue_full=False
        ├── MessageTooBigError               message above max_message_size with chunking off
        └── InvalidMessageError              a received message cannot be decoded (checksum, batch, codec)

Retryable vs fatal follows the C++ client's ``isResultRetryable`` (reference/pulsar-protocol.md §9):
:attr:`BrokerResponseError.retryable`.
"""

from __future__ import annotations

from quasar.errors import QuasarError
from quasar.protocol import ServerError

__all__ = [
    "AlreadyClosedError",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerResponseError",
    "ClientError",
    "ConnectError",
    "ConnectionClosedError",
    "InvalidMessageError",
    "LookupError_",
    "MessageTooBigError",
    "OperationTimeoutError",
    "ProducerQueueIsFullError",
    "ReceiveTimeoutError",
    "SendTimeoutError",
]

#: ServerError codes that make creating a producer/consumer fail at once (C++ ``isResultRetryable`` false).
FATAL_SERVER_ERRORS = frozenset(
    {
        ServerError.AuthenticationError,
        ServerError.AuthorizationError,
        ServerError.ConsumerBusy,
        ServerError.ProducerBlockedQuotaExceededError,
        ServerError.ProducerBlockedQuotaExceededException,
        ServerError.ChecksumError,
        ServerError.TopicNotFound,
        ServerError.TooManyRequests,
        ServerError.TopicTerminatedError,
        ServerError.ProducerBusy,
        ServerError.IncompatibleSchema,
        ServerError.ConsumerAssignError,
        ServerError.NotAllowedError,
        ServerError.ProducerFenced,
    }
)


class ClientError(QuasarError):
    """Root of the client's errors."""


class ConnectError(ClientError):
    """The TCP connection or the CONNECT -> CONNECTED handshake failed (C++ ``ResultConnectError``)."""


class ConnectionClosedError(ClientError):
    """The connection was lost while the request was pending (C++ ``ResultDisconnected``)."""


class OperationTimeoutError(ClientError, TimeoutError):
    """No answer within ``operation_timeout_seconds`` (C++ ``ResultTimeout``)."""


class SendTimeoutError(OperationTimeoutError):
    """A message got no send receipt within ``send_timeout_millis``; it may or may not be stored."""


class ReceiveTimeoutError(OperationTimeoutError):
    """``receive(timeout_millis)`` found no message in time."""


class LookupError_(ClientError):
    """Topic lookup failed: more than 20 redirects, or an unusable broker URL."""


class BrokerResponseError(ClientError):
    """The broker refused a request.

    Attributes:
        code: the Pulsar :class:`~quasar.protocol.ServerError` (an int if the broker sent an unknown value).
        message: the broker's text.
    """

    def __init__(self, code: int, message: str) -> None:
        try:
            code = ServerError(code)
            name = code.name
        except ValueError:
            name = f"ServerError({code})"
        super().__init__(f"{name}: {message}")
        self.code = code
        self.message = message

    @property
    def retryable(self) -> bool:
        """False for the errors the C++ client treats as fatal when creating a producer or consumer."""
        return self.code not in FATAL_SERVER_ERRORS

    def __reduce__(self) -> tuple[type[BrokerResponseError], tuple[int, str]]:
        return (type(self), (int(self.code), self.message))


class AuthenticationError(BrokerResponseError):
    """The broker refused the connection's credentials (ServerError AuthenticationError: wrong or expired
    token, unknown user, no or untrusted client certificate, an unknown method); fatal, never retried (C++
    ``ResultAuthenticationError``)."""


class AuthorizationError(BrokerResponseError):
    """The authenticated role lacks the permission (ServerError AuthorizationError); fatal, never retried (C++
    ``ResultAuthorizationError``)."""


def response_error(code: int, message: str) -> BrokerResponseError:
    """The :class:`BrokerResponseError` for a broker's error ``code``: :class:`AuthenticationError` /
    :class:`AuthorizationError` for those codes, the base class otherwise."""
    if code == ServerError.AuthenticationError:
        return AuthenticationError(code, message)
    if code == ServerError.AuthorizationError:
        return AuthorizationError(code, message)
    return BrokerResponseError(code, message)


class AlreadyClosedError(ClientError):
    """The producer, consumer, reader or client is closed (C++ ``ResultAlreadyClosed``)."""


class ProducerQueueIsFullError(ClientError):
    """``max_pending_messages`` are pending and ``block_if_queue_full`` is off (C++ ``ResultProducerQueueIsFull``)."""


class MessageTooBigError(ClientError):
    """The (compressed) message exceeds the broker's ``max_message_size`` and chunking is off
    (C++ ``ResultMessageTooBig``)."""


class InvalidMessageError(ClientError):
    """A received message could not be decoded (bad checksum, batch layout or compression)."""
