"""A user's workload file (YAML or JSON): the contract, its validator, and the reverse.

The contract (every key; anything else is rejected)::

    nodes:                     # required, at least one
      - {name: big, count: 2, cpu: 2, memory: 4Gi, disk: 200Mi, network: 125Mi}
    queues:                    # optional; absent: one queue `default` (weight 1, SRTF, Allow)
      - {name: research, weight: 2, jobOrder: SRTF, opportunistic: Allow}
    jobs:                      # required, at least one
      - name: etl-1
        queue: research        # required when `queues` is given, else `default`
        arrival: 0             # seconds, default 0
        opportunistic: auto    # true | auto | false, default auto
        priority: 0            # optional, default 0 (kube-default orders by it)
        groups:
          - name: map
            replicas: 6        # tasks in the group (a Stowage Job's spec.tasks[].replicas)
            demand: {cpu: 2, memory: 3Gi, disk: 50Mi}
            duration: 10       # seconds when it runs alone at full speed
            usage: 1.0         # optional fraction (0, 1] of demand really used; default: the usage model
            expectedDuration: 12  # optional: what the user states (the estimator's hint; `duration` is the truth)
            minAvailable: 6    # optional, 1..replicas: all or nothing, the first 6 tasks start together or none
          - {name: reduce, replicas: 2, demand: {cpu: 1, memory: 2Gi}, duration: 20, dependsOn: [map]}

A group's size is ``replicas``, as in a Stowage Job; ``tasks`` (its name before) is refused saying so. A file may
instead hold Stowage Job and Queue manifests (``stowage.io/v1alpha1``, several YAML documents): see
:func:`parse_manifests`.

Nodes: ``name``, ``cpu`` and ``memory`` required; ``disk`` and ``network`` (bytes/s) and
extended resources by their Kubernetes names (``nvidia.com/gpu``, whole numbers) optional;
``count`` (default 1) and ``harvest`` (default true; false = node label
``stowage.io/harvest: "false"``) optional. A node with ``count: 1`` keeps its name; ``count: K``
expands to ``<name>-1`` … ``<name>-K``.

Every problem is reported at once in one :class:`WorkloadError`, each as
``<path>: <what is wrong>``, the path naming the entry by its name where it has one
(``jobs[etl-1].groups[reduce].dependsOn: unknown group 'mapp'; known: map``) and by its
index where it has none or the name is a duplicate.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from stowage.errors import InvalidInput, WorkloadError
from stowage.labels import Opportunistic, bandwidth_demand
from stowage.model import JobOrder, QueueOpportunistic
from stowage.resources import (
    CORE_RESOURCES,
    CPU,
    MEMORY,
    ResourceVector,
    format_quantity,
    parse_quantity,
    pod_demand,
)
from stowage.sim.traces.shapes import is_extended_resource
from stowage.sim.workload import JobSpec, NodeSpec, QueueSpec, TaskGroup, Workload, nodes_over_limit

__all__ = ["DEFAULT_QUEUE", "STOWAGE_API", "load_workload_file", "manifests_to_document", "parse_workload",
           "workload_to_dict"]

#: The queue a file without ``queues`` gets.
DEFAULT_QUEUE = QueueSpec("default", 1.0, JobOrder.SRTF, True)

_TOP_KEYS = ("nodes", "queues", "jobs")
_NODE_KEYS = ("name", "count", "harvest", *CORE_RESOURCES)
_QUEUE_KEYS = ("name", "weight", "jobOrder", "opportunistic")
_JOB_KEYS = ("name", "queue", "arrival", "opportunistic", "priority", "groups")
_GROUP_KEYS = ("name", "replicas", "demand", "duration", "usage", "dependsOn", "expectedDuration", "minAvailable")
#: Keys an earlier release had, and what to write instead: refused with that message, never read silently.
_RENAMED_GROUP_KEYS = {"tasks": "renamed `replicas` (the number of tasks in the group, as a Stowage Job's "
                                "spec.tasks[].replicas; `tasks` is a Job's list of task groups)"}
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_NAME_ALLOWED = "a name of letters, digits, '-', '_' or '.' (starting and ending alphanumeric)"
_RESOURCES_ALLOWED = "cpu, memory, disk, network or an extended resource such as nvidia.com/gpu"


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_EXPONENT = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+))[eE](\d+)$")


def _got(value: object, *, whole: bool = False) -> str:
    """``got <value>``, with a hint when YAML read a number as text.

    YAML 1.1 (PyYAML) reads ``1.0e15`` as a string: its floats need a signed exponent
    (``1.0e+15``) or no exponent at all.
    """
    got = f"got {value!r}"
    match = _EXPONENT.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        return got
    number = float(value)  # type: ignore[arg-type]
    plain = str(int(number)) if number.is_integer() and abs(number) < 1e21 else repr(number)
    mantissa = match[1] if "." in match[1] else f"{match[1]}.0"  # YAML 1.1 floats need the dot too
    spelled = plain if whole else f"{mantissa}e+{match[2]} or {plain}"
    return f"{got} (YAML reads {value.strip()} as text: write {spelled})"  # type: ignore[union-attr]


class _Checker:
    """Collects every problem; each check returns a usable value or None."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def mapping(self, value: object, path: str) -> Mapping[str, Any] | None:
        if not isinstance(value, Mapping):
            self.add(path, f"a mapping of keys to values, got {value!r}")
            return None
        return value

    def entries(self, value: object, path: str, what: str, required: bool = True) -> list[Any]:
        if value is None and not required:
            return []
        if not isinstance(value, list) or (required and not value):
            self.add(path, f"a non-empty list of {what}, got {value!r}")
            return []
        return value

    def keys(self, entry: Mapping[str, Any], path: str, allowed: Sequence[str], *, extended: bool = False) -> None:
        for key in entry:
            if key in allowed or (extended and isinstance(key, str) and is_extended_resource(key)):
                continue
            listing = ", ".join(allowed) + (" or an extended resource such as nvidia.com/gpu" if extended else "")
            self.add(_join(path, key), f"unknown key; allowed: {listing}")

    def required(self, entry: Mapping[str, Any], path: str, keys: Sequence[str]) -> bool:
        missing = [k for k in keys if k not in entry]
        for key in missing:
            self.add(_join(path, key), "required field missing")
        return not missing

    def name(self, entry: Mapping[str, Any], path: str) -> str | None:
        value = entry.get("name")
        if value is None:
            return None  # reported by required()
        if not isinstance(value, str) or not _NAME.match(value):
            self.add(f"{path}.name", f"{_NAME_ALLOWED}, got {value!r}")
            return None
        return value

    def quantity(self, value: object, path: str) -> float | None:
        try:
            return parse_quantity(value, path)  # type: ignore[arg-type]
        except InvalidInput as exc:
            self.problems.append(str(exc))
            return None

    def positive_whole(self, value: object, path: str) -> int | None:
        if not _is_whole(value) or value <= 0:  # type: ignore[operator]
            self.add(path, f"a positive whole number, {_got(value, whole=True)}")
            return None
        return int(value)  # type: ignore[arg-type]


