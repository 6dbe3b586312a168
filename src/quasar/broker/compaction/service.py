"""Compaction per topic: manual triggers, status, and the threshold monitor (Pulsar
``PersistentTopic.triggerCompaction`` / ``compactionStatus`` and ``BrokerService.checkCompaction``).

- :meth:`CompactionService.trigger` starts one compaction of a loaded persistent topic in a task the service
  owns; a second trigger while it runs raises :class:`CompactionInProgressError` (admin: 409).
- :meth:`CompactionService.status` answers Pulsar's ``LongRunningProcessStatus``:
  ``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ""}`` (kept in memory, as Pulsar does).
- The monitor (:meth:`start`, cancelled by :meth:`close`) runs every
  ``broker_service_compaction_monitor_interval_in_seconds`` and compacts each loaded persistent topic whose
  backlog past its horizon exceeds its threshold: the namespace policy ``compactionThreshold`` (bytes), else
  ``broker_service_compaction_threshold_in_bytes``; 0 turns it off. The backlog is estimated as Pulsar's
  ``getEstimatedBacklogSize``: entries after the horizon times the ledger's average entry size.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from quasar.broker.compaction.compactor import compact
from quasar.broker.compaction.view import COMPACTION_SUBSCRIPTION
from quasar.broker.errors import BrokerError, NotAllowedError
from quasar.errors import QuasarError
from quasar.protocol.enums import ServerError

if TYPE_CHECKING:
    from quasar.broker.compaction.view import CompactedView
    from quasar.ledger.factory import ManagedLedgerFactory
    from quasar.ledger.managed_ledger import ManagedLedger
    from quasar.protocol import TopicName

__all__ = [
    "COMPACTION_THRESHOLD",
    "CompactedTopic",
    "CompactionInProgressError",
    "CompactionService",
    "backlog_bytes_past_horizon",
]

log = logging.getLogger(__name__)

COMPACTION_THRESHOLD = "compactionThreshold"
"""Namespace policy key (Pulsar ``Policies.compaction_threshold``): bytes; 0 = off."""


class CompactedTopic(Protocol):
    """What compaction uses of a persistent topic (``quasar.broker.topic.PersistentTopic``)."""

    is_persistent: bool
    compacted_view: CompactedView | None

    @property
    def name(self) -> TopicName: ...

    @property
    def ledger(self) -> ManagedLedger: ...


class CompactionInProgressError(BrokerError):
    """A compaction of the topic is already running (Pulsar answers 409 Conflict)."""

    server_error = ServerError.NotAllowedError


@dataclass(slots=True)
class _TopicCompaction:
    status: str = "NOT_RUN"
    last_error: str = ""
    task: asyncio.Task[None] | None = None


def backlog_bytes_past_horizon(topic: CompactedTopic) -> int:
    """Estimated bytes of the entries after the topic's compaction horizon (all of them before the first
    compaction): entries past the horizon x the ledger's average entry size."""
    ledger = topic.ledger
    table = ledger.table
    cursor = ledger.cursors.get(COMPACTION_SUBSCRIPTION)
    first = ledger.first_available_offset
    start = first if cursor is None else max(table.offset_after(cursor.mark_delete_position), first)
    backlog = ledger.confirmed_end_offset - start
    held = ledger.confirmed_end_offset - table.first_offset
    if backlog <= 0 or held <= 0:
        return 0
    return ledger.total_size * backlog // held


