"""The node monitor's loop: sample → summarise → decide → publish, once per interval.

``tick()`` is one iteration:

1. ``sampler.sample()`` reads the cgroup tree, ``/proc/net/dev`` and each pod's ``/proc/<pid>/net/dev``
   (the only I/O on /sys, /proc; pods the API marks ``hostNetwork`` are not looked up);
2. :func:`~stowage.node_monitor.summary.summarise` turns two samples into usage rates (pure);
3. :func:`stowage.policy.contention.step` advances the sustained-threshold detector (pure);
4. on ``relieve``: :func:`stowage.policy.contention.choose_victims` picks opportunistic pods
   (pure), the :class:`~stowage.node_monitor.eviction.Evictor` requests their eviction
   (the only API-server writes), trying the next victim when a PDB answers 429;
5. the metrics snapshot is replaced.

Pods whose eviction was requested stay "pending" for their termination grace
period plus two intervals: their usage is subtracted from the projected node
usage and they are not chosen again, so one contention never evicts more than
it needs while the evicted pods are still shutting down.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from stowage.node_monitor.capacity import capacity_array
from stowage.node_monitor.eviction import Evictor, Outcome, Pressure, human
from stowage.node_monitor.metrics import NodeMetrics, PodRow, Snapshot
from stowage.node_monitor.pods import PodInfo, PodStore
from stowage.node_monitor.sampling import RawSample, Sampler
from stowage.node_monitor.summary import RESOURCES, Usage, summarise

from stowage.config import ContentionSettings
from stowage.policy import contention
from stowage.resources import ResourceVector

__all__ = ["NodeMonitor", "TickReport"]

log = logging.getLogger("stowage.node_monitor")


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick saw and did (for logs, tests and benchmarks)."""

    usage: Usage
    capacity: np.ndarray
    decision: contention.ContentionDecision
    outcomes: list[tuple[PodInfo, Outcome]] = field(default_factory=list)
    sample_seconds: float = 0.0