def _label(entry: object, index: int, names: dict[str, int], kind: str, prefix: str, chk: _Checker) -> str:
    """The entry's path: ``prefix[name]``, or ``prefix[index]`` for unnamed or duplicate entries."""
    name = entry.get("name") if isinstance(entry, Mapping) else None
    if isinstance(name, str) and _NAME.match(name):
        if name in names:
            chk.add(f"{prefix}[{index}].name", f"duplicate {kind} name {name!r} (also {prefix}[{names[name]}])")
            return f"{prefix}[{index}]"
        names[name] = index
        return f"{prefix}[{name}]"
    return f"{prefix}[{index}]"


def _resources(chk: _Checker, entry: Mapping[str, Any], path: str, names: Sequence[str]) -> dict[str, float]:
    amounts: dict[str, float] = {}
    for key in names:
        if key not in entry:
            continue
        amount = chk.quantity(entry[key], f"{path}.{key}")
        if amount is None:
            continue
        if key not in CORE_RESOURCES and amount != int(amount):
            chk.add(f"{path}.{key}", f"extended resources are whole numbers, got {entry[key]!r}")
            continue
        amounts[key] = amount
    return amounts


def _nodes(chk: _Checker, raw: object, max_nodes: int | None = None) -> list[NodeSpec]:
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    entries = list(chk.entries(raw, "nodes", "nodes"))
    # Sized before anything is built: `count: 10000000` must not make ten million nodes to be refused.
    counts = [e.get("count", 1) if isinstance(e, dict) else 1 for e in entries]
    total = sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0)
    too_many = nodes_over_limit(total, max_nodes)
    if too_many:
        chk.add("nodes", f"after expanding count, {too_many}")
        return nodes
    for index, item in enumerate(entries):
        path = _label(item, index, seen, "node", "nodes", chk)
        entry = chk.mapping(item, path)
        if entry is None:
            continue
        chk.keys(entry, path, _NODE_KEYS, extended=True)
        ok = chk.required(entry, path, ("name", "cpu", "memory"))
        name = chk.name(entry, path)
        count = chk.positive_whole(entry.get("count", 1), f"{path}.count")
        harvest = entry.get("harvest", True)
        if not isinstance(harvest, bool):
            chk.add(f"{path}.harvest", f"true or false, got {harvest!r}")
        resource_keys = [k for k in entry if k in CORE_RESOURCES or (isinstance(k, str) and is_extended_resource(k))]
        amounts = _resources(chk, entry, path, resource_keys)
        for key in (CPU, MEMORY):
            if key in amounts and amounts[key] <= 0:
                chk.add(f"{path}.{key}", f"a positive quantity, got {entry[key]!r}")
                ok = False
        if not ok or name is None or count is None or len(amounts) != len(resource_keys):
            continue
        capacity = ResourceVector(amounts)
        names = [name] if count == 1 else [f"{name}-{i}" for i in range(1, count + 1)]
        nodes.extend(NodeSpec(n, capacity, bool(harvest)) for n in names)
    expanded: dict[str, int] = {}
    for node in nodes:
        expanded[node.name] = expanded.get(node.name, 0) + 1
    for node_name, times in expanded.items():
        if times > 1:
            chk.add(f"nodes[{node_name}]", f"node name {node_name!r} occurs {times} times after expanding "
                                           "count (count K names nodes <name>-1..<name>-K)")
    return nodes