class CompactionService:
    """The compactions of one broker. ``topics`` looks up loaded topics by full name (the broker's registry);
    ``namespace_threshold(namespace)`` gives the namespace policy (None when unset)."""

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        topics: dict[str, Any],
        namespace_threshold: Any,
        *,
        threshold_bytes: int = 0,
        monitor_interval_s: float = 60.0,
    ) -> None:
        if threshold_bytes < 0:
            raise ValueError(
                f"broker_service_compaction_threshold_in_bytes must be >= 0, got {threshold_bytes}"
            )
        if monitor_interval_s <= 0:
            raise ValueError(f"the compaction monitor interval must be > 0, got {monitor_interval_s}")
        self._factory = factory
        self._topics = topics
        self._namespace_threshold = namespace_threshold
        self.threshold_bytes = threshold_bytes
        self.monitor_interval_s = monitor_interval_s
        self._state: dict[str, _TopicCompaction] = {}
        self._monitor: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ manual
    def status(self, name: TopicName) -> dict[str, str]:
        """Pulsar's ``LongRunningProcessStatus`` of the topic's last compaction on this broker."""
        state = self._state.get(name.full_name, _TopicCompaction())
        return {"status": state.status, "lastError": state.last_error}

    def running(self, name: TopicName) -> bool:
        state = self._state.get(name.full_name)
        return state is not None and state.status == "RUNNING"

    def trigger(self, topic: CompactedTopic) -> None:
        """Start compacting ``topic`` (returns at once). Raises CompactionInProgressError while a compaction of
        it runs, NotAllowedError once the service is closed."""
        if self._closed:
            raise NotAllowedError("the broker is shutting down")
        name = topic.name.full_name
        state = self._state.setdefault(name, _TopicCompaction())
        if state.status == "RUNNING":
            raise CompactionInProgressError(f"Compaction already in progress on {name}")
        state.status, state.last_error = "RUNNING", ""
        state.task = asyncio.get_running_loop().create_task(
            self._run(topic, state), name=f"compaction:{name}"
        )

    async def _run(self, topic: CompactedTopic, state: _TopicCompaction) -> None:
        try:
            await compact(topic, self._factory)
        except asyncio.CancelledError:
            state.status, state.last_error = "ERROR", "compaction cancelled (broker shutting down)"
            raise
        except QuasarError as exc:
            log.warning("%s: compaction failed: %s", topic.name.full_name, exc)
            state.status, state.last_error = "ERROR", str(exc)
        except Exception as exc:  # the owned task must not die silently
            log.exception("%s: compaction failed", topic.name.full_name)
            state.status, state.last_error = "ERROR", f"{type(exc).__name__}: {exc}"
        else:
            state.status = "SUCCESS"
        finally:
            state.task = None

    async def wait(self, name: TopicName) -> None:
        """Wait for the running compaction of ``name`` (if any) to end (tests, orderly shutdown)."""
        state = self._state.get(name.full_name)
        if state is not None and state.task is not None:
            await asyncio.gather(state.task, return_exceptions=True)

    # ------------------------------------------------------------------ automatic
    def threshold(self, topic: CompactedTopic) -> int:
        """The topic's compaction threshold in bytes (namespace policy, else the broker's; 0 = off)."""
        try:
            value = self._namespace_threshold(topic.name.namespace_name)
        except QuasarError:
            value = None
        return self.threshold_bytes if value is None else int(value)

    def check_thresholds(self) -> list[str]:
        """One monitor round: trigger every loaded persistent topic past its threshold that is not being
        compacted. Returns the names triggered."""
        triggered = []
        for name, topic in list(self._topics.items()):
            if not topic.is_persistent or topic.ledger.is_closed:
                continue
            threshold = self.threshold(topic)
            if threshold <= 0 or self.running(topic.name):
                continue
            if backlog_bytes_past_horizon(topic) > threshold:
                self.trigger(topic)
                triggered.append(name)
        return triggered

    def start(self) -> None:
        """Start the owned monitor task (idempotent)."""
        if self._monitor is None and not self._closed:
            self._monitor = asyncio.get_running_loop().create_task(
                self._monitor_loop(), name="compaction-monitor"
            )

    async def _monitor_loop(self) -> None:
        while True:
            await asyncio.sleep(self.monitor_interval_s)
            try:
                for name in self.check_thresholds():
                    log.info("%s: backlog past the compaction threshold: compaction triggered", name)
            except Exception:  # the owned task must not die silently; the next round retries
                log.exception("compaction threshold check failed")

    async def close(self) -> None:
        """Cancel the monitor and every running compaction, and wait for them. Idempotent."""
        self._closed = True
        tasks = [s.task for s in self._state.values() if s.task is not None]
        if self._monitor is not None:
            tasks.append(self._monitor)
            self._monitor = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
