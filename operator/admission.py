"""Stowage's admission rules as pure functions: no Kopf, no I/O (``webhooks`` is the glue).

==============================================  ==========================================================
``validate_queue(spec)``                        every problem of a Queue spec (``InvalidInput`` each)
``validate_job(spec, queue_exists, old_spec)``  every problem of a Job spec: unknown queue, a cycle in
                                                ``dependsOn``, bad quantities in a task's template, ...
``admit_pod(pod, queue_exists, ...)``           the JSON patch (RFC 6902) and warnings that admit a pod
                                                Stowage's by scheduler name or one label (pod or
                                                namespace); raises ``InvalidInput`` to refuse it
``stowage_pod_condition()``                     CEL: the pods that name Stowage (the webhook's scope)
``convert_opportunistic(pod)``                  the opportunistic conversion, on a copy (the operator
                                                also calls it when it creates an opportunistic task)
``review_pod_update(old, new)``                 every Stowage-owned key a pod UPDATE changes (refused
                                                unless Stowage's own service accounts make it)
==============================================  ==========================================================

Each problem names the field, the value and what is allowed (``stowage.errors.InvalidInput``). The
API server's schema and CEL rules (``charts/stowage/files/crds/``) run before a validating webhook and
catch most of the same mistakes; these rules repeat them so each stands alone, and add what a
schema cannot see: other objects (does the Queue exist?), cycles, quantities past what a number holds, the
Stowage annotations in a pod template.

Total over any JSON: the functions return problems (``admit_pod`` raises ``InvalidInput``) and raise
nothing else, whatever shapes they are given, and a Job ``validate_job`` admits can be planned by the
operator (its own steps run on each task here). Values in messages are shortened (``resources.shown``).

``queue_exists`` is a predicate ``name -> bool`` the caller supplies (an API read in the webhook,
a dict in tests).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from stowage.operator import crd, tasks

from stowage import labels
from stowage.errors import IntentError, InvalidInput
from stowage.kube.records import container_limits, tracked
from stowage.resources import CPU, MEMORY, ResourceVector, format_quantity, parse_quantity, pod_demand, shown

__all__ = [
    "DEFAULT_SCHEDULER",
    "JSONPatch",
    "NamespaceQueue",
    "PodAdmission",
    "QueueExists",
    "QueueNames",
    "admit_pod",
    "convert_opportunistic",
    "json_patch",
    "mutate_pod",
    "pod_update_condition",
    "review_pod_update",
    "stowage_pod_condition",
    "validate_job",
    "validate_queue",
]

_T = TypeVar("_T")
QueueExists = Callable[[str], bool]
#: The namespace's ``stowage.io/queue`` label (the default queue of its pods), or None.
NamespaceQueue = Callable[[str], str | None]
#: The names of the Queues that exist (for a refusal's message).
QueueNames = Callable[[], Collection[str]]
JSONPatch = list[dict[str, Any]]
#: kube-scheduler's name, which the API server writes into a pod that names no scheduler before any webhook
#: runs: at admission, naming it and naming none are the same.
DEFAULT_SCHEDULER = "default-scheduler"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A resource name as the API accepts it in requests/limits: "cpu", "nvidia.com/gpu", "hugepages-2Mi".
_RESOURCE_NAME = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_QUEUE_ALLOWED = "the name of an existing Queue (kubectl get sq)"
_DEMAND_ALLOWED = 'a JSON map of quantities such as {"cpu": "2", "memory": "4Gi"}'
_NO_DEMAND = (
    "an opportunistic pod must state what it will use: set resources.requests or resources.limits "
    "(cpu, memory) on its containers, e.g. requests: {cpu: 500m, memory: 1Gi}; with neither it would fit "
    "every node's harvested capacity, however full"
)


def _is_finite_number(value: Any) -> bool:
    """An int (never a bool) or a finite float; an int is never converted (one past 1e308 has no float)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


# --- values as refusals name them, and the core's parsers as checks --------------------------------

def _trimmed(problem: InvalidInput) -> InvalidInput:
    """``problem`` with its value shortened for the message (same class, field and allowed)."""
    value = shown(problem.value)
    return problem if value is problem.value else type(problem)(problem.field, value, problem.allowed)


def _parse(parse: Callable[[], _T]) -> _T:
    """``parse()`` (one of the core's parsers, which raise nothing but :class:`InvalidInput` whatever they are
    given), its problem's value shortened for the refusal."""
    try:
        return parse()
    except InvalidInput as exc:
        raise _trimmed(exc) from None


def _quantity_problem(value: Any, field: str) -> InvalidInput | None:
    try:
        _parse(lambda: parse_quantity(value, field))
    except InvalidInput as exc:
        return exc
    return None


_STRING_MAP = "a map of string to string (quote numbers and booleans)"
_QUANTITY_MAP = "a map of resource name to quantity"


def _object_problem(value: Any, field: str, allowed: str) -> InvalidInput | None:
    """A problem unless ``value`` is absent (None) or a JSON object."""
    return None if value is None or isinstance(value, Mapping) else InvalidInput(field, shown(value), allowed)


def _string_map_problem(value: Any, field: str) -> InvalidInput | None:
    if value is None or (isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())):
        return None
    return InvalidInput(field, shown(value), _STRING_MAP)


def _quantities_problems(values: Any, field: str) -> list[InvalidInput]:
    """Every problem of a ``{resource: quantity}`` map (``requests``, ``limits``, ``overhead``); absent is fine."""
    if values is None:
        return []
    if not isinstance(values, Mapping):
        return [InvalidInput(field, shown(values), _QUANTITY_MAP)]
    return [p for name, value in values.items() if (p := _quantity_problem(value, f"{field}.{name}")) is not None]


