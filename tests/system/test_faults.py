"""Faults injected into the whole stack while work runs (issue #11): each ends with every Job Succeeded and
every task run to success exactly once (:class:`tests.support.stack.TaskLedger`), every plain pod Succeeded.

Opportunistic work is plain pods labelled ``stowage.io/opportunistic: "true"``: their class is fixed at
admission, whereas a Job's ``"true"`` task takes these idle nodes' regular room first (docs/policy.md).

The stack (:mod:`tests.system.conftest`) is the chart's, every component under its own ServiceAccount.
Waits are conditions with generous bounds; "no placement while X is down" is checked on every poll of
the wait for the regular work that must go on meanwhile, never as a timed window on its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from stowage import labels
from tests.support.stack import TaskLedger, WholeStack, wait_for
from tests.system.workloads import finished_nothing_lost, plain_pod, plain_pod_problems, plain_pods_done

pytestmark = pytest.mark.timeout(600)

#: A Job's task groups: ``n`` tasks of 1 cpu / 1Gi that run ``run_s`` seconds on the fake kubelet.
Group = dict[str, Any]


def tasks(name: str, n: int, run_s: float = 4, cpu: str = "1", memory: str = "1Gi") -> Group:
    return {"name": name, "replicas": n, "cpu": cpu, "memory": memory, "run_s": run_s}


class FaultLedger(TaskLedger):
    """A :class:`TaskLedger` that also remembers every pod it ever saw bound as opportunistic: uid → (name, node).

    A running opportunistic pod is promoted in place (relabelled regular) once its node has regular room
    (docs/policy.md, "Regular first, then promotion"), so its newest labels alone would hide that it was placed
    on harvested room.
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.opportunistic: dict[str, tuple[str, str]] = {}

    def _record(self, pod: client.V1Pod) -> None:
        super()._record(pod)
        node = pod.spec.node_name if pod.spec else None
        if node and (pod.metadata.labels or {}).get(labels.LABEL_CLASS) == "opportunistic":
            with self._lock:
                self.opportunistic[pod.metadata.uid] = (pod.metadata.name, node)


@contextlib.contextmanager
def workload(stack: WholeStack, prefix: str) -> Iterator[tuple[str, FaultLedger]]:
    """A fresh namespace and a ledger of every pod created in it."""
    with stack.namespace(prefix) as ns:
        ledger = FaultLedger(stack.api, ns).start()
        try:
            yield ns, ledger
        finally:
            ledger.stop()


def submit(stack: WholeStack, ns: str, name: str, *groups: Group, opportunistic: str = "false") -> None:
    stack.create_job(ns, stack.job_body(name, list(groups), opportunistic=opportunistic))


def opportunistic_pods(stack: WholeStack, ns: str, prefix: str, n: int, run_s: float = 3,
                       node: str | None = None) -> list[str]:
    """``n`` plain pods of 1 cpu / 1Gi labelled ``stowage.io/opportunistic: "true"`` (on ``node``, if given).

    Converted at admission, such a pod runs on harvested room only, whatever regular room is free (a promotion
    may give it regular room once it runs): the product's way to an opportunistic pod on these idle nodes, where
    a Job's ``"true"`` task takes regular room first. Nobody runs a plain pod again, so each must succeed.
    """
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        pod = plain_pod(stack, name, queue=None, run_s=run_s, extra_labels={labels.LABEL_OPPORTUNISTIC: "true"})
        if node is not None:
            pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
        stack.core.create_namespaced_pod(ns, pod)
    return names


def all_done_nothing_lost(stack: WholeStack, ns: str, ledger: TaskLedger, timeout_s: float = 300.0,
                          unique_names: bool = True, plain: list[str] | None = None, jobs: bool = True) -> None:
    """Every Job of ``ns`` Succeeded, every task succeeded exactly once, no pod name created twice; each of the
    ``plain`` pods created once and Succeeded. ``jobs=False``: the namespace has plain pods only."""
    if jobs:
        problems = finished_nothing_lost(stack, ns, ledger, plain=plain or [], timeout_s=timeout_s,
                                         unique_names=unique_names)
    else:
        plain_pods_done(stack, ns, plain or [], timeout_s)
        # The ledger's watch may trail the API server by a moment: wait for it to have seen the last pods.
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not plain_pod_problems(ledger, plain or []), 30, "the ledger to catch up")
        problems = plain_pod_problems(ledger, plain or [])
    assert problems == []


def phase(stack: WholeStack, ns: str, job: str) -> str | None:
    return (stack.job(ns, job).get("status") or {}).get("phase")


def opportunistic_bound(ledger: FaultLedger, node: str | None = None) -> set[str]:
    """Pods of the ledger ever bound as opportunistic (on ``node``, if given), promoted since or not."""
    with ledger._lock:
        return {name for name, on in ledger.opportunistic.values() if node is None or on == node}


