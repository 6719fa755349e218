"""Prometheus metrics of the node monitor and its HTTP endpoint (``/metrics``, ``/healthz``).

Every name comes from :class:`stowage.labels.METRICS` (DESIGN.md, "Metrics"):

=================================================  ======  ===============================================
series                                             type    meaning
=================================================  ======  ===============================================
``stowage_node_usage{node,resource}``              gauge   measured usage of all pods (cores, bytes, B/s)
``stowage_node_capacity{node,resource}``           gauge   allocatable / declared bandwidth
``stowage_node_contention{node,resource}``         gauge   1 while contention is sustained, else 0
``stowage_node_blocked{node,resource}``            gauge   capacity withheld from harvesting (PRESERVE)
``stowage_pod_usage{node,namespace,pod,class,      gauge   one pod's usage
resource}``
``stowage_evictions_total{node,resource,policy}``  counter evictions requested (or, with --dry-run, that
                                                           would have been)
``stowage_node_sample_seconds{node}``              histo.  time to read the cgroup tree once
=================================================  ======  ===============================================

Gauges are rendered at scrape time from the last published :class:`Snapshot`
(a custom collector), so a pod that is gone simply stops being exported and a
value that is unknown (NaN: first sample, counter reset) is left out rather
than exported as 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from stowage import metrics_server
from stowage.labels import METRICS

__all__ = ["MetricsServer", "NodeMetrics", "PodRow", "Snapshot"]


@dataclass(frozen=True, slots=True)
class PodRow:
    namespace: str
    pod: str
    pod_class: str
    usage: np.ndarray  # (R,)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one tick publishes; arrays are (R,) along ``resources``."""

    resources: tuple[str, ...]
    usage: np.ndarray
    capacity: np.ndarray
    contention: np.ndarray
    blocked: np.ndarray
    pods: Sequence[PodRow] = field(default_factory=tuple)
    at_monotonic_s: float = 0.0
    sampled_at_unix_s: float = math.nan  # when the usage was read (wall clock); NaN: not exported


class _SnapshotCollector(Collector):
    def __init__(self, owner: NodeMetrics) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Metric]:
        snap, node = self.owner.snapshot, self.owner.node
        node_labels = ["node", "resource"]
        families = {
            "usage": GaugeMetricFamily(METRICS.NODE_USAGE, "Measured usage of all pods on the node (cpu cores, "
                                       "memory bytes, disk and network bytes/s).", labels=node_labels),
            "capacity": GaugeMetricFamily(METRICS.NODE_CAPACITY, "Node capacity used for contention: allocatable "
                                          "cpu/memory, declared disk/network bandwidth.", labels=node_labels),
            "contention": GaugeMetricFamily(METRICS.NODE_CONTENTION, "1 while usage has been above the preemption "
                                            "threshold for the sustained count of samples.", labels=node_labels),
            "blocked": GaugeMetricFamily(METRICS.NODE_BLOCKED, "Capacity withheld from harvesting after contention "
                                         "(PRESERVE policy).", labels=node_labels),
            "pods": GaugeMetricFamily(METRICS.POD_USAGE, "Measured usage of one pod.",
                                      labels=["node", "namespace", "pod", "class", "resource"]),
            "sampled": GaugeMetricFamily(METRICS.SAMPLE_TIME, "Unix time the exported usage was sampled (a stuck "
                                         "sampler keeps an old value: readers judge staleness by it).",
                                         labels=["node"]),
        }
        if snap is not None:
            if math.isfinite(snap.sampled_at_unix_s):
                families["sampled"].add_metric([node], snap.sampled_at_unix_s)
            for i, res in enumerate(snap.resources):
                for key, values in (("usage", snap.usage), ("capacity", snap.capacity),
                                    ("contention", snap.contention), ("blocked", snap.blocked)):
                    value = float(values[i])
                    if math.isfinite(value):
                        families[key].add_metric([node, res], value)
                for row in snap.pods:
                    value = float(row.usage[i])
                    if math.isfinite(value):
                        families["pods"].add_metric([node, row.namespace, row.pod, row.pod_class, res], value)
        yield from families.values()


class NodeMetrics:
    """The node monitor's private registry: snapshot gauges, the eviction counter, the sample histogram."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=False)
        self.snapshot: Snapshot | None = None
        self.evictions = Counter(
            METRICS.EVICTIONS_TOTAL, "Opportunistic pods evicted under sustained contention "
            "(with --dry-run: that would have been evicted).", ["node", "resource", "policy"], registry=self.registry,
        )
        self.sample_seconds = Histogram(
            METRICS.SAMPLE_SECONDS,
            "Seconds to read every counter once (cgroup tree, the node's and the pods' net/dev).", ["node"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=self.registry,
        )
        self.registry.register(_SnapshotCollector(self))

    def declare_evictions(self, resources: Sequence[str], policy: str) -> None:
        """Export 0 for every resource up front: ``rate()`` and alerts need the series before the first eviction."""
        for resource in resources:
            self.evictions.labels(self.node, resource, policy)

    def publish(self, snapshot: Snapshot, sample_seconds: float) -> None:
        self.snapshot = snapshot  # one reference assignment: scrapes see the old or the new, never half
        self.sample_seconds.labels(self.node).observe(sample_seconds)

    def count_eviction(self, resource: str, policy: str) -> None:
        self.evictions.labels(self.node, resource, policy).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer(metrics_server.MetricsServer):
    """``GET /metrics`` and ``GET /healthz`` (``/readyz`` too) on a background thread.

    ``/healthz`` is 200 while the last tick is younger than ``stale_after_s``
    and 503 otherwise (a stuck sampling loop must restart the pod).
    """

    def __init__(
        self,
        metrics: NodeMetrics,
        address: str,
        port: int,
        stale_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.stale_after_s = stale_after_s
        self._clock = clock
        super().__init__(metrics.render, {"/healthz": self.health, "/readyz": self.health}, address, port)

    def health(self) -> tuple[bool, str]:
        snap = self.metrics.snapshot
        if snap is None:
            return False, "no sample yet\n"
        age = self._clock() - snap.at_monotonic_s
        if age > self.stale_after_s:
            return False, f"last sample {age:.1f}s ago (limit {self.stale_after_s:.1f}s): sampling loop stuck\n"
        return True, f"ok: last sample {age:.1f}s ago\n"
