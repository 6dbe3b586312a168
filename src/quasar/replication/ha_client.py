"""HAClient: the slave's side of replication (RocketMQ ``HAClient`` with RocketMQ 5 ``AutoSwitchHAClient``'s
handshake and epoch truncation).

One owned task (:meth:`HAClient.start` / :meth:`HAClient.stop`) connects to the master's HA address (asked
of ``master_address()`` before every attempt; None = no master known yet) and, per connection:

1. sends HELLO (group, broker id, max commit log offset, epoch entries) and reads HANDSHAKE. WRONG_GROUP /
   NOT_MASTER: retry later.
2. truncates to the consistent point (:func:`~quasar.storage.epoch_file.find_consistent_point` of both epoch
   lists): when it lies below the local max offset, ``store.truncate_commit_log`` runs in an executor (it
   also truncates the epoch file). **No common epoch**: an empty replica (max offset 0) replicates from 0;
   a replica holding data refuses (:class:`~quasar.replication.errors.DivergedHistoryError`, logged as an
   error on every attempt, :attr:`HAClient.diverged` True), as RocketMQ does: throwing away a whole commit
   log is left to an operator (empty the replica's store), since the cause may as well be a misconfigured
   group as a lost history.
3. REPORTs its max offset (the master starts shipping from it), then appends every TRANSFER with
   ``store.append_replicated`` on the loop thread (one memcpy-sized write): the frame's offset must equal the
   local max offset, else the connection is closed and the next one resumes from the local offset
   (RocketMQ; an empty commit log accepts the master's min offset, a segment start, for its first
   frame); a frame of an epoch newer than the local last epoch first appends ``(epoch, epoch start)`` to
   the epoch file (in an executor: it fsyncs). A REPORT follows every read that appended something and at
   least every ``ha_send_heartbeat_interval_s``; ``ha_housekeeping_interval_s`` without any frame closes the
   connection.

Failed attempts back off from ``ha_reconnect_min_backoff_s``, doubling up to ``ha_reconnect_max_backoff_s``.
The store must be in replica mode (the role manager sets it); ``append_replicated`` refuses otherwise and
the client keeps retrying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from quasar.errors import QuasarError
from quasar.replication.config import ReplicationConfig
from quasar.replication.errors import (
    DivergedHistoryError,
    HandshakeRefusedError,
    HAProtocolError,
    TransferOffsetMismatchError,
)
from quasar.replication.ha_protocol import (
    NEED_DATA,
    Handshake,
    HandshakeStatus,
    Hello,
    SlaveSideDecoder,
    Transfer,
    encode_hello,
    encode_report,
)
from quasar.replication.ports import ReplicaStore
from quasar.storage.epoch_file import EpochEntry, find_consistent_point

__all__ = ["HAClient"]

log = logging.getLogger(__name__)

_READ_SIZE = 256 * 1024


class HAClient:
    """The slave's replication task.

    Args:
        store: the replica's store (in replica mode).
        group: the broker group name, checked by the master.
        broker_id: this slave's broker id (> 0 in RocketMQ).
        master_address: ``() -> (host, port)`` of the master's HA listener, or None when unknown.
        config: the replication settings.
        on_appended: called (loop thread) after each read whose frames appended bytes.
    """

    def __init__(
        self,
        store: ReplicaStore,
        *,
        group: str,
        broker_id: int,
        master_address: Callable[[], tuple[str, int] | None],
        config: ReplicationConfig,
        on_appended: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self.group = group
        self.broker_id = broker_id
        self._master_address = master_address
        self._config = config
        self._on_appended = on_appended
        self._task: asyncio.Task[None] | None = None
        self._blocking: asyncio.Future[object] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._connected = False
        self._confirm_offset = -1
        self._master_epoch = -1
        self._diverged = False
        self.sessions = 0
        """Connections that passed the handshake (a reconnection counts again)."""
        self.truncations: list[tuple[int, int]] = []
        """``(from max offset, to offset)`` of every truncation to a consistent point."""

    def __repr__(self) -> str:
        return (
            f"HAClient(group={self.group!r}, broker_id={self.broker_id}, connected={self._connected}, "
            f"max_offset={self._store.max_commit_log_offset})"
        )

    @property
    def connected(self) -> bool:
        """True between a successful handshake and the end of that connection."""
        return self._connected

    @property
    def confirm_offset(self) -> int:
        """The master's confirm offset in the last TRANSFER received (bytes); -1 before any."""
        return self._confirm_offset

    @property
    def master_epoch(self) -> int:
        """The master epoch of the last HANDSHAKE; -1 before any."""
        return self._master_epoch

    @property
    def diverged(self) -> bool:
        """True when the last handshake found no common epoch with local data (replication refused)."""
        return self._diverged

    @property
    def busy_off_loop(self) -> bool:
        """A truncation or an epoch-file write runs in a thread now: readers of the store (the state journal's
        applier) wait until it is over, since the files they would read are being cut."""
        return self._blocking is not None and not self._blocking.done()

    def start(self) -> None:
        """Start the replication task (loop thread). Raises RuntimeError when already started."""
        if self._task is not None:
            raise RuntimeError("the HA client is already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"ha-client-{self.group}")

    async def stop(self) -> None:
        """Close the connection; cancel and await the task. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        blocking = self._blocking
        if blocking is not None:  # a truncation or epoch write in a thread cannot be cancelled: let it end
            await asyncio.wait((blocking,))
        self._connected = False

    async def _off_loop(self, function: Callable[..., object], *args: object) -> None:
        """Run blocking store work in the default executor; a cancelled caller does not abandon it (stop()
        waits for it, so the store is never closed under a truncation)."""
        future = asyncio.get_running_loop().run_in_executor(None, function, *args)
        self._blocking = future
        try:
            await asyncio.shield(future)
        finally:
            if future.done():
                self._blocking = None

    # -- the task ---------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        config = self._config
        backoff = config.ha_reconnect_min_backoff_s
        while True:
            address = self._master_address()
            sessions = self.sessions
            if address is not None:
                try:
                    await self._session(address)
                except Exception as exc:  # noqa: BLE001 - every ending of a connection is logged, then retried
                    self._log_end(address, _leaf(exc))
                finally:
                    self._connected = False
            if self.sessions > sessions:
                backoff = config.ha_reconnect_min_backoff_s
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, config.ha_reconnect_max_backoff_s)

    def _log_end(self, address: tuple[str, int], exc: BaseException) -> None:
        where = f"{address[0]}:{address[1]}"
        if isinstance(exc, DivergedHistoryError):
            log.error(
                "HA client of group %r: %s; replication refused (empty this replica to resync)",
                self.group,
                exc,
            )
        elif isinstance(exc, HandshakeRefusedError | TransferOffsetMismatchError | ConnectionError):
            log.info("HA client of group %r: connection to %s ended: %s", self.group, where, exc)
        elif isinstance(exc, QuasarError | OSError | TimeoutError):
            log.warning("HA client of group %r: connection to %s failed: %r", self.group, where, exc)
        else:
            log.error("HA client of group %r: connection to %s failed", self.group, where, exc_info=exc)

    async def _session(self, address: tuple[str, int]) -> None:
        config = self._config
        async with asyncio.timeout(config.ha_housekeeping_interval_s):
            reader, writer = await asyncio.open_connection(*address)
        self._writer = writer
        try:
            store = self._store
            entries = tuple((entry.epoch, entry.start_offset) for entry in store.epoch_file.entries)
            hello = Hello(
                group=self.group,
                broker_id=self.broker_id,
                max_offset=store.max_commit_log_offset,
                epochs=entries,
            )
            writer.write(encode_hello(hello))
            await writer.drain()
            decoder = SlaveSideDecoder()
            handshake = await self._read_frame(reader, decoder)
            if not isinstance(handshake, Handshake):  # pragma: no cover - the decoder returns HANDSHAKE first
                raise HAProtocolError("expected HANDSHAKE")
            if handshake.status is not HandshakeStatus.OK:
                raise HandshakeRefusedError(
                    f"master at {address[0]}:{address[1]} answered {handshake.status.name}",
                    status=handshake.status,
                )
            self._master_epoch = handshake.master_epoch
            await self._truncate_to_consistent_point(handshake)
            self.sessions += 1
            self._connected = True
            log.info(
                "HA client of group %r: following %s:%d (epoch %d) from offset %d",
                self.group,
                address[0],
                address[1],
                handshake.master_epoch,
                store.max_commit_log_offset,
            )
            await self._report(writer)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._heartbeats(writer), name=f"ha-client-report-{self.group}")
                group.create_task(self._receive(reader, decoder, writer), name=f"ha-client-read-{self.group}")
        finally:
            self._writer = None
            writer.close()

    async def _truncate_to_consistent_point(self, handshake: Handshake) -> None:
        """Cut the local commit log to what it shares with the master (RocketMQ 5 AutoSwitchHAClient)."""
        store = self._store
        local = [EpochEntry(entry.epoch, entry.start_offset) for entry in store.epoch_file.entries]
        local_max = store.max_commit_log_offset
        remote = [EpochEntry(epoch, start) for epoch, start in handshake.epochs]
        point = find_consistent_point(local, local_max, remote, handshake.max_offset)
        if point < 0:
            if local_max > 0:
                self._diverged = True
                raise DivergedHistoryError(
                    f"no epoch in common with the master (local {local} up to {local_max}, master "
                    f"{remote} up to {handshake.max_offset})"
                )
            if local:  # an empty commit log: its epochs say nothing; take the master's
                await self._off_loop(store.epoch_file.truncate_from, 0)
        elif point < local_max:
            log.warning(
                "HA client of group %r: truncating the commit log from %d to %d, the end of the last epoch "
                "shared with the master (epoch %d)",
                self.group,
                local_max,
                point,
                handshake.master_epoch,
            )
            await self._off_loop(store.truncate_commit_log, point)
            self.truncations.append((local_max, point))
        self._diverged = False

    async def _read_frame(
        self, reader: asyncio.StreamReader, decoder: SlaveSideDecoder
    ) -> Handshake | Transfer:
        while (frame := decoder.next_frame()) is NEED_DATA:
            decoder.receive_data(await self._read(reader, decoder))
        return frame

    async def _read(self, reader: asyncio.StreamReader, decoder: SlaveSideDecoder) -> bytes:
        """The next bytes from the master; ConnectionResetError at its end of stream, TimeoutError after
        the housekeeping interval of silence, HAProtocolError when it ended mid-frame."""
        async with asyncio.timeout(self._config.ha_housekeeping_interval_s):
            data = await reader.read(_READ_SIZE)
        if not data:
            decoder.receive_data(b"")
            decoder.next_frame()  # raises HAProtocolError when a frame was cut short
            raise ConnectionResetError("the master closed the connection")
        return data

    async def _report(self, writer: asyncio.StreamWriter) -> None:
        writer.write(encode_report(self._store.max_commit_log_offset))
        await writer.drain()

    async def _heartbeats(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self._config.ha_send_heartbeat_interval_s)
            await self._report(writer)

    async def _receive(
        self, reader: asyncio.StreamReader, decoder: SlaveSideDecoder, writer: asyncio.StreamWriter
    ) -> None:
        store = self._store
        while True:
            decoder.receive_data(await self._read(reader, decoder))
            appended = False
            while (frame := decoder.next_frame()) is not NEED_DATA:
                if not isinstance(frame, Transfer):  # pragma: no cover - one HANDSHAKE only
                    raise HAProtocolError("a second HANDSHAKE")
                expected = store.max_commit_log_offset
                if frame.offset != expected and expected != 0:
                    raise TransferOffsetMismatchError(
                        f"TRANSFER at offset {frame.offset}, the local commit log ends at {expected}: resync",
                        expected=expected,
                        offset=frame.offset,
                    )
                last = store.epoch_file.last
                if last is None or frame.epoch > last.epoch:
                    await self._off_loop(store.epoch_file.append, frame.epoch, frame.epoch_start)
                elif frame.epoch < last.epoch:
                    raise HAProtocolError(
                        f"TRANSFER of epoch {frame.epoch} after the local epoch {last.epoch}"
                    )
                if frame.body:
                    store.append_replicated(frame.offset, frame.body)
                    appended = True
                self._confirm_offset = frame.confirm_offset
            if appended:
                await self._report(writer)
                if self._on_appended is not None:
                    self._on_appended()


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (TaskGroup wraps its children's errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
