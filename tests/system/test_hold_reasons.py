"""Why a pod waits, on the whole stack (issue #20): held pods name their reason, and it follows its cause.

Three fake nodes of 7.5 allocatable cores. Plain labelled pods (``stowage.io/queue``), gated at admission; what a
user sees is read back from the API server: the pod condition ``stowage.io/Held`` (reason and message), the Event
of the same reason (what ``kubectl describe pod`` lists), and ``stowage_held_pods`` on the operator's /metrics.

* **Quota, share, room.** Queue ``hq`` has a quota of 1 cpu and three 1-cpu pods: one runs, two wait for the
  quota (the issue's reproduction: before #20 they said nothing); a Job of two tasks in ``hq`` says so in its
  status (condition ``Held``). Queue ``hf`` then fills the cluster with
  1.5-cpu pods, two more than fit: those wait for their share (``hf`` holds far more than half, ``hq`` waits
  below its half). The quota raised to 3 cpu: ``hq``'s two pods now wait for room (0.5 cpu left on one node).
  Two fillers deleted: both are released, their condition False; ``hq`` waits no more, so ``hf``'s extra
  fillers still held now wait for room, not for their share.
* **Sample.** Every node monitor killed: once the samples are stale, an opportunistic pod waits for a fresh
  utilization sample, naming the nodes; the monitors back, it is released.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes import client
from stowage.operator import crd

from stowage import labels
from stowage.prom import Utilization
from tests.support.stack import WholeStack, metric, wait_for
from tests.system.workloads import create_plain_pods, group

pytestmark = pytest.mark.timeout(900)
log = logging.getLogger(__name__)
T = TypeVar("T")

LONG_S = 3600  # the pods here run until the test deletes them
#: The operator's utilization refresh (its runtime builds ``prom.Utilization`` with the default).
OPERATOR_UTILIZATION_S: float = inspect.signature(Utilization).parameters["interval_s"].default


def held(stack: WholeStack, ns: str, name: str) -> client.V1PodCondition | None:
    """The pod's ``stowage.io/Held`` condition (None: none written)."""
    pod = stack.core.read_namespaced_pod(name, ns)
    return next((c for c in pod.status.conditions or [] if c.type == labels.CONDITION_HELD), None)


def gated(stack: WholeStack, ns: str, name: str) -> bool:
    pod = stack.core.read_namespaced_pod(name, ns)
    return any(g.name == labels.GATE_ADMISSION for g in pod.spec.scheduling_gates or [])


def held_for(stack: WholeStack, ns: str, names: list[str], reason: str) -> Callable[[], list[str] | None]:
    """Until each of ``names`` is gated and its condition is True with ``reason``: their messages."""
    def check() -> list[str] | None:
        out = []
        for name in names:
            cond = held(stack, ns, name)
            if not gated(stack, ns, name) or cond is None or cond.status != "True" or cond.reason != reason:
                return None
            out.append(cond.message)
        return out
    return check


def explained(stack: WholeStack, ns: str, condition: Callable[[], T], timeout_s: float, what: str) -> T:
    """``wait_for``; on a timeout every pod's phase, gate and condition, and the operator's lines about them."""
    try:
        return wait_for(condition, timeout_s, what)
    except AssertionError as exc:
        pods = stack.pods(ns)
        seen = {p.metadata.name: (p.status.phase, gated(stack, ns, p.metadata.name), held(stack, ns, p.metadata.name))
                for p in pods}
        assert stack.operator is not None
        lines = [line for line in stack.operator.tail(400_000).splitlines()
                 if any(p.metadata.name in line for p in pods) or "Traceback" in line or "Error" in line][-60:]
        raise AssertionError(f"{exc}\npods (phase, gated, condition): {seen}\noperator:\n" + "\n".join(lines)) from None


def wait_held(stack: WholeStack, ns: str, names: list[str], reason: str, timeout_s: float, what: str) -> list[str]:
    """:func:`held_for` until ``timeout_s`` (:func:`explained`): the pods' messages."""
    messages = explained(stack, ns, held_for(stack, ns, names, reason), timeout_s, what)
    log.info("%s: %s", reason, messages[0])  # the run's own words, for the docs
    return messages


def events(stack: WholeStack, ns: str, name: str) -> list[tuple[str, str]]:
    listed = stack.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in listed]


def set_quota(stack: WholeStack, queue: str, cpu: str) -> None:
    stack.objects.patch_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, queue,
                                              {"spec": {"quota": {"cpu": cpu}}})


def running(stack: WholeStack, ns: str, prefix: str) -> list[str]:
    return [p.metadata.name for p in stack.pods(ns) if p.metadata.name.startswith(prefix)
            and p.status.phase == "Running"]


