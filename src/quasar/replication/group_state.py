"""A broker group's replication state and its master's leadership, kept in the metadata store (RocketMQ 5's
controller data per broker group, with etcd in place of the controller: reference/cluster.md §4).

Two paths per group (``<group>`` is :func:`~quasar.metadata.encode_segment` of the group name)::

    /cluster/groups/<group>/state   persistent JSON, changed only by compare-and-set on its version:
        {"epoch": int,                 masterEpoch: +1 at every election (1 after the bootstrap)
         "master": int | null,         broker id of the master elected at that epoch
         "sync_state_set": [int],      SyncStateSet: the in-sync replicas (always holds the master)
         "sync_state_set_epoch": int}  +1 at every change of the set (elections included)
    /cluster/groups/<group>/leader  EPHEMERAL JSON, bound to the master's metadata session lease (etcd
                                    removes it about one TTL after the master dies):
        {"broker_id": int, "epoch": int, "address": "host:port" (the master's HA address),
         "since_ms": int (ms since the epoch, the master's clock)}

A live leader key means "the master of ``epoch`` is alive"; an absent one means the group has no master and
the in-sync replicas may campaign. Every decisive change is ONE metadata transaction (``multi``):

* election (:meth:`GroupLeadership.try_acquire`, RocketMQ ElectMasterEvent): create the leader key (must be
  absent) AND replace the state (version unchanged since it was read) with epoch+1, master=me,
  sync_state_set={me}, sync_state_set_epoch+1; so of several candidates exactly one wins;
* AlterSyncStateSet (:meth:`GroupLeadership.alter_sync_state_set`): replace the state (version unchanged)
  AND rewrite the leader key with its version unchanged (so the key is still the one this master created):
  a master that was replaced, or whose session expired, is fenced.

:class:`GroupLeadership` is one broker's handle on its group (reads, the transactions above, resignation,
the manual failover, notifications of changes and of a lost leadership); the campaign loop that uses it is
:class:`quasar.replication.node.ReplicaNode`'s (who goes first: :func:`quasar.replication.election.campaign_rank`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quasar.metadata import (
    AlreadyExistsError,
    BadVersionError,
    GetResult,
    MetadataStore,
    MetadataStoreError,
    MetadataStoreUnavailableError,
    NotFoundError,
    Notification,
    Put,
    SessionEvent,
    decode_json,
    encode_json,
    encode_segment,
)
from quasar.replication.errors import ReplicationError

__all__ = [
    "GROUPS_ROOT",
    "GroupLeadership",
    "GroupState",
    "GroupStateError",
    "LeaderInfo",
    "NotMasterError",
    "NothingToFailOverError",
    "leader_path",
    "state_path",
]

log = logging.getLogger(__name__)

GROUPS_ROOT = "/cluster/groups"
"""Parent of every group's ``state`` and ``leader`` paths."""


class GroupStateError(ReplicationError):
    """A group's state or leader key is malformed, or a request on it cannot be carried out."""


class NotMasterError(GroupStateError):
    """The request needs this broker to be the group's live master and it is not."""


class NothingToFailOverError(GroupStateError):
    """A manual failover was asked for but no other broker is in the SyncStateSet: none could take over
    without losing messages."""


def state_path(group: str) -> str:
    """``/cluster/groups/<encoded group>/state``."""
    return f"{GROUPS_ROOT}/{encode_segment(group)}/state"


def leader_path(group: str) -> str:
    """``/cluster/groups/<encoded group>/leader``."""
    return f"{GROUPS_ROOT}/{encode_segment(group)}/leader"


