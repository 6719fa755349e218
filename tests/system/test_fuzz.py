"""A seeded fuzz of the whole stack (issue #31): malformed Jobs, Queues, workloads, labelled and unlabelled pods.

A ``random.Random`` (seed ``STOWAGE_FUZZ_SEED``, default 31; printed) mutates valid objects: wrong types,
huge numbers and strings, deep nesting, missing and unexpected fields, bad quantities (``1e9999999``),
NaN-ish strings, unicode; a Queue's ``state`` and ``namespaceSelector``, a workload's pod template. Jobs, pods
and workloads (Deployments of no replicas: the template is what is checked) are created by a tenant (the ``edit``
role) in one namespace, whose ResourceQuota bounds what the admitted ones may take (so a fuzz object cannot fill
the cluster); Queues by the admin. Then:

- every refusal is a 4xx, never a 5xx, and names a field (a segment of a path the mutation touched), except
  the API server's own decoding errors and its built-in admission plugins (the namespace's quota, PriorityClass),
  which are only held to 4xx (:func:`door`);
- every admitted Job has a phase within a bounded wait;
- a well-formed Job submitted last, in another namespace and the ``default`` queue, succeeds, and the
  operator and the extender are still up and ready.

Meanwhile no dispatch pass may fail (``stowage_pass_errors_total``), and the operator and the extender, killed
and started again with every admitted object present, get ready. A summary (admitted / refused per kind, by
door) is printed for the log. Bounded: 620 objects, about a minute after the stack is up.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from stowage.operator import crd

from stowage import labels
from tests.support.fake_kubelet import ANN_RUN_SECONDS
from tests.support.stack import WholeStack, metric, wait_for
from tests.system.workloads import group, phase_of, plain_pod, tenant_api

pytestmark = pytest.mark.timeout(600)

SEED = int(os.environ.get("STOWAGE_FUZZ_SEED", "31"))
COUNTS = {"Job": 240, "Queue": 60, "Pod(labelled)": 140, "Pod(unlabelled)": 120, "Workload": 60}
FUZZ_QUEUE = "fuzz"
#: The operator's failed-pass counter; the extender's count of objects left out of its model (issue #31).
PASS_ERRORS, BAD_OBJECTS = "stowage_pass_errors_total", "stowage_bad_objects_total"
#: How long an admitted Job may go without a phase; how long the good Job may take.
PHASE_S, GOOD_S = 90.0, 180.0

Path = tuple[str | int, ...]

# --- values ------------------------------------------------------------------------------------------

BAD_QUANTITIES = ["1e9999999", "1e-9999999", "1e308", "9" * 400, "-1", "0.0000000001m", "1.5.5", "1Ei1", "2 cores",
                  "NaN", "nan", "Inf", "-Infinity", "+inf", "１２", "1e", "e9", "0x10", " 1", "1\n", "1Qi", ""]
NAN_ISH = ["NaN", "nan", "inf", "-inf", "Infinity", "None", "null", "undefined", "true", "[]", "{}"]
UNICODE = ["ünïcødé", "😀" * 20, "\u202eevil", "名前", "a\u0000b", "\ufeff", "Ω" * 63, "ß" * 64]


def deep(rng: random.Random) -> Any:
    """Nested lists or maps, 20 to 90 levels."""
    value: Any = rng.choice([1, "x", None])
    for _ in range(rng.randint(20, 90)):
        value = [value] if rng.random() < 0.5 else {"a": value}
    return value


def weird(rng: random.Random) -> Any:
    """One malformed value of any kind."""
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice([0, -1, 1, 2**31, 2**53 + 1, 2**63, 10**30, -(10**30), 10**300])
    if kind == 1:
        return rng.choice([1.5, -0.0, 1e-300, 1e300, -1e300, 0.1])
    if kind == 2:
        return rng.choice([True, False, None, [], {}, [1], [None], {"a": 1}, [[[]]]])
    if kind == 3:
        return rng.choice(BAD_QUANTITIES)
    if kind == 4:
        return rng.choice(NAN_ISH)
    if kind == 5:
        return rng.choice(UNICODE)
    if kind == 6:
        return rng.choice(["x" * rng.choice([64, 254, 4000, 70_000]), "[" * rng.choice([1000, 100_000]),
                           '{"cpu": 1' + "0" * rng.choice([30, 400, 5000]) + "}"])
    if kind == 7:
        return deep(rng)
    return rng.choice(["abc", "", " ", "-", "a" * 63 + "-", "UPPER", "a.b", "a/b", "1"])


def weird_string(rng: random.Random) -> str:
    value = weird(rng)
    return value if isinstance(value, str) else json.dumps(value)


#: Values of the right type for a field, but extreme: what a schema lets through and the code must still handle.
QUANTITY_LIKE = ["1e9999999", "1e-9999999", "1e308", "9" * 60, "0.000000001", "1E", "8Ei", "+1", "0", "100000",
                 "1e18", "999999999999999999999Ei"]
DEMANDS = ['{"cpu": 1e9999}', '{"cpu": "1e9999999"}', '{"cpu": 1' + "0" * 400 + "}", "[" * 100_000, '{"cpu": NaN}',
           '{"cpu": Infinity}', '{"": "1"}', '{"cpu": -1}', '{"cpu": null}', '{"cpu": {"a": 1}}', "{}",
           '{"memory": "1e308"}', '{"cpu": "1", "cpu ": "2"}', '{"stowage.io/harvested": "1"}']
PLAUSIBLE: dict[str, list[Any]] = {
    "weight": [1e-300, 1e-6, 1000000, 999999.9999, 2**53 + 1, 1],
    "replicas": [1, 2, 64, 100000],
    "maxRetries": [0, 100],
    "minAvailable": [1, 2, 3, 100000, 0, -1],
    "expectedDuration": [1e300, 1.7976931348623157e308, 0, 1e-300, 2**63, 31536000000],
    "jobOrder": ["FIFO", "SRTF", "FSP", "fifo"],
    "opportunistic": ["true", "auto", "false", "Allow", "Deny", "True"],
    "state": ["Open", "Closed", "Draining", "open", "Paused", ""],
    "operator": ["In", "NotIn", "Exists", "DoesNotExist", "in", "Gt"],
    "key": ["team", "example.com/team", "kubernetes.io/metadata.name", "-team", "a/b/c", "", "t" * 64],
    "values": [[], ["a"], ["a b"], ["fuzz"] * 65, "a", [1]],
    "team": ["a", "", "a b", "x" * 64, "-a"],
    "matchLabels": [{}, {"team": "a"}, {"-": "a"}, {"team": 1}],
    "matchExpressions": [[], [{"key": "team"}], [{"key": "team", "operator": "Exists", "values": ["a"]}]],
    labels.ANN_DEMAND: DEMANDS,
    labels.ANN_EXPECTED_DURATION: ["1e308", "inf", "nan", "-1", "1e9999", "45s", "0", "1" * 400],
    labels.ANN_DATA_NODES: ["a,,b", ",", "x" * 10_000, "名前", " , "],
    labels.ANN_DISK_BANDWIDTH: QUANTITY_LIKE,
    labels.ANN_NETWORK_BANDWIDTH: QUANTITY_LIKE,
    # Label values the API accepts (63 characters, the label syntax), with meanings Stowage must judge.
    labels.LABEL_QUEUE: ["fuzz", "default", "nightly", "fuzz-q3", "", "a" * 63],
    labels.LABEL_OPPORTUNISTIC: ["true", "auto", "false", "maybe", "True", ""],
    labels.LABEL_CLASS: ["regular", "opportunistic", "x", ""],
    labels.LABEL_JOB: ["ghost", "f1", ""],
    labels.LABEL_POD_GROUP: ["g", "mpi-1", "", "a" * 63, "UPPER", "a.b"],
    labels.LABEL_POD_GROUP_COUNT: ["1", "3", "0", "03", "100001", "", "1e3"],
}


def plausible(rng: random.Random, path: Path) -> Any:
    """An extreme value of the field's own type (a quantity string for any resource amount)."""
    key = str(path[-1])
    if key in PLAUSIBLE:
        return rng.choice(PLAUSIBLE[key])
    if any(part in ("requests", "limits", "quota", "overhead") for part in path):
        return rng.choice(QUANTITY_LIKE)
    return weird_string(rng)


