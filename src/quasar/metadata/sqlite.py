"""SqliteMetadataStore: the port on an embedded SQLite file (the single-broker default, like Pulsar's RocksDB
backend), never touching SQLite on the event loop.

Threading: ONE writer thread owns the ``sqlite3`` connection; every call (reads too) is queued to it and
awaited with ``asyncio.wrap_future``, so the loop only queues and resumes. The thread takes every call
already queued (up to 256) as one batch: all of a batch's writes share ONE ``BEGIN IMMEDIATE`` transaction and
ONE commit (so one fsync for many concurrent puts: group commit), each call inside its own ``SAVEPOINT`` so a
failed compare-and-set rolls back that call alone. Results and notifications are released only after the
commit: a put is durable on return (WAL, ``synchronous=FULL``). A call cancelled before its batch runs is
skipped.

Schema (``metadata`` table; an older ``kv`` table in the same file is left alone until a composition root
adopts it, see :meth:`SqliteMetadataStore.adopt_legacy_table`)::

    CREATE TABLE metadata (path TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL,
                           ctime INTEGER NOT NULL, mtime INTEGER NOT NULL, ephemeral INTEGER NOT NULL)
                           WITHOUT ROWID

Paths compare as UTF-8 bytes, so the paths below ``/a`` are the range ``['/a/', '/a0')``;
:meth:`~SqliteMetadataStore.get_children` reads the rows below in key order, a batch per query, seeking past
the rest of a child's subtree when a batch ends inside it. The session is the process: ephemeral rows are
deleted at :meth:`~SqliteMetadataStore.close` and, after a crash, at the next
:meth:`~SqliteMetadataStore.open`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import re
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from quasar.metadata._engine import (
    Record,
    apply_delete,
    apply_delete_recursive,
    apply_multi,
    apply_put,
    check_delete,
    check_multi,
    check_put,
    now_ms,
    stat_of,
)
from quasar.metadata._notifier import Notifier
from quasar.metadata.errors import (
    InvalidArgumentError,
    InvalidPathError,
    MetadataStoreClosedError,
    MetadataStoreError,
)
from quasar.metadata.port import Delete, GetResult, Notification, Put, SessionEvent, Stat, check_path

__all__ = ["SqliteMetadataStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_BATCH = 256
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS metadata (path TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL,"
    " ctime INTEGER NOT NULL, mtime INTEGER NOT NULL, ephemeral INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS metadata_ephemeral ON metadata (path) WHERE ephemeral",
)
_SELECT = "SELECT value, version, ctime, mtime, ephemeral FROM metadata WHERE path = ?"
_UPSERT = "INSERT OR REPLACE INTO metadata (path, value, version, ctime, mtime, ephemeral) VALUES (?, ?, ?, ?, ?, ?)"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Work = Callable[[sqlite3.Connection], tuple[T, Sequence[Notification]]]
"""A call run on the writer thread: its result and the notifications it produced."""
_Outcome = tuple[Any, Sequence[Notification], BaseException | None]


@dataclass(slots=True, eq=False)
class _Job(Generic[T]):
    work: Work[T]
    writes: bool
    loop: asyncio.AbstractEventLoop | None
    future: Future[T] = field(default_factory=Future)


def _range_end(prefix: str) -> str:
    """The smallest string above every string that starts with ``prefix`` (which ends with ``/``)."""
    return prefix[:-1] + "0"  # '0' follows '/' in ASCII


class _Txn:
    """The engine's view of the connection (inside the batch's transaction)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def load(self, path: str) -> Record | None:
        row = self._conn.execute(_SELECT, (path,)).fetchone()
        return None if row is None else Record(bytes(row[0]), row[1], row[2], row[3], bool(row[4]))

    def store(self, path: str, record: Record) -> None:
        values = (path, record.value, record.version, record.creation_time_ms, record.modification_time_ms,
                  int(record.ephemeral))  # fmt: skip
        self._conn.execute(_UPSERT, values)

    def remove(self, path: str) -> None:
        self._conn.execute("DELETE FROM metadata WHERE path = ?", (path,))

    def subtree(self, path: str) -> list[str]:
        if path == "/":
            return [row[0] for row in self._conn.execute("SELECT path FROM metadata")]
        prefix = path + "/"
        rows = self._conn.execute(
            "SELECT path FROM metadata WHERE path >= ? AND path < ?", (path, _range_end(prefix))
        )
        return [p for (p,) in rows if p == path or p.startswith(prefix)]


_CHILDREN_BATCH = 256


