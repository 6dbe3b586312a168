"""Pulsar's topic, subscription and namespace metrics, read from the live topics at scrape time.

Pulsar's ``NamespaceStatsAggregator``: with ``expose_topic_level_metrics_in_prometheus`` (Pulsar's
``exposeTopicLevelMetricsInPrometheus``, default true) every loaded topic (each partition of a partitioned
topic) gets its samples labelled ``cluster``, ``namespace``, ``topic``, and every subscription of it the
``pulsar_subscription_*`` samples labelled with ``subscription`` too; when it is off the same topic metrics
are summed per namespace (labels ``cluster``, ``namespace``) and no topic or subscription label appears.
``pulsar_topics_count`` is per namespace in both modes.

Units: rates in messages/s, throughput in bytes/s (both over the last ``stats_update_frequency_in_secs``
period, ``metrics.rates``), ``*_total`` counters in messages or bytes since the topic was loaded on this
broker, sizes in bytes, backlogs in messages (entries, as Pulsar's ``msgBacklog``), latencies in ms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from quasar.broker.broker_service import BrokerService
from quasar.broker.metrics.families import Families
from quasar.broker.non_persistent import NonPersistentTopic
from quasar.broker.topic import PersistentTopic
from quasar.broker.topic_stats import LatencyBuckets

__all__ = ["TopicMetricsCollector"]

Topic = PersistentTopic | NonPersistentTopic


@dataclass(slots=True)
class _Totals:
    """One topic's numbers, or their sum over a namespace."""

    topics: int = 0
    subscriptions: int = 0
    producers: int = 0
    consumers: int = 0
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    msg_in: int = 0
    bytes_in: int = 0
    msg_out: int = 0
    bytes_out: int = 0
    storage_size: int = 0
    backlog: int = 0
    storage_write_latency: LatencyBuckets = field(default_factory=LatencyBuckets)
    publish_latency: LatencyBuckets = field(default_factory=LatencyBuckets)
    dispatch_latency: LatencyBuckets = field(default_factory=LatencyBuckets)

    def add_topic(self, topic: Topic) -> None:
        counters = topic.counters
        subscriptions = topic.subscriptions.values()
        self.topics += 1
        self.subscriptions += len(topic.subscriptions)
        self.producers += len(topic.producers)
        self.consumers += sum(len(s.consumers) for s in subscriptions)
        self.rate_in += counters.rate_in.msg_rate
        self.throughput_in += counters.rate_in.throughput
        self.rate_out += counters.rate_out.msg_rate
        self.throughput_out += counters.rate_out.throughput
        self.msg_in += counters.msg_in
        self.bytes_in += counters.bytes_in
        self.msg_out += topic.msg_out_counter
        self.bytes_out += topic.bytes_out_counter
        if isinstance(topic, PersistentTopic):
            self.storage_size += topic.ledger.total_size
            self.backlog += sum(s.cursor.number_of_entries_in_backlog for s in topic.subscriptions.values())
        self.storage_write_latency.add(counters.storage_write_latency)
        self.publish_latency.add(counters.publish_latency)
        self.dispatch_latency.add(counters.dispatch_latency)


