"""Every label, annotation, name and metric key Stowage reads or writes, and their parsing: pod intent, a pod's
task group, a node's bandwidth, a Queue's weight.

These strings are contracts (DESIGN.md): users, dashboards and tests depend on
them. Import them from here; never spell one out elsewhere.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stowage.errors import IntentError, QuantityError
from stowage.resources import DISK, NETWORK, ResourceVector, expect_object, parse_quantity, shown

__all__ = [
    "ANN_DATA_NODES",
    "ANN_DEMAND",
    "ANN_DISK_BANDWIDTH",
    "ANN_EXPECTED_DURATION",
    "ANN_NETWORK_BANDWIDTH",
    "ANN_NUDGED_AT",
    "ANN_REQUESTS",
    "API_GROUP",
    "API_VERSION",
    "CONDITION_HELD",
    "DEFAULT_QUEUE",
    "GATE_ADMISSION",
    "HARVEST_RESOURCE",
    "LABEL_CLASS",
    "LABEL_HARVEST",
    "LABEL_JOB",
    "LABEL_OPPORTUNISTIC",
    "LABEL_QUEUE",
    "LABEL_RECURRING",
    "LABEL_TASK_GROUP",
    "LABEL_WEBHOOK",
    "MAX_DEMAND_CHARS",
    "METRICS",
    "OPPORTUNISTIC_PRIORITY_CLASS",
    "SCHEDULER_NAME",
    "SYSTEM_LABELS",
    "WEBHOOK_IGNORE",
    "Opportunistic",
    "PodClass",
    "PodIntent",
    "bandwidth_demand",
    "harvest_enabled",
    "node_bandwidth",
    "parse_demand",
    "pod_class",
    "pod_intent",
    "queue_weight",
    "task_group",
]

DOMAIN = "stowage.io"
API_GROUP = DOMAIN
API_VERSION = "v1alpha1"
SCHEDULER_NAME = "stowage-scheduler"
OPPORTUNISTIC_PRIORITY_CLASS = "stowage-opportunistic"
#: Extended resource every opportunistic pod requests (1, request = limit). kube-scheduler sends a pod
#: to the extender only when it requests one of the extender's ``managedResources``; with this one
#: marked ``ignoredByScheduler`` (and the kubelet dropping extended resources its node does not
#: advertise), it routes exactly the opportunistic pods through Stowage's harvest check, fail-closed.
HARVEST_RESOURCE = f"{DOMAIN}/harvested"
#: The Queue a plain pod or a Job lands in when it names none (the Job CRD's default for ``spec.queue``).
DEFAULT_QUEUE = "default"
#: Scheduling gate the admission webhook puts on every Stowage pod it admits; the dispatcher removes it
#: when it releases the pod, so plain pods too are released in fair order.
GATE_ADMISSION = f"{DOMAIN}/admission"
#: Pod condition on a pod held at that gate: True while the dispatcher holds it, its reason and message say why
#: (``WaitingForShare``, ``WaitingForQuota``, ``WaitingForRoom``, ``WaitingForSample``, ``WaitingForGang``); False
#: once released.
CONDITION_HELD = f"{DOMAIN}/Held"

# --- labels -------------------------------------------------------------------------------------
LABEL_OPPORTUNISTIC = f"{DOMAIN}/opportunistic"  # user intent: "true" | "auto" | "false"
LABEL_CLASS = f"{DOMAIN}/class"  # system-set: "regular" | "opportunistic"
#: On a pod (or on a namespace: its pods' default) makes the pod Stowage's, in that Queue; system-set on Job pods.
LABEL_QUEUE = f"{DOMAIN}/queue"
LABEL_JOB = f"{DOMAIN}/job"
LABEL_TASK_GROUP = f"{DOMAIN}/task-group"
LABEL_HARVEST = f"{DOMAIN}/harvest"  # node label; "false" keeps the node out of harvesting
#: Job label: the recurring key. Runs of one recurring job share it, and each run's task groups start from the
#: durations its earlier runs measured (``policy.estimates.recurring_key``; unset: generateName or the name
#: without its run suffix).
LABEL_RECURRING = f"{DOMAIN}/recurring"
#: Plain pods of one all-or-nothing group (as Kueue's pod groups): the group's name (a DNS label, per namespace) and
#: how many pods it has; the dispatcher releases the group whole, on regular room, once all of them exist.
LABEL_POD_GROUP = f"{DOMAIN}/pod-group"
LABEL_POD_GROUP_COUNT = f"{DOMAIN}/pod-group-total-count"
#: The dispatcher's key of a pod group: ``<namespace>/pod-group:<name>`` (a pod name has no ``:``).
POD_GROUP_KEY = "pod-group:"
#: Namespace label: ``stowage.io/webhook: "ignore"`` takes the namespace out of the pod webhook's scope.
LABEL_WEBHOOK = f"{DOMAIN}/webhook"
WEBHOOK_IGNORE = "ignore"
#: Labels only the webhook may set; a user's value is overwritten.
SYSTEM_LABELS: tuple[str, ...] = (LABEL_CLASS, LABEL_QUEUE, LABEL_JOB, LABEL_TASK_GROUP)

# --- annotations --------------------------------------------------------------------------------
ANN_DEMAND = f"{DOMAIN}/demand"  # JSON map: an opportunistic pod's real demand (stated, or written at admission)
#: System-set on a converted pod: JSON ``{container name: {"cpu": q, "memory": q}}``, each container's cpu and memory
#: requests before the conversion (absent: none), which a promotion restores in place. Users cannot set it.
ANN_REQUESTS = f"{DOMAIN}/requests"
ANN_DISK_BANDWIDTH = f"{DOMAIN}/disk-bandwidth"  # pod demand or node capacity, bytes/s quantity
ANN_NETWORK_BANDWIDTH = f"{DOMAIN}/network-bandwidth"
ANN_EXPECTED_DURATION = f"{DOMAIN}/expected-duration"  # seconds
ANN_DATA_NODES = f"{DOMAIN}/data-nodes"  # comma list of node names holding the pod's input
#: System-set by the extender on an opportunistic pod it held for missing utilization samples, when they are fresh
#: again: the time (RFC 3339, UTC). The update is what makes kube-scheduler retry the pod at once.
ANN_NUDGED_AT = f"{DOMAIN}/nudged-at"


class METRICS:
    """Prometheus metric names (contracts: dashboards and PromQL depend on them)."""

    # node-monitor
    NODE_USAGE = "stowage_node_usage"
    NODE_CAPACITY = "stowage_node_capacity"
    NODE_CONTENTION = "stowage_node_contention"
    NODE_BLOCKED = "stowage_node_blocked"
    POD_USAGE = "stowage_pod_usage"
    EVICTIONS_TOTAL = "stowage_evictions_total"
    SAMPLE_SECONDS = "stowage_node_sample_seconds"
    #: Unix time the exported usage was sampled: the extender judges staleness by it, not by the scrape.
    SAMPLE_TIME = "stowage_node_sample_time_seconds"
    # extender
    EXTENDER_REQUEST_SECONDS = "stowage_extender_request_seconds"
    EXTENDER_REJECTIONS_TOTAL = "stowage_extender_rejections_total"
    NODE_HARVESTABLE = "stowage_node_harvestable"
    EXTENDER_EVENTS_TOTAL = "stowage_extender_events_total"
    #: Counter of held pods the extender patched for a retry once their samples were fresh, label ``outcome``.
    EXTENDER_NUDGES_TOTAL = "stowage_extender_nudges_total"
    # operator
    QUEUE_DOMINANT_SHARE = "stowage_queue_dominant_share"
    QUEUE_FAIR_SHARE = "stowage_queue_fair_share"
    #: Gauges per queue and pool: the decayed usage (``packing.queue_usage_half_life_s``) and what its weight
    #: entitles it to (``fairness.QueueUsage``).
    QUEUE_USAGE = "stowage_queue_usage"
    QUEUE_USAGE_TARGET = "stowage_queue_usage_target"
    QUEUE_ALLOCATED = "stowage_queue_allocated"
    QUEUE_PENDING_TASKS = "stowage_queue_pending_tasks"
    JOB_COMPLETION_SECONDS = "stowage_job_completion_seconds"
    #: Histogram of the seconds from submission (a Job's or a plain pod's creation) to the dispatcher's first
    #: release of its work, labels ``queue`` and ``kind`` (``job``, ``pod``); Kueue's ``admission_wait_time``.
    QUEUE_WAIT_SECONDS = "stowage_queue_wait_seconds"
    DISPATCH_TOTAL = "stowage_dispatch_total"
    #: Seconds from the dispatcher's release (pod created or gate removed) to the pod's PodScheduled condition.
    RELEASE_TO_BIND_SECONDS = "stowage_release_to_bind_seconds"
    #: Histogram of a finished task's estimated ÷ actual duration, label ``source`` (``estimates.SOURCE_NAMES``).
    ESTIMATE_RATIO = "stowage_estimate_ratio"
    #: Gauge of the tasks the dispatcher holds (gated plain pods, Jobs' unreleased tasks), labels ``queue`` and
    #: ``reason`` (``share``, ``quota``, ``room``, ``sample``, ``gang``, ``draining``:
    #: ``stowage.policy.holding.REASONS``).
    HELD_PODS = "stowage_held_pods"
    #: Counter of dispatch passes that did not complete, label ``stage`` (where it stopped: the operator's
    #: ``PASS_STAGES``).
    PASS_ERRORS_TOTAL = "stowage_pass_errors_total"
    #: Gauge: seconds since the last dispatch pass completed (a standby's idle pass counts: it has nothing to do).
    LAST_PASS_AGE = "stowage_last_pass_age_seconds"
    #: Counter of objects left out or failed because they could not be read, label ``kind`` (job, pod, node).
    BAD_OBJECTS_TOTAL = "stowage_bad_objects_total"
    #: Gauge 0/1: whether the operator promotes running opportunistic pods in place (the cluster can resize pods).
    PROMOTION_ENABLED = "stowage_promotion_enabled"
    #: Counter of running opportunistic pods promoted to regular in place.
    PROMOTIONS_TOTAL = "stowage_promotions_total"
    #: Gauge per queue, label ``job`` (``first``, ``last``): seconds from now until the first and the last of the
    #: queue's pending work (Jobs, gated plain pods) is predicted to start (``stowage.forecast``).
    QUEUE_PREDICTED_WAIT = "stowage_queue_predicted_wait_seconds"
    #: Histogram of the CPU seconds one forecast refresh took (off the dispatch pass).
    FORECAST_SECONDS = "stowage_forecast_seconds"
    #: Histogram, label ``queue``: at a Job's success, ``|finish − its first predicted finish| ÷ its completion time``.
    FORECAST_ERROR = "stowage_forecast_error_ratio"


class Opportunistic(enum.StrEnum):
    """A pod's or job's wish to run on harvested capacity."""

    TRUE = "true"
    AUTO = "auto"
    FALSE = "false"

    @classmethod
    def parse(cls, value: Any, field: str) -> Opportunistic:
        if isinstance(value, bool):
            value = "true" if value else "false"
        try:
            return cls(value.strip().lower()) if isinstance(value, str) else cls(None)
        except ValueError:
            raise IntentError(field, shown(value), "one of 'true', 'auto', 'false'") from None


class PodClass(enum.StrEnum):
    """The class a pod was actually given (label ``stowage.io/class``)."""

    REGULAR = "regular"
    OPPORTUNISTIC = "opportunistic"


def pod_class(pod_labels: Mapping[str, str], where: str = "metadata.labels") -> PodClass:
    """The class a pod runs as: the one rule the extender, the node monitor and the simulator share.

    Opportunistic only when the system label ``stowage.io/class`` says so: a pod is opportunistic
    once it was converted (zero requests, demand annotation, priority class; the webhook does it).
    A pod labelled ``stowage.io/opportunistic: "true"`` that was never converted holds real requests
    and is regular. ``class: opportunistic`` together with the opt-out ``opportunistic: "false"`` is a
    contradiction and raises :class:`IntentError` (the extender then places it nowhere and the node
    monitor never evicts it: no component acts on a guess).
    """
    pod_labels = expect_object(pod_labels, where, IntentError)
    raw = pod_labels.get(LABEL_CLASS)
    if raw is None:
        return PodClass.REGULAR
    try:
        given = PodClass(raw.strip().lower()) if isinstance(raw, str) else PodClass(None)
    except ValueError:
        raise IntentError(f"{where}[{LABEL_CLASS!r}]", shown(raw), "'regular' or 'opportunistic'") from None
    intent = pod_labels.get(LABEL_OPPORTUNISTIC)
    if given is PodClass.OPPORTUNISTIC and isinstance(intent, str | bool) and str(intent).strip().lower() == "false":
        raise IntentError(
            f"{where}[{LABEL_OPPORTUNISTIC!r}]",
            intent,
            f"not 'false' on a pod whose {LABEL_CLASS} is 'opportunistic' (the two contradict each other; "
            f"remove {LABEL_CLASS}, which only Stowage sets)",
        )
    return given


@dataclass(frozen=True, slots=True)
class PodIntent:
    """What a pod's labels and annotations ask of Stowage, parsed and validated."""

    opportunistic: Opportunistic
    pod_class: PodClass  # the class it runs as (:func:`pod_class`)
    demand: ResourceVector | None  # the original demand of an opportunistic pod (annotation)
    bandwidth: ResourceVector  # disk / network bytes per second
    data_nodes: frozenset[str] = field(default_factory=frozenset)
    expected_duration_s: float | None = None
    queue: str | None = None

    @property
    def is_opportunistic(self) -> bool:
        return self.pod_class is PodClass.OPPORTUNISTIC


