"""The fake kubelet on a real API server: pods progress by the simulator's contention model, and in-place resizes
are actuated as a v1.30 kubelet with ``InPlacePodVerticalScaling`` does (issue #32 §2 and §4)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import numpy as np
import pytest
from kubernetes import client

from stowage import labels
from stowage.sim.cluster import contention_table
from tests.support.controlplane import ControlPlane, ExternalCluster
from tests.support.fake_kubelet import ANN_RUN_SECONDS, FakeKubelet, NodeSpec
from tests.support.kube import wait_until

Plane = ControlPlane | ExternalCluster
GiB = 1 << 30
ALLOCATABLE = {"cpu": "7500m", "memory": "15Gi", "pods": "110"}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _pod(name: str, node: str, *, cpu: str = "1", opportunistic: bool = False, demand_cpu: str = "3",
         run_s: float | None = None) -> dict[str, Any]:
    """A pod bound to ``node``; an opportunistic one as the webhook converts it: class label, requests 0 (memory
    kept so that it stays Burstable), its demand in the annotation."""
    meta: dict[str, Any] = {"name": name, "labels": {}, "annotations": {}}
    requests = {"cpu": cpu, "memory": "1Gi"}
    if opportunistic:
        meta["labels"][labels.LABEL_CLASS] = "opportunistic"
        meta["annotations"][labels.ANN_DEMAND] = json.dumps({"cpu": demand_cpu, "memory": "1Gi"})
        requests = {"cpu": "0", "memory": "1Gi"}
    if run_s is not None:
        meta["annotations"][ANN_RUN_SECONDS] = str(run_s)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}]}}


def _node(kubelet: FakeKubelet) -> str:
    [node] = kubelet.add_nodes([NodeSpec(_name("contended"), capacity={"cpu": "8", "memory": "16Gi", "pods": "110"},
                                         allocatable=ALLOCATABLE)])
    return node


def _namespace(plane: Plane) -> str:
    ns = _name("contention")
    plane.create_namespace(ns)
    return ns


def _model(regular: float, opportunistic: list[float]) -> list[float]:
    """The simulator's own table for one node of 7.5 cores: a regular pod's rate, then each opportunistic one's."""
    cap = np.array([[7.5, 15.0 * GiB, np.inf, np.inf]])
    reg = np.array([[regular, 3.0 * GiB, 0.0, 0.0]])
    opp = np.array([[sum(opportunistic), 2.0 * GiB, 0.0, 0.0]])
    table = contention_table(reg, opp, cap, 0, 1, np.array([[True, True, False, False]]))
    assert table is not None
    return [float(table[0, 0, 0]), *[float(table[1, 0, 0])] * len(opportunistic)]


