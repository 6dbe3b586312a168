"""HAConnection: one slave's connection on the master (RocketMQ ``HAConnection`` with its ``ReadSocketService``
and ``WriteSocketService``; the handshake and the epoch cut of RocketMQ 5 ``AutoSwitchHAConnection``).

Life of a connection (frames in :mod:`quasar.replication.ha_protocol`):

1. read HELLO (within ``ha_housekeeping_interval_s``); answer HANDSHAKE with the master's epoch, max offset
   and epoch entries. WRONG_GROUP / NOT_MASTER: answer, then close.
2. wait for the slave's first REPORT (sent once it truncated to the consistent point). An offset the master
   does not hold (above its max, below its min) closes the connection with the reason logged: the slave must
   truncate or resynchronise. An empty slave (HELLO and REPORT at 0) of a master whose retention removed
   the first segments gets everything retained, from the master's min offset (a segment start; RocketMQ 4.x
   started a new slave at the master's *last* segment instead, so it never had the history).
3. two child tasks in one TaskGroup: the *reader* takes REPORTs (the slave's acked offset) and closes the
   connection after ``ha_housekeeping_interval_s`` without one; the *writer* ships TRANSFER frames from the
   reported offset with ``store.read_commit_log`` (at most ``ha_transfer_batch_size`` bytes each, cut at the
   next epoch's start), awaits ``drain()`` after each (transport back-pressure), sleeps on the service's
   wake-up when caught up and sends an empty TRANSFER (heartbeat) after ``ha_send_heartbeat_interval_s`` idle.

Any error ends both tasks; the connection closes and the owner is told (:meth:`ConnectionOwner.connection_closed`).
The owner (the :class:`~quasar.replication.ha_service.HAService`) holds the task that runs :meth:`HAConnection.run`
and cancels it on stop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from quasar.errors import QuasarError
from quasar.replication.config import ReplicationConfig
from quasar.replication.errors import HAProtocolError, ReplicationError
from quasar.replication.ha_protocol import (
    NEED_DATA,
    EpochPair,
    Handshake,
    HandshakeStatus,
    Hello,
    MasterSideDecoder,
    Report,
    encode_handshake,
    encode_transfer_header,
)
from quasar.replication.ports import ReplicaStore

__all__ = ["ConnectionOwner", "HAConnection"]

log = logging.getLogger("quasar.replication.ha_service")

_READ_SIZE = 64 * 1024


class _PeerClosed(Exception):
    """The slave closed its side."""


class ConnectionOwner(Protocol):
    """What a connection needs from its service (implemented by ``HAService``)."""

    @property
    def store(self) -> ReplicaStore: ...

    @property
    def config(self) -> ReplicationConfig: ...

    @property
    def confirm_offset(self) -> int: ...

    def handshake_status(self, group: str) -> tuple[HandshakeStatus, int]:
        """The answer to a HELLO naming ``group``, and the master epoch to put in it."""
        ...

    def serving(self) -> bool:
        """False once this broker is no longer the master: the connections close."""
        ...

    def epoch_range(self, offset: int) -> tuple[int, int, int | None]:
        """``(epoch, epoch start, next epoch's start or None)`` of the commit log byte at ``offset``."""
        ...

    def connection_registered(self, connection: HAConnection) -> None: ...

    def connection_closed(self, connection: HAConnection) -> None: ...

    def report(self, connection: HAConnection, offset: int) -> None: ...

    async def wait_for_data(self, timeout: float) -> bool:
        """Until the next wake-up (True) or ``timeout`` seconds (False)."""
        ...


class HAConnection:
    """One slave on the master. ``broker_id`` is known after HELLO; ``caught_up_mark`` is ``(offset, loop
    time)`` of the last transfer that brought the slave to the master's max offset (RocketMQ
    ``lastMasterMaxOffset`` / ``lastTransferTimeMs``): a report at or past the offset means the slave was
    caught up at that time."""

    def __init__(self, owner: ConnectionOwner, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._owner = owner
        self._reader = reader
        self._writer = writer
        self._decoder = MasterSideDecoder()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.broker_id: int | None = None
        self.slave_ack_offset = -1
        """The slave's last reported max offset (bytes); -1 before its first REPORT."""
        self.caught_up_mark: tuple[int, float] | None = None
        self.transferred_offset = -1
        """End of what was written to the slave (bytes)."""

    def __repr__(self) -> str:
        return f"HAConnection({self.peer}, broker_id={self.broker_id}, acked={self.slave_ack_offset})"

    def close(self) -> None:
        """Close the transport; :meth:`run` ends soon after (the read fails)."""
        self._writer.close()

    async def run(self) -> None:
        """Serve the slave until an error, a timeout, the slave closing or cancellation; never raises
        anything but CancelledError. The transport is closed and the owner told on the way out."""
        try:
            await self._serve()
        except Exception as exc:
            leaf = _leaf(exc)
            if isinstance(leaf, _PeerClosed):
                log.info("HA connection from %s (broker %s) closed by the slave", self.peer, self.broker_id)
            elif isinstance(leaf, HAProtocolError | QuasarError | OSError | TimeoutError):
                log.warning("closing HA connection from %s (broker %s): %r", self.peer, self.broker_id, leaf)
            else:
                log.error("HA connection from %s failed", self.peer, exc_info=leaf)
        finally:
            self._writer.close()
            self._owner.connection_closed(self)

    async def _serve(self) -> None:
        owner = self._owner
        store = owner.store
        hello = await self._read_frame()
        if not isinstance(hello, Hello):  # pragma: no cover - the decoder returns HELLO first
            raise HAProtocolError("expected HELLO")
        self.broker_id = hello.broker_id
        status, epoch = owner.handshake_status(hello.group)
        entries: tuple[EpochPair, ...] = tuple((e.epoch, e.start_offset) for e in store.epoch_file.entries)
        handshake = Handshake(
            status=status, master_epoch=epoch, max_offset=store.max_commit_log_offset, epochs=entries
        )
        self._writer.write(encode_handshake(handshake))
        await self._writer.drain()
        if status is not HandshakeStatus.OK:
            log.warning(
                "HA connection from %s (broker %d, group %r) refused: %s",
                self.peer,
                hello.broker_id,
                hello.group,
                status.name,
            )
            return
        owner.connection_registered(self)
        first = await self._read_frame()
        if not isinstance(first, Report):  # pragma: no cover - the decoder returns REPORTs after HELLO
            raise HAProtocolError("expected REPORT")
        low, high = store.min_commit_log_offset, store.max_commit_log_offset
        start = first.max_offset
        if start == 0 and hello.max_offset == 0 and low > 0:
            start = low  # an empty replica gets the whole retained history, from the first segment's start
        if not low <= start <= high:
            raise HAProtocolError(
                f"slave {hello.broker_id} reported offset {start}, outside the master's "
                f"[{low}, {high}]: it must truncate or resynchronise"
            )
        log.info(
            "HA connection from %s: broker %d follows from offset %d (master max %d, epoch %d)",
            self.peer,
            hello.broker_id,
            start,
            high,
            epoch,
        )
        self._on_report(first.max_offset)
        async with asyncio.TaskGroup() as group:
            group.create_task(self._read_reports(), name=f"ha-read-{self.peer}")
            group.create_task(self._transfer(start), name=f"ha-write-{self.peer}")

    async def _read_frame(self) -> Hello | Report:
        """The next frame, reading as needed; TimeoutError after the housekeeping interval of silence."""
        decoder = self._decoder
        while (frame := decoder.next_frame()) is NEED_DATA:
            async with asyncio.timeout(self._owner.config.ha_housekeeping_interval_s):
                data = await self._reader.read(_READ_SIZE)
            decoder.receive_data(data)
            if not data and decoder.next_frame() is NEED_DATA:
                raise _PeerClosed
        return frame

    def _on_report(self, offset: int) -> None:
        high = self._owner.store.max_commit_log_offset
        if offset > high:
            raise HAProtocolError(f"slave reported offset {offset}, beyond the master's max offset {high}")
        self.slave_ack_offset = offset
        self._owner.report(self, offset)

    async def _read_reports(self) -> None:
        while True:
            frame = await self._read_frame()
            if isinstance(frame, Report):
                self._on_report(frame.max_offset)
            else:  # pragma: no cover - the decoder returns one HELLO only
                raise HAProtocolError("a second HELLO")

    async def _transfer(self, offset: int) -> None:
        """Ship the commit log from ``offset`` (bytes) forever (RocketMQ WriteSocketService)."""
        owner = self._owner
        store = owner.store
        config = owner.config
        batch = config.ha_transfer_batch_size
        heartbeat_s = config.ha_send_heartbeat_interval_s
        writer = self._writer
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        self.transferred_offset = offset
        while True:
            if not owner.serving():
                raise ReplicationError("this broker is no longer the group's master")
            master_max = store.max_commit_log_offset
            if offset < master_max:
                epoch, epoch_start, epoch_end = owner.epoch_range(offset)
                limit = batch if epoch_end is None or epoch_end <= offset else min(batch, epoch_end - offset)
                body = store.read_commit_log(offset, limit)
                if not body:
                    raise HAProtocolError(
                        f"the store returned no bytes at {offset} below its max {master_max}"
                    )
                writer.write(
                    encode_transfer_header(offset, epoch, epoch_start, owner.confirm_offset, len(body))
                )
                writer.write(body)
                offset += len(body)
                self.transferred_offset = offset
                last_write = loop.time()
                if offset >= master_max:
                    self.caught_up_mark = (offset, last_write)
                await writer.drain()
                continue
            idle = loop.time() - last_write
            if idle < heartbeat_s and await owner.wait_for_data(heartbeat_s - idle):
                continue
            if store.max_commit_log_offset > offset:
                continue
            epoch, epoch_start, _ = owner.epoch_range(offset)
            writer.write(encode_transfer_header(offset, epoch, epoch_start, owner.confirm_offset, 0))
            last_write = loop.time()
            self.caught_up_mark = (offset, last_write)
            await writer.drain()


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (TaskGroup wraps its children's errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
