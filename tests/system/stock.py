"""Stock Kubernetes against Stowage on the same workload (issue #19, "the gain is proven in the cluster").

Helpers of the on-demand benchmark ``tests/system/bench_stock.py``. One workload (:class:`Workload`: jobs of task
groups, each task ``cpu``/``memory`` running ``run_s`` on the fake kubelet) runs three ways:

- **stock** (:class:`StockArm`): one ``batch/v1`` Job per job and task group (parallelism = completions = tasks),
  pods scheduled by a plain kube-scheduler (``default-scheduler``, its default profile); a group with ``dependsOn``
  gets its Job when the Jobs it depends on are Complete, as a user's script would do it;
- **stowage** (:class:`StowageArm`): the same jobs as Stowage Jobs through the whole stack, no expectedDuration;
- **simulator** (:func:`simulate`): ``stowage simulate`` of a workload file with the same nodes, jobs and demands,
  every arrival at the submission time the cluster run measured (preset ``kube-default`` for stock, ``stowage``
  for Stowage).

:func:`drive` submits a workload's jobs on time (a job with ``after`` once that job's status says it is done),
:class:`Timeline` stamps every pod's transitions as its watch sees them (wall clock of this process, the same clock
as the submissions), :func:`measure` turns the stamps into JCTs, makespan, finish order and where each pod's time
went, and :func:`workload_report` renders the Markdown.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from stowage import labels
from stowage.kube.records import parse_timestamp
from tests.support.fake_kubelet import ANN_RUN_SECONDS
from tests.support.stack import ALLOCATABLE, STOWAGE, TaskLedger, WholeStack, wait_for
from tests.system.load import quantile

#: Labels the benchmark puts on every pod of both cluster arms (Stowage keeps a template's labels).
LABEL_JOB = "bench.stowage.io/job"
LABEL_GROUP = "bench.stowage.io/group"
#: The phases of a pod's life the report splits the time into, as (name, from stamp, to stamp).
PHASES: tuple[tuple[str, str, str], ...] = (
    ("ready → created", "ready", "created"),
    ("created → released", "created", "released"),
    ("released → bound", "released", "bound"),
    ("bound → running", "bound", "running"),
    ("running → finished", "running", "finished"),
)


# --- the workloads ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """``tasks`` identical tasks of ``cpu``/``memory`` running ``run_s`` on the fake kubelet."""

    name: str
    tasks: int
    run_s: int
    cpu: str = "1"
    memory: str = "1Gi"
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchJob:
    """One job. Submitted ``at_s`` seconds after the run starts, or, with ``after``, ``at_s`` seconds after that
    job's status says it is done (``etl-2`` after ``etl-1``)."""

    name: str
    groups: tuple[Group, ...]
    at_s: float = 0.0
    after: str | None = None
    queue: str = "default"
    opportunistic: str = "false"
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def tasks(self) -> int:
        return sum(g.tasks for g in self.groups)


@dataclass(frozen=True)
class Workload:
    """Jobs, the Queues the Stowage arm creates (name → weight; empty: the ``default`` Queue), and whether a
    Stowage arm without harvesting (every job ``opportunistic: "false"``) runs beside the one as written."""

    name: str
    description: str
    jobs: tuple[BenchJob, ...]
    queues: Mapping[str, float] = field(default_factory=dict)
    without_harvest: bool = False

    @property
    def tasks(self) -> int:
        return sum(j.tasks for j in self.jobs)

    def job(self, name: str) -> BenchJob:
        return next(j for j in self.jobs if j.name == name)

    def no_harvest(self) -> Workload:
        jobs = tuple(dataclasses.replace(j, opportunistic="false") for j in self.jobs)
        return dataclasses.replace(self, jobs=jobs, without_harvest=False)


def _one(name: str, tasks: int, cpu: int, run_s: int, **kwargs: Any) -> BenchJob:
    """A job of one group ``t``: ``tasks`` tasks of ``cpu`` cores and as many GiB."""
    return BenchJob(name, (Group("t", tasks, run_s, str(cpu), f"{cpu}Gi"),), **kwargs)


#: Mixed sizes, submitted largest first 0.2 s apart: 59 tasks, 1,870 core-seconds on 3 × 7 one-core slots
#: (the cluster filled about 2.8 times over).
MIXED_JOBS = (("m16", 16, 1, 30), ("m12", 12, 1, 40), ("m8a", 8, 2, 20), ("m8b", 8, 1, 10), ("m4a", 4, 1, 40),
              ("m4b", 4, 2, 20), ("m2a", 2, 1, 30), ("m2b", 2, 1, 10), ("m1a", 1, 1, 20), ("m1b", 1, 2, 40),
              ("m1c", 1, 1, 10))


def mixed() -> Workload:
    jobs = tuple(_one(n, t, c, r, at_s=0.2 * i) for i, (n, t, c, r) in enumerate(MIXED_JOBS))
    return Workload("mixed", "11 jobs of 1–16 tasks (1 or 2 cores, 10–40 s), largest first, 0.2 s apart, one "
                    "queue, no durations stated", jobs)


def two_queues() -> Workload:
    jobs = tuple(_one(n, t, c, r, at_s=0.2 * i, queue="bench-a" if i % 2 == 0 else "bench-b")
                 for i, (n, t, c, r) in enumerate(MIXED_JOBS))
    return Workload("two-queues", "the mixed jobs alternately in Queues bench-a (weight 2) and bench-b (weight 1)",
                    jobs, queues={"bench-a": 2.0, "bench-b": 1.0})


def _etl(name: str, **kwargs: Any) -> BenchJob:
    return BenchJob(name, (Group("map", 8, 20), Group("reduce", 2, 10, depends_on=("map",))),
                    labels={labels.LABEL_RECURRING: "etl"}, **kwargs)


def recurring() -> Workload:
    jobs = (_one("bg-a", 16, 1, 40, at_s=0.0), _etl("etl-1", at_s=0.2), _one("bg-b", 8, 2, 30, at_s=0.4),
            _one("bg-c", 12, 1, 30, at_s=30.0), _etl("etl-2", after="etl-1"), _one("bg-d", 8, 1, 20, at_s=60.0))
    return Workload("recurring", "etl (map 8 × 20 s, then reduce 2 × 10 s behind a barrier) run twice, etl-2 "
                    "submitted when etl-1 is done (label stowage.io/recurring: etl), among background jobs arriving "
                    "at 0, 30 and 60 s", jobs)


