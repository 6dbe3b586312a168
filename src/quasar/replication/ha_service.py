"""HAService: the master's side of replication (RocketMQ ``HAService`` / ``AcceptSocketService``, with RocketMQ 5
``AutoSwitchHAService``'s sync-state set).

* Listens on the HA port; each accepted slave is an :class:`~quasar.replication.ha_connection.HAConnection`
  run in a task this service owns (cancelled and awaited by :meth:`HAService.stop`). A second connection from
  the same broker id replaces the first.
* :meth:`HAService.wakeup` (called by the store adapter after each put) wakes the connections that wait for
  new data; it is one attribute test when nobody waits.
* Acks: every REPORT updates :attr:`HAService.acked_offsets` and calls the ``on_ack`` listeners (the
  :class:`~quasar.replication.group_transfer.GroupTransfer`, which keeps its refuse-writes flag from them); so
  do changes of the sync-state set, connections and disconnections.
* In sync (RocketMQ ``HAConnection#isSlaveOK`` / ``inSyncReplicasNums``): a slave is in sync while connected
  and less than ``ha_max_gap_not_in_sync`` bytes behind the master's max offset.
* Sync-state set (RocketMQ 5 ``SyncStateSet``, broker ids, the master's own included): a slave joins once a
  REPORT shows it caught up (its acked offset reached the master's max offset, now or as of the last transfer
  that reached it); a member leaves after ``ha_max_time_slave_not_catchup_s`` without catching up
  (disconnected members stop catching up, so they leave after as long). Each change goes through the injected
  :class:`~quasar.replication.ports.SyncStateSetStore`, one at a time, from a maintenance task. The local view
  (:attr:`HAService.sync_state_set`) is the safe one: a member being added already counts while the store is
  asked (RocketMQ ``isSynchronizingSyncStateSet``: receipts wait for it too); a member being removed still
  counts until the store accepted. A store answering False fences this master: the set is frozen and
  :attr:`HAService.fenced` is True (the role manager steps down).
* :attr:`HAService.confirm_offset`: the lowest acked offset over the sync-state set (the master's max offset
  when the set holds only the master): what every in-sync replica has (RocketMQ 5 ``confirmOffset``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Callable

from quasar.replication.config import ReplicationConfig
from quasar.replication.ha_connection import HAConnection
from quasar.replication.ha_protocol import HandshakeStatus
from quasar.replication.ports import ReplicaStore, SyncStateSetStore

__all__ = ["AckListener", "HAService", "SyncStateSetStore"]

log = logging.getLogger(__name__)

AckListener = Callable[[int, int], None]
"""``listener(broker_id, acked_offset)``: a slave reported, or the sync-state set / connections changed
(then ``acked_offset`` is that broker's last acked offset, -1 if none). Loop thread; must not raise."""


class HAService:
    """The master's HA listener and its slaves.

    Args:
        store: the master's store (:class:`~quasar.replication.ports.ReplicaStore`).
        group: the broker group name (RocketMQ brokerName); a HELLO naming another gets WRONG_GROUP.
        epoch_source: ``() -> master epoch``, or None when this broker is not (or no longer) the master: HELLOs
            are then answered NOT_MASTER (so are they while the store is in replica mode).
        config: the replication settings.
        broker_id: this master's broker id (a member of its own sync-state set), 0 by default.
        sync_state_set_store: where set changes are recorded; None = locally only (tests, a lone group).
        sync_state_set: the set as last recorded (e.g. read from etcd at promotion); the master is added.
    """

    def __init__(
        self,
        store: ReplicaStore,
        *,
        group: str,
        epoch_source: Callable[[], int | None],
        config: ReplicationConfig,
        broker_id: int = 0,
        sync_state_set_store: SyncStateSetStore | None = None,
        sync_state_set: frozenset[int] = frozenset(),
    ) -> None:
        self._store = store
        self._config = config
        self.group = group
        self.broker_id = broker_id
        self._epoch_source = epoch_source
        self._set_store = sync_state_set_store
        self._confirmed_set = frozenset(sync_state_set) | {broker_id}
        self._adding: frozenset[int] = frozenset()
        self._fenced = False
        self._acked: dict[int, int] = {}
        self._connections: dict[int, HAConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: list[AckListener] = []
        self._last_caught_up: dict[int, float] = {}
        self._grow_candidates: set[int] = set()
        self._maintain = asyncio.Event()
        self._maintain_task: asyncio.Task[None] | None = None
        self._data_waiter: asyncio.Future[None] | None = None
        self._server: asyncio.Server | None = None
        self._started_at = 0.0
        self._stopping = False

    def __repr__(self) -> str:
        return (
            f"HAService(group={self.group!r}, slaves={sorted(self._connections)}, "
            f"sync_state_set={sorted(self.sync_state_set)}, fenced={self._fenced})"
        )

    # -- life cycle -------------------------------------------------------------------------------------------

    @property
    def store(self) -> ReplicaStore:
        return self._store

    @property
    def config(self) -> ReplicationConfig:
        return self._config

    @property
    def port(self) -> int:
        """The bound HA port (after :meth:`start`). Raises RuntimeError before."""
        if self._server is None:
            raise RuntimeError("the HA service is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str = "0.0.0.0", port: int | None = None) -> None:
        """Bind the HA listener (``port`` None = ``config.ha_port``; 0 = any free port) and start the
        maintenance task. Raises OSError when the port cannot be bound (nothing is left running),
        RuntimeError when already started."""
        if self._server is not None:
            raise RuntimeError("the HA service is already started")
        loop = asyncio.get_running_loop()
        self._started_at = loop.time()
        self._stopping = False
        self._server = await asyncio.start_server(
            self._accept, host, self._config.ha_port if port is None else port, reuse_address=True
        )
        self._maintain_task = loop.create_task(self._maintain_loop(), name=f"ha-sync-state-set-{self.group}")
        log.info("HA service of group %r listening on %s:%d", self.group, host, self.port)

    async def stop(self) -> None:
        """Close the listener and every connection; cancel and await the owned tasks. Idempotent."""
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        if self._maintain_task is not None:
            tasks.append(self._maintain_task)
            self._maintain_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if server is not None:
            await server.wait_closed()
        waiter, self._data_waiter = self._data_waiter, None
        if waiter is not None and not waiter.done():
            waiter.cancel()

    def become_master(self, sync_state_set: frozenset[int]) -> None:
        """This broker was elected master: start from the group's recorded sync-state set (RocketMQ 5: the
        new master's set is itself until slaves catch up), forget a previous term's acks and fencing, and
        count every recorded member as caught up now (the not-catch-up clock starts at the promotion)."""
        now = asyncio.get_running_loop().time()
        self._confirmed_set = frozenset(sync_state_set) | {self.broker_id}
        self._adding = frozenset()
        self._fenced = False
        self._acked.clear()
        self._grow_candidates.clear()
        self._last_caught_up = dict.fromkeys(self._confirmed_set, now)
        self._started_at = now
        self._maintain.set()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._stopping:
            writer.close()
            return
        connection = HAConnection(self, reader, writer)
        task = asyncio.get_running_loop().create_task(
            connection.run(), name=f"ha-connection-{connection.peer}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what the connections and the group transfer see ------------------------------------------------------

    def wakeup(self) -> None:
        """New data to ship (after a put). Free when no connection waits."""
        waiter = self._data_waiter
        if waiter is not None:
            self._data_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_data(self, timeout: float) -> bool:
        """Until the next :meth:`wakeup` (True) or ``timeout`` seconds (False). Shared by every connection."""
        waiter = self._data_waiter
        if waiter is None:
            waiter = self._data_waiter = asyncio.get_running_loop().create_future()
        done, _ = await asyncio.wait((waiter,), timeout=timeout)
        return bool(done)

    def on_ack(self, listener: AckListener) -> Callable[[], None]:
        """Call ``listener(broker_id, offset)`` on every REPORT and every change of the sync-state set or of
        the connected slaves; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    @property
    def acked_offsets(self) -> dict[int, int]:
        """Broker id -> the slave's last reported max offset (bytes); kept after a disconnection. A copy."""
        return dict(self._acked)

    def acked_offset(self, broker_id: int) -> int:
        """The slave's last reported offset (bytes), -1 if it never reported."""
        return self._acked.get(broker_id, -1)

    @property
    def connected_slaves(self) -> frozenset[int]:
        """Broker ids of the slaves connected past the handshake."""
        return frozenset(self._connections)

    def is_slave_in_sync(self, broker_id: int) -> bool:
        """Connected and less than ``ha_max_gap_not_in_sync`` bytes behind the master's max offset."""
        if broker_id not in self._connections:
            return False
        acked = self._acked.get(broker_id, -1)
        return acked >= 0 and self._store.max_commit_log_offset - acked < self._config.ha_max_gap_not_in_sync

    def in_sync_slave_count(self) -> int:
        """Slaves :meth:`is_slave_in_sync` (the master not counted)."""
        return sum(1 for broker_id in self._connections if self.is_slave_in_sync(broker_id))

    @property
    def sync_state_set(self) -> frozenset[int]:
        """The local view of the sync-state set: recorded members plus the one being added."""
        return self._confirmed_set | self._adding

    @property
    def recorded_sync_state_set(self) -> frozenset[int]:
        """The set as last accepted by the sync-state set store."""
        return self._confirmed_set

    @property
    def fenced(self) -> bool:
        """True once the sync-state set store refused a change: this master is stale and should step down."""
        return self._fenced

    @property
    def confirm_offset(self) -> int:
        """Lowest acked offset over the sync-state set's slaves; the master's max offset when it is alone."""
        master_max = self._store.max_commit_log_offset
        lowest = master_max
        for broker_id in self.sync_state_set:
            if broker_id != self.broker_id:
                lowest = min(lowest, self._acked.get(broker_id, 0))
        return lowest

    # -- ConnectionOwner --------------------------------------------------------------------------------------

    def handshake_status(self, group: str) -> tuple[HandshakeStatus, int]:
        epoch = self._epoch_source()
        if group != self.group:
            return HandshakeStatus.WRONG_GROUP, epoch or 0
        if epoch is None or self._store.replica_mode:
            return HandshakeStatus.NOT_MASTER, epoch or 0
        return HandshakeStatus.OK, epoch

    def serving(self) -> bool:
        return self._epoch_source() is not None and not self._store.replica_mode

    def epoch_range(self, offset: int) -> tuple[int, int, int | None]:
        entries = self._store.epoch_file.entries
        if not entries:
            return self._epoch_source() or 0, 0, None
        starts = [entry.start_offset for entry in entries]
        index = max(bisect.bisect_right(starts, offset) - 1, 0)
        entry = entries[index]
        return entry.epoch, entry.start_offset, starts[index + 1] if index + 1 < len(starts) else None

    def connection_registered(self, connection: HAConnection) -> None:
        broker_id = connection.broker_id
        assert broker_id is not None  # set from HELLO before the handshake is answered
        previous = self._connections.get(broker_id)
        if previous is not None and previous is not connection:
            log.warning("broker %d connected again from %s: closing %s", broker_id, connection.peer, previous)
            previous.close()
        self._connections[broker_id] = connection
        self._notify(broker_id, self._acked.get(broker_id, -1))

    def connection_closed(self, connection: HAConnection) -> None:
        broker_id = connection.broker_id
        if broker_id is not None and self._connections.get(broker_id) is connection:
            del self._connections[broker_id]
            self._notify(broker_id, self._acked.get(broker_id, -1))

    def report(self, connection: HAConnection, offset: int) -> None:
        broker_id = connection.broker_id
        assert broker_id is not None
        self._acked[broker_id] = offset
        mark = connection.caught_up_mark
        caught_up_at: float | None = None
        if offset >= self._store.max_commit_log_offset:
            caught_up_at = asyncio.get_running_loop().time()
        elif mark is not None and offset >= mark[0]:
            caught_up_at = mark[1]
        if caught_up_at is not None:
            if caught_up_at > self._last_caught_up.get(broker_id, -1.0):
                self._last_caught_up[broker_id] = caught_up_at
            if broker_id not in self._confirmed_set and not self._fenced:
                self._grow_candidates.add(broker_id)
                self._maintain.set()
        self._notify(broker_id, offset)

    def _notify(self, broker_id: int, offset: int) -> None:
        for listener in self._listeners:
            try:
                listener(broker_id, offset)
            except Exception:
                log.exception("HA ack listener %r failed", listener)

    # -- sync-state set maintenance ---------------------------------------------------------------------------

    async def _maintain_loop(self) -> None:
        interval = min(1.0, self._config.ha_max_time_slave_not_catchup_s / 4)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._maintain.wait()
            self._maintain.clear()
            if self._fenced or not self.serving():  # a slave, or a fenced master: nothing to maintain
                continue
            try:
                await self._grow()
                await self._shrink()
            except Exception:
                log.exception("sync-state set maintenance of group %r failed", self.group)

    async def _grow(self) -> None:
        candidates, self._grow_candidates = self._grow_candidates, set()
        for broker_id in sorted(candidates):
            if self._fenced or broker_id in self._confirmed_set or broker_id not in self._connections:
                continue
            self._adding = frozenset({broker_id})
            try:
                accepted = await self._alter(self._confirmed_set | {broker_id})
            finally:
                self._adding = frozenset()
            if accepted:
                self._confirmed_set = self._confirmed_set | {broker_id}
                log.info(
                    "group %r: broker %d joins the sync-state set %s", self.group, broker_id, self._set_text
                )
            self._notify(broker_id, self._acked.get(broker_id, -1))

    async def _shrink(self) -> None:
        now = asyncio.get_running_loop().time()
        limit = self._config.ha_max_time_slave_not_catchup_s
        for broker_id in sorted(self._confirmed_set - {self.broker_id}):
            if self._fenced:
                return
            if now - self._last_caught_up.get(broker_id, self._started_at) <= limit:
                continue
            if await self._alter(self._confirmed_set - {broker_id}):
                self._confirmed_set = self._confirmed_set - {broker_id}
                log.warning(
                    "group %r: broker %d leaves the sync-state set %s (not caught up for %.1f s)",
                    self.group,
                    broker_id,
                    self._set_text,
                    limit,
                )
                self._notify(broker_id, self._acked.get(broker_id, -1))

    async def _alter(self, new_set: frozenset[int]) -> bool:
        """Record ``new_set``; False when not recorded (fenced, or the store failed: retried next round)."""
        if self._set_store is None:
            return True
        try:
            accepted = await self._set_store.alter(new_set)
        except Exception as exc:  # noqa: BLE001 - the metadata store's failures are retried, never fatal
            log.warning("group %r: recording sync-state set %s failed: %r", self.group, sorted(new_set), exc)
            return False
        if not accepted:
            self._fenced = True
            log.error(
                "group %r: the sync-state set store refused %s: this master is fenced",
                self.group,
                sorted(new_set),
            )
        return accepted

    @property
    def _set_text(self) -> str:
        return str(sorted(self._confirmed_set))
