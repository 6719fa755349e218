"""The informer keeps the cluster model in step with the kmock Kubernetes emulator: list, watch, recovery."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import kmock
import numpy as np
import pytest
from kubernetes import client

from stowage.kube.api import ApiError
from stowage.kube.cluster import ClusterModel
from stowage.kube.informer import Backoff, Informer, cluster_informers
from stowage.labels import ANN_DEMAND, LABEL_CLASS, LABEL_HARVEST
from tests.support.kube import KubeEmulator, gone_once, kube_emulator, wait_until

pytestmark = pytest.mark.timeout(60)

GI = 2**30


def node(name: str, cpu: str = "8", memory: str = "32Gi", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def pod(name: str, node_name: str | None, cpu: str = "1", memory: str = "1Gi", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
        "status": {"phase": "Running", "startTime": "2024-01-01T00:00:00Z"},
    }


@pytest.fixture
def cluster() -> Iterator[KubeEmulator]:
    with kube_emulator() as handle:
        yield handle


def start(handle: KubeEmulator, model: ClusterModel, backoff: Backoff | None = None) -> list[Informer]:
    fast = backoff or Backoff(base_s=0.01, cap_s=0.05, rng=random.Random(1))
    return [informer.start() for informer in cluster_informers(handle.client, model, backoff=fast)]


@pytest.fixture
def model() -> ClusterModel:
    return ClusterModel(recent_window_s=30.0)


def requests_of(model: ClusterModel, name: str) -> dict[str, float]:
    view = model.view([name])
    return dict(zip(view.resources, view.regular_requests[0].tolist(), strict=True))


def test_initial_list_fills_the_model_and_marks_it_synced(cluster: KubeEmulator, model: ClusterModel) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_node(node("n1"))
    core.create_node(node("n2", cpu="16", labels={LABEL_HARVEST: "false"}))
    core.create_namespaced_pod("default", pod("a", "n1", cpu="2"))
    core.create_namespaced_pod("default", pod("pending", None, cpu="4"))
    informers = start(cluster, model)
    try:
        wait_until(lambda: model.synced)
        assert sorted(model.node_names()) == ["n1", "n2"]
        view = model.view(["n1", "n2"])
        assert view.capacity[:, 0].tolist() == [8.0, 16.0]
        assert view.harvest_enabled.tolist() == [True, False]
        assert requests_of(model, "n1")["cpu"] == 2.0
        assert model.pod("uid-pending") is None  # pending pods occupy no node
    finally:
        for informer in informers:
            informer.stop()


def test_watch_applies_additions_updates_and_deletions(cluster: KubeEmulator, model: ClusterModel) -> None:
    core = client.CoreV1Api(cluster.api)
    informers = start(cluster, model)
    try:
        wait_until(lambda: model.synced)
        core.create_node(node("n1"))
        wait_until(lambda: "n1" in model.node_names())
        core.create_namespaced_pod("default", pod("a", "n1", cpu="3", memory="2Gi"))
        core.create_namespaced_pod("default", pod("o", "n1", cpu="0", memory="0", **{LABEL_CLASS: "opportunistic"}))
        wait_until(lambda: model.pod("uid-a") is not None and model.pod("uid-o") is not None)
        assert requests_of(model, "n1")["cpu"] == 3.0
        assert model.pod("uid-o").opportunistic

        core.patch_node("n1", {"status": {"capacity": {"cpu": "12"}}})
        wait_until(lambda: model.view(["n1"]).capacity[0, 0] == 12.0)

        core.patch_namespaced_pod("a", "default", {"status": {"phase": "Succeeded"}})
        wait_until(lambda: model.pod("uid-a") is None)
        assert requests_of(model, "n1")["cpu"] == 0.0

        core.delete_namespaced_pod("o", "default")
        wait_until(lambda: model.pod("uid-o") is None)
        core.delete_node("n1")
        wait_until(lambda: "n1" not in model.node_names())
        assert not model.view(["n1"]).known[0]
    finally:
        for informer in informers:
            informer.stop()


def test_an_expired_watch_410_is_recovered_by_relisting(cluster: KubeEmulator, model: ClusterModel) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_node(node("n1"))
    gone_once(cluster, "nodes")
    informers = start(cluster, model)
    try:
        wait_until(lambda: informers[0].relists >= 2)
        assert informers[0].last_error is None  # a 410 is routine, not an error to back off from
        core.create_node(node("n2"))
        wait_until(lambda: "n2" in model.node_names())
        assert sorted(model.node_names()) == ["n1", "n2"]
    finally:
        for informer in informers:
            informer.stop()


def test_api_errors_are_retried_with_backoff_until_the_list_succeeds(
    cluster: KubeEmulator, model: ClusterModel
) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_node(node("n1"))

    def fail_twice() -> None:
        cluster.emulator[kmock.action.LIST, kmock.resource("", "v1", "nodes")][:2] << 503

    cluster.call(fail_twice)
    informers = start(cluster, model)
    try:
        wait_until(lambda: model.nodes_synced.is_set())
        assert model.node_names() == ["n1"]
        assert "503" in (informers[0].last_error or "")
    finally:
        for informer in informers:
            informer.stop()


def test_stop_ends_an_open_watch_promptly(cluster: KubeEmulator, model: ClusterModel) -> None:
    informers = start(cluster, model)
    wait_until(lambda: model.synced)
    for informer in informers:
        informer.stop(timeout_s=30)  # far below the 300 s watch timeout it must not wait out
    assert all(informer._thread is not None and not informer._thread.is_alive() for informer in informers)


def test_a_relist_drops_objects_deleted_while_disconnected(model: ClusterModel) -> None:
    model.replace_nodes([node("n1"), node("n2")])
    model.replace_pods([pod("a", "n1"), pod("b", "n2")])
    model.replace_nodes([node("n2")])
    model.replace_pods([pod("b", "n2", cpu="2")])
    assert model.node_names() == ["n2"]
    assert model.pod("uid-a") is None
    assert requests_of(model, "n2")["cpu"] == 2.0


def test_pods_seen_before_their_node_count_once_the_node_arrives(model: ClusterModel) -> None:
    model.replace_pods([pod("a", "late", cpu="3", memory="1Gi")])
    model.apply_node_event("ADDED", node("late"))
    assert requests_of(model, "late") == pytest.approx({"cpu": 3.0, "memory": GI, "disk": 0.0, "network": 0.0})


def test_an_opportunistic_pods_own_requests_count_as_kube_scheduler_counts_them(model: ClusterModel) -> None:
    """A converted pod requests 1m cpu per container and harvests its real demand: kube-scheduler counts the 1m in
    what a regular pod may still take on the node, so the model's regular room must too."""
    converted = pod("opp", "n1", cpu="1m", memory="0", **{LABEL_CLASS: "opportunistic"})
    converted["metadata"]["annotations"] = {ANN_DEMAND: '{"cpu": "2", "memory": "4Gi"}'}
    model.replace_nodes([node("n1", cpu="4")])
    model.replace_pods([pod("a", "n1", cpu="3"), converted])
    view = model.view(["n1"])
    cpu = view.resources.index("cpu")
    assert view.regular_requests[0, cpu] == pytest.approx(3.001)  # so a regular pod of 1 cpu no longer fits
    assert view.opportunistic_demand[0, cpu] == pytest.approx(2.0)
    model.apply_pod_event("DELETED", converted)
    assert requests_of(model, "n1")["cpu"] == pytest.approx(3.0)