def _resources_problems(resources: Any, field: str) -> list[InvalidInput]:
    if (problem := _object_problem(resources, field, "an object with requests and limits")) is not None:
        return [problem]
    return [p for part in ("requests", "limits")
            for p in _quantities_problems((resources or {}).get(part), f"{field}.{part}")]


def _pod_spec_problems(spec: Any, where: str) -> list[InvalidInput]:
    """Every shape and quantity problem of a pod spec (a pod's or a task template's) Stowage reads.

    The API server checks a pod's spec this way before any webhook; a Job's template it keeps as written, so
    only these checks stand between a bad template and the operator's planning.
    """
    if (problem := _object_problem(spec, where, "a pod spec: an object with containers")) is not None:
        return [problem]
    spec = spec or {}
    problems: list[InvalidInput] = []
    for kind in ("initContainers", "containers"):
        containers = spec.get(kind)
        if containers is None:
            continue
        if not isinstance(containers, list):
            problems.append(InvalidInput(f"{where}.{kind}", shown(containers),
                                         "a list of containers (objects with name, image, resources)"))
            continue
        for j, container in enumerate(containers):
            field = f"{where}.{kind}[{j}]"
            if not isinstance(container, Mapping):
                problems.append(InvalidInput(field, shown(container), "a container: an object with name, image, "
                                                                       "resources"))
            else:
                problems += _resources_problems(container.get("resources"), f"{field}.resources")
    problems += _resources_problems(spec.get("resources"), f"{where}.resources")
    problems += _quantities_problems(spec.get("overhead"), f"{where}.overhead")
    for key in ("schedulerName", "nodeName"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            problems.append(InvalidInput(f"{where}.{key}", shown(spec[key]), "a string"))
    gates = spec.get("schedulingGates")
    if gates is not None and not (isinstance(gates, list) and all(isinstance(g, Mapping) for g in gates)):
        problems.append(InvalidInput(f"{where}.schedulingGates", shown(gates), "a list of objects with a name"))
    return problems


def _metadata_problems(meta: Any, where: str) -> list[InvalidInput]:
    if (problem := _object_problem(meta, where, "an object (labels, annotations)")) is not None:
        return [problem]
    return [p for part in ("labels", "annotations")
            if (p := _string_map_problem((meta or {}).get(part), f"{where}.{part}")) is not None]


def _duration_problem(seconds: Any, field: str) -> InvalidInput | None:
    """A problem unless ``seconds`` is a finite number in [0, ``crd.MAX_EXPECTED_DURATION_S``]."""
    if _is_finite_number(seconds) and 0 <= seconds <= crd.MAX_EXPECTED_DURATION_S:
        return None
    return InvalidInput(field, shown(seconds),
                        f"a number of seconds from 0 to {crd.MAX_EXPECTED_DURATION_S} (30 days; one task's "
                        "expected run time)")


#: The Stowage annotations the operator and the extender parse on every pod, with what each allows.
_PARSED_ANNOTATIONS: dict[str, str] = {
    labels.ANN_DEMAND: _DEMAND_ALLOWED,
    labels.ANN_DISK_BANDWIDTH: "a quantity of bytes per second such as 80Mi, small enough to represent",
    labels.ANN_NETWORK_BANDWIDTH: "a quantity of bytes per second such as 80Mi, small enough to represent",
    labels.ANN_EXPECTED_DURATION: f"a number of seconds from 0 to {crd.MAX_EXPECTED_DURATION_S} (30 days)",
}


def _annotations_problem(annotations: Mapping[str, str], where: str) -> InvalidInput | None:
    """The first of ``annotations``' Stowage annotations that does not parse as ``labels.pod_intent`` reads it
    (or states more than ``crd.MAX_EXPECTED_DURATION_S``), named ``<where>[key]``; None when all do. Admitted,
    they must never fail a later read."""
    for key, allowed in _PARSED_ANNOTATIONS.items():
        if key not in annotations:
            continue
        field, value = f"{where}[{key!r}]", annotations[key]
        try:
            intent = _parse(lambda key=key, value=value: labels.pod_intent({"metadata": {"annotations": {key: value}}}))
        except InvalidInput as exc:  # named as pod_intent names it: under metadata.annotations
            inner = exc.field.removeprefix("metadata.annotations") if exc.field.startswith("metadata.") else ""
            return IntentError(f"{where}{inner}" if inner else field, shown(exc.value), exc.allowed)
        if intent.expected_duration_s is not None and intent.expected_duration_s > crd.MAX_EXPECTED_DURATION_S:
            return IntentError(field, shown(value), allowed)
    return None


# --- Queue ---------------------------------------------------------------------------------------


def validate_queue(spec: Any, old_spec: Mapping[str, Any] | None = None) -> list[InvalidInput]:
    """Every problem of a Queue's ``spec``; empty when it may be stored.

    ``weight`` a finite number > 0; ``quota`` a map of resource name → non-negative quantity;
    ``opportunistic`` and ``jobOrder`` from their enums. Absent fields take the CRD's defaults.
    ``old_spec`` is the stored spec on an update: an update that leaves the spec as it is (labels,
    finalizers) always passes, so no rule added later can pin an object that is already stored.
    """
    if (problem := _object_problem(spec, "spec", "an object (weight, quota, opportunistic, jobOrder)")) is not None:
        return [problem]
    spec = spec or {}
    if old_spec is not None and old_spec == spec:
        return []
    problems: list[InvalidInput] = []
    if "weight" in spec:
        weight = spec["weight"]
        if not _is_finite_number(weight) or not 0 < weight <= crd.MAX_WEIGHT:
            problems.append(InvalidInput("spec.weight", shown(weight), f"a number > 0 and at most {crd.MAX_WEIGHT} "
                                                                        "(the queue's weight in weighted DRF)"))
    quota = spec.get("quota")
    if quota is not None:
        if not isinstance(quota, Mapping):
            problems.append(InvalidInput("spec.quota", shown(quota), _QUANTITY_MAP))
        else:
            for name, value in quota.items():
                if not isinstance(name, str) or not _RESOURCE_NAME.fullmatch(name):
                    problems.append(InvalidInput(
                        "spec.quota", shown(name), "resource names such as cpu, memory, nvidia.com/gpu as keys"))
                elif (problem := _quantity_problem(value, f"spec.quota.{name}")) is not None:
                    problems.append(problem)
    for key, allowed in (("opportunistic", crd.QUEUE_OPPORTUNISTIC), ("jobOrder", crd.JOB_ORDERS)):
        if key in spec and not (isinstance(spec[key], str) and spec[key] in allowed):
            problems.append(InvalidInput(f"spec.{key}", shown(spec[key]), f"one of {', '.join(allowed)}"))
    return problems


# --- Job -----------------------------------------------------------------------------------------


def _template_problems(template: Mapping[str, Any], where: str) -> list[InvalidInput]:
    """Every problem of a task's pod template: shapes, quantities, the Stowage annotations."""
    meta = template.get("metadata")
    problems = _metadata_problems(meta, f"{where}.metadata")
    if not problems:
        annotations = (meta or {}).get("annotations") or {}
        if (problem := _annotations_problem(annotations, f"{where}.metadata.annotations")) is not None:
            problems.append(problem)
    return problems + _pod_spec_problems(template.get("spec"), f"{where}.spec")


def _plannable(task: Mapping[str, Any], where: str) -> list[InvalidInput]:
    """The operator's own steps on one well-shaped task (its demand, its pod), run here: what they cannot take is
    refused now, not met by every later pass."""
    name = task["name"]
    job = {"metadata": {"name": "job"}, "spec": {"tasks": [task]}}
    try:
        tasks.task_demand(job, name)
        tasks.render_pod(job, tasks.TaskRef(name, 0), labels.PodClass.REGULAR)
    except InvalidInput as exc:
        return [_trimmed(exc)]
    except Exception as exc:  # a shape the checks above missed: refused, naming the template
        return [InvalidInput(f"{where}.template", shown(f"{type(exc).__name__}: {exc}"),
                             "a pod template the operator can plan (metadata and spec as a pod's)")]
    return []


def _find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle of the ``dependsOn`` graph as ``[a, b, ..., a]``, or None. Names in ``edges`` order."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in edges.get(node, ()):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep in edges and dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in edges:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _validate_task(task: Any, i: int, names: set[str]) -> list[InvalidInput]:
    where = f"spec.tasks[{i}]"
    if not isinstance(task, Mapping):
        return [InvalidInput(where, shown(task), "an object with name, replicas, template")]
    problems: list[InvalidInput] = []
    name = task.get("name")
    if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name) or len(name) > 63:
        problems.append(InvalidInput(f"{where}.name", shown(name), "a DNS label: lower-case letters, digits and "
                                                                    "'-', at most 63"))
    replicas = task.get("replicas", 1)
    if not _is_int(replicas, 1, crd.MAX_REPLICAS):
        problems.append(InvalidInput(f"{where}.replicas", shown(replicas), f"an integer from 1 to {crd.MAX_REPLICAS}"))
    retries = task.get("maxRetries", crd.DEFAULT_MAX_RETRIES)
    if not _is_int(retries, 0, crd.MAX_RETRIES_LIMIT):
        problems.append(InvalidInput(f"{where}.maxRetries", shown(retries),
                                     f"an integer in [0, {crd.MAX_RETRIES_LIMIT}]"))
    if "expectedDuration" in task and (problem := _duration_problem(task["expectedDuration"],
                                                                   f"{where}.expectedDuration")) is not None:
        problems.append(problem)
    depends = task.get("dependsOn") or []
    if not isinstance(depends, list) or len(depends) > crd.MAX_TASKS or not all(isinstance(d, str) for d in depends):
        problems.append(InvalidInput(f"{where}.dependsOn", shown(depends),
                                     f"a list of at most {crd.MAX_TASKS} task names"))
    else:
        for k, dep in enumerate(depends):
            if dep == name:
                problems.append(InvalidInput(f"{where}.dependsOn[{k}]", dep, "another task's name (not its own)"))
            elif dep not in names:
                known = ", ".join(sorted(names)) or "none"
                problems.append(InvalidInput(f"{where}.dependsOn[{k}]", shown(dep), f"the name of a task of this "
                                                                                     f"Job ({known})"))
    template = task.get("template")
    if not isinstance(template, Mapping):
        problems.append(InvalidInput(f"{where}.template", shown(template), "a pod template (metadata and spec)"))
        return problems
    template_problems = _template_problems(template, f"{where}.template")
    if template_problems or problems:
        return problems + template_problems
    return _plannable(task, where)


