"""EtcdMetadataStore: the port on etcd v3 (Pulsar ``EtcdMetadataStore``), for clusters: every broker's store
talks to the same etcd, so values, versions, ephemeral paths and notifications are shared cluster-wide.

Keys: the path ``/a/b`` is the etcd key ``<prefix>/a/b`` (UTF-8). The optional prefix (``/quasar-cluster-a``)
lets several clusters share one etcd; nothing outside it is read, written or watched.

Values: etcd keeps no timestamps, and it refuses two puts (or a put and a delete) of one key in a transaction,
so etcd's own per-key ``version`` cannot count ``multi([Put(p), Put(p)])`` as two versions, nor restart at 0
for ``multi([Delete(p), Put(p)])``. Each value therefore carries a 28-byte envelope: ``b"\\x00QMD"``, then the
port version, the creation time and the modification time (ms since the epoch; the writer's clock) as signed
big-endian 64-bit integers, then the value's bytes. A value without the envelope (written by another etcd
client) reads with version = etcd's version - 1 and times 0. ``Stat.ephemeral`` is "the key has a lease";
``Stat.created_by_self`` is False only for an ephemeral key of another session.

Writes: the engine (:mod:`quasar.metadata._engine`) runs the port's rules (expected versions, ``multi`` in
order, errors) over a linearizable read of the paths involved; the result is committed as ONE etcd
transaction whose compares say that none of those keys changed since the read (``create_revision == 0`` for a
path read as absent, ``mod_revision == <read>`` otherwise) and whose failure branch reads them again, so a
concurrent writer means one retry on fresh data (bounded), never a lost update: ``put(p, v, n)`` is
"version == n at commit time". A create (every op a put with expected version -1) skips the read.
``delete_recursive`` is one transaction deleting the path and the range below it.

Sessions: one lease per store, granted at :meth:`EtcdMetadataStore.open` (TTL ``session_ttl_s``, default 10 s),
kept alive by an owned task, revoked at :meth:`~EtcdMetadataStore.close` (the session's ephemeral keys vanish
at once); session events and their rules are in :mod:`quasar.metadata._etcd_session`.

Notifications: from ONE watch on the prefix (:mod:`quasar.metadata._etcd_watch`), started at the revision the
store was opened at and resumed from the last revision seen when the stream breaks, so changes made by other
stores and processes arrive in etcd's order, each once, on the event loop: a PUT that created the key gives
CREATED + CHILDREN_CHANGED of the parent, another PUT MODIFIED, a DELETE DELETED + CHILDREN_CHANGED. The changes
one transaction makes to one path are coalesced (a ``multi`` that puts a path twice notifies one MODIFIED;
delete-and-put notifies DELETED, CHILDREN_CHANGED, CREATED, CHILDREN_CHANGED).

Failures: every call is bounded by ``operation_timeout_s`` and raises only
:class:`~quasar.metadata.errors.MetadataStoreError` subclasses; an unreachable etcd is
:class:`~quasar.metadata.errors.MetadataStoreUnavailableError` naming the endpoints tried. Several endpoints
may be given: a refused connection tries the next. Limits are etcd's: ``--max-txn-ops`` (default 128) bounds
the distinct paths of one ``multi``, ``--max-request-bytes`` (1.5 MiB) a value. ``get_children`` lists the keys
below the path (keys only) and keeps their first segments, as Pulsar's etcd backend does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aetcd import rpc
from aetcd import transactions as tx
from aetcd.utils import prefix_range_end

from quasar.metadata._engine import (
    Record,
    apply_delete,
    apply_multi,
    apply_put,
    check_delete,
    check_multi,
    check_put,
    now_ms,
    parent_of,
)
from quasar.metadata._etcd_session import EtcdConnection, LeaseSession, parse_endpoint
from quasar.metadata._etcd_watch import PrefixWatch
from quasar.metadata._notifier import Notifier
from quasar.metadata.errors import (
    InvalidArgumentError,
    InvalidPathError,
    MetadataStoreClosedError,
    MetadataStoreError,
)
from quasar.metadata.port import (
    Delete,
    GetResult,
    Notification,
    NotificationType,
    Put,
    SessionEvent,
    Stat,
    check_path,
)

__all__ = ["EtcdMetadataStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAGIC = b"\x00QMD"
_HEADER = struct.Struct(">4sqqq")  # magic, version, creation ms, modification ms
_MAX_ATTEMPTS = 32  # commits lost to concurrent writers before a write gives up
_DELETE = rpc.Event.DELETE


def _encode(record: Record) -> bytes:
    header = _HEADER.pack(_MAGIC, record.version, record.creation_time_ms, record.modification_time_ms)
    return header + record.value


def _decode(kv: Any) -> Record:
    """The record held by an etcd key-value (aetcd ``KeyValue`` or the raw protobuf)."""
    data = bytes(kv.value)
    ephemeral = int(kv.lease) != 0
    if len(data) >= _HEADER.size and data.startswith(_MAGIC):
        _, version, ctime, mtime = _HEADER.unpack_from(data)
        return Record(data[_HEADER.size :], version, ctime, mtime, ephemeral)
    return Record(data, int(kv.version) - 1, 0, 0, ephemeral)


def _put_notifications(path: str, kv: Any) -> list[Notification]:
    """What one PUT event of a watch means (see the module docstring)."""
    created = [
        Notification(NotificationType.CREATED, path),
        Notification(NotificationType.CHILDREN_CHANGED, parent_of(path)),
    ]
    record = _decode(kv)
    if int(kv.version) == 1:  # the key is new in etcd
        return [*created, Notification(NotificationType.MODIFIED, path)] if record.version > 0 else created
    if record.version == 0:  # deleted and created again in one transaction
        return _deleted(path) + created
    return [Notification(NotificationType.MODIFIED, path)]


def _deleted(path: str) -> list[Notification]:
    return [
        Notification(NotificationType.DELETED, path),
        Notification(NotificationType.CHILDREN_CHANGED, parent_of(path)),
    ]


@dataclass(frozen=True, slots=True)
class _Seen:
    """One key as read before a write: its record (None when absent) and etcd ``mod_revision`` (0: absent)."""

    record: Record | None
    mod_revision: int


_ABSENT = _Seen(None, 0)


class _Overlay:
    """The engine's view of the keys read for one write, with the write's changes on top (committed as one
    etcd transaction)."""

    def __init__(self, seen: dict[str, _Seen]) -> None:
        self.seen = seen
        self.changes: dict[str, Record | None] = {}

    def load(self, path: str) -> Record | None:
        return self.changes[path] if path in self.changes else self.seen[path].record

    def store(self, path: str, record: Record) -> None:
        self.changes[path] = record

    def remove(self, path: str) -> None:
        self.changes[path] = None

    def subtree(self, path: str) -> list[str]:
        raise NotImplementedError("delete_recursive is one etcd range delete, not an engine call")


class _PathLocks:
    """Serialises this store's own writes per path (acquired in sorted order, so ``multi`` cannot deadlock):
    concurrent writers in one process then queue here instead of losing commits to each other at etcd."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, int]] = {}  # path -> lock, callers holding or waiting

    @contextlib.asynccontextmanager
    async def hold(self, paths: Sequence[str]) -> AsyncIterator[None]:
        ordered = sorted(set(paths))
        for path in ordered:
            lock, users = self._held.get(path, (None, 0))
            self._held[path] = (lock or asyncio.Lock(), users + 1)
        acquired: list[asyncio.Lock] = []
        try:
            for path in ordered:
                lock = self._held[path][0]
                await lock.acquire()
                acquired.append(lock)
            yield
        finally:
            for lock in acquired:
                lock.release()
            for path in ordered:
                lock, users = self._held[path]
                if users == 1:
                    del self._held[path]
                else:
                    self._held[path] = (lock, users - 1)


