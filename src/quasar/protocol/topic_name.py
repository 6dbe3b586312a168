"""Pulsar topic names: ``{domain}://{tenant}/{namespace}/{local_name}``.

Parsing follows the C++ client (``lib/TopicName.cc``) and Java ``TopicName``:

* short forms: ``"t"`` -> ``persistent://public/default/t``; ``"tenant/ns/t"`` -> ``persistent://tenant/ns/t``
  (any other number of ``/``-separated parts without a domain is invalid);
* domain ``persistent`` or ``non-persistent``;
* tenant and namespace must be non-empty and match ``[A-Za-z0-9_=:.-]+`` (Pulsar ``NamedEntity.checkName``);
* the local name must be non-empty, contain no ``/`` and no control characters;
* a partition topic is ``<base>-partition-<i>``: the text after the last ``-partition-`` must be a decimal
  integer without sign or leading zeros, else the name is rejected (Java parses it as the partition index).

Legacy V1 names with a cluster (``persistent://tenant/cluster/ns/t``) are rejected: Quasar has no clusters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from .errors import InvalidTopicNameError

__all__ = ["NON_PERSISTENT", "PARTITION_SUFFIX", "PERSISTENT", "TopicName"]

PERSISTENT: Final = "persistent"
NON_PERSISTENT: Final = "non-persistent"
#: Separator between a partitioned topic's name and the partition index (Java ``PARTITIONED_TOPIC_SUFFIX``).
PARTITION_SUFFIX: Final = "-partition-"
_DEFAULT_TENANT = "public"
_DEFAULT_NAMESPACE = "default"
_NAMED_ENTITY = re.compile(r"[A-Za-z0-9_=:.\-]+")
_PARTITION_INDEX = re.compile(r"0|[1-9][0-9]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class TopicName:
    """A parsed, fully qualified topic name; build it with :meth:`parse`.

    Attributes:
        domain: ``"persistent"`` or ``"non-persistent"``.
        tenant: the tenant (Pulsar "property").
        namespace: the namespace's local part (``"default"`` in ``public/default``).
        local_name: the topic's own name, including any ``-partition-N`` suffix.
        partition_index: N for ``...-partition-N``, -1 when this is not a partition.
    """

    domain: str
    tenant: str
    namespace: str
    local_name: str
    partition_index: int

    @staticmethod
    def parse(name: str) -> TopicName:
        """Parse a full or short topic name (see the module docstring).

        Raises:
            InvalidTopicNameError: the name is not a valid Pulsar topic name.
        """
        if not isinstance(name, str):
            raise InvalidTopicNameError(f"topic name must be a str, got {type(name).__name__}")
        return _parse(name)

    @property
    def full_name(self) -> str:
        """``domain://tenant/namespace/local_name``."""
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        """``tenant/namespace``, the form used by GET_TOPICS_OF_NAMESPACE and the admin API."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def is_persistent(self) -> bool:
        """True for the ``persistent`` domain."""
        return self.domain == PERSISTENT

    @property
    def is_partition(self) -> bool:
        """True for ``<base>-partition-<N>``."""
        return self.partition_index >= 0

    @property
    def partitioned_topic_name(self) -> str:
        """Full name of the partitioned topic this partition belongs to (the full name itself otherwise)."""
        if self.partition_index < 0:
            return self.full_name
        base = self.local_name[: self.local_name.rindex(PARTITION_SUFFIX)]
        return f"{self.domain}://{self.tenant}/{self.namespace}/{base}"

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this topic's partitioned topic (``<base>-partition-<index>``).

        Called on a partition, it addresses a sibling partition of the same base topic.

        Raises:
            InvalidTopicNameError: ``index`` is negative or not an int.
        """
        if type(index) is not int or not 0 <= index <= _INT32_MAX:
            raise InvalidTopicNameError(f"partition index must be an int in [0, 2^31), got {index!r}")
        base = self.local_name
        if self.partition_index >= 0:
            base = base[: base.rindex(PARTITION_SUFFIX)]
        return TopicName(self.domain, self.tenant, self.namespace, f"{base}{PARTITION_SUFFIX}{index}", index)

    def __str__(self) -> str:
        return self.full_name


@lru_cache(maxsize=4096)
def _parse(name: str) -> TopicName:
    if "://" in name:
        domain, _, rest = name.partition("://")
        parts = rest.split("/")
    else:
        domain = PERSISTENT
        parts = name.split("/")
        if len(parts) == 1:
            parts = [_DEFAULT_TENANT, _DEFAULT_NAMESPACE, parts[0]]
        elif len(parts) != 3:
            raise InvalidTopicNameError(
                f"invalid topic name {name!r}: a short name is '<topic>' or '<tenant>/<namespace>/<topic>'"
            )
    if domain not in (PERSISTENT, NON_PERSISTENT):
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: domain must be 'persistent' or 'non-persistent', got {domain!r}"
        )
    if len(parts) == 4:
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: legacy names with a cluster (tenant/cluster/namespace/topic) "
            "are not supported"
        )
    if len(parts) != 3:
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: expected {domain}://tenant/namespace/topic"
        )
    tenant, namespace, local_name = parts
    for label, value in (("tenant", tenant), ("namespace", namespace)):
        if not _NAMED_ENTITY.fullmatch(value):
            raise InvalidTopicNameError(
                f"invalid topic name {name!r}: {label} {value!r} must be non-empty and use only "
                "letters, digits and _ = : . -"
            )
    if not local_name:
        raise InvalidTopicNameError(f"invalid topic name {name!r}: empty topic part")
    if _CONTROL.search(local_name):
        raise InvalidTopicNameError(f"invalid topic name {name!r}: control character in the topic part")
    partition_index = -1
    suffix_at = local_name.rfind(PARTITION_SUFFIX)
    if suffix_at >= 0:
        index_text = local_name[suffix_at + len(PARTITION_SUFFIX) :]
        if len(index_text) > 10 or not _PARTITION_INDEX.fullmatch(index_text) or int(index_text) > _INT32_MAX:
            raise InvalidTopicNameError(
                f"invalid topic name {name!r}: '{PARTITION_SUFFIX}' must be followed by a partition index, "
                f"got {index_text!r}"
            )
        if suffix_at == 0:
            raise InvalidTopicNameError(f"invalid topic name {name!r}: partition of an empty topic name")
        partition_index = int(index_text)
    return TopicName(domain, tenant, namespace, local_name, partition_index)
