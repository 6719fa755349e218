"""The real scheduling path for this folder: control plane, fake kubelet, node monitors, Prometheus, extender,
fault proxy and kube-scheduler from ``manifests/scheduler-config.yaml`` (:mod:`tests.scheduler.stack`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.scheduler.fault_proxy import Mode
from tests.scheduler.stack import Stack
from tests.support.controlplane import ControlPlane
from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:  # noqa: F811
    """Every part of the scheduling path running, once per module (three fake nodes)."""
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control of kube-scheduler (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    with Stack(control_plane, tmp_path_factory.mktemp("scheduler-stack")) as running:
        yield running


@pytest.fixture
def ns(stack: Stack) -> Iterator[str]:
    """A namespace of its own; afterwards its pods are gone and every part of the stack is healthy again.

    A test that failed half-way (extender killed, Prometheus stopped, proxy injecting faults) leaves the
    next test a working stack: the proxy passes through again, stopped processes start again, and the
    wait ends when every node shows fresh utilization with room to harvest (usage is a 15-s maximum, so a
    node a test loaded needs that long to look idle again).
    """
    with stack.namespace() as name:
        yield name
    assert stack.proxy is not None and stack.extender is not None and stack.prometheus is not None
    stack.set_proxy_mode(Mode.PASS)
    if not stack.prometheus.running:
        stack.start_prometheus()
    if not stack.extender.running:
        stack.start_extender()
    with contextlib.suppress(Exception):
        stack.use_scheduler(node_cache_capable=True)
    stack.wait_for_fresh_utilization(timeout_s=180.0, min_memory=10 * 2**30)
