"""The Job cache: the Jobs and their task pods as the operator sees them, and each Job's plan.

Kopf feeds the Jobs (:func:`register`: one ``@kopf.on.event`` handler, so Kopf keeps no progress
annotations and no finalizers on them); an informer feeds the task pods (label ``stowage.io/job``,
any phase). The dispatch loop (:mod:`stowage.operator.runtime`) then asks :class:`JobBook` for each
Job's plan (:func:`stowage.operator.tasks.plan_job`), releases tasks from it, and has the Job writer
(:mod:`stowage.operator.job_writer`) write what the plan says; the book writes nothing::

    Job event (Kopf) ─┐
    pod event ────────┼─► JobBook (cache, dirty set, evictions seen) ─► plan_job ─► JobWriter.apply
                      │        ▲                                                       │
                      │        └───────── record_written (what the status now says) ◄──┘

Evictions are counted when a pod of the Job is first seen evicted (``DisruptionTarget`` / deleted while
opportunistic, :func:`tasks.pod_outcome`); the count reaches ``status.groups[<group>].evicted`` with the
status write of the next plan (one seen while a plan is being written waits for the plan after it). Pods already
evicted when the operator starts are taken as counted by its predecessor.
A pod deleted before the status recorded what it says (a failure, its attempt number; ``tasks.attempt_recorded``)
is still planned with until a status write records it, so its retry and its name are not lost.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stowage.operator import crd, tasks
from stowage.operator.events import bounded, rfc3339
from stowage.operator.evidence import (
    LEARNED_MAX_UIDS,
    LEARNED_WINDOW_S,
    GroupEvidence,
    LearnedTasks,
    Lesson,
    group_evidence,
    job_recurring_key,
    run_span,
    running_since,
)
from stowage.operator.metrics import OperatorMetrics

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube.records import object_name
from stowage.resources import ResourceVector

# The evidence's names stay importable from here (evidence.py holds them).
__all__ = ["LEARNED_MAX_UIDS", "LEARNED_WINDOW_S", "GroupEvidence", "JobBook", "JobKey", "LearnedTasks", "Lesson",
           "failed_plan", "group_evidence", "job_recurring_key", "owned_by", "register", "rfc3339", "run_span",
           "running_since", "task_pod_job", "unplannable"]

log = logging.getLogger(__name__)

JobKey = tuple[str, str]  # (namespace, name)


def job_key(obj: Mapping[str, Any]) -> JobKey:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def job_path(key: JobKey, sub: str = "") -> str:
    return crd.JOB.path(key[1], key[0]) + sub


def _job_ref(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference of ``pod`` to a Stowage Job, None without one."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == tasks.JOB_KIND and str(ref.get("apiVersion", "")).startswith(f"{labels.API_GROUP}/"):
            return ref
    return None


def owned_by(pod: Mapping[str, Any], job: Mapping[str, Any] | None) -> bool:
    """Whether ``pod`` belongs to this very Job, not to a predecessor of the same name (matched by uid; a Job
    without a uid, as in some tests, owns every pod of its name)."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    ref = _job_ref(pod)
    return not uid or ref is None or not ref.get("uid") or str(ref["uid"]) == str(uid)


def task_pod_job(pod: Mapping[str, Any]) -> JobKey | None:
    """The Job controlling a task pod (label ``stowage.io/job`` + a controller reference to a Stowage Job)."""
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(labels.LABEL_JOB)
    if not name:
        return None
    ref = _job_ref(pod)  # only pods a Stowage Job controls: a user's pod with the label is not ours to count
    return (str(meta.get("namespace") or ""), str(ref.get("name") or name)) if ref is not None else None


