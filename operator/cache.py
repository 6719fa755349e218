"""The cache: what the informers and Kopf show, and what this operator released that they do not show yet.

::

    informers (threads, stowage.kube.informer)         Kopf (asyncio, jobs.register / queues.register)
      nodes ─────────────┐                               Job events ──► JobBook
      bound pods ────────┼─► ClusterModel                Queue events ─► QueueBook
      task pods ─────────┼─► JobBook (label stowage.io/job)
      unbound pods ──────┴─► GatedPods (gate stowage.io/admission)

The writer records each release here (:meth:`Cache.released`) until the cache shows its pod, so nothing is
released twice (Kueue's "assumed" workloads). Nothing here writes to the API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.operator import jobs, queues
from stowage.operator.dispatcher import PendingGroup
from stowage.operator.metrics import OperatorMetrics

from stowage import labels
from stowage.config import StowageSettings
from stowage.kube import api
from stowage.kube.cluster import ClusterModel
from stowage.kube.informer import BOUND_PODS, Informer
from stowage.kube.records import object_name

__all__ = ["IN_FLIGHT_TTL_S", "Cache", "GatedPods", "pod_key", "task_pod"]

log = logging.getLogger(__name__)

#: A release not seen in the cache after this long is forgotten (the create answered, but the pod never
#: showed: deleted at once, or a watch that missed it); the next pass decides about the task again.
IN_FLIGHT_TTL_S = 120.0
_BIND_PENDING_TTL_S = 3600.0  # a released pod never bound is no longer waited for (release_to_bind)


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def task_pod(pod: Mapping[str, Any]) -> bool:
    """A pod a Stowage Job controls (label and controller reference)."""
    return jobs.task_pod_job(pod) is not None


# --- gated plain pods ----------------------------------------------------------------------------


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION for g in gates)


def _decided_on(pod: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What of a gated pod the dispatcher reads (``snapshot.plain_group``): labels, annotations, spec."""
    meta = pod.get("metadata") or {}
    return meta.get("labels"), meta.get("annotations"), pod.get("spec")


class GatedPods:
    """Unbound pods carrying the gate ``stowage.io/admission``, by (namespace, name). Thread-safe."""

    def __init__(self, watched: Callable[[str], bool]) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._watched = watched
        self.on_change: Callable[[], None] = lambda: None

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        fresh = {}
        for p in items:
            try:  # a pod of another shape than a Pod's is not gated by us: left out, never the whole list
                if _gated(p) and self._watched(pod_key(p)[0]):
                    fresh[pod_key(p)] = dict(p)
            except Exception as exc:
                log.warning("unbound pod %s left out: %s: %s", object_name(p), type(exc).__name__, exc)
        with self._lock:
            self._pods = fresh
        self.on_change()

    def apply_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        key = pod_key(pod)
        with self._lock:
            before = self._pods.get(key)
            if kind == "DELETED" or not _gated(pod) or (pod.get("spec") or {}).get("nodeName"):
                changed = self._pods.pop(key, None) is not None
            elif self._watched(key[0]):
                self._pods[key] = dict(pod)
                changed = before is None or _decided_on(before) != _decided_on(pod)
            else:
                changed = False
        if changed:  # a status-only change (our own stowage.io/Held condition) changes no decision: no pass
            self.on_change()

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._pods.values())

    def uids(self) -> set[str]:
        return {str((p.get("metadata") or {}).get("uid")) for p in self.pods()}


# --- the cache -----------------------------------------------------------------------------------


@dataclass
class Released:
    at: float
    job: jobs.JobKey | None  # None: a plain pod's gate was removed
    group: PendingGroup | None = None  # a plain pod's group, kept until it is bound (its demand stays reserved)
    pod_group: str | None = None  # the pod group (``stowage.io/pod-group``) a plain pod belongs to, if any