def _queues(chk: _Checker, raw: object) -> list[QueueSpec]:
    if raw is None:
        return [DEFAULT_QUEUE]
    queues: list[QueueSpec] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(chk.entries(raw, "queues", "queues")):
        path = _label(item, index, seen, "queue", "queues", chk)
        entry = chk.mapping(item, path)
        if entry is None:
            continue
        chk.keys(entry, path, _QUEUE_KEYS)
        ok = chk.required(entry, path, ("name",))
        name = chk.name(entry, path)
        weight = entry.get("weight", 1)
        if not _is_number(weight) or weight <= 0:
            chk.add(f"{path}.weight", f"a positive number, {_got(weight)}")
            ok = False
        order = entry.get("jobOrder", JobOrder.SRTF.value)
        if order not in {o.value for o in JobOrder}:
            chk.add(f"{path}.jobOrder", f"one of {', '.join(o.value for o in JobOrder)}, got {order!r}")
            ok = False
        opp = entry.get("opportunistic", QueueOpportunistic.ALLOW.value)
        if opp not in {o.value for o in QueueOpportunistic}:
            chk.add(f"{path}.opportunistic",
                    f"one of {', '.join(o.value for o in QueueOpportunistic)}, got {opp!r}")
            ok = False
        if ok and name is not None:
            queues.append(QueueSpec(name, float(weight), JobOrder(order), opp == QueueOpportunistic.ALLOW.value))
    return queues


