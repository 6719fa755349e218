"""The real kube-scheduler (``.envtest/kube-scheduler``, v1.30) loads every scheduler configuration the chart renders.

kube-scheduler validates its configuration strictly at start (unknown plugins, bad weights, extender
fields): a config it starts with and schedules from is the check, not a field list. The chart-installed
config under the scheduler's own ServiceAccount is exercised in test_install.py; here, non-default values
and the existing-scheduler example, with the admin kubeconfig (``ControlPlane.start_scheduler`` points
``clientConnection`` at it and turns leader election off; everything else is kept as rendered).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.chart.render import REPO, docs_of_kind, render_documents
from tests.support.controlplane import ControlPlane

pytestmark = pytest.mark.usefixtures("helm_binary")

CONFIGS = {
    "defaults": {},
    "every-score-plugin-and-system-spreading": {
        "scheduler.scorePlugins": {"ImageLocality": 1, "NodeResourcesBalancedAllocation": 1, "VolumeBinding": 1},
        "scheduler.systemDefaultSpreading": True, "scheduler.percentageOfNodesToScore": 0},
    "other-extender-port-and-timeout": {"extender.port": 18888, "extender.httpTimeout": "500ms", "extender.weight": 5,
                                        "scheduler.leaderElection.enabled": False},
}


def _rendered_config(values: dict[str, Any]) -> dict[str, Any]:
    (cm,) = [d for d in docs_of_kind(render_documents(values), "ConfigMap")
             if d["metadata"]["name"].endswith("-scheduler-config")]
    return yaml.safe_load(cm["data"]["config.yaml"])


@pytest.fixture
def plane(control_plane: Any) -> ControlPlane:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control of kube-scheduler (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    return control_plane


@pytest.mark.parametrize("name", list(CONFIGS))
def test_real_kube_scheduler_starts_with_the_rendered_config(plane: ControlPlane, name: str) -> None:
    handle = plane.start_scheduler(_rendered_config(CONFIGS[name]), name=f"chart-{name}")
    try:
        assert handle.running
        assert "stowage-scheduler" in handle.config_path.read_text()
    finally:
        handle.stop()


def test_real_kube_scheduler_starts_with_the_existing_scheduler_example(plane: ControlPlane) -> None:
    config = yaml.safe_load((REPO / "manifests" / "examples" / "existing-scheduler.yaml").read_text())
    handle = plane.start_scheduler(config, name="chart-existing-scheduler")
    try:
        assert handle.running
    finally:
        handle.stop()


def test_the_check_has_teeth_a_config_kube_scheduler_refuses_fails_to_start(plane: ControlPlane) -> None:
    config = _rendered_config({})
    config["profiles"][0]["plugins"]["score"]["enabled"].append({"name": "NoSuchPlugin", "weight": 1})
    with pytest.raises(RuntimeError, match="NoSuchPlugin"):
        plane.start_scheduler(config, name="chart-refused", ready_timeout_s=30)