def _check_prefix(prefix: object) -> str:
    if prefix in ("", "/", None):
        return ""
    try:
        checked = check_path(prefix)
    except InvalidPathError:
        raise InvalidArgumentError(
            f"an etcd key prefix is '' or like '/quasar-cluster-a', got {prefix!r}"
        ) from None
    return checked


def _split_endpoints(endpoints: Sequence[str] | str) -> list[tuple[str, int]]:
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    try:
        parsed = [parse_endpoint(item) for item in items if item.strip()]
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    if not parsed:
        raise InvalidArgumentError(f"at least one etcd endpoint host:port is needed, got {endpoints!r}")
    return parsed


class EtcdMetadataStore:
    """The port on etcd (see the module docstring). Make one with ``await EtcdMetadataStore.open(...)``; close
    it with ``await store.close()``.

    Args:
        endpoints: ``"host:port"`` strings (or one comma-separated string) of the etcd cluster's client URLs;
            a refused connection tries the next one.
        prefix: key namespace, ``""`` or like ``"/quasar-cluster-a"``.
        session_ttl_s: the session lease's TTL in whole seconds (etcd raises it to its minimum, 2 s by default).
        operation_timeout_s: bound on each etcd request, in seconds.

    Raises:
        InvalidArgumentError: a malformed endpoint, prefix, TTL or timeout.
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        *,
        prefix: str = "",
        session_ttl_s: int = 10,
        operation_timeout_s: float = 5.0,
    ) -> None:
        """Prefer :meth:`open`; this only checks the arguments and prepares the (not yet used) clients."""
        parsed = _split_endpoints(endpoints)
        if isinstance(session_ttl_s, bool) or not isinstance(session_ttl_s, int) or session_ttl_s < 1:
            raise InvalidArgumentError(
                f"session_ttl_s is a whole number of seconds >= 1, got {session_ttl_s!r}"
            )
        if not isinstance(operation_timeout_s, int | float) or not operation_timeout_s > 0:
            raise InvalidArgumentError(f"operation_timeout_s is positive, got {operation_timeout_s!r}")
        self.prefix = _check_prefix(prefix)
        self._prefix_bytes = self.prefix.encode()
        self._root = self._prefix_bytes + b"/"
        self._notifier = Notifier()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn = EtcdConnection(
            parsed, timeout_s=float(operation_timeout_s), on_reachable=self._reachability
        )
        self._session = LeaseSession(self._conn, session_ttl_s, self._emit_session)
        self._locks = _PathLocks()
        self._watch: PrefixWatch | None = None
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"EtcdMetadataStore({','.join(self._conn.endpoints)}{self.prefix}{state})"

    @classmethod
    async def open(
        cls,
        endpoints: Sequence[str] | str,
        *,
        prefix: str = "",
        session_ttl_s: int = 10,
        operation_timeout_s: float = 5.0,
    ) -> EtcdMetadataStore:
        """Connect, grant the session lease and start the watch (arguments as for the class).

        Raises:
            MetadataStoreUnavailableError: etcd could not be reached (the message names the endpoints).
            MetadataStoreError: etcd refused the lease or the first read.
        """
        store = cls(
            endpoints, prefix=prefix, session_ttl_s=session_ttl_s, operation_timeout_s=operation_timeout_s
        )
        try:
            await store._start()
        except BaseException:
            await store.close()
            raise
        return store

    async def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # an empty range answers with the current revision: the watch starts right after it
        answer = await self._conn.call("open", lambda client: client.get_range(self._root, self._root))
        self._watch = PrefixWatch(self._conn, self._root, int(answer.header.revision), self._on_event)
        await self._session.start()
        self._watch.start()

    # -- what callers may look at ----------------------------------------------------------------------------

    @property
    def endpoints(self) -> list[str]:
        """The etcd endpoints, ``"host:port"``."""
        return list(self._conn.endpoints)

    @property
    def lease_id(self) -> int | None:
        """The session's etcd lease id (None while the session is being re-established or after close)."""
        return None if self._session.lost else self._session.lease_id

    @property
    def session_ttl_s(self) -> int:
        """The lease TTL etcd granted, in seconds."""
        return self._session.ttl_s

    # -- helpers ---------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataStoreClosedError("etcd metadata store is closed")

    def _key(self, path: str) -> bytes:
        return self._prefix_bytes + path.encode()

    def _below(self, path: str) -> bytes:
        """The key prefix of the paths below ``path``."""
        return self._root if path == "/" else self._key(path) + b"/"

    def _path(self, key: bytes) -> str | None:
        if not key.startswith(self._root):
            return None
        path = key[len(self._prefix_bytes) :].decode("utf-8", "replace")
        try:
            return check_path(path) if path != "/" else None
        except InvalidPathError:
            return None  # a key some other client wrote that is no port path

    def _stat(self, path: str, record: Record, lease: int) -> Stat:
        own = not record.ephemeral or lease == self._session.lease_id
        return Stat(
            path, record.version, record.creation_time_ms, record.modification_time_ms, record.ephemeral, own
        )

    def _seen_of(self, paths: Sequence[str], responses: Sequence[Any]) -> dict[str, _Seen]:
        """The keys ``paths`` from the range responses of a transaction (one response per path, in order)."""
        seen: dict[str, _Seen] = {}
        for path, found in zip(paths, responses, strict=True):
            if found:
                kv = found[0][1]
                seen[path] = _Seen(_decode(kv), int(kv.mod_revision))
            else:
                seen[path] = _ABSENT
        return seen

    # -- the port: reads -------------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult | None:
        """The value and stat at ``path`` (a linearizable read), or None."""
        check_path(path)
        self._check_open()
        kv = await self._conn.call(f"get {path}", lambda client: client.get(self._key(path)))
        if kv is None:
            return None
        record = _decode(kv)
        return GetResult(record.value, self._stat(path, record, int(kv.lease)))

    async def exists(self, path: str) -> bool:
        """Whether ``path`` holds a value."""
        return await self.get(path) is not None

    async def get_children(self, path: str) -> list[str]:
        """The sorted first segments of the keys below ``path`` (one keys-only range read)."""
        check_path(path)
        self._check_open()
        below = self._below(path)
        answer = await self._conn.call(
            f"get_children {path}", lambda client: client.get_prefix(below, keys_only=True)
        )
        names = {bytes(kv.key)[len(below) :].split(b"/", 1)[0] for kv in answer.kvs}
        return sorted(name.decode("utf-8", "replace") for name in names if name)

    # -- the port: writes ------------------------------------------------------------------------------------

    async def put(
        self, path: str, value: bytes, expected_version: int | None = None, *, ephemeral: bool = False
    ) -> Stat:
        """Create or replace ``path`` (port rules); ``ephemeral`` attaches it to this session's lease.
        Raises :class:`MetadataStoreError` for an ephemeral put while the session is lost."""
        op = check_put(Put(path, value, expected_version))
        flag = bool(ephemeral)
        return await self._write(
            [op.path],
            lambda txn, now: apply_put(txn, op, ephemeral=flag, now=now)[0],
            assume_absent=op.expected_version == -1,
        )

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Remove ``path`` (port rules)."""
        op = check_delete(Delete(path, expected_version))

        def apply(txn: _Overlay, _now: int) -> None:
            apply_delete(txn, op, missing_ok=False)

        await self._write([op.path], apply)

    async def delete_recursive(self, path: str) -> None:
        """Remove ``path`` and every key below it in one transaction."""
        check_path(path)
        self._check_open()
        below = self._below(path)
        ops = [tx.Delete(below, range_end=prefix_range_end(below))]
        if path != "/":
            ops.append(tx.Delete(self._key(path)))
        await self._conn.call(
            f"delete_recursive {path}", lambda client: client.transaction(compare=[], success=ops, failure=[])
        )

    async def multi(self, ops: Sequence[Put | Delete]) -> list[Stat | None]:
        """Apply ``ops`` in order as ONE etcd transaction (all or nothing)."""
        checked = check_multi(ops)
        creates = bool(checked) and all(isinstance(op, Put) and op.expected_version == -1 for op in checked)
        return await self._write(
            [op.path for op in checked],
            lambda txn, now: apply_multi(txn, checked, now=now)[0],
            assume_absent=creates,
        )

    async def _write(
        self, paths: Sequence[str], apply: Callable[[_Overlay, int], T], *, assume_absent: bool = False
    ) -> T:
        """Read ``paths`` (unless assumed absent), ``apply`` the engine, commit; on a commit lost to another
        store, again on the state the failed commit read (after a short random pause)."""
        self._check_open()
        keys = list(dict.fromkeys(paths))
        async with self._locks.hold(keys):
            seen = dict.fromkeys(keys, _ABSENT) if assume_absent else await self._read(keys)
            for attempt in range(_MAX_ATTEMPTS):
                overlay = _Overlay(seen)
                result = apply(overlay, now_ms())  # raises the port's errors on the state read
                if not overlay.changes:
                    return result
                committed, seen = await self._commit(overlay)
                if committed:
                    return result
                await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        raise MetadataStoreError(
            f"gave up writing {keys} after {_MAX_ATTEMPTS} commits lost to concurrent writers of the same paths"
        )

    async def _read(self, paths: list[str]) -> dict[str, _Seen]:
        if not paths:
            return {}
        gets = [tx.Get(self._key(path)) for path in paths]
        _, responses = await self._conn.call(
            "read", lambda client: client.transaction(compare=[], success=gets, failure=[])
        )
        return self._seen_of(paths, responses)

    async def _commit(self, overlay: _Overlay) -> tuple[bool, dict[str, _Seen]]:
        """Commit ``overlay.changes`` if no key read changed since; else return the keys as they are now."""
        lease = 0
        if any(record is not None and record.ephemeral for record in overlay.changes.values()):
            lease = self._session.lease_for_ephemeral()
        compare, success, failure = [], [], []
        for path, seen in overlay.seen.items():
            key = self._key(path)
            compare.append(tx.Create(key) == 0 if seen.record is None else tx.Mod(key) == seen.mod_revision)
            failure.append(tx.Get(key))
        for path, record in overlay.changes.items():
            key = self._key(path)
            if record is not None:
                success.append(tx.Put(key, _encode(record), lease=lease if record.ephemeral else 0))
            elif overlay.seen[path].record is not None:
                success.append(tx.Delete(key))
        try:
            committed, responses = await self._conn.call(
                "write", lambda client: client.transaction(compare=compare, success=success, failure=failure)
            )
        except MetadataStoreError as exc:
            if lease and "lease not found" in str(exc):
                self._session.check_now()
                raise MetadataStoreError(f"the etcd session (lease {lease}) expired: {exc}") from exc
            raise
        if committed:
            return True, overlay.seen
        return False, self._seen_of(list(overlay.seen), responses)

    # -- notifications ---------------------------------------------------------------------------------------

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """Call ``listener`` for every change under the prefix, by any store (on the event loop)."""
        self._notifier.register(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """Call ``listener`` with CONNECTION_LOST / RECONNECTED / SESSION_LOST / SESSION_REESTABLISHED."""
        self._notifier.register_session(listener)

    def _emit_session(self, event: SessionEvent) -> None:
        if self._loop is not None and not self._closed:
            self._notifier.schedule_session(self._loop, event)

    def _reachability(self, reachable: bool) -> None:
        self._emit_session(SessionEvent.RECONNECTED if reachable else SessionEvent.CONNECTION_LOST)

    def _on_event(self, event: Any) -> None:
        kv = event.kv
        path = self._path(bytes(kv.key))
        if path is None or self._loop is None:
            return
        changes = _deleted(path) if event.type == _DELETE else _put_notifications(path, kv)
        self._notifier.schedule(self._loop, changes)

    # -- close -----------------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the watch and the keep-alive task, revoke the lease (this session's ephemeral paths vanish at
        once; if etcd is unreachable they expire after the TTL), close the connections. Later calls raise
        :class:`MetadataStoreClosedError`. Idempotent; a cancelled ``close`` still completes in the background."""
        if self._close_task is None:
            self._closed = True
            self._notifier.clear()
            self._close_task = asyncio.get_running_loop().create_task(self._shutdown())
        await asyncio.shield(self._close_task)

    async def _shutdown(self) -> None:
        if self._watch is not None:
            await self._watch.close()
        await self._session.close()
        await self._conn.close()
