"""The broker's registry of loaded topics and the per-namespace topic count, both without a scan over every
topic (issue 21: 100,000 topics on one broker).

- :class:`TopicRegistry` is the ``full name -> loaded topic`` dict of ``BrokerService.topics`` that also keeps
  the names of its non-persistent topics sorted, so they can be counted per namespace in O(log n).
- :func:`count_namespace_topics` counts the topics of a namespace as ``max_topics_per_namespace`` counts them
  (Pulsar: every partition of a partitioned topic is one) from the managed-ledger factory's sorted names, in
  O(log n + partitions of the namespace's partitioned topics), instead of walking every name of the broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from sortedcontainers import SortedSet

from quasar.broker.resources import declared_partition
from quasar.protocol.topic_name import PARTITION_SUFFIX

__all__ = ["TopicRegistry", "count_namespace_topics"]

_NON_PERSISTENT = "non-persistent://"
_END = "\U0010ffff"


class TopicRegistry(dict[str, Any]):
    """``BrokerService.topics``: loaded topics by full name (a dict), plus a sorted index of the
    non-persistent names kept in step by every way the broker adds or removes one (``[]=``, ``del``, ``pop``,
    ``clear``)."""

    def __init__(self) -> None:
        super().__init__()
        self._non_persistent: Any = SortedSet()

    def __setitem__(self, name: str, topic: Any) -> None:
        super().__setitem__(name, topic)
        if name.startswith(_NON_PERSISTENT):
            self._non_persistent.add(name)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._non_persistent.discard(name)

    def pop(self, name: str, *default: Any) -> Any:
        self._non_persistent.discard(name)
        return super().pop(name, *default)

    def clear(self) -> None:
        super().clear()
        self._non_persistent.clear()

    def non_persistent_with_prefix(self, prefix: str) -> Iterable[str]:
        """Loaded non-persistent topic names starting with ``prefix`` (sorted)."""
        names: Iterable[str] = self._non_persistent.irange(prefix, prefix + _END, inclusive=(True, False))
        return names


class _Names(Protocol):
    def count_with_prefix(self, prefix: str) -> int: ...
    def names_with_prefix(self, prefix: str) -> Iterable[str]: ...


def count_namespace_topics(
    namespace: str,
    ledgers: _Names,
    loaded: TopicRegistry,
    partitioned_of: Any,
    max_partitions: int,
) -> int:
    """Topics of ``namespace`` (``tenant/ns``) as ``max_topics_per_namespace`` counts them: the partition count
    of each partitioned topic (those past ``max_partitions``, when it is > 0, are not served and not
    counted), plus the persistent managed ledgers (``ledgers``: the factory) and the loaded non-persistent
    topics of the namespace that are not partitions of a declared partitioned topic.
    ``partitioned_of(namespace, domain)`` gives ``{partitioned full name: count}``."""
    count = 0
    for domain in ("persistent", "non-persistent"):
        partitioned: dict[str, int] = partitioned_of(namespace, domain)
        count += sum(n for n in partitioned.values() if not max_partitions or n <= max_partitions)
        prefix = f"{domain}://{namespace}/"
        if domain == "persistent":
            count += ledgers.count_with_prefix(prefix)
            for base in partitioned:  # their partitions were counted with the partitioned topic
                count -= sum(
                    1
                    for name in ledgers.names_with_prefix(base + PARTITION_SUFFIX)
                    if name.rfind(PARTITION_SUFFIX) == len(base) and declared_partition(name, partitioned)
                )
        else:
            count += sum(
                1
                for name in loaded.non_persistent_with_prefix(prefix)
                if not declared_partition(name, partitioned)
            )
    return count