def released_unbound(pod: client.V1Pod) -> bool:
    """Past the admission gate (the dispatcher released it) and not bound."""
    return not pod.spec.node_name and not any(g.name == labels.GATE_ADMISSION for g in pod.spec.scheduling_gates or [])


def some_done_more_to_release(ledger: TaskLedger, total: int) -> bool:
    """Some tasks succeeded while others have no pod yet: the fault then hits a run half-way."""
    counts = ledger.counts()
    return counts.get("Succeeded", 0) >= 3 and sum(counts.values()) < total


def hold_until(condition: Callable[[], Any], invariant: Callable[[], None], timeout_s: float, what: str) -> None:
    """Wait for ``condition``, checking ``invariant`` (it asserts) at every poll."""
    def check() -> Any:
        invariant()
        return condition()

    wait_for(check, timeout_s, what, interval_s=0.5)


def test_prometheus_stopped_no_new_opportunistic_placement_regular_work_goes_on_and_placement_resumes(
        healthy: WholeStack) -> None:
    stack = healthy
    with workload(stack, "prom") as (ns, ledger):
        before = opportunistic_pods(stack, ns, "before", 3)
        wait_for(lambda: opportunistic_bound(ledger), 180, "an opportunistic pod placed while Prometheus runs")
        stale_after_s = stack.settings_loaded().harvest.utilization_stale_after_s
        assert stack.prometheus is not None
        stack.prometheus.stop()
        stopped = time.monotonic()
        # Within the staleness limit every node's utilization goes stale: the extender harvests nothing.
        wait_for(lambda: all(stack.harvestable(n) == 0 for n in stack.nodes), stale_after_s + 60,
                 "every node's utilization stale in the extender")
        placed = opportunistic_bound(ledger)
        during = opportunistic_pods(stack, ns, "during-opp", 4)
        submit(stack, ns, "during-regular", tasks("r", 6, run_s=3))

        def nothing_new() -> None:
            assert opportunistic_bound(ledger) <= placed, "an opportunistic pod was placed without fresh utilization"

        # Held past the staleness limit too: the newest sample anyone saw is then certainly too old.
        hold_until(lambda: phase(stack, ns, "during-regular") == "Succeeded"
                   and time.monotonic() - stopped > stale_after_s + 5, nothing_new, stale_after_s + 180,
                   "the regular Job to succeed while Prometheus is down, past the staleness limit")
        seen = ledger.snapshot()
        assert not [n for n in during if seen.get(n, {}).get("node")], "an opportunistic pod bound meanwhile"
        stack.prometheus.start()
        all_done_nothing_lost(stack, ns, ledger, plain=before + during)
        assert opportunistic_bound(ledger) - placed, "placement resumed once Prometheus returned"


def test_operator_killed_and_restarted_duplicates_and_loses_nothing(healthy: WholeStack) -> None:
    stack = healthy
    with workload(stack, "opkill") as (ns, ledger):
        submit(stack, ns, "a", tasks("x", 24, run_s=4), tasks("y", 12, run_s=3))
        # "b" only has to run through the kill: its tasks take regular room first and harvested room only while
        # "a" fills the nodes (docs/policy.md); which class each task gets is not what this test is about.
        submit(stack, ns, "b", tasks("z", 8, run_s=3), opportunistic="true")
        wait_for(lambda: some_done_more_to_release(ledger, 44), 180, "some tasks done, others not released yet")
        stack.kill("operator")
        # Work in flight finishes without the operator: its pods' ends wait for the next one to see them.
        wait_for(lambda: ledger.counts().get("Running", 0) == 0, 120, "the running pods to finish")
        stack.start_operator()
        all_done_nothing_lost(stack, ns, ledger)


def test_extender_killed_fails_closed_and_recovers(healthy: WholeStack) -> None:
    stack = healthy
    with workload(stack, "extkill") as (ns, ledger):
        stack.kill("extender")
        opp = opportunistic_pods(stack, ns, "opp", 4)
        submit(stack, ns, "regular", tasks("r", 6, run_s=3))

        def none_placed() -> None:
            assert not opportunistic_bound(ledger), "an opportunistic pod bound while the extender was down"

        def regular_done_and_opportunistic_held() -> bool:
            # Released by the dispatcher, held by kube-scheduler: only the extender's filter can place them.
            held = [p for p in stack.pods(ns, f"{labels.LABEL_CLASS}=opportunistic") if released_unbound(p)]
            return phase(stack, ns, "regular") == "Succeeded" and bool(held)

        hold_until(regular_done_and_opportunistic_held, none_placed, 180,
                   "the regular Job done while the opportunistic pods wait for the extender")
        stack.start_extender()
        all_done_nothing_lost(stack, ns, ledger, plain=opp)
        assert opportunistic_bound(ledger), "the opportunistic pods bound once the extender was back"


