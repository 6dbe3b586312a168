"""ReplicatedStore: the :class:`~quasar.storage.port.MessageStorePort` a master's managed ledgers use.

It wraps the local store (RocketMQ ``CommitLog#asyncPutMessage`` + ``handleHA``):

* ``put`` / ``put_batch`` delegate, then :meth:`HAService.wakeup <quasar.replication.ha_service.HAService.wakeup>`
  (the connections ship the new bytes): one extra call per put.
* ``on_flushed(end, callback)`` / ``wait_flushed(end)``: the local flush first; on PUT_OK, with a
  :class:`~quasar.replication.group_transfer.GroupTransfer` (SYNC_MASTER), the group transfer wait of the
  same end offset; a failed local flush answers its own status without waiting for the slaves. Answers stay
  in commit log offset order (both stages complete in order). Without a group transfer (ASYNC_MASTER) the
  store's own ``on_flushed`` / ``wait_flushed`` are bound directly.
* everything else (get, query, queue offsets, ``set_queue_min_offset``, ``delete_queue``) delegates unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from quasar.replication.group_transfer import GroupTransfer
from quasar.storage.port import MessageStorePort
from quasar.storage.read_path import DEFAULT_MAX_GET_BYTES
from quasar.storage.results import GetResult, PutBatchResult, PutResult, StoredMessage
from quasar.storage.status import PutStatus

__all__ = ["ReplicatedStore", "WakeupTarget"]


class _Store(MessageStorePort, Protocol):
    def put_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes | bytearray | memoryview],
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutBatchResult: ...


class WakeupTarget(Protocol):
    """What the adapter tells after each put (the HA service)."""

    def wakeup(self) -> None: ...


class ReplicatedStore:
    """A master's store port: puts wake the HA connections; flush waits include the replicas on a
    SYNC_MASTER. Loop thread only. Satisfies :class:`~quasar.storage.port.MessageStorePort`."""

    def __init__(
        self, store: _Store, ha_service: WakeupTarget, group_transfer: GroupTransfer | None = None
    ) -> None:
        self.store = store
        self._put = store.put
        self._put_batch = store.put_batch
        self._wakeup = ha_service.wakeup
        self._store_on_flushed = store.on_flushed
        self._group_transfer: GroupTransfer | None = None
        self._transfer_wait: Callable[[int, Callable[[PutStatus], None]], None] = _answer_ok
        self.group_transfer = group_transfer
        self.get = store.get  # type: ignore[method-assign]  # same signature, bound once

    def __repr__(self) -> str:
        return f"ReplicatedStore({self.store!r}, sync={self.group_transfer is not None})"

    @property
    def group_transfer(self) -> GroupTransfer | None:
        """The SYNC_MASTER waits; None = ASYNC_MASTER. Settable (the role manager switches it on promotion)."""
        return self._group_transfer

    @group_transfer.setter
    def group_transfer(self, group_transfer: GroupTransfer | None) -> None:
        self._group_transfer = group_transfer
        attributes = vars(self)
        if group_transfer is None:
            # ASYNC_MASTER: the flush waits are the store's own, with no frame of ours in between
            attributes["on_flushed"] = self.store.on_flushed
            attributes["wait_flushed"] = self.store.wait_flushed
        else:
            self._transfer_wait = group_transfer.wait
            attributes.pop("on_flushed", None)
            attributes.pop("wait_flushed", None)

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutResult:
        """The store's ``put``, then wake the HA connections; SLAVE_NOT_AVAILABLE without writing while the
        group transfer refuses writes (:attr:`GroupTransfer.refusing_writes`, one attribute read)."""
        transfer = self._group_transfer
        if transfer is not None and transfer.refusing_writes:
            return _NOT_AVAILABLE
        return self.put_unchecked(
            topic,
            queue_id,
            body,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )

    def put_unchecked(
        self,
        topic: str,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutResult:
        """The store's ``put``, then wake the HA connections, never refused for missing replicas: the state
        journal's records (a ledger row must be written even while the entries that need it wait)."""
        result = self._put(
            topic,
            queue_id,
            body,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )
        self._wakeup()
        return result

    def put_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes | bytearray | memoryview],
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutBatchResult:
        """The store's ``put_batch``, then wake the HA connections (refused as :meth:`put` is)."""
        transfer = self._group_transfer
        if transfer is not None and transfer.refusing_writes:
            return _NOT_AVAILABLE_BATCH
        result = self._put_batch(
            topic,
            queue_id,
            bodies,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )
        self._wakeup()
        return result

    def on_flushed(self, commit_log_offset_end: int, callback: Callable[[PutStatus], None]) -> None:
        """``callback(status)`` once the local flush and (SYNC_MASTER) the replicas cover
        ``commit_log_offset_end`` (bytes): PUT_OK, a flush failure status, SLAVE_NOT_AVAILABLE or
        FLUSH_SLAVE_TIMEOUT. Loop thread, never before this returns, in offset order."""
        transfer_wait = self._transfer_wait

        def flushed(status: PutStatus) -> None:
            if status is PutStatus.PUT_OK:
                transfer_wait(commit_log_offset_end, callback)
            else:
                callback(status)

        self._store_on_flushed(commit_log_offset_end, flushed)

    def wait_flushed(self, commit_log_offset_end: int) -> Awaitable[PutStatus]:
        """:meth:`on_flushed` as an awaitable."""
        future: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()

        def answered(status: PutStatus) -> None:
            if not future.done():
                future.set_result(status)

        self.on_flushed(commit_log_offset_end, answered)
        return future

    def get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int = DEFAULT_MAX_GET_BYTES,
    ) -> GetResult:
        """The store's ``get`` (bound in ``__init__``)."""
        return self.store.get(topic, queue_id, queue_offset, max_count, max_bytes)

    def query(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_num: int = 32
    ) -> list[StoredMessage]:
        return self.store.query(topic, key, begin_ms, end_ms, max_num)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.store.min_queue_offset(topic, queue_id)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_queue_offset(topic, queue_id)

    def set_queue_min_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        self.store.set_queue_min_offset(topic, queue_id, queue_offset)

    async def delete_queue(self, topic: str, queue_id: int) -> int:
        """The master's files only: a slave keeps the deleted queue's units (its commit log is the master's,
        so the queue's end, where a new managed ledger of that name starts, is the same there)."""
        return await self.store.delete_queue(topic, queue_id)


_NOT_AVAILABLE = PutResult(PutStatus.SLAVE_NOT_AVAILABLE, -1, -1, 0, 0)
_NOT_AVAILABLE_BATCH = PutBatchResult(PutStatus.SLAVE_NOT_AVAILABLE, -1, -1, 0, 0)


def _answer_ok(next_offset: int, callback: Callable[[PutStatus], None]) -> None:
    callback(PutStatus.PUT_OK)


if TYPE_CHECKING:

    def _satisfies_the_port(store: ReplicatedStore) -> MessageStorePort:
        return store