def test_rates_on_an_overcommitted_node_are_the_simulators(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    """A regular pod using 4 cores and two opportunistic pods using 2.5 each on 7.5 cores: the fake kubelet's rates
    are contention_table's (1, 0.7, 0.7). One opportunistic pod relabelled regular (promoted) gets a regular
    pod's share from then on (1), the other what is left (0.4)."""
    node = _node(fake_kubelet)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    for name, cpu in (("reg", 4.0), ("opp-a", 2.5), ("opp-b", 2.5)):
        fake_kubelet.set_usage(f"{ns}/{name}", {"cpu": cpu, "memory": GiB})
    core.create_namespaced_pod(ns, _pod("reg", node, cpu="4"))
    core.create_namespaced_pod(ns, _pod("opp-a", node, opportunistic=True))
    core.create_namespaced_pod(ns, _pod("opp-b", node, opportunistic=True))
    want = dict(zip([f"{ns}/reg", f"{ns}/opp-a", f"{ns}/opp-b"], _model(4.0, [2.5, 2.5]), strict=True))
    assert want == pytest.approx({f"{ns}/reg": 1.0, f"{ns}/opp-a": 0.7, f"{ns}/opp-b": 0.7})

    def rates_are(expected: dict[str, float]) -> bool:
        got = fake_kubelet.rates(node)
        return got.keys() == expected.keys() and all(abs(got[k] - v) < 1e-9 for k, v in expected.items())

    wait_until(lambda: rates_are(want), timeout_s=30)

    core.patch_namespaced_pod("opp-a", ns, {"metadata": {"labels": {labels.LABEL_CLASS: "regular"}}})
    [reg, promoted, other] = _model(6.5, [2.5])[0], 1.0, _model(6.5, [2.5])[1]
    assert (reg, other) == pytest.approx((1.0, 0.4))
    wait_until(lambda: rates_are({f"{ns}/reg": reg, f"{ns}/opp-a": promoted, f"{ns}/opp-b": other}), timeout_s=30)

    # The regular pod gone, 5 cores of usage fit: everyone at full speed.
    core.delete_namespaced_pod("reg", ns, grace_period_seconds=0)
    wait_until(lambda: rates_are({f"{ns}/opp-a": 1.0, f"{ns}/opp-b": 1.0}), timeout_s=30)


def test_a_slowed_pod_runs_its_work_at_its_rate(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    """Regular usage 6 cores, an opportunistic pod of 3 s work using 3 cores: 1.5 left, rate 0.5, so it runs about
    6 s, all of them on harvested capacity; a regular pod alone beside it runs its 2 s exactly."""
    node = _node(fake_kubelet)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    fake_kubelet.set_usage(f"{ns}/hog", {"cpu": 6.0, "memory": GiB})
    fake_kubelet.set_usage(f"{ns}/slow", {"cpu": 3.0, "memory": GiB})
    fake_kubelet.set_usage(f"{ns}/quick", {"cpu": 0.1, "memory": GiB})
    core.create_namespaced_pod(ns, _pod("hog", node, cpu="6"))
    wait_until(lambda: f"{ns}/hog" in fake_kubelet.running_pods(node), timeout_s=30)
    core.create_namespaced_pod(ns, _pod("slow", node, opportunistic=True, run_s=3))
    core.create_namespaced_pod(ns, _pod("quick", node, cpu="100m", run_s=2))

    def outcome(name: str) -> dict[str, Any] | None:
        return next((o for o in fake_kubelet.outcomes(ns) if o["name"] == name), None)

    wait_until(lambda: outcome("slow") is not None and outcome("quick") is not None, timeout_s=60)
    slow, quick = outcome("slow"), outcome("quick")
    assert slow is not None and quick is not None
    ran = slow["ended_at"] - slow["started_at"]
    # 6 s at rate 0.5; its start brings the next usage tick forward (≥ 0.1 s later), run at full speed until then.
    assert 5.6 <= ran <= 6.5, slow
    assert slow["outcome"] == "Succeeded" and slow["work_done"] == pytest.approx(3.0, abs=0.05)
    assert slow["was_opportunistic"] and slow["opportunistic_s"] == pytest.approx(ran, abs=0.05)
    assert slow["promoted_at"] is None
    assert quick["ended_at"] - quick["started_at"] == pytest.approx(2.0, abs=0.3)
    assert not quick["was_opportunistic"] and quick["opportunistic_s"] == 0.0
    assert core.read_namespaced_pod("slow", ns).status.phase == "Succeeded"


def _resize_gate_on(core: client.CoreV1Api, ns: str, node: str) -> bool:
    """Whether the API server lets a pod's container resources change (``InPlacePodVerticalScaling``)."""
    name = _name("probe")
    core.create_namespaced_pod(ns, {**_pod(name, node, cpu="100m"), "spec": {
        **_pod(name, node, cpu="100m")["spec"], "nodeName": None, "nodeSelector": {"no-such-node": "x"}}})
    try:
        core.patch_namespaced_pod(name, ns, {"spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": "200m"}}}]}})
    except client.ApiException as exc:
        if exc.status == 422:
            return False
        raise
    finally:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    return True


def test_an_in_place_resize_is_actuated(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    """The pod spec's requests raised (as the operator's promotion does): the kubelet writes the container's
    ``allocatedResources`` and ``resources`` from the spec and clears ``status.resize``; a resize above the node is
    answered ``Infeasible`` and not actuated. Needs the API server's ``InPlacePodVerticalScaling`` gate
    (tests/support/controlplane.py turns it on); skipped with the reason where it is off."""
    node = _node(fake_kubelet)
    ns = _namespace(control_plane)
    core = client.CoreV1Api(control_plane.api())
    if not _resize_gate_on(core, ns, node):
        pytest.skip("the API server refuses to change a pod's resources: InPlacePodVerticalScaling is off")
    core.create_namespaced_pod(ns, _pod("grow", node, cpu="500m"))
    wait_until(lambda: core.read_namespaced_pod("grow", ns).status.phase == "Running", timeout_s=30)
    status = core.read_namespaced_pod("grow", ns).status.container_statuses[0]
    assert status.allocated_resources == {"cpu": "500m", "memory": "1Gi"}
    assert status.resources.requests == {"cpu": "500m", "memory": "1Gi"}

    core.patch_namespaced_pod("grow", ns, {"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}]}})

    def actuated() -> bool:
        pod = core.read_namespaced_pod("grow", ns)
        c = pod.status.container_statuses[0]
        return (c.allocated_resources == {"cpu": "2", "memory": "2Gi"}
                and c.resources.requests == {"cpu": "2", "memory": "2Gi"} and pod.status.resize is None)

    wait_until(actuated, timeout_s=30)
    assert fake_kubelet.stats()["resized"] >= 1
    assert core.read_namespaced_pod("grow", ns).status.phase == "Running"

    core.patch_namespaced_pod("grow", ns, {"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"cpu": "64"}}}]}})
    wait_until(lambda: core.read_namespaced_pod("grow", ns).status.resize == "Infeasible", timeout_s=30)
    time.sleep(1.0)
    c = core.read_namespaced_pod("grow", ns).status.container_statuses[0]
    assert c.allocated_resources["cpu"] == "2"  # not actuated
