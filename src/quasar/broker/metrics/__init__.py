"""Prometheus metrics of the broker (``GET /metrics`` on the admin port; docs/metrics.md).

- :mod:`.topics`: Pulsar's topic, subscription and namespace metrics (``pulsar_*``);
- :mod:`.broker`: the store (``quasar_store_*``), replication lag, event loop lag;
- :mod:`.rates`: the owned task turning the topics' counters into rates every stats period;
- :mod:`.endpoint`: the per-broker registry and the aiohttp route.

The counters themselves live on the topics (``quasar.broker.topic_stats``), so ``{topic}/stats`` and
``/metrics`` report the same numbers.
"""

from quasar.broker.metrics.broker import BrokerMetricsCollector, StoreView
from quasar.broker.metrics.endpoint import METRICS_PATH, add_metrics_route, new_registry
from quasar.broker.metrics.rates import StatsUpdater
from quasar.broker.metrics.topics import TopicMetricsCollector

__all__ = [
    "METRICS_PATH",
    "BrokerMetricsCollector",
    "StatsUpdater",
    "StoreView",
    "TopicMetricsCollector",
    "add_metrics_route",
    "new_registry",
]
