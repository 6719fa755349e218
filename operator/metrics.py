"""The operator's Prometheus metrics (names from :class:`stowage.labels.METRICS`; docs/operator.md "Metrics").

| metric | type | labels | meaning |
|---|---|---|---|
| ``stowage_queue_dominant_share`` | gauge | queue, pool | weighted dominant share, per pool (regular, opportunistic) |
| ``stowage_queue_fair_share`` | gauge | queue | the dispatcher's fair share of the regular pool (weighted max-min) |
| ``stowage_queue_allocated`` | gauge | queue, pool, resource | held by its running tasks (cores, bytes, bytes/s) |
| ``stowage_queue_pending_tasks`` | gauge | queue | tasks waiting for the dispatcher |
| ``stowage_job_completion_seconds`` | histogram | queue | creation → completion of each Job that succeeded |
| ``stowage_queue_wait_seconds`` | histogram | queue, kind | submission → first release of a Job or a plain pod |
| ``stowage_dispatch_total`` | counter | class | tasks released, by the class given (regular, opportunistic) |
| ``stowage_release_to_bind_seconds`` | histogram | | release (pod created / gate removed) → ``PodScheduled`` |
| ``stowage_estimate_ratio`` | histogram | source | a finished task's estimate ÷ its actual run time, per source |
| ``stowage_held_pods`` | gauge | queue, reason | held tasks by why: share, quota, room, sample, draining |
| ``stowage_pass_errors_total`` | counter | stage | dispatch passes that did not complete, by the stage that failed |
| ``stowage_last_pass_age_seconds`` | gauge | | seconds since the last dispatch pass completed |
| ``stowage_bad_objects_total`` | counter | kind | Jobs failed, gated pods held, bound pods and nodes read in part |
| ``stowage_promotion_enabled`` | gauge | | 1 when running opportunistic pods are promoted in place (pods resize) |
| ``stowage_promotions_total`` | counter | | running opportunistic pods promoted to regular in place |
| ``stowage_queue_predicted_wait_seconds`` | gauge | queue, job | until its first / last pending work starts |
| ``stowage_forecast_seconds`` | histogram | | CPU seconds of one forecast refresh (off the pass) |
| ``stowage_forecast_error_ratio`` | histogram | queue | first predicted finish's error ÷ JCT, at success |

The queue gauges are computed at scrape time from the last numbers the dispatch loop published
(:meth:`OperatorMetrics.publish_queues`, :meth:`OperatorMetrics.publish_holds`), so a deleted queue's series
disappear with it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from stowage.kube.records import parse_timestamp
from stowage.labels import DEFAULT_QUEUE, LABEL_QUEUE, METRICS, PodClass
from stowage.metrics_server import CountsCollector, MetricsServer, Probe
from stowage.model import Pool
from stowage.policy.estimates import SOURCE_NAMES
from stowage.policy.holding import REASONS

__all__ = ["BAD_OBJECT_KINDS", "PASS_STAGES", "WAIT_KINDS", "OperatorMetrics", "QueueNumbers", "serve"]

#: Where a dispatch pass can stop (``stowage_pass_errors_total{stage}``): reading the caches into plans, writing
#: the Jobs' status, learning from finished tasks, building the view, deciding, releasing, publishing the Queues'
#: numbers and holds, saving the learned state. Per-object failures do not stop a pass (they fail the object).
PASS_STAGES = ("plan", "apply", "learn", "view", "decide", "release", "publish", "state")
BAD_OBJECT_KINDS = ("job", "pod", "node")
#: What waited in ``stowage_queue_wait_seconds{kind}``: a Stowage Job (until its first task's release) or a plain
#: pod (until its gate is removed).
WAIT_KINDS = ("job", "pod")
#: Jobs whose first release was observed, kept to this many (oldest forgotten first): a Job's later tasks of the
#: same pass, before its status says it started, are not counted again.
_WAITED_JOBS_KEPT = 100_000

# Jobs run seconds to days.
_JOB_BUCKETS = (10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, float("inf"))
# A released pod waits for kube-scheduler (and the extender for opportunistic pods): milliseconds to minutes.
_BIND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))
# Queue wait: seconds on a free cluster, hours to a day behind a backlog.
_WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, float("inf"))
# Estimate ÷ actual: 1 is exact; below it the task ran longer than estimated, above it shorter.
_RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0, 10.0, float("inf"))
# A forecast refresh: milliseconds on a small cluster, seconds at 1,000 pending Jobs on 500 nodes.
_FORECAST_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, float("inf"))
# The forecast's error as a fraction of a Job's completion time (bench_stock's measure; the target 0.2).
_ERROR_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, float("inf"))


@dataclass(frozen=True, slots=True)
class QueueNumbers:
    """One queue's numbers, as the dispatcher computed them for one pass."""

    name: str
    dominant_share: Mapping[str, float]  # pool → weighted dominant share
    fair_share: float
    allocated: Mapping[str, Mapping[str, float]]  # pool → resource → amount
    pending_tasks: int
    running_tasks: int
    pending_jobs: int = 0
    running_jobs: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)
    quota_used: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # pool → resource → alloc/quota
    usage: Mapping[str, float] = field(default_factory=dict)  # pool → decayed usage (fraction of the pool)
    usage_target: Mapping[str, float] = field(default_factory=dict)  # pool → fairness.usage_targets
    pending_pods: Sequence[Mapping[str, Any]] = ()  # the gated plain pods' forecast (forecasting.pod_entry)


