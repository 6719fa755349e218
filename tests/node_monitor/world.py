"""A node for eviction tests: a synthetic cgroup tree, pods in the kmock emulator, and a wired NodeMonitor.

Everything between the cgroup files and the HTTP requests is the production
code: Sampler, summarise, the contention policy, KubeClient, PodStore, Evictor.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stowage.node_monitor.capacity import node_capacity
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.eviction import Evictor
from stowage.node_monitor.metrics import NodeMetrics
from stowage.node_monitor.monitor import NodeMonitor, TickReport
from stowage.node_monitor.pods import PodStore
from stowage.node_monitor.sampling import Sampler
from stowage.node_monitor.synthetic import SyntheticNode

from stowage.config import ContentionPolicy, ContentionSettings
from stowage.kube.api import KubeClient, load_config
from stowage.labels import LABEL_CLASS, LABEL_OPPORTUNISTIC

from .emulator import NODES, PODS, Emulator, write_kubeconfig

__all__ = ["GiB", "PodSpec", "World", "pod_object"]

GiB = 1 << 30


@dataclass(frozen=True)
class PodSpec:
    """A pod of the test node: identity, Stowage labels, start time and measured memory."""

    name: str
    pod_class: str | None = "opportunistic"  # value of stowage.io/class; None: no label
    opt: str | None = None  # value of stowage.io/opportunistic; None: no label
    started_s: int = 0  # seconds after 2026-01-01T00:00:00Z
    memory: int = 0
    terminating: bool = False
    node: str | None = None  # another node's name, or None for the test node
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


def pod_object(spec: PodSpec, node: str, namespace: str = "batch") -> dict[str, Any]:
    labels = {}
    if spec.pod_class is not None:
        labels[LABEL_CLASS] = spec.pod_class
    if spec.opt is not None:
        labels[LABEL_OPPORTUNISTIC] = spec.opt
    meta: dict[str, Any] = {"name": spec.name, "namespace": namespace, "uid": spec.uid, "labels": labels,
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if spec.terminating:
        meta["deletionTimestamp"] = "2026-01-01T01:00:00Z"
    hh, rest = divmod(spec.started_s, 3600)
    mm, ss = divmod(rest, 60)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": spec.node or node, "containers": [{"name": "main", "image": "busybox"}],
                 "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running", "startTime": f"2026-01-01T{hh:02d}:{mm:02d}:{ss:02d}Z"},
    }


class World:
    """One node ``node`` with ``pods`` on a cgroup tree in ``workdir`` and in the emulator."""

    def __init__(
        self,
        emulator: Emulator,
        workdir: Path,
        pods: list[PodSpec],
        node: str = "node-1",
        allocatable: dict[str, str] | None = None,
        policy: ContentionPolicy = ContentionPolicy.NEUTRAL,
        sustained_count: int = 3,
        dry_run: bool = False,
    ) -> None:
        self.emulator, self.node, self.specs = emulator, node, pods
        self.namespace = f"ns-{node}"  # the emulator is shared between tests: keep each world's pods apart
        self.tree = SyntheticNode(workdir / "cgroup", 2, Driver.SYSTEMD, workdir / "proc")
        for spec in pods:
            self.tree.add_pod(spec.uid, QoS.BURSTABLE, memory_current=spec.memory)
            emulator.put(PODS, pod_object(spec, node, self.namespace))
        emulator.put(NODES, {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "uid": f"uid-{node}", "annotations": {}},
            "status": {"allocatable": allocatable or {"cpu": "8", "memory": "10Gi"}},
        })
        self.client = KubeClient(load_config(write_kubeconfig(workdir / "kubeconfig", emulator.url)))
        self.now = 1000.0
        self.settings = ContentionSettings(policy=policy, sustained_count=sustained_count)
        self.metrics = NodeMetrics(node)
        self.store = PodStore(node)
        self.evictor = Evictor(self.client, node, dry_run=dry_run)
        self.monitor = NodeMonitor(
            node, Sampler(self.tree.root, self.tree.proc_root, clock=lambda: self.now), self.settings,
            self.metrics, self.store, self.evictor, clock=lambda: self.now,
        )
        self.refresh()

    def refresh(self) -> None:
        """What the pod watcher does on a relist: read the Node and this node's pods."""
        node = self.client.get_node(self.node)
        self.monitor.set_node_capacity(node_capacity(node))
        self.evictor.node_uid = node["metadata"]["uid"]
        items, _ = self.client.list_pods(self.node)
        self.store.replace(items)

    def tick(self, n: int = 1) -> list[TickReport]:
        reports = []
        for _ in range(n):
            reports.append(self.monitor.tick())
            self.now += self.settings.sample_interval_s
        return reports

    def evicted(self) -> list[tuple[str, int]]:
        """(pod name, HTTP status) of every eviction request for this world's pods, in order."""
        return [(name, status) for ns, name, status in self.emulator.emu.evictions if ns == self.namespace]

    def events(self, reason: str) -> list[dict[str, Any]]:
        def ours(involved: dict[str, Any]) -> bool:
            return involved.get("namespace") == self.namespace or involved["name"] == self.node

        return [e for e in self.emulator.live("v1/events") if e.get("reason") == reason and ours(e["involvedObject"])]

    def close(self) -> None:
        self.client.close()
