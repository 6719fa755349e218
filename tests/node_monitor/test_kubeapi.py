"""Kubernetes access: kubeconfig loading errors, and the pod list+watch against kmock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from stowage.node_monitor.kubeapi import KubeClient, load_config
from stowage.node_monitor.pods import PodStore, PodWatcher

from stowage.errors import ConfigError
from tests.support.kube import gone_once, kube_emulator, wait_until

from .emulator import write_kubeconfig


def _kubeconfig(tmp_path: Path, user: dict | None = None, cluster: dict | None = None, context: str = "c") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "current-context": context,
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": cluster if cluster is not None else {"server": "https://10.0.0.1:6443",
                                                                                   "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user or {"token": "t"}}],
    }))
    return path


def test_a_kubeconfig_with_a_token_is_loaded(tmp_path: Path) -> None:
    config = load_config(_kubeconfig(tmp_path))
    assert config.server == "https://10.0.0.1:6443" and config.ssl_context is False and config.bearer() == "t"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param({"context": "missing"}, "context 'missing' not found", id="unknown-context"),
        pytest.param({"cluster": {}}, "has no server", id="cluster-without-server"),
        pytest.param({"user": {"exec": {"command": "aws"}}}, "exec/auth-provider plugin", id="exec-plugin"),
    ],
)
def test_kubeconfig_problems_are_named(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_config(_kubeconfig(tmp_path, **kwargs))


def test_an_unreadable_kubeconfig_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--kubeconfig .*cannot read"):
        load_config(tmp_path / "absent")


def test_outside_a_cluster_the_default_explains_the_alternatives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="--no-kubernetes"):
        load_config(None)


def _pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "w", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}


def test_the_watcher_follows_this_nodes_pods_and_relists_after_an_expired_watch(tmp_path: Path) -> None:
    with kube_emulator() as handle:
        core = k8s.CoreV1Api(handle.api)
        core.create_namespaced_pod("w", _pod("before", "n1"))
        api = KubeClient(load_config(write_kubeconfig(tmp_path / "kc", handle.url)))
        store, stop = PodStore("n1"), threading.Event()
        relists: list[int] = []
        gone_once(handle, "pods")  # the first watch ends with 410 Gone: the watcher must list again
        watcher = PodWatcher(api, store, stop, on_relist=lambda: relists.append(1), backoff_max_s=0.2)
        watcher.start()
        try:
            wait_until(lambda: "uid-before" in store.snapshot() and len(relists) >= 2)
            core.create_namespaced_pod("w", _pod("added", "n1"))
            core.create_namespaced_pod("w", _pod("elsewhere", "n2"))
            wait_until(lambda: "uid-added" in store.snapshot())
            core.delete_namespaced_pod("before", "w")
            wait_until(lambda: "uid-before" not in store.snapshot())
            assert set(store.snapshot()) == {"uid-added"}  # the n2 pod was never kept
        finally:
            stop.set()
            api.close()  # interrupts the open watch stream
            watcher.join(10)
        assert not watcher.is_alive()