@dataclass(frozen=True, slots=True)
class GroupState:
    """A group's state as read (RocketMQ controller's per-group data).

    ``epoch`` is the masterEpoch, ``master`` the broker id elected at that epoch (None before any election),
    ``sync_state_set`` the in-sync broker ids, ``sync_state_set_epoch`` the set's change counter, ``version``
    the metadata version of the state path (what the next compare-and-set expects).
    """

    epoch: int
    master: int | None
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    version: int

    def to_json(self) -> dict[str, Any]:
        """The stored JSON (``version`` is not stored: it is the path's)."""
        return {
            "epoch": self.epoch,
            "master": self.master,
            "sync_state_set": sorted(self.sync_state_set),
            "sync_state_set_epoch": self.sync_state_set_epoch,
        }

    @classmethod
    def from_json(cls, data: Any, version: int) -> GroupState:
        """Parse the stored JSON; raises :class:`GroupStateError` when it is malformed."""
        try:
            master = data["master"]
            state = cls(
                epoch=_int(data["epoch"]),
                master=None if master is None else _int(master),
                sync_state_set=frozenset(_int(i) for i in data["sync_state_set"]),
                sync_state_set_epoch=_int(data["sync_state_set_epoch"]),
                version=version,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise GroupStateError(f"malformed group state {data!r}: {exc!r}") from None
        return state


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """A group's leader key as read: the live master ``broker_id`` elected at ``epoch``, its HA ``address``
    (``host:port``), since ``since_ms`` (ms since the epoch). ``version`` is the key's metadata version."""

    broker_id: int
    epoch: int
    address: str
    since_ms: int
    version: int = 0
    role: str = ""
    """How the master replicates: ``SYNC_MASTER`` or ``ASYNC_MASTER`` ("" when not recorded); a slave
    promoted later serves the same way unless configured otherwise."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "broker_id": self.broker_id,
            "epoch": self.epoch,
            "address": self.address,
            "since_ms": self.since_ms,
        }
        if self.role:
            doc["role"] = self.role
        return doc

    @classmethod
    def from_json(cls, data: Any, version: int) -> LeaderInfo:
        """Parse the stored JSON; raises :class:`GroupStateError` when it is malformed."""
        try:
            address = data["address"]
            if not isinstance(address, str):
                raise TypeError("address is not a string")
            role = data.get("role", "")
            if not isinstance(role, str):
                raise TypeError("role is not a string")
            return cls(
                _int(data["broker_id"]), _int(data["epoch"]), address, _int(data["since_ms"]), version, role
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise GroupStateError(f"malformed group leader key {data!r}: {exc!r}") from None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


LeadershipLostCallback = Callable[[int, str], None]
"""Called with (the epoch this broker was master of, why) when it stops being the master."""
WatchCallback = Callable[[GroupState | None, LeaderInfo | None], None]
"""Called with the group's state and leader key as just read (None: absent)."""


class GroupLeadership:
    """Broker ``broker_id``'s handle on ``group``'s state and leader key (see the module docstring).

    Args:
        metadata: the broker's metadata store; its session is the master's lease.
        group: the broker group (RocketMQ brokerName).
        broker_id: this broker's id in the group.
        address: this broker's HA address ``host:port``, published in the leader key while it is master.

    The handle registers a change and a session listener on ``metadata`` at construction; :meth:`close`
    detaches it (the port cannot unregister listeners: they become no-ops) and cancels its read task.

    Leadership: :attr:`is_master` is True from a successful :meth:`try_acquire` until the leadership is lost,
    which is reported once to every :meth:`on_leadership_lost` callback, synchronously on the event loop,
    with the lost epoch and a reason: on SESSION_LOST (the lease is gone: another broker may be elected at
    once), when a read shows the leader key or the state no longer this broker's, and on :meth:`resign`
    (before the key is deleted). The master must stop accepting writes in that callback.
    """

    def __init__(self, metadata: MetadataStore, group: str, broker_id: int, *, address: str) -> None:
        if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
            raise ValueError(f"broker_id is an integer >= 0, got {broker_id!r}")
        self.metadata = metadata
        self.group = group
        self.broker_id = broker_id
        self.address = address
        self.role = ""
        """Written into the leader key when this broker acquires the leadership (``LeaderInfo.role``)."""
        self.state_path = state_path(group)
        self.leader_path = leader_path(group)
        self._master_epoch: int | None = None
        self._given_up_epoch = 0  # the latest epoch whose leadership this broker resigned or lost
        self._leadership_seq = 0  # +1 whenever this broker gains or loses the leadership
        self._hold_off_until = 0.0  # monotonic time before which this broker does not campaign
        self._watchers: list[WatchCallback] = []
        self._lost_callbacks: list[LeadershipLostCallback] = []
        self._read_task: asyncio.Task[None] | None = None
        self._read_again = False
        self._closed = False
        metadata.register_listener(self._on_change)
        metadata.register_session_listener(self._on_session)

    def __repr__(self) -> str:
        role = f"master of epoch {self._master_epoch}" if self._master_epoch is not None else "not master"
        return f"GroupLeadership({self.group!r}, broker {self.broker_id}, {role})"

    # -- what callers may look at ----------------------------------------------------------------------------

    @property
    def is_master(self) -> bool:
        """Whether this broker holds the group's leadership (as far as this process knows: the leader key is
        fenced by the lease, see :meth:`on_leadership_lost`)."""
        return self._master_epoch is not None

    @property
    def master_epoch(self) -> int | None:
        """The epoch this broker is master of, None when it is not the master."""
        return self._master_epoch

    def hold_off_remaining_s(self) -> float:
        """Seconds left during which this broker must not campaign (after :meth:`request_failover`), 0 when
        none."""
        return max(0.0, self._hold_off_until - time.monotonic())

    # -- reads -----------------------------------------------------------------------------------------------

    async def read(self) -> tuple[GroupState | None, LeaderInfo | None]:
        """The group's state and live leader (None when absent); two linearizable reads (state first).
        Raises ``MetadataStoreError`` when the store cannot be read, :class:`GroupStateError` when a value is
        malformed."""
        state, leader, _ = await self._read()
        return state, leader

    async def _read(self) -> tuple[GroupState | None, LeaderInfo | None, bool]:
        """State, leader, and whether the leader key is this broker's (its id, and this session's key)."""
        state_result = await self.metadata.get(self.state_path)
        leader_result = await self.metadata.get(self.leader_path)
        state = None if state_result is None else self._decode_state(state_result)
        leader = None if leader_result is None else self._decode_leader(leader_result)
        mine = (
            leader is not None
            and leader_result is not None
            and leader.broker_id == self.broker_id
            and leader_result.stat.created_by_self
        )
        return state, leader, mine

    def _decode_state(self, result: GetResult) -> GroupState:
        return GroupState.from_json(decode_json(self.state_path, result.value), result.stat.version)

    def _decode_leader(self, result: GetResult) -> LeaderInfo:
        return LeaderInfo.from_json(decode_json(self.leader_path, result.value), result.stat.version)

    # -- election --------------------------------------------------------------------------------------------

    def eligible(self, state: GroupState | None, *, bootstrap: bool = False, unclean: bool = False) -> bool:
        """Whether this broker may campaign on ``state``: no state yet and ``bootstrap`` (the configured
        master's first start), or a member of the SyncStateSet, or any broker when ``unclean``."""
        if state is None:
            return bootstrap
        return unclean or self.broker_id in state.sync_state_set

    async def try_acquire(self, *, bootstrap: bool = False, unclean: bool = False) -> GroupState | None:
        """Become the group's master in ONE transaction (RocketMQ ElectMasterEvent): create the ephemeral
        leader key (must be absent) and replace the state read (compare-and-set on its version) with
        epoch+1, master=me, sync_state_set={me}, sync_state_set_epoch+1; with no state yet (``bootstrap``)
        the state is created at epoch 1, sync_state_set_epoch 1.

        Allowed only when :meth:`eligible` (``bootstrap``: only the broker configured as master passes it,
        at a group's first start; ``unclean``: RocketMQ enableElectUncleanMaster, a broker outside the
        SyncStateSet may be elected and receipted messages may be lost: logged as a warning).

        Returns the new state; the current one when this broker already holds this session's leader key of
        the current epoch (e.g. a previous call's write timed out but was applied); None when a leader is
        alive, another candidate won the race, or this broker is not eligible.

        Raises:
            MetadataStoreError: the store failed (unavailable: the write may have been applied; a later call
                finds out), or this store's session is lost (an ephemeral key cannot be created then).
            GroupStateError: a stored value is malformed.
        """
        state, leader, mine = await self._read()
        if leader is not None:
            return self._adopt(state, leader, mine)
        if not self.eligible(state, bootstrap=bootstrap, unclean=unclean):
            return None
        if state is not None and self.broker_id not in state.sync_state_set:
            log.warning(
                "group %s: UNCLEAN election of broker %s, which is not in the SyncStateSet %s: messages the "
                "old master receipted may be lost",
                self.group, self.broker_id, sorted(state.sync_state_set),
            )  # fmt: skip
        new = GroupState(
            epoch=1 if state is None else state.epoch + 1,
            master=self.broker_id,
            sync_state_set=frozenset({self.broker_id}),
            sync_state_set_epoch=1 if state is None else state.sync_state_set_epoch + 1,
            version=0 if state is None else state.version + 1,
        )
        info = LeaderInfo(self.broker_id, new.epoch, self.address, int(time.time() * 1000), role=self.role)
        ops = [
            Put(self.leader_path, encode_json(info.to_json()), -1, ephemeral=True),
            Put(self.state_path, encode_json(new.to_json()), -1 if state is None else state.version),
        ]
        try:
            await self.metadata.multi(ops)
        except (AlreadyExistsError, BadVersionError):
            return None
        except MetadataStoreUnavailableError:
            # the write may have been applied: if so it is ours (this session's key of the new epoch)
            current, _, mine = await self._read()
            if mine and current is not None and current.epoch == new.epoch:
                self._became_master(new.epoch)
                return current
            raise
        self._became_master(new.epoch)
        log.info("group %s: broker %s elected master at epoch %s", self.group, self.broker_id, new.epoch)
        return new

    async def adopt(self) -> GroupState | None:
        """Take back this session's own leader key of the current epoch when this process does not know it is
        the master (a :meth:`try_acquire` whose write timed out but was applied); never a key this broker
        resigned or lost, never a new election. Returns the state when adopted (or already held), else None.
        Raises as :meth:`read`."""
        state, leader, mine = await self._read()
        return None if leader is None else self._adopt(state, leader, mine)

    def _adopt(self, state: GroupState | None, leader: LeaderInfo, mine: bool) -> GroupState | None:
        if (
            mine
            and leader.epoch > self._given_up_epoch
            and state is not None
            and state.master == self.broker_id
            and state.epoch == leader.epoch
        ):
            if self._master_epoch != state.epoch:
                self._became_master(state.epoch)
            return state
        return None

    def _became_master(self, epoch: int) -> None:
        self._master_epoch = epoch
        self._leadership_seq += 1

    # -- AlterSyncStateSet -----------------------------------------------------------------------------------

    async def alter_sync_state_set(self, new_set: frozenset[int], expected: GroupState) -> GroupState | None:
        """The master replaces the SyncStateSet (RocketMQ AlterSyncStateSet): ONE transaction that replaces
        the state (its version must still be ``expected.version``) and rewrites this broker's leader key (its
        version must be the one read just before: the key is still this master's).

        ``new_set`` must contain this broker (the master). Returns the new state (sync_state_set_epoch+1,
        epoch unchanged); ``expected`` itself when ``new_set`` is already the set and the state is unchanged;
        None when fenced: this broker is not the master of ``expected`` or no longer holds the leader key,
        or the state moved on since ``expected`` was read (read again and decide again).

        Raises:
            GroupStateError: ``new_set`` does not contain this broker, or a stored value is malformed.
            MetadataStoreError: the store failed (unavailable: the write may have been applied).
        """
        new_set = frozenset(new_set)
        if self.broker_id not in new_set:
            raise GroupStateError(
                f"group {self.group}: the SyncStateSet {sorted(new_set)} must contain the master {self.broker_id}"
            )
        if expected.master != self.broker_id:
            return None
        current, leader, mine = await self._read()
        if (
            current is None
            or leader is None
            or not mine
            or leader.epoch != expected.epoch
            or current.version != expected.version
        ):
            return None
        if new_set == expected.sync_state_set:
            return expected
        new = GroupState(
            expected.epoch, self.broker_id, new_set, expected.sync_state_set_epoch + 1, expected.version + 1
        )
        ops = [
            Put(self.state_path, encode_json(new.to_json()), expected.version),
            Put(self.leader_path, encode_json(leader.to_json()), leader.version, ephemeral=True),
        ]
        try:
            await self.metadata.multi(ops)
        except (BadVersionError, NotFoundError, AlreadyExistsError):
            return None
        log.info(
            "group %s: SyncStateSet %s -> %s (epoch %s, set epoch %s)",
            self.group, sorted(expected.sync_state_set), sorted(new_set), new.epoch, new.sync_state_set_epoch,
        )  # fmt: skip
        return new

    # -- giving up the leadership ----------------------------------------------------------------------------

    async def resign(self) -> None:
        """Give up the leadership: report it lost (reason "resigned": stop accepting writes) and delete the
        leader key, only if it is this session's key of this broker (compare-and-set on its version; a key
        already gone or someone else's is left alone). The state is unchanged: its SyncStateSet members may
        campaign. For a clean shutdown and the manual failover.

        Raises:
            MetadataStoreError: the store failed (the key then expires with the session's lease).
        """
        self._lose("resigned")
        _, leader, mine = await self._read()
        if leader is None or not mine:
            return
        with contextlib.suppress(NotFoundError, BadVersionError):
            await self.metadata.delete(self.leader_path, leader.version)
        log.info(
            "group %s: broker %s resigned the leadership of epoch %s",
            self.group,
            self.broker_id,
            leader.epoch,
        )

    async def request_failover(self, *, hold_off_s: float = 4.0) -> None:
        """Manual switch (``quasar admin broker-group failover G``), on the master: resign and keep out of
        campaigns for ``hold_off_s`` seconds (see :meth:`hold_off_remaining_s`) so an in-sync slave takes
        over.

        Raises:
            NotMasterError: this broker does not hold the group's leader key.
            NothingToFailOverError: no other broker is in the SyncStateSet (nothing is resigned).
            MetadataStoreError: the store failed.
        """
        state, leader, mine = await self._read()
        if leader is None or not mine or state is None:
            holder = "no live master" if leader is None else f"the master is broker {leader.broker_id}"
            raise NotMasterError(f"group {self.group}: broker {self.broker_id} is not the master ({holder})")
        others = sorted(state.sync_state_set - {self.broker_id})
        if not others:
            raise NothingToFailOverError(
                f"group {self.group}: no slave is in the SyncStateSet {sorted(state.sync_state_set)}; a "
                f"failover now would lose messages (wait until a slave has caught up)"
            )
        self._hold_off_until = time.monotonic() + max(0.0, hold_off_s)
        log.info(
            "group %s: manual failover from broker %s, in-sync candidates %s",
            self.group,
            self.broker_id,
            others,
        )
        await self.resign()

    def _lose(self, reason: str) -> None:
        epoch = self._master_epoch
        if epoch is None:
            return
        self._master_epoch = None
        self._given_up_epoch = max(self._given_up_epoch, epoch)
        self._leadership_seq += 1
        if reason != "resigned":
            log.warning(
                "group %s: broker %s lost the leadership of epoch %s: %s",
                self.group,
                self.broker_id,
                epoch,
                reason,
            )
        for callback in list(self._lost_callbacks):
            try:
                callback(epoch, reason)
            except Exception:  # a callback's bug must not stop the others
                log.exception("leadership-lost callback %r failed", callback)

    # -- notifications ---------------------------------------------------------------------------------------

    def on_leadership_lost(self, callback: LeadershipLostCallback) -> None:
        """Call ``callback(epoch, reason)`` (synchronously, on the event loop) every time this broker stops
        being the master: on SESSION_LOST (its lease is gone: stop accepting writes at once), when a read
        finds the leader key or state taken over, and on :meth:`resign`."""
        self._lost_callbacks.append(callback)

    def watch(self, callback: WatchCallback) -> Callable[[], None]:
        """Call ``callback(state, leader)`` on the event loop with a fresh :meth:`read` whenever either path
        of the group changes, after RECONNECTED and SESSION_REESTABLISHED, and once now (a first view).
        Reads are coalesced: changes arriving during a read cause one more read. A read that fails is logged
        and skipped (the next change or reconnection reads again). Returns a function that removes
        ``callback``."""
        self._check_open()
        self._watchers.append(callback)
        self._request_read()

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._watchers.remove(callback)

        return unwatch

    def _on_change(self, notification: Notification) -> None:
        if not self._closed and notification.path in (self.state_path, self.leader_path):
            self._request_read()

    def _on_session(self, event: SessionEvent) -> None:
        if self._closed:
            return
        if event is SessionEvent.SESSION_LOST:
            self._lose("the metadata session (lease) was lost")
        elif event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._request_read()

    def _request_read(self) -> None:
        if self._closed:
            return
        if self._read_task is not None and not self._read_task.done():
            self._read_again = True
            return
        self._read_again = False
        self._read_task = asyncio.get_running_loop().create_task(
            self._refresh(), name=f"group-state-read:{self.group}"
        )

    async def _refresh(self) -> None:
        while not self._closed:
            self._read_again = False
            seq = self._leadership_seq
            try:
                state, leader, mine = await self._read()
            except (MetadataStoreError, GroupStateError) as exc:
                log.info("group %s: reading the group state failed: %s", self.group, exc)
                return
            if self._closed:
                return
            if seq == self._leadership_seq and self._master_epoch is not None:
                self._check_still_master(state, leader, mine)
            for callback in list(self._watchers):
                try:
                    callback(state, leader)
                except Exception:  # a callback's bug must not stop the others
                    log.exception("group-state watch callback %r failed", callback)
            if not self._read_again:
                return

    def _check_still_master(self, state: GroupState | None, leader: LeaderInfo | None, mine: bool) -> None:
        epoch = self._master_epoch
        if leader is None:
            self._lose("the leader key is gone")
        elif not mine or leader.epoch != epoch:
            self._lose(f"broker {leader.broker_id} is the master of epoch {leader.epoch}")
        elif state is None or state.master != self.broker_id or state.epoch != epoch:
            self._lose(f"the group state moved on to {state}")

    def _check_open(self) -> None:
        if self._closed:
            raise GroupStateError(f"group {self.group}: the GroupLeadership handle is closed")

    async def close(self) -> None:
        """Stop the notifications and cancel the read in flight. The leadership is NOT resigned (call
        :meth:`resign` first for a clean shutdown). Idempotent."""
        self._closed = True
        self._watchers.clear()
        self._lost_callbacks.clear()
        task, self._read_task = self._read_task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
