"""RocketMQ ``Status`` answers: the error every handler raises and how broker errors map onto codes.

Every RocketMQ response carries ``status{code, message}`` and the gRPC status stays OK (the py client treats a
response without a status as illegal, reference rocketmq-grpc.md §2). Handlers raise :class:`RocketMQError`
with a ``Code`` value; the servicer (``server.py``) turns it into the response's status. :func:`code_of` maps
the broker's own errors (topic not found, permission, backlog quota, store refusals) onto the closest code.
"""

from __future__ import annotations

from typing import Any

from quasar.broker.auth import AuthenticationFailedError, PermissionDeniedError
from quasar.broker.errors import (
    BacklogQuotaExceededError,
    NamespaceNotFoundError,
    NotAllowedError,
    PersistenceError,
    ProducerBusyError,
    ServiceNotReadyError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from quasar.broker.rocketmq.stubs import definition

__all__ = ["Code", "RocketMQError", "code_of", "new_status", "ok_status"]

Code: Any = definition.Code
"""``apache.rocketmq.v2.Code``: ``Code.OK`` 20000, ``Code.TOPIC_NOT_FOUND`` 40402, ... (§2 of the reference)."""


class RocketMQError(Exception):
    """A request answered with a RocketMQ status ``code`` (a ``Code`` value, e.g. 40402) and ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def new_status(code: int, message: str) -> Any:
    """A ``Status`` message."""
    return definition.Status(code=code, message=message)


def ok_status() -> Any:
    return definition.Status(code=Code.OK, message="OK")


_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (TopicNotFoundError, Code.TOPIC_NOT_FOUND),
    (NamespaceNotFoundError, Code.TOPIC_NOT_FOUND),
    (AuthenticationFailedError, Code.UNAUTHORIZED),
    (PermissionDeniedError, Code.FORBIDDEN),
    (TopicTerminatedError, Code.FORBIDDEN),
    (BacklogQuotaExceededError, Code.TOO_MANY_REQUESTS),
    (ProducerBusyError, Code.TOO_MANY_REQUESTS),
    (ServiceNotReadyError, Code.TOO_MANY_REQUESTS),
    (PersistenceError, Code.MASTER_PERSISTENCE_TIMEOUT),
    (NotAllowedError, Code.FORBIDDEN),
)
"""Broker errors -> RocketMQ codes (first match). TOO_MANY_REQUESTS for "retry later" refusals (a full disk,
no in-sync slave, the backlog quota), as the proxy answers SYSTEM_BUSY; the py producer stops retrying on it."""

_STORE_STATUS: dict[str, int] = {
    "FLUSH_DISK_TIMEOUT": Code.MASTER_PERSISTENCE_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": Code.SLAVE_PERSISTENCE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": Code.HA_NOT_AVAILABLE,
    "SERVICE_NOT_AVAILABLE": Code.TOO_MANY_REQUESTS,
    "MESSAGE_ILLEGAL": Code.MESSAGE_BODY_TOO_LARGE,
    "PROPERTIES_SIZE_EXCEEDED": Code.MESSAGE_PROPERTIES_TOO_LARGE,
    "OS_PAGE_CACHE_BUSY": Code.TOO_MANY_REQUESTS,
    "CREATE_MAPPED_FILE_FAILED": Code.TOO_MANY_REQUESTS,
}
"""Store put statuses (``error.status`` of a failed append) -> codes, as the proxy maps RocketMQ's
``SendStatus`` / put results."""


def code_of(error: BaseException) -> int:
    """The RocketMQ code for ``error``: its own for a RocketMQError, the store status's for a failed put,
    the table above for broker errors, INTERNAL_SERVER_ERROR otherwise."""
    if isinstance(error, RocketMQError):
        return error.code
    status = getattr(error, "status", None)
    if isinstance(status, str) and status in _STORE_STATUS:
        return _STORE_STATUS[status]
    for kind, code in _BY_ERROR:
        if isinstance(error, kind):
            return code
    return int(Code.INTERNAL_SERVER_ERROR)
