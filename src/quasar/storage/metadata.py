"""MetadataStore: a small transactional key-value store on embedded SQLite (generic: knows nothing of Pulsar).

Keys are str paths (``"/ledgers/<name>"``), values JSON-able objects (stored as compact JSON text). The
database runs in WAL mode with ``synchronous=FULL``: a write returns after its transaction is durable, and a
crash never leaves half a transaction (``put_many`` / ``delete_many`` / ``update`` are one transaction each).

Table::

    CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID

Threading: the connection lives on ONE dedicated worker thread and every operation, sync or async, runs there
in submission order. The sync methods (``get``, ``put``, ...) block the caller until done and are meant for
start-up, before the event loop serves traffic; the async ones (``aget``, ``aput``, ...) await the worker
without blocking the loop. Both can be mixed safely from any thread. Errors: :class:`InvalidMetadataError` for
a bad key or a non-JSON value (raised before anything is written), :class:`MetadataError` for SQLite failures
and stored values that are not JSON, :class:`StoreClosedError` after :meth:`MetadataStore.close`.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from quasar.storage.errors import InvalidMetadataError, MetadataError, StoreClosedError

T = TypeVar("T")

_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
_UPSERT = "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidMetadataError(f"metadata keys are non-empty str, got {key!r}")
    return key


def _encode(key: str, value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMetadataError(f"value for {key!r} is not JSON-serialisable: {exc}") from None


def _decode(key: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MetadataError(f"stored value for {key!r} is not valid JSON: {exc}") from None


class MetadataStore:
    """The SQLite database at ``path`` (created with its parent directory when missing).

    Raises :class:`MetadataError` when the database cannot be opened.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quasar-metadata")
        self._lock = threading.Lock()
        self._closed = False
        self._conn: sqlite3.Connection | None = None
        try:
            self._call(self._open)
        except BaseException:
            self._executor.shutdown(wait=True)
            self._closed = True
            raise

    def __repr__(self) -> str:
        return f"MetadataStore({self.path}{', closed' if self._closed else ''})"

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- worker thread ---------------------------------------------------------------------------------------

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise StoreClosedError("metadata store is closed")
        return conn

    def _get(self, key: str) -> Any:
        row = self._connection().execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else _decode(key, row[0])

    def _list(self, prefix: str) -> dict[str, Any]:
        result: dict[str, Any] = {}
        cursor = self._connection().execute(
            "SELECT key, value FROM kv WHERE key >= ? ORDER BY key", (prefix,)
        )
        for key, text in cursor:
            if not key.startswith(prefix):
                break  # keys sharing a prefix are contiguous in BINARY (UTF-8 byte) order
            result[key] = _decode(key, text)
        cursor.close()
        return result

    def _keys(self, prefix: str) -> builtins.list[str]:
        keys: builtins.list[str] = []
        cursor = self._connection().execute("SELECT key FROM kv WHERE key >= ? ORDER BY key", (prefix,))
        for (key,) in cursor:
            if not key.startswith(prefix):
                break
            keys.append(key)
        cursor.close()
        return keys

    def _write(self, puts: builtins.list[tuple[str, str]], deletes: builtins.list[tuple[str]]) -> None:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            if puts:
                conn.executemany(_UPSERT, puts)
            if deletes:
                conn.executemany("DELETE FROM kv WHERE key = ?", deletes)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- dispatch to the worker ------------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        with self._lock:
            if self._closed:
                raise StoreClosedError("metadata store is closed")
            return self._executor.submit(self._guarded, fn, *args)

    @staticmethod
    def _guarded(fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise MetadataError(f"metadata store: {exc}") from exc

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return self._submit(fn, *args).result()

    async def _acall(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._submit(fn, *args))

    @staticmethod
    def _prepare(
        puts: Mapping[str, Any] | None, deletes: Iterable[str]
    ) -> tuple[builtins.list[tuple[str, str]], builtins.list[tuple[str]]]:
        encoded = [(_check_key(key), _encode(key, value)) for key, value in (puts or {}).items()]
        if isinstance(deletes, str):
            raise InvalidMetadataError("deletes must be an iterable of keys, not a str")
        return encoded, [(_check_key(key),) for key in deletes]

    # -- sync API (start-up) ---------------------------------------------------------------------------------

    def get(self, key: str) -> Any | None:
        """The value at ``key``, or None when absent (a stored JSON null also reads as None)."""
        return self._call(self._get, _check_key(key))

    def put(self, key: str, value: Any) -> None:
        """Create or replace ``key`` (one durable transaction)."""
        self._call(self._write, *self._prepare({key: value}, ()))

    def put_many(self, items: Mapping[str, Any]) -> None:
        """Create or replace every key of ``items`` in one transaction: all or nothing."""
        self._call(self._write, *self._prepare(items, ()))

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error when absent)."""
        self._call(self._write, *self._prepare(None, (key,)))

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove every key in one transaction."""
        self._call(self._write, *self._prepare(None, keys))

    def update(self, puts: Mapping[str, Any] | None = None, deletes: Iterable[str] = ()) -> None:
        """Apply ``puts`` then ``deletes`` in ONE transaction (e.g. write a ledger table and drop a
        cursor)."""
        self._call(self._write, *self._prepare(puts, deletes))

    def list(self, prefix: str) -> dict[str, Any]:
        """Every key starting with ``prefix`` (``""``: all), with its value, in key order."""
        if not isinstance(prefix, str):
            raise InvalidMetadataError(f"prefix must be a str, got {prefix!r}")
        return self._call(self._list, prefix)

    def keys(self, prefix: str = "") -> builtins.list[str]:
        """Every key starting with ``prefix``, in order."""
        if not isinstance(prefix, str):
            raise InvalidMetadataError(f"prefix must be a str, got {prefix!r}")
        return self._call(self._keys, prefix)

    def close(self) -> None:
        """Close the connection and stop the worker (waits for queued operations). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            future = self._executor.submit(self._close)
        try:
            future.result()
        finally:
            self._executor.shutdown(wait=True)

    # -- async API -------------------------------------------------------------------------------------------

    async def aget(self, key: str) -> Any | None:
        return await self._acall(self._get, _check_key(key))

    async def aput(self, key: str, value: Any) -> None:
        await self._acall(self._write, *self._prepare({key: value}, ()))

    async def aput_many(self, items: Mapping[str, Any]) -> None:
        await self._acall(self._write, *self._prepare(items, ()))

    async def adelete(self, key: str) -> None:
        await self._acall(self._write, *self._prepare(None, (key,)))

    async def adelete_many(self, keys: Iterable[str]) -> None:
        await self._acall(self._write, *self._prepare(None, keys))

    async def aupdate(self, puts: Mapping[str, Any] | None = None, deletes: Iterable[str] = ()) -> None:
        await self._acall(self._write, *self._prepare(puts, deletes))

    async def alist(self, prefix: str) -> dict[str, Any]:
        if not isinstance(prefix, str):
            raise InvalidMetadataError(f"prefix must be a str, got {prefix!r}")
        return await self._acall(self._list, prefix)

    async def akeys(self, prefix: str = "") -> builtins.list[str]:
        if not isinstance(prefix, str):
            raise InvalidMetadataError(f"prefix must be a str, got {prefix!r}")
        return await self._acall(self._keys, prefix)
