"""``quasar broker``: run one broker of a cluster (Pulsar's ``pulsar broker`` with RocketMQ's broker groups and
name servers; docs/cluster.md).

The broker joins the cluster through the metadata store (``--metadata-store etcd://...``: tenants,
namespaces, policies, topic placement, live brokers) and registers with every name server of
``--nameservers`` at start and every ``register_name_server_period_s`` (RocketMQ registerBrokerAll). This
module is the composition root that joins the two: the broker package never imports the name server's.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import click

from quasar.broker.app import BrokerApp
from quasar.broker.config import BrokerConfig
from quasar.cli.standalone import (
    Companion,
    install_event_loop_policy,
    load_config,
    rocketmq_options,
    run_broker,
    serve,
    setup_logging,
    tls_options,
    tls_ready_suffix,
)

log = logging.getLogger("quasar")

DEFAULT_CLUSTER_NAME = "quasar-cluster"
"""``--cluster`` when neither the option nor the ``--config`` file names one."""
REGISTER_PERIOD_BOUNDS_S = (10.0, 60.0)
"""RocketMQ bounds registerNameServerPeriod to 10..60 s (BrokerController)."""


def ready_line(app: BrokerApp) -> str:
    """The readiness line ``quasar broker`` prints once it serves (tools such as ``quasar cluster up`` wait
    for it): ``quasar broker ready: pulsar://H:P http://H:A cluster=NAME group=G id=N``, followed by
    `` ha=H:P`` for a replicated broker, then `` tls=pulsar+ssl://H:P https=https://H:P`` for the TLS listeners
    that are on and `` rocketmq=H:P`` for the RocketMQ endpoint."""
    config = app.config
    line = (
        f"quasar broker ready: {app.service_url} {app.web_service_url}"
        f" cluster={config.cluster_name} group={config.broker_name} id={config.broker_id}"
    )
    if app.replication is not None:
        line += f" ha={app.replication.ha_address}"
    return line + tls_ready_suffix(app)


def make_app(config: BrokerConfig) -> BrokerApp:
    """The broker of ``config``, replicated (``quasar.replication.node.ReplicaNode``) when ``broker_role`` is
    set."""
    if not config.broker_role:
        return BrokerApp(config)
    from quasar.replication.config import BrokerRole, ReplicationConfig
    from quasar.replication.node import ReplicaNode

    replication = ReplicationConfig(
        broker_role=BrokerRole(config.broker_role),
        ha_port=config.ha_port,
        ha_send_heartbeat_interval_s=config.ha_send_heartbeat_interval_s,
        ha_housekeeping_interval_s=config.ha_housekeeping_interval_s,
        ha_transfer_batch_size=config.ha_transfer_batch_size,
        ha_max_gap_not_in_sync=config.ha_max_gap_not_in_sync,
        ha_max_time_slave_not_catchup_s=config.ha_max_time_slave_not_catchup_s,
        slave_timeout_s=config.slave_timeout_s,
        # used by a SYNC_MASTER only (a promoted slave may become one): 2 unless configured
        in_sync_replicas=config.in_sync_replicas or 2,
        min_in_sync_replicas=config.min_in_sync_replicas,
        enable_auto_in_sync_replicas=config.enable_auto_in_sync_replicas,
    )
    node = ReplicaNode(
        group=config.broker_name,
        broker_id=config.broker_id,
        config=replication,
        promoted_role=BrokerRole(config.promoted_role) if config.promoted_role else None,
        host=config.host,
        advertised_host=config.advertised_address or config.host,
        advertised_ha_address=config.ha_advertised_address,
        snapshot_interval_s=config.state_snapshot_interval_s,
        unclean=config.enable_elect_unclean_master,
    )
    return BrokerApp(config, replication=node)


def _registrar(app: BrokerApp) -> list[Companion]:
    """The name-server registrar of ``app`` (none when no name server is configured)."""
    config = app.config
    addresses = config.nameserver_addresses()
    if not addresses or app.member is None:
        return []
    from quasar.nameserver.messages import BrokerIdentity
    from quasar.nameserver.registrar import BrokerRegistrar

    info = app.member.me
    low, high = REGISTER_PERIOD_BOUNDS_S
    registrar = BrokerRegistrar(
        addresses,
        BrokerIdentity(
            cluster_name=info.cluster,
            broker_name=info.group,
            broker_id=info.broker_id,
            broker_addr=info.service_url.split("://", 1)[-1],
            service_url=info.service_url,
            web_service_url=info.web_service_url,
            service_url_tls=info.service_url_tls,
            listeners={name: dict(urls) for name, urls in info.listeners.items()},
        ),
        app.member.ownership.topic_configs,
        period_s=min(max(config.register_name_server_period_s, low), high),
    )
    app.member.on_topics_changed.append(registrar.topics_changed)
    if app.replication is not None:
        member = app.member

        def role_changed() -> None:  # RocketMQ: the master registers as broker id 0, slaves with ids > 0
            me = member.me
            taken = {b.broker_id for b in member.membership.all_brokers() if b.group == me.group and b != me}
            slave_id = me.broker_id or min(i for i in range(1, len(taken) + 2) if i not in taken)
            registrar.identity = dataclasses.replace(
                registrar.identity, broker_id=0 if me.is_master else slave_id, ha_server_addr=me.ha_address
            )
            registrar.topics_changed()

        member.on_topics_changed.append(role_changed)
    return [registrar]


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of this broker's commit log, consume queues and ledger state [default: ./data].",
)
@click.option("--host", default=None, help="Address to bind [default: 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Pulsar binary protocol port; 0 = a free port [6650].")
@click.option("--admin-port", type=int, default=None, help="Admin REST port; 0 = a free port [8080].")
@click.option(
    "--cluster",
    "cluster_name",
    default=None,
    help="Cluster name (RocketMQ brokerClusterName, Pulsar clusterName) [the config file's, else"
    f" {DEFAULT_CLUSTER_NAME}].",
)
@click.option(
    "--broker-name",
    required=True,
    help="Broker group this broker belongs to (RocketMQ brokerName); its topics live in the group.",
)
@click.option(
    "--broker-id",
    type=int,
    default=None,
    help="0 = the group's master, >0 = a slave [the config file's, else 0].",
)
@click.option("--nameservers", default=None, help="Name servers to register with, 'host:port;host:port'.")
@click.option(
    "--broker-role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]),
    default=None,
    help="Replicate the group's commit log (RocketMQ brokerRole): the role this broker starts in; after a"
    " failover the role follows the group's elected master [default: no replication].",
)
@click.option(
    "--ha-port", type=int, default=None, help="HA (replication) listener port; 0 = a free port [10912]."
)
@click.option(
    "--metadata-store",
    "metadata_store_url",
    required=True,
    help="Cluster metadata store shared by every broker: etcd://host:port[,host:port][/prefix].",
)
@click.option("--advertised-address", default=None, help="Host name put in this broker's URLs [--host].")
@click.option(
    "--advertised-listeners",
    default=None,
    help="Pulsar advertisedListeners: 'name:pulsar://h:p,name:pulsar+ssl://h:p,...'.",
)
@click.option(
    "--internal-listener-name", default=None, help="Listener whose URL is this broker's default service URL."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="TOML file of broker settings (names as in BrokerConfig); options win.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@tls_options
@rocketmq_options
def broker(
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    admin_port: int | None,
    cluster_name: str | None,
    broker_name: str,
    broker_id: int | None,
    nameservers: str | None,
    broker_role: str | None,
    ha_port: int | None,
    metadata_store_url: str,
    advertised_address: str | None,
    advertised_listeners: str | None,
    internal_listener_name: str | None,
    config_file: Path | None,
    log_level: str,
    **tls: Any,
) -> None:
    """Start a broker of a cluster: pulsar://HOST:PORT and the admin API on http://HOST:ADMIN_PORT."""
    setup_logging(log_level)
    config = load_config(
        config_file,
        {
            "data_dir": data_dir,
            "host": host,
            "port": port,
            "admin_port": admin_port,
            "cluster_name": cluster_name,
            "broker_name": broker_name,
            "broker_id": broker_id,
            "nameservers": nameservers,
            "broker_role": broker_role,
            "ha_port": ha_port,
            "metadata_store_url": metadata_store_url,
            "advertised_address": advertised_address,
            "advertised_listeners": advertised_listeners,
            "internal_listener_name": internal_listener_name,
            **tls,
        },
    )
    if cluster_name is None and config.cluster_name == BrokerConfig().cluster_name:  # neither file nor option
        config = dataclasses.replace(config, cluster_name=DEFAULT_CLUSTER_NAME)
    if not config.metadata_store_url.startswith("etcd://"):
        raise click.BadParameter(
            "a cluster broker needs a shared metadata store: --metadata-store etcd://host:port"
        )
    install_event_loop_policy()
    run_broker(serve(config, ready_line, companions=_registrar, make_app=make_app))
