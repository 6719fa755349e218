"""A Stowage Job's tasks: pod names, pod rendering, each task's state, and the Job's plan. Pure.

Names (deterministic, so a restarted operator finds what its predecessor made and a second create of
the same task fails with 409 instead of running it twice)::

    <job>-<group>-<index>            the first attempt of task <index> of group <group>
    <job>-<group>-<index>-r<n>       attempt n (n ≥ 1): after a failure, an eviction or a lost pod

A task's state comes from its attempt pods (and the names released but not yet seen in the cache):

| latest attempt pod | state of the task |
|---|---|
| any attempt ``Succeeded`` (or its index in ``completedIndexes``) | succeeded |
| exists, not terminal, not being deleted | active (``Pending`` → released, ``Running`` → running) |
| ``Failed``, no ``DisruptionTarget`` | failed attempt: re-queued while failures ≤ ``maxRetries``, else failed |
| ``DisruptionTarget``, or deleted (being deleted) before it finished | evicted or lost: re-queued, no retry spent |
| none | pending |

Attempts are remembered in the Job's status, not only in the pods: ``status.groups.<g>.startedIndexes``
(unfinished tasks that had an attempt) and ``status.groups.<g>.attempts`` (``{"<index>": {"next": n,
"failed": [attempts]}}``, for a task past its first attempt or with a failure). A pod deleted by hand or
with its node (kube-controller-manager's orphan GC) therefore neither frees its name nor takes back the
retry its failure spent: the next attempt is numbered past every attempt ever made, and the failures
counted against ``maxRetries`` are the recorded ones plus those the pods show (a set of attempt numbers,
so nothing is counted twice).

An eviction *by Stowage* is one whose ``DisruptionTarget`` reason is ``EvictionByEvictionAPI`` (the node
monitor) or ``PreemptionByScheduler`` (the extender's preempt verb), or the deletion of an opportunistic
pod; it is counted in ``evicted``. Any other disappearance of an unfinished pod (a user's delete, a
kubelet's node-pressure eviction) re-queues the task the same way but is not counted: it was not the
task's fault either.

:func:`plan_job` turns a Job and its pods into a :class:`JobPlan`: the status to write, which tasks the
dispatcher may release now (barriers, suspension and the end of the Job taken into account), the Events
to post and the pods to delete when the Job failed. It calls nothing and reads no clock.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.operator import crd

from stowage import labels
from stowage.errors import InvalidInput
from stowage.policy import remaining_work
from stowage.resources import ResourceVector, format_quantity, pod_demand, shown

__all__ = [
    "EVICTION_REASONS",
    "GroupPlan",
    "JobPlan",
    "Outcome",
    "Phase",
    "TaskRef",
    "attempt_recorded",
    "estimate_status",
    "expected_duration_s",
    "format_indexes",
    "group_specs",
    "owner_reference",
    "parse_indexes",
    "parse_pod_name",
    "plan_job",
    "pod_name",
    "pod_outcome",
    "prefer_node",
    "render_pod",
    "task_demand",
]

JOB_KIND = "Job"
JOB_API_VERSION = f"{labels.API_GROUP}/{labels.API_VERSION}"

#: ``DisruptionTarget`` reasons that mean Stowage took the pod away (node monitor / extender preempt).
EVICTION_REASONS = frozenset({"EvictionByEvictionAPI", "PreemptionByScheduler"})

_ATTEMPT = re.compile(r"^(\d+)(?:-r(\d+))?$")


class Phase(enum.StrEnum):
    """``status.phase`` of a Job (DESIGN.md)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Outcome(enum.StrEnum):
    """What one attempt pod says about its task."""

    ACTIVE = "active"  # exists, not finished, not being deleted
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the task's own failure: spends a retry
    EVICTED = "evicted"  # taken away by Stowage: re-queued, no retry spent, counted
    LOST = "lost"  # otherwise disrupted or deleted before it finished: re-queued, no retry spent


@dataclass(frozen=True, slots=True, order=True)
class TaskRef:
    """One attempt of one task: group name, index in the group, attempt number (0: the first)."""

    group: str
    index: int
    attempt: int = 0

    def pod_name(self, job: str) -> str:
        return pod_name(job, self.group, self.index, self.attempt)


def pod_name(job: str, group: str, index: int, attempt: int = 0) -> str:
    """``<job>-<group>-<index>``, and ``-r<attempt>`` from the second attempt on."""
    base = f"{job}-{group}-{int(index)}"
    return base if attempt <= 0 else f"{base}-r{int(attempt)}"


