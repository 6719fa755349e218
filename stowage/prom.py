"""Node utilization from Prometheus' HTTP API (``/api/v1/query``), refreshed in the background.

The node monitor exports ``stowage_node_usage``, ``stowage_node_capacity``,
``stowage_node_blocked`` and ``stowage_node_contention``, each labelled
``{node, resource}``, ``stowage_node_sample_time_seconds{node}`` and
``stowage_pod_usage{node, namespace, pod, class, resource}`` (names from
:class:`stowage.labels.METRICS`). Every refresh makes eight instant queries:

1. usage smoothed over a window, ``max_over_time(stowage_node_usage[W])`` (``W`` =
   ``harvest.usage_window_s``): a pod's lifetime decision should not rest on one
   1-second rate; capacity in full; blocked and contention where non-zero;
2. ``time() - stowage_node_sample_time_seconds``: how old the newest sample is. Staleness
   is judged by when the monitor *sampled*, not when Prometheus scraped: a monitor whose
   sampler is stuck keeps being scraped with the same old numbers, and its sample time
   says so. Node clocks are NTP-synchronised; a second of skew is small against the 30 s
   limit. The sample's own time (evaluation time − age) says which pods it includes
   (``policy.harvest.in_sample``: the allowance ``S`` ends there);
3. the pods that have finished: per node, the sum of the windowed usage of the pods whose
   ``stowage_pod_usage`` series were in the window but are gone now (the node monitor stops
   exporting a pod when its cgroup goes, and Prometheus marks the series stale), and the
   node's latest usage sample where there are such pods. A finished pod then leaves ``U`` at once
   (``policy.room.usage_after_departures``) instead of staying for the window. Both are reduced
   by Prometheus: a refresh reads one row per (node, resource) with a departure, never a row per
   pod.

4. each pod's sustained disk and network use (``policy.use_estimates``): its ``stowage_pod_usage`` averaged
   over ``estimates.bandwidth_window_s``, the highest such average over the last :data:`PEAK_LOOKBACK_S`
   (a subquery at the chart's 5 s scrape interval), pods that finished within it included. One row per pod
   that declares or uses bandwidth; :meth:`UtilizationSnapshot.use_peak` gives a task group's (the highest
   of its pods': a Job's task pods are named ``<job>-<group>-<index>[-r<attempt>]``).

Scrape interval: the age a reader sees is at most scrape interval + refresh interval
(5 s) + the sample period (1 s); the 30 s limit (``harvest.utilization_stale_after_s``)
needs a scrape interval of 10 s or less, and the chart sets 5 s.

Fail safe (DESIGN.md): a failed refresh yields a snapshot with ``error`` set and no
nodes; readers then treat every node as having no fresh samples, i.e. it harvests
nothing. Regular scheduling never depends on this module.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import orjson

from stowage.labels import LABEL_JOB, METRICS, task_group
from stowage.policy import room

__all__ = ["PEAK_LOOKBACK_S", "NodeSamples", "PrometheusError", "PrometheusReader", "Utilization",
           "UtilizationSnapshot", "index_peaks", "peak_query", "use_key"]

log = logging.getLogger(__name__)

_SERIES = (METRICS.NODE_USAGE, METRICS.NODE_CAPACITY, METRICS.NODE_BLOCKED, METRICS.NODE_CONTENTION)
#: How far back a pod's sustained use is remembered: the finished tasks of a phase keep informing its estimate
#: this long after they leave (Prometheus keeps their series; ``policy.use_estimates``).
PEAK_LOOKBACK_S = 600
_BANDWIDTH = ("disk", "network")
_TASK_POD = re.compile(r"(.+)-[0-9]+(?:-r[0-9]+)?")  # <job>-<group>-<index>[-r<attempt>] (operator.task_names)


def peak_query(window_s: float, lookback_s: float = PEAK_LOOKBACK_S, step_s: float = 5.0) -> str:
    """PromQL: per (namespace, pod, resource), the highest ``window_s`` average of the pod's disk and network
    use over the last ``lookback_s`` (``policy.use_estimates.sustained_peak``)."""
    pod, res = METRICS.POD_USAGE, "|".join(_BANDWIDTH)
    return (f"max by (namespace, pod, resource) (max_over_time(avg_over_time({pod}{{resource=~\"{res}\"}}"
            f"[{max(1, round(window_s))}s])[{round(lookback_s)}s:{max(1, round(step_s))}s]))")


def index_peaks(pod_peaks: Mapping[tuple[str, str], Mapping[str, float]]) -> dict[tuple[str, str], dict[str, float]]:
    """Each pod's sustained use under its own name and, the highest per resource, under its task group's
    ``<job>-<group>`` (a name of the form ``<job>-<group>-<index>[-r<attempt>]``)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for (namespace, pod), values in pod_peaks.items():
        task = _TASK_POD.fullmatch(pod)
        for key in ((namespace, pod), *(((namespace, task.group(1)),) if task else ())):
            into = out.setdefault(key, {})
            for r, v in values.items():
                into[r] = max(into.get(r, v), v)
    return out


