"""Composition root of a standalone broker: storage, managed ledgers, BrokerService, listeners.

This is the one broker module that imports ``quasar.storage`` (DESIGN.md): it builds the MessageStore and
picks the metadata backend (the sqlite ``MetadataStore`` at ``<data_dir>/metadata.db``, upgraded from the
previous release's layout by ``metadata_migration``), hands both to the managed-ledger factory, and serves the
Pulsar binary protocol and the admin REST API on one event loop, watched by a loop-lag monitor. With
``broker_service_port_tls`` / ``web_service_port_tls`` set it also serves both over TLS (TLS from the first
byte, the same ServerCnx and admin app), through ``TlsListeners``, which owns the certificate check task.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from quasar.broker.admin import build_admin_app, replication_routes
from quasar.broker.admin.broker_stats_routes import ROCKETMQ_STATS
from quasar.broker.admin.query import MAX_UNCOMPRESSED, MESSAGE_STORE, pulsar_entry_keys
from quasar.broker.auth import build_broker_security
from quasar.broker.broker_service import BrokerService
from quasar.broker.cluster.member import ClusterMember
from quasar.broker.cluster.model import BrokerInfo, parse_advertised_listeners
from quasar.broker.config import BrokerConfig
from quasar.broker.connection_limits import ConnectionController
from quasar.broker.loop_lag import LoopLagMonitor, add_loop_lag_route
from quasar.broker.metadata_migration import migrate_legacy_metadata
from quasar.broker.metrics import (
    BrokerMetricsCollector,
    StatsUpdater,
    TopicMetricsCollector,
    add_metrics_route,
    new_registry,
)
from quasar.broker.policies import BacklogQuota, PolicyDefaults
from quasar.broker.replication_port import ReplicationPort
from quasar.broker.schema import SchemaCompatibilityStrategy, SchemaDefaults
from quasar.broker.server_cnx import ServerCnx
from quasar.broker.subscription import SubscriptionOptions
from quasar.broker.tls_listeners import TlsListeners
from quasar.broker.topic_stats import LatencyBuckets
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata import MetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.metadata.stores import open_metadata_store
from quasar.storage.message_store import FlushDiskType, MessageStore, StoreConfig
from quasar.storage.port import MessageStorePort

if TYPE_CHECKING:
    from quasar.broker.rocketmq.server import RocketMQListener

log = logging.getLogger(__name__)

_UNLIMITED_OPEN_FILES_CAP = 1_048_576
"""Soft limit asked for when the hard RLIMIT_NOFILE is unlimited (Linux's default ``fs.nr_open``)."""


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit and log both; returns (soft, hard) as
    they are afterwards. The store sizes its budget of mapped consume queue files from the soft limit it finds
    (``max_open_consume_queue_files`` = 0: the limit minus 512, one descriptor per mapped file), so a higher
    limit keeps more queues mapped; running out is a transient "too many open files" refusal, never a full
    disk. An unlimited hard limit is capped at 1,048,576; a kernel that refuses the change (ValueError /
    OSError) leaves the limits as they were, with a warning."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_OPEN_FILES_CAP if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.info("open files limit: soft %s, hard %s (unchanged)", soft, hard)
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("open files limit: soft %s, hard %s; cannot raise the soft limit: %s", soft, hard, exc)
        return soft, hard
    log.info("open files limit: soft %s (raised from %s), hard %s", target, soft, hard)
    return target, hard


def _store_config(config: BrokerConfig, root_dir: Path) -> StoreConfig:
    """The message store's settings from the broker's (same names; ValueError on a bad value)."""
    return StoreConfig(
        root_dir=root_dir,
        commit_log_file_size=config.commit_log_file_size,
        consume_queue_file_size=config.mapped_file_size_consume_queue,
        flush_disk_type=FlushDiskType[config.flush_disk_type],
        sync_flush_timeout_ms=config.sync_flush_timeout_ms,
        flush_interval_ms=config.flush_interval_commit_log_ms,
        flush_least_pages=config.flush_commit_log_least_pages,
        flush_thorough_interval_ms=config.flush_commit_log_thorough_interval_ms,
        flush_consume_queue_interval_ms=config.flush_interval_consume_queue_ms,
        flush_consume_queue_least_pages=config.flush_consume_queue_least_pages,
        flush_consume_queue_thorough_interval_ms=config.flush_consume_queue_thorough_interval_ms,
        check_crc_on_recover=config.check_crc_on_recover,
        max_message_size=config.max_message_size + 64 * 1024,
        message_index_enable=config.message_index_enable,
        max_hash_slot_num=config.max_hash_slot_num,
        max_index_num=config.max_index_num,
        warm_mapped_file_enable=config.warm_mapped_file_enable,
        file_reserved_time_h=config.file_reserved_time_h,
        delete_when=config.delete_when,
        disk_max_used_space_ratio=config.disk_max_used_space_ratio,
        disk_space_clean_forcibly_ratio=config.disk_space_clean_forcibly_ratio,
        disk_space_warning_level_ratio=config.disk_space_warning_level_ratio,
        clean_resource_interval_ms=config.clean_resource_interval_ms,
        delete_file_batch_max=config.delete_file_batch_max,
        clean_file_forcibly_enable=config.clean_file_forcibly_enable,
        max_open_consume_queue_files=config.max_open_consume_queue_files,
    )


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), SO_REUSEADDR set, not yet served."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class BrokerApp:
    """A running broker: standalone, or a cluster member when ``config.broker_name`` is set. ``start()``
    opens storage (recovering it), joins the cluster, and serves both listeners; ``stop()`` leaves the
    cluster, closes connections, persists cursors, flushes and checkpoints the store.

    Metadata: ``<data_dir>/metadata.db`` (sqlite) always holds this broker's own ledger and cursor state;
    the admin metadata (tenants, namespaces, policies, partitioned topics) and, for a cluster, placement and
    membership live in the store of ``config.metadata_store_url`` (etcd), or in the same sqlite database
    when none is given.

    Replicated (``replication`` given, ``quasar.replication.node.ReplicaNode``): the store opens in replica
    mode and the broker serves as a slave (no topic) until replication calls :meth:`serve_as_master`; the
    managed ledgers use the ports replication returns (replicated store, journaled metadata).
    """

    def __init__(self, config: BrokerConfig, *, replication: ReplicationPort | None = None) -> None:
        self.config = config
        self.replication = replication
        self._ledger_store: MessageStorePort | None = None
        self._ledger_metadata: MetadataStore | None = None
        self._role_lock = asyncio.Lock()
        self.store: MessageStore | None = None
        self.metadata: SqliteMetadataStore | None = None
        self.cluster_metadata: MetadataStore | None = None
        self.member: ClusterMember | None = None
        self.factory: ManagedLedgerFactory | None = None
        self.service: BrokerService | None = None
        self.connections: set[ServerCnx] = set()
        self._server: asyncio.base_events.Server | None = None
        self._admin_runner: web.AppRunner | None = None
        self._policy_task: asyncio.Task[None] | None = None
        self.loop_lag = LoopLagMonitor()
        self.stats_updater: StatsUpdater | None = None  # topic rates every stats_update_frequency_in_secs
        self.flush_latency = LatencyBuckets()  # group commit fdatasync times, for /metrics
        self.port = 0
        self.admin_port = 0
        self.tls: TlsListeners | None = None  # the TLS listeners, when configured
        self.rocketmq: RocketMQListener | None = None  # the RocketMQ gRPC endpoint, when on

    async def _policy_loop(self, service: BrokerService) -> None:
        """Owned task: message TTL every ``message_expiry_check_interval_s``, backlog quotas every
        ``backlog_quota_check_interval_s``."""
        config = self.config
        tick = min(config.message_expiry_check_interval_s, config.backlog_quota_check_interval_s)
        next_ttl = next_quota = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            ttl, quota = now >= next_ttl, now >= next_quota
            if ttl:
                next_ttl = now + config.message_expiry_check_interval_s
            if quota:
                next_quota = now + config.backlog_quota_check_interval_s
            try:
                service.run_policy_checks(int(time.time() * 1000), ttl=ttl, backlog=quota)
            except Exception:  # the owned task must not die silently
                log.exception("policy checks failed")

    @property
    def advertised_address(self) -> str:
        """The host put in this broker's URLs: ``advertised_address``, else ``host`` (the machine's name
        when ``host`` is a wildcard address)."""
        config = self.config
        if config.advertised_address:
            return config.advertised_address
        return socket.getfqdn() if config.host in ("0.0.0.0", "::", "") else config.host

    @property
    def service_url(self) -> str:
        """This broker's default ``pulsar://`` URL: the internal listener's when one is configured."""
        config = self.config
        if config.internal_listener_name:
            url = parse_advertised_listeners(config.advertised_listeners)[config.internal_listener_name]
            if "pulsar" in url:
                return url["pulsar"]
        return f"pulsar://{self.advertised_address}:{self.port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{self.advertised_address}:{self.admin_port}"

    @property
    def service_url_tls(self) -> str:
        """This broker's ``pulsar+ssl://`` URL (the internal listener's when it has one); "" without
        ``broker_service_port_tls``."""
        config = self.config
        if config.internal_listener_name:
            url = parse_advertised_listeners(config.advertised_listeners)[config.internal_listener_name]
            if "pulsar+ssl" in url:
                return url["pulsar+ssl"]
        if config.broker_service_port_tls is None:
            return ""
        return f"pulsar+ssl://{self.advertised_address}:{self.tls.port if self.tls else 0}"

    @property
    def web_service_url_tls(self) -> str:
        """This broker's ``https://`` admin URL; "" without ``web_service_port_tls``."""
        if self.config.web_service_port_tls is None:
            return ""
        return f"https://{self.advertised_address}:{self.tls.admin_port if self.tls else 0}"

    def broker_info(self) -> BrokerInfo:
        """What this broker registers in the cluster (its group, id and URLs)."""
        config = self.config
        return BrokerInfo(
            cluster=config.cluster_name,
            group=config.broker_name,
            broker_id=config.broker_id,
            service_url=self.service_url,
            web_service_url=self.web_service_url,
            service_url_tls=self.service_url_tls,
            web_service_url_tls=self.web_service_url_tls,
            rocketmq_address=self.rocketmq_address,
            listeners=parse_advertised_listeners(config.advertised_listeners),
            role="slave" if self.replication is not None else "",
            ha_address=self.replication.ha_address if self.replication is not None else "",
        )

    def _ledger_config(self) -> ManagedLedgerConfig:
        config = self.config
        return ManagedLedgerConfig(
            max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
            min_ledger_rollover_time_ms=config.managed_ledger_min_ledger_rollover_time_ms,
            max_size_per_ledger_bytes=config.managed_ledger_max_size_per_ledger_mb * 1024 * 1024,
            max_ledger_rollover_time_ms=config.managed_ledger_max_ledger_rollover_time_ms,
            cursor_persist_interval_ms=config.managed_ledger_cursor_persist_interval_ms,
        )

    async def start(self) -> None:
        """Open (and recover) the store in an executor, start flush/reput/clean services and the ledger
        factory, then bind the Pulsar listener and the admin API (port 0 = a free port; ``port``/``admin_port``
        hold the bound ones), and the TLS listeners when configured (``tls.port``/``tls.admin_port``). Raises
        TlsConfigError when a certificate, key or trust file cannot be used (checked first), OSError when a port
        cannot be bound, StorageError when the store cannot load."""
        config = self.config
        self.tls = TlsListeners(config) if config.tls_enabled else None
        raise_open_files_limit()
        data_dir = Path(config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        store = MessageStore(
            _store_config(config, data_dir / "store"),
            key_extractor=functools.partial(pulsar_entry_keys, max_uncompressed_size=config.max_message_size),
        )
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, store.open)
        self.store = store
        if self.replication is not None:
            store.set_replica_mode(
                True
            )  # a slave until elected: nothing is written before the epoch is known
        await store.start()
        self.metadata = await SqliteMetadataStore.open(data_dir / "metadata.db")
        await migrate_legacy_metadata(self.metadata)
        admin_metadata: MetadataStore = self.metadata
        if config.metadata_store_url and config.metadata_store_url != "sqlite":
            self.cluster_metadata = await open_metadata_store(
                config.metadata_store_url, default_sqlite_path=data_dir / "metadata.db"
            )
            admin_metadata = self.cluster_metadata
        ledger_store: MessageStorePort = store
        ledger_metadata: MetadataStore = self.metadata
        if self.replication is not None:
            ledger_store, ledger_metadata = await self.replication.open(store, self.metadata, admin_metadata)
        self._ledger_store, self._ledger_metadata = ledger_store, ledger_metadata
        self.factory = ManagedLedgerFactory(ledger_store, ledger_metadata, self._ledger_config())
        if self.replication is None:
            await self.factory.start()
        service = BrokerService(
            self.factory,
            admin_metadata,
            cluster_name=config.cluster_name,
            subscription_options=SubscriptionOptions(
                max_read_batch_size=config.dispatcher_max_read_batch_size,
                max_unacked_messages_per_consumer=config.max_unacked_messages_per_consumer,
                max_unacked_messages_per_subscription=config.max_unacked_messages_per_subscription,
                key_shared_use_consistent_hashing=config.subscription_key_shared_use_consistent_hashing,
                key_shared_replica_points=config.subscription_key_shared_consistent_hashing_replica_points,
                delayed_delivery_enabled=config.delayed_delivery_enabled,
                delayed_delivery_tick_time_ms=config.delayed_delivery_tick_time_ms,
                delayed_delivery_deliver_at_time_strict=config.is_delayed_delivery_deliver_at_time_strict,
            ),
            deduplication_enabled=config.broker_deduplication_enabled,
            deduplication_entries_interval=config.broker_deduplication_entries_interval,
            deduplication_max_producers=config.broker_deduplication_max_number_of_producers,
            max_producers_per_topic=config.max_producers_per_topic,
            max_consumers_per_topic=config.max_consumers_per_topic,
            max_consumers_per_subscription=config.max_consumers_per_subscription,
            max_subscriptions_per_topic=config.max_subscriptions_per_topic,
            max_topics_per_namespace=config.max_topics_per_namespace,
            max_num_partitions_per_partitioned_topic=config.max_num_partitions_per_partitioned_topic,
            schema_defaults=SchemaDefaults(
                SchemaCompatibilityStrategy.parse(config.schema_compatibility_strategy),
                config.is_allow_auto_update_schema_enabled,
                config.is_schema_validation_enforced,
            ),
            defaults=PolicyDefaults(
                retention_time_minutes=config.default_retention_time_in_minutes,
                retention_size_mb=config.default_retention_size_in_mb,
                message_ttl_s=config.ttl_duration_default_in_seconds,
                backlog_quota=BacklogQuota(
                    config.backlog_quota_default_limit_bytes,
                    config.backlog_quota_default_limit_second,
                    config.backlog_quota_default_retention_policy,
                ),
            ),
        )
        service.security = build_broker_security(config, service.resources)
        await service.bootstrap()
        service.compaction.threshold_bytes = config.broker_service_compaction_threshold_in_bytes
        service.compaction.monitor_interval_s = config.broker_service_compaction_monitor_interval_in_seconds
        service.compaction.start()
        service.inactive_topics.configure(
            enabled=config.broker_unload_inactive_topics_enabled,
            frequency_s=config.broker_unload_inactive_topics_frequency_seconds,
            max_inactive_s=config.broker_unload_inactive_topics_max_inactive_duration_seconds,
        )
        service.inactive_topics.start()
        self._policy_task = asyncio.create_task(self._policy_loop(service), name="broker-policy-checks")
        self.service = service
        log.info("storage opened in %.1f ms", (time.monotonic() - started) * 1000)

        # bind both listeners first (their URLs are registered in the cluster), serve once a member
        pulsar_socket = _bind(config.host, config.port)
        admin_socket = _bind(config.host, config.admin_port)
        self.port = pulsar_socket.getsockname()[1]
        self.admin_port = admin_socket.getsockname()[1]
        if self.tls is not None:
            self.tls.bind(_bind)
        if config.rocketmq_enabled:  # bound now: its address is registered in the cluster; serves at the end
            self._bind_rocketmq(service)
        service.broker_service_url = self.service_url
        service.web_service_url = self.web_service_url
        admission = ConnectionController(config.broker_max_connections, config.broker_max_connections_per_ip)
        service.broker_service_url_tls = self.service_url_tls
        service.web_service_url_tls = self.web_service_url_tls
        self._server = await loop.create_server(
            lambda: ServerCnx(service, config, self.connections, admission),
            sock=pulsar_socket,
            start_serving=False,
        )
        if config.broker_name:
            factory = self.factory
            self.member = ClusterMember(
                admin_metadata,
                self.broker_info(),
                resources=service.resources,
                has_local_data=factory.exists,
                partition_count=service.partitions,
                messages_in_total=service.messages_in_total,
                report_interval_s=config.load_report_interval_s,
            )
            await self.member.start()
            service.ownership = self.member.ownership
        await self._server.start_serving()
        if self.tls is not None:
            await self.tls.serve(lambda: ServerCnx(service, config, self.connections))

        admin_app = build_admin_app(
            service,
            max_request_size=config.http_max_request_size,
            authenticate_metrics_endpoint=config.authenticate_metrics_endpoint,
        )
        replication_routes.register(admin_app, self.replication)
        self._add_metrics(admin_app, service, store)
        service.write_refusal = functools.partial(
            _write_refusal, store, self.replication.write_refusal if self.replication is not None else None
        )
        admin_app[MAX_UNCOMPRESSED] = config.max_message_size
        admin_app[MESSAGE_STORE] = store  # for the query-by-key handler (broker/admin/query.py)
        if self.rocketmq is not None:
            admin_app[ROCKETMQ_STATS] = self.rocketmq.stats
        add_loop_lag_route(admin_app, self.loop_lag)
        self.loop_lag.start()
        self._admin_runner = web.AppRunner(admin_app, access_log=None)
        await self._admin_runner.setup()
        await web.SockSite(self._admin_runner, admin_socket).start()
        if self.tls is not None:
            await self.tls.serve_admin(self._admin_runner)
        if self.rocketmq is not None:
            await self.rocketmq.start()
        if self.replication is not None:
            await self.replication.start(self)

    def _bind_rocketmq(self, service: BrokerService) -> None:
        """Bind RocketMQ's gRPC API on ``host:rocketmq_port`` (``quasar.broker.rocketmq``, imported only when
        on: it loads grpc and the RocketMQ stubs); :meth:`start` serves it once the broker is ready."""
        from quasar.broker.rocketmq.context import RocketMQSettings
        from quasar.broker.rocketmq.server import RocketMQListener

        config = self.config
        settings = RocketMQSettings(
            max_body_size=config.rocketmq_body_limit(),
            broker_name=config.broker_name or config.cluster_name,
            advertised_host=config.advertised_address,
            host_name=self.advertised_address,
            tls=config.tls_settings() if config.rocketmq_port_tls is not None else None,
            tls_port=config.rocketmq_port_tls,
            transaction_check_interval_s=config.transaction_check_interval / 1000,
            transaction_timeout_s=config.transaction_time_out / 1000,
            transaction_check_max=config.transaction_check_max,
            client_idle_timeout_s=config.rocketmq_channel_expired_timeout / 1000,
            max_clients=config.rocketmq_max_clients,
        )
        self.rocketmq = RocketMQListener(service, settings, config.host, config.rocketmq_port)
        self.rocketmq.bind()

    async def _stop_rocketmq(self) -> None:
        listener, self.rocketmq = self.rocketmq, None
        if listener is not None:
            await listener.stop()

    @property
    def rocketmq_address(self) -> str:
        """``host:port`` of the RocketMQ gRPC endpoint (the advertised host); "" when it is off."""
        return self.rocketmq.address if self.rocketmq is not None else ""

    def _add_metrics(self, admin_app: web.Application, service: BrokerService, store: MessageStore) -> None:
        """``GET /metrics`` (``quasar.broker.metrics``) on a registry of this broker's own, and the owned
        task computing the topic rates."""
        config = self.config
        store.flusher.latency_observer = self.flush_latency.observe
        self.stats_updater = StatsUpdater(service, config.stats_update_frequency_in_secs)
        self.stats_updater.start()
        registry = new_registry(
            TopicMetricsCollector(service, topic_level=config.expose_topic_level_metrics_in_prometheus),
            BrokerMetricsCollector(
                config.cluster_name,
                store=store,
                flush_latency=self.flush_latency,
                replication_status=self.replication.status if self.replication is not None else None,
                loop_lag=self.loop_lag,
            ),
        )
        add_metrics_route(admin_app, registry)

    async def _stop_stats_updater(self) -> None:
        updater, self.stats_updater = self.stats_updater, None
        if updater is not None:
            await updater.stop()

    # ------------------------------------------------------------------ replication roles
    async def serve_as_master(self, epoch: int) -> None:
        """Replication elected this broker master of its group under ``epoch`` (its store accepts puts now):
        open the managed ledgers and register as master, so lookups send clients here. Raises the ledger's
        MetadataError or the metadata port's errors."""
        async with self._role_lock:
            assert self.service is not None and self.factory is not None
            self.service.read_only = None
            await self.factory.start()
            self.service.inactive_topics.start()  # stopped by a step-down (serve_as_slave)
            if self.member is not None:
                await self.member.membership.set_role("master", epoch)
                for callback in self.member.on_topics_changed:
                    callback()
            log.info("serving as the master of broker group %s (epoch %d)", self.config.broker_name, epoch)

    async def serve_slave_reads(self, epoch: int) -> None:
        """The group has no master and replication cannot elect one (no in-sync slave): serve its topics'
        consumers and readers from this slave's copy (RocketMQ's slave read) and refuse publishing and new
        topics with a clear error, until a master is back (:meth:`serve_as_slave`) or this broker is elected."""
        async with self._role_lock:
            assert self.service is not None and self.factory is not None
            group = self.config.broker_name
            self.service.read_only = (
                f"broker group {group} has no master and none can be elected now: publishing is refused"
                " until one is back; its slave serves reads"
            )
            await self.factory.start()
            self.service.inactive_topics.start()
            if self.member is not None:
                try:
                    await self.member.membership.set_role("slave", epoch, slave_read=True)
                except Exception as exc:  # noqa: BLE001  # the periodic report registers it later
                    log.warning("slave-read registration not written yet: %s", exc)
            log.warning("broker group %s has no master: this slave serves reads (publishing refused)", group)

    async def serve_as_slave(self, epoch: int) -> None:
        """This broker is (again) a slave of its group under ``epoch``: register as slave, disconnect every
        client (they look their topics up again and reach the master), close the topics and the managed
        ledgers, and keep a fresh, unstarted factory for a later promotion."""
        async with self._role_lock:
            assert self.service is not None and self.factory is not None
            if self.member is not None:
                try:
                    await self.member.membership.set_role("slave", epoch)
                except Exception as exc:  # noqa: BLE001  # the periodic report registers the new role later
                    log.warning("slave registration not written yet: %s", exc)
                for callback in self.member.on_topics_changed:
                    callback()
            for cnx in list(self.connections):
                cnx.close("this broker is no longer the master of its broker group")
            await self.service.close()
            self.service.topics.clear()
            self.service.read_only = None
            old = self.factory
            assert self._ledger_store is not None and self._ledger_metadata is not None
            self.factory = ManagedLedgerFactory(
                self._ledger_store, self._ledger_metadata, self._ledger_config()
            )
            self.service.factory = self.factory
            try:
                await old.close()
            except Exception:  # logged; the old ledgers are dropped either way
                log.exception("closing the managed ledgers after the step-down failed")
            log.info("serving as a slave of broker group %s (epoch %d)", self.config.broker_name, epoch)

    async def stop(self) -> None:
        """Close listeners and connections, persist cursor state, flush and checkpoint storage."""
        if self._policy_task is not None:
            self._policy_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._policy_task
            self._policy_task = None
        await self._stop_rocketmq()
        if self._server is not None:
            self._server.close()
        if self.tls is not None:
            await self.tls.close()
        for cnx in list(self.connections):
            cnx.close("broker shutting down")
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
        if self.tls is not None:
            await self.tls.wait_closed()
        # let in-flight persistence finish so every sent receipt stays true
        await asyncio.sleep(0)
        await self.loop_lag.stop()
        await self._stop_stats_updater()
        if self.service is not None:
            await self.service.close()
        if self.factory is not None:
            await self.factory.close()  # the last cursor states are journaled to the slaves too
        if self.replication is not None:
            await self.replication.stop()  # resign: an in-sync slave takes over at once
        if self.member is not None:
            await self.member.stop()
        if self.store is not None:
            await self.store.close()
        if self.metadata is not None:
            await self.metadata.close()
        if self.cluster_metadata is not None:
            await self.cluster_metadata.close()


def _write_refusal(store: MessageStore, replication: Callable[[], str | None] | None) -> str | None:
    """Why a new producer is refused now (``BrokerService.write_refusal``; answered with a retryable
    ServiceNotReady): the disk guard is on, the store latched after an I/O failure, or replication's reason;
    None when producers are welcome."""
    if store.disk_full:
        return (
            "disk full: the broker refuses messages until disk use is below disk_space_warning_level_ratio "
            "(retry later)"
        )
    if not store.writable:
        return "the message store refuses writes after an I/O failure until the broker restarts"
    return replication() if replication is not None else None