def test_node_monitor_killed_that_node_stops_harvesting(healthy: WholeStack) -> None:
    stack = healthy
    victim, others = stack.nodes[0], stack.nodes[1:]
    with workload(stack, "monkill") as (ns, ledger):
        stack.kill(f"node-monitor/{victim}")
        wait_for(lambda: stack.harvestable(victim) == 0, 180, f"{victim}'s utilization stale in the extender")
        assert all(stack.harvestable(n) > 0 for n in others), "the other nodes keep harvesting"
        placed_there = opportunistic_bound(ledger, victim)
        opp = opportunistic_pods(stack, ns, "opp", 8)

        def none_on_victim() -> None:
            assert opportunistic_bound(ledger, victim) <= placed_there, f"opportunistic pod placed on {victim}"

        def all_succeeded() -> bool:
            return all(ledger.snapshot().get(n, {}).get("phase") == "Succeeded" for n in opp)

        hold_until(all_succeeded, none_on_victim, 240, "the opportunistic pods done on the nodes whose monitors run")
        assert opportunistic_bound(ledger) - placed_there, "opportunistic work ran elsewhere"
        all_done_nothing_lost(stack, ns, ledger, plain=opp, jobs=False)
    stack.start_monitor(victim)
    stack.wait_for_harvest(nodes=[victim])


def test_apiserver_restarted_every_component_resumes_nothing_duplicated(healthy: WholeStack) -> None:
    stack = healthy
    with workload(stack, "apirestart") as (ns, ledger):
        submit(stack, ns, "a", tasks("x", 30, run_s=4))
        submit(stack, ns, "b", tasks("o", 6, run_s=4), opportunistic="true")
        wait_for(lambda: some_done_more_to_release(ledger, 36), 180, "some tasks done, others not released yet")
        stack.restart_apiserver()
        # A node that exists only after the restart, and work pinned to it: it is seen only through watches
        # that resumed (the extender's and the operator's node caches, kube-scheduler's, the kubelet's).
        new = stack.add_node()
        stack.wait_for_harvest(nodes=[new])
        submit(stack, ns, "after", tasks("r", 4, run_s=3))
        body = stack.job_body("after-new-node", [tasks("t", 3, run_s=3)])
        body["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] = new
        stack.create_job(ns, body)
        # Opportunistic pods pinned there: plain ones, whose class is fixed at admission (a Job's "true" task
        # would take the new node's free regular room first and prove nothing about its harvest).
        after_opp = opportunistic_pods(stack, ns, "after-opp-new-node", 3, node=new)
        all_done_nothing_lost(stack, ns, ledger, plain=after_opp)
        assert opportunistic_bound(ledger, new), f"opportunistic pods bound on {new}, a node added after the restart"
    down = [name for name, proc in [("operator", stack.operator), ("extender", stack.extender),
                                    *stack.monitors.items()] if proc is None or not proc.running]
    assert not down, f"exited after the API server restart: {down}"
    assert stack.scheduler is not None and stack.scheduler.running


def test_node_deleted_with_pods_on_it_its_tasks_are_requeued(healthy: WholeStack) -> None:
    stack = healthy
    with workload(stack, "nodedel") as (ns, ledger):
        submit(stack, ns, "long", tasks("w", 9, run_s=20, cpu="2"))

        def running_by_node() -> dict[str, dict[str, str]]:
            by_node: dict[str, dict[str, str]] = {}
            for p in ledger.pods():
                if p["node"] and p["phase"] == "Running":
                    by_node.setdefault(p["node"], {})[p["uid"]] = p["name"]
            return by_node

        # The node that dies is one the tasks packed onto: which nodes those are is the scheduler's choice
        # (an earlier test may have added a fourth node, and packing leaves some node empty).
        running = wait_for(running_by_node, 180, "tasks running")
        doomed = max(running, key=lambda node: len(running[node]))
        lost = running[doomed]
        stack.delete_node(doomed)
        # The lost pods are gone from the API before their tasks run again, so an attempt may reuse its
        # name (the operator counts attempts from the pods that exist): counted per uid, not per name.
        all_done_nothing_lost(stack, ns, ledger, timeout_s=400, unique_names=False)
        final = {p["uid"]: p for p in ledger.pods()}
        assert all(final[uid]["phase"] != "Succeeded" for uid in lost), "a pod of the deleted node cannot finish"
        for uid, name in lost.items():
            again = [p for p in final.values() if p["name"].rsplit("-r", 1)[0] == name.rsplit("-r", 1)[0]
                     and p["uid"] != uid and p["phase"] == "Succeeded"]
            assert again, f"{name}'s task ran again after its node was deleted"
