"""What ``quasar demo flights`` and ``quasar demo flights-pipeline`` share: the default broker URLs, the
default flights topic and :class:`TopicName`, the demos' parser of a persistent topic name.

Kept apart from both commands so that :mod:`quasar.cli.pipeline` does not import :mod:`quasar.cli.demo`,
which registers the pipeline command under ``quasar demo`` (no import cycle inside ``quasar.cli``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from quasar.cli.flights import DemoError
from quasar.protocol import InvalidTopicNameError as PulsarInvalidTopicNameError
from quasar.protocol import TopicName as PulsarTopicName

__all__ = [
    "DEFAULT_ADMIN_URL",
    "DEFAULT_SERVICE_URL",
    "DEFAULT_TOPIC",
    "DEFAULT_TOPIC_NAME",
    "InvalidTopicNameError",
    "TopicName",
]

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
DEFAULT_TOPIC = "persistent://public/default/flights"


class InvalidTopicNameError(DemoError, ValueError):
    """The topic name is not ``name``, ``tenant/namespace/name`` or ``persistent://tenant/namespace/name``."""


@dataclass(frozen=True, slots=True)
class TopicName:
    """A persistent, non-partition topic name, ``persistent://tenant/namespace/local_name``: the demos' view of
    :class:`quasar.protocol.TopicName` (which parses it), with the admin path the demos need."""

    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse ``name`` with Pulsar's naming rules (:meth:`quasar.protocol.TopicName.parse`: short names
        default to tenant ``public``, namespace ``default``), then keep the demos' restrictions.

        Raises:
            InvalidTopicNameError: not a valid Pulsar topic name, a non-persistent domain, or a partition's
                name (``<topic>-partition-N``).
        """
        try:
            parsed = PulsarTopicName.parse(name)
        except PulsarInvalidTopicNameError as exc:
            raise InvalidTopicNameError(
                f"{name!r}: expected 'name', 'tenant/namespace/name' or 'persistent://tenant/namespace/name' ({exc})"
            ) from None
        if not parsed.is_persistent:
            raise InvalidTopicNameError(
                f"{name!r}: the demo needs a persistent:// topic, not {parsed.domain}://"
            )
        if parsed.is_partition:
            raise InvalidTopicNameError(f"{name!r}: give the partitioned topic's name, not one partition's")
        return cls(parsed.tenant, parsed.namespace, parsed.local_name)

    def __str__(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def partitions_path(self) -> str:
        """The admin v2 path of this topic's partitioned-topic metadata."""
        parts = (quote(p, safe="") for p in (self.tenant, self.namespace, self.local_name))
        return "/admin/v2/persistent/{}/{}/{}/partitions".format(*parts)


#: :data:`DEFAULT_TOPIC` parsed.
DEFAULT_TOPIC_NAME = TopicName.parse(DEFAULT_TOPIC)