def validate_job(spec: Any, queue_exists: QueueExists, old_spec: Mapping[str, Any] | None = None) -> list[InvalidInput]:
    """Every problem of a Job's ``spec``; empty when it may be stored.

    ``old_spec`` is the stored spec on an update: the queue is looked up only when it is new (a Job
    whose Queue was deleted later can still be suspended or finalised), and ``queue`` and ``tasks``
    must not change. An update that leaves the spec as it is (labels, finalizers, Kopf's annotations)
    always passes.

    A Job with no problem can be planned: each task's template has the shapes of a pod's metadata and spec,
    its quantities and Stowage annotations parse, and the operator's own demand and pod rendering run on it here.
    """
    if (problem := _object_problem(spec, "spec", "an object with queue and tasks")) is not None:
        return [problem]
    spec = spec or {}
    if old_spec is not None and old_spec == spec:
        return []
    problems: list[InvalidInput] = []
    queue = spec.get("queue", labels.DEFAULT_QUEUE)
    if old_spec is not None and old_spec.get("queue", labels.DEFAULT_QUEUE) != queue:
        problems.append(InvalidInput("spec.queue", shown(queue), f"unchanged ({old_spec.get('queue')!r}): the queue "
                                                                  "of a Job is immutable; create the Job again"))
    elif old_spec is None and not (crd.is_queue_name(queue) and queue_exists(queue)):
        problems.append(InvalidInput("spec.queue", shown(queue), _QUEUE_ALLOWED))
    if "opportunistic" in spec and not (isinstance(spec["opportunistic"], str)
                                        and spec["opportunistic"] in tuple(labels.Opportunistic)):
        problems.append(InvalidInput("spec.opportunistic", shown(spec["opportunistic"]),
                                     "one of 'true', 'auto', 'false' (quoted: a string)"))
    if "suspend" in spec and not isinstance(spec["suspend"], bool):
        problems.append(InvalidInput("spec.suspend", shown(spec["suspend"]), "true or false"))

    tasks_ = spec.get("tasks")
    if not isinstance(tasks_, list) or not tasks_:
        problems.append(InvalidInput("spec.tasks", shown(tasks_), "a list of at least one task group"))
        return problems
    if len(tasks_) > crd.MAX_TASKS:  # the groups themselves are not read: there may be any number of them
        problems.append(InvalidInput("spec.tasks", f"{len(tasks_)} groups", f"at most {crd.MAX_TASKS} groups"))
        return problems
    names = [t.get("name") if isinstance(t, Mapping) else None for t in tasks_]
    known = {n for n in names if isinstance(n, str)}
    seen: set[str] = set()
    for i, name in enumerate(names):
        if isinstance(name, str) and name in seen:
            problems.append(InvalidInput(f"spec.tasks[{i}].name", shown(name), "a name no other task of this Job has"))
        if isinstance(name, str):
            seen.add(name)
    for i, task in enumerate(tasks_):
        problems += _validate_task(task, i, known)
    # Self-dependencies are reported on the task itself; the graph search looks for longer cycles.
    edges = {n: [d for d in (t.get("dependsOn") or []) if isinstance(d, str) and d != n]
             for n, t in zip(names, tasks_, strict=True) if isinstance(n, str) and isinstance(t, Mapping)
             and isinstance(t.get("dependsOn") or [], list)}
    cycle = _find_cycle(edges)
    if cycle is not None:
        problems.append(InvalidInput("spec.tasks[*].dependsOn", shown(" -> ".join(cycle)),
                                     "dependencies without a cycle (a barrier that waits on itself never opens)"))
    if old_spec is not None and old_spec.get("tasks") != tasks_:
        problems.append(InvalidInput("spec.tasks", "(changed)", "unchanged: the tasks of a Job are immutable once it "
                                                                "is created; create a new Job"))
    return problems


