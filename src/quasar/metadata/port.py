"""The async MetadataStore port, shaped like Pulsar's ``MetadataStore`` / ``MetadataStoreExtended``
(reference/cluster.md §5), so the ``memory``, ``sqlite`` and ``etcd`` backends are
interchangeable and nothing above this port knows which one runs.

Paths are absolute, ``/``-separated, with non-empty segments (``/managed-ledgers/<encoded name>``); callers
percent-encode names that may contain ``/`` (see :func:`encode_segment`). Values are bytes; :func:`encode_json`
/ :func:`decode_json` are the JSON codec every Quasar caller uses. Every method is a coroutine and never blocks
the event loop: a backend runs its I/O in its own thread or through an async driver.

Versions (Pulsar ``Stat.version``): 0 when a path is created, +1 on every put. ``expected_version``: ``None``
writes unconditionally, ``-1`` means "must not exist" (create), ``n >= 0`` must equal the stored version
(compare-and-set); a mismatch raises :class:`BadVersionError` (:class:`AlreadyExistsError` for -1) and writes
nothing. :meth:`MetadataStore.multi` applies several puts and deletes in ONE transaction: all or nothing.

Ephemeral paths (``put(..., ephemeral=True)``) belong to the store's session and disappear when it ends
(etcd: the lease is revoked at close or expires; sqlite: the process stops, so they are gone at the next open;
memory: at close).
Listeners get a :class:`Notification` for every change made through this store (and, for a shared backend,
by other stores), after it is durable, on the event loop: CREATED for a new path and CHILDREN_CHANGED for its
parent, MODIFIED for a put on an existing path, DELETED and CHILDREN_CHANGED for the parent for each removed
path (as Pulsar's etcd backend; ancestors further up that only gained or lost an intermediate level are not
notified). A failed call notifies nothing.

Backends: :mod:`quasar.metadata.memory` (tests; sessions over shared in-memory data),
:mod:`quasar.metadata.sqlite` (the embedded default; one writer thread, group commit) and
:mod:`quasar.metadata.etcd` (clusters; one lease per session, notifications from a watch, so changes by other
processes are notified too). Their shared rules live once in :mod:`quasar.metadata._engine`;
:func:`quasar.metadata.stores.open_metadata_store` opens one from a URL.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

from quasar.metadata.errors import InvalidPathError, MetadataStoreError

__all__ = [
    "Delete",
    "GetResult",
    "MetadataStore",
    "Notification",
    "NotificationType",
    "Put",
    "SessionEvent",
    "Stat",
    "check_path",
    "decode_json",
    "decode_segment",
    "encode_json",
    "encode_segment",
]


@dataclass(frozen=True, slots=True)
class Stat:
    """What the store knows of a path besides its value (Pulsar ``Stat``). Times are ms since the epoch."""

    path: str
    version: int
    creation_time_ms: int
    modification_time_ms: int
    ephemeral: bool = False
    created_by_self: bool = True


@dataclass(frozen=True, slots=True)
class GetResult:
    """A value and its :class:`Stat` (Pulsar ``GetResult``)."""

    value: bytes
    stat: Stat


class NotificationType(enum.Enum):
    """Pulsar ``NotificationType``."""

    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True, slots=True)
class Notification:
    """One change of ``path`` (Pulsar ``Notification``)."""

    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    """Pulsar ``SessionEvent``: after SESSION_LOST every ephemeral path of this store is gone."""

    CONNECTION_LOST = "connection_lost"
    RECONNECTED = "reconnected"
    SESSION_LOST = "session_lost"
    SESSION_REESTABLISHED = "session_reestablished"


@dataclass(frozen=True, slots=True)
class Put:
    """A put inside :meth:`MetadataStore.multi` (same rules as :meth:`MetadataStore.put`). ``ephemeral``
    binds the path to this store's session, as ``put(..., ephemeral=True)`` does (a leader key created in the
    same transaction as the state it guards); it fails the whole ``multi`` while the session is lost."""

    path: str
    value: bytes
    expected_version: int | None = None
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    """A delete inside :meth:`MetadataStore.multi`; ``expected_version`` None: absent paths are skipped."""

    path: str
    expected_version: int | None = None


class MetadataStore(Protocol):
    """The port. Raises :class:`~quasar.metadata.errors.MetadataStoreError` subclasses only."""

    async def get(self, path: str) -> GetResult | None:
        """The value and stat at ``path``, or None when absent."""
        ...

    async def exists(self, path: str) -> bool:
        """Whether ``path`` holds a value."""
        ...

    async def get_children(self, path: str) -> list[str]:
        """Names (single segments, sorted) of the paths directly below ``path`` that hold a value or have
        descendants; ``[]`` when none."""
        ...

    async def put(
        self, path: str, value: bytes, expected_version: int | None = None, *, ephemeral: bool = False
    ) -> Stat:
        """Create or replace ``path`` (see the module docstring for ``expected_version``); durable on return."""
        ...

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Remove ``path``; raises :class:`NotFoundError` when absent, :class:`BadVersionError` on a version
        mismatch."""
        ...

    async def delete_recursive(self, path: str) -> None:
        """Remove ``path`` and everything below it (no error when nothing is there)."""
        ...

    async def multi(self, ops: Sequence[Put | Delete]) -> list[Stat | None]:
        """Apply ``ops`` in order in ONE transaction (all or nothing); one result per op (Stat for a put,
        None for a delete)."""
        ...

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """Call ``listener`` for every change (on the event loop)."""
        ...

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """Call ``listener`` on session events (never for memory/sqlite, which cannot lose their session)."""
        ...

    async def close(self) -> None:
        """Stop the store: ephemeral paths of this session go away; later calls raise
        :class:`MetadataStoreClosedError`. Idempotent."""
        ...


def check_path(path: object) -> str:
    """``path`` if it is absolute with non-empty segments and no trailing ``/`` (``/`` itself is the root);
    raises :class:`InvalidPathError` otherwise."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"a metadata path is an absolute str, got {path!r}")
    if path != "/" and (path.endswith("/") or "//" in path):
        raise InvalidPathError(f"a metadata path has non-empty segments, got {path!r}")
    return path


def encode_segment(name: str) -> str:
    """``name`` as one path segment (percent-encoded, no safe characters: ``/`` and ``%`` are escaped)."""
    if not name:
        raise InvalidPathError("a path segment cannot be empty")
    return quote(name, safe="")


def decode_segment(segment: str) -> str:
    """Inverse of :func:`encode_segment`."""
    return unquote(segment)


def encode_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON; raises :class:`MetadataStoreError` for a non-JSON value."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise MetadataStoreError(f"value is not JSON-serialisable: {exc}") from None


def decode_json(path: str, data: bytes) -> Any:
    """The JSON value stored at ``path``; raises :class:`MetadataStoreError` when it is not JSON."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise MetadataStoreError(f"stored value at {path!r} is not valid JSON: {exc}") from None
