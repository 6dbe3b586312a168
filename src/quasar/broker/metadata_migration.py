"""One-time upgrade of a data directory written by the previous release (metadata as JSON text in a
``kv(key, value)`` table of ``metadata.db``) to the metadata port's paths.

The old keys put whole names into the path (``/managed-ledgers/persistent://public/default/t``), which the
port rejects (empty segments); each key is rewritten to the path its owner now uses, with every name as ONE
segment (``encode_segment``). Values keep their JSON, as UTF-8 bytes::

    old key                                                   new path
    /admin/tenants/<tenant>                                   resources.tenant_path
    /admin/policies/<tenant>/<ns>                             resources.namespace_path
    /admin/partitioned-topics/<domain>/<tenant>/<ns>/<topic>  resources.partitioned_topic_path
    /admin/topic-policies/<domain>/<tenant>/<ns>/<topic>      resources.topic_policies_path
    /managed-ledgers/<ledger name>                            ledger.paths.ledger_table_path
    /cursors/<ledger name>/<percent-encoded cursor>           ledger.paths.cursor_path
    anything else that is a valid path (/broker/boot-count, /ledger-ids/next)   unchanged

The rewrite is ONE transaction of the sqlite backend (:meth:`SqliteMetadataStore.adopt_legacy_table`): the
rows are written and the ``kv`` table dropped together, so a crash leaves either the old or the new layout.
A key that cannot be mapped is logged and dropped.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from quasar.broker.resources import (
    PARTITIONED_ROOT,
    POLICIES_ROOT,
    TENANTS_ROOT,
    TOPIC_POLICIES_ROOT,
    namespace_path,
    partitioned_topic_path,
    tenant_path,
    topic_policies_path,
)
from quasar.errors import QuasarError
from quasar.ledger.paths import CURSORS_ROOT, MANAGED_LEDGERS_ROOT, cursor_path, ledger_table_path
from quasar.metadata import check_path
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.protocol import TopicName

__all__ = ["LEGACY_TABLE", "convert_legacy_rows", "legacy_path", "migrate_legacy_metadata"]

log = logging.getLogger(__name__)

LEGACY_TABLE = "kv"


def _topic(rest: str) -> TopicName:
    domain, tenant, namespace, local = rest.split("/", 3)
    return TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}")


def _cursor(rest: str) -> str:
    ledger, _, cursor = rest.rpartition("/")
    return cursor_path(ledger, unquote(cursor))


def _namespace(rest: str) -> str:
    tenant, namespace = rest.split("/")
    return namespace_path(f"{tenant}/{namespace}")


_ROUTES = (
    (MANAGED_LEDGERS_ROOT, ledger_table_path),
    (CURSORS_ROOT, _cursor),
    (TENANTS_ROOT, tenant_path),
    (POLICIES_ROOT, _namespace),
    (PARTITIONED_ROOT, lambda rest: partitioned_topic_path(_topic(rest))),
    (TOPIC_POLICIES_ROOT, lambda rest: topic_policies_path(_topic(rest))),
)


def legacy_path(key: str) -> str:
    """The new path of the previous release's ``key``; raises ``ValueError`` (or a ``QuasarError``) when the
    key cannot be mapped."""
    for root, convert in _ROUTES:
        prefix = root + "/"
        if key.startswith(prefix):
            return convert(key[len(prefix) :])
    return check_path(key)


def convert_legacy_rows(rows: list[tuple[str, str]]) -> list[tuple[str, bytes]]:
    """``(key, JSON text)`` rows of the ``kv`` table -> ``(path, value)`` (runs on the store's writer thread)."""
    converted: list[tuple[str, bytes]] = []
    for key, text in rows:
        try:
            converted.append((legacy_path(key), text.encode()))
        except (ValueError, QuasarError) as exc:
            log.warning("metadata upgrade: dropping legacy key %r: %s", key, exc)
    return converted


async def migrate_legacy_metadata(store: SqliteMetadataStore) -> int | None:
    """Rewrite the previous release's ``kv`` table of ``store``'s file, if it has one (see the module
    docstring). Returns the number of paths written, None when there was nothing to upgrade. Raises the
    metadata port's errors (nothing changes then)."""
    written = await store.adopt_legacy_table(LEGACY_TABLE, convert_legacy_rows)
    if written is not None:
        log.info("metadata upgrade: %d keys of the previous release moved to the new paths", written)
    return written
