"""Broker configuration: one frozen dataclass, loadable from a TOML file.

Names follow Pulsar's ``broker.conf`` in snake_case where the setting exists there; units are in the names.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quasar.broker.cluster.model import parse_advertised_listeners
from quasar.protocol.errors import InvalidTopicNameError
from quasar.protocol.topic_name import check_named_entity
from quasar.security import TlsSettings

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # bytes; Pulsar's maxMessageSize default


_POSITIVE = (
    "max_message_size",
    "managed_ledger_max_entries_per_ledger",
    "broker_deduplication_entries_interval",
    "broker_deduplication_max_number_of_producers",
    "delayed_delivery_tick_time_ms",
    "message_expiry_check_interval_s",
    "backlog_quota_check_interval_s",
    "max_concurrent_non_persistent_message_per_connection",
    "subscription_key_shared_consistent_hashing_replica_points",
    "dispatcher_max_read_batch_size",
    "register_name_server_period_s",
    "load_report_interval_s",
    "max_pending_publish_requests_per_connection",
    "http_max_request_size",
    "broker_service_compaction_monitor_interval_in_seconds",
    "broker_unload_inactive_topics_frequency_seconds",
    "broker_unload_inactive_topics_max_inactive_duration_seconds",
    "max_name_length",
    "max_property_length",
    "max_properties_per_command",
    "stats_update_frequency_in_secs",
)
"""Settings that must be > 0."""
_NON_NEGATIVE = (
    "max_unacked_messages_per_consumer",
    "max_unacked_messages_per_subscription",
    "max_producers_per_topic",
    "max_consumers_per_topic",
    "max_consumers_per_subscription",
    "broker_service_compaction_threshold_in_bytes",
    "gc_gen0_threshold",
    "broker_id",
    "broker_max_connections",
    "broker_max_connections_per_ip",
    "max_subscriptions_per_topic",
    "max_topics_per_namespace",
    "max_num_partitions_per_partitioned_topic",
)
"""Settings that must be >= 0 (0: unlimited, disabled or the default, as each says)."""
_SCHEMA_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                      "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")  # fmt: skip
"""Pulsar's SchemaCompatibilityStrategy values a broker default may take (not UNDEFINED)."""


