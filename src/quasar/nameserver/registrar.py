"""BrokerRegistrar: a broker's registration with every name server (RocketMQ ``BrokerController.registerBrokerAll``
and ``BrokerOuterAPI.registerBrokerAll``, seed 002).

* :meth:`BrokerRegistrar.start` registers with all name servers in parallel at once, then an owned task repeats
  every ``period_s`` (30 s, RocketMQ ``registerNameServerPeriod``). A name server that is down is logged and
  retried sooner (1 s doubling up to ``period_s``); it never fails ``start`` nor stops the others.
* A periodic round first asks each name server for the data version it holds (QUERY_DATA_VERSION, which also
  counts as the heartbeat); only a name server that holds another version, or none (it restarted, or dropped
  the broker), gets the full REGISTER_BROKER with the topic table: unchanged rounds send no topic table.
* :meth:`BrokerRegistrar.topics_changed` bumps the :class:`~quasar.nameserver.messages.DataVersion`
  ``{timestamp, counter}`` and wakes the task, which registers in full with every name server; calls made while
  a round runs, or within ``coalesce_s`` of each other, are coalesced into one more round.
* A slave (``broker_id > 0``) learns its master's address and HA address from the responses; ``on_master`` is
  called with them whenever they change.
* :meth:`BrokerRegistrar.stop` cancels the task, then sends UNREGISTER_BROKER to every name server in parallel,
  bounded by ``timeout_s``, and closes the connections.

The topic table comes from ``topic_configs()``: base topic full name -> {"readQueueNums", "writeQueueNums",
"perm", "topicSysFlag", "order", "partitionCount" (0 = not partitioned), "partitions" (indices held by this
group)}; more keys travel along. Everything runs on the event loop that called :meth:`BrokerRegistrar.start`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from quasar.protocol import RemoteProtocolError

from .client import NameServerClient
from .errors import NameServerError
from .messages import BrokerIdentity, DataVersion

__all__ = ["BrokerIdentity", "BrokerRegistrar"]

log = logging.getLogger(__name__)

TopicConfigs = Callable[[], Mapping[str, Mapping[str, Any]]]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerRegistrar:
    """Keeps one broker registered with every name server (module docstring).

    Args:
        nameservers: ``host:port`` of each name server.
        identity: what the broker registers.
        topic_configs: returns the broker's topic table (shape in the module docstring); called on the loop at
            each full registration.
        period_s: seconds between rounds (RocketMQ: 30).
        timeout_s: bound of one name server's round, and of each UNREGISTER_BROKER at stop, seconds.
        on_master: ``f(master_addr, master_ha_addr)``, called on the loop when a slave learns of a new master.
        heartbeat_timeout_s: silence after which the name servers drop this broker (RocketMQ
            ``BROKER_CHANNEL_EXPIRED_TIME``, 120 s); sent as ``heartbeatTimeoutMillis``.
        coalesce_s: delay before a registration caused by :meth:`topics_changed`, to gather a burst of changes.

    Raises:
        ValueError: no name server, a bad address, or a non-positive period or timeout.
    """

    def __init__(
        self,
        nameservers: Sequence[str],
        identity: BrokerIdentity,
        topic_configs: TopicConfigs,
        *,
        period_s: float = 30.0,
        timeout_s: float = 3.0,
        on_master: Callable[[str, str], None] | None = None,
        heartbeat_timeout_s: float = 120.0,
        coalesce_s: float = 0.05,
    ) -> None:
        if isinstance(nameservers, str):
            raise TypeError("nameservers must be a sequence of 'host:port' strings, not one string")
        if not nameservers:
            raise ValueError("at least one name server is needed")
        for name, value in (
            ("period_s", period_s),
            ("timeout_s", timeout_s),
            ("heartbeat_timeout_s", heartbeat_timeout_s),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if coalesce_s < 0:
            raise ValueError(f"coalesce_s must be >= 0, got {coalesce_s}")
        self.identity = identity
        self.nameservers = tuple(dict.fromkeys(nameservers))
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.heartbeat_timeout_ms = round(heartbeat_timeout_s * 1000)
        self.coalesce_s = coalesce_s
        self._topic_configs = topic_configs
        self._on_master = on_master
        self._clients = {ns: NameServerClient(ns, timeout_s=timeout_s) for ns in self.nameservers}
        self._version = DataVersion(_now_ms(), 0)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._master: tuple[str, str] = ("", "")
        self._stopped = False
        #: Outcome of the last round per name server: True = registered (or heartbeat accepted).
        self.last_results: dict[str, bool] = {}
        #: Rounds completed (start's included).
        self.rounds = 0

    @property
    def data_version(self) -> DataVersion:
        """The current version of the topic table."""
        return self._version

    @property
    def master(self) -> tuple[str, str]:
        """``(master addr, master HA addr)`` last reported to this slave; ``("", "")`` when none."""
        return self._master

    async def start(self) -> None:
        """Register with every name server at once (failures logged), then start the periodic task.

        Raises:
            RuntimeError: already started, or stopped.
        """
        if self._task is not None or self._stopped:
            raise RuntimeError("the registrar was already started")
        await self._round(force=True)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-registrar")

    def topics_changed(self) -> None:
        """The topic table changed: bump the data version and register in full soon (coalesced)."""
        self._version = self._version.next(_now_ms())
        self._changed.set()

    async def stop(self) -> None:
        """Cancel the task, UNREGISTER_BROKER from every name server (bounded by ``timeout_s``), close. Safe to
        call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.gather(*(self._unregister(c) for c in self._clients.values()))
        await asyncio.gather(*(c.aclose() for c in self._clients.values()))

    async def register_now(self) -> bool:
        """Run one full registration round now (as :meth:`start` does); True when every name server took it."""
        return await self._round(force=True)

    # ------------------------------------------------------------------------------------------ rounds --

    async def _run(self) -> None:
        delay = self.period_s
        retry = min(1.0, self.period_s)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._changed.wait()
            force = self._changed.is_set()
            if force and self.coalesce_s:
                await asyncio.sleep(self.coalesce_s)
            self._changed.clear()
            if await self._round(force=force):
                delay = self.period_s
                retry = min(1.0, self.period_s)
            else:
                delay = retry
                retry = min(retry * 2, self.period_s)

    async def _round(self, *, force: bool) -> bool:
        version = self._version
        configs: list[Mapping[str, Mapping[str, Any]]] = []

        def table() -> Mapping[str, Mapping[str, Any]]:
            if not configs:
                configs.append(self._topic_configs())
            return configs[0]

        results = await asyncio.gather(
            *(self._register_one(ns, version, table, force) for ns in self.nameservers)
        )
        self.last_results = dict(zip(self.nameservers, results, strict=True))
        self.rounds += 1
        return all(results)

    async def _register_one(
        self, nameserver: str, version: DataVersion, table: TopicConfigs, force: bool
    ) -> bool:
        client = self._clients[nameserver]
        try:
            async with asyncio.timeout(self.timeout_s):
                if not force:
                    changed, master, ha = await client.query_data_version(self.identity, version)
                    if not changed:
                        self._note_master(master, ha)
                        return True
                master, ha = await client.register_broker(
                    self.identity, table(), version, heartbeat_timeout_ms=self.heartbeat_timeout_ms
                )
        except (NameServerError, RemoteProtocolError, TimeoutError, OSError) as exc:
            log.warning("registration with name server %s failed: %s", nameserver, exc)
            return False
        except Exception:  # topic_configs() or a bug: logged, the next round tries again
            log.exception("registration with name server %s failed", nameserver)
            return False
        self._note_master(master, ha)
        return True

    def _note_master(self, master: str, ha: str) -> None:
        if not master or (master, ha) == self._master:
            return
        self._master = (master, ha)
        log.info("broker group %s: master at %s (HA %s)", self.identity.broker_name, master, ha or "none")
        if self._on_master is not None:
            try:
                self._on_master(master, ha)
            except Exception:  # the callback's error must not stop the registrations
                log.exception("on_master callback failed")

    async def _unregister(self, client: NameServerClient) -> None:
        try:
            await client.unregister_broker(self.identity, timeout_s=self.timeout_s)
        except (NameServerError, RemoteProtocolError, TimeoutError, OSError) as exc:
            log.info("unregistering from name server %s failed: %s", client.address, exc)
