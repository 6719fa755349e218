"""Helpers for running ``stowage node-monitor`` as a process against the real control plane.

The monitor is a black box here: it is started as ``.venv/bin/stowage node-monitor`` with a
kubeconfig, the fake kubelet's cgroup tree of its node and ``--port 0``; the tests read its
``/metrics``, its log file and the API server, never its Python objects.

Waits are bounded conditions (a deadline for a loaded 2-core machine, never a speed assertion).
Every wait also checks that the monitor process is still alive, so a crash fails at once with its log.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import NODE_MONITOR_PORT_LOGGED, stop_process, wait_for_logged_port

GiB = 1 << 30
WAIT_S = 60.0
"""Upper bound of every wait: how long a broken test may hang, not how fast the product must be."""

STOWAGE = Path(sys.executable).with_name("stowage")

# Contract strings (README "Marking pods", DESIGN.md): written out, not imported, so a renamed
# constant in the product shows up here as a failure.
LABEL_CLASS = "stowage.io/class"
LABEL_OPPORTUNISTIC = "stowage.io/opportunistic"
ANN_DEMAND = "stowage.io/demand"
HARVESTED = "stowage.io/harvested"
PRIORITY_CLASS = "stowage-opportunistic"
EVENT_EVICTED = "StowageEvicted"

# The node monitor's RBAC as docs/node-monitor.md ("Deployment") documents it.
MONITOR_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGTERM the monitor if the pytest process dies, so no monitor outlives a killed run."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S,
             interval_s: float = 0.2, alive: Callable[[], None] | None = None) -> None:
    """Poll ``predicate`` until true; ``AssertionError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if alive is not None:
            alive()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {what}")
        time.sleep(interval_s)


# --- Kubernetes objects -------------------------------------------------------------------------------


def regular_pod(name: str, node: str, memory: str = "3Gi", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A plain pod bound to ``node`` (no scheduler needed): regular class, real requests."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"role": "regular", **(labels or {})}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "500m", "memory": memory},
                                          "limits": {"memory": memory}}}],
        },
    }


