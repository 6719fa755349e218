"""The real control plane fixture: API server with RBAC, controller-manager, kube-scheduler, restarts."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.support.controlplane import REPO, ControlPlane, ExternalCluster, find_assets
from tests.support.controlplane_plugin import start_control_plane
from tests.support.fake_kubelet import FakeKubelet, NodeSpec
from tests.support.kube import wait_until

Plane = ControlPlane | ExternalCluster


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}], **spec},
    }


def test_assets_are_found() -> None:
    assert find_assets() is not None


def test_api_server_answers_with_the_system_namespaces(control_plane: Plane) -> None:
    core = client.CoreV1Api(control_plane.api())
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system", "kube-node-lease"} <= names
    version = client.VersionApi(control_plane.api()).get_code()
    assert version.major == "1"


def test_rbac_denies_an_unprivileged_service_account(control_plane: Plane) -> None:
    ns = _name("rbac")
    control_plane.create_namespace(ns)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_service_account(ns, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", ns, {"spec": {"expirationSeconds": 3600}}).status.token

    with control_plane.api(control_plane.kubeconfig_for_token(token)) as api:
        # Authenticated (the API server knows who this is) ...
        review = client.AuthenticationV1Api(api).create_self_subject_review({})
        assert review.status.user_info.username == f"system:serviceaccount:{ns}:nobody"
        # ... but not authorized.
        with pytest.raises(client.ApiException) as denied:
            client.CoreV1Api(api).list_namespaced_secret(ns)
        assert denied.value.status == 403


def test_configmap_round_trip(control_plane: Plane) -> None:
    ns = _name("cm")
    control_plane.create_namespace(ns)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_config_map(ns, {"metadata": {"name": "settings"}, "data": {"a": "1", "b": "ü"}})
    assert core.read_namespaced_config_map("settings", ns).data == {"a": "1", "b": "ü"}
    core.patch_namespaced_config_map("settings", ns, {"data": {"a": "2"}})
    assert core.read_namespaced_config_map("settings", ns).data["a"] == "2"
    core.delete_namespaced_config_map("settings", ns)
    assert "settings" not in {c.metadata.name for c in core.list_namespaced_config_map(ns).items}


def test_controller_manager_creates_a_deployments_pods(control_plane: Plane) -> None:
    ns = _name("deploy")
    control_plane.create_namespace(ns)
    api = control_plane.api()
    labels = {"app": "web"}
    # Pinned to no node: a scheduler another test starts must not bind these pods to its nodes.
    spec = _pod("x", nodeSelector={"test-zone": "nowhere"})["spec"]
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(ns, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec}},
    })
    core = client.CoreV1Api(api)
    wait_until(lambda: len(core.list_namespaced_pod(ns, label_selector="app=web").items) == 2, timeout_s=60)
    owners = {ref.kind for p in core.list_namespaced_pod(ns).items for ref in p.metadata.owner_references}
    assert owners == {"ReplicaSet"}
    # Garbage collection through ownerReferences: the Deployment's ReplicaSet and pods go with it.
    apps.delete_namespaced_deployment("web", ns, propagation_policy="Foreground")
    wait_until(lambda: not core.list_namespaced_pod(ns).items, timeout_s=60)


def _bound_node(core: client.CoreV1Api, name: str, ns: str) -> str | None:
    return core.read_namespaced_pod(name, ns).spec.node_name


def test_default_scheduler_binds_a_pod_to_a_fake_node(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    zone = _name("zone")
    [node] = fake_kubelet.add_nodes([NodeSpec(_name("sched-node"), labels={"test-zone": zone})])
    scheduler = control_plane.start_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    try:
        ns = _name("sched")
        control_plane.create_namespace(ns)
        core = client.CoreV1Api(control_plane.api())
        core.create_namespaced_pod(ns, _pod("p", nodeSelector={"test-zone": zone}))
        wait_until(lambda: _bound_node(core, "p", ns) == node, timeout_s=60)
        wait_until(lambda: core.read_namespaced_pod("p", ns).status.phase == "Running", timeout_s=60)
    finally:
        scheduler.stop()
    assert not scheduler.running


def test_the_projects_scheduler_config_binds_a_regular_pod(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    """manifests/scheduler-config.yaml, only patched by scheduler_config(), is accepted by the real kube-scheduler,
    and its stowage-scheduler profile binds a regular pod while nothing listens at the extender URL."""
    base = yaml.safe_load((REPO / "manifests" / "scheduler-config.yaml").read_text())
    config = control_plane.scheduler_config(base, extender_url="http://127.0.0.1:9")
    assert config["clientConnection"]["kubeconfig"] == str(control_plane.kubeconfig)
    assert config["leaderElection"]["leaderElect"] is False
    assert config["leaderElection"]["resourceName"] == base["leaderElection"]["resourceName"]
    assert config["extenders"] and {e["urlPrefix"] for e in config["extenders"]} == {"http://127.0.0.1:9"}
    assert base["leaderElection"]["leaderElect"] is True  # the original is untouched
    assert config["profiles"] == base["profiles"]

    zone = _name("zone")
    [node] = fake_kubelet.add_nodes([NodeSpec(_name("stowage-node"), labels={"test-zone": zone})])
    scheduler = control_plane.start_scheduler(config, name="stowage-scheduler")
    try:
        ns = _name("stowage")
        control_plane.create_namespace(ns)
        core = client.CoreV1Api(control_plane.api())
        core.create_namespaced_pod(ns, _pod("p", schedulerName="stowage-scheduler", nodeSelector={"test-zone": zone}))
        wait_until(lambda: _bound_node(core, "p", ns) == node, timeout_s=60)
    finally:
        scheduler.stop()


def test_a_scheduler_restarts_independently(control_plane: Plane, fake_kubelet: FakeKubelet) -> None:
    zone = _name("zone")
    [node] = fake_kubelet.add_nodes([NodeSpec(_name("restart-node"), labels={"test-zone": zone})])
    scheduler = control_plane.start_scheduler(None, name="restartable")
    try:
        scheduler.stop()
        ns = _name("restart")
        control_plane.create_namespace(ns)
        core = client.CoreV1Api(control_plane.api())
        core.create_namespaced_pod(ns, _pod("p", nodeSelector={"test-zone": zone}))
        assert _bound_node(core, "p", ns) is None  # nobody schedules while it is down
        scheduler.start()
        wait_until(lambda: _bound_node(core, "p", ns) == node, timeout_s=60)
    finally:
        scheduler.stop()


def test_restart_apiserver_keeps_the_data(control_plane: Plane) -> None:
    ns = _name("restart-api")
    control_plane.create_namespace(ns)
    core = client.CoreV1Api(control_plane.api())
    core.create_namespaced_config_map(ns, {"metadata": {"name": "kept"}, "data": {"k": "v"}})
    port = getattr(control_plane, "port", None)
    control_plane.restart_apiserver()
    assert getattr(control_plane, "port", None) == port
    assert core.read_namespaced_config_map("kept", ns).data == {"k": "v"}


def test_missing_assets_skip_locally_and_fail_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))  # an empty folder
    monkeypatch.delenv("STOWAGE_TEST_KUBECONFIG", raising=False)
    assert find_assets() is None
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"etcd-server.*KUBEBUILDER_ASSETS.*unpack\.sh"):
        start_control_plane(tmp_path_factory)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run"):
        start_control_plane(tmp_path_factory)


def test_an_external_cluster_gives_api_access_only(control_plane: Plane, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs our own control plane to stand in for the external cluster")
    monkeypatch.setenv("STOWAGE_TEST_KUBECONFIG", str(control_plane.kubeconfig))
    external = start_control_plane(tmp_path_factory)
    try:
        assert isinstance(external, ExternalCluster)
        with external.api() as api:
            assert client.CoreV1Api(api).read_namespace("kube-system").metadata.name == "kube-system"
        ns = _name("ext")
        external.create_namespace(ns)
        core = client.CoreV1Api(control_plane.api())
        core.create_namespaced_service_account(ns, {"metadata": {"name": "someone"}})
        token = core.create_namespaced_service_account_token("someone", ns, {"spec": {}}).status.token
        with external.api(external.kubeconfig_for_token(token)) as api:
            review = client.AuthenticationV1Api(api).create_self_subject_review({})
            assert review.status.user_info.username == f"system:serviceaccount:{ns}:someone"
        with pytest.raises(pytest.skip.Exception):
            external.start_scheduler(None)
        with pytest.raises(pytest.skip.Exception):
            external.restart_apiserver()
    finally:
        external.stop()