def test_held_pods_name_quota_share_and_room_and_the_reason_follows_its_cause(healthy: WholeStack) -> None:
    stack = healthy
    stack.create_queue("hq", quota={"cpu": "1"})
    stack.create_queue("hf")
    with stack.namespace("hold") as ns:
        create_plain_pods(stack, ns, ["q-0", "q-1", "q-2"], queue="hq", run_s=LONG_S)
        explained(stack, ns, lambda: len(running(stack, ns, "q-")) == 1, 120, "one pod of queue hq running")
        (first,) = running(stack, ns, "q-")
        waiting = sorted({"q-0", "q-1", "q-2"} - {first})
        messages = wait_held(stack, ns, waiting, "WaitingForQuota", 60, "the two held pods name the quota")
        assert messages == ["queue 'hq' is at its cpu quota: 1/1 in use, a task needs 1"] * 2
        assert ("WaitingForQuota", messages[0]) in events(stack, ns, waiting[0])  # what kubectl describe lists
        text = stack.operator_metrics()
        assert metric(text, labels.METRICS.HELD_PODS, {"queue": "hq", "reason": "quota"}) == 2.0

        # A Job's held tasks: its status says the same (condition Held); deleted again before the quota moves.
        stack.create_job(ns, stack.job_body("jq", [group("t", 2, run_s=LONG_S)], queue="hq"))

        def job_held() -> dict[str, Any] | None:
            conditions = (stack.job(ns, "jq").get("status") or {}).get("conditions") or []
            found = next((c for c in conditions if c["type"] == "Held" and c["status"] == "True"), None)
            log.info("Job jq: %s", found)
            return found

        condition = explained(stack, ns, job_held, 60, "the Job's status says its two tasks are held")
        assert (condition["reason"], condition["message"]) == ("WaitingForQuota", (
            "2 task(s) held (2 for quota). group 't': queue 'hq' is at its cpu quota: 1/1 in use, a task needs 1"))
        stack.objects.delete_namespaced_custom_object(crd.GROUP, crd.VERSION, ns, crd.JOB.plural, "jq")

        # 1 + 14 × 1.5 = 22 of 22.5 cores: 0.5 left on the node running hq's pod; two fillers more than fit.
        fillers = [f"f-{i}" for i in range(16)]
        create_plain_pods(stack, ns, fillers, queue="hf", run_s=LONG_S, cpu="1500m", memory="256Mi")
        explained(stack, ns, lambda: len(running(stack, ns, "f-")) == 14 and sum(gated(stack, ns, n) for n in fillers)
                  == 2, 240, "14 fillers running, 2 held")
        extra = sorted(n for n in fillers if gated(stack, ns, n))
        shares = wait_held(stack, ns, extra, "WaitingForShare", 60, "the extra fillers wait for hf's share")
        assert all(m.startswith("queue 'hf' is ahead of its weight: usage ") and "(cpu, now and decayed past) at "
                   "weight 1, queue 'hq' 0.0" in m and m.endswith("queues not ahead get the next free room")
                   for m in shares), shares
        assert wait_held(stack, ns, waiting, "WaitingForQuota", 30, "hq's pods still at its quota")

        set_quota(stack, "hq", "3")
        rooms = wait_held(stack, ns, waiting, "WaitingForRoom", 60, "quota raised: hq's pods wait for room")
        assert all(m.startswith("no node has room for a task: cpu 1 needed, 500m free on sys-") for m in rooms), rooms

        for name in running(stack, ns, "f-")[:2]:
            stack.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

        def released() -> bool:
            conds = [held(stack, ns, n) for n in waiting]
            return all(not gated(stack, ns, n) for n in waiting) and all(
                c is not None and c.status == "False" and c.reason == "Released" for c in conds)

        explained(stack, ns, released, 120, "room freed: hq's pods released, their condition False")
        # hq waits no more: hf's extra fillers still held no longer wait behind a queue below its share, only for
        # room (3.5 cores freed, hq took 2: one filler may have fitted in what is left).
        still = [n for n in extra if gated(stack, ns, n)]
        assert still, "3.5 cores freed, hq took 2: at most one extra filler fits"
        rooms = wait_held(stack, ns, still, "WaitingForRoom", 60, "hf's extra fillers wait for room")
        assert all(m.startswith("no node has room for a task: cpu 1500m needed") for m in rooms), rooms


def test_an_opportunistic_pod_without_fresh_samples_waits_for_one_then_is_released(healthy: WholeStack) -> None:
    stack = healthy
    stack.create_queue("hs", opportunistic="Allow")
    with stack.namespace("hold") as ns:
        for node in list(stack.monitors):
            stack.kill(f"node-monitor/{node}")
        wait_for(lambda: all(stack.harvestable(n) == 0 for n in stack.nodes), 120, "every node's samples stale")
        # The extender reads Prometheus every second, the operator every 5 s (prom.Utilization): let the operator
        # see the stale samples too before the pod comes (else it may still release it, to be refused there).
        time.sleep(2 * OPERATOR_UTILIZATION_S)
        create_plain_pods(stack, ns, ["opp"], queue="hs", run_s=30, extra_labels={labels.LABEL_OPPORTUNISTIC: "true"})
        (message,) = wait_held(stack, ns, ["opp"], "WaitingForSample", 90, "the pod waits for a sample")
        assert message.startswith("no fresh utilization sample from the 3 node(s) that could take it: sys-"), message
        stale = stack.settings_loaded().harvest.utilization_stale_after_s
        assert message.endswith(f"harvesting needs one newer than {stale:g} s"), message
        assert ("WaitingForSample", message) in events(stack, ns, "opp")
        stack.heal()

        def released() -> bool:
            cond = held(stack, ns, "opp")
            return not gated(stack, ns, "opp") and cond is not None and cond.status == "False"

        explained(stack, ns, released, 120, "fresh samples: the pod released, its condition False")