class _QueueCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: tuple[QueueNumbers, ...] = ()

    def set(self, queues: Sequence[QueueNumbers]) -> None:
        with self._lock:
            self._queues = tuple(queues)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            queues = self._queues
        dominant = GaugeMetricFamily(METRICS.QUEUE_DOMINANT_SHARE,
                                     "Weighted dominant share max_r(alloc_r/total_r)/weight, per pool",
                                     labels=["queue", "pool"])
        fair = GaugeMetricFamily(METRICS.QUEUE_FAIR_SHARE,
                                 "Dominant share the queue is entitled to among the queues with work",
                                 labels=["queue"])
        allocated = GaugeMetricFamily(METRICS.QUEUE_ALLOCATED,
                                      "Resources held by the queue's running tasks (cores, bytes, bytes/s)",
                                      labels=["queue", "pool", "resource"])
        pending = GaugeMetricFamily(METRICS.QUEUE_PENDING_TASKS, "Tasks waiting for the dispatcher",
                                    labels=["queue"])
        usage = GaugeMetricFamily(METRICS.QUEUE_USAGE, "Dominant share averaged with the usage half-life, per pool",
                                  labels=["queue", "pool"])
        target = GaugeMetricFamily(METRICS.QUEUE_USAGE_TARGET,
                                   "The decayed usage the queue's weight entitles it to among the queues with work",
                                   labels=["queue", "pool"])
        for q in queues:
            for pool in Pool:
                dominant.add_metric([q.name, pool.value], float(q.dominant_share.get(pool.value, 0.0)))
                usage.add_metric([q.name, pool.value], float(q.usage.get(pool.value, 0.0)))
                target.add_metric([q.name, pool.value], float(q.usage_target.get(pool.value, 0.0)))
                for resource, amount in sorted((q.allocated.get(pool.value) or {}).items()):
                    allocated.add_metric([q.name, pool.value, resource], float(amount))
            fair.add_metric([q.name], float(q.fair_share))
            pending.add_metric([q.name], float(q.pending_tasks))
        yield from (dominant, fair, allocated, pending, usage, target)


