"""PlacementTable: which broker group holds each topic (partition), recorded once in the metadata store.

RocketMQ's model with Pulsar's names: a topic partition is placed on one broker group when it is first used
or created and stays there, because its data lives in that group's commit log (Pulsar can move bundles
because its data is in BookKeeper; Quasar cannot, see reference/cluster.md §6). A placement is written with
"must not exist" (expected version -1), so two brokers placing the same topic at once agree on the first
write. Every broker holds the whole table in memory, loaded at start and kept current through the store's
notifications.

:func:`choose_groups` is the load rule: the group with the fewest placed partitions first, then the lowest
publish rate, then the name, one pick at a time (so a new 12-partition topic on three idle groups gets four
partitions on each).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from quasar.broker.cluster.model import PLACEMENT_ROOT
from quasar.broker.metadata_tree import PathFollower, join_path, read_tree, split_path
from quasar.metadata import (
    AlreadyExistsError,
    GetResult,
    MetadataStore,
    MetadataStoreError,
    Put,
    decode_json,
    encode_json,
)
from quasar.protocol import TopicName

log = logging.getLogger(__name__)

__all__ = ["PlacementTable", "choose_groups", "placement_path"]


def placement_path(topic: TopicName) -> str:
    """``/cluster/placement/<domain>/<tenant>/<ns>/<topic>`` (a partition's own name is its last segment)."""
    return join_path(PLACEMENT_ROOT, topic.domain, topic.tenant, topic.namespace, topic.local_name)


def choose_groups(
    count: int, groups: Sequence[str], partitions: Mapping[str, int], rates: Mapping[str, float]
) -> list[str]:
    """``count`` broker groups for ``count`` new partitions, picked one at a time from ``groups`` (non-empty):
    fewest partitions (``partitions``, counting the picks so far), then lowest ``rates`` (msg/s), then name."""
    if not groups:
        raise ValueError("no broker group to place a topic on")
    load = Counter({group: partitions.get(group, 0) for group in groups})
    picks = []
    for _ in range(count):
        group = min(groups, key=lambda g: (load[g], rates.get(g, 0.0), g))
        load[group] += 1
        picks.append(group)
    return picks


class PlacementTable:
    """Topic full name -> broker group, for the whole cluster (see the module docstring).

    ``on_change(group)`` is called (on the event loop) whenever a placement on ``group`` appears or goes.
    Write methods raise the port's ``MetadataStoreError`` (the store is unreachable) and change nothing then.
    """

    def __init__(self, metadata: MetadataStore, on_change: Callable[[str], None] | None = None) -> None:
        self._metadata = metadata
        self._on_change = on_change
        self._groups: dict[str, str] = {}
        self._follower = PathFollower(metadata, PLACEMENT_ROOT, self._apply, resync=self.load)

    async def load(self) -> None:
        """Read every placement (replacing what is in memory)."""
        tree = await read_tree(self._metadata, PLACEMENT_ROOT, 4)
        groups = {}
        for (domain, tenant, ns, local), result in tree.items():
            group = self._decode(join_path(PLACEMENT_ROOT, domain, tenant, ns, local), result)
            if group is not None:
                groups[f"{domain}://{tenant}/{ns}/{local}"] = group
        changed = {g for g in set(groups.values()) ^ set(self._groups.values())}
        self._groups = groups
        for group in changed:
            self._notify(group)

    def start_following(self) -> None:
        """Apply placements made by other brokers as they are notified."""
        self._follower.start()

    async def stop(self) -> None:
        """Stop following (the broker is leaving the cluster); the table in memory stays readable."""
        await self._follower.stop()

    def resync(self) -> None:
        """Reload in the follower's task (after a store reconnect: notifications may have been missed)."""
        self._follower.request_resync()

    # ------------------------------------------------------------------ reads
    def group_of(self, topic: TopicName) -> str | None:
        """The broker group ``topic`` is placed on, or None when it is not placed yet."""
        return self._groups.get(topic.full_name)

    def counts(self) -> Counter[str]:
        """Placed topics (partitions) per broker group."""
        return Counter(self._groups.values())

    def topics_of(self, group: str) -> list[str]:
        """Full names of the topics placed on ``group``, sorted."""
        return sorted(name for name, owner in self._groups.items() if owner == group)

    def topics_in(self, namespace: str, domain: str) -> list[str]:
        """Full names of the placed topics of ``tenant/ns`` in ``domain``, sorted."""
        prefix = f"{domain}://{namespace}/"
        return sorted(name for name in self._groups if name.startswith(prefix))

    async def read(self, topic: TopicName) -> str | None:
        """The group ``topic`` is placed on, read from the store (a placement made elsewhere that this broker
        has not been notified of yet is found and remembered); None when it is not placed."""
        known = self._groups.get(topic.full_name)
        if known is not None:
            return known
        path = placement_path(topic)
        stored = await self._metadata.get(path)
        group = None if stored is None else self._decode(path, stored)
        if group is not None:
            self._set(topic.full_name, group)
        return group

    # ------------------------------------------------------------------ writes
    async def claim(self, topic: TopicName, group: str) -> str:
        """Place ``topic`` on ``group`` unless it is placed already; returns the group it is placed on."""
        known = self._groups.get(topic.full_name)
        if known is not None:
            return known
        path = placement_path(topic)
        try:
            await self._metadata.put(path, self._value(group), -1)
        except AlreadyExistsError:
            stored = await self._metadata.get(path)
            owner = None if stored is None else self._decode(path, stored)
            if owner is None:  # deleted meanwhile, or unreadable: try once more, then give up
                await self._metadata.put(path, self._value(group), -1)
                owner = group
            self._set(topic.full_name, owner)
            return owner
        self._set(topic.full_name, group)
        log.info("placed %s on broker group %s", topic.full_name, group)
        return group

    async def place_all(self, topics: Iterable[TopicName], groups: Sequence[str]) -> None:
        """Place ``topics`` (the partitions of a new partitioned topic) on ``groups`` (same length) in ONE
        transaction; topics placed already keep their group (they are left out)."""
        ops = [
            (topic, group)
            for topic, group in zip(topics, groups, strict=True)
            if topic.full_name not in self._groups
        ]
        if not ops:
            return
        await self._metadata.multi([Put(placement_path(t), self._value(g), -1) for t, g in ops])
        for topic, group in ops:
            self._set(topic.full_name, group)
        log.info("placed %d partitions on broker groups %s", len(ops), sorted(set(groups)))

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _value(group: str) -> bytes:
        return encode_json({"group": group, "placedAtMs": int(time.time() * 1000)})

    def _set(self, name: str, group: str | None) -> None:
        old = self._groups.get(name)
        if group is None:
            self._groups.pop(name, None)
        else:
            self._groups[name] = group
        for changed in {old, group} - {None}:
            if old != group:
                self._notify(changed)  # type: ignore[arg-type]

    def _notify(self, group: str) -> None:
        if self._on_change is not None:
            self._on_change(group)

    def _apply(self, path: str, result: GetResult | None) -> None:
        names = split_path(PLACEMENT_ROOT, path)
        if names is None or len(names) != 4:
            return
        domain, tenant, ns, local = names
        group = None if result is None else self._decode(path, result)
        self._set(f"{domain}://{tenant}/{ns}/{local}", group)

    @staticmethod
    def _decode(path: str, result: GetResult) -> str | None:
        try:
            group = decode_json(path, result.value)["group"]
        except (MetadataStoreError, KeyError, TypeError) as exc:
            log.warning("ignoring a malformed placement at %s: %s", path, exc)
            return None
        return group if isinstance(group, str) and group else None
