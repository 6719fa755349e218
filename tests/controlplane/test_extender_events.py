"""The extender posts its per-pod Event to a real API server: what a user sees in ``kubectl describe pod``."""

from __future__ import annotations

import httpx
import pytest
from kubernetes import client
from stowage.extender.events import EVENT_NOT_PLACED
from stowage.extender.messages import REASONS
from stowage.extender.server import ExtenderRuntime

from stowage.config import StowageSettings
from stowage.kube.api import KubeClient, load_config
from tests.extender.objects import opportunistic_pod
from tests.support.kube import wait_until
from tests.support.serving import serving

pytestmark = pytest.mark.timeout(120)


def test_a_pod_placed_nowhere_gets_one_event_with_the_numbers(control_plane, fake_kubelet) -> None:
    (node_name,) = fake_kubelet.add_nodes(["events-node"])
    control_plane.create_namespace("events-test")
    core = client.CoreV1Api(control_plane.api())
    template = opportunistic_pod("etl-nowhere", cpu="1", memory="1Gi")
    container = template["spec"]["containers"][0]
    pod = {
        "metadata": {k: v for k, v in template["metadata"].items() if k in ("name", "labels", "annotations")},
        "spec": {"schedulerName": template["spec"]["schedulerName"],
                 "containers": [{"name": container["name"], "image": container["image"],
                                 "resources": container["resources"]}]},
    }
    created = core.create_namespaced_pod("events-test", pod)
    stored = control_plane.api().sanitize_for_serialization(created)

    api = KubeClient(load_config(control_plane.kubeconfig))
    runtime = ExtenderRuntime(StowageSettings(), api, prometheus_url=None)  # no Prometheus: nothing harvestable
    try:
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, 60)
            body = {"Pod": stored, "Nodes": None, "NodeNames": [node_name]}
            answer = http.post(f"{url}/filter", json=body).json()
            assert answer["NodeNames"] == []
            assert answer["FailedNodes"] == {node_name: REASONS["utilization-unavailable"]}

            def events() -> list:
                return [e for e in core.list_namespaced_event("events-test").items
                        if e.involved_object.name == "etl-nowhere" and e.reason == EVENT_NOT_PLACED]

            wait_until(lambda: len(events()) == 1, 60)
            (event,) = events()
            assert event.type == "Warning" and event.involved_object.uid == created.metadata.uid
            assert "needs cpu 1, memory 1.0Gi (harvested capacity)" in event.message
            assert "no harvesting while utilization is unavailable" in event.message
            metrics = http.get(f"{url}/metrics").text
            assert 'stowage_extender_events_total{outcome="posted"} 1.0' in metrics
    finally:
        api.close()
        # a pending stowage-scheduler pod left behind would reach every later test's scheduler and extender
        core.delete_namespaced_pod("etl-nowhere", "events-test", grace_period_seconds=0)