class _HeldCollector(Collector):
    """``stowage_held_pods{queue,reason}``: every reason of every queue (0 included), so sums need no ``or``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], int] = {}
        self._queues: tuple[str, ...] = ()

    def set(self, held: Mapping[tuple[str, str], int], queues: Iterable[str]) -> None:
        with self._lock:
            self._held = dict(held)
            self._queues = tuple(sorted({*queues, *(q for q, _ in held)}))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            held, queues = self._held, self._queues
        family = GaugeMetricFamily(METRICS.HELD_PODS, "Tasks the dispatcher holds (gated plain pods and Jobs' "
                                   "unreleased tasks), by queue and reason (share, quota, room, sample, draining)",
                                   labels=["queue", "reason"])
        for q in queues:
            for reason in REASONS:
                family.add_metric([q, reason], float(held.get((q, reason), 0)))
        yield family


class _BadObjects:
    """The Jobs failed and the gated pods held because they could not be read (:meth:`inc`), plus what the cluster
    model left out or read in part (``model``: its ``bad_objects_total``): ``stowage_bad_objects_total{kind}``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._own = dict.fromkeys(BAD_OBJECT_KINDS, 0)
        self.model: Callable[[], Mapping[str, int]] = dict

    def inc(self, kind: str) -> None:
        with self._lock:
            self._own[kind] += 1

    def counts(self) -> dict[str, int]:
        model = self.model()
        with self._lock:
            return {kind: n + int(model.get(kind, 0)) for kind, n in self._own.items()}

    def count(self, kind: str) -> int:
        return self.counts()[kind]


