"""A Job's plan (:func:`plan_job`): its pods and status in, what to write and release out. Pure.

Attempts are remembered in the Job's status, not only in the pods: ``status.groups.<g>.startedIndexes``
(unfinished tasks that had an attempt) and ``status.groups.<g>.attempts`` (``{"<index>": {"next": n,
"failed": [attempts]}}``, for a task past its first attempt or with a failure). A pod deleted by hand or
with its node (kube-controller-manager's orphan GC) therefore neither frees its name nor takes back the
retry its failure spent: the next attempt is numbered past every attempt ever made, and the failures
counted against ``maxRetries`` are the recorded ones plus those the pods show (a set of attempt numbers,
so nothing is counted twice).

:func:`plan_job` turns a Job and its pods into a :class:`JobPlan`: the status to write, which tasks the
dispatcher may release now (barriers, suspension and the end of the Job taken into account), the Events
to post and the pods to delete when the Job failed. It calls nothing and reads no clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.operator.job_status import UNSCHEDULABLE, condition
from stowage.operator.outcomes import Outcome, Phase, is_bound, is_opportunistic, pod_outcome
from stowage.operator.task_names import TaskRef, format_indexes, parse_indexes, parse_pod_name, pod_name
from stowage.operator.task_pods import expected_duration_s, group_specs, task_demand

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube.records import parse_timestamp
from stowage.policy import remaining_work

__all__ = ["GroupPlan", "JobPlan", "attempt_recorded", "job_progress", "plan_job"]


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
    gang: int = 0
    """Tasks that must start together at the next release (``minAvailable``, at most the tasks left; 0: none,
    or the gang is up and the group's other tasks go one at a time)."""

    @property
    def active(self) -> int:
        """Tasks with a pod (or its create in flight) that has not finished."""
        return self.running + self.pending - self.unreleased

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
    replan_at: float = math.inf
    """Unix time by which the plan is to be made again though nothing changed: a gang's ready timeout."""
    notices: tuple[tuple[str, str, str], ...] = ()
    """Events posted once for this plan whether or not its status changed (a gang taken back)."""

    @property
    def releasable(self) -> list[TaskRef]:
        return [task for group in self.groups for task in group.releasable]

    @property
    def terminal(self) -> bool:
        return self.phase in (Phase.SUCCEEDED, Phase.FAILED)


def job_progress(plan: JobPlan) -> float:
    """Finished / total tasks of the Job."""
    return sum(g.succeeded for g in plan.groups) / (sum(g.replicas for g in plan.groups) or 1)


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
    gang_timeout_s: float = math.inf,
) -> JobPlan:
    """The plan for ``job`` given its task pods.

    ``pods``: every pod the Job owns (any phase; pods being deleted included); ``in_flight``: names
    released but not yet in the cache (they count as active, so nothing is released twice);
    ``new_evictions``: Stowage evictions per group seen since the status was last written (added to
    ``status.groups[<group>].evicted``); ``now``: RFC 3339 time for new conditions and timestamps;
    ``mean_capacity``: the cluster's mean node allocatable ``C̄`` for ``status.remainingWork`` (0 without it);
    ``blocked``: group → (reason, message) of groups that cannot be dispatched now (:func:`blocked_groups`):
    condition ``Unschedulable`` and a Warning Event, so a Job that cannot progress never waits silently.
    ``gang_timeout_s``: an all-or-nothing group (``minAvailable``) whose gang is not all Running this long after
    its newest pod was created is taken back (:func:`_gangs`; the operator passes ``packing.gang_ready_timeout_s``).
    Raises :class:`InvalidInput` when the spec cannot be planned (the caller fails the Job with it).

    The steps: each group's tasks counted from their attempt pods (:func:`_count_group`), the Job's phase
    (:func:`_phase`), what may be released (:func:`_gate`), conditions and Events (:func:`_conditions`,
    :func:`_group_events`), then the status (:func:`_status`).
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
    attempts = _attempt_pods(name, groups_spec, pods)
    counted = [_count_group(name, g, old_groups.get(str(g.get("name"))) or {}, attempts, flying, new_evictions)
               for g in groups_spec]
    active_pods = [pod for c in counted for pod in c.active_pods]
    phase = _phase([c.plan for c in counted], job, old.get("phase"), bool(active_pods or flying))
    plans = _gate([c.plan for c in counted], phase)
    conditions, events, delete = _conditions(phase, plans, groups_spec, old, blocked or {}, active_pods, now)
    events.extend(_group_events(phase, plans, groups_spec, old_groups, new_evictions))
    replan_at, told = math.inf, []
    if phase in (Phase.PENDING, Phase.RUNNING, Phase.SUSPENDED):
        plans, taken, told, replan_at = _gangs(plans, counted, groups_spec, now, gang_timeout_s)
        delete = (*delete, *taken)
    status = _status(job, groups_spec, plans, phase, conditions, attempts, now, mean_capacity)
    return JobPlan(phase=phase, groups=tuple(plans), status=status, events=tuple(events), delete=delete,
                   finished=tuple(pod for c in counted for pod in c.finished), replan_at=replan_at,
                   notices=tuple(told))


#: Attempt pods per (group, index): (attempt number, pod).
_Attempts = dict[tuple[str, int], list[tuple[int, Mapping[str, Any]]]]


def _attempt_pods(name: str, groups_spec: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> _Attempts:
    """The Job's pods by task, each with its attempt number; pods of unknown groups or names left out."""
    attempts: _Attempts = {}
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
    return attempts


