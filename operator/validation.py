"""Admission rules for Queues and Jobs, and the value checks every rule shares. Pure: no Kopf, no I/O.

``validate_queue(spec)`` and ``validate_job(spec, queue_exists, old_spec)`` return every problem of a spec
(``InvalidInput`` each: the field, the value and what is allowed); the checks below them (quantities, pod specs,
metadata, Stowage annotations) also serve the pod rules (:mod:`stowage.operator.admission`). See that module's
docstring for what the API server's schema checks before these run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from stowage.operator import crd, tasks, tenancy

from stowage import labels
from stowage.errors import IntentError, InvalidInput
from stowage.resources import parse_quantity, shown

__all__ = ["DEFAULT_SCHEDULER", "JSONPatch", "NamespaceLabels", "NamespaceQueue", "QueueExists", "QueueNames",
           "QueueSpecOf", "validate_job", "validate_queue"]

_T = TypeVar("_T")
QueueExists = Callable[[str], bool]
#: The namespace's ``stowage.io/queue`` label (the default queue of its pods), or None.
NamespaceQueue = Callable[[str], str | None]
#: A Queue's spec (``{}`` when it has none), or None when no such Queue exists.
QueueSpecOf = Callable[[str], Mapping[str, Any] | None]
#: A namespace's labels (what a Queue's ``namespaceSelector`` is matched against).
NamespaceLabels = Callable[[str], Mapping[str, str]]
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
QUEUE_ALLOWED = "the name of an existing Queue (kubectl get sq)"
DEMAND_ALLOWED = 'a JSON map of quantities such as {"cpu": "2", "memory": "4Gi"}'
NO_DEMAND = (
    "an opportunistic pod must state what it will use: set resources.requests or resources.limits "
    "(cpu, memory) on its containers, e.g. requests: {cpu: 500m, memory: 1Gi}; with neither it would fit "
    "every node's harvested capacity, however full"
)


def is_finite_number(value: Any) -> bool:
    """An int (never a bool) or a finite float; an int is never converted (one past 1e308 has no float)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


# --- values as refusals name them, and the core's parsers as checks --------------------------------

def _trimmed(problem: InvalidInput) -> InvalidInput:
    """``problem`` with its value shortened for the message (same class, field and allowed)."""
    value = shown(problem.value)
    return problem if value is problem.value else type(problem)(problem.field, value, problem.allowed)


def parse_checked(parse: Callable[[], _T]) -> _T:
    """``parse()`` (one of the core's parsers, which raise nothing but :class:`InvalidInput` whatever they are
    given), its problem's value shortened for the refusal."""
    try:
        return parse()
    except InvalidInput as exc:
        raise _trimmed(exc) from None


def _quantity_problem(value: Any, field: str) -> InvalidInput | None:
    try:
        parse_checked(lambda: parse_quantity(value, field))
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


def pod_spec_problems(spec: Any, where: str) -> list[InvalidInput]:
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


def metadata_problems(meta: Any, where: str) -> list[InvalidInput]:
    if (problem := _object_problem(meta, where, "an object (labels, annotations)")) is not None:
        return [problem]
    return [p for part in ("labels", "annotations")
            if (p := _string_map_problem((meta or {}).get(part), f"{where}.{part}")) is not None]


def _duration_problem(seconds: Any, field: str) -> InvalidInput | None:
    """A problem unless ``seconds`` is a finite number in [0, ``crd.MAX_EXPECTED_DURATION_S``]."""
    if is_finite_number(seconds) and 0 <= seconds <= crd.MAX_EXPECTED_DURATION_S:
        return None
    return InvalidInput(field, shown(seconds),
                        f"a number of seconds from 0 to {crd.MAX_EXPECTED_DURATION_S} (30 days; one task's "
                        "expected run time)")


#: The Stowage annotations the operator and the extender parse on every pod, with what each allows.
_PARSED_ANNOTATIONS: dict[str, str] = {
    labels.ANN_DEMAND: DEMAND_ALLOWED,
    labels.ANN_DISK_BANDWIDTH: "a quantity of bytes per second such as 80Mi, small enough to represent",
    labels.ANN_NETWORK_BANDWIDTH: "a quantity of bytes per second such as 80Mi, small enough to represent",
    labels.ANN_EXPECTED_DURATION: f"a number of seconds from 0 to {crd.MAX_EXPECTED_DURATION_S} (30 days)",
}