def _children(conn: sqlite3.Connection, path: str) -> list[str]:
    """Child segments below ``path``: rows are read in key order, up to ``_CHILDREN_BATCH`` per query; when a
    batch ends inside a child's subtree, the next query seeks past that subtree (so leaf children cost a
    row each, 100,000 of them a few hundred queries, and a deep subtree costs at most one batch)."""
    prefix = "/" if path == "/" else path + "/"
    end = _range_end(prefix)
    children: set[str] = set()
    bound, inclusive = prefix, True
    while True:
        op = ">=" if inclusive else ">"
        rows = conn.execute(
            f"SELECT path FROM metadata WHERE path {op} ? AND path < ? ORDER BY path LIMIT {_CHILDREN_BATCH}",
            (bound, end),
        ).fetchall()
        if not rows:
            break
        for (row_path,) in rows:
            children.add(row_path[len(prefix) :].partition("/")[0])
        last = rows[-1][0]
        segment, below, _ = last[len(prefix) :].partition("/")
        if below:  # inside the subtree of prefix+segment: skip the rest of it
            bound, inclusive = prefix + segment + "0", True
        else:  # prefix+segment itself: siblings like 'segment-x' sort before its subtree
            bound, inclusive = last, False
    return sorted(children)


class SqliteMetadataStore:
    """The port on SQLite at ``path`` (see the module docstring). Make one with ``await
    SqliteMetadataStore.open(path)``; close it with ``await store.close()``."""

    def __init__(self, path: Path | str) -> None:
        """Prefer :meth:`open`; this only prepares the (not yet started) writer thread."""
        self.path = Path(path)
        self._queue: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closing = False
        self._close_job: _Job[None] | None = None
        self._conn: sqlite3.Connection | None = None
        self._notifier = Notifier()
        self._thread = threading.Thread(
            target=self._run, name=f"quasar-metadata:{self.path.name}", daemon=True
        )

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({str(self.path)!r}{', closed' if self._closing else ''})"

    @classmethod
    async def open(cls, path: Path | str) -> SqliteMetadataStore:
        """Open (creating the file and its directory when missing) the store at ``path``, dropping the
        ephemeral rows a previous process left. Raises :class:`MetadataStoreError` when it cannot."""
        store = cls(path)
        store._thread.start()
        try:
            await store._call(store._open_connection, writes=False)
        except BaseException:
            await store.close()
            raise
        return store

    # -- writer thread ---------------------------------------------------------------------------------------

    def _open_connection(self, _conn: sqlite3.Connection | None) -> tuple[None, Sequence[Notification]]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MetadataStoreError(f"cannot create {self.path.parent}: {exc}") from exc
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            for statement in _SCHEMA:
                conn.execute(statement)
            dropped = conn.execute("DELETE FROM metadata WHERE ephemeral").rowcount
        except BaseException:
            conn.close()
            raise
        if dropped:
            log.info("%s: dropped %d ephemeral paths of a previous session", self.path, dropped)
        self._conn = conn
        return None, ()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = any(job is self._close_job for job in batch)
            work = [job for job in batch if job is not self._close_job]
            try:
                self._run_batch(work)
            except Exception as exc:  # noqa: BLE001 - never let the writer thread die: hand it to the callers
                for job in work:
                    if not job.future.done():
                        job.future.set_exception(exc)
            if closing:
                self._finish_close()
                return

    def _run_batch(self, batch: list[_Job[Any]]) -> None:
        jobs = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not jobs:
            return
        conn = self._conn
        if conn is None:  # only the open call runs before the connection exists
            for job in jobs:
                self._settle(job, *self._attempt(job, None))
            return
        try:
            outcomes = self._transaction(conn, jobs)
        except sqlite3.Error as exc:  # nothing of this batch is durable
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            failure = MetadataStoreError(f"metadata store {self.path}: {exc}")
            failure.__cause__ = exc
            for job in jobs:
                job.future.set_exception(failure)
            return
        for job, (result, events, error) in zip(jobs, outcomes, strict=True):
            self._settle(job, result, events, error)

    def _transaction(self, conn: sqlite3.Connection, jobs: list[_Job[Any]]) -> list[_Outcome]:
        """Run ``jobs`` in order in one transaction (when any writes), each write in its own savepoint."""
        transaction = any(job.writes for job in jobs)
        if transaction:
            conn.execute("BEGIN IMMEDIATE")
        outcomes: list[_Outcome] = []
        for job in jobs:
            if job.writes:
                conn.execute("SAVEPOINT call")
            outcome = self._attempt(job, conn)
            if job.writes:
                if outcome[2] is not None:
                    conn.execute("ROLLBACK TO call")
                conn.execute("RELEASE call")
            outcomes.append(outcome)
        if transaction:
            conn.execute("COMMIT")
        return outcomes

    @staticmethod
    def _attempt(job: _Job[Any], conn: sqlite3.Connection | None) -> _Outcome:
        try:
            result, events = job.work(conn)  # type: ignore[arg-type]  # None only for the open call
        except MetadataStoreError as exc:
            return None, (), exc
        except sqlite3.Error as exc:
            failure = MetadataStoreError(f"metadata store: {exc}")
            failure.__cause__ = exc
            return None, (), failure
        except Exception as exc:  # noqa: BLE001 - the caller's own error (a conversion callback): re-raised there
            return None, (), exc
        return result, events, None

    def _settle(
        self, job: _Job[Any], result: Any, events: Sequence[Notification], error: BaseException | None
    ) -> None:
        if error is not None:
            job.future.set_exception(error)
            return
        if events and job.loop is not None:
            self._notifier.schedule_threadsafe(job.loop, events)
        job.future.set_result(result)

    def _finish_close(self) -> None:
        job = self._close_job
        assert job is not None
        job.future.set_running_or_notify_cancel()
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                conn.execute("DELETE FROM metadata WHERE ephemeral")
                conn.close()
        except sqlite3.Error as exc:
            log.warning("%s: closing the metadata store: %s", self.path, exc)
        job.future.set_result(None)

    # -- queueing (event loop side) --------------------------------------------------------------------------

    async def _call(self, work: Work[T], *, writes: bool) -> T:
        loop = asyncio.get_running_loop()
        job: _Job[T] = _Job(work, writes, loop)
        with self._lock:
            if self._closing:
                raise MetadataStoreClosedError(f"metadata store {self.path} is closed")
            self._queue.put(job)
        return await asyncio.wrap_future(job.future, loop=loop)

    # -- the port --------------------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult | None:
        check_path(path)

        def work(conn: sqlite3.Connection) -> tuple[GetResult | None, Sequence[Notification]]:
            record = _Txn(conn).load(path)
            return (None if record is None else GetResult(record.value, stat_of(path, record))), ()

        return await self._call(work, writes=False)

    async def exists(self, path: str) -> bool:
        check_path(path)

        def work(conn: sqlite3.Connection) -> tuple[bool, Sequence[Notification]]:
            return conn.execute("SELECT 1 FROM metadata WHERE path = ?", (path,)).fetchone() is not None, ()

        return await self._call(work, writes=False)

    async def get_children(self, path: str) -> list[str]:
        check_path(path)
        return await self._call(lambda conn: (_children(conn, path), ()), writes=False)

    async def put(
        self, path: str, value: bytes, expected_version: int | None = None, *, ephemeral: bool = False
    ) -> Stat:
        op = check_put(Put(path, value, expected_version))
        flag = bool(ephemeral)
        return await self._call(
            lambda conn: apply_put(_Txn(conn), op, ephemeral=flag, now=now_ms()), writes=True
        )

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        op = check_delete(Delete(path, expected_version))
        await self._call(lambda conn: (None, apply_delete(_Txn(conn), op, missing_ok=False)), writes=True)

    async def delete_recursive(self, path: str) -> None:
        check_path(path)
        await self._call(lambda conn: (None, apply_delete_recursive(_Txn(conn), path)), writes=True)

    async def multi(self, ops: Sequence[Put | Delete]) -> list[Stat | None]:
        checked = check_multi(ops)
        return await self._call(lambda conn: apply_multi(_Txn(conn), checked, now=now_ms()), writes=True)

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._notifier.register(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._notifier.register_session(listener)

    async def close(self) -> None:
        """Finish the queued calls, delete this session's ephemeral rows, close the file and stop the writer
        thread. Idempotent; a cancelled ``close`` still completes in the background."""
        with self._lock:
            if self._close_job is None:
                self._closing = True
                self._close_job = _Job(lambda conn: (None, ()), True, None)
                if self._thread.is_alive():
                    self._queue.put(self._close_job)
                else:
                    self._close_job.future.set_result(None)
            job = self._close_job
        await asyncio.shield(asyncio.wrap_future(job.future))

    # -- upgrade support (generic: knows nothing of what the rows mean) --------------------------------------

    async def adopt_legacy_table(
        self,
        table: str,
        convert: Callable[[list[tuple[str, str]]], Sequence[tuple[str, bytes]]],
        *,
        key_column: str = "key",
        value_column: str = "value",
    ) -> int | None:
        """If this file holds ``table`` (``key_column``, ``value_column``) from an earlier schema, replace it in
        ONE transaction: read its rows, write ``convert(rows)`` as ``(path, value)`` (created at version 0, or
        replacing a present path), then drop ``table``. Returns the number of paths written, None when there
        is no such table. ``convert`` runs on the writer thread (keep it pure); if it raises, nothing changes
        and its exception propagates. Raises :class:`InvalidPathError` / :class:`InvalidArgumentError` for a
        converted row that is not a valid path and bytes."""
        for name in (table, key_column, value_column):
            if not _IDENTIFIER.fullmatch(name) or name == "metadata":
                raise InvalidArgumentError(f"not a legacy table or column name: {name!r}")

        def work(conn: sqlite3.Connection) -> tuple[int | None, Sequence[Notification]]:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            if found.fetchone() is None:
                return None, ()
            rows = [
                (str(k), str(v)) for k, v in conn.execute(f"SELECT {key_column}, {value_column} FROM {table}")
            ]
            txn, now = _Txn(conn), now_ms()
            converted = list(convert(rows))
            for path, value in converted:
                op = check_put(Put(path, value))
                if op.path == "/":
                    raise InvalidPathError("the root path '/' holds no value")
                current = txn.load(op.path)
                version = 0 if current is None else current.version + 1
                txn.store(op.path, Record(op.value, version, now, now, False))
            conn.execute(f"DROP TABLE {table}")
            return len(converted), ()

        return await self._call(work, writes=True)
