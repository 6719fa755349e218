"""Compact records of Nodes and Pods, parsed once from API JSON when an informer event arrives.

A record holds only what the policy needs (capacity, allocatable, requests, class,
queue, times); the API object is dropped afterwards, so a 5,000-node cluster costs
a few megabytes. Parsing never raises for a bad value on somebody else's object:
the problem is kept in ``problem`` and the value reads as zero, so one malformed
annotation cannot stop the informer. Only an object that is not shaped like a Pod or
a Node at all (``spec: 5``) raises, and only :class:`InvalidInput`: the cluster model
leaves it out (``ClusterModel.bad_objects``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stowage import labels
from stowage.errors import InvalidInput
from stowage.resources import ResourceVector, containers_of, expect_list, expect_object, pod_demand, shown

__all__ = [
    "NodeRecord",
    "PodRecord",
    "container_limits",
    "node_record",
    "object_name",
    "parse_timestamp",
    "pod_key",
    "pod_record",
    "started_at",
    "tracked",
]

#: Resources kube-scheduler accounts for itself and Stowage leaves alone (and the marker resource
#: opportunistic pods request to be routed to the extender: it is not demand).
_IGNORED = frozenset({"pods", "ephemeral-storage", labels.HARVEST_RESOURCE})
_TERMINAL_PHASES = ("Succeeded", "Failed")  # a tuple: ``in`` compares, so an unhashable phase cannot raise


def tracked(vector: ResourceVector) -> ResourceVector:
    """Drop resources kube-scheduler accounts for itself (pods, ephemeral-storage, hugepages-*) and the marker."""
    return ResourceVector({k: v for k, v in vector.items() if k not in _IGNORED and not k.startswith("hugepages-")})


def parse_timestamp(value: Any) -> float | None:
    """An RFC 3339 API timestamp (``2024-05-01T10:00:00Z``) as Unix seconds; None if absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What Stowage keeps of a Node: capacity and allocatable (bandwidth from annotations), harvest switch."""

    name: str
    capacity: ResourceVector
    allocatable: ResourceVector
    harvest_enabled: bool
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What Stowage keeps of a bound, non-terminal Pod.

    ``demand`` is what the pod occupies on its node: its requests for a regular pod,
    its real demand (annotation ``stowage.io/demand``) for an opportunistic one, plus
    declared disk/network bandwidth either way.
    """

    key: str
    uid: str
    namespace: str
    name: str
    node: str
    opportunistic: bool
    queue: str | None
    demand: ResourceVector
    bound_at_s: float
    start_time_s: float | None
    """When its containers started (Unix seconds; :func:`started_at`), None: not running yet. A node sample taken
    a sampling period after it includes the pod's usage (``policy.harvest.in_sample``)."""
    scheduler_name: str = ""
    problem: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: ResourceVector = field(default_factory=ResourceVector)
    """What kube-scheduler counts for it on its node (``resources.pod_demand``, no bandwidth). For a regular pod
    it is ``demand`` less bandwidth; for an opportunistic one the conversion's ``1m`` cpu per container (or 0): the
    regular room a node offers is what kube-scheduler sees, so an opportunistic pod's requests come off it too."""
    job: str | None = None
    """``namespace/name`` of the Stowage Job whose task it is (label ``stowage.io/job`` on a pod of a queue); None:
    no Job's. Read once per pod event, so a pass that lists every bound pod does not parse labels."""
    task_group: str = ""
    """Its task group (``labels.task_group``); "" for a pod of no Job."""


def node_record(node: Mapping[str, Any]) -> NodeRecord:
    """Parse a Node's JSON; disk/network capacity come from the ``stowage.io/*-bandwidth`` annotations.

    A bad quantity or annotation is kept in ``problem`` (and reads as zero); raises :class:`InvalidInput` only
    when the object is not shaped like a Node (no name, ``metadata`` or ``status`` not an object).
    """
    meta = expect_object(expect_object(node, "node").get("metadata"), "metadata")
    status = expect_object(node.get("status"), "status")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("metadata.name", shown(name), "a node name")
    problems: list[str] = []

    def parse(value: Any, where: str) -> ResourceVector:
        try:
            return tracked(ResourceVector.parse(value, where))
        except InvalidInput as exc:
            problems.append(str(exc))
            return ResourceVector()

    capacity = parse(status.get("capacity"), "status.capacity")
    allocatable = parse(status.get("allocatable"), "status.allocatable")
    bandwidth, bad = labels.node_bandwidth(meta.get("annotations"))
    problems.extend(bad)
    return NodeRecord(
        name=name,
        capacity=capacity + bandwidth,
        allocatable=allocatable + bandwidth,
        harvest_enabled=labels.harvest_enabled(expect_object(meta.get("labels"), "metadata.labels")),
        problem="; ".join(problems) or None,
    )


def container_limits(pod: Mapping[str, Any]) -> ResourceVector:
    """Σ of the containers' limits: an opportunistic pod's demand when its ``stowage.io/demand`` is missing.

    The webhook always writes the annotation; without it (a pod created around the webhook)
    its requests are the explicit zeros of an opportunistic pod, so the limits are the only
    honest statement of what it will use.
    """
    total = ResourceVector()
    for where, c in containers_of(expect_object(expect_object(pod, "pod").get("spec"), "spec")):
        limits = expect_object(c.get("resources"), f"{where}.resources").get("limits")
        total = total + ResourceVector.parse(limits, f"{where}.resources.limits")
    return total