# --- Pods ----------------------------------------------------------------------------------------


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(old: Any, new: Any, path: str = "") -> JSONPatch:
    """RFC 6902 operations turning ``old`` into ``new``.

    Objects are compared key by key, lists of equal length item by item; anything else that differs
    is replaced whole (a list that grew or shrank, a changed scalar).
    """
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        ops: JSONPatch = [{"op": "remove", "path": f"{path}/{_escape(k)}"} for k in old if k not in new]
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
            else:
                ops += json_patch(old[key], value, f"{path}/{_escape(key)}")
        return ops
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [op for i, (a, b) in enumerate(zip(old, new, strict=True)) for op in json_patch(a, b, f"{path}/{i}")]
    if type(old) is not type(new) or old != new:
        return [{"op": "replace", "path": path, "value": new}]
    return []


def _child(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]``, an object: one made when it is absent or null (``setdefault`` would hand back the null)."""
    value = obj.get(key)
    if not isinstance(value, dict):
        value = obj[key] = {}
    return value


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for kind in ("initContainers", "containers") for c in spec.get(kind) or [] if isinstance(c, dict)]


def _limit_bounds(pod: Mapping[str, Any]) -> dict[str, float]:
    """The most the pod can ever use of each resource its limits bound, by resource.

    At any moment it runs its containers and sidecars (restartable init containers) together, or one
    other init container: the bound is the larger of their limits' sum and that init container's limit.
    A resource that one running container leaves unlimited has no bound, and is not in the result.
    """
    spec = pod.get("spec") or {}
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    running = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    running += [c for c in inits if c.get("restartPolicy") == "Always"]

    def limits(container: Mapping[str, Any]) -> ResourceVector:
        return ResourceVector.parse(((container.get("resources") or {}).get("limits")), "resources.limits")

    per = [limits(c) for c in running]
    one_at_a_time = [limits(c) for c in inits if c.get("restartPolicy") != "Always"]
    names = set().union(*per) if per else set()
    return {r: max([sum(lim[r] for lim in per), *(lim[r] for lim in one_at_a_time)])
            for r in names if all(r in lim for lim in per)}


def _converted_requests(pod: Mapping[str, Any]) -> bool:
    """Every container requests at most the conversion's cpu (``1m``) and no memory: a converted pod's (by
    hand, or before), which states its use by its limits only."""
    floor = parse_quantity(CONVERTED_CPU_REQUEST, CPU)
    for container in _containers(dict(pod.get("spec") or {})):
        requests = (container.get("resources") or {}).get("requests") or {}
        try:
            if parse_quantity(requests.get(CPU, "0"), CPU) > floor or parse_quantity(requests.get(MEMORY, "0"),
                                                                                      MEMORY) > 0:
                return False
        except InvalidInput:
            return False
    return True


def _demand(pod: Mapping[str, Any]) -> ResourceVector:
    """What an opportunistic pod will use: the demand it states, the rest from its requests or limits.

    The annotation ``stowage.io/demand`` the user wrote is kept as stated; each resource it leaves out
    (or states as 0) comes from the pod's requests (limits where no request), or, when it requests
    nothing, from its limits. That last step covers a pod converted by hand (explicit zero requests): its
    limits are then the only statement of its use, the rule the extender applies to a pod without the
    annotation. A stated amount above what the pod's limits let it use is a contradiction and refused.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    where = f"metadata.annotations[{labels.ANN_DEMAND!r}]"
    raw = annotations.get(labels.ANN_DEMAND)
    stated = (tracked(_parse(lambda: labels.parse_demand(raw, where)))
              if labels.ANN_DEMAND in annotations else ResourceVector())
    resources = "spec.containers[*].resources"
    derived = {k: v for k, v in tracked(_parse(lambda: pod_demand(pod))).items() if v > 0}
    if not derived or _converted_requests(pod):
        derived = {k: v for k, v in tracked(_parse(lambda: container_limits(pod))).items() if v > 0}
    demand = ResourceVector({**derived, **stated.as_dict()})
    if not demand:
        raise IntentError(resources, "no requests and no limits", _NO_DEMAND)
    bounds = _parse(lambda: _limit_bounds(pod))
    over = [f"{r}: demand {format_quantity(v, r)}, limit {format_quantity(bounds[r], r)}"
            for r, v in sorted(stated.items()) if r in bounds and v > bounds[r]]
    if over:
        raise IntentError(where, annotations[labels.ANN_DEMAND],
                          f"no resource above what the pod's limits let it use ({'; '.join(over)}): a demand "
                          "it can never reach misplaces it; lower the demand or raise the containers' limits")
    return demand