@dataclass(frozen=True, slots=True)
class _Counted:
    """One group counted: its plan (ungated), its newly succeeded pods, the names of its active pods."""

    plan: GroupPlan
    finished: tuple[Mapping[str, Any], ...]
    active_pods: tuple[str, ...]
    active_created: tuple[float, ...] = ()
    """Creation time (Unix seconds) of each active pod, in ``active_pods``' order (NaN: unknown)."""


def _count_group(name: str, g: Mapping[str, Any], prior: Mapping[str, Any], attempts: _Attempts, flying: set[str],
                 new_evictions: Mapping[str, int]) -> _Counted:
    """A group's tasks from their attempt pods, the names in flight and the status so far (``prior``)."""
    group = str(g.get("name"))
    replicas = int(g.get("replicas", 1))
    max_retries = int(g.get("maxRetries", 0) or 0)
    completed = {i for i in parse_indexes(prior.get("completedIndexes")) if i < replicas}
    started = {i for i in parse_indexes(prior.get("startedIndexes")) if i < replicas}
    records = _attempt_records(prior.get("attempts"), replicas)
    pending = running = failed = opp_running = unbound = 0
    exhausted: list[int] = []
    next_attempts: list[TaskRef] = []
    now_started: set[int] = set()
    now_attempts: list[tuple[int, int, tuple[int, ...]]] = []
    finished: list[Mapping[str, Any]] = []
    active_pods: list[str] = []
    active_created: list[float] = []
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
                created = parse_timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
                active_created.append(math.nan if created is None else created)
            live = active[-1][1] if active else None
            if live is not None and (live.get("status") or {}).get("phase") == "Running":
                running += 1
                opp_running += is_opportunistic(live)
            else:
                pending += 1
                unbound += live is None or not is_bound(live)
            continue
        if failures > max_retries:
            exhausted.append(index)
            continue
        pending += 1
        next_attempts.append(TaskRef(group, index, latest + 1))
    evicted = int(prior.get("evicted", 0) or 0) + int(new_evictions.get(group, 0))
    plan = GroupPlan(
        name=group, replicas=replicas, depends_on=tuple(str(d) for d in g.get("dependsOn") or ()),
        pending=pending, running=running, succeeded=len(completed), failed=failed, evicted=evicted,
        exhausted=tuple(exhausted), opportunistic_running=opp_running, completed=frozenset(completed),
        releasable=tuple(next_attempts), unbound=unbound, unreleased=len(next_attempts),
        started=frozenset(now_started),
        attempts=tuple(now_attempts),
    )
    return _Counted(plan, tuple(finished), tuple(active_pods), tuple(active_created))