def pod_key(pod: Mapping[str, Any]) -> str:
    """The UID, or ``namespace/name`` when the object has none (the emulator in tests does not set UIDs).

    Never raises: a key is needed even for an object too malformed to record.
    """
    meta = _metadata(pod)
    return _text(meta.get("uid")) or f"{_text(meta.get('namespace'))}/{_text(meta.get('name'))}"


def object_name(obj: Any) -> str:
    """``namespace/name`` of a namespaced object, ``name`` of a Node, for logs; never raises."""
    meta = _metadata(obj)
    namespace, name = _text(meta.get("namespace")), _text(meta.get("name"))
    return f"{namespace}/{name}" if namespace else name


def _metadata(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def _text(value: Any) -> str:
    """A string field of an API object; anything else (absent, or malformed) reads as empty."""
    return value if isinstance(value, str) else ""


def _bound_at(status: Mapping[str, Any], seen_at_s: float) -> float:
    for cond in expect_list(status.get("conditions"), "status.conditions"):
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            ts = parse_timestamp(cond.get("lastTransitionTime"))
            if ts is not None:
                return min(ts, seen_at_s)
    ts = parse_timestamp(status.get("startTime"))
    return min(ts, seen_at_s) if ts is not None else seen_at_s


def started_at(status: Mapping[str, Any]) -> float | None:
    """When a pod's containers started: the latest ``state.running.startedAt`` once every container runs; None while
    one does not (waiting, terminated: its usage is not all in a sample yet). A pod whose status lists no
    containers (a kubelet that does not report them) has started at its ``status.startTime`` if it has one."""
    statuses = status.get("containerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return parse_timestamp(status.get("startTime"))
    latest: float | None = None
    for cs in statuses:
        state = cs.get("state") if isinstance(cs, Mapping) else None
        running = state.get("running") if isinstance(state, Mapping) else None
        at = parse_timestamp(running.get("startedAt")) if isinstance(running, Mapping) else None
        if at is None:
            return None
        latest = at if latest is None else max(latest, at)
    return latest


def pod_record(pod: Mapping[str, Any], seen_at_s: float) -> PodRecord | None:
    """Parse a Pod's JSON; None for pods that occupy no node (pending, succeeded, failed).

    ``seen_at_s`` (Unix seconds) stands in for the binding time when the pod carries
    no ``PodScheduled`` condition or start time. A bad label, annotation or quantity is kept
    in ``problem`` (the pod counts as regular, the value as zero); raises :class:`InvalidInput`
    only when the object is not shaped like a Pod (``spec: 5``, ``nodeName: [1]``, ...).
    """
    meta = expect_object(expect_object(pod, "pod").get("metadata"), "metadata")
    spec = expect_object(pod.get("spec"), "spec")
    status = expect_object(pod.get("status"), "status")
    node = spec.get("nodeName")
    if not isinstance(node, str | None):
        raise InvalidInput("spec.nodeName", shown(node), "a node name")
    if not node or status.get("phase") in _TERMINAL_PHASES:
        return None
    problems: list[str] = []
    pod_labels = expect_object(meta.get("labels"), "metadata.labels")
    try:
        intent = labels.pod_intent(pod)
        opportunistic, queue = intent.is_opportunistic, intent.queue
        bandwidth, declared = intent.bandwidth, intent.demand
    except InvalidInput as exc:
        # Unparseable or contradictory labels: counted as regular, as the node monitor protects it.
        problems.append(str(exc))
        opportunistic = False
        queue = pod_labels.get(labels.LABEL_QUEUE)
        queue = queue if isinstance(queue, str) else None
        bandwidth, declared = ResourceVector(), None
    job_name = pod_labels.get(labels.LABEL_JOB) if queue is not None else None
    job = f"{_text(meta.get('namespace'))}/{job_name}" if isinstance(job_name, str) and job_name else None
    try:
        requests = pod_demand(pod)
    except InvalidInput as exc:
        problems.append(str(exc))
        requests = ResourceVector()
    demand = requests
    if opportunistic:
        try:
            demand = declared if declared is not None else requests.max(container_limits(pod))
        except InvalidInput as exc:
            problems.append(str(exc))
    return PodRecord(
        key=pod_key(pod),
        uid=_text(meta.get("uid")),
        namespace=_text(meta.get("namespace")),
        name=_text(meta.get("name")),
        node=node,
        opportunistic=opportunistic,
        queue=queue,
        demand=tracked(demand) + bandwidth,
        bound_at_s=_bound_at(status, seen_at_s),
        start_time_s=started_at(status),
        scheduler_name=_text(spec.get("schedulerName")),
        problem="; ".join(problems) or None,
        labels={k: v for k, v in pod_labels.items() if isinstance(v, str)},
        requests=tracked(requests),
        job=job,
        task_group=labels.task_group(pod) if job else "",
    )
