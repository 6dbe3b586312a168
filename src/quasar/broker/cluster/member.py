"""ClusterMember: what turns a BrokerService into a member of a cluster, composed and owned in one place.

Started by the broker's composition root once both listeners are bound (their URLs are registered) and
before the Pulsar listener serves: it loads the placement table, registers this broker and reads the
others, and makes the service's admin resources follow the changes other brokers make; the root then gives
the service :attr:`ClusterMember.ownership`. ``on_topics_changed`` (e.g. the name-server registrar's ``topics_changed``)
is called whenever a topic is placed on or removed from this broker's group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from quasar.broker.cluster.membership import ClusterMembership
from quasar.broker.cluster.model import BrokerInfo
from quasar.broker.cluster.ownership import ClusterOwnership
from quasar.broker.cluster.placement import PlacementTable
from quasar.broker.resources import BrokerResources
from quasar.metadata import MetadataStore, SessionEvent
from quasar.protocol import TopicName

log = logging.getLogger(__name__)

__all__ = ["ClusterMember"]


class _RateMeter:
    """Messages/s published since the previous reading (a counter that may drop when producers close is
    read as 0 for that interval)."""

    def __init__(self, total: Callable[[], int]) -> None:
        self._total = total
        self._last = (time.monotonic(), total())

    def rate(self) -> float:
        now, count = time.monotonic(), self._total()
        then, before = self._last
        self._last = (now, count)
        return max(0, count - before) / max(now - then, 1e-3)


class ClusterMember:
    """Membership, placement and ownership of one cluster broker (see the module docstring)."""

    def __init__(
        self,
        metadata: MetadataStore,
        me: BrokerInfo,
        *,
        resources: BrokerResources,
        has_local_data: Callable[[str], bool],
        partition_count: Callable[[TopicName], int],
        messages_in_total: Callable[[], int],
        report_interval_s: float = 5.0,
    ) -> None:
        self.resources = resources
        self._metadata = metadata
        self.on_topics_changed: list[Callable[[], None]] = []
        self.placement = PlacementTable(metadata, on_change=self._placement_changed)
        meter = _RateMeter(messages_in_total)
        self.membership = ClusterMembership(
            metadata,
            me,
            lambda: (self.placement.counts().get(me.group, 0), meter.rate()),
            report_interval_s=report_interval_s,
        )
        self.ownership = ClusterOwnership(
            self.membership,
            self.placement,
            has_local_data=has_local_data,
            partition_count=partition_count,
        )

    @property
    def me(self) -> BrokerInfo:
        """This broker's registration as last written (with its latest load report)."""
        return self.membership.me

    async def start(self) -> None:
        """Load placements, register, and follow the admin resources; then give the service ``ownership``.
        Raises the port's MetadataStoreError
        when the cluster's metadata store cannot be reached."""
        await self.placement.load()
        self.placement.start_following()
        await self.membership.start()
        self.resources.follow()
        self._metadata.register_session_listener(self._on_session)
        log.info(
            "member of cluster %s as broker group %s id %d (%s); live groups: %s",
            self.me.cluster,
            self.me.group,
            self.me.broker_id,
            self.me.role,
            ", ".join(self.membership.live_groups()),
        )

    async def stop(self) -> None:
        """Leave the cluster: stop following and remove this broker's registration."""
        await self.membership.stop()
        await self.placement.stop()
        await self.resources.stop_following()

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self.placement.resync()
            self.resources.resync()

    def _placement_changed(self, group: str) -> None:
        if group == self.membership.me.group:
            for callback in self.on_topics_changed:
                callback()