class Cache:
    """The books the informers and Kopf feed, plus the releases in flight. Thread-safe; ``poke`` on every change."""

    def __init__(self, settings: StowageSettings, client: api.KubeClient, metrics: OperatorMetrics, *,
                 namespaces: Sequence[str], clock: Callable[[], float], poke: Callable[[], None]) -> None:
        self.client = client
        self.metrics = metrics
        self.namespaces = list(namespaces)
        self.clock = clock
        self.poke = poke
        self.cluster = ClusterModel(recent_window_s=settings.harvest.ramp_up_s, clock=clock)
        self.jobs = jobs.JobBook(metrics, clock=clock, namespaces=self.namespaces or None)
        self.jobs.gang_timeout_s = settings.packing.gang_ready_timeout_s
        self.queues = queues.QueueBook(client)
        self.gated = GatedPods(self.jobs.watched)
        for book in (self.jobs, self.queues, self.gated):
            book.on_change = poke
        self._lock = threading.Lock()
        self._released: dict[tuple[str, str], Released] = {}  # (namespace, pod) → when and for whom
        self._bind_pending: dict[tuple[str, str], float] = {}  # released pods waiting for PodScheduled
        self.promoting: dict[str, float] = {}  # uid → when promoted, until the cache shows it regular

    def _pod_paths(self) -> list[str]:
        return [f"/api/v1/namespaces/{ns}/pods" for ns in self.namespaces] or [api.PODS]

    def informers(self) -> list[Informer]:
        """The informers the cache needs (unstarted): nodes, bound pods, task pods, unbound pods."""
        out = [
            Informer(self.client, api.NODES, name="nodes", on_replace=self.cluster.replace_nodes,
                     on_event=self.cluster.apply_node_event),
            # Every bound pod, whatever its namespace: the nodes' free capacity depends on all of them.
            Informer(self.client, api.PODS, name="bound-pods", on_replace=self._replace_bound,
                     on_event=self._bound_event, params={"fieldSelector": BOUND_PODS}),
        ]
        for path in self._pod_paths():
            out.append(Informer(self.client, path, name=f"task-pods{path}", on_replace=self.jobs.replace_pods,
                                on_event=self.jobs.apply_pod_event, params={"labelSelector": labels.LABEL_JOB}))
            out.append(Informer(self.client, path, name=f"unbound-pods{path}", on_replace=self.gated.replace,
                                on_event=self.gated.apply_event, params={"fieldSelector": "spec.nodeName="}))
        return out

    # --- bound pods: the cluster model + release-to-bind latency ---------------------------------

    def _replace_bound(self, items: list[dict[str, Any]]) -> None:
        self.cluster.replace_pods(items)
        for pod in items:
            self._seen_bound(pod)
        self.poke()

    def _bound_event(self, kind: str, pod: dict[str, Any]) -> None:
        self.cluster.apply_pod_event(kind, pod)
        if kind != "DELETED":
            self._seen_bound(pod)
        self.poke()

    def _seen_bound(self, pod: Mapping[str, Any]) -> None:
        key = pod_key(pod)
        with self._lock:
            released = self._bind_pending.pop(key, None)
            r = self._released.get(key)
            if r is not None and r.job is None:
                del self._released[key]  # a plain pod: bound, so the view has it among the running pods
        if released is not None:
            self.metrics.release_to_bind.observe(max(self.clock() - released, 0.0))

    # --- releases in flight ----------------------------------------------------------------------

    def released(self, key: tuple[str, str], release: Released, *, bind_pending: bool) -> None:
        """The writer released ``key`` (a pod created, a gate removed): in flight until the cache shows it."""
        with self._lock:
            self._released[key] = release
            if bind_pending:
                self._bind_pending[key] = release.at

    def in_flight_for(self, job: jobs.JobKey) -> set[str]:
        """Names of the Job's pods released and not shown by the cache yet (they count as active)."""
        with self._lock:
            names = {k[1] for k, r in self._released.items() if r.job == job}
        if not names:
            return set()
        seen = self.jobs.pod_names(job)
        with self._lock:
            for name in names & seen:
                self._released.pop((job[0], name), None)
        return names - seen

    def released_plain(self) -> dict[tuple[str, str], Released]:
        """Plain pods whose gate was removed and that are not bound yet (their demand stays reserved)."""
        with self._lock:
            return {k: r for k, r in self._released.items() if r.job is None and r.group is not None}

    def expire_releases(self, now: float) -> None:
        with self._lock:
            for key, r in list(self._released.items()):
                if now - r.at > IN_FLIGHT_TTL_S:
                    del self._released[key]
            for key, at in list(self._bind_pending.items()):
                if now - at > _BIND_PENDING_TTL_S:
                    del self._bind_pending[key]

    # --- reads for the plans ---------------------------------------------------------------------

    def mean_capacity(self) -> dict[str, float]:
        resources, total = self.cluster.totals()
        n = max(len(self.cluster.node_names()), 1)
        return {r: float(total[i]) / n for i, r in enumerate(resources) if total[i] > 0}

    def blocked_for(self) -> Callable[[Mapping[str, Any]], dict[str, tuple[str, str]]]:
        """This pass's rule for a Job's groups that cannot be dispatched (its Queue gone, or fits no node)."""
        known = set(self.queues.specs()) or None  # none known yet (Kopf not synced): judge no Queue missing
        records = [self.cluster.node(n) for n in self.cluster.node_names()]
        shapes = list({r.allocatable for r in records if r is not None})  # 200 equal nodes: one shape
        return lambda job: self.jobs.demands.blocked_groups(job, known, shapes)