#: The cpu request every container of a converted pod keeps (:func:`convert_opportunistic`).
CONVERTED_CPU_REQUEST = "1m"


def _limited(spec: Mapping[str, Any]) -> bool:
    """Some container limits cpu or memory above zero: the pod is Burstable with zero requests already."""
    for container in _containers(dict(spec)):
        limits = (container.get("resources") or {}).get("limits") or {}
        for r in (CPU, MEMORY):
            try:
                if r in limits and parse_quantity(limits[r], r) > 0:
                    return True
            except InvalidInput:
                continue
    return False


def _above(value: Any, resource: str, floor: float = 0.0) -> bool:
    try:
        return value is not None and parse_quantity(value, resource) > floor
    except InvalidInput:
        return False


def _original_requests(spec: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Each container's cpu and memory requests as the API server would store them unconverted: the request,
    else the limit (Kubernetes defaults a missing request to the limit), else none. A request at or below the
    conversion's own (a pod converted by hand: cpu 0 or 1m, memory 0) counts as none, as :func:`_demand` reads
    it. By container name, for ``stowage.io/requests`` (what a promotion restores)."""
    floor = {CPU: parse_quantity(CONVERTED_CPU_REQUEST, CPU), MEMORY: 0.0}
    out: dict[str, dict[str, str]] = {}
    for container in spec.get("containers") or []:
        if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
            continue
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        kept = {}
        for r in (CPU, MEMORY):
            if _above(requests.get(r), r, floor[r]):
                kept[r] = str(requests[r])
            elif _above(limits.get(r), r):
                kept[r] = str(limits[r])
        out[container["name"]] = kept
    return out


def convert_opportunistic(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod, converted to run on harvested capacity (a deep copy; ``pod`` is not changed).

    Exactly as docs/operator.md says: every container's (and init container's) cpu and memory requests
    become an explicit ``"0"`` (an absent key would be defaulted to the limit), or cpu ``"1m"`` in a pod
    that limits neither cpu nor memory anywhere (below), limits stay; annotation ``stowage.io/requests``
    keeps each container's cpu and memory requests from before (:func:`_original_requests`), which a
    promotion restores in place (``stowage.operator.promotion``);
    the first container requests and is limited to ``stowage.io/harvested: "1"`` (routes the pod
    through the extender's harvest check); annotation ``stowage.io/demand`` holds the demand the pod
    states, completed from its original requests (limits where no request), as JSON quantities
    (:func:`_demand`); ``priorityClassName:
    stowage-opportunistic`` with ``priority`` and ``preemptionPolicy`` removed (the Priority
    admission plugin fills them in again from the class, and refuses values that disagree with it);
    label ``stowage.io/class: opportunistic``.

    Why ``1m`` there: a pod's QoS class can never change, and a BestEffort pod (no cpu or memory request or
    limit above zero in any container) cannot gain requests by an in-place resize (KEP-1287). A pod with a
    limit stays Burstable at zero requests; one with only requests would turn BestEffort at ``"0"`` and could
    never be promoted, so its cpu requests become ``1m``: every converted pod is Burstable. The kernel sees no
    difference: the kubelet gives a cpu request of 0 or 1m the same cpu weight (it clamps shares to their
    minimum, 2). kube-scheduler does: it counts one millicore per container, so such a pod does not fit a node
    whose cpu requests are already at exactly 100 % of its allocatable (``1m`` only where needed keeps that
    to the pods without limits).
    The extended resource ``stowage.io/harvested: 1`` stays for the pod's life: extended resources cannot be
    resized in place.

    Raises :class:`IntentError` when the pod states no demand and has no requests and no limits (it
    would fit anywhere), or states a demand above its limits.
    """
    out = copy.deepcopy(dict(pod))
    demand = _demand(out)
    meta = _child(out, "metadata")
    _child(meta, "labels")[labels.LABEL_CLASS] = labels.PodClass.OPPORTUNISTIC.value
    annotations = _child(meta, "annotations")
    annotations[labels.ANN_DEMAND] = json.dumps(demand.as_quantities())
    spec = _child(out, "spec")
    annotations[labels.ANN_REQUESTS] = json.dumps(_original_requests(spec), sort_keys=True)
    cpu = "0" if _limited(spec) else CONVERTED_CPU_REQUEST
    for container in _containers(spec):
        requests = _child(_child(container, "resources"), "requests")
        requests[CPU] = cpu
        requests[MEMORY] = "0"
    first = (spec.get("containers") or [None])[0]
    if isinstance(first, dict):
        resources = _child(first, "resources")
        _child(resources, "requests")[labels.HARVEST_RESOURCE] = "1"
        _child(resources, "limits")[labels.HARVEST_RESOURCE] = "1"
    spec["priorityClassName"] = labels.OPPORTUNISTIC_PRIORITY_CLASS
    spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
    return out


def _strip_harvest_resource(spec: dict[str, Any]) -> None:
    """Only a converted pod requests ``stowage.io/harvested``; a user's own request of it goes."""
    for container in _containers(spec):
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            if isinstance(resources.get(part), dict):
                resources[part].pop(labels.HARVEST_RESOURCE, None)


def _admitted(pod: Mapping[str, Any], queue: str, intent: labels.Opportunistic, warnings: list[str]) -> dict[str, Any]:
    """The pod as Stowage admits it into ``queue``: scheduler name, system labels, class, gate."""
    out = copy.deepcopy(dict(pod))
    meta = _child(out, "metadata")
    # System labels are the webhook's to set: whatever the user wrote goes.
    pod_labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in labels.SYSTEM_LABELS}
    pod_labels[labels.LABEL_QUEUE] = queue
    meta["labels"] = pod_labels
    annotations = dict(meta.get("annotations") or {})
    if labels.ANN_REQUESTS in annotations:  # only the conversion writes it (a promotion restores it)
        warnings.append(f"annotation {labels.ANN_REQUESTS} removed: only Stowage sets it, when it converts a pod")
        del annotations[labels.ANN_REQUESTS]
        meta["annotations"] = annotations
    spec = _child(out, "spec")
    spec["schedulerName"] = labels.SCHEDULER_NAME
    _strip_harvest_resource(spec)
    if intent is labels.Opportunistic.TRUE:
        return _gate(convert_opportunistic(out))
    if labels.ANN_DEMAND in annotations:
        # Only an opportunistic pod's demand differs from its requests; a regular pod's is its requests.
        warnings.append(f"annotation {labels.ANN_DEMAND} removed: this pod runs regular (without "
                        f"{labels.LABEL_OPPORTUNISTIC}: \"true\"), so its requests are its demand")
        del annotations[labels.ANN_DEMAND]
        meta["annotations"] = annotations
    pod_labels[labels.LABEL_CLASS] = labels.PodClass.REGULAR.value
    return _gate(out)


