"""Pulsar topic names: ``{domain}://{tenant}/{namespace}/{local_name}``.

Parsing follows the C++ client (``lib/TopicName.cc``) and Java ``TopicName``:

* short forms: ``"t"`` -> ``persistent://public/default/t``; ``"tenant/ns/t"`` -> ``persistent://tenant/ns/t``
  (any other number of ``/``-separated parts without a domain is invalid);
* domain ``persistent`` or ``non-persistent``;
* tenant and namespace must be non-empty and match ``[A-Za-z0-9_=:.-]+`` (Pulsar ``NamedEntity.checkName``),
  may not be ``.`` or ``..`` alone, and are at most :data:`MAX_NAMED_ENTITY_LENGTH` characters;
* the local name must be non-empty, may not be ``.`` or ``..``, and may contain no ``/``, no control character
  (C0, DEL, C1, U+2028/U+2029) and no bidirectional-override or -isolate character (U+061C, U+200E/F,
  U+202A..U+202E, U+2066..U+2069: they make a name display as another one); a ``%`` escape that decodes to
  one of those, to ``/`` or ``\\``, or to a whole ``.``/``..`` is refused too (REST paths carry names URL-encoded,
  so ``%2e%2e%2f`` would become ``../`` one decoding later);
* the full name is at most :data:`MAX_TOPIC_NAME_LENGTH` bytes of UTF-8. Pulsar sets no explicit bound (its
  names end up in ZooKeeper paths, bounded by jute.maxbuffer); Quasar bounds it so that a name always fits
  a commit-log record, a metadata key and a consume-queue directory, and a 20 kB name is refused at
  LOOKUP/PRODUCER/SUBSCRIBE rather than failing every SEND;
* a partition topic is ``<base>-partition-<i>``: the text after the last ``-partition-`` must be a decimal
  integer without sign or leading zeros, else the name is rejected (Java parses it as the partition index).

Legacy V1 names with a cluster (``persistent://tenant/cluster/ns/t``) are rejected: Quasar has no clusters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final
from urllib.parse import unquote

from .errors import InvalidTopicNameError

__all__ = [
    "MAX_NAMED_ENTITY_LENGTH",
    "MAX_TOPIC_NAME_LENGTH",
    "NON_PERSISTENT",
    "PARTITION_SUFFIX",
    "PERSISTENT",
    "TopicName",
    "check_named_entity",
]

PERSISTENT: Final = "persistent"
NON_PERSISTENT: Final = "non-persistent"
#: Separator between a partitioned topic's name and the partition index (Java ``PARTITIONED_TOPIC_SUFFIX``).
PARTITION_SUFFIX: Final = "-partition-"
_DEFAULT_TENANT = "public"
_DEFAULT_NAMESPACE = "default"
_NAMED_ENTITY = re.compile(r"[A-Za-z0-9_=:.\-]+")
_PARTITION_INDEX = re.compile(r"0|[1-9][0-9]*")
# C0, DEL, C1, line/paragraph separators, and the bidi marks, embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_DECODED_BAD = re.compile("[/\\\\\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_DOTS = (".", "..")
#: Longest tenant, namespace or cluster name, in characters (a file-name component: POSIX NAME_MAX).
MAX_NAMED_ENTITY_LENGTH: Final = 255
#: Longest full topic name (``domain://tenant/namespace/local``), in bytes of UTF-8.
MAX_TOPIC_NAME_LENGTH: Final = 1024
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


def check_named_entity(label: str, value: str) -> None:
    """Check a tenant, namespace (local part) or cluster name as Pulsar's ``NamedEntity.checkName``: non-empty,
    ``[-=:.\\w]+`` (ASCII word characters), not ``.`` or ``..`` alone, at most
    :data:`MAX_NAMED_ENTITY_LENGTH` characters. ``label`` names it in the message ("tenant", "namespace").

    Raises:
        InvalidTopicNameError: the name is not valid (REST: 412, binary protocol: InvalidTopicName).
    """
    if not isinstance(value, str):
        raise InvalidTopicNameError(f"{label} name must be a str, got {type(value).__name__}")
    reason = _named_entity_error(label, value)
    if reason:
        raise InvalidTopicNameError(f"{label} name is not valid: {reason}")


def _named_entity_error(label: str, value: str) -> str:
    if len(value) > MAX_NAMED_ENTITY_LENGTH:
        return f"{label} is {len(value)} characters long, at most {MAX_NAMED_ENTITY_LENGTH} are allowed"
    if not _NAMED_ENTITY.fullmatch(value):
        return f"{label} {_shown(value)} must be non-empty and use only letters, digits and _ = : . -"
    if value in _DOTS:
        return f"{label} may not be '.' or '..'"
    return ""


def _shown(text: str) -> str:
    """``text`` quoted for an error message, cut to 100 characters (a hostile name may be megabytes)."""
    return repr(text) if len(text) <= 100 else f"{text[:100]!r}... ({len(text)} characters)"


def _parse(name: str) -> TopicName:
    if (
        len(name) > MAX_TOPIC_NAME_LENGTH
        or len(name.encode("utf-8", "surrogatepass")) > MAX_TOPIC_NAME_LENGTH
    ):
        raise InvalidTopicNameError(
            f"invalid topic name {_shown(name)}: longer than {MAX_TOPIC_NAME_LENGTH} bytes of UTF-8"
        )
    return _parse_bounded(name)


def _check_local_name(name: str, local_name: str) -> None:
    if not local_name:
        raise InvalidTopicNameError(f"invalid topic name {name!r}: empty topic part")
    if local_name in _DOTS:
        raise InvalidTopicNameError(f"invalid topic name {name!r}: the topic part may not be '.' or '..'")
    if _CONTROL.search(local_name):
        raise InvalidTopicNameError(
            f"invalid topic name {_shown(name)}: control or bidirectional-override character in the topic part"
        )
    if "%" in local_name:
        decoded = unquote(local_name)
        if decoded in _DOTS or _DECODED_BAD.search(decoded):
            raise InvalidTopicNameError(
                f"invalid topic name {_shown(name)}: the topic part URL-decodes to {_shown(decoded)}, "
                "a path separator, a control character or a relative path"
            )


@lru_cache(maxsize=4096)
def _parse_bounded(name: str) -> TopicName:
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
        reason = _named_entity_error(label, value)
        if reason:
            raise InvalidTopicNameError(f"invalid topic name {_shown(name)}: {reason}")
    _check_local_name(name, local_name)
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