def harvest() -> Workload:
    jobs = (_one("r14", 14, 1, 40, at_s=0.0), _one("r4", 4, 2, 40, at_s=0.2),
            _one("o10a", 10, 1, 20, at_s=0.4, opportunistic="true"),
            _one("o10b", 10, 1, 30, at_s=0.6, opportunistic="true"),
            _one("a6", 6, 1, 10, at_s=0.8, opportunistic="auto"))
    return Workload("harvest", "regular jobs filling the cluster (r14, r4) and jobs that may harvest: o10a, o10b "
                    "opportunistic \"true\", a6 \"auto\"; the stock arm runs them all as ordinary pods, and a "
                    "second Stowage arm runs every job \"false\" (no harvesting)", jobs, without_harvest=True)


def reserved_idle() -> Workload:
    # `harvest`'s makespan is fixed by its regular jobs: their 22 cores of one- and two-core tasks cannot all fit
    # in 3 × 7.5 cores at once, so one regular task starts at 40 s and ends at 80 s whatever runs beside it.
    # Here the regular job fits and reserves 20 of the 22.5 cores for 90 s while using half of them (UBIS §II),
    # and most of the work may harvest: what UBIS's harvesting is for.
    jobs = (_one("r20", 20, 1, 90, at_s=0.0),
            _one("o10a", 10, 1, 20, at_s=0.5, opportunistic="true"),
            _one("o10b", 10, 1, 20, at_s=1.0, opportunistic="true"),
            _one("a10", 10, 1, 20, at_s=1.5, opportunistic="auto"))
    return Workload("reserved-idle", "a regular job reserving 20 of the 22.5 cores for 90 s and using half (r20), and "
                    "30 one-core 20 s tasks that may harvest: o10a, o10b \"true\", a10 \"auto\"; the stock arm runs "
                    "them all as ordinary pods, and a second Stowage arm runs every job \"false\"", jobs,
                    without_harvest=True)


WORKLOADS: Mapping[str, Callable[[], Workload]] = {"mixed": mixed, "two-queues": two_queues,
                                                   "recurring": recurring, "harvest": harvest,
                                                   "reserved-idle": reserved_idle}


def chosen(spec: str | None) -> list[str]:
    """The workloads a comma list names (``None`` or empty: all), refused naming the unknown ones."""
    names = [n.strip() for n in (spec or "").split(",") if n.strip()] or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"STOWAGE_STOCK_WORKLOADS: {', '.join(unknown)} unknown; known: {', '.join(WORKLOADS)}")
    return names


# --- the pods' timeline ----------------------------------------------------------------------------------------


