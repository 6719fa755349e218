"""Plain pods on a real control plane: the webhook gates (and converts) them, the dispatcher releases them fairly.

The operator serves its webhooks on 127.0.0.1 and writes its webhook configurations; the API server
calls them for every pod of ``schedulerName: stowage-scheduler`` the test (the admin) creates. It runs
with the default settings: between queues only the most deprived compete (``fairness.deprived_queues``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from stowage import labels
from tests.operator.support import NODE_LABEL, OperatorStack, metric, wait_for
from tests.scheduler.stack import Proc
from tests.support.fake_kubelet import ANN_RUN_SECONDS

pytestmark = pytest.mark.timeout(600)


NAMESPACE_PREFIX = "plain"


def plain_pod(name: str, stack: OperatorStack, *, cpu: str = "500m", memory: str = "512Mi", queue: str | None = None,
              opportunistic: str | None = None, run_s: float | None = None, node: str | None = None,
              scheduler: str = labels.SCHEDULER_NAME) -> dict[str, Any]:
    pod_labels = {}
    if queue:
        pod_labels[labels.LABEL_QUEUE] = queue
    if opportunistic:
        pod_labels[labels.LABEL_OPPORTUNISTIC] = opportunistic
    annotations = {ANN_RUN_SECONDS: str(run_s)} if run_s is not None else {}
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}}],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {NODE_LABEL: stack.id}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": pod_labels, "annotations": annotations}, "spec": spec}


def _gated(pod: client.V1Pod) -> bool:
    return any(g.name == labels.GATE_ADMISSION for g in pod.spec.scheduling_gates or [])


def test_a_plain_labelled_pod_is_gated_converted_released_and_bound(operator_stack: OperatorStack, operator: Proc,
                                                                     ns: str) -> None:
    stack = operator_stack
    if not stack.harvest:
        pytest.skip("a converted (opportunistic) pod binds only with harvestable capacity: needs Prometheus")
    created = stack.core.create_namespaced_pod(ns, plain_pod("opp", stack, opportunistic="true", queue="default"))
    # What the webhook made of it, as the API server stored it.
    assert _gated(created), "gated at admission"
    assert created.metadata.labels[labels.LABEL_CLASS] == "opportunistic"
    assert created.metadata.labels[labels.LABEL_QUEUE] == "default"
    assert created.spec.priority_class_name == labels.OPPORTUNISTIC_PRIORITY_CLASS
    requests = created.spec.containers[0].resources.requests
    assert (requests["cpu"], requests["memory"], requests[labels.HARVEST_RESOURCE]) == ("0", "0", "1")
    assert json.loads(created.metadata.annotations[labels.ANN_DEMAND]) == {"cpu": "500m", "memory": "512Mi"}

    def bound() -> client.V1Pod | None:
        pod = stack.core.read_namespaced_pod("opp", ns)
        return pod if pod.spec.node_name else None

    pod = wait_for(bound, 180, "the converted pod released and bound")
    assert not _gated(pod) and pod.spec.node_name in stack.nodes
    text = stack.operator_metrics(operator)
    assert metric(text, "stowage_dispatch_total", {"class": "opportunistic"}) >= 1
    assert metric(text, "stowage_queue_wait_seconds_count", {"queue": "default", "kind": "pod"}) >= 1


def test_plain_pods_are_released_in_fair_order(operator_stack: OperatorStack, operator: Proc, ns: str) -> None:
    """Queue plain-a's pods are created first, plain-b's after; DRF still releases them alternately."""
    stack = operator_stack
    stack.create_queue("plain-a", weight=1)
    stack.create_queue("plain-b", weight=1)
    # Fill every node first (pods bound by name, outside Stowage), so the gated pods all wait together.
    for i, node in enumerate(stack.nodes):
        stack.core.create_namespaced_pod(ns, plain_pod(f"blocker-{i}", stack, cpu="7", memory="1Gi", node=node,
                                                       scheduler="default-scheduler"))
    wait_for(lambda: all(p.status.phase == "Running" for p in stack.pods(ns)), 120, "the blockers running")
    for i in range(8):
        stack.core.create_namespaced_pod(ns, plain_pod(f"a-{i}", stack, cpu="2", memory="1Gi", queue="plain-a"))
    for i in range(8):
        stack.core.create_namespaced_pod(ns, plain_pod(f"b-{i}", stack, cpu="2", memory="1Gi", queue="plain-b"))
    pods = {p.metadata.name: p for p in stack.pods(ns)}
    assert all(_gated(pods[f"{q}-{i}"]) for q in "ab" for i in range(8)), "every plain pod waits behind the gate"
    assert all(pods[f"a-{i}"].metadata.labels[labels.LABEL_CLASS] == "regular" for i in range(8))

    for i in range(len(stack.nodes)):
        stack.core.delete_namespaced_pod(f"blocker-{i}", ns, grace_period_seconds=0)
    # Room for three 2-core pods per node: nine of the sixteen are released, in DRF order.
    released = wait_for(lambda: [p for p in stack.pods(ns) if p.metadata.name[0] in "ab" and p.spec.node_name]
                        if sum(1 for p in stack.pods(ns) if p.spec.node_name and p.metadata.name[0] in "ab") >= 9
                        else None, 180, "nine plain pods released and bound")
    count = {q: sum(1 for p in released if p.metadata.name.startswith(f"{q}-")) for q in "ab"}
    assert abs(count["a"] - count["b"]) <= 1, f"released {count}: equal weights share alternately"
    still = [p for p in stack.pods(ns) if p.metadata.name[0] in "ab" and not p.spec.node_name]
    assert still and all(_gated(p) for p in still), "what does not fit stays gated (never released beyond room)"