# --- paths -------------------------------------------------------------------------------------------


def paths(obj: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path of ``obj`` (maps and lists walked), the root excluded."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield (*prefix, i)
            yield from paths(value, (*prefix, i))


def get(obj: Any, path: Path) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def resolves(obj: Any, path: Path) -> bool:
    for part in path:
        found = (part in obj) if isinstance(obj, dict) else (
            isinstance(obj, list) and isinstance(part, int) and part < len(obj))
        if not found:
            return False
        obj = obj[part]
    return True


def set_path(obj: Any, path: Path, value: Any) -> None:
    """Set ``path`` in ``obj``, making the maps on the way (a missing parent, or one that is not a map, becomes one)."""
    for part in path[:-1]:
        if isinstance(obj, dict):
            if not isinstance(obj.get(part), (dict, list)):
                obj[part] = {}
            obj = obj[part]
        elif isinstance(obj, list) and isinstance(part, int) and part < len(obj):
            obj = obj[part]
        else:
            return
    last = path[-1]
    if isinstance(obj, dict) or (isinstance(obj, list) and isinstance(last, int) and last < len(obj)):
        obj[last] = value


def shown(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def mutate(rng: random.Random, body: dict[str, Any], interesting: list[Path], fixed: set[Path],
           focus: float = 0.5) -> list[Path]:
    """One to three mutations of ``body`` in place; the paths touched. ``interesting`` paths are picked with
    probability ``focus`` (set even where missing); ``fixed`` paths are never touched (the name: each object is
    tracked by it)."""
    touched: list[Path] = []
    # Random paths are drawn from the valid object's own (not from inside a value an earlier mutation added).
    original = [p for p in paths(body) if p not in fixed and not any(p[:len(f)] == f for f in fixed)
                and p[:1] != ("apiVersion",) and p[:1] != ("kind",)]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if interesting and rng.random() < focus:
            path = rng.choice(interesting)
            if "annotations" in path or "labels" in path:  # strings (other types stop at the API's decoding)
                value = plausible(rng, path) if rng.random() < 0.5 else weird_string(rng)
            else:
                pick = rng.randrange(3)
                value = plausible(rng, path) if pick == 0 else weird(rng) if pick == 1 else weird_string(rng)
            set_path(body, path, value)
            touched.append(path)
            continue
        candidates = [p for p in original if resolves(body, p)]
        if not candidates:
            continue
        path = rng.choice(candidates)
        parent = get(body, path[:-1])
        op = rng.randrange(5)
        if op == 0 and isinstance(parent, dict):  # missing field
            del parent[path[-1]]
        elif op == 0 and isinstance(parent, list):
            parent.pop(path[-1])
        elif op == 1:  # an unexpected field next to it
            if isinstance(parent, dict):
                key = rng.choice(["extra", "Replicas", "initContainers", "x-" + str(rng.randrange(99))])
                parent[key] = weird(rng)
                path = (*path[:-1], key)
        elif op == 2:  # wrapped in a list
            parent[path[-1]] = [parent[path[-1]]]
        else:  # a malformed value
            parent[path[-1]] = weird(rng)
        touched.append(path)
    return touched


# --- the objects ---------------------------------------------------------------------------------------

T = ("spec", "tasks", 0)
TEMPLATE = (*T, "template")
CONTAINER = (*TEMPLATE, "spec", "containers", 0)


def annotation_paths(prefix: Path) -> list[Path]:
    keys = [labels.ANN_DISK_BANDWIDTH, labels.ANN_NETWORK_BANDWIDTH, labels.ANN_DEMAND, labels.ANN_EXPECTED_DURATION,
            labels.ANN_DATA_NODES]
    return [(*prefix, "annotations", k) for k in keys]


def label_paths(prefix: Path) -> list[Path]:
    return [(*prefix, "labels", k) for k in (labels.LABEL_QUEUE, labels.LABEL_OPPORTUNISTIC, labels.LABEL_CLASS)]


JOB_INTERESTING: list[Path] = [
    ("spec", "queue"), ("spec", "opportunistic"), ("spec", "suspend"), ("spec", "tasks"), T, (*T, "name"),
    (*T, "replicas"), (*T, "maxRetries"), (*T, "expectedDuration"), (*T, "dependsOn"), (*T, "opportunistic"),
    (*T, "minAvailable"),
    TEMPLATE, (*TEMPLATE, "metadata"), (*TEMPLATE, "spec"), (*TEMPLATE, "spec", "containers"),
    (*TEMPLATE, "spec", "initContainers"), (*TEMPLATE, "spec", "overhead"), CONTAINER, (*CONTAINER, "resources"),
    (*CONTAINER, "resources", "requests"), (*CONTAINER, "resources", "requests", "cpu"),
    (*CONTAINER, "resources", "requests", "memory"), (*CONTAINER, "resources", "limits", "cpu"),
    (*CONTAINER, "resources", "requests", "stowage.io/x"), ("spec", "tasks", 1, "dependsOn"),
    *annotation_paths((*TEMPLATE, "metadata")), *label_paths((*TEMPLATE, "metadata")),
]
POD_CONTAINER = ("spec", "containers", 0)
POD_INTERESTING: list[Path] = [
    *annotation_paths(("metadata",)), *label_paths(("metadata",)), ("metadata", "labels", labels.LABEL_JOB),
    ("metadata", "labels", labels.LABEL_POD_GROUP), ("metadata", "labels", labels.LABEL_POD_GROUP_COUNT),
    ("spec", "schedulerName"), ("spec", "containers"), POD_CONTAINER, (*POD_CONTAINER, "resources"),
    (*POD_CONTAINER, "resources", "requests", "cpu"), (*POD_CONTAINER, "resources", "limits", "cpu"),
    (*POD_CONTAINER, "resources", "limits", "memory"), ("spec", "initContainers"), ("spec", "overhead"),
    ("spec", "priorityClassName"), ("spec", "schedulingGates"),
]
#: Someone else's pod: only what Stowage's pod caches read (its annotations, labels and requests) is spoiled.
UNLABELLED_INTERESTING: list[Path] = [
    *annotation_paths(("metadata",)), *annotation_paths(("metadata",)), *label_paths(("metadata",)),
    (*POD_CONTAINER, "resources", "requests", "cpu"), (*POD_CONTAINER, "resources", "limits", "memory"),
]
SELECTOR: Path = ("spec", "namespaceSelector")
EXPRESSION: Path = (*SELECTOR, "matchExpressions", 0)
QUEUE_INTERESTING: list[Path] = [
    ("spec",), ("spec", "weight"), ("spec", "quota"), ("spec", "quota", "cpu"), ("spec", "quota", "memory"),
    ("spec", "quota", "stowage.io/disk-bandwidth"), ("spec", "quota", "nvidia.com/gpu"), ("spec", "jobOrder"),
    ("spec", "opportunistic"), ("metadata", "labels", "x"), ("spec", "state"), SELECTOR,
    (*SELECTOR, "matchLabels"), (*SELECTOR, "matchLabels", "team"), (*SELECTOR, "matchExpressions"), EXPRESSION,
    (*EXPRESSION, "key"), (*EXPRESSION, "operator"), (*EXPRESSION, "values"), (*EXPRESSION, "values", 0),
]
WORKLOAD_TEMPLATE: Path = ("spec", "template")
#: A Deployment's pod template: what the workload webhook reads as a pod (its labels, scheduler, annotations).
WORKLOAD_INTERESTING: list[Path] = [
    *label_paths((*WORKLOAD_TEMPLATE, "metadata")), *annotation_paths((*WORKLOAD_TEMPLATE, "metadata")),
    (*WORKLOAD_TEMPLATE, "spec", "schedulerName"), (*WORKLOAD_TEMPLATE, "spec", "nodeName"),
    (*WORKLOAD_TEMPLATE, "spec", "containers", 0, "resources", "requests", "cpu"),
    (*WORKLOAD_TEMPLATE, "spec", "containers", 0, "resources", "limits", "memory"),
]
NAME: Path = ("metadata", "name")


@dataclass
class Tally:
    """What happened to each kind of object, and what was wrong."""

    created: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    samples: dict[str, str] = field(default_factory=dict)  # a refusal message per (kind, status, door)

    def summary(self) -> str:
        lines = [f"fuzz seed {SEED}"]
        for kind in COUNTS:
            lines.append(f"  {kind:16} admitted {self.created[kind]:3}  refused {self.refused[kind]:3}")
        lines.append(f"  refusals by status and door: {dict(sorted(self.statuses.items()))}")
        lines += [f"  e.g. {k}: {v[:300]}" for k, v in sorted(self.samples.items())]
        return "\n".join(lines)


def segments(touched: list[Path]) -> set[str]:
    """The names a refusal may use for what was touched: the last two keys of each path (not list indexes), and
    ``spec`` or ``metadata`` only where the path is that object itself (any message names ``spec.``)."""
    out: set[str] = set()
    for path in touched:
        keys = [str(p) for p in path if not isinstance(p, int)]
        out.update(k for k in keys[-2:] if k not in ("spec", "metadata") or len(keys) == 1)
    return out


#: Doors that are the API server's own, not Stowage's to word, held to 4xx but not to naming a field: its JSON
#: decoding into Go types, before any schema or webhook (some messages name no field, e.g. ``quantities must match
#: the regular expression``), and its built-in admission plugins answering 403 (``exceeded quota``, ``no
#: PriorityClass with name …``, or 409 when two creations raced to update the namespace's ResourceQuota).
DECODING, BUILT_IN = "api-server decoding", "api-server admission plugin"


def door(status: int, message: str) -> str:
    """Who refused: a webhook (by name), the API server's decoding, its built-in admission, or its validation (the
    schema and CEL rules of a CRD, the validation of a core type)."""
    found = re.search(r'admission webhook "([^"]+)"', message)
    if found:
        return found.group(1)
    if "cannot be handled as" in message:
        return DECODING
    if status == 403 and "is forbidden" in message:
        return BUILT_IN
    if status == 409 and "resourcequotas" in message:
        return BUILT_IN  # the quota plugin lost a race to update the namespace's usage (the operator creates pods too)
    return "api-server validation"


def attempt(tally: Tally, kind: str, name: str, touched: list[Path], create: Callable[[], Any]) -> bool:
    """Create one object; True when admitted. A refusal must be a 4xx naming something it touched."""
    try:
        create()
    except client.ApiException as exc:
        tally.refused[kind] += 1
        try:
            message = str(json.loads(exc.body).get("message"))
        except (TypeError, ValueError):
            message = str(exc.body)
        where = door(exc.status, message)
        tally.statuses[f"{exc.status} {where}"] += 1
        tally.samples.setdefault(f"{kind} {exc.status} {where}", message)
        what = f"{kind} {name} ({', '.join(shown(p) for p in touched)})"
        if not 400 <= exc.status < 500:
            tally.problems.append(f"{what}: refused with {exc.status}, not a 4xx: {message[:500]}")
        elif where not in (DECODING, BUILT_IN) and not any(s in message for s in segments(touched)):
            tally.problems.append(f"{what}: the refusal names none of {sorted(segments(touched))}: {message[:500]}")
        return False
    tally.created[kind] += 1
    return True


def fuzz_namespace_quota() -> dict[str, Any]:
    """What the admitted fuzz objects may take together: a third of the three nodes' cpu and memory, 150 pods."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "fuzz-bound"},
            "spec": {"hard": {"pods": "150", "requests.cpu": "7", "requests.memory": "14Gi"}}}


def job_base(stack: WholeStack, rng: random.Random, name: str) -> dict[str, Any]:
    body = stack.job_body(name, [group("a", rng.randint(1, 3), run_s=2, cpu="500m", memory="256Mi"),
                                 group("b", 1, run_s=1, cpu="250m", memory="128Mi", dependsOn=["a"])],
                          queue=FUZZ_QUEUE, opportunistic=rng.choice(["false", "auto", "true"]))
    if body["spec"]["opportunistic"] != "false":  # an opportunistic pod must state its demand: its limits
        for task in body["spec"]["tasks"]:
            resources = task["template"]["spec"]["containers"][0]["resources"]
            resources["limits"] = dict(resources["requests"])
    return body


def labelled_pod_base(stack: WholeStack, rng: random.Random, name: str) -> dict[str, Any]:
    pod = plain_pod(stack, name, queue=FUZZ_QUEUE, run_s=2, cpu="250m", memory="128Mi")
    if rng.random() < 0.3:
        pod["metadata"]["labels"][labels.LABEL_OPPORTUNISTIC] = "true"
        pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "250m", "memory": "128Mi"}
    return pod


def unlabelled_pod_base(stack: WholeStack, rng: random.Random, name: str) -> dict[str, Any]:
    """Someone else's pod, bound by its creator and running: only the pod caches of Stowage see it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {ANN_RUN_SECONDS: "600"}},
            "spec": {"nodeName": rng.choice(stack.nodes), "terminationGracePeriodSeconds": 0,
                     "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def queue_base(name: str) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": crd.QUEUE.kind, "metadata": {"name": name},
            "spec": {"weight": 1, "quota": {"cpu": "1", "memory": "1Gi"}, "jobOrder": "FIFO", "opportunistic": "Allow",
                     "state": "Open", "namespaceSelector": {
                         "matchLabels": {"team": "a"},
                         "matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "test"]}]}}}


def workload_base(stack: WholeStack, name: str) -> dict[str, Any]:
    """A Deployment of no replicas whose template names the fuzz queue: the webhook judges it, no pod is made."""
    pod = plain_pod(stack, name, queue=FUZZ_QUEUE, run_s=2, cpu="250m", memory="128Mi")
    template = {"metadata": {"labels": {**pod["metadata"]["labels"], "app": name},
                             "annotations": dict(pod["metadata"].get("annotations") or {})},
                "spec": {**pod["spec"], "restartPolicy": "Always"}}  # a Deployment's pods restart
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}}, "template": template}}


# --- the test --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def cleaned(stack: WholeStack, queues: list[str]) -> Iterator[None]:
    try:
        yield
    finally:
        for name in queues:
            with contextlib.suppress(client.ApiException):
                stack.objects.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name)


