"""The snapshot: one pass's :class:`DispatchView` (frozen records), read from the cache and Prometheus.

``Dispatcher.decide`` reads only this: nodes (+ fresh utilization), bound pods, queues, the pending groups of Jobs
and one group per gated plain pod. The cache keeps changing on the informers' threads; the view does not.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from stowage.operator import crd, jobs, tasks
from stowage.operator.cache import IN_FLIGHT_TTL_S, Cache, pod_key, task_pod
from stowage.operator.dispatcher import DispatchView, NodeRecord, PendingGroup, QueueRecord, RunningPod
from stowage.operator.metrics import OperatorMetrics

from stowage import labels
from stowage.config import StowageSettings
from stowage.errors import InvalidInput
from stowage.kube.records import parse_timestamp
from stowage.model import QueueOpportunistic
from stowage.policy import room
from stowage.prom import Utilization, use_key
from stowage.resources import CPU, MEMORY, ResourceVector, pod_demand

__all__ = ["Snapshots", "pending_groups"]

log = logging.getLogger(__name__)

#: Tell a pod it cannot be read (``events.PodWarnings.tell``): (uid, metadata, message, now) → True when new.
Tell = Callable[[str, Mapping[str, Any], str, float], bool]


class Snapshots:
    """Builds each pass's :class:`DispatchView` from the cache (:meth:`view`)."""

    def __init__(self, settings: StowageSettings, cache: Cache, utilization: Utilization, metrics: OperatorMetrics,
                 *, tell: Tell, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.cache = cache
        self.utilization = utilization
        self.metrics = metrics
        self.tell = tell
        self.clock = clock

    def view(self, plans: Mapping[jobs.JobKey, tasks.JobPlan], now: float,
             waiting: set[jobs.JobKey]) -> DispatchView:
        """Nodes, bound pods, queues, pending groups (running tasks' elapsed time at ``now``); the Jobs in
        ``waiting`` (backing off after a refused create) are left out."""
        fresh = {k: p for k, p in plans.items() if k not in waiting} if waiting else plans
        groups = [*pending_groups(self.cache.jobs, fresh, now), *self._plain_groups()]
        peaks = self.utilization.current
        if peaks.use_peaks:  # what each group's pods used of disk and network (policy.use_estimates)
            seen = [peaks.use_peak((g.namespace, f"{g.job.split('/', 1)[1]}-{g.group}") if g.job
                                   else (g.namespace, g.group)) for g in groups]
            groups = [g if peak is None else dataclasses.replace(g, use_peak=peak)
                      for g, peak in zip(groups, seen, strict=True)]
        return DispatchView(nodes=self._nodes(), running=self._running(), queues=self._queue_records(),
                            groups=groups)

    def _nodes(self) -> list[NodeRecord]:
        cluster = self.cache.cluster
        names = cluster.node_names()
        snapshot = self.utilization.current
        samples = snapshot.lookup(names, snapshot.resources, self.utilization.clock())
        fresh = room.fresh(samples.present, samples.age_s, self.settings.harvest.utilization_stale_after_s)
        out = []
        for i, name in enumerate(names):
            record = cluster.node(name)
            if record is None:
                continue
            usage = blocked = None
            age = float(samples.age_s[i]) if samples.present[i] else math.inf
            if fresh[i]:
                values = dict(zip(snapshot.resources, samples.usage[i].tolist(), strict=True))
                # Unknown usage of cpu or memory is not zero usage: such a node harvests nothing.
                if all(r in values and values[r] == values[r] for r in (CPU, MEMORY)):
                    usage = ResourceVector({r: v for r, v in values.items() if v == v})
                    blocked = ResourceVector(dict(zip(snapshot.resources, samples.blocked[i].tolist(), strict=True)))
            out.append(NodeRecord(name=name, allocatable=record.allocatable, harvest=record.harvest_enabled,
                                  usage=usage, blocked=blocked, sample_age_s=age))
        return out

    def _running(self) -> list[RunningPod]:
        """The bound pods; one promoted by an earlier pass counts as regular until the cache shows it so."""
        promoting = self.cache.promoting
        pods = self.cache.cluster.pods()
        if promoting:
            now = self.clock()
            shown = {p.uid for p in pods if p.uid in promoting and not p.opportunistic}
            for uid in [u for u, at in promoting.items() if u in shown or now - at > IN_FLIGHT_TTL_S]:
                del promoting[uid]
        peaks = self.utilization.current
        return [RunningPod(node=p.node, demand=p.demand, queue=p.queue,
                           opportunistic=p.opportunistic and p.uid not in promoting, bound_at_s=p.bound_at_s,
                           started_at_s=p.start_time_s, key=f"{p.namespace}/{p.name}", uid=p.uid,
                           requests=p.requests if p.opportunistic else None, job=p.job, group=p.task_group,
                           use_peak=peaks.use_peak(use_key(p.namespace, p.name, p.labels)) if peaks.use_peaks else None)
                for p in pods]

    def _queue_records(self) -> list[QueueRecord]:
        return [QueueRecord(name=q.name, weight=q.weight, opportunistic=q.opportunistic is QueueOpportunistic.ALLOW,
                            job_order=q.job_order, quota=q.quota_amounts() or None,
                            draining=q.state == crd.STATE_DRAINING)
                for q in self.cache.queues.specs().values()]

    def plain_group(self, pod: Mapping[str, Any]) -> PendingGroup | None:
        """A gated plain pod as one group; None (the pod told why, and it stays gated) when it cannot be read."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            intent = labels.pod_intent(pod)
            demand = (intent.demand if intent.is_opportunistic and intent.demand is not None else pod_demand(pod))
        except Exception as exc:  # whatever one pod holds keeps that pod gated, never the pass
            what = str(exc) if isinstance(exc, InvalidInput) else f"{type(exc).__name__}: {exc}"
            message = f"Stowage cannot read this pod, so it stays gated: {what}; fix it and create the pod again"
            if self.tell(str(meta.get("uid")), meta, message, self.clock()):
                self.metrics.bad_objects.inc("pod")
                log.warning("pod %s stays gated: %s", key, what)
            return None
        arrival = parse_timestamp(meta.get("creationTimestamp"))
        return PendingGroup(
            key=key, queue=intent.queue or labels.DEFAULT_QUEUE, demand=demand + intent.bandwidth, releasable=1,
            namespace=str(meta.get("namespace")), job=None, group=str(meta.get("name")),
            intent=labels.Opportunistic.TRUE if intent.is_opportunistic else labels.Opportunistic.FALSE,
            converted=intent.is_opportunistic,
            expected_duration_s=min(intent.expected_duration_s, crd.MAX_EXPECTED_DURATION_S)  # as a Job's (tasks)
            if intent.expected_duration_s is not None else math.nan,
            arrival_s=arrival if arrival is not None else math.nan, remaining_tasks=1)

    def _plain_groups(self) -> list[PendingGroup]:
        """Gated plain pods, one group each, and one per pod group (``pod_gangs``); pods released and not yet bound
        keep their demand reserved."""
        released = self.cache.released_plain()
        out: dict[str, PendingGroup] = {}
        members: dict[tuple[str, str], list[PendingGroup]] = {}
        counts: dict[tuple[str, str], int] = {}
        for pod in self.cache.gated.pods():
            if task_pod(pod):
                continue  # a Job's task: released when its pod was created (see Writer.ungate_released_task_pods)
            group = self.plain_group(pod)
            if group is None or pod_key(pod) in released:
                continue
            gang = _pod_group(pod)
            if gang is None:
                out[group.key] = group
                continue
            members.setdefault((group.namespace, gang[0]), []).append(group)
            counts[(group.namespace, gang[0])] = gang[1]
        out.update({g.key: g for g in pod_gangs(members, counts)})
        for r in released.values():
            assert r.group is not None
            out[r.group.key] = dataclasses.replace(r.group, releasable=0, unbound=1)
        return list(out.values())


def _pod_group(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """The pod group a gated pod names (None: none, or labels the webhook would have refused)."""
    try:
        return labels.pod_group((pod.get("metadata") or {}).get("labels") or {}, crd.MAX_REPLICAS)
    except InvalidInput:
        return None


def pod_gangs(members: Mapping[tuple[str, str], list[PendingGroup]],
              counts: Mapping[tuple[str, str], int]) -> list[PendingGroup]:
    """One group per pod group ``(namespace, name)`` from its gated members' own groups: one gang of its total
    count, released once every member exists gated (fewer: its members wait, told so, ``holding``). Its demand per
    task is the largest of its members' on each resource, so the gang fits whatever member lands where; its queue
    and arrival are its first member's (by name)."""
    out = []
    for (namespace, name), pods in members.items():
        pods = sorted(pods, key=lambda g: g.key)
        total = counts[(namespace, name)]
        first = pods[0]
        demand = ResourceVector({r: max(g.demand.as_dict().get(r, 0.0) for g in pods)
                                 for r in sorted({r for g in pods for r in g.demand})})
        out.append(dataclasses.replace(
            first, key=f"{namespace}/{labels.POD_GROUP_KEY}{name}", demand=demand, releasable=min(len(pods), total),
            group=name, remaining_tasks=total, gang=total, arrival_s=min(g.arrival_s for g in pods)))
    return out


# --- the Jobs' pending groups ---------------------------------------------------------------------


def pending_groups(book: jobs.JobBook, plans: Mapping[jobs.JobKey, tasks.JobPlan], now: float) -> list[PendingGroup]:
    """One :class:`PendingGroup` per unfinished group of every unfinished Job (the dispatcher wants them all).

    With the estimator's evidence (``JobBook.evidence``): each group's finished tasks and their mean run span, the
    longest a running task has run at ``now`` (clock seconds: the caller's clock), and the Job's recurring key.
    """
    out: list[PendingGroup] = []
    for key, plan in plans.items():
        job = book.job(key)
        if job is None or plan.terminal:
            continue
        try:
            out.extend(_pending(book, key, job, plan, now))
        except Exception as exc:  # this Job cannot be read: it fails at the next plan, the others go on
            book.break_job(key, exc)
    return out


def _pending(book: jobs.JobBook, key: jobs.JobKey, job: Mapping[str, Any], plan: tasks.JobPlan,
             now: float) -> list[PendingGroup]:
    out = []
    spec_groups = {str(g.get("name")): g for g in tasks.group_specs(job)}
    arrival = parse_timestamp((job.get("metadata") or {}).get("creationTimestamp"))
    progress = tasks.job_progress(plan)
    evidence = book.evidence(key)
    recurring = jobs.job_recurring_key(job)
    suspended = bool((job.get("spec") or {}).get("suspend"))
    for g in plan.groups:
        demand = book.demands.task_demand(job, g.name)
        if demand is None or g.remaining == 0:
            continue
        duration = tasks.expected_duration_s(spec_groups.get(g.name) or {})
        ev = evidence.get(g.name) or jobs.GroupEvidence()
        out.append(PendingGroup(
            key=f"{key[0]}/{key[1]}/{g.name}", queue=tasks.job_queue(job), demand=demand,
            releasable=len(g.releasable), namespace=key[0], job=f"{key[0]}/{key[1]}", group=g.name,
            intent=tasks.job_intent(job),
            expected_duration_s=duration,
            arrival_s=arrival if arrival is not None else math.nan, remaining_tasks=g.remaining,
            finished_fraction=g.succeeded / g.replicas if g.replicas else 1.0, job_progress=progress,
            unbound=g.unbound, finished_tasks=ev.finished, finished_mean_s=ev.mean_s,
            running_elapsed_s=max(now - ev.running_since, 0.0) if math.isfinite(ev.running_since) else 0.0,
            recurring_key=recurring, gang=g.gang, depends_on=g.waiting_on, suspended=suspended))
    return out

