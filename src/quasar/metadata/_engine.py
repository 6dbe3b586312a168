"""The semantics every backend shares, written once over a tiny transaction interface (:class:`Txn`).

A backend supplies a :class:`Txn` (``load`` / ``store`` / ``remove`` / ``subtree``) over its own data (a dict,
an SQLite transaction); the functions here apply the port's rules on top of it: argument checks, versions
(0 at creation, +1 per put), compare-and-set, ``multi`` in order, and the notifications each change
produces. So the memory and sqlite backends cannot drift apart.

Notifications follow Pulsar's etcd backend: a created path gives CREATED for it and CHILDREN_CHANGED for its
parent; a replaced one MODIFIED; a removed one DELETED and CHILDREN_CHANGED for its parent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from quasar.metadata.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    InvalidPathError,
    NotFoundError,
)
from quasar.metadata.port import Delete, Notification, NotificationType, Put, Stat, check_path

__all__ = [
    "Record",
    "Txn",
    "apply_delete",
    "apply_delete_recursive",
    "apply_multi",
    "apply_put",
    "check_delete",
    "check_multi",
    "check_put",
    "now_ms",
    "parent_of",
    "stat_of",
]


@dataclass(frozen=True, slots=True)
class Record:
    """One stored path: its value, version and times (ms since the epoch)."""

    value: bytes
    version: int
    creation_time_ms: int
    modification_time_ms: int
    ephemeral: bool


class Txn(Protocol):
    """What a backend offers the engine inside one transaction (no checks, no notifications)."""

    def load(self, path: str) -> Record | None: ...

    def store(self, path: str, record: Record) -> None: ...

    def remove(self, path: str) -> None: ...

    def subtree(self, path: str) -> list[str]:
        """``path`` (when it holds a value) and every stored path below it, in any order."""
        ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parent_of(path: str) -> str:
    """``/a/b`` -> ``/a``; ``/a`` -> ``/``."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def stat_of(path: str, record: Record) -> Stat:
    return Stat(path, record.version, record.creation_time_ms, record.modification_time_ms, record.ephemeral)


# -- argument checks (run by the caller before anything is queued) -----------------------------------------


def _check_version(expected_version: object) -> None:
    if expected_version is None:
        return
    if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < -1:
        raise InvalidArgumentError(
            f"expected_version is None, -1 or a version >= 0, got {expected_version!r}"
        )


def _check_writable(path: object) -> str:
    checked = check_path(path)
    if checked == "/":
        raise InvalidPathError("the root path '/' holds no value")
    return checked


def check_put(op: Put) -> Put:
    """``op`` with its value as ``bytes``; raises :class:`InvalidPathError` / :class:`InvalidArgumentError`."""
    path = _check_writable(op.path)
    value = op.value
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise InvalidArgumentError(f"a metadata value is bytes, got {type(value).__name__} for {path!r}")
    _check_version(op.expected_version)
    if not isinstance(op.ephemeral, bool):
        raise InvalidArgumentError(f"Put.ephemeral is a bool, got {op.ephemeral!r} for {path!r}")
    return op if value is op.value else Put(path, value, op.expected_version, op.ephemeral)


def check_delete(op: Delete) -> Delete:
    check_path(op.path)
    _check_version(op.expected_version)
    return op


def check_multi(ops: Sequence[Put | Delete]) -> list[Put | Delete]:
    if isinstance(ops, str | bytes) or not isinstance(ops, Sequence):
        raise InvalidArgumentError(f"multi takes a sequence of Put and Delete, got {type(ops).__name__}")
    checked: list[Put | Delete] = []
    for op in ops:
        if isinstance(op, Put):
            checked.append(check_put(op))
        elif isinstance(op, Delete):
            checked.append(check_delete(op))
        else:
            raise InvalidArgumentError(f"multi takes Put and Delete operations, got {op!r}")
    return checked


# -- operations (run inside a backend transaction) ---------------------------------------------------------


def apply_put(txn: Txn, op: Put, *, ephemeral: bool, now: int) -> tuple[Stat, list[Notification]]:
    """Create or replace ``op.path`` after checking ``op.expected_version``."""
    current = txn.load(op.path)
    expected = op.expected_version
    if expected == -1 and current is not None:
        raise AlreadyExistsError(f"{op.path} already exists (version {current.version})")
    if expected is not None and expected >= 0:
        if current is None:
            raise BadVersionError(f"{op.path} does not exist (expected version {expected})")
        if current.version != expected:
            raise BadVersionError(f"{op.path} is at version {current.version}, expected {expected}")
    if current is None:
        record = Record(op.value, 0, now, now, ephemeral)
        events = [
            Notification(NotificationType.CREATED, op.path),
            Notification(NotificationType.CHILDREN_CHANGED, parent_of(op.path)),
        ]
    else:
        record = Record(op.value, current.version + 1, current.creation_time_ms, now, ephemeral)
        events = [Notification(NotificationType.MODIFIED, op.path)]
    txn.store(op.path, record)
    return stat_of(op.path, record), events


def _deleted(path: str) -> list[Notification]:
    return [
        Notification(NotificationType.DELETED, path),
        Notification(NotificationType.CHILDREN_CHANGED, parent_of(path)),
    ]


def apply_delete(txn: Txn, op: Delete, *, missing_ok: bool) -> list[Notification]:
    """Remove ``op.path`` after checking ``op.expected_version``. An absent path raises
    :class:`NotFoundError`, unless ``missing_ok`` and no version was expected (``multi``'s rule)."""
    current = txn.load(op.path)
    if current is None:
        if missing_ok and op.expected_version is None:
            return []
        raise NotFoundError(f"{op.path} does not exist")
    if op.expected_version is not None and current.version != op.expected_version:
        raise BadVersionError(f"{op.path} is at version {current.version}, expected {op.expected_version}")
    txn.remove(op.path)
    return _deleted(op.path)


def apply_delete_recursive(txn: Txn, path: str) -> list[Notification]:
    """Remove ``path`` and everything below it, deepest paths first (Pulsar ``deleteRecursive``)."""
    events: list[Notification] = []
    for victim in sorted(txn.subtree(path), key=lambda p: (-p.count("/"), p)):
        txn.remove(victim)
        events += _deleted(victim)
    return events


def apply_multi(
    txn: Txn, ops: Sequence[Put | Delete], *, now: int
) -> tuple[list[Stat | None], list[Notification]]:
    """Apply checked ``ops`` in order; the first failure propagates (the backend rolls the whole
    transaction back)."""
    results: list[Stat | None] = []
    events: list[Notification] = []
    for op in ops:
        if isinstance(op, Put):
            stat, changes = apply_put(txn, op, ephemeral=op.ephemeral, now=now)
            results.append(stat)
        else:
            changes = apply_delete(txn, op, missing_ok=True)
            results.append(None)
        events += changes
    return results, events
