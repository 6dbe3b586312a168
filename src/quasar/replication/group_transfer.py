"""GroupTransfer: a SYNC_MASTER's receipts wait for the replicas (RocketMQ ``GroupTransferService`` and
``CommitLog#handleHA``, with 5.x ``needAckNums`` and ``allAckInSyncStateSet``).

:meth:`GroupTransfer.wait` is called on the loop thread once a put's local flush is done, with the put's end
offset (bytes). needAckNums (replicas that must hold the bytes, the master counted):

* ``in_sync_replicas``; with ``enable_auto_in_sync_replicas`` the smaller of that and the current in-sync
  count (1 + slaves connected and less than ``ha_max_gap_not_in_sync`` behind), but at least
  ``min_in_sync_replicas``;
* needAckNums <= 1 and the sync-state set is the master alone: PUT_OK at once (a member of the set may be
  elected, so while the set still lists a slave, even needAckNums 1 waits for it: allAckInSyncStateSet; the
  master shrinks the set after ``ha_max_time_slave_not_catchup_s``);
* otherwise PUT_OK once every slave of the sync-state set acked ``>= next_offset`` *and* at least
  needAckNums - 1 slaves did (so a receipt implies the confirm offset passed it); after ``slave_timeout_s``
  without that: SLAVE_NOT_AVAILABLE when fewer replicas than needAckNums are in sync at that moment, else
  FLUSH_SLAVE_TIMEOUT.

RocketMQ answers SLAVE_NOT_AVAILABLE at once when too few replicas are in sync, and its producer retries
another broker. A Pulsar client answers any SEND_ERROR by reconnecting and resending at once (the C++ client
every 100 ms, without its send timeout firing), so an immediate refusal would spin; waiting up to
``slave_timeout_s`` instead bounds that loop to one attempt per timeout, and a slave that comes back within it
(a short network blip) completes the waiting sends without any error.

Grouped like group commit: waits are kept in offset order in one deque, completed in order from its head on
each ack (the :class:`~quasar.replication.ha_service.HAService` ``on_ack`` listener), with one timer for the
head's deadline; no task or future per request. An answer decided at once still waits behind earlier waits,
so callbacks always run in offset order.

Refusing puts (:attr:`GroupTransfer.refusing_writes`, read by every put) is a flag, not a computation per put:
it is re-evaluated on the HA service's ack, connection and sync-state set events and on each :meth:`wait`
(the master's max offset moved, which decides who is in sync), and a timer owned by the transfer (cancelled
by :meth:`GroupTransfer.close` or when the replicas are back) raises it once an outage has lasted
``slave_timeout_s``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from quasar.replication.config import ReplicationConfig
from quasar.storage.status import PutStatus

__all__ = ["AckSource", "GroupTransfer", "TransferCallback"]

log = logging.getLogger(__name__)

_CLOCK_SLACK_S = 0.001
"""A timer may fire this early (the loop's clock resolution): the head's deadline counts as passed."""

TransferCallback = Callable[[PutStatus], None]
"""``callback(status)``: PUT_OK, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT, or SERVICE_NOT_AVAILABLE at close."""


class AckSource(Protocol):
    """What the group transfer reads from the HA service."""

    broker_id: int

    @property
    def sync_state_set(self) -> frozenset[int]: ...

    @property
    def connected_slaves(self) -> frozenset[int]: ...

    @property
    def confirm_offset(self) -> int: ...

    def acked_offset(self, broker_id: int) -> int: ...

    def in_sync_slave_count(self) -> int: ...

    def on_ack(self, listener: Callable[[int, int], None]) -> Callable[[], None]: ...


class GroupTransfer:
    """The SYNC_MASTER waits of one master. Loop thread only; made on the running loop (its timers use it).

    The ``ha_service`` must call its ``on_ack`` listeners on every REPORT and every change of the connected
    slaves or of the sync-state set (:class:`~quasar.replication.ha_service.HAService` does): they keep
    :attr:`refusing_writes` current.
    """

    def __init__(self, ha_service: AckSource, config: ReplicationConfig) -> None:
        self._ha = ha_service
        self._config = config
        # (next_offset, deadline in loop time, callback, status decided at once or None)
        self._requests: deque[tuple[int, float, TransferCallback, PutStatus | None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self.refusing_writes = False
        """Whether a put must be refused before it is written: too few replicas have been in sync for longer
        than ``slave_timeout_s`` (RocketMQ 5 answers IN_SYNC_REPLICAS_NOT_ENOUGH in ``asyncPutMessage``,
        before the append). During the first ``slave_timeout_s`` of an outage puts are still stored and wait
        (a network blip completes them); past it, a client resending its pending messages on every refusal
        would otherwise append them again each round. False again as soon as enough replicas are in sync."""
        self._unavailable_since: float | None = None  # loop time the replicas turned too few, None: enough
        self._refusal_timer: asyncio.TimerHandle | None = None
        self._remove_listener = ha_service.on_ack(self._on_ack)
        self._replicas_changed(self.replicas_available())

    @property
    def confirm_offset(self) -> int:
        """What every sync-state set member has (bytes): the HA service's confirm offset."""
        return self._ha.confirm_offset

    @property
    def pending(self) -> int:
        """Waits not answered yet."""
        return len(self._requests)

    def need_ack_nums(self) -> int:
        """Replicas (the master counted) that must hold a message now (RocketMQ ``needAckNums``)."""
        return self._need(self._ha.in_sync_slave_count())

    def _need(self, in_sync_slaves: int) -> int:
        config = self._config
        need = config.in_sync_replicas
        if config.enable_auto_in_sync_replicas:
            need = max(min(need, 1 + in_sync_slaves), config.min_in_sync_replicas)
        return need

    def replicas_available(self) -> bool:
        """Whether enough replicas are in sync now for a wait to succeed (needAckNums <= 1 + in-sync slaves)."""
        in_sync_slaves = self._ha.in_sync_slave_count()
        return self._need(in_sync_slaves) <= 1 + in_sync_slaves

    def _replicas_changed(self, available: bool) -> None:
        """Track the outage clock behind :attr:`refusing_writes`: it starts when the replicas turn too few
        (and arms the refusal timer for ``slave_timeout_s`` later) and stops when they are enough again."""
        if available:
            if self._unavailable_since is not None:
                self._unavailable_since = None
                self.refusing_writes = False
                if self._refusal_timer is not None:
                    self._refusal_timer.cancel()
                    self._refusal_timer = None
            return
        if self._unavailable_since is None and not self._closed:
            now = self._loop.time()
            self._unavailable_since = now
            self._refusal_timer = self._loop.call_at(
                now + self._config.slave_timeout_s, self._on_outage_timer
            )

    def _on_outage_timer(self) -> None:
        """The outage has lasted ``slave_timeout_s``: refuse puts from now on (unless the replicas are back)."""
        self._refusal_timer = None
        if self.replicas_available():
            self._replicas_changed(True)
        elif self._unavailable_since is not None:
            self.refusing_writes = True

    def wait(self, next_offset: int, callback: TransferCallback) -> None:
        """``callback(status)`` once the replicas hold the commit log up to ``next_offset`` (bytes), or at once
        when the answer is already known and no earlier wait is pending (then before this returns)."""
        if self._closed:
            callback(PutStatus.SERVICE_NOT_AVAILABLE)
            return
        in_sync = 1 + self._ha.in_sync_slave_count()
        need = self._need(in_sync - 1)
        available = in_sync >= need
        if available is (self._unavailable_since is not None):  # the put moved the max offset: who is in sync
            self._replicas_changed(available)
        status: PutStatus | None = None
        alone = self._ha.sync_state_set <= {self._ha.broker_id}
        if (need <= 1 and alone) or (available and self._acked_by_enough(next_offset, need)):
            status = PutStatus.PUT_OK
        requests = self._requests
        if status is not None and not requests:
            callback(status)
            return
        deadline = self._loop.time() + self._config.slave_timeout_s
        requests.append((next_offset, deadline, callback, status))
        if self._timer is None:
            self._arm(deadline)

    def close(self) -> None:
        """Answer every pending wait SERVICE_NOT_AVAILABLE (role change, shutdown); later waits too."""
        self._closed = True
        self._remove_listener()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._refusal_timer is not None:
            self._refusal_timer.cancel()
            self._refusal_timer = None
        requests, self._requests = self._requests, deque()
        for _, _, callback, _ in requests:
            _call(callback, PutStatus.SERVICE_NOT_AVAILABLE)

    # -- completion -------------------------------------------------------------------------------------------

    def _acked_by_enough(self, next_offset: int, need: int) -> bool:
        ha = self._ha
        master = ha.broker_id
        acked_offset = ha.acked_offset
        for broker_id in ha.sync_state_set:
            if broker_id != master and acked_offset(broker_id) < next_offset:
                return False  # allAckInSyncStateSet
        acks = 1
        for broker_id in ha.connected_slaves:
            if acked_offset(broker_id) >= next_offset:
                acks += 1
                if acks >= need:
                    return True
        return acks >= need

    def _on_ack(self, broker_id: int, offset: int) -> None:
        self._replicas_changed(self.replicas_available())
        if self._requests:
            self._complete()

    def _complete(self) -> None:
        """Answer the waits at the head that are decided, in order; re-arm the timer for the new head."""
        requests = self._requests
        now = self._loop.time()
        need = self.need_ack_nums()
        while requests:
            next_offset, deadline, callback, status = requests[0]
            if status is None:
                if self._acked_by_enough(next_offset, need):
                    status = PutStatus.PUT_OK
                elif deadline <= now + _CLOCK_SLACK_S:
                    in_sync = 1 + self._ha.in_sync_slave_count()
                    status = (
                        PutStatus.SLAVE_NOT_AVAILABLE if in_sync < need else PutStatus.FLUSH_SLAVE_TIMEOUT
                    )
                else:
                    break
            requests.popleft()
            _call(callback, status)
        if not requests:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None or self._timer_at != requests[0][1]:
            self._arm(requests[0][1])

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._requests:
            self._complete()


def _call(callback: TransferCallback, status: PutStatus) -> None:
    try:
        callback(status)
    except Exception:
        log.exception("group transfer callback %r failed", callback)
