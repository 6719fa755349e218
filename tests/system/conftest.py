"""The whole stack on a real control plane (:class:`tests.support.stack.WholeStack`), once per module.

``system`` is the running stack; ``one_node`` the same on a single fake node; ``healthy`` (per test) hands a test
a stack whose every component runs and harvests, whatever the previous test killed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.chart.render import find_helm
from tests.support.controlplane import ControlPlane
from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401
from tests.support.prometheus import prometheus_binary
from tests.support.stack import WholeStack


def _stack(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory, name: str,
           **kwargs: int) -> Iterator[WholeStack]:
    if not isinstance(plane, ControlPlane):
        pytest.skip("needs process control (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    prometheus_binary()  # skips with the how-to (fails under CI) when Prometheus is missing
    if find_helm() is None:
        reason = "helm not found: run `bash scripts/setup.sh --test` (it unpacks .tools/helm/helm) or set HELM"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the whole-stack tests: {reason}", pytrace=False)
        pytest.skip(reason)
    with WholeStack(plane, tmp_path_factory.mktemp(name), **kwargs) as stack:
        yield stack


@pytest.fixture(scope="module")
def system(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WholeStack]:  # noqa: F811
    """Every component running from the chart, on three fake nodes."""
    yield from _stack(control_plane, tmp_path_factory, "system")


@pytest.fixture(scope="module")
def one_node(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WholeStack]:  # noqa: F811
    """Every component running from the chart, on one fake node."""
    yield from _stack(control_plane, tmp_path_factory, "one-node", node_count=1)


@pytest.fixture
def healthy(system: WholeStack) -> WholeStack:
    """The stack with every component running and every node harvesting (a previous test may have killed one)."""
    system.heal()
    return system
