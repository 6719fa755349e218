"""What the dispatcher reads and returns: plain records (``DispatchView`` in, ``Release``, ``QueueShare`` out).

The operator fills a ``DispatchView`` from its informers, the Job book and Prometheus; benchmarks and tests
build one by hand. No Kubernetes types, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stowage.labels import Opportunistic, PodClass
from stowage.model import JobOrder
from stowage.resources import ResourceVector

__all__ = [
    "DispatchView",
    "NodeRecord",
    "PendingGroup",
    "QueueRecord",
    "QueueShare",
    "Release",
    "RunningPod",
]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node as the dispatcher sees it."""

    name: str
    allocatable: ResourceVector
    """``status.allocatable`` (with the bandwidth annotations as ``disk``/``network``): the capacity basis."""
    harvest: bool = True
    """False when the node is labelled ``stowage.io/harvest: "false"``: it harvests nothing."""
    usage: ResourceVector | None = None
    """Measured usage of all pods (the node monitor's fresh sample); None (none, or stale) → harvests nothing."""
    blocked: ResourceVector | None = None
    """Capacity the node monitor blocks after contention (OPERA PRESERVE ``B``, ``stowage_node_blocked``)."""
    sample_age_s: float = math.inf
    """Seconds since the node's latest utilization sample (``inf``: none): the ``sample`` hold's numbers."""


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A pod bound to a node (any pod: the nodes' free capacity depends on all of them)."""

    node: str
    demand: ResourceVector
    """Requests for a regular pod; the ``stowage.io/demand`` annotation for an opportunistic one."""
    queue: str | None = None
    """Its Stowage queue; None for a pod outside Stowage (it counts on its node, in no queue)."""
    opportunistic: bool = False
    bound_at_s: float | None = None
    """When it was bound (clock seconds): a pod counts in ``S`` (``harvest.assumed``) from then until a sample
    includes it, ``harvest.ramp_up_s`` at most; None counts as just bound."""
    started_at_s: float | None = None
    """When its containers started (clock seconds; None: not yet): a node sample taken a sampling period after it
    includes its usage (``harvest.in_sample``)."""
    key: str = ""
    """``namespace/name``: the pod a promotion patches."""
    uid: str = ""
    requests: ResourceVector | None = None
    """An opportunistic pod's own requests (the conversion's ``1m`` cpu): kube-scheduler counts them on its node, so
    they come off the regular room too. None: none."""
    job: str | None = None
    """The key (``namespace/name``) of the Stowage Job whose task it is (label ``stowage.io/job``); None: not a
    Job's task (a plain pod, or a pod outside Stowage). The forecast runs a Job's running tasks to their end."""
    group: str = ""
    """Its task group (label ``stowage.io/task-group``); "" for a pod of no Job."""
    use_peak: Mapping[str, float] | None = None
    """The highest sustained disk and network use seen of its task group (``prom.UtilizationSnapshot.use_peak``):
    a regular pod reserves its estimate (``policy.use_estimates``), not its declaration. None: none seen."""


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A Queue's spec."""

    name: str
    weight: float = 1.0
    opportunistic: bool = True
    """``spec.opportunistic: Allow``; False (``Deny``) → none of its tasks gets harvested capacity."""
    job_order: JobOrder = JobOrder.SRTF
    quota: Mapping[str, float] | None = None
    """``spec.quota`` in base units: the most the queue may hold in each pool at once, per resource it names
    (0 allowed: none of it); None or {}: no ceiling."""
    draining: bool = False
    """``spec.state: Draining``: none of its pending groups is released (each is held, reason ``draining``)."""


@dataclass(frozen=True, slots=True)
class PendingGroup:
    """One task group of an unfinished job (or one gated plain pod). List every group of every unfinished
    job, releasable or not: remaining work counts them all, and FSP forgets a job that leaves the view."""

    key: str
    """Unique and stable across passes (e.g. ``namespace/job/group``, ``namespace/pod``): releases name it."""
    queue: str
    demand: ResourceVector
    """Per task (requests, or limits where no request)."""
    releasable: int
    """Tasks that may start now and were not released yet (barrier satisfied, job not suspended)."""
    namespace: str = ""
    job: str | None = None
    """The job's key (``namespace/name``); None for a plain gated pod (a one-task job of its own)."""
    group: str = ""
    intent: Opportunistic = Opportunistic.FALSE
    converted: bool = False
    """A plain pod converted at admission: its class is fixed (its requests are immutable), so it runs only on
    harvested room until a promotion gives it regular room on its node (``decide.INTENT_CONVERTED``)."""
    expected_duration_s: float = math.nan
    """The user's hint of one task's duration (``expectedDuration``, ``stowage.io/expected-duration``); NaN: none
    (the decision then estimates it, ``stowage.policy.estimates``)."""
    arrival_s: float = math.nan
    """The job's creation time (clock seconds): FIFO order, FSP arrival."""
    remaining_tasks: int = 0
    """Tasks of the group not finished (not yet released + released but running): its remaining work."""
    finished_fraction: float = 0.0
    """Finished / total tasks of the group (the barrier knob)."""
    job_progress: float = 0.0
    """Finished / total tasks of the job (the classifier's progress feature)."""
    unbound: int = 0
    """Tasks released by an earlier pass whose pods are not bound yet."""
    features: Mapping[str, str] | None = None
    """Classifier features; None → ``classifier.task_features`` of queue, job, group, demand and progress."""
    finished_tasks: int = 0
    """Tasks of the group that succeeded (the estimator's phase statistics)."""
    finished_mean_s: float = math.nan
    """Mean run time of those tasks (``jobs.run_span``); NaN when none."""
    running_elapsed_s: float = 0.0
    """The longest any running task of the group has run so far (a lower bound on its duration); 0: none."""
    recurring_key: str | None = None
    """``estimates.recurring_key`` of the Job (earlier runs' history); None for a plain gated pod."""
    gang: int = 0
    """Tasks that start together on regular room or not at all (``decide.DecideInput.gang``): a Job group's
    ``minAvailable`` while none of it is active, a pod group's size; 0: not a gang."""
    depends_on: tuple[str, ...] = ()
    """Groups of the same Job (by name) this one waits for (``dependsOn``) that are still in the view, unfinished:
    the barrier the forecast runs forward (the decision itself reads only ``releasable``)."""
    suspended: bool = False
    """The Job is suspended (``spec.suspend``): nothing of it is released, and the forecast predicts nothing for it."""
    use_peak: Mapping[str, float] | None = None
    """The highest sustained disk and network use seen among the group's finished and running pods: its tasks
    are packed by the estimate (``policy.use_estimates``); None: none seen (packed as declared)."""


@dataclass(frozen=True, slots=True)
class DispatchView:
    """One pass's snapshot."""

    nodes: Sequence[NodeRecord]
    running: Sequence[RunningPod]
    queues: Sequence[QueueRecord]
    groups: Sequence[PendingGroup]


@dataclass(frozen=True, slots=True)
class Release:
    """Start ``count`` tasks of group ``group_key`` as ``pod_class``; the dispatcher placed them on ``node_hint``."""

    group_key: str
    count: int
    pod_class: PodClass
    node_hint: str


@dataclass(frozen=True, slots=True)
class QueueShare:
    """What the operator publishes for one queue (Queue status, ``stowage_queue_*``)."""

    name: str
    allocated: dict[str, dict[str, float]]
    """pool → resource → amount held by its running (and released, unbound) tasks."""
    dominant_share: dict[str, float]
    """pool → weighted dominant share ``max_r(alloc_r/total_r)/weight`` (what DRF compares)."""
    share: dict[str, float]
    """pool → unweighted dominant share ``max_r(alloc_r/total_r)`` (comparable with ``fair_share``)."""
    fair_share: float
    """The dispatcher's fair share of the regular pool, comparable with ``share``: weighted max-min
    (``fairness.fair_shares``) with the queues that have tasks ready to start wanting more. With tasks waiting,
    its level ``w·L`` (what the dispatcher's floor and holds read); otherwise what it holds, up to ``w·L``."""
    usage: dict[str, float] = field(default_factory=dict)
    """pool → decayed usage: the dominant share averaged with ``packing.queue_usage_half_life_s``
    (``fairness.QueueUsage``; the dominant share now with a half-life of 0)."""
    usage_target: dict[str, float] = field(default_factory=dict)
    """pool → the decayed usage its weight entitles it to (``fairness.usage_targets``): the waiting queues' usage
    split by weight, what the dispatcher's tiers even out; a queue waiting for nothing, its own usage."""
    quota_used: dict[str, dict[str, float]] = field(default_factory=dict)
    """pool → resource → allocated / ``spec.quota`` for each resource the quota names ({} without a quota)."""
