"""A real control plane (etcd, kube-apiserver, kube-controller-manager), the fake kubelet and one
``stowage node-monitor`` process per test (``monitor_for``).

Fixtures ``control_plane`` / ``fake_kubelet`` come from :mod:`tests.support.controlplane_plugin`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.node_monitor_real.harness import Cluster, NodeMonitor, ensure_priority_class, monitor_kubeconfig
from tests.support.controlplane import ControlPlane, ExternalCluster
from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401
from tests.support.fake_kubelet import FakeKubelet, NodeSpec

Plane = ControlPlane | ExternalCluster

#: Allocatable below capacity, as on a real node: the threshold is 0.95 × allocatable = 9.5Gi.
CAPACITY = {"cpu": "8", "memory": "12Gi", "pods": "110"}
ALLOCATABLE = {"cpu": "7500m", "memory": "10Gi", "pods": "110"}


@pytest.fixture(scope="session")
def monitor_kubeconfig_path(control_plane: Plane) -> Path:  # noqa: F811
    """The node monitor's credentials: a ServiceAccount bound to the ClusterRole the docs give, nothing more."""
    api = control_plane.api()
    ensure_priority_class(api)
    return monitor_kubeconfig(control_plane, api, secrets.token_hex(3))


@pytest.fixture
def cluster(control_plane: Plane, request: pytest.FixtureRequest) -> Cluster:  # noqa: F811
    """A fresh namespace for this test."""
    ns = f"nmr-{request.node.name[5:25].replace('_', '-').strip('-')}-{secrets.token_hex(3)}".lower()
    control_plane.create_namespace(ns)
    return Cluster(control_plane.api(), ns)


@pytest.fixture
def nodes(fake_kubelet: FakeKubelet) -> list[str]:  # noqa: F811
    """Two fake nodes (capacity 12Gi, allocatable 10Gi memory): the monitor watches the first only."""
    suffix = secrets.token_hex(3)
    return fake_kubelet.add_nodes([NodeSpec(f"nmr-{suffix}-{i}", capacity=dict(CAPACITY),
                                            allocatable=dict(ALLOCATABLE)) for i in (0, 1)])


@pytest.fixture
def monitor_for(fake_kubelet: FakeKubelet, monitor_kubeconfig_path: Path,  # noqa: F811
                tmp_path: Path) -> Iterator[Callable[..., NodeMonitor]]:
    """``monitor_for(node, *extra_args)`` starts ``stowage node-monitor`` for ``node``; stopped on teardown."""
    started: list[NodeMonitor] = []

    def start(node: str, *extra_args: str) -> NodeMonitor:
        log = tmp_path / f"node-monitor-{node}-{len(started)}.log"
        monitor = NodeMonitor(node, monitor_kubeconfig_path, fake_kubelet.cgroup_dir(node),
                              fake_kubelet.proc_dir(node), log, extra_args)
        started.append(monitor)
        return monitor.start()

    try:
        yield start
    finally:
        for monitor in started:
            monitor.stop()
