"""Disk packed by what tasks use, on the real control plane (``stowage.policy.use_estimates``, Tetris §4.1).

One fake node declaring 100Mi/s of disk (``stowage.io/disk-bandwidth``). A Job of two tasks, each declaring 80Mi/s
and using a steady 20Mi/s (``LoadModel.steady``: a quarter of its demand; the fake kubelet writes it into the pod's
cgroup ``io.stat``, the node monitor turns it into ``stowage_pod_usage{resource="disk"}``). By declarations only one
fits (80 + 80 > 100). The node monitor is stopped first, so nothing of the first task's use is seen: the second
task is held (the Job says so) while the first runs. With the monitor back, the group's estimate becomes
20 × ``estimates.bandwidth_margin`` (1.25) = 25Mi/s a task, and the second task binds on the same node: the dispatcher
released it and the extender's bandwidth filter let it through, both by the estimate. When it binds, Prometheus has
the first task's sustained use (about 20Mi/s: 1 s rates of the fake kubelet's counters jitter around it).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from stowage import labels
from stowage.prom import peak_query
from tests.support.stack import WholeStack, wait_for
from tests.system.workloads import group

pytestmark = pytest.mark.timeout(900)

LONG_S = 3600  # the tasks run until the namespace goes
MI = float(1 << 20)
USE = 0.25  # of the 80Mi/s declared: 20Mi/s



def _bound(stack: WholeStack, ns: str) -> list[client.V1Pod]:
    return [p for p in stack.pods(ns) if p.spec.node_name]


def _held(stack: WholeStack, ns: str) -> dict[str, Any] | None:
    conditions = (stack.job(ns, "etl").get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Held" and c["status"] == "True"), None)


def test_the_second_task_binds_once_the_first_ones_use_has_been_seen(one_node: WholeStack) -> None:
    stack = one_node
    assert stack.load is not None and stack.prometheus is not None
    (node,) = stack.nodes
    stack.core.patch_node(node, {"metadata": {"annotations": {labels.ANN_DISK_BANDWIDTH: "100Mi"}}})
    stack.load.steady(node, USE)
    stack.kill(f"node-monitor/{node}")
    with stack.namespace("bw") as ns:
        body = stack.job_body("etl", [group("read", 2, run_s=LONG_S)])
        body["spec"]["tasks"][0]["template"]["metadata"]["annotations"][labels.ANN_DISK_BANDWIDTH] = "80Mi"
        stack.create_job(ns, body)
        wait_for(lambda: any(p.status.phase == "Running" for p in _bound(stack, ns)), 180, "the first task running")
        held = wait_for(lambda: _held(stack, ns), 120, "the Job saying its second task is held")
        assert "1 task(s) held" in held["message"], held
        assert [p.metadata.name for p in _bound(stack, ns)] == ["etl-read-0"], "the second waits: nothing seen yet"

        stack.start_monitor(node)
        try:
            wait_for(lambda: len(_bound(stack, ns)) == 2, 240, "the second task bound once the first one's use is seen")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{stack.logs()}") from None
        assert {p.spec.node_name for p in _bound(stack, ns)} == {node}
        seen = {r["metric"]["pod"]: float(r["value"][1]) for r in stack.prometheus.query(peak_query(30))
                if r["metric"].get("namespace") == ns and r["metric"].get("resource") == "disk"}
        # Seen, and low enough that two tasks at 1.25 × it fit 100Mi/s (the rates of 1 s samples jitter around 20).
        assert 0 < seen.get("etl-read-0", 0.0) <= 40 * MI, seen
    stack.load.steady(node, None)
