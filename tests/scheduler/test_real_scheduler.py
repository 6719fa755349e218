"""The real kube-scheduler (v1.30, ``manifests/scheduler-config.yaml``) calling the real ``stowage extender``.

Real processes, real outcomes: pods are bound (or not) by kube-scheduler, utilization comes from node
monitors reading the fake kubelet's cgroup trees through a real Prometheus, and the extender is reached
through a fault proxy that can pass, fail or hang. No timing assertion: every wait is for a condition,
with a deadline that only bounds a broken test; "stays unbound" is checked over a bounded period.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from stowage.labels import ANN_NUDGED_AT
from tests.scheduler.fault_proxy import Mode
from tests.scheduler.stack import (
    CONTENTION,
    HARVEST_CAPACITY,
    NO_UTILIZATION,
    Stack,
    opportunistic_pod,
    preemption_scenario,
    regular_pod,
    wait_for,
)
from tests.support.controlplane import REPO

pytestmark = pytest.mark.timeout(900)

GI = 2**30
GOLDEN = REPO / "tests" / "extender" / "golden"
#: How long a pod must stay unbound while the extender cannot approve it (a bounded check, not a timing claim).
HOLD_S = 15.0
#: How long held pods may take to bind once the extender sees fresh samples again: a safety deadline for a broken
#: test, well inside the 5 minutes after which kube-scheduler would move them back on its own (the Prometheus
#: test's docstring), so a pass cannot come from that retry.
NUDGE_DEADLINE_S = 90.0


def golden_keys(name: str) -> set[str]:
    """Top-level keys of a golden request body (``tests/extender/golden/<name>.json``)."""
    return set(json.loads((GOLDEN / f"{name}.json").read_text())["body"])


def bodies_for(stack: Stack, path: str, namespace: str, pod: str) -> list[dict[str, Any]]:
    """Request bodies the proxy forwarded to ``path`` about ``namespace/pod``."""
    assert stack.proxy is not None
    out = []
    for body in stack.proxy.snapshot(path):
        meta = (body.get("Pod") or {}).get("metadata") or {}
        if meta.get("namespace") == namespace and meta.get("name") == pod:
            out.append(body)
    return out


def mode_id(node_cache_capable: bool) -> str:
    return "NodeNames" if node_cache_capable else "Nodes"


# --- regular pods ------------------------------------------------------------------------------------


def test_regular_pods_bind_without_reaching_the_extender(stack: Stack, ns: str) -> None:
    before = stack.filter_count()
    received = dict(stack.proxy.received)
    names = [f"reg-{i}" for i in range(4)]
    for name in names:
        stack.create(ns, regular_pod(name, cpu="500m", memory="512Mi", stack_id=stack.id))

    placed = stack.wait_bound(ns, names)

    assert set(placed.values()) <= set(stack.nodes)
    # managedResources: only pods requesting stowage.io/harvested reach extender 1; regular pods never do.
    assert stack.filter_count() == before
    assert stack.proxy.received.get("/filter", 0) == received.get("/filter", 0)
    assert stack.proxy.received.get("/prioritize", 0) == received.get("/prioritize", 0)


# --- opportunistic pods: harvestable capacity, both nodeCacheCapable modes -----------------------------


@pytest.mark.parametrize("node_cache_capable", [True, False], ids=mode_id)
def test_opportunistic_pods_bind_only_where_harvestable_capacity_fits(
    stack: Stack, ns: str, node_cache_capable: bool
) -> None:
    stack.use_scheduler(node_cache_capable=node_cache_capable)
    loaded = stack.nodes[0]
    # A regular pod requesting and using 12Gi of node 0's 15Gi allocatable: A_opp = 0.9·15 − 12 − … < 1.5Gi.
    stack.create(ns, regular_pod("load", cpu="1", memory="12Gi", stack_id=stack.id, node=loaded))
    stack.kubelet.set_usage(f"{ns}/load", {"cpu": 1.0, "memory": 12 * GI})
    stack.wait_bound(ns, "load")
    wait_for(lambda: stack.harvestable().get((loaded, "memory"), 99 * GI) < 2 * GI, 120,
             f"the extender to see {loaded} loaded (harvestable memory < 2Gi)")

    # 4Gi fits only on the other nodes. In-tree MostAllocated alone would prefer the loaded node.
    stack.create(ns, opportunistic_pod("fits-elsewhere", cpu="1", memory="4Gi", stack_id=stack.id))
    node = stack.wait_bound(ns, "fits-elsewhere")["fits-elsewhere"]
    assert node != loaded

    asked = bodies_for(stack, "/filter", ns, "fits-elsewhere")
    assert asked, "kube-scheduler sent no filter request for the opportunistic pod"
    if node_cache_capable:
        assert asked[0]["Nodes"] is None and loaded in asked[0]["NodeNames"]
    else:
        assert asked[0]["NodeNames"] is None and loaded in [n["metadata"]["name"] for n in asked[0]["Nodes"]["items"]]
    answers = [a for b, _, a in stack.proxy.exchanges("/filter") if b in asked]
    assert HARVEST_CAPACITY in answers[0]["FailedNodes"][loaded]
    # The live bodies have the golden ones' top-level keys (tests/extender/golden, recorded from v1.30).
    mode = "names" if node_cache_capable else "nodes"
    assert set(asked[0]) == golden_keys(f"{mode}_filter")
    prioritized = bodies_for(stack, "/prioritize", ns, "fits-elsewhere")
    if prioritized:  # not sent when a single node is left
        assert set(prioritized[0]) == golden_keys(f"{mode}_prioritize")

    # Regular pods bind in this mode too, without the extender.
    filters = stack.filter_count()
    stack.create(ns, regular_pod("regular", stack_id=stack.id))
    stack.wait_bound(ns, "regular")
    assert stack.filter_count() == filters

    # 14Gi is more than 0.9 × 15Gi anywhere: Pending, and kube-scheduler's event says why.
    stack.create(ns, opportunistic_pod("too-big", cpu="1", memory="14Gi", stack_id=stack.id))
    message = stack.wait_event(ns, "too-big", HARVEST_CAPACITY)
    assert f"0/{len(stack.nodes)} nodes are available" in message
    assert stack.node_of(ns, "too-big") is None


# --- preemption -----------------------------------------------------------------------------------------


def test_high_priority_regular_pod_preempts_through_default_preemption_and_the_preempt_verb(
    stack: Stack, ns: str
) -> None:
    stack.proxy.clear()
    victim, node = preemption_scenario(stack, ns)

    # The victim was preempted by kube-scheduler (its Preempted event), then deleted (the fake kubelet
    # finishes the graceful deletion).
    wait_for(lambda: stack.node_of(ns, victim) is None, 120, f"victim {victim} deleted")
    stack.wait_event(ns, victim, "Preempted by", reason="Preempted")
    assert stack.node_of(ns, "vip") == node
    # Extender 2 (preempt only, ignorable) was asked, with UIDs (nodeCacheCapable: true), and kept the node.
    preempts = bodies_for(stack, "/preempt", ns, "vip")
    assert preempts, "kube-scheduler did not call the preempt verb"
    body = preempts[0]
    assert body["NodeNameToVictims"] is None and node in body["NodeNameToMetaVictims"]
    assert set(body) == golden_keys("names_preempt")
    status, answer = next((s, a) for b, s, a in stack.proxy.exchanges("/preempt") if b == body)
    assert status == 200 and node in answer["NodeNameToMetaVictims"]


# --- fail closed ----------------------------------------------------------------------------------------


def test_prometheus_stopped_holds_opportunistic_pods_and_not_regular_ones(stack: Stack, ns: str) -> None:
    """Without Prometheus opportunistic pods wait and regular ones bind; once the samples are fresh again the
    extender nudges each held pod (``stowage.io/nudged-at``) and it binds, with no bound pod deleted.

    What tells the nudge from kube-scheduler's own retry: v1.30 moves back only the pods held longer than
    ``--pod-max-in-unschedulable-pods-duration`` (5 minutes here, kube-scheduler's default; the chart's 1 s),
    and no bound pod is deleted. So the held pods must carry the annotation, which nothing else writes, and bind
    within ``NUDGE_DEADLINE_S`` of the extender seeing fresh samples: a safety deadline for a broken test, far
    inside those 5 minutes, not a claim about speed. How long the wait really is is measured by
    ``tests/scheduler/bench_recovery.py``.
    """
    stack.stop_prometheus()
    wait_for(lambda: all(stack.harvestable().get((n, "memory"), 1.0) == 0.0 for n in stack.nodes), 120,
             "the extender to harvest nothing without Prometheus")

    held = ["held-0", "held-1"]
    for name in held:
        stack.create(ns, opportunistic_pod(name, cpu="500m", memory="1Gi", stack_id=stack.id))
    stack.create(ns, regular_pod("regular", stack_id=stack.id))

    stack.wait_bound(ns, "regular")
    for name in held:
        message = stack.wait_event(ns, name, NO_UTILIZATION)
        assert f"{len(stack.nodes)} {NO_UTILIZATION}" in message
    stack.assert_stays_unbound(ns, held, 5.0)
    assert not any(stack.annotations(ns, name).get(ANN_NUDGED_AT) for name in held)
    patched = stack.nudges_total("patched")

    stack.start_prometheus()
    stack.wait_for_fresh_utilization()
    deadline = time.monotonic() + NUDGE_DEADLINE_S
    wait_for(lambda: all(stack.annotations(ns, name).get(ANN_NUDGED_AT) for name in held),
             deadline - time.monotonic(), f"the extender's {ANN_NUDGED_AT} annotation on {held}")
    stack.wait_bound(ns, held, timeout_s=max(deadline - time.monotonic(), 0.0))
    assert stack.nudges_total("patched") >= patched + len(held)
    assert stack.nudges_total("failed") == 0


def test_extender_killed_holds_opportunistic_pods_until_it_is_back(stack: Stack, ns: str) -> None:
    stack.kill_extender()
    held = ["held-0", "held-1"]
    for name in held:
        stack.create(ns, opportunistic_pod(name, cpu="500m", memory="1Gi", stack_id=stack.id))
    stack.create(ns, regular_pod("regular", stack_id=stack.id))

    stack.wait_bound(ns, "regular")
    stack.assert_stays_unbound(ns, held, HOLD_S)

    stack.start_extender()
    stack.wait_for_fresh_utilization()
    stack.wait_bound(ns, held, timeout_s=180, nudge=True)


@pytest.mark.parametrize("mode", [Mode.ERROR_500, Mode.ERROR_FIELD, Mode.HANG], ids=str)
def test_extender_failing_holds_opportunistic_pods_and_not_regular_ones(stack: Stack, ns: str, mode: Mode) -> None:
    before = stack.proxy.received.get("/filter", 0)
    stack.set_proxy_mode(mode)
    stack.create(ns, opportunistic_pod("held", cpu="500m", memory="1Gi", stack_id=stack.id))
    stack.create(ns, regular_pod("regular", stack_id=stack.id))

    stack.wait_bound(ns, "regular")
    wait_for(lambda: stack.proxy.received.get("/filter", 0) > before, 120, "kube-scheduler to call filter")
    stack.assert_stays_unbound(ns, ["held"], HOLD_S)

    stack.set_proxy_mode(Mode.PASS)
    stack.wait_bound(ns, "held", timeout_s=180, nudge=True)


# --- contention (last: it leaves a node blocked for a while) -------------------------------------------


def test_sustained_contention_keeps_opportunistic_pods_off_the_node(stack: Stack, ns: str) -> None:
    hot = stack.nodes[-1]
    stack.create(ns, regular_pod("hog", cpu="1", memory="14Gi", stack_id=stack.id, node=hot))
    # 14.6Gi used of 15Gi allocatable: above 0.95 × allocatable on every sample.
    stack.kubelet.set_usage(f"{ns}/hog", {"cpu": 1.0, "memory": 14.6 * GI})
    stack.wait_bound(ns, "hog")
    wait_for(lambda: stack.prometheus.query(
        f'stowage_node_contention{{node="{hot}",resource="memory"}} == 1'), 120,
        f"stowage_node_contention{{node={hot}, memory}} = 1 in Prometheus")

    # Pinned to the hot node: held there, with the contention phrase. (The extender reads Prometheus every
    # second: a first attempt may still see only the usage, and say "not enough harvestable capacity".)
    stack.create(ns, opportunistic_pod("pinned", cpu="100m", memory="128Mi", stack_id=stack.id, node=hot))
    stack.wait_event(ns, "pinned", CONTENTION, nudge=True)
    assert stack.node_of(ns, "pinned") is None
    # Free to go anywhere: lands elsewhere.
    stack.create(ns, opportunistic_pod("free", cpu="100m", memory="128Mi", stack_id=stack.id))
    assert stack.wait_bound(ns, "free")["free"] != hot
    answers = [a for b, _, a in stack.proxy.exchanges("/filter") if b in bodies_for(stack, "/filter", ns, "free")]
    assert CONTENTION in answers[0]["FailedNodes"].get(hot, "")
