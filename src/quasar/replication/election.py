"""Elector: the campaign loop of one broker of a group (RocketMQ 5's controller election, with the group's
leader key in etcd instead: reference/cluster.md §4).

While the group's leader key is absent, an eligible broker campaigns through
:meth:`~quasar.replication.group_state.GroupLeadership.try_acquire` (ONE transaction: the leader key must be
absent and the state unchanged, so exactly one candidate wins). Eligible: a member of the SyncStateSet; the
broker configured as master (``bootstrap``) when the group has no state yet; anyone with ``unclean``
(RocketMQ enableElectUncleanMaster, which can lose receipted messages).

Preference without a race storm (:func:`campaign_rank`): candidates are ranked and rank ``r`` campaigns
``r * election_backoff_s`` after the vacancy was seen; rank 0 is the in-sync member with the lowest broker id
other than the master of the state (its key vanished: it is presumed dead), the former master ranks after
every other in-sync member, unclean candidates after all of them. Several candidates still racing is safe
(the transaction decides), only slower.

A broker that sees a live leader of a NEWER epoch than the last one it knew calls ``on_follow(leader)``
(become or stay a slave of ``leader.address``); one that wins calls ``on_elected(state)``. Losing the
leadership is reported by :meth:`GroupLeadership.on_leadership_lost`, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from quasar.metadata import MetadataStoreError
from quasar.replication.group_state import GroupLeadership, GroupState, GroupStateError, LeaderInfo

__all__ = ["Elector", "campaign_rank"]

log = logging.getLogger(__name__)


def campaign_rank(
    state: GroupState | None, broker_id: int, *, bootstrap: bool = False, unclean: bool = False
) -> int | None:
    """When ``broker_id`` campaigns for a vacancy of a group in ``state``, in units of the election back-off
    (0: at once), or None when it is not eligible (see the module docstring for the order)."""
    if state is None:
        return 0 if bootstrap else None
    members = sorted(
        state.sync_state_set - {state.master} if state.master is not None else state.sync_state_set
    )
    if broker_id in members:
        return members.index(broker_id)
    if broker_id in state.sync_state_set:  # the former master
        return len(members)
    if unclean:
        return len(state.sync_state_set) + broker_id
    return None


class Elector:
    """The campaign loop of ``leadership``'s broker; an owned task between :meth:`start` and :meth:`stop`.

    Args:
        leadership: this broker's handle on its group.
        bootstrap: this broker is the group's configured master: it creates the state (epoch 1) when the group
            has none.
        unclean: RocketMQ enableElectUncleanMaster (campaign even outside the SyncStateSet: may lose data).
        election_backoff_s: seconds between two ranks' campaigns (default 2 s).
        max_attempts: failed campaigns (store errors, lost races) on one vacancy before waiting
            ``poll_interval_s`` (or a change) instead of retrying after a back-off.
        poll_interval_s: seconds between re-reads when no change is notified (a safety net: changes wake the
            loop at once).
        known_epoch: the last master epoch this broker knows (from its epoch file); a leader of a newer epoch
            is reported through ``on_follow``.
        on_elected: called with the new state when this broker was elected.
        on_follow: called with the leader when a leader of a newer epoch than ``known_epoch`` is seen.

    Callbacks run on the event loop; one that raises is logged. Store failures are logged and retried: the
    loop raises nothing.
    """

    def __init__(
        self,
        leadership: GroupLeadership,
        *,
        bootstrap: bool = False,
        unclean: bool = False,
        election_backoff_s: float = 2.0,
        max_attempts: int = 3,
        poll_interval_s: float = 5.0,
        known_epoch: int = 0,
        on_elected: Callable[[GroupState], None] | None = None,
        on_follow: Callable[[LeaderInfo], None] | None = None,
    ) -> None:
        if not election_backoff_s >= 0 or not poll_interval_s > 0 or max_attempts < 1:
            raise ValueError(
                f"election_backoff_s >= 0, poll_interval_s > 0, max_attempts >= 1; got {election_backoff_s!r}, "
                f"{poll_interval_s!r}, {max_attempts!r}"
            )
        self.leadership = leadership
        self.bootstrap = bootstrap
        self.unclean = unclean
        self.election_backoff_s = float(election_backoff_s)
        self.max_attempts = max_attempts
        self.poll_interval_s = float(poll_interval_s)
        self.known_epoch = known_epoch
        self._on_elected = on_elected
        self._on_follow = on_follow
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unwatch: Callable[[], None] | None = None
        self._stopping = False

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Elector({self.leadership.group!r}, broker {self.leadership.broker_id}, {state})"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Follow the group's changes and start the campaign loop (on the running loop)."""
        if self._task is not None:
            raise RuntimeError(f"{self!r} was started already")
        self._unwatch = self.leadership.watch(lambda _state, _leader: self._wake.set())
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"elector:{self.leadership.group}:{self.leadership.broker_id}"
        )
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%r ended by a bug", self, exc_info=task.exception())

    async def stop(self) -> None:
        """Cancel the loop and wait for it. The leadership is kept (resign it first for a clean shutdown).
        Idempotent."""
        self._stopping = True
        self._wake.set()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def request_failover(self) -> None:
        """Manual failover, on the master: resign and keep out of campaigns for twice the election back-off
        so an in-sync slave takes over. Raises :class:`~quasar.replication.group_state.NotMasterError` /
        :class:`~quasar.replication.group_state.NothingToFailOverError` (see
        :meth:`GroupLeadership.request_failover`)."""
        await self.leadership.request_failover(hold_off_s=2 * self.election_backoff_s)
        self._wake.set()

    # -- the loop --------------------------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Until ``seconds`` pass or a change of the group is notified. (``asyncio.timeout``, not
        ``wait_for``: on Python 3.11 ``wait_for`` loses a cancellation that arrives as the event is set, and
        :meth:`stop` would wait for ever.)"""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await self._wake.wait()

    async def _run(self) -> None:
        vacancy: tuple[int | None] | None = None  # (state version) of the vacancy being campaigned on
        vacant_since = 0.0
        failures = 0
        while not self._stopping:
            self._wake.clear()
            try:
                state, leader = await self.leadership.read()
            except (MetadataStoreError, GroupStateError) as exc:
                log.warning("group %s: reading the group state failed: %s", self.leadership.group, exc)
                await self._sleep(max(self.election_backoff_s, 0.1))
                continue
            if leader is not None:
                vacancy, failures = None, 0
                await self._saw_leader(leader)
                await self._sleep(self.poll_interval_s)
                continue
            rank = campaign_rank(
                state, self.leadership.broker_id, bootstrap=self.bootstrap, unclean=self.unclean
            )
            if rank is None:
                vacancy = None
                await self._sleep(self.poll_interval_s)
                continue
            key = (None if state is None else state.version,)
            if vacancy != key:
                vacancy, vacant_since, failures = key, time.monotonic(), 0
            if failures >= self.max_attempts:
                log.warning(
                    "group %s: broker %s gave up campaigning after %d attempts; next try in %.1f s or on a change",
                    self.leadership.group, self.leadership.broker_id, failures, self.poll_interval_s,
                )  # fmt: skip
                failures = 0
                await self._sleep(self.poll_interval_s)
                continue
            delay = max(
                vacant_since + rank * self.election_backoff_s - time.monotonic(),
                self.leadership.hold_off_remaining_s(),
            )
            if delay > 0:
                await self._sleep(delay)
                continue
            if not await self._campaign(state):
                failures += 1
                await self._sleep(min(self.election_backoff_s, 0.05 * 2**failures))

    async def _campaign(self, state: GroupState | None) -> bool:
        try:
            new = await self.leadership.try_acquire(
                bootstrap=state is None and self.bootstrap, unclean=self.unclean
            )
        except (MetadataStoreError, GroupStateError) as exc:
            log.warning(
                "group %s: campaign of broker %s failed: %s",
                self.leadership.group,
                self.leadership.broker_id,
                exc,
            )
            return False
        if new is None:
            return False
        self._elected(new)
        return True

    def _elected(self, state: GroupState) -> None:
        self.known_epoch = max(self.known_epoch, state.epoch)
        if self._on_elected is not None:
            try:
                self._on_elected(state)
            except Exception:  # the callback's bug must not end the loop
                log.exception("on_elected callback failed")

    async def _saw_leader(self, leader: LeaderInfo) -> None:
        if leader.broker_id == self.leadership.broker_id:
            if self.leadership.master_epoch != leader.epoch:
                # our own key: this session's after an ambiguous (timed-out) write, adopted by try_acquire; or
                # an earlier session's, which expires with its lease (the deletion wakes us)
                try:
                    adopted = await self.leadership.adopt()
                except (MetadataStoreError, GroupStateError) as exc:
                    log.warning("group %s: reading the group state failed: %s", self.leadership.group, exc)
                    return
                if adopted is not None:
                    self._elected(adopted)
            return
        if leader.epoch > self.known_epoch:
            self.known_epoch = leader.epoch
            log.info(
                "group %s: broker %s follows master %s at %s (epoch %s)",
                self.leadership.group, self.leadership.broker_id, leader.broker_id, leader.address, leader.epoch,
            )  # fmt: skip
            if self._on_follow is not None:
                try:
                    self._on_follow(leader)
                except Exception:  # the callback's bug must not end the loop
                    log.exception("on_follow callback failed")
