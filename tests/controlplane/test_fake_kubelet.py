"""The fake kubelet against the real API server: nodes, leases, pod phases, evictions, cgroup usage."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from stowage.node_monitor import cgroups
from stowage.node_monitor.sampling import Sampler

from stowage.resources import parse_quantity
from tests.support.controlplane import ControlPlane, ExternalCluster
from tests.support.fake_kubelet import ANN_EXIT_CODE, ANN_RUN_SECONDS, FakeKubelet, NodeSpec
from tests.support.kube import wait_until

Plane = ControlPlane | ExternalCluster
MiB = 1 << 20


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _pod(name: str, node: str, annotations: dict[str, str] | None = None, cpu: str = "500m",
         memory: str = "256Mi") -> dict[str, Any]:
    """A pod bound to ``node`` directly (no scheduler needed)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }


def _phase(core: client.CoreV1Api, name: str, ns: str) -> str | None:
    try:
        return core.read_namespaced_pod(name, ns).status.phase
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _namespace(plane: Plane) -> str:
    ns = _name("kubelet")
    plane.create_namespace(ns)
    return ns


def test_nodes_are_ready_with_allocatable_below_capacity(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    custom = NodeSpec(_name("big"), capacity={"cpu": "64", "memory": "256Gi", "pods": "110"},
                      allocatable={"cpu": "60", "memory": "240Gi", "pods": "110"}, labels={"tier": "big"},
                      annotations={"stowage.io/disk-bandwidth": "500Mi"})
    names = fake_kubelet.add_nodes(2) + fake_kubelet.add_nodes([custom])
    core = client.CoreV1Api(control_plane.api())
    for name in names:
        node = core.read_node(name)
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready["Ready"] == "True" and ready["MemoryPressure"] == "False"
        assert not node.spec.taints
        for resource in ("cpu", "memory"):
            assert parse_quantity(node.status.allocatable[resource]) < parse_quantity(node.status.capacity[resource])
        assert node.status.addresses[0].address == "127.0.0.1"
    default = core.read_node(names[0]).status
    assert (default.capacity["cpu"], default.allocatable["cpu"]) == ("16", "15500m")
    assert parse_quantity(default.allocatable["memory"]) == 62 * (1 << 30)
    big = core.read_node(custom.name)
    assert big.status.allocatable["cpu"] == "60" and big.metadata.labels["tier"] == "big"
    assert big.metadata.annotations["stowage.io/disk-bandwidth"] == "500Mi"
    assert fake_kubelet.stats()["registered"] == 3


def test_lease_exists_and_renews(control_plane: Plane, tmp_path: Path) -> None:
    coordination = client.CoordinationV1Api(control_plane.api())
    with FakeKubelet(control_plane.api(), lease_interval_s=0.5) as kubelet:
        [node] = kubelet.add_nodes([_name("leased")])
        try:
            lease = coordination.read_namespaced_lease(node, "kube-node-lease")
            assert lease.spec.holder_identity == node
            assert lease.metadata.owner_references[0].kind == "Node"
            first = lease.spec.renew_time
            wait_until(lambda: coordination.read_namespaced_lease(node, "kube-node-lease").spec.renew_time > first,
                       timeout_s=30)
        finally:
            kubelet.remove_nodes()


def test_pod_runs_then_succeeds_after_its_run_seconds(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    [node] = fake_kubelet.add_nodes(1)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_pod(ns, _pod("short", node, {ANN_RUN_SECONDS: "1.5"}))
    core.create_namespaced_pod(ns, _pod("forever", node))
    wait_until(lambda: _phase(core, "short", ns) == "Running", timeout_s=30)
    pod = core.read_namespaced_pod("short", ns)
    assert pod.status.pod_ip.startswith("10.24") and pod.status.host_ip == "127.0.0.1"
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["Ready"] == "True" and conditions["PodScheduled"] == "True"
    assert pod.status.container_statuses[0].state.running is not None
    assert pod.status.container_statuses[0].container_id.startswith("containerd://")

    wait_until(lambda: _phase(core, "short", ns) == "Succeeded", timeout_s=30)
    done = core.read_namespaced_pod("short", ns).status
    assert done.container_statuses[0].state.terminated.exit_code == 0
    assert _phase(core, "forever", ns) == "Running"
    forever_ip = core.read_namespaced_pod("forever", ns).status.pod_ip
    assert forever_ip != pod.status.pod_ip


def test_non_zero_exit_code_fails_the_pod(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    [node] = fake_kubelet.add_nodes(1)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_pod(ns, _pod("crash", node, {ANN_RUN_SECONDS: "0.2", ANN_EXIT_CODE: "3"}))
    wait_until(lambda: _phase(core, "crash", ns) == "Failed", timeout_s=30)
    assert core.read_namespaced_pod("crash", ns).status.container_statuses[0].state.terminated.exit_code == 3
    assert fake_kubelet.stats()["failed"] == 1


def test_an_evicted_pod_disappears(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    [node] = fake_kubelet.add_nodes(1)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_pod(ns, _pod("victim", node))
    wait_until(lambda: _phase(core, "victim", ns) == "Running", timeout_s=30)
    core.create_namespaced_pod_eviction("victim", ns, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim", "namespace": ns}})
    wait_until(lambda: _phase(core, "victim", ns) is None, timeout_s=30)
    stats = fake_kubelet.stats()
    assert stats["killed"] == 1 and stats["deleted"] == 1


def test_running_pods_usage_is_readable_by_the_node_monitor(control_plane: Plane, tmp_path: Path) -> None:
    with FakeKubelet(control_plane.api(), tmp_path / "cgroup", usage_interval_s=0.1) as kubelet:
        try:
            [node] = kubelet.add_nodes(1)
            ns = _namespace(control_plane)
            core = client.CoreV1Api(control_plane.api())
            pinned = core.create_namespaced_pod(ns, _pod("pinned", node)).metadata.uid
            modelled = core.create_namespaced_pod(ns, _pod("modelled", node, cpu="2", memory="1Gi")).metadata.uid
            kubelet.set_usage(f"{ns}/pinned", {"cpu": 1.5, "memory": 300 * MiB, "disk": 4 * MiB, "network": MiB})

            layout = cgroups.detect_layout(kubelet.cgroup_dir(node))
            assert layout is not None and layout.version == 2 and layout.driver is cgroups.Driver.SYSTEMD

            def uids() -> set[str]:
                return {p.uid for p in cgroups.list_pods(layout)}

            wait_until(lambda: {pinned, modelled} <= uids(), timeout_s=30)
            [pod_cgroup] = [p for p in cgroups.list_pods(layout) if p.uid == pinned]
            assert pod_cgroup.qos is cgroups.QoS.BURSTABLE  # requests without limits
            before = cgroups.read_counters(layout, pod_cgroup.relpath)
            wait_until(lambda: cgroups.read_counters(layout, pod_cgroup.relpath).cpu_usec > before.cpu_usec + 300_000,
                       timeout_s=30)
            after = cgroups.read_counters(layout, pod_cgroup.relpath)
            assert after.memory_bytes == 300 * MiB
            assert after.io_bytes > before.io_bytes
            # The default model: half the requests (2 cores, 1Gi) of the other pod.
            [other] = [p for p in cgroups.list_pods(layout) if p.uid == modelled]
            wait_until(lambda: cgroups.read_counters(layout, other.relpath).memory_bytes == 512 * MiB, timeout_s=30)

            # The node monitor's whole sampler reads the tree and the node's net/dev.
            sample = Sampler(kubelet.cgroup_dir(node), kubelet.proc_dir(node)).sample()
            assert {pinned, modelled} <= set(sample.pods)
            assert sample.node is not None and sample.node.memory_bytes >= (300 + 512) * MiB
            assert sample.net_bytes is not None and sample.net_bytes > 0
            # The pinned pod's traffic is its own namespace's too (a process of it, <proc-root>/<pid>/net/dev).
            first = sample.pods[pinned].net_bytes
            assert first is not None and not sample.pods[pinned].host_network
            wait_until(lambda: (Sampler(kubelet.cgroup_dir(node), kubelet.proc_dir(node)).sample()
                                .pods[pinned].net_bytes or 0.0) > first, timeout_s=30)

            # Changing the usage at runtime shows up; a stopped pod's cgroup goes away.
            kubelet.set_usage(f"{ns}/pinned", {"cpu": 0.1, "memory": 100 * MiB})
            wait_until(lambda: cgroups.read_counters(layout, pod_cgroup.relpath).memory_bytes == 100 * MiB,
                       timeout_s=30)
            core.delete_namespaced_pod("pinned", ns)
            wait_until(lambda: pinned not in uids(), timeout_s=30)
            assert modelled in uids()
        finally:
            kubelet.remove_nodes()


def test_the_watch_survives_an_api_server_restart(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    [node] = fake_kubelet.add_nodes(1)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_pod(ns, _pod("before", node))
    wait_until(lambda: _phase(core, "before", ns) == "Running", timeout_s=30)
    control_plane.restart_apiserver()
    core.create_namespaced_pod(ns, _pod("after", node, {ANN_RUN_SECONDS: "0.5"}))
    wait_until(lambda: _phase(core, "after", ns) == "Succeeded", timeout_s=60)
    assert _phase(core, "before", ns) == "Running"


def test_many_pods_on_many_nodes(control_plane: Plane, tmp_path: Path) -> None:
    """A small-scale version of the throughput benchmark: every pod runs and completes exactly once."""
    with FakeKubelet(control_plane.api(), tmp_path / "cgroup", leases=False) as kubelet:
        try:
            nodes = kubelet.add_nodes(20, prefix=_name("many"))
            ns = _namespace(control_plane)
            core = client.CoreV1Api(control_plane.api())
            for i in range(200):
                core.create_namespaced_pod(ns, _pod(f"p{i}", nodes[i % len(nodes)], {ANN_RUN_SECONDS: "0.5"}))
            wait_until(lambda: kubelet.stats()["succeeded"] == 200, timeout_s=120)
            phases = {p.status.phase for p in core.list_namespaced_pod(ns).items}
            assert phases == {"Succeeded"}
            ips = [p.status.pod_ip for p in core.list_namespaced_pod(ns).items]
            assert len(set(ips)) == 200
            assert kubelet.stats()["started"] == 200 and kubelet.stats()["errors"] == 0
            # Every pod's cgroup goes away once it stopped (at the next usage tick).
            wait_until(lambda: all(not kubelet.tree(n).pods for n in nodes), timeout_s=60)
        finally:
            kubelet.remove_nodes()


def test_pods_bound_before_the_node_registered_are_adopted(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    node = _name("late")
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_pod(ns, _pod("early", node))
    fake_kubelet.add_nodes([node])
    wait_until(lambda: _phase(core, "early", ns) == "Running", timeout_s=30)