@dataclass
class _Entry:
    job: dict[str, Any] | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → pod
    evictions: dict[str, int] = field(default_factory=dict)  # group → evictions not yet in the status
    # The evictions ``plan`` counted (those seen when it was computed): what its status write puts in the status.
    # One seen later (the informer's thread) stays in ``evictions`` for the next plan.
    planned_evictions: dict[str, int] = field(default_factory=dict)
    # Pods deleted before the status recorded what they say (a failure, their attempt number): planned with
    # (a failed one as it was, any other as deleted) until the status does, so no retry or name is lost.
    gone: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every task pod name an event has shown, deleted ones too: a release whose pod was created and deleted
    # between two passes is no longer in flight (else it would hold its task until IN_FLIGHT_TTL_S).
    seen: set[str] = field(default_factory=set)
    written: dict[str, Any] | None = None  # the status we last wrote (the cache may lag behind it)
    dirty: bool = True
    plan: tasks.JobPlan | None = None
    blocked: dict[str, tuple[str, str]] = field(default_factory=dict)  # as planned (a change plans again)
    # Run spans of the Job's succeeded pods (uid → (group, seconds)), kept when a pod is deleted: a phase's mean.
    spans: dict[str, tuple[str, float]] = field(default_factory=dict)
    evidence: dict[str, GroupEvidence] | None = None  # per group, from the pods; None: the pods changed since
    # What a step of the pass raised on this Job (it cannot be read): the next plan fails it with it.
    broken: Exception | None = None


class TaskDemands:
    """One task's demand per Job uid, generation and group, or why it cannot be read; dropped with the Job."""

    def __init__(self) -> None:
        self._demand: dict[str, dict[tuple[str, str], ResourceVector | InvalidInput]] = {}

    def forget(self, uid: str) -> None:
        self._demand.pop(uid, None)

    def task_demand(self, job: Mapping[str, Any], group: str) -> ResourceVector | None:
        """One task's demand in ``group`` (cached per Job uid and spec); None when it cannot be read
        (:meth:`blocked_groups` then fails the Job, naming the field)."""
        try:
            return self.demand_or_error(job, group)
        except InvalidInput:
            return None

    def demand_or_error(self, job: Mapping[str, Any], group: str) -> ResourceVector:
        meta = job.get("metadata") or {}
        cached = self._demand.setdefault(str(meta.get("uid")), {})
        key = (str(meta.get("generation")), group)
        if key not in cached:
            try:
                cached[key] = tasks.task_demand(job, group)
            except InvalidInput as exc:
                cached[key] = exc
            except Exception as exc:  # a template of the wrong shape (admitted without the webhook's checks)
                cached[key] = InvalidInput(f"spec.tasks[{group!r}].template", f"{type(exc).__name__}: {exc}",
                                           "a pod template: metadata and spec shaped as a Pod's")
        found = cached[key]
        if isinstance(found, InvalidInput):
            raise found
        return found

    def blocked_groups(self, job: Mapping[str, Any], queues: Iterable[str] | None,
                       node_shapes: Iterable[Mapping[str, float]]) -> dict[str, tuple[str, str]]:
        """:func:`tasks.blocked_groups` for ``job`` (``queues``: the Queues that exist; None: not known yet).

        Raises :class:`InvalidInput` when a group's demand cannot be read: such a Job can never run, so it fails.
        """
        queue = tasks.job_queue(job)
        names = [str(g.get("name")) for g in tasks.group_specs(job)]
        demands: dict[str, ResourceVector | None] = {g: self.demand_or_error(job, g) for g in names}
        return tasks.blocked_groups(queue, queues is None or queue in queues, demands, node_shapes)