def _meta(pod: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    meta = expect_object(expect_object(pod, "pod", IntentError).get("metadata"), "metadata", IntentError)
    return (
        expect_object(meta.get("labels"), "metadata.labels", IntentError),
        expect_object(meta.get("annotations"), "metadata.annotations", IntentError),
    )


def bandwidth_demand(annotations: Mapping[str, str], where: str = "metadata.annotations") -> ResourceVector:
    """Disk and network bandwidth declared by ``stowage.io/*-bandwidth`` annotations (bytes/s).

    Raises only :class:`IntentError`, naming the annotation.
    """
    annotations = expect_object(annotations, where, IntentError)
    out: dict[str, float] = {}
    for key, resource in ((ANN_DISK_BANDWIDTH, DISK), (ANN_NETWORK_BANDWIDTH, NETWORK)):
        if key in annotations:
            try:
                out[resource] = parse_quantity(annotations[key], f"{where}[{key!r}]")
            except QuantityError as exc:
                raise IntentError(exc.field, exc.value, exc.allowed) from None
    return ResourceVector(out)


def node_bandwidth(annotations: Any, where: str = "metadata.annotations") -> tuple[ResourceVector, tuple[str, ...]]:
    """A node's declared disk and network bandwidth capacity (bytes/s; the annotation names of a pod's demand)
    and what was wrong with them.

    Each annotation is read on its own: a malformed one is left out (unknown capacity, never 0 bytes/s) and does not
    hide a good one; its message, naming the annotation, comes back for the node's ``problem``.
    """
    try:
        annotations = expect_object(annotations, where, IntentError)
    except IntentError as exc:
        return ResourceVector(), (str(exc),)
    out: dict[str, float] = {}
    problems: list[str] = []
    for key, resource in ((ANN_DISK_BANDWIDTH, DISK), (ANN_NETWORK_BANDWIDTH, NETWORK)):
        if key in annotations:
            try:
                out[resource] = parse_quantity(annotations[key], f"{where}[{key!r}]")
            except QuantityError as exc:
                problems.append(str(IntentError(exc.field, exc.value, exc.allowed)))
    return ResourceVector(out), tuple(problems)


def task_group(pod: Mapping[str, Any]) -> str:
    """The task group a pod of a Stowage Job belongs to (label ``stowage.io/task-group``); ``""`` when it has none
    or the value is not a string (no task group is named ``""``: the CRD requires a name)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    pod_labels = meta.get("labels") if isinstance(meta, Mapping) else None
    group = pod_labels.get(LABEL_TASK_GROUP) if isinstance(pod_labels, Mapping) else None
    return group if isinstance(group, str) else ""


def queue_weight(spec: Any) -> float:
    """A Queue's ``spec.weight`` as the dispatcher and the extender read it: a finite number > 0, else 1.

    Missing, not a number, ``inf``, NaN or ≤ 0 read as 1. The CRD schema (``exclusiveMinimum: 0``, ``maximum``) and
    the validating webhook refuse such a Queue when it is written (``spec.weight: a number > 0 and at most
    1000000 (the queue's weight in weighted DRF), got …``); only one stored without them reaches this.
    """
    raw = spec.get("weight", 1) if isinstance(spec, Mapping) else 1
    try:
        weight = float(raw)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past the largest float
        return 1.0
    return weight if math.isfinite(weight) and weight > 0 else 1.0


def harvest_enabled(node_labels: Mapping[str, str]) -> bool:
    """False only when the node carries ``stowage.io/harvest: "false"`` (per-node switch, UBIS §I)."""
    return str(node_labels.get(LABEL_HARVEST, "true")).strip().lower() != "false"


#: Longer annotation values are refused unread (``MAX_QUANTITY_CHARS`` bounds each quantity inside the demand).
_MAX_DURATION_CHARS = 64
MAX_DEMAND_CHARS = 4096


def _parse_duration(value: Any, field: str) -> float:
    allowed = "a duration in seconds such as '45' or '45s'"
    if not isinstance(value, str) or len(value) > _MAX_DURATION_CHARS:  # annotation values are strings
        raise IntentError(field, shown(value), allowed)
    try:
        seconds = float(value.strip().removesuffix("s"))
    except ValueError:
        raise IntentError(field, shown(value), allowed) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise IntentError(field, value, "a finite, non-negative number of seconds")
    return seconds


def parse_demand(value: str, field: str) -> ResourceVector:
    """The ``stowage.io/demand`` annotation's JSON map of quantities.

    Total: for any ``value`` the only exception is :class:`IntentError` naming ``field``.
    """
    allowed = 'a JSON map of quantities such as {"cpu": "2", "memory": "4Gi"}'
    if not isinstance(value, str) or len(value) > MAX_DEMAND_CHARS:
        raise IntentError(field, shown(value), f"{allowed}, at most {MAX_DEMAND_CHARS} characters")
    try:
        raw = json.loads(value)
    except (ValueError, RecursionError):  # not JSON; an integer past Python's digit limit; nesting past the stack
        raise IntentError(field, shown(value), allowed) from None
    if not isinstance(raw, dict):
        raise IntentError(field, shown(value), "a JSON object mapping resource names to quantities")
    try:
        return ResourceVector.parse(raw, field)
    except QuantityError as exc:
        raise IntentError(exc.field, exc.value, exc.allowed) from None


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def pod_group(pod_labels: Mapping[str, Any], most: int, where: str = "metadata.labels") -> tuple[str, int] | None:
    """``(name, total count)`` of the pod group a pod's labels name (``LABEL_POD_GROUP`` with
    ``LABEL_POD_GROUP_COUNT``, at most ``most`` pods); None when it names none. Raises :class:`IntentError`."""
    name, count = pod_labels.get(LABEL_POD_GROUP), pod_labels.get(LABEL_POD_GROUP_COUNT)
    if name is None and count is None:
        return None
    at_name, at_count = f"{where}[{LABEL_POD_GROUP!r}]", f"{where}[{LABEL_POD_GROUP_COUNT!r}]"
    if name is None:
        raise IntentError(at_name, "(absent)", f"the pod group's name, given with {LABEL_POD_GROUP_COUNT}")
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
        raise IntentError(at_name, shown(name), "a DNS label: lower-case letters, digits and '-', at most 63")
    if count is None:
        raise IntentError(at_count, "(absent)", f"how many pods group {name!r} has, an integer from 1 to {most}, "
                                                f"given with {LABEL_POD_GROUP}")
    number = int(count) if isinstance(count, str) and count.isascii() and count.isdigit() else 0
    if not 1 <= number <= most or str(number) != count:
        raise IntentError(at_count, shown(count), f"how many pods group {name!r} has, an integer from 1 to {most} "
                                                  "written in digits")
    return name, number


def pod_intent(pod: Mapping[str, Any], default: Opportunistic = Opportunistic.FALSE) -> PodIntent:
    """Parse a pod's Stowage labels and annotations; raise :class:`IntentError` (only) on a bad value or shape.

    ``default`` applies when the pod has no ``stowage.io/opportunistic`` label:
    ``false`` for plain pods (opt-out), ``auto`` for pods of Stowage Jobs.
    """
    labels, annotations = _meta(pod)
    where_l, where_a = "metadata.labels", "metadata.annotations"
    opp = (
        Opportunistic.parse(labels[LABEL_OPPORTUNISTIC], f"{where_l}[{LABEL_OPPORTUNISTIC!r}]")
        if LABEL_OPPORTUNISTIC in labels
        else default
    )
    pod_class_ = pod_class(labels, where_l)
    demand = parse_demand(annotations[ANN_DEMAND], f"{where_a}[{ANN_DEMAND!r}]") if ANN_DEMAND in annotations else None
    duration = (
        _parse_duration(annotations[ANN_EXPECTED_DURATION], f"{where_a}[{ANN_EXPECTED_DURATION!r}]")
        if ANN_EXPECTED_DURATION in annotations
        else None
    )
    data_nodes = frozenset(n.strip() for n in str(annotations.get(ANN_DATA_NODES, "")).split(",") if n.strip())
    queue = labels.get(LABEL_QUEUE)
    if queue is not None and not isinstance(queue, str):
        raise IntentError(f"{where_l}[{LABEL_QUEUE!r}]", shown(queue), "a Queue's name")
    return PodIntent(
        opportunistic=opp,
        pod_class=pod_class_,
        demand=demand,
        bandwidth=bandwidth_demand(annotations, where_a),
        data_nodes=data_nodes,
        expected_duration_s=duration,
        queue=queue,
    )
