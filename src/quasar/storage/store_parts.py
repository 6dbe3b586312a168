"""StoreParts: the files and shared objects of one message store, handed to the parts that work on them.

``MessageStore`` builds them once; ``StoreFlusher`` (when they reach the disk) and ``StoreRetention`` (when
they may go) both take the same set, so it travels as one value instead of seven arguments each.
"""

from __future__ import annotations

from dataclasses import dataclass

from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig
from quasar.storage.dispatch import ConsumeQueueStore, Dispatcher
from quasar.storage.index_service import IndexService
from quasar.storage.store_state import StoreState
from quasar.storage.write_path import StoreWriter

__all__ = ["StoreParts"]


@dataclass(frozen=True, slots=True)
class StoreParts:
    """``config``; the ``commit_log``, the ``consume_queues`` and the ``index_service`` (the store's files);
    the ``writer`` (its dispatch mark and last store timestamp bound what is flushed, checkpointed and
    deleted); ``async_dispatchers`` (what the reput thread feeds, the index among them); the shared
    ``state`` (the write gate)."""

    config: StoreConfig
    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    index_service: IndexService
    writer: StoreWriter
    async_dispatchers: list[Dispatcher]
    state: StoreState