class JobBook:
    """Jobs (from Kopf), their task pods (from an informer) and each Job's plan; writes nothing. Thread-safe."""

    def __init__(self, metrics: OperatorMetrics, *, clock: Callable[[], float],
                 namespaces: Iterable[str] | None = None) -> None:
        self._metrics = metrics
        self._clock = clock
        self._namespaces = set(namespaces) if namespaces else None
        self._lock = threading.RLock()
        self._entries: dict[JobKey, _Entry] = {}
        self._counted: set[str] = set()  # pod uids whose eviction was counted
        self.demands = TaskDemands()
        self.learned = LearnedTasks()
        self.on_change: Callable[[], None] = lambda: None
        self.gang_timeout_s = math.inf
        """``packing.gang_ready_timeout_s`` (the runtime sets it): how long a gang may take to come up."""

    def watched(self, namespace: str) -> bool:
        return self._namespaces is None or namespace in self._namespaces

    # --- feeding ---------------------------------------------------------------------------------

    def upsert_job(self, job: Mapping[str, Any]) -> None:
        key = job_key(job)
        if not self.watched(key[0]):
            return
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            old = entry.job
            entry.job = dict(job)
            uid = (job.get("metadata") or {}).get("uid")
            same_uid = old is not None and (old.get("metadata") or {}).get("uid") == uid
            same_spec = same_uid and old is not None and old.get("spec") == job.get("spec")
            if not same_uid:  # a new Job (perhaps of an old name): its predecessor's runs are not its own
                if old is not None:
                    self.demands.forget(str((old.get("metadata") or {}).get("uid")))
                entry.spans, entry.evidence, entry.written, entry.plan = {}, None, None, None
                entry.evictions, entry.planned_evictions, entry.gone = {}, {}, {}
            if not same_spec:
                entry.broken = None
            entry.dirty = entry.dirty or not same_spec or entry.written is None
        self.on_change()

    def remove_job(self, key: JobKey) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                if entry.job is not None:
                    self.demands.forget(str((entry.job.get("metadata") or {}).get("uid")))
                entry.job, entry.written, entry.plan = None, None, None
                if not entry.pods:
                    del self._entries[key]
        self.on_change()

    def job_uids(self) -> dict[JobKey, str]:
        """Every Job in the book and its uid (what :meth:`forget_missing` compares a fresh list with)."""
        with self._lock:
            return {k: str((e.job.get("metadata") or {}).get("uid")) for k, e in self._entries.items()
                    if e.job is not None}

    def forget_missing(self, before: Mapping[JobKey, str], listed: Iterable[Mapping[str, Any]]) -> list[JobKey]:
        """Remove the Jobs deleted while no events came (a standby replica, Kopf paused): those of ``before`` (taken
        with :meth:`job_uids` before the list was read) that ``listed`` no longer has, unless the book has another
        Job of that name since. A Job added after ``before`` was taken is kept: it is newer than the list."""
        present = {job_key(j) for j in listed}
        gone = []
        with self._lock:
            for key, uid in before.items():
                entry = self._entries.get(key)
                if key in present or entry is None or entry.job is None:
                    continue
                if str((entry.job.get("metadata") or {}).get("uid")) == uid and self.watched(key[0]):
                    gone.append(key)
        for key in gone:
            log.info("job %s/%s was deleted while this operator stood by: forgotten", *key)
            self.remove_job(key)
        return gone

    def replace_pods(self, items: Iterable[Mapping[str, Any]]) -> None:
        """A (re)list of every task pod: pods already evicted are taken as counted by whoever saw them first."""
        by_job: dict[JobKey, dict[str, dict[str, Any]]] = {}
        for pod in items:
            try:  # a pod that only looks like a task pod (a user's labels) costs only itself
                key = task_pod_job(pod)
                if key is None:
                    continue
                evicted = tasks.pod_outcome(pod) is tasks.Outcome.EVICTED
            except Exception as exc:
                log.warning("pod %s left out of the Jobs' pods: %s: %s", object_name(pod), type(exc).__name__, exc)
                continue
            by_job.setdefault(key, {})[str((pod.get("metadata") or {}).get("name"))] = dict(pod)
            if evicted:
                self._counted.add(str((pod.get("metadata") or {}).get("uid")))
        with self._lock:
            for key, entry in list(self._entries.items()):
                entry.pods = by_job.pop(key, {})
                entry.evidence = None
                entry.dirty = True
                if entry.job is None and not entry.pods:
                    del self._entries[key]
            for key, pods in by_job.items():
                self._entries[key] = _Entry(pods=pods)
        self.on_change()

    def apply_pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        try:  # a pod that only looks like a task pod (a user's labels) costs only itself
            key = task_pod_job(pod)
            if key is None:
                return
            deleted = kind == "DELETED"
            outcome = tasks.pod_outcome(pod, deleted=deleted)
        except Exception as exc:
            log.warning("pod %s left out of the Jobs' pods: %s: %s", object_name(pod), type(exc).__name__, exc)
            return
        meta = pod.get("metadata") or {}
        name, uid = str(meta.get("name")), str(meta.get("uid"))
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            entry.seen.add(name)
            if deleted:
                cached = entry.pods.get(name) or {}
                if cached.get("metadata", {}).get("uid") == uid:
                    del entry.pods[name]
                    entry.evidence = None
                    status = entry.written if entry.written is not None else (entry.job or {}).get("status")
                    if not tasks.attempt_recorded(status, key[1], cached):
                        entry.gone[name] = _as_gone(cached, rfc3339(self._clock()))
            else:
                entry.pods[name] = dict(pod)
                entry.evidence = None
            if outcome is tasks.Outcome.EVICTED and uid not in self._counted and owned_by(pod, entry.job):
                self._counted.add(uid)
                group = labels.task_group(pod)
                entry.evictions[group] = entry.evictions.get(group, 0) + 1
                log.info("task pod %s/%s evicted by Stowage: re-queued without spending a retry", key[0], name)
            entry.dirty = True
        self.on_change()

    # --- reading ---------------------------------------------------------------------------------

    def job_keys(self) -> list[JobKey]:
        with self._lock:
            return [k for k, e in self._entries.items() if e.job is not None]

    def job(self, key: JobKey) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            return entry.job if entry else None

    def pod_names(self, key: JobKey) -> set[str]:  # every name an event showed, deleted ones too
        with self._lock:
            entry = self._entries.get(key)
            return set(entry.pods) | entry.seen if entry else set()

    def plans(self, in_flight: Callable[[JobKey], set[str]], mean_capacity: Mapping[str, float] | None,
              blocked: Callable[[Mapping[str, Any]], dict[str, tuple[str, str]]] | None = None,
              ) -> dict[JobKey, tasks.JobPlan]:
        """Every Job's plan; recomputed only for Jobs whose spec, status, pods or blocked groups changed (or with
        names in flight). ``blocked``: a Job → its groups that cannot be dispatched (:meth:`blocked_groups`)."""
        clock = self._clock()
        now = rfc3339(clock)
        out: dict[JobKey, tasks.JobPlan] = {}
        with self._lock:
            for key, entry in self._entries.items():
                if entry.job is None:
                    continue
                flying = in_flight(key)
                try:  # whatever one Job holds fails that Job, never the pass (nor the Jobs after it)
                    if entry.broken is not None:
                        raise entry.broken
                    finished = entry.plan is not None and entry.plan.terminal
                    why = blocked(entry.job) if blocked is not None and not finished else entry.blocked
                    if (entry.dirty or flying or entry.plan is None or why != entry.blocked
                            or clock >= entry.plan.replan_at):
                        entry.blocked = why
                        job = _as_planned(entry)
                        pods = [p for p in (*entry.pods.values(), *entry.gone.values()) if owned_by(p, job)]
                        entry.planned_evictions = dict(entry.evictions)
                        entry.plan = tasks.plan_job(job, pods, now=now, in_flight=flying,
                                                    new_evictions=entry.planned_evictions,
                                                    mean_capacity=mean_capacity, blocked=why,
                                                    gang_timeout_s=self.gang_timeout_s)
                except Exception as exc:
                    if entry.plan is None or entry.plan.phase is not tasks.Phase.FAILED:
                        self._metrics.bad_objects.inc("job")
                        if not isinstance(exc, InvalidInput):  # not a value we check: our bug, or a shape we missed
                            log.exception("job %s/%s cannot be planned; it fails", *key)
                    entry.planned_evictions = {}  # a failed plan's status counts none
                    entry.plan = failed_plan(_as_planned(entry), unplannable(exc), now)
                entry.dirty = False
                out[key] = entry.plan
        return out

    def break_job(self, key: JobKey, exc: Exception) -> None:
        """A step of the pass could not handle this Job: the next plan fails it, saying why (:func:`unplannable`);
        a new spec or a new Job of the name starts afresh."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.job is None or entry.broken is not None:
                return
            entry.broken = exc
            entry.dirty = True

    def mark_dirty(self, key: JobKey) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.dirty = True

    def evidence(self, key: JobKey) -> dict[str, GroupEvidence]:
        """Per group of the Job, :func:`group_evidence` of its pods; recomputed only when its pods changed (the run
        spans of succeeded pods are kept when they are deleted). {} for a Job not in the book."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.job is None:
                return {}
            if entry.evidence is None:
                uid = (entry.job.get("metadata") or {}).get("uid")
                entry.evidence = group_evidence([*entry.pods.values(), *entry.gone.values()], entry.spans,
                                                owner_uid=str(uid) if uid else None)
            return entry.evidence

    # --- what the writer wrote (job_writer.JobWriter) -------------------------------------------

    def written_basis(self, key: JobKey, plan: tasks.JobPlan
                      ) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]] | None:
        """What a status write of ``plan`` starts from: the Job, the status it replaces (the one last written: the
        cache may lag behind it) and the evictions ``plan`` counted; None for a Job not in the book."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.job is None:
                return None
            current = entry.written if entry.written is not None else (entry.job.get("status") or {})
            # Only what this plan counted: an eviction seen since is not in its status (nor in a failed plan's).
            evictions = dict(entry.planned_evictions) if plan is entry.plan else {}
            return entry.job, current, evictions

    def record_written(self, key: JobKey, plan: tasks.JobPlan, status: dict[str, Any],
                       evictions: Mapping[str, int]) -> None:
        """The writer wrote ``status`` (``plan``'s, counting ``evictions``): plan from it, forget what it records."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.written = status
            entry.gone = {n: p for n, p in entry.gone.items() if not tasks.attempt_recorded(plan.status, key[1], p)}
            for group, n in evictions.items():  # now part of status.groups[group].evicted
                left = entry.evictions.get(group, 0) - n
                if left > 0:
                    entry.evictions[group] = left
                else:
                    entry.evictions.pop(group, None)
            if plan is entry.plan:
                entry.planned_evictions = {}  # written: the same plan applied again counts none twice
            entry.dirty = True


def _as_gone(pod: Mapping[str, Any], now: str) -> dict[str, Any]:
    """A deleted pod's last cached state, marked deleted unless it had finished (then it says how)."""
    if tasks.pod_outcome(pod) in (tasks.Outcome.FAILED, tasks.Outcome.SUCCEEDED):
        return dict(pod)
    meta = {**(pod.get("metadata") or {}), "deletionTimestamp": (pod.get("metadata") or {}).get("deletionTimestamp")
            or now}
    return {**pod, "metadata": meta}


def _as_planned(entry: _Entry) -> dict[str, Any]:
    """The entry's Job with the status last written (the cache may lag behind it): what a plan starts from."""
    job = dict(entry.job or {})
    if entry.written is not None:
        job["status"] = entry.written
    return job


def unplannable(exc: BaseException) -> str:
    """The message a Job fails with when it cannot be planned: an :class:`InvalidInput` names the field, the value
    and what is allowed; anything else says what went wrong (a shape no check caught)."""
    what = str(exc) if isinstance(exc, InvalidInput) else f"{type(exc).__name__}: {exc}"
    return f"the Job cannot be planned: {what}"


def failed_plan(job: Mapping[str, Any], message: str, now: str) -> tasks.JobPlan:
    old = job.get("status") or {}
    message = bounded(message)
    conditions = [{"type": "Failed", "status": "True", "reason": "Invalid", "message": message,
                   "lastTransitionTime": now}]
    status = {**{k: v for k, v in old.items() if k != "kopf"}, "phase": tasks.Phase.FAILED.value,
              "conditions": conditions, "completionTime": old.get("completionTime") or now}
    events = () if old.get("phase") == tasks.Phase.FAILED else (("Warning", "Failed", message),)
    return tasks.JobPlan(phase=tasks.Phase.FAILED, groups=(), status=status, events=events)


# --- Kopf ----------------------------------------------------------------------------------------


def register(registry: Any, book: Callable[[], JobBook | None]) -> None:
    """Register the Job handler on ``registry`` (a ``kopf.OperatorRegistry``); ``book()`` gives the live JobBook.

    One ``@kopf.on.event`` handler: every Job event (and the initial listing) goes into the book; the
    dispatch loop does the rest. Kopf stops delivering events while peering pauses the operator.
    """
    import kopf

    @kopf.on.event(crd.GROUP, crd.VERSION, crd.JOB.plural, id="stowage-job-events", registry=registry)
    def job_event(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        target = book()
        if target is None:
            return
        if event.get("type") == "DELETED":
            target.remove_job(job_key(body))
        else:
            target.upsert_job(dict(body))