def annotations_problem(annotations: Mapping[str, str], where: str) -> InvalidInput | None:
    """The first of ``annotations``' Stowage annotations that does not parse as ``labels.pod_intent`` reads it
    (or states more than ``crd.MAX_EXPECTED_DURATION_S``), named ``<where>[key]``; None when all do. Admitted,
    they must never fail a later read."""
    for key, allowed in _PARSED_ANNOTATIONS.items():
        if key not in annotations:
            continue
        field, value = f"{where}[{key!r}]", annotations[key]
        try:
            intent = parse_checked(
                lambda key=key, value=value: labels.pod_intent({"metadata": {"annotations": {key: value}}}))
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
    ``opportunistic``, ``jobOrder`` and ``state`` from their enums; ``namespaceSelector`` a label selector
    (``tenancy.selector_problems``). Absent fields take the CRD's defaults.
    ``old_spec`` is the stored spec on an update: an update that leaves the spec as it is (labels,
    finalizers) always passes, so no rule added later can pin an object that is already stored.
    """
    if (problem := _object_problem(spec, "spec", "an object (weight, quota, opportunistic, jobOrder, state, "
                                                 "namespaceSelector)")) is not None:
        return [problem]
    spec = spec or {}
    if old_spec is not None and old_spec == spec:
        return []
    problems: list[InvalidInput] = []
    if "weight" in spec:
        weight = spec["weight"]
        if not is_finite_number(weight) or not 0 < weight <= crd.MAX_WEIGHT:
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
    for key, allowed in (("opportunistic", crd.QUEUE_OPPORTUNISTIC), ("jobOrder", crd.JOB_ORDERS),
                         ("state", crd.QUEUE_STATES)):
        if key in spec and not (isinstance(spec[key], str) and spec[key] in allowed):
            problems.append(InvalidInput(f"spec.{key}", shown(spec[key]), f"one of {', '.join(allowed)}"))
    return problems + tenancy.selector_problems(spec.get("namespaceSelector"))


# --- Job -----------------------------------------------------------------------------------------


def _template_problems(template: Mapping[str, Any], where: str) -> list[InvalidInput]:
    """Every problem of a task's pod template: shapes, quantities, the Stowage annotations."""
    meta = template.get("metadata")
    problems = metadata_problems(meta, f"{where}.metadata")
    if not problems:
        annotations = (meta or {}).get("annotations") or {}
        if (problem := annotations_problem(annotations, f"{where}.metadata.annotations")) is not None:
            problems.append(problem)
    return problems + pod_spec_problems(template.get("spec"), f"{where}.spec")


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


def _labels_once(namespace_labels: NamespaceLabels | None, namespace: str,
                 spec: Mapping[str, Any]) -> Mapping[str, str] | None:
    """The namespace's labels, read only when the Queue has a selector to match them against (one API read)."""
    if spec.get("namespaceSelector") is None or namespace_labels is None or not namespace:
        return None
    return namespace_labels(namespace)


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
    if "minAvailable" in task:
        gang = task["minAvailable"]
        most = replicas if _is_int(replicas, 1, crd.MAX_REPLICAS) else crd.MAX_REPLICAS
        if not _is_int(gang, 1, most):
            problems.append(InvalidInput(f"{where}.minAvailable", shown(gang),
                                         f"an integer from 1 to the group's replicas ({most})"))
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


def validate_job(spec: Any, queue_exists: QueueExists, old_spec: Mapping[str, Any] | None = None, *,
                 namespace: str = "", queue_spec: QueueSpecOf | None = None,
                 namespace_labels: NamespaceLabels | None = None) -> list[InvalidInput]:
    """Every problem of a Job's ``spec``; empty when it may be stored.

    With ``queue_spec`` (which then answers whether the queue exists) and ``namespace_labels``, a new Job must be
    one its queue takes from ``namespace`` (``tenancy.admission_problem``: not Closed, the selector matching).

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
    elif old_spec is None and queue_spec is not None:
        found = queue_spec(queue) if crd.is_queue_name(queue) else None
        if found is None:
            problems.append(InvalidInput("spec.queue", shown(queue), QUEUE_ALLOWED))
        elif (problem := tenancy.admission_problem("spec.queue", queue, found, namespace, _labels_once(
                namespace_labels, namespace, found))) is not None:
            problems.append(problem)
    elif old_spec is None and not (crd.is_queue_name(queue) and queue_exists(queue)):
        problems.append(InvalidInput("spec.queue", shown(queue), QUEUE_ALLOWED))
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