class NodeMonitor:
    """One node's monitor. ``pods``/``evictor`` are ``None`` without Kubernetes (measure and publish only)."""

    def __init__(
        self,
        node: str,
        sampler: Sampler,
        settings: ContentionSettings,
        metrics: NodeMetrics,
        pods: PodStore | None = None,
        evictor: Evictor | None = None,
        capacity_flags: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.sampler = sampler
        self.settings = settings
        self.metrics = metrics
        self.pods = pods
        self.evictor = evictor
        self.capacity_flags = ResourceVector(capacity_flags or {})
        self.capacity_node = ResourceVector()
        self.state = contention.ContentionState.initial(len(RESOURCES))
        self._clock = clock
        self._wall_clock = wall_clock
        self._prev: RawSample | None = None
        self._pending: dict[str, float] = {}  # uid → monotonic time until which it counts as leaving
        self._layout_logged = ""
        self._blind = False
        metrics.declare_evictions(RESOURCES, str(settings.policy))

    # --- inputs from the API server ----------------------------------------------------------

    def set_node_capacity(self, capacity: Mapping[str, float]) -> None:
        """Capacity read from the Node object (flags still override it)."""
        self.capacity_node = ResourceVector(capacity)

    def capacity(self) -> np.ndarray:
        return capacity_array(RESOURCES, self.capacity_node, self.capacity_flags)

    # --- one iteration -----------------------------------------------------------------------

    def tick(self) -> TickReport:
        pods = self.pods.snapshot() if self.pods is not None else {}
        raw = self.sampler.sample({uid for uid, p in pods.items() if p.host_network})
        usage = summarise(self._prev, raw)
        self._prev = raw
        if usage.layout != self._layout_logged:
            log.info("cgroups: %s", usage.layout)
            self._layout_logged = usage.layout
        self._log_pod_processes(raw)
        now = raw.taken_at_s
        # Kept until the deadline even once the API object is gone: the cgroup (and its usage) can outlive it.
        self._pending = {uid: until for uid, until in self._pending.items() if until > now}
        cap = self.capacity()
        has_opp = any(p.opportunistic for p in pods.values())
        # NaN (not known yet) counts as not over: a first sample or a counter reset is no evidence of contention.
        self.state, decision = contention.step(
            self.state, np.nan_to_num(usage.node, nan=0.0), cap, now, self.settings, RESOURCES, has_opp
        )
        outcomes: list[tuple[PodInfo, Outcome]] = []
        if decision.acts and self.evictor is not None:
            outcomes = self._relieve(usage, cap, decision, pods, now)
        self.metrics.publish(self._snapshot(usage, cap, decision, pods, raw.taken_at_s), raw.duration_s)
        return TickReport(usage, cap, decision, outcomes, raw.duration_s)

    def _log_pod_processes(self, raw: RawSample) -> None:
        """Say once when pods run but none of their processes is visible (no per-pod network then)."""
        own_netns = sum(not p.host_network for p in raw.pods.values())
        if own_netns == 0:
            return
        blind = raw.pod_pids == 0
        if blind and not self._blind:
            log.warning("no process of the %d pod(s) on %s is visible in their cgroup.procs: per-pod network is "
                        "not measured (the DaemonSet needs hostPID: true; pods starting up have none yet)",
                        own_netns, self.node)
        elif self._blind and not blind:
            log.info("pod processes visible: per-pod network measured")
        self._blind = blind

    def _relieve(
        self,
        usage: Usage,
        cap: np.ndarray,
        decision: contention.ContentionDecision,
        pods: Mapping[str, PodInfo],
        now: float,
    ) -> list[tuple[PodInfo, Outcome]]:
        assert self.evictor is not None
        infos = [pods.get(uid) for uid in usage.pod_uids]
        pod_usage = np.nan_to_num(usage.pods, nan=0.0)
        started = np.array([i.started_at_s if i is not None else math.nan for i in infos], dtype=np.float64)
        wall_now = self._wall_clock()  # pods' start times are Unix seconds: their run time counts until now
        candidate = np.array([i is not None and i.opportunistic and i.uid not in self._pending for i in infos], bool)
        pending = np.array([uid in self._pending for uid in usage.pod_uids], dtype=bool)
        # Pods already on their way out will free their usage: project it away before choosing more.
        projected = np.nan_to_num(usage.node, nan=0.0) - pod_usage[pending].sum(axis=0)
        threshold = contention.thresholds(self.settings, RESOURCES, cap)
        counts = contention.sustained_counts(self.settings, RESOURCES)
        pressure = [
            Pressure(r, float(usage.node[k]), float(threshold[k]), float(cap[k]),
                     int(counts[k]), str(self.settings.policy))
            for k, r in enumerate(RESOURCES) if decision.relieve[k]
        ]
        ratio = np.where(threshold > 0, projected / np.where(threshold > 0, threshold, 1.0), 0.0)
        worst = RESOURCES[int(np.argmax(np.where(decision.relieve, ratio, -np.inf)))]
        outcomes: list[tuple[PodInfo, Outcome]] = []
        evicted: list[PodInfo] = []
        # Each round re-plans without the pods a PDB refused; bounded by the number of pods.
        for _ in range(len(infos) + 1):
            victims = contention.choose_victims(pod_usage, started, candidate, projected, threshold, decision.relieve,
                                                now_s=wall_now)
            if not victims:
                break
            replan = False
            for i in victims:
                info = infos[i]
                assert info is not None
                used = ", ".join(
                    f"{human(pod_usage[i, k], r)} {r}" for k, r in enumerate(RESOURCES) if decision.relieve[k]
                )
                outcome = self.evictor.evict(info, pressure, used)
                outcomes.append((info, outcome))
                candidate[i] = False
                if outcome in (Outcome.REFUSED, Outcome.FAILED, Outcome.CHANGED):
                    replan = True  # choose again: another pod must free what this one would have
                    break
                projected = projected - pod_usage[i]
                self._pending[info.uid] = now + info.grace_s + 2 * self.settings.sample_interval_s
                if outcome is not Outcome.GONE:
                    self.metrics.count_eviction(worst, str(self.settings.policy))
                    evicted.append(info)
            if not replan:
                break
        if not outcomes:
            resources = ", ".join(p.resource for p in pressure)
            if pending.any():  # evictions in flight already bring projected usage under the threshold
                log.debug("sustained contention on %s (%s) covered by %d eviction(s) in flight",
                          self.node, resources, int(pending.sum()))
            else:
                log.warning("sustained contention on %s (%s) but no opportunistic pod to evict", self.node, resources)
        self.evictor.node_event(evicted, pressure)
        return outcomes

    def _snapshot(
        self,
        usage: Usage,
        cap: np.ndarray,
        decision: contention.ContentionDecision,
        pods: Mapping[str, PodInfo],
        taken_at_s: float,
    ) -> Snapshot:
        now = self._clock()
        rows = []
        for k, uid in enumerate(usage.pod_uids):
            info = pods.get(uid)
            if info is not None:
                rows.append(PodRow(info.namespace, info.name, info.class_label, usage.pods[k]))
            else:
                # Not (yet) known to the API server, or running without Kubernetes: name it by uid.
                rows.append(PodRow("", uid, "unknown", usage.pods[k]))
        return Snapshot(
            resources=RESOURCES,
            usage=usage.node,
            capacity=np.where(cap > 0, cap, np.nan),
            contention=decision.sustained.astype(np.float64),
            blocked=np.asarray(decision.blocked, dtype=np.float64),
            pods=tuple(rows),
            at_monotonic_s=now,
            # the sample's wall-clock time: now on the wall clock, less how long ago (monotonic) it was read
            sampled_at_unix_s=time.time() - max(0.0, now - taken_at_s),
        )

    # --- the loop ----------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event,
        max_ticks: int | None = None,
        on_tick: Callable[[TickReport], None] | None = None,
    ) -> int:
        """Tick every ``sample_interval_s`` until ``stop`` is set (or ``max_ticks``); return ticks done.

        ``on_tick`` sees every :class:`TickReport` (benchmarks time reactions with it).
        """
        interval = float(self.settings.sample_interval_s)
        next_at = self._clock()
        ticks = 0
        while not stop.is_set() and (max_ticks is None or ticks < max_ticks):
            try:
                report = self.tick()
                if on_tick is not None:
                    on_tick(report)
            except Exception:  # one bad tick must not end the DaemonSet pod; the next one retries
                log.exception("node monitor tick failed")
            ticks += 1
            next_at += interval
            now = self._clock()
            if next_at < now:  # fell behind (slow disk, suspended VM): skip, never burst
                next_at = now
            stop.wait(next_at - now)
        return ticks