ROCKETMQ_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""RocketMQ's ``maxMessageSize`` default (4 MiB)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Everything ``quasar standalone`` needs.

    - ``host``/``port``: the Pulsar binary listener (``pulsar://host:port``); port 0 binds a free port.
    - ``admin_port``: the admin REST listener on the same host; 0 binds a free port.
    - ``data_dir``: root of the commit log, consume queues and the metadata database.
    - ``max_message_size``: bytes of metadata + payload accepted per entry, advertised in CONNECTED
      (Pulsar default 5 MiB).
    - ``commit_log_file_size``: bytes per commit log segment (RocketMQ default 1 GiB).
    - storage settings from ``mapped_file_size_consume_queue`` to ``clean_file_forcibly_enable``: RocketMQ's
      store settings, documented in README.md "Storage configuration".
    - ``flush_disk_type``: ``"SYNC_FLUSH"`` (receipt after fsync, default) or ``"ASYNC_FLUSH"``.
    - ``managed_ledger_max_entries_per_ledger`` / ``managed_ledger_min_ledger_rollover_time_ms``: ledger
      rollover (Pulsar defaults 50,000 entries and 10 min).
    - ``dispatcher_max_read_batch_size``: entries read per dispatch round (Pulsar's dispatcherMaxReadBatchSize 100).
    - ``keep_alive_interval_s``: seconds between broker PINGs on an idle connection (Pulsar 30 s).
    - ``broker_deduplication_enabled``: deduplication when neither the namespace nor the topic sets it
      (Pulsar ``brokerDeduplicationEnabled=false``); ``broker_deduplication_entries_interval``: persisted
      entries between two dedup snapshots (1000); ``broker_deduplication_max_number_of_producers`` (10000).
    - ``max_unacked_messages_per_consumer`` / ``max_unacked_messages_per_subscription``: Shared and
      Key_Shared dispatch stops at this many unacknowledged messages and resumes at half (Pulsar 50,000 /
      200,000; 0 disables).
    - ``subscription_key_shared_use_consistent_hashing`` (true) and
      ``subscription_key_shared_consistent_hashing_replica_points`` (100): Key_Shared AUTO_SPLIT selector.
    - ``managed_ledger_max_size_per_ledger_mb`` (2048) / ``managed_ledger_max_ledger_rollover_time_ms``
      (240 min): the other rollover limits.
    - ``default_retention_time_in_minutes`` / ``default_retention_size_in_mb`` (0 / 0: consumed ledgers are
      trimmed; -1 = unlimited), ``ttl_duration_default_in_seconds`` (0 = off),
      ``backlog_quota_default_limit_bytes`` / ``_second`` (-1 = unlimited) with
      ``backlog_quota_default_retention_policy``: defaults of the namespace/topic policies.
    - ``message_expiry_check_interval_s`` (Pulsar 5 min) / ``backlog_quota_check_interval_s`` (60 s): how
      often TTL and backlog quotas are enforced.
    - ``broker_service_compaction_threshold_in_bytes`` (0 = off) / ``..._monitor_interval_in_seconds`` (60):
      a topic whose backlog past its compaction horizon exceeds the threshold (the namespace policy
      ``compactionThreshold`` wins) is compacted; checked at that interval (``quasar.broker.compaction``).
    - ``broker_unload_inactive_topics_enabled`` (true), ``..._frequency_seconds`` (60),
      ``..._max_inactive_duration_seconds`` (300): a persistent topic with no producer, no consumer and no
      pending work for that long is unloaded from memory, keeping its data, cursors and deduplication state,
      and loaded again on next use (Pulsar's ``brokerDeleteInactiveTopics*`` settings, which DELETE such
      topics); a non-persistent topic with no producer and no subscription that long is dropped, as in
      Pulsar (``quasar.broker.inactive_topics``).
    - ``max_producers_per_topic`` / ``max_consumers_per_topic`` / ``max_consumers_per_subscription``
      (10,000 each; Pulsar 0 = unlimited, which 0 still means): ProducerBusy "Topic reached max producers
      limit" / ConsumerBusy "Topic reached max consumers limit" / "Subscription reached max consumers limit".
    - ``delayed_delivery_enabled`` / ``delayed_delivery_tick_time_ms`` (1000) /
      ``is_delayed_delivery_deliver_at_time_strict`` (false: up to one tick early): Shared delayed delivery.
    - ``max_concurrent_non_persistent_message_per_connection``: non-persistent publishes in flight per
      connection; beyond it a publish is dropped with receipt (-1, -1) (Pulsar 1000).
    - ``gc_gen0_threshold`` (50,000; 0 keeps CPython's 700) and ``gc_freeze_after_start`` (true): the broker
      process's cyclic garbage collector (``quasar standalone`` only; see ``quasar.broker.gc_tuning``).
    - cluster membership (``quasar broker``; docs/cluster.md): ``cluster_name``; ``broker_name`` the broker
      group (RocketMQ brokerName; "" = a standalone broker, not a cluster member); ``broker_id`` (0 = the
      group's master, > 0 = a slave); ``metadata_store_url`` (``etcd://h:p[,h:p][/prefix]``; "" = the
      embedded sqlite database, which only one broker can use); ``nameservers`` (``h:p;h:p``, RocketMQ
      namesrvAddr; "" = none); ``advertised_address`` (host put in this broker's URLs; "" = ``host``, or
      the machine's name when ``host`` is a wildcard); ``advertised_listeners`` (Pulsar's
      ``name:pulsar://h:p,name:pulsar+ssl://h:p``) with ``internal_listener_name`` (whose URL becomes this
      broker's default service URL); ``register_name_server_period_s`` (30 s, RocketMQ
      registerNameServerPeriod, used within 10..60 s); ``load_report_interval_s`` (5 s).
    - replication (``quasar.replication``, docs/replication.md; RocketMQ's names): ``broker_role``
      (ASYNC_MASTER | SYNC_MASTER | SLAVE; "" = no replication) is the role a broker starts in: the group's
      first master bootstraps it, later the role follows the group's elected leader in etcd;
      ``promoted_role`` ("" = as the master it followed last, SYNC_MASTER when it saw none) is how a SLAVE
      serves once elected; ``ha_port`` (10912; 0 = free) the HA listener, ``ha_advertised_address``
      (``host:port`` the slaves dial, when a NAT or proxy sits between; "" = advertised host and
      ``ha_port``); ``ha_send_heartbeat_interval_s`` (5), ``ha_housekeeping_interval_s`` (20),
      ``ha_transfer_batch_size`` (32 KiB), ``ha_max_gap_not_in_sync`` (256 MiB),
      ``ha_max_time_slave_not_catchup_s`` (15), ``slave_timeout_s`` (3): RocketMQ's HA defaults;
      ``in_sync_replicas`` (0 = 2 for SYNC_MASTER, 1 otherwise; counting the master),
      ``min_in_sync_replicas`` (1), ``enable_auto_in_sync_replicas`` (false): CommitLog#handleHA's
      needAckNums; ``enable_elect_unclean_master`` (false: only an in-sync slave may be elected);
      ``state_snapshot_interval_s`` (600): how often the full ledger/cursor state is journaled again.
    - authentication and authorization (Pulsar's names; README "Authentication and authorization"):
      ``authentication_enabled`` (false); ``authentication_providers`` (method names: ``token``, ``basic``,
      ``tls``); ``anonymous_user_role`` ("" = clients without credentials are refused);
      ``token_secret_key`` (HS256) or ``token_public_key`` with ``token_public_alg`` (RS256; ES256, ...): key
      values ``file:///path`` or ``data:;base64,...``; ``token_auth_claim`` (``sub``) names the role;
      ``token_audience_claim`` / ``token_audience`` (checked when the claim is set); ``basic_auth_conf`` (an
      htpasswd file path or its base64 content); ``authentication_refresh_check_seconds`` (60): how often
      expired credentials of binary connections are refreshed (AUTH_CHALLENGE); ``authorization_enabled``
      (false) with ``super_user_roles``.
    - limits, checked before anything is allocated for the request (README "Limits"; 0 = unlimited where
      allowed): ``broker_max_connections`` (512; Pulsar 0) and ``broker_max_connections_per_ip`` (256; Pulsar
      0), sized so that connections leave room for the store's files under a 1,024 file-descriptor limit: a
      connection past them is closed at accept, with a rate-limited log line;
      ``max_pending_publish_requests_per_connection`` (1000, as Pulsar): SENDs without a receipt past which
      the connection's socket is not read until half have been answered; ``max_subscriptions_per_topic``
      (10,000; Pulsar 0): NotAllowed "Exceed maximum number of subscriptions" to a SUBSCRIBE creating one
      more; ``max_topics_per_namespace`` (100,000; Pulsar 0; partitions count one each): NotAllowed / 412
      "Exceed maximum number of topics in namespace"; ``max_num_partitions_per_partitioned_topic``
      (10,000; Pulsar 0): 412 beyond it; ``http_max_request_size`` (10 MiB; Pulsar's httpMaxRequestSize
      -1): bytes of an admin request body, 413 beyond it.
    - TLS (Pulsar's names; ``quasar.security.tls``, README "TLS"): ``broker_service_port_tls`` (None = no
      ``pulsar+ssl://`` listener; Pulsar's convention 6651; 0 = a free port) and ``web_service_port_tls``
      (None = no ``https://`` admin listener; 8443 by convention; 0 = a free port), on ``host``;
      ``tls_certificate_file_path`` / ``tls_key_file_path`` (PEM certificate chain and key, required with a
      TLS port), ``tls_trust_certs_file_path`` (PEM CA bundle for client certificates; "" = none),
      ``tls_allow_insecure_connection`` (false), ``tls_require_trusted_client_cert_on_connect`` (false),
      ``tls_protocols`` (e.g. ``["TLSv1.3", "TLSv1.2"]``; empty = OpenSSL's defaults), ``tls_ciphers``
      (OpenSSL names for TLS <= 1.2; empty = defaults), ``tls_cert_refresh_check_duration_sec`` (300: how
      often the files are checked and reloaded when changed). A list may also be given as one
      comma-separated string (as in broker.conf).
    - hardening (no Pulsar setting: Pulsar leaves these unbounded): ``max_name_length`` (1024 UTF-8 bytes)
      bounds the producer, subscription and consumer names of PRODUCER / SUBSCRIBE,
      ``max_property_length`` (8192 bytes) each key and value of their metadata and subscription
      properties, ``max_properties_per_command`` (256) how many there are; a longer or larger one is
      refused with NotAllowedError before any work on it (quasar.broker.cnx.string_limits).
    - schemas (``quasar.broker.schema``): ``schema_compatibility_strategy`` (FULL; any Pulsar strategy but
      UNDEFINED), ``is_allow_auto_update_schema_enabled`` (true) and ``is_schema_validation_enforced``
      (false): what applies where a namespace sets no policy of its own.
    - metrics (``GET /metrics`` on the admin port; ``quasar.broker.metrics``, docs/metrics.md; Pulsar's
      names): ``expose_topic_level_metrics_in_prometheus`` (true: samples per topic and subscription; false:
      summed per namespace); ``authenticate_metrics_endpoint`` (false: ``/metrics`` is open even with
      authentication on; true: it needs valid credentials); ``stats_update_frequency_in_secs`` (60, > 0):
      the period over which the rates of ``/metrics`` and the topic stats are computed.
    """

    # listeners, data directory, entry size and the commit log
    host: str = "127.0.0.1"
    port: int = 6650
    admin_port: int = 8080
    data_dir: Path = field(default_factory=lambda: Path("data"))
    cluster_name: str = "standalone"
    """Pulsar ``clusterName`` (RocketMQ brokerClusterName): the cluster this broker serves, a Pulsar named
    entity; ``standalone`` for ``quasar standalone`` as in Pulsar. Every broker of a cluster gives the same."""
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    commit_log_file_size: int = 1024 * 1024 * 1024
    flush_disk_type: str = "SYNC_FLUSH"
    sync_flush_timeout_ms: int = 5000
    """``syncFlushTimeout``: a SYNC_FLUSH send not covered by an fsync within this many ms fails
    (``FLUSH_DISK_TIMEOUT``, SEND_ERROR PersistenceError)."""
    # storage (RocketMQ MessageStoreConfig names in snake_case, RocketMQ defaults; README "Storage
    # configuration"; validated by quasar.storage.StoreConfig when the broker starts)
    mapped_file_size_consume_queue: int = 300_000 * 20
    """``mappedFileSizeConsumeQueue``: bytes per consume queue file, a multiple of 20 (300,000 units)."""
    flush_interval_commit_log_ms: int = 500
    """``flushIntervalCommitLog``: ASYNC_FLUSH period."""
    flush_commit_log_least_pages: int = 4
    """``flushCommitLogLeastPages``: ASYNC_FLUSH syncs only with at least this many dirty 4 KiB pages..."""
    flush_commit_log_thorough_interval_ms: int = 10_000
    """``flushCommitLogThoroughInterval``: ...except at least this often."""
    flush_interval_consume_queue_ms: int = 1000
    """``flushIntervalConsumeQueue``: consume queue flush period."""
    flush_consume_queue_least_pages: int = 2
    """``flushConsumeQueueLeastPages``: dirty consume queue pages needed for a flush."""
    flush_consume_queue_thorough_interval_ms: int = 60_000
    """``flushConsumeQueueThoroughInterval``: full consume queue + index flush and checkpoint at least this
    often."""
    check_crc_on_recover: bool = True
    """``checkCRCOnRecover``: recovery checks each record's CRCs."""
    message_index_enable: bool = True
    """``messageIndexEnable``: build the key index (``quasar query``, ``GET .../messages?key=``)."""
    max_hash_slot_num: int = 5_000_000
    """``maxHashSlotNum``: hash slots per index file."""
    max_index_num: int = 20_000_000
    """``maxIndexNum``: items per index file (a file is 420,000,040 bytes, allocated as it fills)."""
    warm_mapped_file_enable: bool = False
    """``warmMapedFileEnable``: write zeros over a pre-allocated commit log segment (on the allocation
    thread) before appends map it."""
    file_reserved_time_h: float = 72
    """``fileReservedTime``: hours a commit log segment is kept after its last write."""
    delete_when: str = "04"
    """``deleteWhen``: hours of the day (``"04;16"``) when expired segments are deleted."""
    disk_max_used_space_ratio: int = 75
    """``diskMaxUsedSpaceRatio``: percent disk use above which expired segments go at any hour."""
    disk_space_clean_forcibly_ratio: int = 85
    """``diskSpaceCleanForciblyRatio``: percent disk use (clamped to 30..85) above which segments no queue
    needs go whatever their age."""
    disk_space_warning_level_ratio: int = 90
    """``diskSpaceWarningLevelRatio``: percent disk use (clamped to 35..90) above which sends are refused
    until space is freed (the producer is closed; new producers get a retryable ServiceNotReady)."""
    clean_resource_interval_ms: int = 10_000
    """``cleanResourceInterval``: period of the clean service."""
    delete_file_batch_max: int = 10
    """``deleteFileBatchMax``: segments deleted per clean round at most."""
    max_open_consume_queue_files: int = 0
    """Consume queue files kept mapped at most (each holds one file descriptor); the least recently used are
    unmapped and closed beyond it and mapped again on demand. 0: the soft ``RLIMIT_NOFILE`` minus 512, within
    16..32,768 (``StoreConfig.max_open_consume_queue_files``)."""
    clean_file_forcibly_enable: bool = True
    """``cleanFileForciblyEnable``: allow age-independent deletion above the clean-forcibly ratio."""
    # managed ledger, dispatch, deduplication, subscriptions and policy defaults (Pulsar broker.conf names)
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_min_ledger_rollover_time_ms: int = 10 * 60 * 1000
    managed_ledger_cursor_persist_interval_ms: int = 1000
    """How often (ms) changed durable cursor states are written to the metadata store and consumed ledgers
    are trimmed under the retention policy: one background round for every managed ledger (Pulsar
    writes mark-delete positions at most ``managedLedgerDefaultMarkDeleteRateLimit`` times a second, 1 by
    default)."""
    dispatcher_max_read_batch_size: int = 100
    keep_alive_interval_s: float = 30.0
    broker_deduplication_enabled: bool = False
    broker_deduplication_entries_interval: int = 1000
    broker_deduplication_max_number_of_producers: int = 10_000
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    subscription_key_shared_use_consistent_hashing: bool = True
    max_concurrent_non_persistent_message_per_connection: int = 1000
    max_producers_per_topic: int = 10_000
    max_consumers_per_topic: int = 10_000
    max_consumers_per_subscription: int = 10_000
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_ms: int = 1000
    is_delayed_delivery_deliver_at_time_strict: bool = False
    managed_ledger_max_size_per_ledger_mb: int = 2048
    managed_ledger_max_ledger_rollover_time_ms: int = 240 * 60 * 1000
    default_retention_time_in_minutes: int = 0
    default_retention_size_in_mb: int = 0
    ttl_duration_default_in_seconds: int = 0
    message_expiry_check_interval_s: float = 300.0
    backlog_quota_check_interval_s: float = 60.0
    broker_service_compaction_threshold_in_bytes: int = 0
    broker_service_compaction_monitor_interval_in_seconds: float = 60.0
    broker_unload_inactive_topics_enabled: bool = True
    broker_unload_inactive_topics_frequency_seconds: float = 60.0
    broker_unload_inactive_topics_max_inactive_duration_seconds: float = 300.0
    backlog_quota_default_limit_bytes: int = -1
    backlog_quota_default_limit_second: int = -1
    backlog_quota_default_retention_policy: str = "producer_request_hold"
    subscription_key_shared_consistent_hashing_replica_points: int = 100
    # garbage collector of the broker process (quasar.broker.gc_tuning)
    gc_gen0_threshold: int = 50_000
    gc_freeze_after_start: bool = True
    # cluster membership (quasar broker; docs/cluster.md)
    broker_name: str = ""
    broker_id: int = 0
    metadata_store_url: str = ""
    nameservers: str = ""
    advertised_address: str = ""
    advertised_listeners: str = ""
    internal_listener_name: str = ""
    register_name_server_period_s: float = 30.0
    load_report_interval_s: float = 5.0
    # replication (quasar.replication, RocketMQ's HA settings; docs/replication.md)
    broker_role: str = ""
    promoted_role: str = ""
    ha_port: int = 10912
    ha_advertised_address: str = ""
    ha_send_heartbeat_interval_s: float = 5.0
    ha_housekeeping_interval_s: float = 20.0
    ha_transfer_batch_size: int = 32768
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    ha_max_time_slave_not_catchup_s: float = 15.0
    slave_timeout_s: float = 3.0
    in_sync_replicas: int = 0
    min_in_sync_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    enable_elect_unclean_master: bool = False
    state_snapshot_interval_s: float = 600.0
    # Authentication and authorization (Pulsar broker.conf names; quasar.security; README "Authentication
    # and authorization")
    authentication_enabled: bool = False
    """Pulsar ``authenticationEnabled``: binary and admin clients authenticate with one of
    ``authentication_providers``; clients without credentials get ``anonymous_user_role`` (refused when "")."""
    authentication_providers: tuple[str, ...] = ()
    anonymous_user_role: str = ""
    token_secret_key: str = ""
    token_public_key: str = ""
    token_public_alg: str = "RS256"
    token_auth_claim: str = "sub"
    token_audience_claim: str = ""
    token_audience: str = ""
    basic_auth_conf: str = ""
    authentication_refresh_check_seconds: float = 60.0
    authorization_enabled: bool = False
    super_user_roles: tuple[str, ...] = ()
    # Limits (Pulsar's broker.conf names; bounded defaults where Pulsar ships 0 = unlimited; README "Limits")
    broker_max_connections: int = 512
    broker_max_connections_per_ip: int = 256
    max_pending_publish_requests_per_connection: int = 1000
    max_subscriptions_per_topic: int = 10_000
    max_topics_per_namespace: int = 100_000
    max_num_partitions_per_partitioned_topic: int = 10_000
    http_max_request_size: int = 10 * 1024 * 1024
    # TLS (Pulsar's broker.conf names; quasar.security.tls; README "TLS")
    broker_service_port_tls: int | None = None
    web_service_port_tls: int | None = None
    tls_certificate_file_path: str = ""
    tls_key_file_path: str = ""
    tls_trust_certs_file_path: str = ""
    tls_allow_insecure_connection: bool = False
    tls_require_trusted_client_cert_on_connect: bool = False
    tls_protocols: tuple[str, ...] = ()
    tls_ciphers: tuple[str, ...] = ()
    tls_cert_refresh_check_duration_sec: float = 300.0
    # RocketMQ gRPC endpoint (issue 18; quasar.broker.rocketmq; docs/rocketmq.md)
    rocketmq_enabled: bool = True
    """Serve RocketMQ 5's gRPC API (``apache.rocketmq.v2.MessagingService``) for the official RocketMQ
    clients; ``--no-rocketmq`` turns it off."""
    rocketmq_port: int = 8081
    """Port of the RocketMQ gRPC listener on ``host`` (the RocketMQ proxy's 8081); 0 = a free port."""
    rocketmq_port_tls: int | None = None
    """Port of the RocketMQ gRPC listener over TLS (the broker's ``tls_*`` certificate files; None = off; 0 = a
    free port): the RocketMQ clients' ``tls_enable`` / ``enableSsl``."""
    rocketmq_max_message_size: int = 0
    """RocketMQ ``maxMessageSize``: bytes of a message body sent by a RocketMQ client (MESSAGE_BODY_TOO_LARGE
    past it), pushed to producers as ``publishing.max_body_size``; at most ``max_message_size``. 0 = RocketMQ's
    4 MiB, or ``max_message_size`` when that is smaller (:meth:`rocketmq_body_limit`)."""
    rocketmq_channel_expired_timeout: int = 120_000
    """RocketMQ proxy ``channelExpiredTimeout`` (ms): a RocketMQ client that made no call for this long and has
    no Telemetry stream open is dropped with its producers; a Telemetry stream that sends no settings within
    it is closed (gRPC FAILED_PRECONDITION)."""
    rocketmq_max_clients: int = 10_000
    """RocketMQ client ids known at once (each with its Telemetry stream); a call from a new one past it is
    answered TOO_MANY_REQUESTS (docs/rocketmq-limits.md)."""
    transaction_check_interval: int = 30_000
    """RocketMQ ``transactionCheckInterval`` (ms): how often unresolved transactional half messages are looked
    at and their producers asked (``rocketmq/transaction*.py``, docs/rocketmq-transactions.md)."""
    transaction_time_out: int = 6_000
    """RocketMQ ``transactionTimeOut`` (ms): a half message younger than this is not checked yet."""
    transaction_check_max: int = 15
    """RocketMQ ``transactionCheckMax``: checks of one half message before it is given up (moved to the
    namespace's ``TRANS_CHECK_MAX_TIME_TOPIC``)."""
    # Hardening
    max_name_length: int = 1024
    max_property_length: int = 8192
    max_properties_per_command: int = 256
    # schema registry (quasar.broker.schema; Pulsar broker.conf names)
    schema_compatibility_strategy: str = "FULL"
    is_allow_auto_update_schema_enabled: bool = True
    is_schema_validation_enforced: bool = False
    # Metrics (Pulsar broker.conf names; quasar.broker.metrics; docs/metrics.md)
    expose_topic_level_metrics_in_prometheus: bool = True
    authenticate_metrics_endpoint: bool = False
    stats_update_frequency_in_secs: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535 or not 0 <= self.admin_port <= 65535:
            raise ValueError(f"ports must be in 0..65535, got {self.port} and {self.admin_port}")
        for name in _POSITIVE:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in _NON_NEGATIVE:
            if getattr(self, name) < 0:
                raise ValueError(
                    f"{name} must be >= 0 (0 = unlimited, disabled or default), got {getattr(self, name)}"
                )
        if self.flush_disk_type not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
            raise ValueError(
                f"flush_disk_type must be SYNC_FLUSH or ASYNC_FLUSH, got {self.flush_disk_type!r}"
            )
        if self.backlog_quota_default_retention_policy not in (
            "producer_request_hold",
            "producer_exception",
            "consumer_backlog_eviction",
        ):
            raise ValueError(
                f"unknown backlog_quota_default_retention_policy {self.backlog_quota_default_retention_policy!r}"
            )
        try:  # a cluster name is a Pulsar named entity ([-=:.\w]+, not "." or "..")
            check_named_entity("cluster", self.cluster_name)
        except InvalidTopicNameError as exc:
            raise ValueError(f"cluster_name: {exc}") from None
        if self.schema_compatibility_strategy not in _SCHEMA_STRATEGIES:
            raise ValueError(
                f"schema_compatibility_strategy must be one of {_SCHEMA_STRATEGIES},"
                f" got {self.schema_compatibility_strategy!r}"
            )
        listeners = parse_advertised_listeners(self.advertised_listeners)
        if self.internal_listener_name and self.internal_listener_name not in listeners:
            raise ValueError(
                f"internal_listener_name {self.internal_listener_name!r} is not one of advertised_listeners"
                f" {sorted(listeners)}"
            )
        for address in self.nameserver_addresses():
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ValueError(f"nameservers: {address!r} is not host:port (list them as h:p;h:p)")
        if self.broker_id and not self.broker_name:
            raise ValueError("broker_id needs broker_name (the broker group it belongs to)")
        self._check_replication()
        self._check_authentication()
        self._check_tls()
        self._check_rocketmq()

    def _check_rocketmq(self) -> None:
        if not 0 <= self.rocketmq_port <= 65535:
            raise ValueError(f"rocketmq_port must be in 0..65535, got {self.rocketmq_port}")
        port = self.rocketmq_port_tls
        if port is not None:
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(f"rocketmq_port_tls must be None (off) or a port in 0..65535, got {port!r}")
            self.tls_settings()  # TlsConfigError (a ValueError): the certificate and key are required
        for name in (
            "transaction_check_interval",
            "transaction_time_out",
            "transaction_check_max",
            "rocketmq_channel_expired_timeout",
            "rocketmq_max_clients",
        ):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= 2**31 - 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0 <= self.rocketmq_max_message_size <= self.max_message_size:
            raise ValueError(
                f"rocketmq_max_message_size must be in 0..max_message_size ({self.max_message_size}),"
                f" got {self.rocketmq_max_message_size}"
            )

    def rocketmq_body_limit(self) -> int:
        """Bytes of the largest RocketMQ message body: ``rocketmq_max_message_size``, or with 0 RocketMQ's
        4 MiB capped at ``max_message_size`` (a broker whose Pulsar limit is smaller keeps it for both)."""
        return self.rocketmq_max_message_size or min(ROCKETMQ_MAX_MESSAGE_SIZE, self.max_message_size)

    def _check_authentication(self) -> None:
        for name in ("authentication_providers", "super_user_roles"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a list of strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        unknown = sorted(set(self.authentication_providers) - {"token", "basic", "tls"})
        if unknown:
            raise ValueError(f"authentication_providers: unknown methods {unknown} (token, basic, tls)")
        if self.authentication_refresh_check_seconds <= 0:
            raise ValueError("authentication_refresh_check_seconds must be positive")
        if self.authentication_enabled and not self.authentication_providers and not self.anonymous_user_role:
            raise ValueError("authentication_enabled needs authentication_providers (or anonymous_user_role)")

    def _check_tls(self) -> None:
        for name in ("tls_protocols", "tls_ciphers"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = [part.strip() for part in value.split(",") if part.strip()]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a list of strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        for name in ("broker_service_port_tls", "web_service_port_tls"):
            port = getattr(self, name)
            if port is not None and (
                isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
            ):
                raise ValueError(f"{name} must be None (off) or a port in 0..65535, got {port!r}")
        if self.tls_cert_refresh_check_duration_sec <= 0:
            raise ValueError(
                f"tls_cert_refresh_check_duration_sec must be positive, got {self.tls_cert_refresh_check_duration_sec}"
            )
        if self.tls_enabled:
            self.tls_settings()  # TlsConfigError (a ValueError) names what is missing or wrong

    @property
    def tls_enabled(self) -> bool:
        """True when a TLS listener is configured (``broker_service_port_tls`` or ``web_service_port_tls``)."""
        return self.broker_service_port_tls is not None or self.web_service_port_tls is not None

    def tls_settings(self) -> TlsSettings:
        """The TLS settings of both TLS listeners; raises TlsConfigError (e.g. no certificate path)."""
        return TlsSettings(
            certificate_file_path=self.tls_certificate_file_path,
            key_file_path=self.tls_key_file_path,
            trust_certs_file_path=self.tls_trust_certs_file_path,
            allow_insecure_connection=self.tls_allow_insecure_connection,
            require_trusted_client_cert_on_connect=self.tls_require_trusted_client_cert_on_connect,
            protocols=self.tls_protocols,
            ciphers=self.tls_ciphers,
        )

    def _check_replication(self) -> None:
        if self.broker_role not in ("", "ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise ValueError(
                f"broker_role must be ASYNC_MASTER, SYNC_MASTER or SLAVE, got {self.broker_role!r}"
            )
        if self.promoted_role not in ("", "ASYNC_MASTER", "SYNC_MASTER"):
            raise ValueError(f"promoted_role must be ASYNC_MASTER or SYNC_MASTER, got {self.promoted_role!r}")
        if self.broker_role and not (self.broker_name and self.metadata_store_url.startswith("etcd://")):
            raise ValueError(
                "broker_role (replication) needs broker_name and an etcd metadata store (the group's leader"
                " and epoch live there)"
            )
        if not 0 <= self.ha_port <= 65535:
            raise ValueError(f"ha_port must be in 0..65535, got {self.ha_port}")
        for name in (
            "ha_send_heartbeat_interval_s",
            "ha_housekeeping_interval_s",
            "ha_transfer_batch_size",
            "ha_max_gap_not_in_sync",
            "ha_max_time_slave_not_catchup_s",
            "slave_timeout_s",
            "min_in_sync_replicas",
            "state_snapshot_interval_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.in_sync_replicas < 0:
            raise ValueError("in_sync_replicas must be >= 0 (0 = 2 for SYNC_MASTER, 1 otherwise)")

    def nameserver_addresses(self) -> list[str]:
        """``nameservers`` as a list of ``host:port`` (RocketMQ's ``;``-separated namesrvAddr)."""
        return [a.strip() for a in self.nameservers.split(";") if a.strip()]

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> BrokerConfig:
        """Load a TOML file of ``name = value`` pairs (names as the fields above), then apply ``overrides``.

        Raises ValueError for an unknown key or a bad value, OSError if the file cannot be read.
        """
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        return cls.from_mapping({**raw, **overrides})

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> BrokerConfig:
        """Build a config from a mapping; unknown keys raise ValueError listing the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; valid keys: {sorted(names)}")
        values = dict(values)
        if "data_dir" in values:
            values["data_dir"] = Path(values["data_dir"])
        return cls(**values)
