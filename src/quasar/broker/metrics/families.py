"""Building blocks of the broker's Prometheus collectors: a set of metric families filled sample by sample.

prometheus_client's typed families (``GaugeMetricFamily`` ...) fix one label set per family; Pulsar's
exposition puts samples of different label sets in one family (``pulsar_out_messages_total`` per topic and
per subscription), and ``_le_*`` histograms are one gauge family per bucket. :class:`Families` makes both:
``gauge(name, doc, labels, value)`` / ``counter(...)`` add a sample, creating the family on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import Metric

from quasar.broker.topic_stats import LATENCY_BUCKET_SUFFIXES, LatencyBuckets

__all__ = ["Families"]


class Families:
    """Metric families in first-use order (the scrape output order)."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def _family(self, name: str, doc: str, kind: str) -> Metric:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Metric(name, doc, kind)
        return family

    def gauge(self, name: str, doc: str, labels: Mapping[str, str], value: float) -> None:
        """Add a gauge sample ``name{labels} value``."""
        self._family(name, doc, "gauge").add_sample(name, dict(labels), value)

    def counter(self, name: str, doc: str, labels: Mapping[str, str], value: float) -> None:
        """Add a counter sample ``name_total{labels} value`` (``name`` without ``_total``)."""
        self._family(name, doc, "counter").add_sample(name + "_total", dict(labels), value)

    def buckets(self, prefix: str, doc: str, labels: Mapping[str, str], buckets: LatencyBuckets) -> None:
        """Pulsar-style latency histogram (``topic_stats``): one gauge per bucket
        (``{prefix}_le_0_5`` ... ``{prefix}_le_overflow``, observations in that bucket), then ``{prefix}_count``
        (observations) and ``{prefix}_sum`` (their sum, ms)."""
        for suffix, value in zip(LATENCY_BUCKET_SUFFIXES, buckets.counts, strict=True):
            self.gauge(f"{prefix}_{suffix}", doc, labels, value)
        self.gauge(f"{prefix}_count", doc + ": number of observations", labels, buckets.count)
        self.gauge(f"{prefix}_sum", doc + ": sum of the observations (ms)", labels, buckets.sum_ms)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())