def _cycle(deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Each dependency cycle once, as the list of groups along it (first in declaration order)."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in deps.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt in deps and nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in deps:
        if node not in state:
            visit(node)
    return cycles


def _groups(chk: _Checker, raw: object, job_path: str, nodes: Sequence[NodeSpec]) -> list[TaskGroup]:
    groups: list[TaskGroup] = []
    seen: dict[str, int] = {}
    declared: dict[str, tuple[str, list[str]]] = {}  # group name → (path, dependsOn)
    prefix = f"{job_path}.groups"
    for index, item in enumerate(chk.entries(raw, prefix, "task groups")):
        path = _label(item, index, seen, "group", prefix, chk)
        entry = chk.mapping(item, path)
        if entry is None:
            continue
        renamed = [k for k in entry if k in _RENAMED_GROUP_KEYS]
        for key in renamed:
            chk.add(_join(path, key), _RENAMED_GROUP_KEYS[key])
        chk.keys({k: v for k, v in entry.items() if k not in renamed}, path, _GROUP_KEYS)
        ok = chk.required(entry, path, ("name", "demand", "duration"))
        if not renamed:  # the old spelling's message says what to write; no "required field missing" on top
            ok = chk.required(entry, path, ("replicas",)) and ok
        name = chk.name(entry, path)
        tasks = chk.positive_whole(entry["replicas"], f"{path}.replicas") if "replicas" in entry else None
        duration = entry.get("duration")
        if "duration" in entry and (not _is_number(duration) or duration <= 0):
            chk.add(f"{path}.duration", f"a positive number of seconds, {_got(duration)}")
            ok = False
        usage = entry.get("usage")
        if usage is not None and (not _is_number(usage) or not 0 < usage <= 1):
            chk.add(f"{path}.usage", f"a fraction in (0, 1], {_got(usage)}")
            ok = False
        expected = entry.get("expectedDuration")
        if expected is not None and (not _is_number(expected) or expected <= 0):
            chk.add(f"{path}.expectedDuration", f"a positive number of seconds, {_got(expected)}")
            ok = False
        gang = entry.get("minAvailable")
        if gang is not None and (isinstance(gang, bool) or not isinstance(gang, int) or not 1 <= gang <= (
                tasks if tasks is not None else gang)):
            most = f"1 to replicas ({tasks})" if tasks is not None else "1 to replicas"
            chk.add(f"{path}.minAvailable", f"a whole number from {most}, {_got(gang)}")
            ok = False
        demand = _demand(chk, entry.get("demand"), f"{path}.demand", nodes) if "demand" in entry else None
        depends = entry.get("dependsOn", [])
        if not isinstance(depends, list) or not all(isinstance(d, str) for d in depends):
            chk.add(f"{path}.dependsOn", f"a list of group names, got {depends!r}")
            depends, ok = [], False
        if name is not None and name not in declared:
            declared[name] = (path, list(depends))
        if ok and name is not None and tasks is not None and demand is not None and path == f"{prefix}[{name}]":
            groups.append(TaskGroup(name, tasks, demand, float(duration), None if usage is None else float(usage),
                                    tuple(depends), None if expected is None else float(expected), gang))
    for group, (path, depends) in declared.items():
        known = ", ".join(g for g in declared if g != group) or "none"
        for dep in depends:
            if dep not in declared:
                chk.add(f"{path}.dependsOn", f"unknown group {dep!r}; known: {known}")
    for cycle in _cycle({g: [d for d in deps if d in declared] for g, (_, deps) in declared.items()}):
        chk.add(f"{declared[cycle[0]][0]}.dependsOn", f"cycle {' -> '.join(cycle)}")
    return groups


def _demand(chk: _Checker, raw: object, path: str, nodes: Sequence[NodeSpec]) -> ResourceVector | None:
    entry = chk.mapping(raw, path)
    if entry is None:
        return None
    bad = [k for k in entry if not (k in CORE_RESOURCES or (isinstance(k, str) and is_extended_resource(k)))]
    for key in bad:
        chk.add(f"{path}.{key}", f"unknown resource; allowed: {_RESOURCES_ALLOWED}")
    amounts = _resources(chk, entry, path, [k for k in entry if k not in bad])
    if bad or len(amounts) != len(entry) - len(bad):
        return None
    demand = ResourceVector(amounts)
    if not demand:
        chk.add(path, f"at least one positive resource ({_RESOURCES_ALLOWED}), got {dict(entry)!r}")
        return None
    if nodes and not any(demand.fits_in(n.capacity) for n in nodes):
        too_big = [r for r in demand if demand[r] > max(n.capacity[r] for n in nodes)]
        if too_big:
            for r in too_big:
                largest = max(n.capacity[r] for n in nodes)
                chk.add(f"{path}.{r}", f"more than any node has (largest: {format_quantity(largest, r)}), "
                                       f"got {entry[r]!r}")
        else:
            chk.add(path, "fits on no single node (each resource fits somewhere, never all together)")
        return None
    return demand


def _jobs(chk: _Checker, raw: object, queues: Sequence[QueueSpec], queues_given: bool,
          nodes: Sequence[NodeSpec]) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    queue_names = [q.name for q in queues]
    for index, item in enumerate(chk.entries(raw, "jobs", "jobs")):
        path = _label(item, index, seen, "job", "jobs", chk)
        entry = chk.mapping(item, path)
        if entry is None:
            continue
        chk.keys(entry, path, _JOB_KEYS)
        ok = chk.required(entry, path, ("name", "groups"))
        name = chk.name(entry, path)
        if queues_given and "queue" not in entry:
            chk.add(f"{path}.queue", f"required field missing; known queues: {', '.join(queue_names) or 'none'}")
            ok = False
        queue = entry.get("queue", DEFAULT_QUEUE.name)
        if "queue" in entry and queue not in queue_names and queue_names:
            chk.add(f"{path}.queue", f"unknown queue {queue!r}; known: {', '.join(queue_names)}")
            ok = False
        arrival = entry.get("arrival", 0)
        if not _is_number(arrival) or arrival < 0:
            chk.add(f"{path}.arrival", f"a number of seconds >= 0, {_got(arrival)}")
            ok = False
        priority = entry.get("priority", 0)
        if not _is_whole(priority):
            chk.add(f"{path}.priority", f"a whole number, {_got(priority, whole=True)}")
            ok = False
        try:
            intent = Opportunistic.parse(entry.get("opportunistic", "auto"), f"{path}.opportunistic")
        except InvalidInput as exc:
            chk.problems.append(str(exc))
            ok = False
        groups = _groups(chk, entry["groups"], path, nodes) if "groups" in entry else []
        declared = entry.get("groups") if isinstance(entry.get("groups"), list) else []
        if ok and name is not None and groups and len(groups) == len(declared):
            jobs.append(JobSpec(name, str(queue), float(arrival), tuple(groups), intent, int(priority)))
    return jobs


def parse_workload(data: object, name: str = "workload", source: str = "workload file", *,
                   max_nodes: int | None = None) -> Workload:
    """Validate a decoded workload document; raise :class:`WorkloadError` with every problem. More nodes than
    ``max_nodes`` (after ``count``) are refused before any node is built."""
    chk = _Checker()
    doc = chk.mapping(data, "(top level)")
    if doc is None:
        raise WorkloadError(chk.problems)
    chk.keys(doc, "", _TOP_KEYS)
    chk.required(doc, "", ("nodes", "jobs"))
    nodes = _nodes(chk, doc["nodes"], max_nodes) if "nodes" in doc else []
    queues = _queues(chk, doc.get("queues"))
    jobs = _jobs(chk, doc["jobs"], queues, doc.get("queues") is not None, nodes) if "jobs" in doc else []
    if chk.problems:
        raise WorkloadError(chk.problems)
    return Workload(
        name=name,
        nodes=tuple(nodes),
        queues=tuple(queues),
        jobs=tuple(jobs),
        model={
            "source": source,
            "nodes": "as listed; count K expands to <name>-1..<name>-K",
            "usage": "per group where given, else the engine usage model",
            "queues": "as listed" if doc.get("queues") is not None else "default (weight 1, SRTF, Allow)",
        },
    )


STOWAGE_API = "stowage.io/v1alpha1"
_MANIFEST_KINDS = ("Job", "Queue")


def _document_name(doc: Mapping[str, Any], index: int) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"documents[{index}] ({doc.get('apiVersion')} {doc.get('kind')} {name})"


def _manifest_group(chk: _Checker, task: object, where: str) -> dict[str, Any] | None:
    """One ``spec.tasks[]`` entry of a Stowage Job as a workload group: its template's requests (as
    kube-scheduler sums them) plus the bandwidth annotations; ``expectedDuration`` as its run time."""
    entry = chk.mapping(task, where)
    if entry is None:
        return None
    name = entry.get("name", "?")
    path = f"{where.rsplit('[', 1)[0]}[{name}]"
    template = entry.get("template") if isinstance(entry.get("template"), Mapping) else {}
    metadata = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    try:
        demand = pod_demand({"metadata": metadata, "spec": template.get("spec") or {}})
        demand = demand + bandwidth_demand(metadata.get("annotations") or {}, f"{path}.template.metadata.annotations")
    except InvalidInput as exc:
        chk.add(f"{path}.template", str(exc))
        return None
    if "expectedDuration" not in entry:
        chk.add(f"{path}.expectedDuration", "required by the simulator: one task's run time in seconds (in the "
                                            "cluster only a hint; here also the truth the replay runs)")
        return None
    group: dict[str, Any] = {"name": name, "replicas": entry.get("replicas", 1), "demand": demand.as_dict(),
                             "duration": entry["expectedDuration"], "expectedDuration": entry["expectedDuration"]}
    for key in ("dependsOn", "minAvailable"):
        if key in entry:
            group[key] = entry[key]
    return group


def manifests_to_document(docs: Sequence[object]) -> dict[str, Any]:
    """Stowage Job and Queue manifests (and at most one workload document, for ``nodes``) as one workload
    document for :func:`parse_workload`; :class:`WorkloadError` naming each document it cannot read.

    A Job becomes a job arriving at 0 in its ``spec.queue`` (default ``default``) with its ``spec.opportunistic``;
    each of its ``spec.tasks`` a group of ``replicas`` tasks whose demand is the template's requests (limits where
    a request is missing, init containers and overhead as kube-scheduler counts them) plus the
    ``stowage.io/*-bandwidth`` annotations, running ``expectedDuration`` seconds (required here). A Queue
    becomes a queue; a queue a Job names that no Queue defines gets the defaults (weight 1, SRTF, Allow).
    Plain pods and their controllers (Deployments, batch/v1 Jobs) are refused: the simulator replays only
    Stowage's own objects.
    """
    chk = _Checker()
    workload: dict[str, Any] = {}
    queues: dict[str, dict[str, Any]] = {}
    jobs: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            chk.add(f"documents[{index}]", f"a mapping, got {doc!r}")
            continue
        if "apiVersion" not in doc and "kind" not in doc:
            if workload:
                chk.add(f"documents[{index}]", "a second workload document (nodes/queues/jobs): give one")
            workload = dict(doc)
            continue
        where = _document_name(doc, index)
        if doc.get("apiVersion") != STOWAGE_API or doc.get("kind") not in _MANIFEST_KINDS:
            chk.add(where, f"the simulator reads Stowage Jobs and Queues ({STOWAGE_API}) and workload documents, "
                           "not plain pods or their controllers (Deployments, batch/v1 Jobs): docs/workloads.md")
            continue
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
        spec = doc.get("spec") if isinstance(doc.get("spec"), Mapping) else {}
        name = meta.get("name")
        if not isinstance(name, str):
            chk.add(f"{where}.metadata.name", "required field missing")
            continue
        if doc["kind"] == "Queue":
            queues[name] = {"name": name, **{k: spec[k] for k in ("weight", "jobOrder", "opportunistic")
                                              if k in spec}}
            continue
        tasks = chk.entries(spec.get("tasks"), f"{where}.spec.tasks", "task groups")
        groups = [_manifest_group(chk, task, f"{where}.spec.tasks[{i}]") for i, task in enumerate(tasks)]
        job: dict[str, Any] = {"name": name, "queue": spec.get("queue", DEFAULT_QUEUE.name),
                               "opportunistic": spec.get("opportunistic", "auto"),
                               "groups": [g for g in groups if g is not None]}
        jobs.append(job)
    if chk.problems:
        raise WorkloadError(chk.problems)
    for job in jobs:
        queues.setdefault(job["queue"], {"name": job["queue"]})
    listed = list(workload.get("queues") or [])
    known = {q.get("name") for q in listed if isinstance(q, Mapping)}
    out = {**workload, "jobs": [*(workload.get("jobs") or []), *jobs]}
    out["queues"] = listed + [q for n, q in queues.items() if n not in known]
    if "nodes" not in out:
        out["nodes"] = []  # the caller's --nodes/--node-shape make them (resolve_workload)
    return out


def load_workload_file(path: str | Path, *, max_nodes: int | None = None,
                       nodes: Sequence[NodeSpec] = ()) -> Workload:
    """Read and validate a YAML (``.yaml``/``.yml``, one document or several) or JSON (``.json``) workload file
    (``max_nodes``: as :func:`parse_workload`). A file of Stowage Job and Queue manifests
    (:func:`manifests_to_document`) runs on ``nodes`` when it gives none of its own."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as stream:  # a stream, so that a YAML error names the file
            if path.suffix.lower() == ".json":
                docs: list[object] = [json.load(stream)]
            else:
                docs = [d for d in yaml.safe_load_all(stream) if d is not None]
    except OSError as exc:
        raise WorkloadError([f"{path}: cannot read ({exc.strerror or exc})"]) from exc
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
        raise WorkloadError([f"{path}: not valid {kind}: {exc}"]) from exc
    manifests = len(docs) != 1 or (isinstance(docs[0], Mapping) and ("apiVersion" in docs[0] or "kind" in docs[0]))
    if not manifests:
        return parse_workload(docs[0], name=path.stem, source=f"workload file {path.name}", max_nodes=max_nodes)
    try:
        document = manifests_to_document(docs)
    except WorkloadError as exc:
        raise WorkloadError([f"{path}: {p}" for p in exc.problems]) from None
    if not document["nodes"]:
        if not nodes:
            raise WorkloadError([f"{path}: Stowage manifests name no nodes: give --nodes N and --node-shape "
                                 "(e.g. --nodes 4 --node-shape cpu=8,memory=32Gi), or add a workload document "
                                 "with `nodes:` to the file (docs/workloads.md)"])
        document["nodes"] = [{"name": n.name, **_quantities(n.capacity), **({} if n.harvest else {"harvest": False})}
                             for n in nodes]
    return parse_workload(document, name=path.stem, source=f"Stowage manifests {path.name}", max_nodes=max_nodes)


def _quantities(vector: Mapping[str, float]) -> dict[str, str]:
    return {r: format_quantity(v, r) for r, v in vector.items()}


def workload_to_dict(workload: Workload) -> dict[str, Any]:
    """The file form of any :class:`Workload` (e.g. to save a synthetic mix and edit it).

    ``parse_workload(workload_to_dict(w))`` gives back ``w``'s nodes, queues and jobs.
    """
    nodes = []
    for node in workload.nodes:
        entry: dict[str, Any] = {"name": node.name, **_quantities(node.capacity)}
        if not node.harvest:
            entry["harvest"] = False
        nodes.append(entry)
    allow, deny = QueueOpportunistic.ALLOW.value, QueueOpportunistic.DENY.value
    queues = [{"name": q.name, "weight": q.weight, "jobOrder": q.job_order.value,
               "opportunistic": allow if q.opportunistic_allowed else deny}
              for q in workload.queues]
    jobs = []
    for job in workload.jobs:
        groups = []
        for g in job.groups:
            group: dict[str, Any] = {"name": g.name, "replicas": g.tasks, "demand": _quantities(g.demand),
                                     "duration": g.duration_s}
            if g.usage is not None:
                group["usage"] = g.usage
            if g.depends_on:
                group["dependsOn"] = list(g.depends_on)
            if g.expected_duration_s is not None:
                group["expectedDuration"] = g.expected_duration_s
            if g.min_available is not None:
                group["minAvailable"] = g.min_available
            groups.append(group)
        entry = {"name": job.name, "queue": job.queue, "arrival": job.arrival_s,
                 "opportunistic": job.opportunistic.value, "groups": groups}
        if job.priority:
            entry["priority"] = job.priority
        jobs.append(entry)
    return {"nodes": nodes, "queues": queues, "jobs": jobs}