def _gangs(plans: Sequence[GroupPlan], counted: Sequence[_Counted], groups_spec: Sequence[Mapping[str, Any]],
           now: str, timeout_s: float) -> tuple[list[GroupPlan], tuple[str, ...], list[tuple[str, str, str]], float]:
    """All-or-nothing groups (``minAvailable``): each group's ``gang`` for the dispatcher, and the gangs taken back.

    A gang of ``k = min(minAvailable, tasks left)`` is released whole (the dispatcher's ``DecideInput.gang``) when
    none of the group's tasks is active. A group with fewer than ``k`` active tasks (a member failed, was evicted or
    deleted, or its pod was not created) is not whole, and one whose ``k`` tasks are not all Running
    ``timeout_s`` after its newest pod was created did not come up: either way its active pods are deleted (a
    deleted task pod spends no retry) and nothing of it is released until the next plan, which releases the
    gang whole again. Nothing half-placed holds room. The last value: when a gang coming up times out (the plan
    is made again then).
    """
    spec = {str(g.get("name")): g for g in groups_spec}
    at = parse_timestamp(now)
    out: list[GroupPlan] = []
    delete: list[str] = []
    events: list[tuple[str, str, str]] = []
    replan_at = math.inf
    for p, c in zip(plans, counted, strict=True):
        m = (spec.get(p.name) or {}).get("minAvailable")
        if not isinstance(m, int) or isinstance(m, bool) or m < 1 or p.remaining == 0:
            out.append(p)
            continue
        k = min(m, p.remaining)
        active = p.active
        if active == 0:
            out.append(dataclasses.replace(p, gang=k))
            continue
        why = None
        if active < k:
            why = (f"{active} of its {k} tasks are active (a member failed, was evicted or deleted, or was not "
                   "created)")
        elif p.running < k and at is not None and c.active_created:
            newest = max((t for t in c.active_created if not math.isnan(t)), default=math.nan)
            if not math.isnan(newest) and at - newest <= timeout_s:
                replan_at = min(replan_at, newest + timeout_s + 1.0)
            elif not math.isnan(newest):
                why = (f"only {p.running} of its {k} tasks were Running {timeout_s:g} s after it was released "
                       "(packing.gang_ready_timeout_s)")
        if why is None:
            out.append(p)
            continue
        delete.extend(c.active_pods)
        events.append(("Warning", "GangTakenBack", f"task group {p.name!r} is all or nothing (minAvailable {m}): "
                       f"{why}; its {len(c.active_pods)} pod(s) were deleted, without spending a retry, and the "
                       f"group waits to start whole again"))
        out.append(dataclasses.replace(p, releasable=(), gang=k))
    return out, tuple(delete), events, replan_at


def _phase(plans: Sequence[GroupPlan], job: Mapping[str, Any], old_phase: Any, active: bool) -> Phase:
    """The Job's phase from its groups' counts (``active``: some pod is active or a name is in flight)."""
    if len({p.name for p in plans if p.done}) == len(plans):
        return Phase.SUCCEEDED
    if any(p.exhausted for p in plans) or old_phase == Phase.FAILED:
        return Phase.FAILED
    if (job.get("spec") or {}).get("suspend"):
        return Phase.SUSPENDED
    if any(p.running or p.succeeded or p.failed or p.evicted or p.started for p in plans) or active:
        return Phase.RUNNING
    return Phase.PENDING


def _gate(plans: Sequence[GroupPlan], phase: Phase) -> list[GroupPlan]:
    """Who may release: not finished, not suspended, every dependency succeeded."""
    done = {p.name for p in plans if p.done}
    gated: list[GroupPlan] = []
    for p in plans:
        waiting = tuple(d for d in p.depends_on if d not in done)
        releasable = p.releasable if phase in (Phase.PENDING, Phase.RUNNING) and not waiting else ()
        gated.append(dataclasses.replace(p, releasable=releasable, waiting_on=waiting))
    return gated