def use_key(namespace: str, name: str, pod_labels: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The key :meth:`UtilizationSnapshot.use_peak` knows a pod's task group by: ``(namespace, "<job>-<group>")``
    for a Job's task pod (labels ``stowage.io/job``, ``stowage.io/task-group``), else ``(namespace, name)``."""
    job = (pod_labels or {}).get(LABEL_JOB)
    group = task_group({"metadata": {"labels": pod_labels or {}}})
    return (namespace, f"{job}-{group}") if job and group else (namespace, name)


#: Series names of the two departure queries (not metric names: keys of :meth:`PrometheusReader.fetch`'s arrays).
_DEPARTED, _LATEST = "departed", "latest"


def departed_query(window: str) -> str:
    """PromQL: per (node, resource), the summed usage over ``window`` of the pods whose ``stowage_pod_usage``
    series had samples in it but have none now (the pod finished or was deleted: the node monitor stopped
    exporting it). Reduced by Prometheus, so the answer has a row per node with a departure, not per pod; a pod
    whose ``class`` label changed (a promotion) is matched without it, so it does not look gone."""
    pod = METRICS.POD_USAGE
    per_pod = "node, namespace, pod, resource"
    return (f"sum by (node, resource) (max by ({per_pod}) (max_over_time({pod}[{window}]))"
            f" unless on ({per_pod}) {pod})")


class PrometheusError(Exception):
    """Prometheus could not be reached or answered with an error; the message says which."""


@dataclass(frozen=True, slots=True)
class NodeSamples:
    """Samples of the nodes of one request, lined up with its node order and resource axis.

    ``present`` (N,) False where Prometheus has no usage sample for the node; ``age_s`` (N,)
    seconds since the oldest usage sample of the node (inf where absent); ``sampled_at_s`` (N,) when it was
    taken (Unix seconds; NaN where absent or unknown); ``usage`` (N,R) in base
    units, NaN where absent (unknown usage harvests nothing); ``capacity``, ``blocked`` (N,R)
    (0 where absent); ``contention`` (N,R)
    True where the node monitor reports sustained contention.
    """

    present: np.ndarray
    age_s: np.ndarray
    usage: np.ndarray
    capacity: np.ndarray
    blocked: np.ndarray
    contention: np.ndarray
    error: str | None
    sampled_at_s: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class UtilizationSnapshot:
    """One refresh's worth of samples: ``index`` maps node name → row; arrays are (M,R)."""

    resources: tuple[str, ...] = ()
    index: dict[str, int] = field(default_factory=dict)
    usage: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    capacity: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    blocked: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    contention: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    age_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fetched_at_s: float = 0.0  # monotonic clock of the reader
    error: str | None = "no utilization fetched yet"
    sampled_at_s: np.ndarray | None = None  # (M,) when each node's sample was taken (Unix seconds); None: unknown
    use_peaks: Mapping[tuple[str, str], Mapping[str, float]] = field(default_factory=dict)
    """:func:`index_peaks` of query 4: (namespace, pod or ``<job>-<group>``) → resource → sustained use."""

    def use_peak(self, key: tuple[str, str]) -> Mapping[str, float] | None:
        """The highest sustained use of the pods :func:`use_key` names ``key`` (a task group's, or one plain
        pod's), per bandwidth resource; None: none seen (within :data:`PEAK_LOOKBACK_S`)."""
        return self.use_peaks.get(key)

    @classmethod
    def unavailable(cls, error: str, fetched_at_s: float = 0.0) -> UtilizationSnapshot:
        return cls(error=error, fetched_at_s=fetched_at_s)

    @classmethod
    def from_nodes(
        cls,
        nodes: Mapping[str, Mapping[str, Mapping[str, float]]],
        *,
        age_s: float | Mapping[str, float] = 0.0,
        fetched_at_s: float = 0.0,
        wall_s: float | None = None,
    ) -> UtilizationSnapshot:
        """Build a snapshot from plain values (bench, simulations, tests).

        ``nodes[node][kind][resource]`` with ``kind`` one of ``usage``, ``capacity``,
        ``blocked``, ``contention`` (0/1); ``age_s`` per node or for all. ``wall_s``: the
        Unix time the ages are measured at (each sample was taken at ``wall_s − age``); None:
        sample times unknown (no pod is known to be in a sample).
        """
        names = list(nodes)
        resources = sorted({r for kinds in nodes.values() for values in kinds.values() for r in values})
        col = {r: j for j, r in enumerate(resources)}
        arrays = {k: np.zeros((len(names), len(resources))) for k in ("usage", "capacity", "blocked", "contention")}
        for i, name in enumerate(names):
            for kind, values in nodes[name].items():
                for resource, value in values.items():
                    arrays[kind][i, col[resource]] = value
        ages = np.array([age_s.get(n, np.inf) if isinstance(age_s, Mapping) else age_s for n in names], dtype=float)
        return cls(
            resources=tuple(resources),
            index={n: i for i, n in enumerate(names)},
            usage=arrays["usage"],
            capacity=arrays["capacity"],
            blocked=arrays["blocked"],
            contention=arrays["contention"] >= 0.5,
            age_s=ages,
            fetched_at_s=fetched_at_s,
            error=None,
            sampled_at_s=None if wall_s is None else wall_s - ages,
        )

    def lookup(self, names: Sequence[str], resources: Sequence[str], now_s: float) -> NodeSamples:
        """The rows of ``names`` in ``resources`` order; ``now_s`` on the same monotonic clock as fetch."""
        rows = np.fromiter(map(self.index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
        return self.lookup_rows(rows, resources, now_s)

    def lookup_rows(self, rows: np.ndarray, resources: Sequence[str], now_s: float) -> NodeSamples:
        """Like :meth:`lookup` with the rows of ``index`` already resolved (−1 = no samples)."""
        n, r = rows.shape[0], len(resources)
        present = rows >= 0
        cols = np.array([self.resources.index(x) if x in self.resources else -1 for x in resources], dtype=np.int64)
        have_col = cols >= 0
        if self.age_s.shape[0] == 0:
            zeros = np.zeros((n, r))
            return NodeSamples(present, np.full(n, np.inf), zeros, zeros, zeros, zeros.astype(bool), self.error,
                               np.full(n, np.nan))
        safe = np.where(present, rows, 0)
        flat = safe[:, None] * max(len(self.resources), 1) + np.where(have_col, cols, 0)[None, :]
        missing = ~(present[:, None] & have_col[None, :])

        def take(a: np.ndarray, fill: Any) -> np.ndarray:
            out = a.reshape(-1)[flat]
            out[missing] = fill
            return out

        age = np.where(present, self.age_s[safe] + max(0.0, now_s - self.fetched_at_s), np.inf)
        sampled = (np.where(present, self.sampled_at_s[safe], np.nan) if self.sampled_at_s is not None
                   else np.full(n, np.nan))
        return NodeSamples(
            present=present,
            age_s=age,
            usage=take(self.usage, np.nan),
            capacity=take(self.capacity, 0.0),
            blocked=take(self.blocked, 0.0),
            contention=take(self.contention, False),
            error=self.error,
            sampled_at_s=sampled,
        )


class PrometheusReader:
    """Instant queries against one Prometheus server."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 2.0,
        usage_window_s: float = 15.0,
        bandwidth_window_s: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.usage_window_s = usage_window_s
        self.bandwidth_window_s = bandwidth_window_s
        self._client = client or httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def query(self, promql: str) -> tuple[float, list[dict[str, Any]]]:
        """``(evaluation time, result vector)``; raises :class:`PrometheusError` naming the cause."""
        url = f"{self.base_url}/api/v1/query"
        try:
            response = self._client.get(url, params={"query": promql})
        except httpx.HTTPError as exc:
            raise PrometheusError(f"Prometheus at {self.base_url} unreachable: {type(exc).__name__}: {exc}") from exc
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise PrometheusError(
                f"Prometheus at {self.base_url} sent a non-JSON answer (HTTP {response.status_code})"
            ) from exc
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(
                f"Prometheus at {self.base_url} rejected {promql!r}: HTTP {response.status_code}, "
                f"{body.get('errorType')}: {body.get('error')}"
            )
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise PrometheusError(f"Prometheus answered {promql!r} with a {data.get('resultType')}, expected a vector")
        result = data.get("result") or []
        evaluated = float(result[0]["value"][0]) if result else time.time()
        return evaluated, result

    def fetch(self, fetched_at_s: float) -> UtilizationSnapshot:
        """The queries, folded into one snapshot. Raises :class:`PrometheusError`.

        Blocked and contention are asked for only where non-zero (``> 0``): on a large
        cluster almost every one of those series is 0, and parsing them would cost the
        extender CPU every refresh for nothing.
        """
        series: list[tuple[str, dict[str, Any]]] = []
        window = f"{max(1, round(self.usage_window_s))}s"
        for name, promql in (
            (METRICS.NODE_USAGE, f"max_over_time({METRICS.NODE_USAGE}[{window}])"),
            (METRICS.NODE_CAPACITY, METRICS.NODE_CAPACITY),
            (METRICS.NODE_BLOCKED, f"{METRICS.NODE_BLOCKED} > 0"),
            (METRICS.NODE_CONTENTION, f"{METRICS.NODE_CONTENTION} > 0"),
            (_DEPARTED, departed_query(window)),
            (_LATEST, f"{METRICS.NODE_USAGE} and on (node, resource) ({departed_query(window)})"),
        ):
            series.extend((name, sample) for sample in self.query(promql)[1])
        evaluated, ages = self.query(f"time() - {METRICS.SAMPLE_TIME}")
        peaks: dict[tuple[str, str], dict[str, float]] = {}
        for sample in self.query(peak_query(self.bandwidth_window_s))[1]:
            labels = sample.get("metric") or {}
            namespace, pod, resource = labels.get("namespace"), labels.get("pod"), labels.get("resource")
            try:
                value = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if namespace and pod and resource in _BANDWIDTH and np.isfinite(value) and value >= 0:
                peaks.setdefault((namespace, pod), {})[resource] = value
        nodes: dict[str, int] = {}
        resources: dict[str, int] = {}
        values: dict[tuple[str, int, int], float] = {}
        for name, sample in series:
            labels = sample.get("metric") or {}
            node, resource = labels.get("node"), labels.get("resource")
            if not node or not resource:
                continue
            i = nodes.setdefault(node, len(nodes))
            j = resources.setdefault(resource, len(resources))
            try:
                value = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if not np.isfinite(value):
                continue
            key = (name, i, j)
            values[key] = max(values.get(key, value), value)  # duplicate scrapes: keep the larger
        shape = (len(nodes), len(resources))
        arrays = {name: np.zeros(shape) for name in (*_SERIES, _DEPARTED)}
        # A usage series that is absent (the monitor's first sample, a counter reset) is unknown, not 0:
        # reading it as 0 would harvest that resource as if the node were idle.
        arrays[METRICS.NODE_USAGE] = np.full(shape, np.nan)
        arrays[_LATEST] = np.full(shape, np.nan)
        for (name, i, j), value in values.items():
            if name in arrays:
                arrays[name][i, j] = value
        # A pod that has finished leaves U now, not when it leaves the window.
        arrays[METRICS.NODE_USAGE] = room.usage_after_departures(
            arrays[METRICS.NODE_USAGE], arrays[_DEPARTED], arrays[_LATEST])
        present = np.zeros(len(nodes), dtype=bool)
        age = np.full(len(nodes), np.inf)
        newest: dict[str, float] = {}
        for sample in ages:
            node = (sample.get("metric") or {}).get("node")
            try:
                sample_age = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if node in nodes and np.isfinite(sample_age):
                # two scrape jobs may carry the same monitor: the newest sample counts
                newest[node] = min(newest.get(node, np.inf), max(0.0, sample_age))
        for node, sample_age in newest.items():
            present[nodes[node]] = True
            age[nodes[node]] = sample_age
        # Nodes with capacity but no usage sample stay out of the index: they have no utilization.
        keep = np.flatnonzero(present)
        names = [n for n, i in sorted(nodes.items(), key=lambda kv: kv[1]) if present[i]]
        return UtilizationSnapshot(
            resources=tuple(sorted(resources, key=resources.__getitem__)),
            index={name: k for k, name in enumerate(names)},
            usage=arrays[METRICS.NODE_USAGE][keep],
            capacity=arrays[METRICS.NODE_CAPACITY][keep],
            blocked=arrays[METRICS.NODE_BLOCKED][keep],
            contention=arrays[METRICS.NODE_CONTENTION][keep] >= 0.5,
            age_s=age[keep],
            fetched_at_s=fetched_at_s,
            error=None,
            sampled_at_s=evaluated - age[keep],
            use_peaks=index_peaks(peaks),
        )


class Utilization:
    """The latest :class:`UtilizationSnapshot`, refreshed every ``interval_s`` on a daemon thread."""

    def __init__(
        self,
        reader: PrometheusReader | None,
        *,
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        on_refresh: Callable[[UtilizationSnapshot], None] | None = None,
        initial: UtilizationSnapshot | None = None,
    ) -> None:
        self._reader = reader
        self.interval_s = float(interval_s)
        self.clock = clock
        self._on_refresh = on_refresh
        self._snapshot = initial or UtilizationSnapshot.unavailable(
            "no Prometheus URL configured" if reader is None else "no utilization fetched yet", clock()
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> UtilizationSnapshot:
        return self._snapshot

    def replace(self, snapshot: UtilizationSnapshot) -> None:
        """Install a snapshot directly (a feed without Prometheus: simulator, benchmark, tests)."""
        self._snapshot = snapshot

    def refresh(self) -> UtilizationSnapshot:
        """Fetch once; on failure the snapshot becomes ``unavailable`` (every node harvests nothing)."""
        if self._reader is None:
            return self._snapshot
        now = self.clock()
        try:
            snapshot = self._reader.fetch(now)
        except PrometheusError as exc:
            if self._snapshot.error is None:
                log.warning("utilization unavailable, harvesting paused: %s", exc)
            snapshot = UtilizationSnapshot.unavailable(str(exc), now)
        self._snapshot = snapshot
        if self._on_refresh is not None:
            self._on_refresh(snapshot)
        return snapshot

    def start(self) -> Utilization:
        self._thread = threading.Thread(target=self._run, name="utilization", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # the loop must survive anything; the snapshot says unavailable
                log.exception("utilization refresh failed")
                self._snapshot = UtilizationSnapshot.unavailable("internal error while refreshing", self.clock())
            self._stop.wait(self.interval_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._reader is not None:
            self._reader.close()