def test_extended_resources_grow_the_resource_axis(model: ClusterModel) -> None:
    gpu = node("g1")
    gpu["status"]["capacity"]["nvidia.com/gpu"] = "4"
    model.replace_nodes([node("n1"), gpu])
    view = model.view(["n1", "g1"])
    assert view.resources[-1] == "nvidia.com/gpu"
    assert np.array_equal(view.capacity[:, -1], [0.0, 4.0])


def test_a_long_list_is_read_page_by_page(cluster: KubeEmulator, model: ClusterModel) -> None:
    nodes = kmock.resource("", "v1", "nodes")

    def paginate() -> None:
        lists = cluster.emulator[kmock.action.LIST, nodes]
        lists[0:1] << {"metadata": {"resourceVersion": "7", "continue": "page-2"}, "items": [node("n1")]}
        lists[1:2] << {"metadata": {"resourceVersion": "7"}, "items": [node("n2")]}

    cluster.call(paginate)
    informers = start(cluster, model)
    try:
        wait_until(lambda: model.nodes_synced.is_set())
        assert sorted(model.node_names()) == ["n1", "n2"]
        params = cluster.call(lambda: [dict(r.params) for r in cluster.emulator[kmock.action.LIST, nodes]])
        assert params[0].get("limit") == "500" and "continue" not in params[0]
        assert params[1].get("continue") == "page-2"
    finally:
        for informer in informers:
            informer.stop()


@pytest.mark.parametrize("hook", ["reports", "declines", "raises"])
def test_an_on_error_hook_sees_each_failure_and_may_quiet_the_retry_log(
    cluster: KubeEmulator, caplog: pytest.LogCaptureFixture, hook: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="stowage.kube.informer")
    seen: list[Exception] = []

    def on_error(exc: Exception) -> bool:
        seen.append(exc)
        if hook == "raises":
            raise RuntimeError("broken hook")
        return hook == "reports"

    # kmock serves only declared resources: every list of this one answers 404.
    informer = Informer(cluster.client, "/apis/example.com/v1/widgets", name="widgets", on_replace=lambda _: None,
                        on_event=lambda *_: None, on_error=on_error,
                        backoff=Backoff(base_s=0.01, cap_s=0.05, rng=random.Random(1))).start()
    try:
        wait_until(lambda: len(seen) >= 3)
    finally:
        informer.stop()
    assert all(isinstance(e, ApiError) and e.status == 404 for e in seen)
    retries = [r for r in caplog.records if r.getMessage().startswith("informer widgets: ApiError")]
    assert retries and {r.levelno for r in retries} == {logging.DEBUG if hook == "reports" else logging.WARNING}
    assert any("on_error hook failed" in r.getMessage() for r in caplog.records) is (hook == "raises")
