"""The whole scheduling path as real processes: kube-scheduler → fault proxy → ``stowage extender`` → Prometheus.

One :class:`Stack` on a :class:`tests.support.controlplane.ControlPlane`:

- a :class:`tests.support.fake_kubelet.FakeKubelet` with ``nodes`` fake nodes (cpu 8 / memory 16Gi capacity,
  allocatable cpu 7.5 / memory 15Gi), labelled ``stowage-test/stack=<id>``; every pod made here selects
  that label, so nodes another test registers never take them;
- one real ``stowage node-monitor`` per node, reading the fake kubelet's cgroup tree for it;
- a real Prometheus scraping the monitors (restartable on the same port: :meth:`Stack.stop_prometheus`);
- the real ``stowage extender`` (killable by PID: :meth:`Stack.kill_extender`, :meth:`Stack.start_extender`);
- a :class:`FaultProxy` in front of it, where kube-scheduler sends every extender call;
- a kube-scheduler started from ``manifests/scheduler-config.yaml`` itself: only ``urlPrefix`` (both
  entries), the kubeconfig and leader election are patched (:meth:`ControlPlane.scheduler_config`);
  :meth:`Stack.use_scheduler` switches between ``nodeCacheCapable: true`` (the manifest as written) and
  ``false`` (both entries patched), stopping one scheduler and starting the other.

Every process runs on 127.0.0.1, logs under ``<workdir>/logs`` and is stopped by PID. Waits are bounded
and wait for conditions; their deadlines are generous (a loaded 2-core machine), never timing assertions.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client

from stowage.labels import (
    ANN_DEMAND,
    HARVEST_RESOURCE,
    LABEL_CLASS,
    LABEL_QUEUE,
    OPPORTUNISTIC_PRIORITY_CLASS,
    SCHEDULER_NAME,
)
from tests.scheduler.fault_proxy import FaultProxy, Mode
from tests.support.controlplane import ControlPlane, SchedulerHandle
from tests.support.fake_kubelet import FakeKubelet, NodeSpec
from tests.support.processes import EXTENDER_PORT_LOGGED, NODE_MONITOR_PORT_LOGGED
from tests.support.stack import (
    ALLOCATABLE,
    CAPACITY,
    SCHEDULER_MANIFEST,
    STOWAGE,
    Proc,
    PrometheusProcess,
    StartStop,
    extender_argv,
    metric,
    node_monitor_argv,
    stop_in_order,
    wait_for,
)

__all__ = [
    "ALLOCATABLE",
    "CAPACITY",
    "MANIFEST",
    "STOWAGE",
    "Proc",
    "PrometheusProcess",
    "Stack",
    "extender_metric",
    "manifest",
    "opportunistic_pod",
    "regular_pod",
    "wait_for",
]


MANIFEST = SCHEDULER_MANIFEST
STACK_LABEL = "stowage-test/stack"
HIGH_PRIORITY_CLASS = "stowage-test-high"
LOW_PRIORITY_CLASS = "stowage-test-low"

#: The filter's fixed phrases (extender/messages.py REASONS), as the FailedScheduling event shows them.
HARVEST_CAPACITY = "stowage: not enough harvestable capacity"
NO_UTILIZATION = "stowage: no fresh utilization for node"
CONTENTION = "stowage: node in sustained contention"


# --- small helpers ---------------------------------------------------------------------------------


def manifest(node_cache_capable: bool = True, managed_resources: bool = True) -> dict[str, Any]:
    """``manifests/scheduler-config.yaml`` as a dict; optionally with both extenders' ``nodeCacheCapable``
    set to false, or with ``managedResources`` removed (every pod reaches the extender, the old design)."""
    base = yaml.safe_load(MANIFEST.read_text())
    out = copy.deepcopy(base)
    for extender in out.get("extenders") or []:
        if not node_cache_capable:
            extender["nodeCacheCapable"] = False
        if not managed_resources:
            extender.pop("managedResources", None)
    return out


#: The sum of a metric's samples in a /metrics text (:func:`tests.support.stack.metric`).
extender_metric = metric


# --- pods --------------------------------------------------------------------------------------------


def regular_pod(name: str, cpu: str = "100m", memory: str = "128Mi", *, stack_id: str, node: str | None = None,
                priority_class: str | None = None, queue: str | None = None,
                scheduler_name: str = SCHEDULER_NAME) -> dict[str, Any]:
    """A regular Stowage pod: plain requests, ``schedulerName: stowage-scheduler``."""
    selector = {STACK_LABEL: stack_id, **({"kubernetes.io/hostname": node} if node else {})}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "nodeSelector": selector,
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    labels = {LABEL_QUEUE: queue} if queue else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def opportunistic_pod(name: str, cpu: str = "1", memory: str = "2Gi", *, stack_id: str,
                      node: str | None = None) -> dict[str, Any]:
    """An opportunistic pod as the webhook leaves it: zero requests, the demand annotation, the routing resource."""
    selector = {STACK_LABEL: stack_id, **({"kubernetes.io/hostname": node} if node else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL_CLASS: "opportunistic"},
                     "annotations": {ANN_DEMAND: json.dumps({"cpu": cpu, "memory": memory})}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "priorityClassName": OPPORTUNISTIC_PRIORITY_CLASS,
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "0", "memory": "0", HARVEST_RESOURCE: "1"},
                "limits": {"memory": memory, HARVEST_RESOURCE: "1"}}}],
        },
    }


# --- the stack -----------------------------------------------------------------------------------------


@dataclass
class Stack(StartStop):
    """See the module docstring. ``start()`` brings every part up; ``stop()`` takes it down by PID."""

    plane: ControlPlane
    workdir: Path
    node_count: int = 3
    scrape_interval_s: float = 2.0
    monitor_dry_run: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    kubelet: FakeKubelet | None = None
    nodes: list[str] = field(default_factory=list)
    monitors: dict[str, Proc] = field(default_factory=dict)
    prometheus: PrometheusProcess | None = None
    extender: Proc | None = None
    proxy: FaultProxy | None = None
    schedulers: dict[bool, SchedulerHandle] = field(default_factory=dict)
    node_cache_capable: bool | None = None
    api: client.ApiClient | None = None
    _nudges: int = 0

    @property
    def nudge_namespace(self) -> str:
        return f"stack-nudge-{self.id}"

    # --- lifecycle -------------------------------------------------------------------------------

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.api = self.plane.api()
        self._priority_classes()
        self.plane.create_namespace(self.nudge_namespace)
        self.kubelet = FakeKubelet(self.plane.api(), self.workdir / "cgroup").start()
        specs = [NodeSpec(f"stack-{self.id}-{i}", capacity=dict(CAPACITY), allocatable=dict(ALLOCATABLE),
                          labels={STACK_LABEL: self.id}) for i in range(self.node_count)]
        self.nodes = self.kubelet.add_nodes(specs)
        for node in self.nodes:
            self.start_monitor(node, dry_run=self.monitor_dry_run)
        self.prometheus = PrometheusProcess(self.workdir, [f"127.0.0.1:{m.port}" for m in self.monitors.values()],
                                            self.scrape_interval_s)
        self.prometheus.start()
        self.proxy = FaultProxy().start()
        self.start_extender()
        self.wait_for_fresh_utilization()
        self.use_scheduler(node_cache_capable=True)

    def stop(self) -> None:
        """Everything, in reverse order, each by PID; safe on a partly started stack."""
        stop_in_order(*self.schedulers.values(), self.proxy, self.extender, self.prometheus, *self.monitors.values(),
                      self.kubelet)

    def _priority_classes(self) -> None:
        scheduling = client.SchedulingV1Api(self.api)
        for name, value, policy in ((OPPORTUNISTIC_PRIORITY_CLASS, -10, "Never"),
                                    (HIGH_PRIORITY_CLASS, 1000, "PreemptLowerPriority"),
                                    (LOW_PRIORITY_CLASS, 0, "PreemptLowerPriority")):
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value, "preemptionPolicy": policy, "globalDefault": False}
            try:
                scheduling.create_priority_class(body)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise

    # --- node monitors ----------------------------------------------------------------------------

    def start_monitor(self, node: str, dry_run: bool = False) -> Proc:
        assert self.kubelet is not None
        argv = node_monitor_argv(self.kubelet, node, self.plane.kubeconfig,
                                 port=self.monitors[node].port if node in self.monitors else 0, dry_run=dry_run)
        monitor = Proc(f"node-monitor-{node}", argv, self.workdir / "logs" / f"node-monitor-{node}.log",
                       NODE_MONITOR_PORT_LOGGED)
        monitor.start()
        self.monitors[node] = monitor
        return monitor

    # --- extender --------------------------------------------------------------------------------

    @property
    def extender_url(self) -> str:
        assert self.extender is not None
        return f"http://127.0.0.1:{self.extender.port}"

    def start_extender(self) -> None:
        assert self.prometheus is not None and self.proxy is not None
        argv = extender_argv(self.plane.kubeconfig, self.prometheus.url)
        self.extender = Proc("extender", argv, self.workdir / "logs" / "extender.log", EXTENDER_PORT_LOGGED)
        self.extender.start()
        wait_for(lambda: httpx.get(f"{self.extender_url}/readyz", timeout=5.0).status_code == 200, 120,
                 "the extender's /readyz (node and pod caches synced)")
        self.proxy.upstream = self.extender_url

    def kill_extender(self) -> None:
        assert self.extender is not None
        self.extender.kill()

    def extender_metrics(self) -> str:
        return httpx.get(f"{self.extender_url}/metrics", timeout=10.0).text

    def nudges_total(self, outcome: str) -> float:
        """``stowage_extender_nudges_total{outcome}``: held pods the extender patched for a retry."""
        return extender_metric(self.extender_metrics(), "stowage_extender_nudges_total", {"outcome": outcome})

    def filter_count(self) -> float:
        return extender_metric(self.extender_metrics(), "stowage_extender_request_seconds_count", {"verb": "filter"})

    def harvestable(self) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for line in self.extender_metrics().splitlines():
            if line.startswith("stowage_node_harvestable{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                out[(labels.get("node", ""), labels.get("resource", ""))] = float(line.rsplit(" ", 1)[1])
        return out

    def wait_for_fresh_utilization(self, timeout_s: float = 120.0, min_memory: float = 1.0) -> None:
        """Until Prometheus has every node's samples and the extender reports harvestable memory on each."""
        assert self.prometheus is not None
        wait_for(lambda: len(self.prometheus.query(f'stowage_node_sample_time_seconds{{node=~"stack-{self.id}-.*"}}'))
                 >= len(self.nodes), timeout_s, "every node monitor's samples in Prometheus")

        def all_fresh() -> bool:
            h = self.harvestable()
            return all(h.get((n, "memory"), 0.0) >= min_memory for n in self.nodes)

        wait_for(all_fresh, timeout_s, "harvestable memory on every node in the extender's /metrics")

    # --- prometheus ------------------------------------------------------------------------------

    def stop_prometheus(self) -> None:
        assert self.prometheus is not None
        self.prometheus.stop()

    def start_prometheus(self) -> None:
        assert self.prometheus is not None
        self.prometheus.start()

    # --- kube-scheduler ---------------------------------------------------------------------------

    def use_scheduler(self, node_cache_capable: bool = True) -> SchedulerHandle:
        """Run the manifest's scheduler in this ``nodeCacheCapable`` mode (stop the other one)."""
        assert self.proxy is not None
        if self.node_cache_capable is node_cache_capable and self.schedulers[node_cache_capable].running:
            return self.schedulers[node_cache_capable]
        for handle in self.schedulers.values():
            if handle.running:
                handle.stop()
        handle = self.schedulers.get(node_cache_capable)
        if handle is None:
            config = self.plane.scheduler_config(manifest(node_cache_capable=node_cache_capable), self.proxy.url)
            name = f"stowage-scheduler-{'names' if node_cache_capable else 'nodes'}-{self.id}"
            handle = self.plane.start_scheduler(config, name=name)
            self.schedulers[node_cache_capable] = handle
        else:
            handle.start()
        self.node_cache_capable = node_cache_capable
        return handle

    # --- the API ---------------------------------------------------------------------------------

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def create(self, namespace: str, pod: dict[str, Any]) -> None:
        self.core.create_namespaced_pod(namespace, pod)

    def node_of(self, namespace: str, name: str) -> str | None:
        try:
            return self.core.read_namespaced_pod(name, namespace).spec.node_name
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_bound(self, namespace: str, names: list[str] | str, timeout_s: float = 120.0,
                   nudge: bool = False) -> dict[str, str]:
        """Wait until every pod has ``spec.nodeName``; return name → node.

        ``nudge``: while waiting, delete a bound pod every few seconds (:meth:`nudge`), as a busy cluster's
        finishing pods would: kube-scheduler 1.30 retries a pod the extender rejected only then or after
        5 minutes in its unschedulable pool.
        """
        names = [names] if isinstance(names, str) else list(names)

        def bound() -> dict[str, str] | None:
            pods = {p.metadata.name: p.spec.node_name for p in self.core.list_namespaced_pod(namespace).items}
            return {n: pods[n] for n in names} if all(pods.get(n) for n in names) else None

        return wait_for(bound, timeout_s, f"pods {names} bound in {namespace}",
                        on_wait=self.nudge if nudge else None, on_wait_every_s=5.0)

    def nudge(self) -> None:
        """Bind a tiny regular pod and delete it: the cluster event that makes kube-scheduler retry pods.

        Seen with kube-scheduler v1.30 (SchedulerQueueingHints off, its default): a pod the extender
        rejected (FailedNodes) waits in the unschedulable pool until an *assigned pod is deleted*, the pod
        itself is updated (the extender does that for pods held for samples: extender/nudge.py), or for
        5 minutes (podMaxInUnschedulablePodsDuration). A node label change or a newly bound pod does not
        move it. In a busy cluster pods finish all the time; these fake nodes are quiet.
        """
        self._nudges += 1
        name = f"nudge-{self._nudges}"
        self.create(self.nudge_namespace, regular_pod(name, cpu="1m", memory="1Mi", stack_id=self.id))
        self.wait_bound(self.nudge_namespace, name, timeout_s=60.0)
        self.core.delete_namespaced_pod(name, self.nudge_namespace, grace_period_seconds=0)

    def annotations(self, namespace: str, name: str) -> dict[str, str]:
        return self.core.read_namespaced_pod(name, namespace).metadata.annotations or {}

    def assert_stays_unbound(self, namespace: str, names: list[str], seconds: float) -> None:
        """For ``seconds``, none of ``names`` gets a node (checked every 0.5 s)."""
        end = time.monotonic() + seconds
        while True:
            pods = {p.metadata.name: p.spec.node_name for p in self.core.list_namespaced_pod(namespace).items}
            bound = {n: pods[n] for n in names if pods.get(n)}
            assert not bound, f"bound although they must not be: {bound}"
            if time.monotonic() > end:
                return
            time.sleep(0.5)

    def events(self, namespace: str, pod: str, reason: str = "FailedScheduling") -> list[str]:
        items = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
        return [e.message or "" for e in items if e.reason == reason]

    def wait_event(self, namespace: str, pod: str, needle: str, timeout_s: float = 120.0,
                   reason: str = "FailedScheduling", nudge: bool = False) -> str:
        """Wait for a ``reason`` event about the pod whose message contains ``needle``; return the message.

        ``nudge``: the pod was already rejected for another reason and must be retried (see :meth:`nudge`).
        """
        def found() -> str | None:
            return next((m for m in self.events(namespace, pod, reason) if needle in m), None)

        return wait_for(found, timeout_s, f"a {reason} event of {namespace}/{pod} containing {needle!r}",
                        on_wait=self.nudge if nudge else None)

    @contextlib.contextmanager
    def namespace(self, prefix: str = "t") -> Iterator[str]:
        """A fresh namespace; on exit its pods are deleted (grace 0) and waited for, then it is deleted."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.plane.create_namespace(name)
        try:
            yield name
        finally:
            self.delete_pods(name)
            with contextlib.suppress(client.ApiException):
                self.core.delete_namespace(name)

    def delete_pods(self, namespace: str, timeout_s: float = 120.0) -> None:
        core = self.core
        with contextlib.suppress(client.ApiException):
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, timeout_s, f"pods of {namespace} deleted")

    def set_proxy_mode(self, mode: Mode) -> None:
        assert self.proxy is not None
        self.proxy.mode = mode


# --- scenarios shared by the tests and the golden recorder ---------------------------------------------


def preemption_scenario(stack: Stack, namespace: str, timeout_s: float = 180.0) -> tuple[str, str]:
    """Fill every node with a low-priority regular pod of queue ``batch`` (cpu 7 of 7.5), then create a
    high-priority regular pod of queue ``prod`` (cpu 7) that fits nowhere: DefaultPreemption evicts one
    ``batch`` pod (that queue holds 93% of the cluster's cpu, above its fair half, so Stowage's preempt
    verb accepts it). Returns ``(victim, node)`` once the high-priority pod is bound there."""
    low = [f"low-{i}" for i in range(len(stack.nodes))]
    for name in low:
        stack.create(namespace, regular_pod(name, cpu="7", memory="1Gi", stack_id=stack.id,
                                            priority_class=LOW_PRIORITY_CLASS, queue="batch"))
    placed = stack.wait_bound(namespace, low, timeout_s)
    assert sorted(placed.values()) == sorted(stack.nodes), f"one low-priority pod per node expected: {placed}"
    stack.create(namespace, regular_pod("vip", cpu="7", memory="1Gi", stack_id=stack.id,
                                        priority_class=HIGH_PRIORITY_CLASS, queue="prod"))
    node = stack.wait_bound(namespace, "vip", timeout_s)["vip"]
    victims = [name for name, n in placed.items() if n == node]
    return victims[0], node