def parse_pod_name(job: str, group: str, name: str) -> tuple[int, int] | None:
    """``(index, attempt)`` of a pod named by :func:`pod_name` for this job and group; None for any other name."""
    prefix = f"{job}-{group}-"
    if not name.startswith(prefix):
        return None
    match = _ATTEMPT.match(name[len(prefix):])
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def format_indexes(indexes: Iterable[int]) -> str:
    """Sorted indexes as ranges, like a Kubernetes indexed Job's ``completedIndexes``: ``0-3,5,7-8``."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def parse_indexes(text: Any) -> set[int]:
    """The inverse of :func:`format_indexes`; anything unparseable is skipped (status is ours, but be total)."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


# --- pods ----------------------------------------------------------------------------------------


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """The controller reference a task pod carries: garbage-collected with its Job, found again after a restart."""
    meta = job.get("metadata") or {}
    return {"apiVersion": JOB_API_VERSION, "kind": JOB_KIND, "name": meta.get("name"), "uid": meta.get("uid"),
            "controller": True, "blockOwnerDeletion": True}


def group_specs(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``spec.tasks`` of a Job, each checked for the shape the planner reads (an object with a name, and a template
    whose metadata and spec are objects); raises :class:`InvalidInput` naming the first field that is not.

    The CRD's schema and the validating webhook refuse these shapes; this is for a Job stored without them (an
    older chart, a webhook that was down): it fails alone instead of stopping every pass."""
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidInput("spec", shown(spec), "an object")
    groups = spec.get("tasks") or []
    if not isinstance(groups, list):
        raise InvalidInput("spec.tasks", shown(groups), "a list of task groups")
    for i, group in enumerate(groups):
        if not isinstance(group, Mapping) or not isinstance(group.get("name"), str):
            raise InvalidInput(f"spec.tasks[{i}]", shown(group), "a task group: an object with a string name")
        template = group.get("template") or {}
        if not isinstance(template, Mapping):
            raise InvalidInput(f"spec.tasks[{i}].template", shown(template), "a pod template: an object")
        for part in ("metadata", "spec"):
            if not isinstance(template.get(part) or {}, Mapping):
                raise InvalidInput(f"spec.tasks[{i}].template.{part}", shown(template.get(part)), "an object")
    return groups


def _group_spec(job: Mapping[str, Any], group: str) -> Mapping[str, Any]:
    for spec in group_specs(job):
        if spec.get("name") == group:
            return spec
    raise InvalidInput("spec.tasks[].name", group, "the name of one of the Job's task groups")


def _expected_duration(spec: Mapping[str, Any]) -> str | None:
    value = spec.get("expectedDuration")
    if value is None:
        return None
    text = str(value).strip()
    return text[:-1] if text.endswith("s") else text


def expected_duration_s(spec: Mapping[str, Any]) -> float:
    """A task group's ``expectedDuration`` in seconds, at most ``crd.MAX_EXPECTED_DURATION_S`` (the schema's bound,
    applied again to a Job stored before it: an unbounded hint would overflow remaining work and jump the queue);
    NaN when it is absent or unreadable."""
    text = _expected_duration(spec)
    try:
        seconds = float(text) if text is not None else math.nan
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return min(seconds, float(crd.MAX_EXPECTED_DURATION_S)) if seconds >= 0 else math.nan


def job_queue(job: Mapping[str, Any]) -> str:
    return str((job.get("spec") or {}).get("queue") or "default")


def job_intent(job: Mapping[str, Any]) -> labels.Opportunistic:
    """``spec.opportunistic`` (default ``auto`` for Stowage Jobs, DESIGN.md)."""
    return labels.Opportunistic.parse((job.get("spec") or {}).get("opportunistic", "auto"), "spec.opportunistic")


def render_pod(job: Mapping[str, Any], task: TaskRef, pod_class: labels.PodClass) -> dict[str, Any]:
    """The pod of one task attempt, as released: the group's template plus what Stowage sets.

    Sets the deterministic name, the Job's namespace, the controller owner reference, the system labels
    (``stowage.io/job``, ``stowage.io/queue``, ``stowage.io/task-group``, ``stowage.io/class``) over
    whatever the template says, the user's intent label from ``spec.opportunistic``, the
    ``stowage.io/expected-duration`` annotation from the group's ``expectedDuration`` (unless the
    template sets it), ``schedulerName: stowage-scheduler`` and ``restartPolicy: Never`` (a task's
    retries are Stowage's, counted per attempt; ``OnFailure`` is kept when the template asks for it).
    An opportunistic release is returned unconverted: the caller applies
    ``stowage.operator.admission.convert_opportunistic``, the one conversion the webhook also uses.
    """
    meta = job.get("metadata") or {}
    spec = _group_spec(job, task.group)
    template = copy.deepcopy(spec.get("template") or {})
    t_meta = template.get("metadata") or {}
    pod_labels = {str(k): str(v) for k, v in (t_meta.get("labels") or {}).items()}
    pod_labels.update({
        labels.LABEL_JOB: str(meta.get("name")),
        labels.LABEL_QUEUE: job_queue(job),
        labels.LABEL_TASK_GROUP: task.group,
        labels.LABEL_OPPORTUNISTIC: job_intent(job).value,
        labels.LABEL_CLASS: pod_class.value,
    })
    annotations = {str(k): str(v) for k, v in (t_meta.get("annotations") or {}).items()}
    duration = _expected_duration(spec)
    if duration is not None:
        annotations.setdefault(labels.ANN_EXPECTED_DURATION, duration)
    pod_spec = dict(template.get("spec") or {})
    pod_spec["schedulerName"] = labels.SCHEDULER_NAME
    if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
        pod_spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": task.pod_name(str(meta.get("name"))),
            "namespace": meta.get("namespace"),
            "labels": pod_labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }


#: Weight of the dispatcher's node preference (the API's maximum): kube-scheduler's NodeAffinity score
#: (plugin weight 2) then outweighs its resource scores, so the pod lands where the packing pass put it
#: whenever that node still fits; when it does not, the pod goes elsewhere (a preference, not a rule).
NODE_HINT_WEIGHT = 100


def prefer_node(spec: Mapping[str, Any], node: str) -> dict[str, Any]:
    """``spec`` (a pod spec) with a preferred node affinity for ``node`` added (``matchFields`` on
    ``metadata.name``), on a copy; the template's own affinity terms are kept. Used for the dispatcher's
    ``Release.node_hint`` on the pods it releases."""
    out = copy.deepcopy(dict(spec))
    affinity = out.setdefault("affinity", {}) or {}
    out["affinity"] = affinity
    node_affinity = affinity.setdefault("nodeAffinity", {}) or {}
    affinity["nodeAffinity"] = node_affinity
    preferred = list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred.append({"weight": NODE_HINT_WEIGHT, "preference": {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}})
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return out


def task_demand(job: Mapping[str, Any], group: str) -> ResourceVector:
    """What one task of ``group`` asks for: its template's requests (as kube-scheduler sums them) + bandwidth.

    Raises :class:`InvalidInput` (naming the field) for a bad quantity or annotation.
    """
    spec = _group_spec(job, group)
    template = spec.get("template") or {}
    pod = {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return pod_demand(pod) + labels.bandwidth_demand(annotations, f"spec.tasks[{group}].template.metadata.annotations")


# --- states --------------------------------------------------------------------------------------


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)]


def _disruption(pod: Mapping[str, Any]) -> str | None:
    """The reason of a true ``DisruptionTarget`` condition, None without one."""
    for cond in _conditions(pod):
        if cond.get("type") == "DisruptionTarget" and str(cond.get("status")) == "True":
            return str(cond.get("reason") or "")
    return None


def _is_opportunistic(pod: Mapping[str, Any]) -> bool:
    try:
        return labels.pod_class((pod.get("metadata") or {}).get("labels") or {}) is labels.PodClass.OPPORTUNISTIC
    except InvalidInput:
        return False


def pod_outcome(pod: Mapping[str, Any], deleted: bool = False) -> Outcome:
    """What ``pod`` (an attempt) says about its task; ``deleted``: the pod is gone (its last known state)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return Outcome.SUCCEEDED
    reason = _disruption(pod)
    gone = deleted or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    if reason is not None or gone:
        stowage_did_it = reason in EVICTION_REASONS or (gone and _is_opportunistic(pod))
        return Outcome.EVICTED if stowage_did_it else Outcome.LOST
    if phase == "Failed":
        return Outcome.FAILED
    return Outcome.ACTIVE


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One task group's counts and what may be released from it now.

    ``pending``: tasks not running and not finished (waiting for release, or released and waiting for a
    node); ``running``: tasks whose pod runs; ``succeeded``: tasks done; ``failed``: failed attempts (each
    spent a retry); ``evicted``: evictions by Stowage so far; ``exhausted``: tasks out of retries;
    ``unbound``: tasks released (pod created, or its create in flight) whose pod is not on a node yet.
    ``unreleased``: pending tasks with no pod and no create in flight (what waits for the dispatcher; a
    pod bound but not ``Running`` yet is pending, not unreleased). ``started``: unfinished tasks that had an
    attempt; ``attempts``: ``(index, next attempt, failed attempts)`` of tasks past their first attempt or with a
    failure (next 0: the task is done).
    ``releasable``: the next attempt of every task that may be released now, in index order (empty while
    the group waits on a barrier, the Job is suspended or finished).
    """

    name: str
    replicas: int
    depends_on: tuple[str, ...]
    pending: int
    running: int
    succeeded: int
    failed: int
    evicted: int
    exhausted: tuple[int, ...]
    opportunistic_running: int
    completed: frozenset[int]
    releasable: tuple[TaskRef, ...] = ()
    waiting_on: tuple[str, ...] = ()  # dependencies that have not succeeded yet
    unbound: int = 0
    unreleased: int = 0
    started: frozenset[int] = frozenset()
    attempts: tuple[tuple[int, int, tuple[int, ...]], ...] = ()

    @property
    def remaining(self) -> int:
        """Tasks not finished: waiting, released or running (a task out of retries is finished)."""
        return max(self.replicas - self.succeeded - len(self.exhausted), 0)

    @property
    def done(self) -> bool:
        return self.succeeded >= self.replicas

    def as_status(self) -> dict[str, Any]:
        """``status.groups[<name>]``; ``completedIndexes`` keeps a succeeded task done even if its pod is deleted."""
        attempts: dict[str, dict[str, Any]] = {}
        for index, next_attempt, failed in self.attempts:
            record: dict[str, Any] = {"next": next_attempt} if next_attempt else {}
            if failed:
                record["failed"] = list(failed)
            attempts[str(index)] = record
        return {"pending": self.pending, "running": self.running, "succeeded": self.succeeded,
                "failed": self.failed, "evicted": self.evicted, "completedIndexes": format_indexes(self.completed),
                "startedIndexes": format_indexes(self.started), "attempts": attempts}


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What to do about one Job now (see :func:`plan_job`)."""

    phase: Phase
    groups: tuple[GroupPlan, ...]
    status: dict[str, Any]
    events: tuple[tuple[str, str, str], ...] = ()  # (type Normal|Warning, reason, message)
    delete: tuple[str, ...] = ()  # pod names to delete (active pods of a Job that failed)
    finished: tuple[Mapping[str, Any], ...] = ()  # succeeded task pods (the classifier learns)

    @property
    def releasable(self) -> list[TaskRef]:
        return [task for group in self.groups for task in group.releasable]

    @property
    def terminal(self) -> bool:
        return self.phase in (Phase.SUCCEEDED, Phase.FAILED)


#: Job condition: some unfinished group cannot be dispatched (reasons QueueNotFound, FitsNoNode).
UNSCHEDULABLE = "Unschedulable"


def blocked_groups(queue: str, queue_exists: bool, demands: Mapping[str, ResourceVector | None],
                   node_shapes: Iterable[Mapping[str, float]]) -> dict[str, tuple[str, str]]:
    """group → (reason, message) for the groups of a Job in ``queue`` that cannot be dispatched.

    ``QueueNotFound``: the Queue is gone (deleted while the Job had work): running tasks finish, the others
    wait until a Queue of that name exists again. ``FitsNoNode``: one task asks more of some resource than
    any node's allocatable (``node_shapes``, the distinct allocatables; a resource a node does not list is
    not held against it; no nodes: nothing is judged).
    """
    if not queue_exists:
        why = (f"Queue {queue!r} does not exist (deleted?): running tasks finish; the others wait until it is "
               "created again")
        return {g: ("QueueNotFound", why) for g in demands}
    shapes = list(node_shapes)
    out = {}
    for g, demand in demands.items():
        if demand is None or not shapes:
            continue
        if not any(all(v <= shape[r] for r, v in demand.items() if r in shape) for shape in shapes):
            largest = {r: max(s.get(r, 0.0) for s in shapes) for r in demand}
            over = ", ".join(f"{r} {format_quantity(demand[r], r)} > {format_quantity(largest[r], r)}"
                             for r in sorted(demand) if demand[r] > largest[r])
            out[g] = ("FitsNoNode", f"task group {g!r}: one task asks more than any node's allocatable "
                      f"({over or 'no single node has all of it'}); it can never start: delete the Job and "
                      "submit smaller tasks")
    return out


HELD = "Held"
"""The Job condition saying why the dispatcher holds some of its tasks (``holds.job_held``)."""


def held_condition(held: tuple[str, str] | None, status: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The Job's ``Held`` condition: True with ``held`` (reason, message) while the dispatcher holds some of its
    tasks; False once it holds none, if it was ever written (``status``: the Job's status so far); else None."""
    old = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    if held is not None:
        return _condition(HELD, True, held[0], held[1], now, old)
    if not any(c.get("type") == HELD for c in old):
        return None
    return _condition(HELD, False, "NotHeld", "the dispatcher holds none of its tasks", now, old)


def _condition(type_: str, status: bool, reason: str, message: str, now: str,
               old: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    previous = next((c for c in old if c.get("type") == type_), None)
    value = "True" if status else "False"
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == value else now
    return {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": since}


def _creation(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def plan_job(
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: str,
    in_flight: Iterable[str] = (),
    new_evictions: Mapping[str, int] | None = None,
    mean_capacity: Mapping[str, float] | None = None,
    blocked: Mapping[str, tuple[str, str]] | None = None,
) -> JobPlan:
    """The plan for ``job`` given its task pods.

    ``pods``: every pod the Job owns (any phase; pods being deleted included); ``in_flight``: names
    released but not yet in the cache (they count as active, so nothing is released twice);
    ``new_evictions``: Stowage evictions per group seen since the status was last written (added to
    ``status.groups[<group>].evicted``); ``now``: RFC 3339 time for new conditions and timestamps;
    ``mean_capacity``: the cluster's mean node allocatable ``C̄`` for ``status.remainingWork`` (0 without it);
    ``blocked``: group → (reason, message) of groups that cannot be dispatched now (:func:`blocked_groups`):
    condition ``Unschedulable`` and a Warning Event, so a Job that cannot progress never waits silently.
    Raises :class:`InvalidInput` when the spec cannot be planned (the caller fails the Job with it).
    """
    meta = job.get("metadata") or {}
    old = job.get("status") or {}
    name = str(meta.get("name"))
    groups_spec = group_specs(job)
    if not groups_spec:
        raise InvalidInput("spec.tasks", groups_spec, "at least one task group")
    old_groups = old.get("groups") if isinstance(old.get("groups"), Mapping) else {}
    flying = set(in_flight)
    new_evictions = dict(new_evictions or {})

    # Attempt pods per (group, index).
    attempts: dict[tuple[str, int], list[tuple[int, Mapping[str, Any]]]] = {}
    known_groups = {str(g.get("name")) for g in groups_spec}
    for pod in pods:
        pod_meta = pod.get("metadata") or {}
        group = labels.task_group(pod)
        if group not in known_groups:
            continue
        parsed = parse_pod_name(name, group, str(pod_meta.get("name") or ""))
        if parsed is None:
            continue
        attempts.setdefault((group, parsed[0]), []).append((parsed[1], pod))

    plans: list[GroupPlan] = []
    events: list[tuple[str, str, str]] = []
    finished: list[Mapping[str, Any]] = []
    active_pods: list[str] = []
    for g in groups_spec:
        group = str(g.get("name"))
        replicas = int(g.get("replicas", 1))
        max_retries = int(g.get("maxRetries", 0) or 0)
        prior = old_groups.get(group) or {}
        completed = {i for i in parse_indexes(prior.get("completedIndexes")) if i < replicas}
        started = {i for i in parse_indexes(prior.get("startedIndexes")) if i < replicas}
        records = _attempt_records(prior.get("attempts"), replicas)
        pending = running = failed = opp_running = unbound = 0
        exhausted: list[int] = []
        next_attempts: list[TaskRef] = []
        now_started: set[int] = set()
        now_attempts: list[tuple[int, int, tuple[int, ...]]] = []
        for index in range(replicas):
            tries = sorted(attempts.get((group, index), []), key=lambda t: t[0])
            outcomes = [(attempt, pod, pod_outcome(pod)) for attempt, pod in tries]
            recorded_next, recorded_failed = records.get(index, (0, frozenset()))
            failed_attempts = recorded_failed | {a for a, _, o in outcomes if o is Outcome.FAILED}
            failures = len(failed_attempts)
            failed += failures
            success = next((pod for _, pod, o in outcomes if o is Outcome.SUCCEEDED), None)
            if success is not None or index in completed:
                if success is not None and index not in completed:
                    finished.append(success)
                completed.add(index)
                if failed_attempts:
                    now_attempts.append((index, 0, tuple(sorted(failed_attempts))))
                continue
            # The highest attempt ever made: pods seen, the status's record (pods since deleted), names in flight.
            floor = max(recorded_next, 1 if index in started else 0)
            seen = max(max((a for a, _, _ in outcomes), default=-1), floor - 1)
            in_air = [a for a in range(seen + 2) if pod_name(name, group, index, a) in flying]
            latest = max([seen, *in_air])
            if latest >= 0:
                now_started.add(index)
            if latest >= 1 or failed_attempts:
                now_attempts.append((index, latest + 1, tuple(sorted(failed_attempts))))
            active = [(a, pod) for a, pod, o in outcomes if o is Outcome.ACTIVE]
            if active or in_air:
                for _, pod in active:
                    active_pods.append(str((pod.get("metadata") or {}).get("name")))
                live = active[-1][1] if active else None
                if live is not None and (live.get("status") or {}).get("phase") == "Running":
                    running += 1
                    opp_running += _is_opportunistic(live)
                else:
                    pending += 1
                    unbound += live is None or not _bound(live)
                continue
            if failures > max_retries:
                exhausted.append(index)
                continue
            pending += 1
            next_attempts.append(TaskRef(group, index, latest + 1))
        evicted = int(prior.get("evicted", 0) or 0) + int(new_evictions.get(group, 0))
        plans.append(GroupPlan(
            name=group, replicas=replicas, depends_on=tuple(str(d) for d in g.get("dependsOn") or ()),
            pending=pending, running=running, succeeded=len(completed), failed=failed, evicted=evicted,
            exhausted=tuple(exhausted), opportunistic_running=opp_running, completed=frozenset(completed),
            releasable=tuple(next_attempts), unbound=unbound, unreleased=len(next_attempts),
            started=frozenset(now_started),
            attempts=tuple(now_attempts),
        ))

    done = {p.name for p in plans if p.done}
    failed_groups = [p for p in plans if p.exhausted]
    suspended = bool((job.get("spec") or {}).get("suspend"))
    all_done = len(done) == len(plans)
    old_phase = old.get("phase")

    if all_done:
        phase = Phase.SUCCEEDED
    elif failed_groups or old_phase == Phase.FAILED:
        phase = Phase.FAILED
    elif suspended:
        phase = Phase.SUSPENDED
    elif any(p.running or p.succeeded or p.failed or p.evicted or p.started for p in plans) or active_pods or flying:
        phase = Phase.RUNNING
    else:
        phase = Phase.PENDING

    # Who may release: not finished, not suspended, every dependency succeeded.
    gated: list[GroupPlan] = []
    for p in plans:
        waiting = tuple(d for d in p.depends_on if d not in done)
        releasable = p.releasable if phase in (Phase.PENDING, Phase.RUNNING) and not waiting else ()
        gated.append(dataclasses.replace(p, releasable=releasable, waiting_on=waiting))
    plans = gated

    old_conditions = [c for c in old.get("conditions") or [] if isinstance(c, Mapping)]
    conditions: list[dict[str, Any]] = []
    total = sum(p.replicas for p in plans)
    succeeded = sum(p.succeeded for p in plans)
    delete: tuple[str, ...] = ()
    if phase is Phase.SUCCEEDED:
        message = f"all {total} tasks succeeded"
        conditions.append(_condition("Complete", True, "AllTasksSucceeded", message, now, old_conditions))
        if old_phase != Phase.SUCCEEDED:
            events.append(("Normal", "Completed", message))
    elif phase is Phase.FAILED:
        if failed_groups:
            g0 = failed_groups[0]
            message = (f"task group {g0.name!r}: task {g0.exhausted[0]} failed more than maxRetries "
                       f"({_max_retries(groups_spec, g0.name)}) times; {succeeded}/{total} tasks succeeded")
        else:
            message = next((str(c.get("message")) for c in old_conditions if c.get("type") == "Failed"),
                           "the Job failed")
        conditions.append(_condition("Failed", True, "RetriesExhausted" if failed_groups else "Failed", message,
                                     now, old_conditions))
        delete = tuple(active_pods)
        if old_phase != Phase.FAILED:
            events.append(("Warning", "Failed", message))
    if phase not in (Phase.SUCCEEDED, Phase.FAILED):
        conditions.append(_condition(
            "Suspended", suspended, "Suspended" if suspended else "Resumed",
            "spec.suspend is true: no new tasks are released; running tasks finish" if suspended
            else "tasks are released as the dispatcher finds room", now, old_conditions))
        if suspended and old_phase != Phase.SUSPENDED:
            events.append(("Normal", "Suspended", "no new tasks are released while spec.suspend is true"))
        if old_phase == Phase.SUSPENDED and not suspended:
            events.append(("Normal", "Resumed", "spec.suspend is false again: tasks are released"))
        blocked = blocked or {}
        stuck = [blocked[p.name] for p in plans if p.name not in done and p.name in blocked]
        previous = next((c for c in old_conditions if c.get("type") == UNSCHEDULABLE), None)
        if stuck:
            reason, message = stuck[0][0], "; ".join(dict.fromkeys(m for _, m in stuck))
            conditions.append(_condition(UNSCHEDULABLE, True, reason, message, now, old_conditions))
            if previous is None or previous.get("status") != "True" or previous.get("message") != message:
                events.append(("Warning", reason, message))
        elif previous is not None:
            conditions.append(_condition(UNSCHEDULABLE, False, "Dispatchable",
                                         "every unfinished task group can be dispatched", now, old_conditions))
    for p in plans:
        before = int((old_groups.get(p.name) or {}).get("failed", 0) or 0)
        if p.failed > before and phase is not Phase.FAILED:
            events.append(("Warning", "TaskFailed", f"{p.failed - before} attempt(s) of group {p.name!r} failed; "
                           f"failed tasks are retried up to maxRetries ({_max_retries(groups_spec, p.name)}) times"))
        if new_evictions.get(p.name):
            n = new_evictions[p.name]
            events.append(("Normal", "TaskEvicted", f"{n} task(s) of group {p.name!r} evicted by Stowage; "
                           "re-queued without spending a retry"))

    start = old.get("startTime")
    if start is None and phase is not Phase.PENDING:
        creations = sorted(_creation(pod) for tries in attempts.values() for _, pod in tries if _creation(pod))
        start = creations[0] if creations else now
    completion = old.get("completionTime")
    if phase in (Phase.SUCCEEDED, Phase.FAILED) and completion is None:
        completion = now

    status: dict[str, Any] = {
        "phase": phase.value,
        "tasksTotal": total,
        "tasksSucceeded": succeeded,
        "progress": f"{succeeded}/{total}",
        "opportunisticRunning": sum(p.opportunistic_running for p in plans),
        "remainingWork": _remaining_work(job, groups_spec, plans, mean_capacity),
        "groups": {p.name: p.as_status() for p in plans},
        "conditions": conditions,
    }
    if meta.get("generation") is not None:
        status["observedGeneration"] = int(meta["generation"])
    if start is not None:
        status["startTime"] = start
    if completion is not None:
        status["completionTime"] = completion
    return JobPlan(phase=phase, groups=tuple(plans), status=status, events=tuple(events), delete=delete,
                   finished=tuple(finished))


def attempt_recorded(status: Mapping[str, Any] | None, job: str, pod: Mapping[str, Any]) -> bool:
    """Whether ``status`` (a Job's) holds what ``pod`` (one of its attempts) says, so the pod may be forgotten:
    its success (``completedIndexes``), its failure (``attempts``), else its number (the next attempt is past it)."""
    meta = pod.get("metadata") or {}
    group = labels.task_group(pod)
    parsed = parse_pod_name(job, group, str(meta.get("name") or ""))
    group_status = ((status or {}).get("groups") or {}).get(group) or {}
    if parsed is None or not isinstance(group_status, Mapping):
        return False
    index, attempt = parsed
    if index in parse_indexes(group_status.get("completedIndexes")):
        return True
    recorded_next, failed = _attempt_records(group_status.get("attempts"), index + 1).get(index, (0, frozenset()))
    if pod_outcome(pod) is Outcome.FAILED:
        return attempt in failed
    started = index in parse_indexes(group_status.get("startedIndexes"))
    return attempt < max(recorded_next, 1 if started else 0)


def _attempt_records(raw: Any, replicas: int) -> dict[int, tuple[int, frozenset[int]]]:
    """``status.groups.<g>.attempts`` read back: index → (next attempt, failed attempts); bad entries skipped."""
    out: dict[int, tuple[int, frozenset[int]]] = {}
    for key, record in (raw if isinstance(raw, Mapping) else {}).items():
        if not str(key).isdigit() or int(key) >= replicas or not isinstance(record, Mapping):
            continue
        try:
            next_attempt = max(int(record.get("next", 0) or 0), 0)
            failed = frozenset(int(a) for a in record.get("failed") or () if int(a) >= 0)
        except (TypeError, ValueError):
            continue
        out[int(key)] = (next_attempt, failed)
    return out


def _max_retries(groups_spec: Sequence[Mapping[str, Any]], group: str) -> int:
    return int(next((g.get("maxRetries", 0) for g in groups_spec if g.get("name") == group), 0) or 0)


def _remaining_work(job: Mapping[str, Any], groups_spec: Sequence[Mapping[str, Any]], plans: Sequence[GroupPlan],
                    mean_capacity: Mapping[str, float] | None) -> float:
    """Tetris remaining work of the Job (``policy.remaining_work``): Σ unfinished tasks · duration · Σ_r d_r/C̄_r."""
    if not mean_capacity:
        return 0.0
    resources = sorted(mean_capacity)
    durations: list[float] = []
    demands: list[list[float]] = []
    for g, p in zip(groups_spec, plans, strict=True):
        left = max(p.replicas - p.succeeded - len(p.exhausted), 0)
        seconds = expected_duration_s(g)
        try:
            demand = task_demand(job, p.name)
        except InvalidInput:
            continue
        durations.append(0.0 if math.isnan(seconds) else left * seconds)  # no hint: no remaining work known
        demands.append([demand[r] for r in resources])
    if not durations:
        return 0.0
    work = remaining_work.remaining_work(durations, demands, [0] * len(durations), 1,
                                         [mean_capacity[r] for r in resources])
    return round(float(work[0]), 3)


# --- the dispatcher's estimates in the status ------------------------------------------------------


def _two_digits(seconds: float) -> float:
    """``seconds`` to 2 significant digits (a status that follows a growing estimate changes in ≤ 10 % steps)."""
    return float(f"{seconds:.2g}")


def _estimate_entry(value: Any) -> dict[str, Any] | None:
    """A ``status.estimate.groups.<g>`` entry read back (ours, or a predecessor's); None when unusable."""
    if not isinstance(value, Mapping):
        return None
    seconds, source = value.get("taskSeconds"), value.get("source")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not isinstance(source, str):
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return {"taskSeconds": seconds, "source": source}


def estimate_status(groups: Sequence[GroupPlan], estimates: Mapping[str, tuple[float, str]] | None,
                    old: Any = None) -> dict[str, Any] | None:
    """``status.estimate`` of a Job: the dispatcher's duration estimates and the work they leave.

    ``estimates``: group name → (one task's estimated seconds, source name: ``estimates.SOURCE_NAMES``) from the
    dispatcher's last decision; ``old``: the ``status.estimate`` written before. A group keeps its last estimate
    when the decision no longer holds one (it finished, or the decision has not run yet since a restart), so a
    merge patch never has to delete it. ``taskSeconds`` is rounded to 2 significant digits, so the status
    changes with the estimate, not with every second a running task adds to it::

        {"remainingWorkSeconds": Σ over the groups of (pending + running tasks) × taskSeconds,
         "groups": {<group>: {"taskSeconds": 120.0, "source": "phase"}}}

    None when no group of the Job has an estimate (none written yet, none held).
    """
    names = {g.name for g in groups}
    out: dict[str, dict[str, Any]] = {}
    old_groups = old.get("groups") if isinstance(old, Mapping) else None
    for name, value in (old_groups.items() if isinstance(old_groups, Mapping) else ()):
        entry = _estimate_entry(value)
        if name in names and entry is not None:
            out[name] = entry
    for name, (seconds, source) in (estimates or {}).items():
        if name in names and math.isfinite(seconds) and seconds > 0:
            out[name] = {"taskSeconds": _two_digits(seconds), "source": str(source)}
    if not out:
        return None
    remaining = math.fsum((g.pending + g.running) * out[g.name]["taskSeconds"] for g in groups if g.name in out)
    return {"remainingWorkSeconds": round(remaining, 3), "groups": dict(sorted(out.items()))}
