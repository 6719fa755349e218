"""manifests/scheduler-config.yaml matches the extender it configures and kube-scheduler's v1 rules."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from stowage.extender.app import create_app

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel
from stowage.labels import HARVEST_RESOURCE, SCHEDULER_NAME
from stowage.prom import Utilization

CONFIG = Path(__file__).resolve().parents[2] / "manifests" / "scheduler-config.yaml"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load(CONFIG.read_text())


def test_it_is_a_v1_scheduler_configuration_with_the_stowage_profile(config: dict[str, Any]) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == [SCHEDULER_NAME]


def test_only_opportunistic_pods_reach_the_harvest_check_and_it_fails_closed(config: dict[str, Any]) -> None:
    harvest, preempt = config["extenders"]
    assert harvest["nodeCacheCapable"] is True and harvest["ignorable"] is False  # down or Error → pod waits
    assert harvest["managedResources"] == [{"name": HARVEST_RESOURCE, "ignoredByScheduler": True}]
    assert harvest["weight"] > 0  # validation requires it whenever prioritizeVerb is set
    assert "preemptVerb" not in harvest and "bindVerb" not in harvest
    # preemption: called only when a regular pod preempts; ignorable, so a dead extender never blocks it
    assert set(preempt) == {"urlPrefix", "preemptVerb", "nodeCacheCapable", "ignorable", "httpTimeout"}
    assert preempt["ignorable"] is True and preempt["urlPrefix"] == harvest["urlPrefix"]
    for ext in (harvest, preempt):
        timeout = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", ext["httpTimeout"])
        assert timeout is not None
        seconds = float(timeout[1]) / (1000 if timeout[2] == "ms" else 1)
        assert 0 < seconds < 5  # below kube-scheduler's 5 s default, above our latency by orders of magnitude
        assert ext["urlPrefix"].startswith("http")


def test_every_configured_verb_is_served_by_the_app(config: dict[str, Any]) -> None:
    app = create_app(StowageSettings(), ClusterModel(), Utilization(None))
    served = {route.path for route in app.routes if "POST" in getattr(route, "methods", set())}
    verbs = [ext[key] for ext in config["extenders"] for key in ("filterVerb", "prioritizeVerb", "preemptVerb")
             if key in ext]
    assert sorted(verbs) == ["filter", "preempt", "prioritize"]
    for verb in verbs:
        assert "/" + verb in served