def _conditions(phase: Phase, plans: Sequence[GroupPlan], groups_spec: Sequence[Mapping[str, Any]],
                old: Mapping[str, Any], blocked: Mapping[str, tuple[str, str]], active_pods: Sequence[str], now: str,
                ) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]], tuple[str, ...]]:
    """The Job's conditions, the Events their changes call for, and the pods to delete (a failed Job's)."""
    old_phase = old.get("phase")
    old_conditions = [c for c in old.get("conditions") or [] if isinstance(c, Mapping)]
    done = {p.name for p in plans if p.done}
    conditions: list[dict[str, Any]] = []
    events: list[tuple[str, str, str]] = []
    total = sum(p.replicas for p in plans)
    succeeded = sum(p.succeeded for p in plans)
    delete: tuple[str, ...] = ()
    if phase is Phase.SUCCEEDED:
        message = f"all {total} tasks succeeded"
        conditions.append(condition("Complete", True, "AllTasksSucceeded", message, now, old_conditions))
        if old_phase != Phase.SUCCEEDED:
            events.append(("Normal", "Completed", message))
        return conditions, events, delete
    if phase is Phase.FAILED:
        failed_groups = [p for p in plans if p.exhausted]
        if failed_groups:
            g0 = failed_groups[0]
            message = (f"task group {g0.name!r}: task {g0.exhausted[0]} failed more than maxRetries "
                       f"({_max_retries(groups_spec, g0.name)}) times; {succeeded}/{total} tasks succeeded")
        else:
            message = next((str(c.get("message")) for c in old_conditions if c.get("type") == "Failed"),
                           "the Job failed")
        conditions.append(condition("Failed", True, "RetriesExhausted" if failed_groups else "Failed", message,
                                    now, old_conditions))
        delete = tuple(active_pods)
        if old_phase != Phase.FAILED:
            events.append(("Warning", "Failed", message))
        return conditions, events, delete
    suspended = phase is Phase.SUSPENDED
    conditions.append(condition(
        "Suspended", suspended, "Suspended" if suspended else "Resumed",
        "spec.suspend is true: no new tasks are released; running tasks finish" if suspended
        else "tasks are released as the dispatcher finds room", now, old_conditions))
    if suspended and old_phase != Phase.SUSPENDED:
        events.append(("Normal", "Suspended", "no new tasks are released while spec.suspend is true"))
    if old_phase == Phase.SUSPENDED and not suspended:
        events.append(("Normal", "Resumed", "spec.suspend is false again: tasks are released"))
    stuck = [blocked[p.name] for p in plans if p.name not in done and p.name in blocked]
    previous = next((c for c in old_conditions if c.get("type") == UNSCHEDULABLE), None)
    if stuck:
        reason, message = stuck[0][0], "; ".join(dict.fromkeys(m for _, m in stuck))
        conditions.append(condition(UNSCHEDULABLE, True, reason, message, now, old_conditions))
        if previous is None or previous.get("status") != "True" or previous.get("message") != message:
            events.append(("Warning", reason, message))
    elif previous is not None:
        conditions.append(condition(UNSCHEDULABLE, False, "Dispatchable",
                                    "every unfinished task group can be dispatched", now, old_conditions))
    return conditions, events, delete


def _group_events(phase: Phase, plans: Sequence[GroupPlan], groups_spec: Sequence[Mapping[str, Any]],
                  old_groups: Mapping[str, Any], new_evictions: Mapping[str, int]) -> list[tuple[str, str, str]]:
    """Per group: a Warning for attempts failed since the last status, a Normal Event for new evictions."""
    events: list[tuple[str, str, str]] = []
    for p in plans:
        before = int((old_groups.get(p.name) or {}).get("failed", 0) or 0)
        if p.failed > before and phase is not Phase.FAILED:
            events.append(("Warning", "TaskFailed", f"{p.failed - before} attempt(s) of group {p.name!r} failed; "
                           f"failed tasks are retried up to maxRetries ({_max_retries(groups_spec, p.name)}) times"))
        if new_evictions.get(p.name):
            n = new_evictions[p.name]
            events.append(("Normal", "TaskEvicted", f"{n} task(s) of group {p.name!r} evicted by Stowage; "
                           "re-queued without spending a retry"))
    return events


def _status(job: Mapping[str, Any], groups_spec: Sequence[Mapping[str, Any]], plans: Sequence[GroupPlan],
            phase: Phase, conditions: list[dict[str, Any]], attempts: _Attempts, now: str,
            mean_capacity: Mapping[str, float] | None) -> dict[str, Any]:
    """``status`` of the Job: phase, counts, groups, conditions, and its start and completion times."""
    meta = job.get("metadata") or {}
    old = job.get("status") or {}
    start = old.get("startTime")
    if start is None and phase is not Phase.PENDING:
        creations = sorted(_creation(pod) for tries in attempts.values() for _, pod in tries if _creation(pod))
        start = creations[0] if creations else now
    completion = old.get("completionTime")
    if phase in (Phase.SUCCEEDED, Phase.FAILED) and completion is None:
        completion = now
    total = sum(p.replicas for p in plans)
    succeeded = sum(p.succeeded for p in plans)
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
    return status


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
