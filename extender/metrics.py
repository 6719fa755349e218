"""The extender's Prometheus metrics, one registry per app instance (so tests can run several apps)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from stowage.extender.messages import REASONS
from stowage.extender.nudge import OUTCOMES as NUDGE_OUTCOMES

from stowage.labels import METRICS
from stowage.metrics_server import CountsCollector

__all__ = ["ExtenderMetrics"]

# Filter/prioritize latency lives well under the scheduler's httpTimeout; fine buckets at the bottom.
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _HarvestableCollector(Collector):
    """``stowage_node_harvestable{node,resource}``, computed at scrape time from the latest snapshot."""

    def __init__(self, compute: Callable[[], tuple[list[str], tuple[str, ...], np.ndarray]]) -> None:
        self._compute = compute

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            METRICS.NODE_HARVESTABLE,
            "Capacity opportunistic pods may still take on the node, A_opp = T_alloc*C - U - B - S "
            "(cores, bytes, bytes/s)",
            labels=["node", "resource"],
        )
        names, resources, values = self._compute()
        for i, node in enumerate(names):
            for j, resource in enumerate(resources):
                family.add_metric([node, resource], float(values[i, j]))
        yield family


class ExtenderMetrics:
    """Request latency per verb, rejections per reason, Events and nudges per outcome, harvestable capacity per node,
    unreadable objects."""

    def __init__(
        self,
        harvestable: Callable[[], tuple[list[str], tuple[str, ...], np.ndarray]] | None = None,
        registry: CollectorRegistry | None = None,
        bad_objects: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.request_seconds = Histogram(
            METRICS.EXTENDER_REQUEST_SECONDS,
            "Time to answer kube-scheduler, by verb",
            ["verb"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.rejections = Counter(
            METRICS.EXTENDER_REJECTIONS_TOTAL.removesuffix("_total"),
            "Nodes the filter rejected, by reason (see docs/extender.md)",
            ["reason"],
            registry=self.registry,
        )
        self.events = Counter(
            METRICS.EXTENDER_EVENTS_TOTAL.removesuffix("_total"),
            "Events about pods placed nowhere, by outcome (posted, failed, dropped)",
            ["outcome"],
            registry=self.registry,
        )
        self.nudges = Counter(
            METRICS.EXTENDER_NUDGES_TOTAL.removesuffix("_total"),
            "Pods held for missing utilization samples that the extender patched for a retry once the samples were "
            "fresh, by outcome (patched, gone, failed, dropped)",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in NUDGE_OUTCOMES:
            self.nudges.labels(outcome)
        for reason in REASONS:  # every reason exported from the start: rate() and alerts need the series
            self.rejections.labels(reason)
        if harvestable is not None:
            self.registry.register(_HarvestableCollector(harvestable))
        if bad_objects is not None:
            self.registry.register(CountsCollector(
                METRICS.BAD_OBJECTS_TOTAL.removesuffix("_total"),
                "Objects the extender's cache could not read in full (each counted once when it turns bad): "
                "left out, or kept with zero for what it cannot read; by kind (pod, node)", "kind", bad_objects))