def _ts(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


class Timeline(TaskLedger):
    """A :class:`TaskLedger` that also stamps, per pod object (uid), when its watch first showed it: ``created``
    (first seen), ``released`` (no scheduling gate), ``bound`` (``spec.nodeName``), ``running`` (phase Running or
    later), ``finished`` (Succeeded or Failed); wall clock of this process. The API's own times (1 s resolution)
    are kept beside them: ``created_api``, ``bound_api`` (PodScheduled), ``finished_api``."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.stamps: dict[str, dict[str, Any]] = {}

    def _record(self, pod: client.V1Pod) -> None:
        super()._record(pod)
        now = time.time()
        meta, spec, status = pod.metadata, pod.spec, pod.status
        phase = status.phase if status else None
        with self._lock:
            s = self.stamps.setdefault(meta.uid, {"name": meta.name, "uid": meta.uid, "created": now,
                                                  "created_api": _ts(meta.creation_timestamp)})
            s["labels"], s["phase"] = dict(meta.labels or {}), phase
            if spec is not None and not spec.scheduling_gates:
                s.setdefault("released", now)
            if spec is not None and spec.node_name:
                s.setdefault("bound", now)
                s["node"] = spec.node_name
            if phase in ("Running", "Succeeded", "Failed") and spec is not None and spec.node_name:
                s.setdefault("running", now)
            if phase in ("Succeeded", "Failed"):
                s.setdefault("finished", now)
            for c in (status.conditions or []) if status else []:
                if c.type == "PodScheduled" and c.status == "True":
                    s.setdefault("bound_api", _ts(c.last_transition_time))
            for c in (status.container_statuses or []) if status else []:
                if c.state is not None and c.state.terminated is not None:
                    s.setdefault("finished_api", _ts(c.state.terminated.finished_at))

    def pod_stamps(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(list(self.stamps.values()))


# --- the two cluster arms ------------------------------------------------------------------------------------


def _template_labels(job: BenchJob, group: Group) -> dict[str, str]:
    return {LABEL_JOB: job.name, LABEL_GROUP: group.name}


#: The forecast error is also measured on each unfinished Job's prediction this long after the workload's first
#: Job finished: its tasks have taught the queue's prior by then (a pass learns, the forecaster refreshes every 5 s).
LEARNED_AFTER_S = 10.0


class StowageArm:
    """The jobs as Stowage Jobs (``jobs.stowage.io``) in ``namespace``: the operator releases their tasks."""

    kind = "stowage"

    def __init__(self, stack: WholeStack, namespace: str) -> None:
        self.stack, self.namespace = stack, namespace
        self.ready: dict[tuple[str, str], float] = {}  # unused here: barriers are the operator's
        self.first_estimate: dict[str, dict[str, Any]] = {}  # job → status.estimate.groups when first written
        self.forecasts: dict[str, dict[str, Any]] = {}  # job → {"first", "last", "learned"}: status.forecast + "seen"
        self.first_done: float | None = None  # wall clock when a job of the workload was first seen Succeeded

    def body(self, job: BenchJob) -> dict[str, Any]:
        groups = [{"name": g.name, "replicas": g.tasks, "cpu": g.cpu, "memory": g.memory, "run_s": g.run_s,
                   **({"dependsOn": list(g.depends_on)} if g.depends_on else {})} for g in job.groups]
        body = self.stack.job_body(job.name, groups, queue=job.queue, opportunistic=job.opportunistic)
        body["metadata"]["labels"] = dict(job.labels)
        for task, g in zip(body["spec"]["tasks"], job.groups, strict=True):
            task["template"]["metadata"]["labels"].update(_template_labels(job, g))
        return body

    def submit(self, job: BenchJob) -> None:
        self.stack.create_job(self.namespace, self.body(job))

    def done(self) -> set[str]:
        """The jobs whose status says Succeeded (a Failed one stops the run)."""
        out = set()
        learned = self.first_done is not None and time.time() >= self.first_done + LEARNED_AFTER_S
        for name, j in self.stack.jobs(self.namespace).items():
            groups = ((j.get("status") or {}).get("estimate") or {}).get("groups")
            if groups and name not in self.first_estimate:
                self.first_estimate[name] = dict(groups)
            forecast = (j.get("status") or {}).get("forecast") or {}
            if forecast.get("finish"):
                mine = self.forecasts.setdefault(name, {"first": {**forecast, "seen": time.time()}})
                if forecast.get("queuePosition") is not None:  # the last one while pending (none: never pending)
                    mine["last"] = {**forecast, "seen": time.time()}
                if learned and "learned" not in mine:
                    mine["learned"] = {**forecast, "seen": time.time()}  # its prediction once the queue learned
            phase = (j.get("status") or {}).get("phase")
            if phase == "Failed":
                raise AssertionError(f"Stowage Job {name} failed: {(j.get('status') or {}).get('conditions')}")
            if phase == "Succeeded":
                out.add(name)
        if out and self.first_done is None:
            self.first_done = time.time()
        return out


class StockArm:
    """One ``batch/v1`` Job per job and group (``<job>-<group>``), ``default-scheduler``; a group with
    ``dependsOn`` is created once the Jobs it waits on are Complete (``ready`` keeps when that was seen)."""

    kind = "stock"

    def __init__(self, stack: WholeStack, namespace: str) -> None:
        self.stack, self.namespace = stack, namespace
        self.batch = client.BatchV1Api(stack.api)
        self.jobs: dict[str, BenchJob] = {}
        self.created: set[tuple[str, str]] = set()
        self.ready: dict[tuple[str, str], float] = {}

    def body(self, job: BenchJob, group: Group) -> dict[str, Any]:
        pod_labels = {"app": job.name, **_template_labels(job, group)}
        return {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{job.name}-{group.name}", "labels": {**job.labels, LABEL_JOB: job.name}},
            "spec": {"parallelism": group.tasks, "completions": group.tasks, "backoffLimit": 2 * group.tasks,
                     "template": {
                         "metadata": {"labels": pod_labels, "annotations": {ANN_RUN_SECONDS: str(group.run_s)}},
                         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                  "nodeSelector": {self.stack.node_label: self.stack.id},
                                  "containers": [{"name": "main", "image": "busybox", "resources": {
                                      "requests": {"cpu": group.cpu, "memory": group.memory}}}]}}},
        }

    def _create(self, job: BenchJob, group: Group) -> None:
        self.batch.create_namespaced_job(self.namespace, self.body(job, group))
        self.created.add((job.name, group.name))

    def submit(self, job: BenchJob) -> None:
        self.jobs[job.name] = job
        for g in job.groups:
            if not g.depends_on:
                self._create(job, g)

    def done(self) -> set[str]:
        """The jobs all of whose batch Jobs are Complete; creates the groups whose barrier just opened."""
        complete: set[str] = set()
        for j in self.batch.list_namespaced_job(self.namespace).items:
            conditions = {c.type: c.status for c in j.status.conditions or []} if j.status else {}
            if conditions.get("Failed") == "True":
                raise AssertionError(f"batch Job {j.metadata.name} failed: {j.status.conditions}")
            if conditions.get("Complete") == "True":
                complete.add(j.metadata.name)
        now = time.time()
        out = set()
        for job in self.jobs.values():
            for g in job.groups:
                if (job.name, g.name) not in self.created and all(f"{job.name}-{d}" in complete for d in g.depends_on):
                    self.ready[(job.name, g.name)] = now
                    self._create(job, g)
            if all(f"{job.name}-{g.name}" in complete for g in job.groups):
                out.add(job.name)
        return out


# --- one run -------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What :func:`drive` saw: when each job was submitted and when its status said done (wall clock)."""

    arm: str
    workload: Workload
    submitted: dict[str, float] = field(default_factory=dict)
    status_done: dict[str, float] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    barrier_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    first_estimate: dict[str, dict[str, Any]] = field(default_factory=dict)  # Stowage: status.estimate.groups
    forecasts: dict[str, dict[str, Any]] = field(default_factory=dict)  # Stowage: StowageArm.forecasts
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # the fake kubelet's: FakeKubelet.outcomes


def drive(arm: StowageArm | StockArm, workload: Workload, timeout_s: float, poll_s: float = 0.25) -> Run:
    """Submit every job on time and poll until every job is done (bounded by ``timeout_s``)."""
    run = Run(arm.kind, workload)
    start = time.time()
    deadline = time.monotonic() + timeout_s
    while len(run.status_done) < len(workload.jobs):
        for job in workload.jobs:
            if job.name in run.submitted:
                continue
            base = start if job.after is None else run.status_done.get(job.after)
            if base is not None and time.time() >= base + job.at_s:
                run.submitted[job.name] = time.time()
                arm.submit(job)
        for name in arm.done():
            run.status_done.setdefault(name, time.time())
        if time.monotonic() > deadline:
            missing = sorted(j.name for j in workload.jobs if j.name not in run.status_done)
            raise AssertionError(f"{arm.kind} arm of {workload.name}: not done after {timeout_s:.0f} s: {missing}")
        time.sleep(poll_s)
    run.barrier_seen = dict(arm.ready)
    run.first_estimate = dict(getattr(arm, "first_estimate", {}))
    run.forecasts = dict(getattr(arm, "forecasts", {}))
    return run


def run_arm(stack: WholeStack, arm_cls: type[StowageArm] | type[StockArm], workload: Workload, timeout_s: float,
            prefix: str) -> Run:
    """``workload`` through one cluster arm in a fresh namespace (deleted afterwards, waited for)."""
    if arm_cls.kind == "stowage":
        for queue, weight in workload.queues.items():
            stack.create_queue(queue, weight=weight)
    with stack.namespace(prefix) as ns:
        timeline = Timeline(stack.api, ns).start()
        try:
            arm = arm_cls(stack, ns)
            run = drive(arm, workload, timeout_s)
            # The watch may trail the last status by a moment: wait until every job's pods show finished.
            wait_for(lambda: _all_finished(timeline, workload), 30, "the pod watch to catch up", interval_s=0.5)
            run.pods = timeline.pod_stamps()
            run.outcomes = stack.kubelet.outcomes(ns)
            if arm.kind == "stowage":
                run.problems = timeline.problems(stack.jobs(ns))
        finally:
            timeline.stop()
    with contextlib.suppress(AssertionError):  # best effort: the next arm should start on an idle cluster
        wait_for(lambda: _namespace_gone(stack, ns), 180, f"namespace {ns} deleted", interval_s=1.0)
    return run


def dump(run: Run, path: Path) -> None:
    """What a run saw, as JSON (submissions, status times, every pod's stamps), for another look later."""
    path.write_text(json.dumps({"arm": run.arm, "workload": dataclasses.asdict(run.workload),
                                "submitted": run.submitted, "status_done": run.status_done,
                                "barrier_seen": {f"{j}/{g}": t for (j, g), t in run.barrier_seen.items()},
                                "problems": run.problems, "pods": run.pods, "kubelet": run.outcomes},
                               indent=1, default=str) + "\n")


def _namespace_gone(stack: WholeStack, ns: str) -> bool:
    try:
        stack.core.read_namespace(ns)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def _all_finished(timeline: Timeline, workload: Workload) -> bool:
    done: dict[tuple[str, str], int] = {}
    for s in timeline.pod_stamps():
        if s["phase"] == "Succeeded" and "finished" in s:
            key = (s["labels"].get(LABEL_JOB, ""), s["labels"].get(LABEL_GROUP, ""))
            done[key] = done.get(key, 0) + 1
    return all(done.get((j.name, g.name), 0) >= g.tasks for j in workload.jobs for g in j.groups)


# --- what a run measured --------------------------------------------------------------------------------------


@dataclass
class Measured:
    """One arm's numbers (seconds). ``jct``: last task finished − submitted; ``status_jct``: the job's status said
    done (polled every 0.25 s) − submitted; ``phases``: per class of pod (``regular``, ``opportunistic``), per
    succeeded pod, the seconds of each of :data:`PHASES`."""

    arm: str
    jct: dict[str, float]
    finish: dict[str, float]
    arrival: dict[str, float]
    makespan: float
    status_jct: dict[str, float] = field(default_factory=dict)
    phases: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # pod class → phase → seconds
    busy_cores: float = math.nan
    pods: int = 0
    failed_attempts: int = 0
    opportunistic: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # the simulator's JSON numbers (sim arms only)
    room_waits: list[float] = field(default_factory=list)  # per regular pod: see room_waits()
    first_estimate: dict[str, dict[str, Any]] = field(default_factory=dict)  # job → its status's first estimate
    start: dict[str, float] = field(default_factory=dict)  # job → its first pod bound (wall clock)
    forecasts: dict[str, dict[str, Any]] = field(default_factory=dict)  # job → first and last status.forecast
    cost: HarvestCost | None = None  # what harvesting cost (cluster: the fake kubelet's outcomes; sim: its summary)

    @property
    def mean_jct(self) -> float:
        return statistics.fmean(self.jct.values()) if self.jct else math.nan

    @property
    def p95_jct(self) -> float:
        return quantile(list(self.jct.values()), 0.95)

    def order(self) -> list[str]:
        return sorted(self.finish, key=lambda n: (self.finish[n], n))


@dataclass
class HarvestCost:
    """What harvesting cost one run, defined as the simulator's summary defines it (``stowage.sim.metrics``).

    ``regular_slowdown_mean`` / ``_p95``: over the regular pods that were never opportunistic and succeeded, run
    time ÷ run-seconds − 1 (at least 0, as the simulator clips it); ``harvested_fraction``: task-seconds run on
    harvested capacity (as opportunistic pods, until promoted) ÷ all task-seconds run (finished and evicted);
    ``lost_s``: the work the evicted opportunistic pods had done (seconds at full speed), and ``lost_fraction`` that
    ÷ the harvested task-seconds; ``promotions``: pods promoted in place while running; ``evicted``: opportunistic
    pods ended by an eviction.
    """

    regular_slowdown_mean: float
    regular_slowdown_p95: float
    harvested_fraction: float
    lost_s: float
    lost_fraction: float
    promotions: int
    evicted: int
    regular_pods: int = 0  # the pods the slowdown is over (the simulator's JSON does not say)
    harvested_s: float = math.nan
    run_s: float = math.nan
    regular_killed: int = 0  # regular pods ended by a deletion while running (there should be none)

    @classmethod
    def from_outcomes(cls, outcomes: Iterable[Mapping[str, Any]]) -> HarvestCost:
        """From the fake kubelet's record of every pod it ran (:meth:`FakeKubelet.outcomes`): its own start and end
        times (no watch in between), the work each did and the seconds each ran as opportunistic."""
        slow: list[float] = []
        run_s = harvested = lost = 0.0
        promotions = evicted = regular_killed = 0
        for o in outcomes:
            if o.get("started_at") is None or o.get("ended_at") is None:
                continue
            took = o["ended_at"] - o["started_at"]
            run_s += took
            harvested += o.get("opportunistic_s", 0.0)
            promotions += o.get("promoted_at") is not None
            if o["outcome"] == "Killed":
                if o.get("opportunistic_at_end"):
                    evicted += 1
                    lost += o.get("work_done", 0.0)
                else:
                    regular_killed += 1
            elif o["outcome"] == "Succeeded" and not o.get("was_opportunistic") and (o.get("run_s") or 0) > 0:
                slow.append(max(took / o["run_s"] - 1.0, 0.0))
        return cls(statistics.fmean(slow) if slow else 0.0, quantile(slow, 0.95) if slow else 0.0,
                   harvested / run_s if run_s > 0 else 0.0, lost, lost / harvested if harvested > 0 else 0.0,
                   promotions, evicted, len(slow), harvested, run_s, regular_killed)

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> HarvestCost:
        """From ``stowage simulate --json``'s summary of one policy (absent keys: 0, an older simulator)."""
        return cls(float(summary.get("regular_slowdown_mean", 0.0)), float(summary.get("regular_slowdown_p95", 0.0)),
                   float(summary.get("harvested_fraction", 0.0)), float(summary.get("wasted_work_s", 0.0)),
                   float(summary.get("lost_fraction", 0.0)), int(summary.get("promotions", 0)),
                   int(summary.get("evictions", 0)))


def cores_of(text: str) -> float:
    """Cores in a cpu quantity (`2`, `7500m`)."""
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def room_waits(pods: Sequence[tuple[str, float, float, float, float]], allocatable: float) -> list[float]:
    """Per regular pod ``(node, cores, ready, bound, finished)``, in the order given: the seconds it waited, before
    its bind, while the node it was bound to already had room for it (free cores ≥ its cores, counting the regular
    pods bound there and not finished), from when it was ready. 0 for a pod bound the moment room appeared; the
    control loop's delay (a scheduler retry, a dispatcher pass, a pod create) otherwise. ``finished`` may be
    ``inf`` (never seen to end). A bind the stamps show without room (the watch saw the finish after the bind)
    counts 0."""
    by_node: dict[str, list[tuple[float, float, int]]] = {}
    for i, (node, cores, _, bound, finished) in enumerate(pods):
        events = by_node.setdefault(node, [])
        events.append((bound, -cores, i))
        if not math.isinf(finished):
            events.append((finished, cores, -1))
    out = [0.0] * len(pods)
    for events in by_node.values():
        events.sort(key=lambda e: (e[0], e[1] < 0))  # at one instant, a finish frees room before a bind takes it
        free_after, free = [], allocatable
        for _, delta, _ in events:
            free += delta
            free_after.append(free)
        for k, (bound, delta, i) in enumerate(events):
            if i < 0:
                continue
            j = k - 1
            while j >= 0 and free_after[j] >= -delta - 1e-9:
                j -= 1
            if j + 1 == k and k > 0:
                continue
            since = events[j + 1][0] if j >= 0 else -math.inf
            out[i] = max(0.0, bound - max(since, pods[i][2]))
    return out


def measure(run: Run, allocatable_cores: float = 7.5) -> Measured:
    """JCTs, makespan, finish order, the per-pod phases and the waits with room of one cluster run."""
    workload = run.workload
    first = min(run.submitted.values())
    succeeded: dict[tuple[str, str], list[dict[str, Any]]] = {}
    mine = [s for s in run.pods if s["labels"].get(LABEL_JOB) in run.submitted]
    for s in mine:
        if s["phase"] == "Succeeded" and "finished" in s:
            succeeded.setdefault((s["labels"][LABEL_JOB], s["labels"].get(LABEL_GROUP, "")), []).append(s)
    ready: dict[tuple[str, str], float] = {}
    for job in workload.jobs:
        for g in job.groups:
            deps_end = [s["finished"] for d in g.depends_on for s in succeeded.get((job.name, d), [])]
            ready[(job.name, g.name)] = max([run.submitted[job.name], *deps_end])
    busy = 0.0
    failed = opportunistic = 0
    regular: list[tuple[str, float, float, float, float]] = []
    for s in mine:
        key = (s["labels"][LABEL_JOB], s["labels"].get(LABEL_GROUP, ""))
        cores = cores_of(next(g for g in workload.job(key[0]).groups if g.name == key[1]).cpu)
        if "bound" in s and "finished" in s:
            busy += cores * (s["finished"] - s["bound"])
        if s["labels"].get(labels.LABEL_CLASS) == "opportunistic":
            opportunistic += 1
        elif "bound" in s and "node" in s:
            regular.append((s["node"], cores, ready[key], s["bound"], s.get("finished", math.inf)))
        if not (s["phase"] == "Succeeded" and "finished" in s):
            failed += 1
    problems = list(run.problems)
    finish: dict[str, float] = {}
    for job in workload.jobs:
        for g in job.groups:
            n = len(succeeded.get((job.name, g.name), []))
            if n != g.tasks:
                problems.append(f"{job.name}/{g.name}: {n} succeeded pods, {g.tasks} tasks")
        ends = [s["finished"] for g in job.groups for s in succeeded.get((job.name, g.name), [])]
        if ends:
            finish[job.name] = max(ends)
    phases: dict[str, dict[str, list[float]]] = {}  # pod class → phase → seconds per succeeded pod
    for key, pods in succeeded.items():
        for s in pods:
            stamps = {**s, "ready": ready[key]}
            by_class = phases.setdefault(s["labels"].get(labels.LABEL_CLASS, "regular"),
                                         {name: [] for name, _, _ in PHASES})
            for name, a, b in PHASES:
                if a in stamps and b in stamps:
                    by_class[name].append(stamps[b] - stamps[a])
    makespan = max(finish.values()) - first if finish else math.nan
    return Measured(
        arm=run.arm, jct={n: finish[n] - run.submitted[n] for n in finish}, finish=finish,
        arrival={n: t - first for n, t in run.submitted.items()}, makespan=makespan,
        status_jct={n: run.status_done[n] - run.submitted[n] for n in run.status_done}, phases=phases,
        busy_cores=busy / makespan if makespan > 0 else math.nan, pods=len(mine), failed_attempts=failed,
        opportunistic=opportunistic, problems=problems, room_waits=room_waits(regular, allocatable_cores),
        first_estimate=run.first_estimate, cost=HarvestCost.from_outcomes(run.outcomes) if run.outcomes else None,
        start=_starts(mine), forecasts=run.forecasts)


def _starts(pods: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in pods:
        if "bound" in s:
            job = s["labels"][LABEL_JOB]
            out[job] = min(out.get(job, math.inf), s["bound"])
    return out


def _at(text: Any) -> float | None:
    return parse_timestamp(text) if isinstance(text, str) else None


@dataclass(frozen=True)
class ForecastError:
    """One job's prediction against what happened (seconds, wall clock)."""

    job: str
    which: str  # "first" or "last" (the last while it was pending)
    after_s: float  # submission → the prediction seen in the status
    finish_error: float  # |predicted − actual finish| ÷ actual JCT
    start_error: float  # |predicted − actual start| ÷ actual JCT (NaN: it had started when predicted)
    predicted_finish_s: float  # from submission
    actual_finish_s: float
    sources: str


def forecast_errors(m: Measured, which: str = "first") -> list[ForecastError]:
    """Each job's ``which`` prediction (``StowageArm.forecasts``) against its actual start and finish."""
    out = []
    for job, both in sorted(m.forecasts.items()):
        f = both.get(which)
        if f is None or job not in m.finish or job not in m.jct:
            continue
        submitted = m.finish[job] - m.jct[job]
        finish, start = _at(f.get("finish")), _at(f.get("start"))
        if finish is None:
            continue
        jct = max(m.jct[job], 1e-9)
        start_error = abs(start - m.start[job]) / jct if start is not None and job in m.start else math.nan
        out.append(ForecastError(job, which, f["seen"] - submitted, abs(finish - m.finish[job]) / jct, start_error,
                                 finish - submitted, m.jct[job],
                                 ", ".join(f"{g}={s}" for g, s in sorted((f.get("sources") or {}).items()))))
    return out


def forecast_lines(pairs: Sequence[Pair]) -> list[str]:
    """Markdown: the predicted finish's error per Stowage arm (median, p90), and each job's first prediction."""
    lines: list[str] = []
    for pair in pairs:
        first = forecast_errors(pair.cluster, "first")
        if not first:
            continue
        last = forecast_errors(pair.cluster, "last")
        lines += [f"Forecast, {pair.label} (status.forecast: each Job's first prediction, and the last one while it "
                  "was pending; error = |predicted − actual| ÷ actual JCT):", "",
                  "| prediction | jobs | finish error median | finish error p90 | start error median | seen after "
                  "submission, median s |", "|---|---|---|---|---|---|"]
        learned = forecast_errors(pair.cluster, "learned")
        for name, errs in (("first", first), ("last while pending", last),
                           (f"{LEARNED_AFTER_S:g} s after the first job finished", learned)):
            if not errs:
                continue
            starts = [e.start_error for e in errs if not math.isnan(e.start_error)]
            lines.append(f"| {name} | {len(errs)} | {_pct(statistics.median(e.finish_error for e in errs))} | "
                         f"{_pct(quantile([e.finish_error for e in errs], 0.9))} | "
                         f"{_pct(statistics.median(starts)) if starts else '–'} | "
                         f"{_f(statistics.median(e.after_s for e in errs), 1)} |")
        lines += ["", "| job | first seen after s | predicted JCT s | actual JCT s | error | assumed |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {e.job} | {_f(e.after_s, 1)} | {_f(e.predicted_finish_s)} | {_f(e.actual_finish_s)} | "
                  f"{_pct(e.finish_error)} | {e.sources} |" for e in first]
        lines.append("")
    return lines


# --- the simulator --------------------------------------------------------------------------------------------


def simulator_workload(workload: Workload, arrivals: Mapping[str, float], nodes: int) -> dict[str, Any]:
    """The workload as a ``stowage simulate`` file: the stack's nodes (allocatable 7.5 cores, 15 GiB, all
    harvesting, as every node of the stack has a monitor), its Queues, every job arriving when ``arrivals`` says
    (seconds after the first submission of the cluster run)."""
    queues = {**{j.queue: 1.0 for j in workload.jobs}, **workload.queues}  # a Queue not created: `default`, weight 1
    return {
        "nodes": [{"name": "node", "count": nodes, "cpu": ALLOCATABLE["cpu"], "memory": ALLOCATABLE["memory"]}],
        "queues": [{"name": q, "weight": w} for q, w in queues.items()],
        "jobs": [{"name": j.name, "queue": j.queue, "arrival": round(arrivals[j.name], 3),
                  "opportunistic": j.opportunistic,
                  "groups": [{"name": g.name, "replicas": g.tasks, "demand": {"cpu": g.cpu, "memory": g.memory},
                              "duration": g.run_s, **({"dependsOn": list(g.depends_on)} if g.depends_on else {})}
                             for g in j.groups]}
                 for j in sorted(workload.jobs, key=lambda j: (arrivals[j.name], j.name))],
    }


def simulate(path: Path, preset: str, folder: Path) -> Measured:
    """``stowage simulate --workload path --policy preset --json``: the summary numbers; each job's finish from the
    same engine in this process (``stowage.sim.engine.simulate``; the CLI's JSON has no per-job numbers)."""
    out = folder / f"{path.stem}-{preset}.json"
    done = subprocess.run([str(STOWAGE), "simulate", "--workload", str(path), "--policy", preset, "--no-plots",
                           "--report", str(folder / f"{path.stem}-{preset}-report"), "--force", "--json", str(out),
                           "--jobs", "1"], capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise AssertionError(f"stowage simulate exited {done.returncode}:\n{done.stderr[-3000:]}")
    report = json.loads(out.read_text())
    summary = {**report.get("reference_runs", {}), **report["policies"]}[preset]
    measured = Measured(arm=f"sim {preset}", jct={}, finish={}, arrival={}, makespan=summary["makespan_s"],
                        summary=summary)
    measured.busy_cores = summary["utilization"]["cpu"]["allocated"] * _cluster_cores(path)
    measured.opportunistic = round(summary.get("opportunistic_fraction", 0.0) * summary.get("tasks", 0))
    measured.failed_attempts = int(summary.get("evictions", 0))
    measured.cost = HarvestCost.from_summary(summary)
    try:
        from stowage.sim.engine import SimConfig
        from stowage.sim.engine import simulate as engine_simulate
        from stowage.sim.traces.workload_file import load_workload_file

        loaded = load_workload_file(path)
        result = engine_simulate(loaded, preset, config=SimConfig(pass_delay_s=report["engine"]["pass_delay_s"]))
        for job, jct, arrival in zip(loaded.jobs, result.jct, result.arrival, strict=True):
            if not math.isnan(float(jct)):
                measured.jct[job.name] = float(jct)
                measured.finish[job.name] = float(arrival) + float(jct)
                measured.arrival[job.name] = float(arrival)
    except Exception as exc:  # the order is a bonus; the CLI's numbers stand without it
        measured.notes.append(f"per-job numbers unavailable: {exc!r}")
    if not measured.jct or abs(measured.mean_jct - summary["jct_mean_s"]) > 0.01 * max(summary["jct_mean_s"], 1):
        measured.notes.append(f"the CLI's mean JCT {summary['jct_mean_s']:.1f} s differs from the in-process run's")
    return measured


def _cluster_cores(path: Path) -> float:
    doc = yaml.safe_load(path.read_text())
    return sum(cores_of(str(n["cpu"])) * int(n.get("count", 1)) for n in doc["nodes"])


def sim_mean(m: Measured) -> float:
    """The simulator's own mean JCT (its JSON), else the one from the per-job numbers."""
    return float(m.summary.get("jct_mean_s", m.mean_jct))


def sim_p95(m: Measured) -> float:
    return float(m.summary.get("jct_p95_s", m.p95_jct))


# --- the report ------------------------------------------------------------------------------------------------


def _f(x: float, digits: int = 0) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _ratio(a: float, b: float) -> str:
    return "–" if not b or math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"


@dataclass
class Pair:
    """A cluster arm and the simulator's prediction of it."""

    label: str
    cluster: Measured
    sim: Measured

    def means(self) -> tuple[float, float]:
        return self.cluster.mean_jct, sim_mean(self.sim)


def headline(stock: Pair, stowage: Pair) -> dict[str, float]:
    """The ratios of the summary table: stowage ÷ stock in the cluster and in the simulator, cluster ÷ sim."""
    return {
        "jct cluster": stowage.cluster.mean_jct / stock.cluster.mean_jct,
        "makespan cluster": stowage.cluster.makespan / stock.cluster.makespan,
        "jct sim": sim_mean(stowage.sim) / sim_mean(stock.sim),
        "makespan sim": stowage.sim.makespan / stock.sim.makespan,
        "stock cluster/sim jct": stock.cluster.mean_jct / sim_mean(stock.sim),
        "stock cluster/sim makespan": stock.cluster.makespan / stock.sim.makespan,
        "stowage cluster/sim jct": stowage.cluster.mean_jct / sim_mean(stowage.sim),
        "stowage cluster/sim makespan": stowage.cluster.makespan / stowage.sim.makespan,
    }


def no_harvest_arm(pairs: Sequence[Pair]) -> Pair | None:
    """The Stowage arm without harvesting, where a workload runs one."""
    return next((p for p in pairs if p.label.endswith("no harvest")), None)


def _pct(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{100 * x:.1f} %"


def _cost_cells(m: Measured) -> list[str]:
    c = m.cost
    if c is None:
        return ["–"] * 5
    lost = f"{c.lost_s:.0f} ({_pct(c.lost_fraction)})"
    return [f"{_pct(c.regular_slowdown_mean)} / {_pct(c.regular_slowdown_p95)}", _pct(c.harvested_fraction), lost,
            str(c.promotions), str(c.evicted)]


COST_HEADER = ("| arm | makespan s | makespan ÷ stock | makespan ÷ no harvest | mean JCT s | regular slowdown mean / "
               "p95 | task-s on harvested capacity | opportunistic work lost, task-s (÷ harvested) | promotions | "
               "evicted |")


def cost_rows(pairs: Sequence[Pair], prefix: str = "") -> list[str]:
    """Markdown rows: per arm, cluster then simulator, makespan and mean JCT beside what harvesting cost."""
    stock, base = pairs[0], no_harvest_arm(pairs)
    out = []
    for pair in pairs:
        for m, ref_stock, ref_base, where in ((pair.cluster, stock.cluster, base.cluster if base else None, "cluster"),
                                              (pair.sim, stock.sim, base.sim if base else None,
                                               f"sim `{pair.sim.arm.removeprefix('sim ')}`")):
            mean = m.mean_jct if where == "cluster" else sim_mean(m)
            cells = [_f(m.makespan), _ratio(m.makespan, ref_stock.makespan),
                     _ratio(m.makespan, ref_base.makespan) if ref_base is not None else "–", _f(mean),
                     *_cost_cells(m)]
            out.append(f"| {prefix}{pair.label}, {where} | " + " | ".join(cells) + " |")
    return out


def workload_report(workload: Workload, pairs: Sequence[Pair], cores: float) -> list[str]:
    """Markdown for one workload: numbers per arm, the ratios, where each pod's time went, finish orders."""
    stock = pairs[0]
    lines = [f"### `{workload.name}`: {workload.description}", "",
             f"{len(workload.jobs)} jobs, {workload.tasks} tasks, "
             f"{sum(g.tasks * g.run_s * cores_of(g.cpu) for j in workload.jobs for g in j.groups):.0f} core-seconds "
             f"on {cores:g} allocatable cores.", "",
             "| arm | mean JCT s | p95 JCT s | makespan s | mean JCT ÷ stock | makespan ÷ stock | "
             "cluster ÷ sim: mean JCT | cluster ÷ sim: makespan | cpu allocated (mean cores) | pods (failed, opp.) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for pair in pairs:
        c, s = pair.cluster, pair.sim
        lines.append(
            f"| {pair.label}, cluster | {_f(c.mean_jct)} | {_f(c.p95_jct)} | {_f(c.makespan)} | "
            f"{_ratio(c.mean_jct, stock.cluster.mean_jct)} | {_ratio(c.makespan, stock.cluster.makespan)} | "
            f"{_ratio(c.mean_jct, sim_mean(s))} | {_ratio(c.makespan, s.makespan)} | {_f(c.busy_cores, 1)} | "
            f"{c.pods} ({c.failed_attempts}, {c.opportunistic}) |")
        lines.append(
            f"| {pair.label}, sim `{s.arm.removeprefix('sim ')}` | {_f(sim_mean(s))} | {_f(sim_p95(s))} | "
            f"{_f(s.makespan)} | {_ratio(sim_mean(s), sim_mean(stock.sim))} | {_ratio(s.makespan, stock.sim.makespan)} "
            f"| | | {_f(s.busy_cores, 1)} | ({s.failed_attempts} evicted, {s.opportunistic}) |")
    lines += ["", "What harvesting cost (regular slowdown: run time ÷ run-seconds − 1 of the regular pods never "
              "opportunistic; the fake kubelet slows pods by the simulator's contention model):", "",
              COST_HEADER, "|---|---|---|---|---|---|---|---|---|---|", *cost_rows(pairs)]
    lines += ["", "Where each succeeded pod's time went, cluster (mean / p95 s; *ready* = the job's submission, or "
              "the end of the groups it depends on):", "",
              "| arm | pods | " + " | ".join(name for name, _, _ in PHASES) + " | ready → finished |",
              "|---|---|" + "---|" * (len(PHASES) + 1)]
    for pair in pairs:
        for cls, p in sorted(pair.cluster.phases.items(), key=lambda kv: kv[0] != "regular"):
            total = [sum(v) for v in zip(*(p[name] for name, _, _ in PHASES), strict=False)]
            cells = [f"{_f(statistics.fmean(v), 2)} / {_f(quantile(v, 0.95), 1)}" if v else "–"
                     for v in (p[name] for name, _, _ in PHASES)]
            label = pair.label if len(pair.cluster.phases) == 1 else f"{pair.label}: {cls} pods"
            lines.append(f"| {label} | {len(p[PHASES[0][0]])} | " + " | ".join(cells) +
                         f" | {_f(statistics.fmean(total), 1) if total else '–'} |")
    lines += ["", "Waited with room: per regular pod, the seconds before its bind during which the node it ran on "
              "already had room for it (from when it was ready; the simulator's is 0, or the 0.2 s pass delay):", ""]
    for pair in pairs:
        w = pair.cluster.room_waits
        waited = [x for x in w if x > 0.5]
        lines.append(f"- {pair.label}: {len(waited)} of {len(w)} pods waited > 0.5 s; mean {_f(statistics.fmean(w), 2)}"
                     f" s, p95 {_f(quantile(w, 0.95), 1)} s, max {_f(max(w, default=math.nan), 1)} s, total "
                     f"{_f(sum(w))} pod-s" if w else f"- {pair.label}: –")
    status_lag = [f"{pair.label} {_f(statistics.fmean(pair.cluster.status_jct[n] - pair.cluster.jct[n] for n in pair.cluster.jct), 2)} s"  # noqa: E501
                  for pair in pairs if pair.cluster.jct]
    lines += ["", "Last task finished → the job's status said done (mean): " + ", ".join(status_lag) + ".", ""]
    queues = sorted({j.queue for j in workload.jobs})
    if len(queues) > 1:
        lines.append("Mean JCT by queue (stock has no queues: its jobs grouped the same way):")
        lines.append("")
        for pair in pairs:
            cells = []
            for q in queues:
                names = [j.name for j in workload.jobs if j.queue == q]
                for m in (pair.cluster, pair.sim):
                    vals = [m.jct[n] for n in names if n in m.jct]
                    cells.append(f"{q} {'cluster' if m is pair.cluster else 'sim'} {_f(statistics.fmean(vals))}"
                                 if vals else f"{q} –")
            lines.append(f"- {pair.label}: " + ", ".join(cells))
        lines.append("")
    recurring_jobs = [j.name for j in workload.jobs if labels.LABEL_RECURRING in j.labels]
    if recurring_jobs:
        lines.append("JCT of each recurring run (s), cluster / sim:")
        lines.append("")
        for pair in pairs:
            lines.append(f"- {pair.label}: " + ", ".join(
                f"{n} {_f(pair.cluster.jct.get(n, math.nan))} / {_f(pair.sim.jct.get(n, math.nan))}"
                for n in recurring_jobs))
        lines.append("")
        truth = {(j.name, g.name): g.run_s for j in workload.jobs for g in j.groups}
        for pair in pairs:
            seen = [f"{n}/{g} {e.get('taskSeconds')} s ({e.get('source')}; true {truth.get((n, g))} s)"
                    for n in recurring_jobs for g, e in sorted(pair.cluster.first_estimate.get(n, {}).items())]
            if seen:
                lines.append(f"First estimate in the Job's status, {pair.label}: " + ", ".join(seen) + ".")
                lines.append("")
    lines += forecast_lines(pairs)
    lines.append("Finish order (first to last):")
    lines.append("")
    for pair in pairs:
        lines.append(f"- {pair.label}, cluster: {', '.join(pair.cluster.order())}")
        lines.append(f"- {pair.label}, sim: {', '.join(pair.sim.order()) or '–'}")
    notes = [f"{pair.label}: {p}" for pair in pairs for p in (*pair.cluster.problems, *pair.cluster.notes,
                                                                 *pair.sim.notes)]
    if notes:
        lines += ["", "Problems and notes:", "", *[f"- {n}" for n in notes]]
    return [*lines, ""]


def summary_table(rows: Iterable[tuple[str, str, dict[str, float]]]) -> list[str]:
    """Markdown: per workload (and Stowage arm), stowage ÷ stock in the cluster and the simulator, cluster ÷ sim."""
    out = ["| workload | arm | mean JCT stowage ÷ stock: cluster | sim | makespan stowage ÷ stock: cluster | sim | "
           "cluster ÷ sim, stock: JCT / makespan | cluster ÷ sim, stowage: JCT / makespan |",
           "|---|---|---|---|---|---|---|---|"]
    for name, arm, h in rows:
        out.append(f"| {name} | {arm} | {h['jct cluster']:.2f} | {h['jct sim']:.2f} | {h['makespan cluster']:.2f} | "
                   f"{h['makespan sim']:.2f} | {h['stock cluster/sim jct']:.2f} / {h['stock cluster/sim makespan']:.2f}"
                   f" | {h['stowage cluster/sim jct']:.2f} / {h['stowage cluster/sim makespan']:.2f} |")
    return out