def _gate(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with the admission gate appended (once, after the user's own gates)."""
    if not _gated(pod):
        spec = _child(pod, "spec")
        spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": labels.GATE_ADMISSION}]
    return pod


#: What admission decided on a pod, kept for its life: the system labels, the intent (``class: opportunistic``
#: with ``opportunistic: "false"`` would make the node monitor protect a converted pod), the demand annotation and
#: the requests a promotion restores.
PROTECTED_LABELS: tuple[str, ...] = (*labels.SYSTEM_LABELS, labels.LABEL_OPPORTUNISTIC)
PROTECTED_ANNOTATIONS: tuple[str, ...] = (labels.ANN_DEMAND, labels.ANN_REQUESTS)
_UPDATE_ALLOWED = "set by Stowage at admission; only Stowage's own service accounts may change it"


def _gated(pod: Mapping[str, Any] | None) -> bool:
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION for g in gates)


def review_pod_update(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[InvalidInput]:
    """Every Stowage-owned key a pod UPDATE changes, one ``InvalidInput`` naming each (``[]``: allowed).

    Owned: ``PROTECTED_LABELS``, ``PROTECTED_ANNOTATIONS`` (added, changed or removed) and the scheduling
    gate ``stowage.io/admission`` (removed: the pod would skip the dispatcher's fair order). The webhook
    calls this only for users other than Stowage's service accounts, which release pods and set classes.
    """
    problems: list[InvalidInput] = []
    for part, keys in (("labels", PROTECTED_LABELS), ("annotations", PROTECTED_ANNOTATIONS)):
        before = ((old or {}).get("metadata") or {}).get(part) or {}
        after = ((new or {}).get("metadata") or {}).get(part) or {}
        for key in keys:
            if before.get(key) != after.get(key):
                problems.append(InvalidInput(f"metadata.{part}[{key!r}]", after.get(key, "(removed)"), _UPDATE_ALLOWED))
    if _gated(old) and not _gated(new):
        problems.append(InvalidInput(f"spec.schedulingGates[{labels.GATE_ADMISSION!r}]", "(removed)",
                                     "only Stowage's own service accounts may remove it (the dispatcher does, "
                                     "releasing the pod in fair order)"))
    return problems


def _cel_changed(part: str, key: str) -> str:
    """CEL: ``metadata.<part>[key]`` was added, removed or changed (absent differs from "")."""
    new, old = (f"(has({o}.metadata.{part}) && '{key}' in {o}.metadata.{part})" for o in ("object", "oldObject"))
    return f"({new} != {old} || ({new} && object.metadata.{part}['{key}'] != oldObject.metadata.{part}['{key}']))"


def pod_update_condition() -> str:
    """CEL for the webhook's ``matchConditions``: true iff the UPDATE changes what ``review_pod_update`` guards.

    The API server evaluates it, so every other pod update (the kubelet's, a controller's, a user's own
    labels) never waits on the webhook, which fails closed.
    """
    changes = [_cel_changed(part, k)
               for part, keys in (("labels", PROTECTED_LABELS), ("annotations", PROTECTED_ANNOTATIONS)) for k in keys]

    def gated(obj: str) -> str:
        return (f"(has({obj}.spec.schedulingGates) && "
                f"{obj}.spec.schedulingGates.exists(g, g.name == '{labels.GATE_ADMISSION}'))")

    changes.append(f"({gated('oldObject')} && !{gated('object')})")
    return " || ".join(changes)


@dataclass(frozen=True, slots=True)
class PodAdmission:
    """What admission decided on a pod CREATE: the JSON patch (``[]``: the pod stays as written) and warnings."""

    patch: JSONPatch
    warnings: tuple[str, ...] = ()


def _no_namespace_queue(namespace: str) -> str | None:
    return None


def stowage_pod_condition() -> str:
    """CEL for the pod webhook's ``matchConditions``: true iff the pod names Stowage itself.

    By its scheduler name, a queue label, or an opportunistic label other than the opt-out ``"false"``
    (a malformed value too: it must be refused, not ignored). Pods of a namespace labelled
    ``stowage.io/queue`` reach the webhook through a second entry (a ``namespaceSelector``).
    """
    opp = labels.LABEL_OPPORTUNISTIC
    return (f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{labels.SCHEDULER_NAME}') || "
            f"(has(object.metadata.labels) && ('{labels.LABEL_QUEUE}' in object.metadata.labels || "
            f"('{opp}' in object.metadata.labels && object.metadata.labels['{opp}'] != "
            f"'{labels.Opportunistic.FALSE.value}')))")


def _queue_allowed(queue: str, queue_names: QueueNames | None) -> str:
    known = "" if queue_names is None else (", ".join(sorted(queue_names())) or "none yet") + "; "
    return (f"the name of an existing Queue ({known}kubectl get sq), or create Queue {queue!r} first "
            "(cluster-scoped, kind Queue, apiVersion stowage.io/v1alpha1: docs/operator.md)")


def admit_pod(pod: Mapping[str, Any], queue_exists: QueueExists, *,
              namespace_queue: NamespaceQueue = _no_namespace_queue,
              queue_names: QueueNames | None = None, watched_namespaces: Collection[str] = ()) -> PodAdmission:
    """Admit a pod created by a user: make it Stowage's if it asks to be, refuse what cannot be honoured.

    A pod is Stowage's when it names the scheduler ``stowage-scheduler``, carries ``stowage.io/queue``
    or ``stowage.io/opportunistic: "true"|"auto"`` (on the pod or its controller's template), or lives in
    a namespace labelled ``stowage.io/queue`` (``namespace_queue(name)`` reads that label; a pod labelled
    ``stowage.io/webhook: ignore`` opts out of it). Such a pod gets ``schedulerName: stowage-scheduler``;
    the system labels (``stowage.io/class``, ``stowage.io/job``, ``stowage.io/task-group``) a user set go;
    ``stowage.io/queue`` is its own label, else its namespace's, else ``default``; ``stowage.io/opportunistic:
    "true"`` gets the opportunistic conversion (:func:`convert_opportunistic`, which keeps a stated
    ``stowage.io/demand``), anything else stays regular with ``stowage.io/class: regular`` (a stated demand
    is removed, with a warning); the scheduling gate ``stowage.io/admission`` is added, and the dispatcher
    releases the pod in fair order. Any other pod is left as it is (``patch == []``).

    A pod whose ``spec.schedulerName`` names another scheduler keeps it: with a Stowage label it is
    refused (the two contradict each other), in a queue-labelled namespace it gets a warning. The API
    server writes ``default-scheduler`` into a pod that names none before any webhook runs, so that name
    counts as none. A pod created with ``spec.nodeName`` is bound already: left as it is, with a warning.

    Raises :class:`InvalidInput` naming the field to refuse the pod: a malformed ``stowage.io/opportunistic``,
    a queue (the pod's, its namespace's, or ``default``) that does not exist (``queue_names()`` lists the
    ones that do), a Stowage label on a pod of another scheduler, a Stowage pod outside ``watched_namespaces``
    (the operator's ``--namespace``; empty: all), an opportunistic pod with no demand, a stated demand above
    the pod's limits.
    """
    if not isinstance(pod, Mapping):
        raise IntentError("(the pod)", shown(pod), "a pod: an object with metadata and spec")
    # The API server hands a webhook only well-formed pods; checked here too, the rules below stand alone.
    shapes = [*_metadata_problems(pod.get("metadata"), "metadata"), *_pod_spec_problems(pod.get("spec"), "spec")]
    if shapes:
        raise IntentError(shapes[0].field, shapes[0].value, shapes[0].allowed)
    meta = pod.get("metadata") or {}
    pod_labels = meta.get("labels") or {}
    where = "metadata.labels"
    raw_intent = pod_labels.get(labels.LABEL_OPPORTUNISTIC)
    # Without the label a plain pod opts out of harvesting (DESIGN.md).
    intent = (labels.Opportunistic.parse(raw_intent, f"{where}[{labels.LABEL_OPPORTUNISTIC!r}]")
              if raw_intent is not None else labels.Opportunistic.FALSE)
    own_queue = pod_labels.get(labels.LABEL_QUEUE)
    # A label asks for Stowage: a queue, or the wish for harvested capacity ("false" is the opt-out).
    asks = own_queue is not None or intent is not labels.Opportunistic.FALSE
    opted_out = pod_labels.get(labels.LABEL_WEBHOOK) == labels.WEBHOOK_IGNORE
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    ns_queue = namespace_queue(namespace) if own_queue is None and namespace and not opted_out else None
    scheduler = (pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER

    if scheduler not in (DEFAULT_SCHEDULER, labels.SCHEDULER_NAME):
        if asks:
            key = labels.LABEL_QUEUE if own_queue is not None else labels.LABEL_OPPORTUNISTIC
            raise IntentError(f"{where}[{key!r}]", pod_labels[key],
                              f"no Stowage label on a pod of another scheduler (spec.schedulerName {scheduler!r}): "
                              f"remove spec.schedulerName (or set it to {labels.SCHEDULER_NAME!r}) to run the pod "
                              "through Stowage, or remove the label to leave it to that scheduler")
        if ns_queue is None:
            return PodAdmission([])
        return PodAdmission([], (f"namespace {namespace!r} is labelled {labels.LABEL_QUEUE}={ns_queue}, so its "
                                 "pods run through Stowage; this pod names spec.schedulerName "
                                 f"{scheduler!r} and stays with that scheduler, outside every Stowage queue",))
    if scheduler != labels.SCHEDULER_NAME and not asks and ns_queue is None:
        return PodAdmission([])  # kube-scheduler's pod: nothing asks for Stowage
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        # Bound at creation: no scheduler ever sees it, and the API server refuses a gate on it.
        return PodAdmission([], (f"spec.nodeName {node!r} binds this pod without any scheduler: Stowage does not "
                                 "gate, queue or convert it; remove spec.nodeName (use a nodeSelector) to run it "
                                 "through Stowage",))

    if watched_namespaces and namespace not in watched_namespaces:
        # Gated where no dispatcher looks, the pod would wait for ever.
        watched = ", ".join(sorted(watched_namespaces))
        raise IntentError("metadata.namespace", namespace,
                          f"one of the namespaces the Stowage operator watches ({watched}): "
                          "nowhere else is a Stowage pod released from its admission gate; create it in one of them, "
                          "or add this namespace to the operator's --namespace (chart: operator.namespaces)")
    # A typo in a queue name must not land the pod in another queue: refused, naming where it came from.
    if own_queue is not None:
        if not (crd.is_queue_name(own_queue) and queue_exists(own_queue)):
            raise IntentError(f"{where}[{labels.LABEL_QUEUE!r}]", own_queue, _queue_allowed(own_queue, queue_names))
        queue = own_queue
    elif ns_queue is not None:
        if not (crd.is_queue_name(ns_queue) and queue_exists(ns_queue)):
            raise IntentError(f"namespace {namespace!r}: {where}[{labels.LABEL_QUEUE!r}]", ns_queue,
                              f"{_queue_allowed(ns_queue, queue_names)}; it is the default queue of the "
                              "namespace's pods")
        queue = ns_queue
    else:
        if not queue_exists(labels.DEFAULT_QUEUE):
            raise IntentError(f"{where}[{labels.LABEL_QUEUE!r}]", "(absent)",
                              f"{_QUEUE_ALLOWED}; without the label the pod goes to queue "
                              f"{labels.DEFAULT_QUEUE!r}, which does not exist")
        queue = labels.DEFAULT_QUEUE

    # What stays of the Stowage annotations must parse: the operator and the extender read them on every pass.
    kept = {k: v for k, v in (meta.get("annotations") or {}).items()
            if k != labels.ANN_DEMAND or intent is labels.Opportunistic.TRUE}
    if (problem := _annotations_problem(kept, "metadata.annotations")) is not None:
        raise IntentError(problem.field, problem.value, problem.allowed)
    warnings: list[str] = []
    if opted_out and (asks or scheduler == labels.SCHEDULER_NAME):
        warnings.append(f"{labels.LABEL_WEBHOOK}={labels.WEBHOOK_IGNORE} on a pod only keeps it out of its "
                        "namespace's default queue; this pod names Stowage itself and runs through it")
    if intent is labels.Opportunistic.AUTO:
        warnings.append(f"{labels.LABEL_OPPORTUNISTIC}=auto on a plain pod runs it regular (its requests "
                        "cannot change after creation); use \"true\" to run it on harvested capacity")
    admitted = _admitted(pod, queue, intent, warnings)
    return PodAdmission(json_patch(pod, admitted), tuple(warnings))


def mutate_pod(pod: Mapping[str, Any], queue_exists: QueueExists) -> JSONPatch:
    """The JSON patch of :func:`admit_pod` for a pod outside any queue-labelled namespace."""
    return admit_pod(pod, queue_exists).patch