class OperatorMetrics:
    """Every operator metric in one registry (one per runtime, so tests can run several)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._queues = _QueueCollector()
        self.registry.register(self._queues)
        self._held = _HeldCollector()
        self.registry.register(self._held)
        self.job_completion = Histogram(
            METRICS.JOB_COMPLETION_SECONDS, "Seconds from a Job's creation to its completion (Succeeded)",
            ["queue"], buckets=_JOB_BUCKETS, registry=self.registry)
        self.queue_wait = Histogram(
            METRICS.QUEUE_WAIT_SECONDS, "Seconds from submission (a Job's or a plain pod's creation) to the "
            "dispatcher's first release of its work (a Job's first task, a plain pod's gate), by queue and kind",
            ["queue", "kind"], buckets=_WAIT_BUCKETS, registry=self.registry)
        self._waited: OrderedDict[Any, None] = OrderedDict()
        self._waited_lock = threading.Lock()
        self.dispatch = Counter(
            METRICS.DISPATCH_TOTAL.removesuffix("_total"), "Tasks released by the dispatcher, by the class given",
            ["class"], registry=self.registry)
        for pod_class in PodClass:  # both series from the start: rate() needs them
            self.dispatch.labels(pod_class.value)
        self.release_to_bind = Histogram(
            METRICS.RELEASE_TO_BIND_SECONDS, "Seconds from the dispatcher's release to the pod's PodScheduled",
            buckets=_BIND_BUCKETS, registry=self.registry)
        self.estimate_ratio = Histogram(
            METRICS.ESTIMATE_RATIO, "A finished task's estimated duration (at the dispatcher's last decision) divided "
            "by its actual run time, by the estimate's source", ["source"], buckets=_RATIO_BUCKETS,
            registry=self.registry)
        for source in SOURCE_NAMES:  # every source's series from the start: rate() needs them
            self.estimate_ratio.labels(source)
        self.pass_errors = Counter(
            METRICS.PASS_ERRORS_TOTAL.removesuffix("_total"), "Dispatch passes that did not complete, by the stage "
            "that failed (the next pass starts again from the caches)", ["stage"], registry=self.registry)
        for stage in PASS_STAGES:
            self.pass_errors.labels(stage)
        self.last_pass_age = Gauge(
            METRICS.LAST_PASS_AGE, "Seconds since the last dispatch pass completed (+Inf: none yet)",
            registry=self.registry)
        self.last_pass_age.set(float("inf"))
        self.bad_objects = _BadObjects()
        self.registry.register(CountsCollector(
            METRICS.BAD_OBJECTS_TOTAL.removesuffix("_total"), "Objects that could not be read, each counted once: "
            "Jobs failed, gated pods held, bound pods and nodes read in part or left out of the cluster model",
            "kind", self.bad_objects.counts))

        self.promotion_enabled = Gauge(
            METRICS.PROMOTION_ENABLED, "1 when the operator promotes running opportunistic pods in place (the cluster "
            "can resize pods: Kubernetes 1.33+, or the feature gate InPlacePodVerticalScaling), else 0",
            registry=self.registry)
        self.promotions = Counter(
            METRICS.PROMOTIONS_TOTAL.removesuffix("_total"), "Running opportunistic pods promoted to regular in "
            "place (requests restored, class regular)", registry=self.registry)
        self.predicted_wait = Gauge(
            METRICS.QUEUE_PREDICTED_WAIT, "Seconds from now until the queue's first / last pending Job or gated pod "
            "is predicted to start (the forecast, docs/operator.md 'When will it run')", ["queue", "job"],
            registry=self.registry)
        self.forecast_seconds = Histogram(
            METRICS.FORECAST_SECONDS, "CPU seconds of one forecast refresh (off the dispatch pass)",
            buckets=_FORECAST_BUCKETS, registry=self.registry)
        self.forecast_error = Histogram(
            METRICS.FORECAST_ERROR, "At a Job's success: |its finish − the first finish the forecast predicted for "
            "it| divided by its completion time (creation → finish), by queue", ["queue"],
            buckets=_ERROR_BUCKETS, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def publish_queues(self, queues: Sequence[QueueNumbers]) -> None:
        self._queues.set(queues)
        for numbers in queues:  # each queue's completion series from the start: rate() sees its first Job
            self.job_completion.labels(numbers.name)
            self.forecast_error.labels(numbers.name)
            for kind in WAIT_KINDS:
                self.queue_wait.labels(numbers.name, kind)

    def observe_job_release(self, job: Mapping[str, Any], now: float) -> None:
        """A task of ``job`` was released at ``now`` (epoch seconds): its queue wait, if this is the Job's first.

        A Job whose status has a ``startTime`` was released before (by this operator or one before a restart);
        one released earlier in this pass is remembered by uid until its status says so.
        """
        meta = job.get("metadata") or {}
        if (job.get("status") or {}).get("startTime"):
            return
        key = meta.get("uid") or (meta.get("namespace"), meta.get("name"))
        with self._waited_lock:
            if key in self._waited:
                return
            self._waited[key] = None
            if len(self._waited) > _WAITED_JOBS_KEPT:
                self._waited.popitem(last=False)
        queue = str((job.get("spec") or {}).get("queue") or DEFAULT_QUEUE)
        self._observe_wait(queue, "job", meta.get("creationTimestamp"), now)

    def observe_pod_release(self, pod: Mapping[str, Any], now: float) -> None:
        """A plain pod's gate was removed at ``now`` (epoch seconds): its queue wait since its creation."""
        meta = pod.get("metadata") or {}
        queue = str((meta.get("labels") or {}).get(LABEL_QUEUE) or DEFAULT_QUEUE)
        self._observe_wait(queue, "pod", meta.get("creationTimestamp"), now)

    def _observe_wait(self, queue: str, kind: str, created: Any, now: float) -> None:
        submitted = parse_timestamp(created)
        if submitted is not None:
            self.queue_wait.labels(queue, kind).observe(max(now - submitted, 0.0))

    def publish_predicted_waits(self, waits: Mapping[str, tuple[float, float]]) -> None:
        """queue → (seconds until its first, its last pending work is predicted to start); a queue left out has no
        series (nothing pending, or nothing predicted to start within the horizon)."""
        self.predicted_wait.clear()
        for queue, (first, last) in sorted(waits.items()):
            self.predicted_wait.labels(queue, "first").set(first)
            self.predicted_wait.labels(queue, "last").set(last)

    def publish_holds(self, held: Mapping[tuple[str, str], int], queues: Iterable[str]) -> None:
        """(queue, reason) → held tasks at the last pass; ``queues``: every known queue (their zeros are shown)."""
        self._held.set(held, queues)


def serve(metrics: OperatorMetrics, host: str, port: int, ready: Probe | None = None) -> MetricsServer:
    """``GET /metrics``, ``/healthz`` (the process answers) and ``/readyz`` (``ready``; None: always) on
    ``host:port`` (0: any free port), started on a daemon thread."""
    probes: dict[str, Probe] = {"/healthz": lambda: (True, "ok\n")}
    probes["/readyz"] = ready or probes["/healthz"]
    return MetricsServer(metrics.render, probes, host, port).start()
