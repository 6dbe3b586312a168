"""Exceptions raised by :mod:`quasar.nameserver`::

    QuasarError                          quasar.errors
    └── NameServerError
        ├── InvalidRequestError          a well-framed request whose header or body is wrong (the server
        │                                answers SYSTEM_ERROR with the reason and keeps the connection)
        ├── NameServerConnectionError    the name server could not be reached, or the connection was lost
        │                                with the request pending
        ├── NameServerTimeoutError       (also a builtin TimeoutError) no response within the timeout
        └── NameServerResponseError      the name server answered with a code other than SUCCESS;
                                         ``.code`` (RocketMQ response code) and ``.remark``

Malformed frames from a peer are the protocol layer's ``RemoteProtocolError`` (the connection is closed).
"""

from __future__ import annotations

from quasar.errors import QuasarError

__all__ = [
    "InvalidRequestError",
    "NameServerConnectionError",
    "NameServerError",
    "NameServerResponseError",
    "NameServerTimeoutError",
]


class NameServerError(QuasarError):
    """Root of the name server package's errors."""


class InvalidRequestError(NameServerError):
    """A request's ext fields or body do not have the documented shape."""


class NameServerConnectionError(NameServerError):
    """The name server is unreachable or the connection died with the request pending."""


class NameServerTimeoutError(NameServerError, TimeoutError):
    """No response within the request's timeout."""


class NameServerResponseError(NameServerError):
    """The name server answered with an error code.

    Attributes:
        code: the RocketMQ response code (``ResponseCode`` value, e.g. 17 TOPIC_NOT_EXIST).
        remark: the name server's error text ("" when none).
    """

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(f"name server answered code {code}: {remark}")
        self.code = code
        self.remark = remark

    def __reduce__(self) -> tuple[type[NameServerResponseError], tuple[int, str]]:
        return (type(self), (self.code, self.remark))