def opportunistic_pod(name: str, node: str, labels: Mapping[str, str] | None = None,
                      demand: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An opportunistic pod as the admission webhook leaves it (DESIGN.md "Pod classes").

    Requests cpu/memory ``"0"`` plus ``stowage.io/harvested: 1``, a memory limit, the demand annotation,
    ``priorityClassName: stowage-opportunistic`` and the system label ``stowage.io/class: opportunistic``.
    ``labels`` may add to or override the labels (e.g. the contradictory opt-out).
    """
    demand = dict(demand or {"cpu": "500m", "memory": "1Gi"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {LABEL_OPPORTUNISTIC: "true", LABEL_CLASS: "opportunistic", "role": "opportunistic",
                       **(labels or {})},
            "annotations": {ANN_DEMAND: json.dumps(demand)},
        },
        "spec": {
            "nodeName": node,
            "priorityClassName": PRIORITY_CLASS,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "0", "memory": "0", HARVESTED: "1"},
                                          "limits": {"memory": "2Gi", HARVESTED: "1"}}}],
        },
    }


def ensure_priority_class(api: client.ApiClient) -> None:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY_CLASS},
            "value": -10, "preemptionPolicy": "Never", "globalDefault": False,
            "description": "Stowage opportunistic pods (tests)"}
    try:
        client.SchedulingV1Api(api).create_priority_class(body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def monitor_kubeconfig(plane: Any, api: client.ApiClient, suffix: str) -> Path:
    """A kubeconfig holding a ServiceAccount token bound to exactly the documented ClusterRole."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    ns, name = "stowage-system", f"stowage-node-monitor-{suffix}"
    plane.create_namespace(ns)
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": MONITOR_RULES})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    })
    token = core.create_namespaced_service_account_token(
        name, ns, {"spec": {"expirationSeconds": 24 * 3600}}).status.token
    return plane.kubeconfig_for_token(token, name=name)


def start_time(pod: client.V1Pod) -> datetime.datetime | None:
    return pod.status.start_time if pod.status is not None else None


class Cluster:
    """One test's namespace on the real API server, with pod helpers."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.ns = namespace
        self.core = client.CoreV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.uids: dict[str, str] = {}

    def create(self, body: Mapping[str, Any], running: bool = True) -> client.V1Pod:
        pod = self.core.create_namespaced_pod(self.ns, body)
        self.uids[pod.metadata.name] = pod.metadata.uid
        if running:
            return self.wait_running(pod.metadata.name)
        return pod

    def create_in_start_order(self, bodies: Sequence[Mapping[str, Any]]) -> list[client.V1Pod]:
        """Create pods one after the other so each ``status.startTime`` is a later second than the last.

        The fake kubelet writes ``startTime`` with second precision: the next pod is created only once
        the wall clock has passed the previous start time plus one second.
        """
        pods = []
        for body in bodies:
            if pods:
                previous = start_time(pods[-1])
                assert previous is not None
                wait_for(lambda prev=previous: datetime.datetime.now(datetime.UTC) >= prev + datetime.timedelta(
                    seconds=1.05), "the next wall-clock second", interval_s=0.05)
            pods.append(self.create(body))
        times = [start_time(p) for p in pods]
        assert all(a < b for a, b in itertools.pairwise(times)), f"start times not increasing: {times}"
        return pods

    def read(self, name: str) -> client.V1Pod | None:
        """The pod if it still exists as the pod this test created (same uid), else ``None``."""
        try:
            pod = self.core.read_namespaced_pod(name, self.ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return pod if pod.metadata.uid == self.uids.get(name, pod.metadata.uid) else None

    def wait_running(self, name: str) -> client.V1Pod:
        holder: dict[str, client.V1Pod] = {}

        def running() -> bool:
            pod = self.read(name)
            if pod is not None and pod.status.phase == "Running" and pod.status.start_time is not None:
                holder["pod"] = pod
                return True
            return False

        wait_for(running, f"pod {self.ns}/{name} Running with a startTime")
        return holder["pod"]

    def untouched(self, name: str) -> bool:
        """Exists, not terminating, no DisruptionTarget condition."""
        pod = self.read(name)
        if pod is None or pod.metadata.deletion_timestamp is not None:
            return False
        return not any(c.type == "DisruptionTarget" for c in pod.status.conditions or [])

    def gone(self, name: str) -> bool:
        """Deleted, or on its way out (``deletionTimestamp``)."""
        pod = self.read(name)
        return pod is None or pod.metadata.deletion_timestamp is not None

    def evicted_events(self) -> set[str]:
        """Names of pods with a ``StowageEvicted`` Event in this namespace."""
        events = self.core.list_namespaced_event(self.ns).items
        return {e.involved_object.name for e in events if e.reason == EVENT_EVICTED}

    def create_pdb(self, name: str, selector: Mapping[str, str], expected_pods: int) -> None:
        """A budget allowing no disruption of the ``expected_pods`` it selects; returns once the disruption
        controller has processed it (``disruptionsAllowed: 0`` at the current generation).

        ``minAvailable: <all of them>``, not ``maxUnavailable: 0``: for bare pods (no controller to read a
        scale from) the disruption controller counts ``expectedPods: 0`` under ``maxUnavailable``.
        """
        self.policy.create_namespaced_pod_disruption_budget(self.ns, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": expected_pods, "selector": {"matchLabels": dict(selector)}},
        })

        last: dict[str, Any] = {}

        def processed() -> bool:
            pdb = self.policy.read_namespaced_pod_disruption_budget(name, self.ns)
            st = last["status"] = pdb.status
            return (st is not None and st.observed_generation == pdb.metadata.generation
                    and st.expected_pods == expected_pods and st.current_healthy == expected_pods
                    and st.disruptions_allowed == 0)

        try:
            wait_for(processed, f"PDB {name} processed by the disruption controller (disruptionsAllowed 0, "
                                f"expectedPods {expected_pods})")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {last.get('status')}") from None

    def delete_pdb(self, name: str) -> None:
        self.policy.delete_namespaced_pod_disruption_budget(name, self.ns)
        wait_for(lambda: not any(p.metadata.name == name for p in
                                 self.policy.list_namespaced_pod_disruption_budget(self.ns).items),
                 f"PDB {name} deleted")


# --- the node monitor process --------------------------------------------------------------------------


class Metrics:
    """One scrape of the monitor's ``/metrics``: samples by (name, labels)."""

    def __init__(self, text: str) -> None:
        self.samples: list[tuple[str, dict[str, str], float]] = [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples
        ]

    def values(self, name: str, **labels: str) -> list[float]:
        return [v for n, lab, v in self.samples if n == name and all(lab.get(k) == x for k, x in labels.items())]

    def total(self, name: str, **labels: str) -> float:
        return sum(self.values(name, **labels))

    def pods(self, node: str) -> dict[str, str]:
        """``pod name → class`` of the ``stowage_pod_usage`` series (memory) of ``node``."""
        return {lab["pod"]: lab["class"] for n, lab, _ in self.samples
                if n == "stowage_pod_usage" and lab.get("node") == node and lab.get("resource") == "memory"}


class NodeMonitor:
    """``stowage node-monitor`` for one fake node, as a child process logging to ``log``."""

    def __init__(self, node: str, kubeconfig: Path, cgroup_root: Path, proc_root: Path, log: Path,
                 extra_args: Iterable[str] = ()) -> None:
        self.node = node
        self.log = log
        self.argv = [str(STOWAGE), "node-monitor", "--node-name", node, "--kubeconfig", str(kubeconfig),
                     "--cgroup-root", str(cgroup_root), "--proc-root", str(proc_root),
                     "--port", "0", "--address", "127.0.0.1", "--interval", "1s", *extra_args]
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self) -> NodeMonitor:
        env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME",)}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, preexec_fn=_die_with_parent, close_fds=True)
        self.port = wait_for_logged_port(self.proc, self.log, NODE_MONITOR_PORT_LOGGED, timeout_s=WAIT_S)
        return self

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        return stop_process(self.proc) if self.proc.poll() is None else self.proc.returncode

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> None:
        """Raise (with the log) if the monitor exited: the product must never crash here."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"node monitor exited with {self.proc.returncode}:\n{self.log_text()[-6000:]}")

    def metrics(self) -> Metrics:
        self.alive()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            return Metrics(response.read().decode())

    def samples(self) -> int:
        """Samples taken so far (``stowage_node_sample_seconds_count``)."""
        return int(self.metrics().total("stowage_node_sample_seconds_count", node=self.node))

    def evictions(self) -> float:
        return self.metrics().total("stowage_evictions_total", node=self.node)

    def wait(self, predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        try:
            wait_for(predicate, what, timeout_s, alive=self.alive)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- node monitor log (tail) ---\n{self.log_text()[-6000:]}") from None

    def wait_samples(self, count: int, check: Callable[[], None] | None = None) -> None:
        """Let ``count`` more samples happen; run ``check`` (assertions) after each poll meanwhile."""
        target = self.samples() + count

        def done() -> bool:
            if check is not None:
                check()
            return self.samples() >= target

        self.wait(done, f"{count} more samples", timeout_s=WAIT_S + 5 * count)

    def wait_ready(self, pods: Mapping[str, str], memory_capacity: float) -> None:
        """Until /metrics shows the Node's allocatable memory and every pod (``name → class``) with its class."""

        def ready() -> bool:
            m = self.metrics()
            capacity = m.values("stowage_node_capacity", node=self.node, resource="memory")
            return capacity == [memory_capacity] and all(m.pods(self.node).get(n) == c for n, c in pods.items())

        self.wait(ready, f"monitor sees memory capacity {memory_capacity:g} and pods {dict(pods)}")

    def memory_usage(self) -> float:
        values = self.metrics().values("stowage_node_usage", node=self.node, resource="memory")
        return values[0] if values else float("nan")
