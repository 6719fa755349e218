"""Same-node promotion on the real control plane (issue #32 §2, UBIS §IV-D), the whole stack on one fake node.

The test control plane runs with ``InPlacePodVerticalScaling`` on (``tests.support.controlplane.FEATURE_GATES``),
and the fake kubelet actuates resizes as a v1.30 kubelet does (``status.containerStatuses[].allocatedResources``
and ``.resources`` take the spec's resources; ``status.resize`` is cleared).

One node of 7.5 allocatable cores; every pod uses a steady 0.3 of its demand (the harvested room must not hang
on the usage model's draws). Three regular pods of 2.4 cores fill its regular room (0.3 left); two
opportunistic pods of 1.5 cores (``stowage.io/opportunistic: "true"``, requests only, so converted to a 1m cpu
request: Burstable) run on its harvested room, the older one first. One regular pod finishes (the fake kubelet
ends it now): 2.7 cores of regular room, enough for one of the two. Within two dispatcher passes the older is
promoted in place: its requests are what it asked before the conversion, its class is regular, an Event
``Promoted`` says so, and the operator counts it. The younger stays opportunistic. Then the node's usage goes
×5 until the node monitor relieves the contention: it evicts the younger (it evicts, so the spike is real) and never
the promoted pod. The extender's preempt verb on a promoted pod is tested without a cluster
(tests/extender/test_conformance.py), as is the monitor's resourceVersion guard (tests/node_monitor/test_kube_api.py).
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from stowage import labels
from tests.support.stack import WholeStack, metric, wait_for
from tests.system.workloads import plain_pod

pytestmark = pytest.mark.timeout(900)

LONG_S = 3600  # the pods here run until the test ends them
#: Not exactly full: kube-scheduler counts a converted requests-only pod's 1m of cpu (admission.convert_opportunistic).
REGULAR_CPU, OPPORTUNISTIC_CPU = "2400m", "1500m"
#: Every pod uses this fraction of its demand: harvested room for both opportunistic pods whatever the Beta draws
#: (at the model's draws three regular pods can use the node's whole harvestable room for minutes).
STEADY = 0.3
SPIKE = 5.0  # usage × 5: 1.5 × the 7.8 cores requested, far above T_preempt



def pod_of(stack: WholeStack, ns: str, name: str) -> client.V1Pod:
    return stack.core.read_namespaced_pod(name, ns)


def running(stack: WholeStack, ns: str, name: str) -> bool:
    return pod_of(stack, ns, name).status.phase == "Running"


def events(stack: WholeStack, ns: str, name: str) -> list[client.CoreV1Event]:
    return list(stack.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items)


def evicted(stack: WholeStack, ns: str, name: str) -> bool:
    """The pod was evicted: gone, or on its way out, or Failed."""
    try:
        pod = pod_of(stack, ns, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return pod.metadata.deletion_timestamp is not None or pod.status.phase == "Failed"


def test_a_running_opportunistic_pod_is_promoted_in_place_and_then_protected(one_node: WholeStack) -> None:
    stack = one_node
    assert stack.load is not None and stack.kubelet is not None
    (node,) = stack.nodes
    stack.load.steady(node, STEADY)
    text = stack.operator_metrics()
    assert metric(text, labels.METRICS.PROMOTION_ENABLED) == 1.0, "the test control plane has the gate on"
    stack.create_queue("promo")
    with stack.namespace("promo") as ns:
        regular = ["reg-0", "reg-1", "reg-2"]
        for name in regular:
            stack.core.create_namespaced_pod(ns, plain_pod(stack, name, queue="promo", run_s=LONG_S,
                                                           cpu=REGULAR_CPU, memory="4Gi"))
        wait_for(lambda: all(running(stack, ns, n) for n in regular), 180, "three regular pods filling the node")
        opportunistic = {labels.LABEL_OPPORTUNISTIC: "true"}
        for name in ("opp-old", "opp-young"):  # one after the other: "old" started first
            stack.core.create_namespaced_pod(ns, plain_pod(stack, name, queue="promo", run_s=LONG_S,
                                                           cpu=OPPORTUNISTIC_CPU, memory="1Gi",
                                                           extra_labels=opportunistic))
            wait_for(lambda name=name: running(stack, ns, name), 240,
                     f"{name} running on harvested room (the node has no regular room)")
        old = pod_of(stack, ns, "opp-old")
        assert old.metadata.labels[labels.LABEL_CLASS] == "opportunistic"
        assert old.spec.containers[0].resources.requests == {"cpu": "1m", "memory": "0",
                                                            labels.HARVEST_RESOURCE: "1"}
        assert json.loads(old.metadata.annotations[labels.ANN_REQUESTS]) == {
            "main": {"cpu": OPPORTUNISTIC_CPU, "memory": "1Gi"}}
        assert old.status.qos_class == "Burstable"

        # A regular pod finishes: 2.7 cores of regular room, enough for one of the two.
        assert stack.kubelet.finish_now(ns, "reg-0") == ["reg-0"]
        wait_for(lambda: pod_of(stack, ns, "reg-0").status.phase == "Succeeded", 60, "reg-0 to finish")

        def promoted() -> client.V1Pod | None:
            pod = pod_of(stack, ns, "opp-old")
            return pod if pod.metadata.labels.get(labels.LABEL_CLASS) == "regular" else None

        try:
            pod = wait_for(promoted, 120, "opp-old promoted", interval_s=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{stack.logs()}") from None
        # Its requests are what it asked before the conversion; the extended resource stays (not resizable);
        # its QoS class and priority class are what they were (both immutable).
        assert pod.spec.containers[0].resources.requests == {"cpu": OPPORTUNISTIC_CPU, "memory": "1Gi",
                                                            labels.HARVEST_RESOURCE: "1"}
        assert pod.status.qos_class == "Burstable"
        assert pod.spec.priority_class_name == labels.OPPORTUNISTIC_PRIORITY_CLASS and pod.spec.priority < 0
        assert pod.metadata.uid == old.metadata.uid and pod.status.phase == "Running", "in place, not restarted"
        (event,) = [e for e in events(stack, ns, "opp-old") if e.reason == "Promoted"]
        assert event.type == "Normal" and node in event.message
        young = pod_of(stack, ns, "opp-young")
        assert young.metadata.labels[labels.LABEL_CLASS] == "opportunistic", "1.2 cores left: no room for the second"

        # The fake kubelet actuated the resize as a v1.30 kubelet does.
        def actuated() -> bool:
            status = pod_of(stack, ns, "opp-old").status
            statuses = status.container_statuses or []
            return bool(statuses) and status.resize is None and \
                (statuses[0].allocated_resources or {}).get("cpu") == OPPORTUNISTIC_CPU
        wait_for(actuated, 60, "the resize actuated (allocatedResources, status.resize cleared)")
        assert metric(stack.operator_metrics(), labels.METRICS.PROMOTIONS_TOTAL) >= 1.0

        # Contention: the node monitor evicts the opportunistic pod, never the promoted one.
        stack.load.spike(node, SPIKE)
        try:
            wait_for(lambda: evicted(stack, ns, "opp-young"), 180, "opp-young evicted under the spike",
                     interval_s=1.0)
            time.sleep(10)  # more ticks of sustained contention, with nothing opportunistic left to evict
        finally:
            stack.load.spike(node, None)
        pod = pod_of(stack, ns, "opp-old")
        assert pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
        assert not [e for e in events(stack, ns, "opp-old") if e.reason == "StowageEvicted"]
        assert [e for e in events(stack, ns, "opp-young") if e.reason == "StowageEvicted"]
        assert all(running(stack, ns, n) for n in ("reg-1", "reg-2")), "no regular pod evicted"