def _emit(out: Families, labels: dict[str, str], totals: _Totals) -> None:
    out.gauge("pulsar_subscriptions_count", "Subscriptions", labels, totals.subscriptions)
    out.gauge("pulsar_producers_count", "Connected producers", labels, totals.producers)
    out.gauge("pulsar_consumers_count", "Connected consumers", labels, totals.consumers)
    out.gauge("pulsar_rate_in", "Messages published per second", labels, totals.rate_in)
    out.gauge("pulsar_rate_out", "Messages dispatched per second", labels, totals.rate_out)
    out.gauge("pulsar_throughput_in", "Bytes published per second", labels, totals.throughput_in)
    out.gauge("pulsar_throughput_out", "Bytes dispatched per second", labels, totals.throughput_out)
    out.counter("pulsar_in_messages", "Messages published", labels, totals.msg_in)
    out.counter(
        "pulsar_in_bytes", "Bytes published (entry bytes: metadata and payload)", labels, totals.bytes_in
    )
    out.counter("pulsar_out_messages", "Messages dispatched to consumers", labels, totals.msg_out)
    out.counter("pulsar_out_bytes", "Bytes dispatched to consumers", labels, totals.bytes_out)
    out.gauge("pulsar_storage_size", "Bytes stored for the topic's ledgers", labels, totals.storage_size)
    out.gauge(
        "pulsar_msg_backlog", "Entries not yet acknowledged, over every subscription", labels, totals.backlog
    )
    out.buckets(
        "pulsar_storage_write_latency",
        "Entries by storage write latency (managed ledger add to durable, ms)",
        labels,
        totals.storage_write_latency,
    )
    out.buckets(
        "quasar_publish_latency",
        "Entries by publish latency (SEND handled to SEND_RECEIPT written, ms)",
        labels,
        totals.publish_latency,
    )
    out.buckets(
        "quasar_dispatch_latency",
        "Messages by dispatch latency (dispatch asked to messages written to the consumer, ms)",
        labels,
        totals.dispatch_latency,
    )


def _emit_subscriptions(out: Families, labels: dict[str, str], topic: Topic) -> None:
    for name, subscription in topic.subscriptions.items():
        sub_labels = {**labels, "subscription": name}
        cursor = getattr(subscription, "cursor", None)  # non-persistent subscriptions keep no backlog
        backlog = cursor.number_of_entries_in_backlog if cursor is not None else 0
        out.gauge("pulsar_subscription_back_log", "Entries not yet acknowledged", sub_labels, backlog)
        out.gauge(
            "pulsar_subscription_msg_rate_out",
            "Messages dispatched per second",
            sub_labels,
            subscription.rate_out.msg_rate,
        )
        out.gauge(
            "pulsar_subscription_msg_throughput_out",
            "Bytes dispatched per second",
            sub_labels,
            subscription.rate_out.throughput,
        )
        out.gauge(
            "pulsar_subscription_consumers_count",
            "Connected consumers",
            sub_labels,
            len(subscription.consumers),
        )
        out.gauge(
            "pulsar_subscription_unacked_messages",
            "Messages delivered and not acknowledged",
            sub_labels,
            subscription.unacked_messages,
        )
        out.counter(
            "pulsar_out_messages",
            "Messages dispatched to consumers",
            sub_labels,
            subscription.msg_out_counter,
        )
        out.counter(
            "pulsar_out_bytes", "Bytes dispatched to consumers", sub_labels, subscription.bytes_out_counter
        )


class TopicMetricsCollector(Collector):
    """Collects ``service``'s topics at each scrape (``topic_level``: per topic and subscription, else per
    namespace; module docstring). Runs on the event loop thread, in the ``/metrics`` handler."""

    def __init__(self, service: BrokerService, *, topic_level: bool = True) -> None:
        self._service = service
        self._topic_level = topic_level

    def _topics(self) -> Iterable[Topic]:
        return list(self._service.topics.values())

    def collect(self) -> Iterator[Metric]:
        cluster = self._service.cluster_name
        out = Families()
        namespaces: dict[str, _Totals] = {}
        for topic in self._topics():
            namespace = topic.name.namespace_name
            totals = namespaces.setdefault(namespace, _Totals())
            if not self._topic_level:
                totals.add_topic(topic)
                continue
            totals.topics += 1
            labels = {"cluster": cluster, "namespace": namespace, "topic": topic.name.full_name}
            one = _Totals()
            one.add_topic(topic)
            _emit(out, labels, one)
            _emit_subscriptions(out, labels, topic)
        for namespace, totals in sorted(namespaces.items()):
            labels = {"cluster": cluster, "namespace": namespace}
            out.gauge("pulsar_topics_count", "Topics loaded on this broker", labels, totals.topics)
            if not self._topic_level:
                _emit(out, labels, totals)
        yield from out
