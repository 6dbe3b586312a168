"""Idle persistent topics are unloaded from memory (issue 21), after Pulsar's inactive-topic GC.

Pulsar's ``BrokerService.checkGC`` runs every ``brokerDeleteInactiveTopicsFrequencySeconds`` (60) and, with
``brokerDeleteInactiveTopicsEnabled``, DELETES each topic that has been inactive for
``brokerDeleteInactiveTopicsMaxInactiveDurationSeconds`` (no producers, no consumers; with the
``delete_when_no_subscriptions`` mode also no subscriptions), losing its data. Quasar keeps the data and
only UNLOADS the topic: its subscriptions' timers are cancelled, its managed ledger is closed (in-flight adds
finish, every durable cursor is persisted: mark-delete position, individually acknowledged ranges, the
deduplication snapshot) and the topic object, the ledger, its cursors and subscriptions are dropped from
memory. The topic stays listed (admin ``GET /admin/v2/persistent/{tenant}/{namespace}``) and the next
lookup, producer, consumer or admin call loads it again from its durable state, with the same backlog, cursors
and deduplication state (a producer resending an old sequence id after the reload is still deduplicated).

Settings (``BrokerConfig``, Pulsar's names with "unload" for "delete"):
``broker_unload_inactive_topics_enabled`` (true), ``broker_unload_inactive_topics_frequency_seconds`` (60: how
often loaded topics are checked) and ``broker_unload_inactive_topics_max_inactive_duration_seconds`` (300).

A loaded persistent topic is unloaded when, at a check, all of these hold:

- no producer and no consumer on any subscription (readers' subscriptions have consumers while they read);
- ``max_inactive_duration`` has passed since it was loaded or last lost a producer or consumer
  (``PersistentTopic.last_active``, as Pulsar's ``lastActive``);
- no pending work: no add awaiting its flush or replication and no ledger-table write in flight
  (``ManagedLedger.has_pending_work``), no compaction running, no load, unload or deletion of the name in
  progress (the broker's load slot).

Non-persistent topics hold nothing but their producers and subscriptions: one with neither for
``max_inactive_duration`` is dropped, as Pulsar's GC deletes it (the next use creates it afresh; a
non-persistent subscription goes with its last consumer already).

Only loaded topics are looked at, by one owned timer task (cancelled by :meth:`InactiveTopicUnloader.close`);
a topic that is not loaded costs nothing on any timer. Unloading does not give up ownership in a cluster: the
topic's data is local to its broker group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from quasar.broker.compaction.view import compacted_ledger_name
from quasar.broker.non_persistent import NonPersistentTopic
from quasar.broker.topic import PersistentTopic
from quasar.errors import QuasarError

__all__ = ["InactiveTopicUnloader", "is_idle", "non_persistent_is_idle"]

log = logging.getLogger(__name__)


def is_idle(topic: PersistentTopic, now: float, max_inactive_s: float) -> bool:
    """Whether loaded ``topic`` may be unloaded at ``now`` (``time.monotonic()`` s): no producer, no consumer,
    no add or ledger-table write in flight, and idle for ``max_inactive_s`` since ``topic.last_active``."""
    if topic.producers or topic.ledger.has_pending_work or topic.ledger.is_closed:
        return False
    if any(subscription.consumers for subscription in topic.subscriptions.values()):
        return False
    return now - topic.last_active >= max_inactive_s


def non_persistent_is_idle(topic: NonPersistentTopic, now: float, max_inactive_s: float) -> bool:
    """Whether non-persistent ``topic`` may be dropped at ``now``: no producer, no subscription, and idle for
    ``max_inactive_s`` since ``topic.last_active``."""
    return not topic.producers and not topic.subscriptions and now - topic.last_active >= max_inactive_s


class InactiveTopicUnloader:
    """Unloads the broker's idle persistent topics and drops its idle non-persistent ones (module docstring).

    ``topics``: the broker's loaded topics by full name (``BrokerService.topics``, changed in place);
    ``loading``: the broker's pending load, unload and deletion tasks by name (a name there is left alone);
    ``factory()``: the managed-ledger factory now (``close_ledger``); ``compacting(name)`` tells whether a
    compaction of the topic runs. ``clock`` gives ``time.monotonic()`` seconds (replaceable in tests).
    :meth:`configure` sets ``enabled``, ``frequency_s`` and ``max_inactive_s`` before :meth:`start`.
    """

    def __init__(
        self,
        topics: dict[str, Any],
        loading: Mapping[str, asyncio.Task[Any]],
        factory: Callable[[], Any],
        compacting: Callable[[Any], bool],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topics = topics
        self._loading = loading
        self._factory = factory
        self._compacting = compacting
        self.clock = clock
        self.enabled = True
        self.frequency_s = 60.0
        self.max_inactive_s = 300.0
        self.unloaded_total = 0
        """Topics unloaded as idle since the broker started (``GET /admin/v2/broker-stats/load-report``)."""
        self._task: asyncio.Task[None] | None = None
        self._unloads: set[asyncio.Task[None]] = set()

    def configure(self, *, enabled: bool, frequency_s: float, max_inactive_s: float) -> None:
        """Apply the ``broker_unload_inactive_topics_*`` settings; ``ValueError`` when a duration is not
        positive."""
        if frequency_s <= 0 or max_inactive_s <= 0:
            raise ValueError(
                "broker_unload_inactive_topics_frequency_seconds and ..._max_inactive_duration_seconds must be"
                f" positive, got {frequency_s} and {max_inactive_s}"
            )
        self.enabled, self.frequency_s, self.max_inactive_s = enabled, frequency_s, max_inactive_s

    def idle_topics(self) -> list[PersistentTopic]:
        """The loaded persistent topics that may be unloaded now (:func:`is_idle`, and no load, unload,
        deletion or compaction of the name in progress)."""
        now = self.clock()
        return [
            topic
            for name, topic in self._topics.items()
            if isinstance(topic, PersistentTopic)
            and name not in self._loading
            and is_idle(topic, now, self.max_inactive_s)
            and not self._compacting(topic.name)
        ]

    def idle_non_persistent(self) -> list[str]:
        """Names of the loaded non-persistent topics that may be dropped now (:func:`non_persistent_is_idle`)."""
        now = self.clock()
        return [
            name
            for name, topic in self._topics.items()
            if isinstance(topic, NonPersistentTopic)
            and non_persistent_is_idle(topic, now, self.max_inactive_s)
        ]

    def unload_idle(self) -> list[str]:
        """One check: drop every idle topic from the registry at once and start closing its ledger (owned
        tasks; a request for the topic meanwhile loads it again once the close has written its state); drop
        the idle non-persistent topics. Returns the names unloaded."""
        names = self.idle_non_persistent()
        for name in names:
            del self._topics[name]
        for topic in self.idle_topics():
            name = topic.name.full_name
            del self._topics[name]
            topic.close()  # cancels the subscriptions' timers; nobody is attached
            if topic.dedup.enabled:
                topic.dedup.take_snapshot()  # persisted by the close: no replay at the next load
            task = asyncio.get_running_loop().create_task(self._close(topic), name=f"unload-idle:{name}")
            self._unloads.add(task)
            task.add_done_callback(self._unloads.discard)
            names.append(name)
        self.unloaded_total += len(names)
        if names:
            log.info("unloaded %d inactive topics (idle for %.0f s)", len(names), self.max_inactive_s)
            log.debug("unloaded inactive topics: %s", names)
        return names

    async def _close(self, topic: PersistentTopic) -> None:
        name = topic.name.full_name
        try:
            if topic.compacted_view is not None:
                await self._factory().close_ledger(compacted_ledger_name(name))
            await self._factory().close_ledger(name)
        except QuasarError as exc:  # the state written before the failure stays; the next load recovers
            log.warning("%s: closing the inactive topic failed: %s", name, exc)

    def start(self) -> None:
        """Start the owned timer task when enabled (idempotent; again after :meth:`close`, as when a replicated
        broker is promoted once more)."""
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="inactive-topic-unloader")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.frequency_s)
            try:
                self.unload_idle()
            except Exception:  # the owned task must not die silently; the next round retries
                log.exception("inactive topic check failed")

    async def wait_unloaded(self) -> None:
        """Wait for the ledger closes started so far (tests, orderly shutdown)."""
        if self._unloads:
            await asyncio.gather(*list(self._unloads), return_exceptions=True)

    async def close(self) -> None:
        """Cancel the timer task and let the closes in progress finish. Idempotent."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.wait_unloaded()