def operator_ready(stack: WholeStack) -> bool:
    assert stack.operator is not None
    return httpx.get(f"http://127.0.0.1:{stack.operator.port}/readyz", timeout=5.0).status_code == 200


def test_fuzz_the_whole_stack(healthy: WholeStack) -> None:
    stack = healthy
    rng = random.Random(SEED)
    tally = Tally()
    started = time.monotonic()
    stack.create_queue(FUZZ_QUEUE, weight=1, quota={"cpu": "6", "memory": "12Gi"})
    queues = [FUZZ_QUEUE]
    pass_errors = metric(stack.operator_metrics(), PASS_ERRORS)
    with cleaned(stack, queues), stack.namespace("fuzz") as ns, stack.namespace("fuzz-good") as good_ns:
        stack.core.create_namespaced_resource_quota(ns, fuzz_namespace_quota())
        wait_for(lambda: stack.core.read_namespaced_resource_quota("fuzz-bound", ns).status.hard, 30,
                 "the fuzz namespace's quota enforced")
        tenant = tenant_api(stack, ns)
        # Pods through the dynamic client: the typed one validates a body on the client side, before the API sees it.
        tenant_objects, tenant_pods = client.CustomObjectsApi(tenant), DynamicClient(tenant).resources.get(
            api_version="v1", kind="Pod")
        tenant_deployments = DynamicClient(tenant).resources.get(api_version="apps/v1", kind="Deployment")
        order = [kind for kind, n in COUNTS.items() for _ in range(n)]
        rng.shuffle(order)
        jobs: list[str] = []
        for i, kind in enumerate(order):
            name = f"f{i}"
            if kind == "Job":
                body = job_base(stack, rng, name)
                touched = mutate(rng, body, JOB_INTERESTING, {NAME})
                if attempt(tally, kind, name, touched, lambda body=body: tenant_objects.create_namespaced_custom_object(
                        crd.GROUP, crd.VERSION, ns, crd.JOB.plural, body)):
                    jobs.append(name)
            elif kind == "Queue":
                body = queue_base(f"fuzz-q{i}")
                touched = mutate(rng, body, QUEUE_INTERESTING, {NAME})
                queues.append(f"fuzz-q{i}")
                attempt(tally, kind, name, touched, lambda body=body: stack.objects.create_cluster_custom_object(
                    crd.GROUP, crd.VERSION, crd.QUEUE.plural, body))
            elif kind == "Workload":
                body = workload_base(stack, name)
                # The selector names the Deployment's pods: kept, or the API server refuses it for that alone.
                touched = mutate(rng, body, WORKLOAD_INTERESTING, {NAME, ("spec", "selector"),
                                                                   (*WORKLOAD_TEMPLATE, "metadata", "labels", "app")},
                                 focus=0.8)
                attempt(tally, kind, name, touched,
                        lambda body=body: tenant_deployments.create(body=body, namespace=ns))
            elif kind == "Pod(labelled)":
                body = labelled_pod_base(stack, rng, name)
                touched = mutate(rng, body, POD_INTERESTING, {NAME}, focus=0.75)
                attempt(tally, kind, name, touched, lambda body=body: tenant_pods.create(body=body, namespace=ns))
            else:
                body = unlabelled_pod_base(stack, rng, name)
                touched = mutate(rng, body, UNLABELLED_INTERESTING, {NAME}, focus=0.9)
                attempt(tally, kind, name, touched, lambda body=body: tenant_pods.create(body=body, namespace=ns))
        created_s = time.monotonic() - started

        # Every admitted Job gets a phase (bounded).
        def phaseless() -> list[str]:
            listed = stack.jobs(ns)
            return [n for n in jobs if n in listed and not phase_of(listed[n])]

        with contextlib.suppress(AssertionError):
            wait_for(lambda: not phaseless(), PHASE_S, "every admitted Job to have a phase", interval_s=1.0)
        missing = phaseless()
        if missing:
            tally.problems.append(f"{len(missing)} of {len(jobs)} admitted Jobs have no phase after {PHASE_S:.0f}s: "
                                  f"{missing}")
        # A bad object costs only itself: no dispatch pass failed meanwhile.
        failed_passes = metric(stack.operator_metrics(), PASS_ERRORS) - pass_errors
        if failed_passes:
            tally.problems.append(f"{failed_passes:.0f} dispatch passes failed during the fuzz ({PASS_ERRORS})")

        # The operator and the extender started again with every admitted object present: both get ready.
        stack.kill("operator")
        stack.kill("extender")
        for start in (stack.start_extender, stack.start_operator,
                      lambda: wait_for(lambda: operator_ready(stack), 90, "the operator's /readyz after its restart")):
            try:
                start()
            except AssertionError as exc:
                tally.problems.append(f"after a restart with the fuzz objects present: {exc}")
        phases = Counter(str(phase_of(j)) for n, j in stack.jobs(ns).items() if n in jobs)

        # A well-formed Job submitted last succeeds.
        good_tenant = client.CustomObjectsApi(tenant_api(stack, good_ns))
        try:
            good_tenant.create_namespaced_custom_object(crd.GROUP, crd.VERSION, good_ns, crd.JOB.plural,
                                                        stack.job_body("good", [group("a", 2, run_s=2),
                                                                                group("b", 1, run_s=1,
                                                                                      dependsOn=["a"])]))
            wait_for(lambda: phase_of(stack.job(good_ns, "good")) == "Succeeded", GOOD_S,
                     "the well-formed Job submitted after the fuzz to succeed", interval_s=1.0)
        except AssertionError as exc:
            tally.problems.append(f"{exc}: status {stack.job(good_ns, 'good').get('status')}")
        except client.ApiException as exc:
            tally.problems.append(f"the well-formed Job submitted after the fuzz was refused: {exc.status} {exc.body}")
        for proc in (stack.operator, stack.extender):
            if proc is None or not proc.running:
                tally.problems.append(f"{proc.name if proc else 'a component'} is not running")
        ready = httpx.get(f"{stack.extender_url}/readyz", timeout=10.0)
        if ready.status_code != 200:
            tally.problems.append(f"the extender's /readyz answers {ready.status_code}: {ready.text[:300]}")
        print(tally.summary())
        print(f"  admitted Jobs by phase: {dict(phases)}; created in {created_s:.0f}s, "
              f"whole fuzz {time.monotonic() - started:.0f}s")
        with contextlib.suppress(Exception):
            print(f"  left out of the extender's model: {metric(stack.extender_metrics(), BAD_OBJECTS)} objects")
    logs = stack.operator.tail(1500) if tally.problems and stack.operator else ""
    assert tally.problems == [], "\n".join(tally.problems) + f"\n{tally.summary()}\n--- operator log:\n{logs}"
