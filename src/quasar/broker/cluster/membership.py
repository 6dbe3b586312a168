"""ClusterMembership: this broker's ephemeral registration in the metadata store and the live view of the
others (Pulsar's ``/loadbalance/brokers`` with its load reports; RocketMQ's brokerLiveTable, kept
consistently in etcd instead of on each name server).

This broker's :class:`BrokerInfo` is put at ``/cluster/brokers/<group>/<id>`` as an ephemeral value (bound
to the store's session: etcd removes it within the lease TTL after the broker dies) at start and again every
``report_interval_s`` seconds with a fresh load report, so it is recreated after a lost session and a
transient store outage only delays the next report. Every broker follows the whole ``/cluster/brokers``
subtree through notifications, so a lookup answers from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from quasar.broker.cluster.model import BROKERS_ROOT, BrokerInfo
from quasar.broker.metadata_tree import PathFollower, join_path, read_tree, split_path
from quasar.metadata import (
    GetResult,
    MetadataStore,
    MetadataStoreError,
    SessionEvent,
    decode_json,
    encode_json,
)

log = logging.getLogger(__name__)

__all__ = ["ClusterMembership", "LoadSource"]

LoadSource = Callable[[], tuple[int, float]]
"""Returns this broker's load: (partitions placed on its group, messages/s published over the last interval)."""


class ClusterMembership:
    """This broker's registration and the cluster's live brokers (see the module docstring).

    ``brokers`` maps (group, broker id) to the last registration read; :meth:`master_of` gives a group's live
    master. Raises nothing after :meth:`start` (store failures are logged and retried).
    """

    def __init__(
        self,
        metadata: MetadataStore,
        me: BrokerInfo,
        load: LoadSource,
        *,
        report_interval_s: float = 5.0,
    ) -> None:
        self._metadata = metadata
        self.me = me
        self._load = load
        self._interval = report_interval_s
        self.brokers: dict[tuple[str, int], BrokerInfo] = {}
        self._follower = PathFollower(metadata, BROKERS_ROOT, self._apply, resync=self._resync)
        self._task: asyncio.Task[None] | None = None
        self._path = join_path(BROKERS_ROOT, me.group, str(me.broker_id))

    async def start(self) -> None:
        """Register this broker, read every live broker, then follow changes and report load periodically.
        Raises the port's ``MetadataStoreError`` when the store cannot be reached at start."""
        self.me = replace(self.me, start_time_ms=self.me.start_time_ms or int(time.time() * 1000))
        await self._register()
        await self._reload()
        self._metadata.register_session_listener(self._on_session)
        self._follower.start()
        self._task = asyncio.get_running_loop().create_task(self._report_loop(), name="cluster-load-report")

    async def stop(self) -> None:
        """Stop reporting and following, and remove this broker's registration (best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._follower.stop()
        try:
            await self._metadata.delete(self._path)
        except MetadataStoreError as exc:  # absent already, or the store is down: the lease ends it anyway
            log.info("broker registration %s not removed: %s", self._path, exc)

    # ------------------------------------------------------------------ view
    def master_of(self, group: str) -> BrokerInfo | None:
        """The live master of ``group`` (the registered master with the highest epoch: a deposed master
        that has not noticed yet never wins over the one elected after it), or None."""
        me = self.me
        best: BrokerInfo | None = me if me.group == group and me.is_master else None
        for key, info in self.brokers.items():
            if key == (me.group, me.broker_id) or info.group != group or not info.is_master:
                continue
            if best is None or info.epoch > best.epoch:
                best = info
        return best

    def live_groups(self) -> list[str]:
        """Broker groups with a live master, sorted."""
        groups = {info.group for info in self.brokers.values() if info.is_master}
        if self.me.is_master:
            groups.add(self.me.group)
        return sorted(groups)

    async def set_role(self, role: str, epoch: int, *, slave_read: bool = False) -> None:
        """Register again at once as ``role`` ("master" / "slave") under master epoch ``epoch`` (replication:
        a promotion or a step-down), ``slave_read`` when this slave serves reads of a masterless group.
        Raises the port's MetadataStoreError (the periodic report retries)."""
        self.me = replace(self.me, role=role, epoch=epoch, slave_read=slave_read)
        await self._register()

    def slave_reader_of(self, group: str) -> BrokerInfo | None:
        """A live slave of ``group`` serving reads while the group has no master (the lowest broker id)."""
        readers = [b for b in self.all_brokers() if b.group == group and b.slave_read and not b.is_master]
        return readers[0] if readers else None

    def all_brokers(self) -> list[BrokerInfo]:
        """Every live broker, sorted by (group, id)."""
        known = dict(self.brokers)
        known[(self.me.group, self.me.broker_id)] = self.me
        return [known[key] for key in sorted(known)]

    # ------------------------------------------------------------------ registration
    async def _register(self) -> None:
        partitions, rate = self._load()
        self.me = replace(self.me, partitions=partitions, msg_rate_in=round(rate, 3))
        await self._metadata.put(self._path, encode_json(self.me.to_json()), ephemeral=True)

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._register()
            except MetadataStoreError as exc:
                log.warning("load report not written (%s); next try in %.0f s", exc, self._interval)

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            log.warning("metadata session lost: this broker's registration is gone until the next report")
        elif event in (SessionEvent.SESSION_REESTABLISHED, SessionEvent.RECONNECTED):
            self._follower.request_resync()

    async def _resync(self) -> None:
        """After the session came back: register again at once (the ephemeral value may be gone) and re-read
        every broker (notifications may have been missed)."""
        await self._register()
        await self._reload()

    async def _reload(self) -> None:
        brokers: dict[tuple[str, int], BrokerInfo] = {}
        for (group, broker_id), result in (await read_tree(self._metadata, BROKERS_ROOT, 2)).items():
            info = self._decode(join_path(BROKERS_ROOT, group, broker_id), result)
            if info is not None:
                brokers[(info.group, info.broker_id)] = info
        self.brokers = brokers

    def _apply(self, path: str, result: GetResult | None) -> None:
        names = split_path(BROKERS_ROOT, path)
        if names is None or len(names) != 2 or not names[1].isdigit():
            return
        key = (names[0], int(names[1]))
        info = None if result is None else self._decode(path, result)
        if key == (self.me.group, self.me.broker_id):  # this broker's own registration, seen back
            if info is None:
                self.brokers.pop(key, None)
            else:
                self.brokers[key] = info
            return
        if info is None:
            if self.brokers.pop(key, None) is not None:
                log.info("broker %s/%s left the cluster", *key)
        else:
            if key not in self.brokers:
                log.info("broker %s/%s joined the cluster: %s", key[0], key[1], info.service_url)
            self.brokers[key] = info

    @staticmethod
    def _decode(path: str, result: GetResult) -> BrokerInfo | None:
        try:
            return BrokerInfo.from_json(decode_json(path, result.value))
        except (MetadataStoreError, KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("ignoring a malformed broker registration at %s: %s", path, exc)
            return None
