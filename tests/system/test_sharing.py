"""Fair sharing and harvesting on the whole stack (issue #11), on the chart's DEFAULT settings.

Three fake nodes of 7.5 allocatable cores: 21 one-core slots.

* **Shares.** Queues ``share-a`` (weight 2) and ``share-b`` (weight 1) each get a Job and plain labelled
  pods (``stowage.io/queue``), far more one-core tasks than fit; a's Job comes first and fills the cluster.
  Weights hold on usage decayed with a half-life (300 s by default), so a 90 s window judges the short-term
  promise: **neither queue below half its fair share (a: 7 cores, b: 3.5) for more than 60 s**, sampled from
  the running pods while both queues still have work waiting, and a ahead of b. The Queues' status shows each
  one's decayed usage beside its target, the targets splitting the queues' usage 2:1. (The long-term promise,
  decayed usage within ±15 % of the weights, is the operator's live test, with a half-life of 20 s.)
* **Harvesting and a usage spike.** A regular Job fills every slot; an ``auto`` Job, which the classifier
  has seen finish short, spills onto harvested capacity (opportunistic pods bound). The load model then
  triples every pod's usage on every node: sustained contention; the node monitors evict opportunistic
  pods, the operator re-queues them; the regular Job, which held the nodes, then ends. Every Job succeeds,
  no regular pod is ever evicted, no task is lost or run twice (:class:`TaskLedger`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from stowage import labels
from tests.support.stack import TaskLedger, WholeStack, wait_for
from tests.system.workloads import create_plain_pods, finished_nothing_lost, group

pytestmark = pytest.mark.timeout(900)

SPIKE = 3.0  # usage × 3 on every node: 7 one-core regular pods at the model's mean 0.5 alone pass 0.99 × 7.5


def running_cores(stack: WholeStack, ns: str) -> dict[str, float]:
    """Cores held by the namespace's running regular pods, per queue."""
    out = {"share-a": 0.0, "share-b": 0.0}
    for pod in stack.pods(ns):
        pod_labels = pod.metadata.labels or {}
        if pod.status.phase == "Running" and pod_labels.get(labels.LABEL_CLASS) == "regular":
            queue = pod_labels.get(labels.LABEL_QUEUE, "")
            out[queue] = out.get(queue, 0.0) + float(pod.spec.containers[0].resources.requests["cpu"])
    return out


def waiting(stack: WholeStack, ns: str) -> dict[str, int]:
    """Per queue: tasks of its Job not started (its status) plus its plain pods still gated."""
    out = {"share-a": 0, "share-b": 0}
    for job in stack.jobs(ns).values():
        groups = (job.get("status") or {}).get("groups") or {}
        queue = job["spec"]["queue"]
        out[queue] = out.get(queue, 0) + (sum(int(g.get("pending", 0)) for g in groups.values()) if groups
                                          else sum(int(g["replicas"]) for g in job["spec"]["tasks"]))
    for pod in stack.pods(ns):
        if any(g.name == labels.GATE_ADMISSION for g in pod.spec.scheduling_gates or []):
            queue = (pod.metadata.labels or {}).get(labels.LABEL_QUEUE, "")
            out[queue] = out.get(queue, 0) + 1
    return out


def test_two_queues_weighted_2_to_1_share_2_to_1_jobs_and_plain_pods(healthy: WholeStack) -> None:
    stack = healthy
    stack.create_queue("share-a", weight=2)
    stack.create_queue("share-b", weight=1)
    with stack.namespace("share") as ns:
        ledger = TaskLedger(stack.api, ns).start()
        try:
            stack.create_job(ns, stack.job_body("a", [group("t", 60, run_s=12)], queue="share-a"))
            stack.create_job(ns, stack.job_body("b", [group("t", 30, run_s=12)], queue="share-b"))
            plain = [f"pa-{i}" for i in range(12)] + [f"pb-{i}" for i in range(8)]
            create_plain_pods(stack, ns, plain[:12], queue="share-a", run_s=12)
            create_plain_pods(stack, ns, plain[12:], queue="share-b", run_s=12)
            wait_for(lambda: sum(running_cores(stack, ns).values()) >= 18, 240, "the three nodes filled")
            samples: list[dict[str, float]] = []
            statuses: list[dict[str, tuple[float, float]]] = []
            below_since: dict[str, float] = {}
            below_longest = {"share-a": 0.0, "share-b": 0.0}
            started = time.monotonic()
            while time.monotonic() - started < 90 and min(waiting(stack, ns).values()) >= 5:
                samples.append(cores := running_cores(stack, ns))
                now = time.monotonic()
                for queue, half_share in (("share-a", 7.0), ("share-b", 3.5)):
                    if cores[queue] < half_share:
                        below_longest[queue] = max(below_longest[queue], now - below_since.setdefault(queue, now))
                    else:
                        below_since.pop(queue, None)
                status = {q: stack.queue(q).get("status") or {} for q in ("share-a", "share-b")}
                statuses.append({q: ((st.get("usage") or {}).get("regular", 0.0),
                                     (st.get("usageTarget") or {}).get("regular", 0.0)) for q, st in status.items()})
                time.sleep(2.0)
            a = statistics.fmean(s["share-a"] for s in samples) if samples else 0.0
            b = statistics.fmean(s["share-b"] for s in samples) if samples else 0.0
            ratio = a / b if b else float("inf")
            print(f"shares: {len(samples)} samples over {time.monotonic() - started:.0f}s; running cores "
                  f"share-a {a:.2f}, share-b {b:.2f}, ratio {ratio:.2f}; longest below half the fair share "
                  f"{below_longest}; last Queue status (usage, target) {statuses[-1] if statuses else None}")
            assert len(samples) >= 8, f"too short a window to judge ({len(samples)} samples)"
            assert max(below_longest.values()) <= 60.0, (below_longest, samples)
            assert ratio > 1.0, f"a/b = {ratio:.2f} from {samples}"
            (usage_a, target_a), (usage_b, target_b) = statuses[-1]["share-a"], statuses[-1]["share-b"]
            assert usage_a > 0 and usage_b > 0 and target_a == pytest.approx(2 * target_b, rel=0.01), statuses
            problems = finished_nothing_lost(stack, ns, ledger, plain=plain, timeout_s=400)
        finally:
            ledger.stop()
        assert problems == []


def _opportunistic_running(stack: WholeStack, ns: str, job: str) -> dict[str, dict[str, Any]]:
    """uid → {name, node, start} of the Job's opportunistic pods running now."""
    selector = f"{labels.LABEL_JOB}={job},{labels.LABEL_CLASS}=opportunistic"
    return {p.metadata.uid: {"name": p.metadata.name, "node": p.spec.node_name, "start": p.status.start_time}
            for p in stack.pods(ns, selector) if p.status.phase == "Running"}


def _evicted(stack: WholeStack, ns: str, job: str) -> int:
    groups = (stack.job(ns, job).get("status") or {}).get("groups") or {}
    return sum(int(g.get("evicted", 0)) for g in groups.values())


def test_auto_tasks_spill_onto_harvested_capacity_and_a_spike_evicts_only_opportunistic_pods(
        healthy: WholeStack) -> None:
    stack = healthy
    assert stack.load is not None
    stack.create_queue("share-a", weight=2)
    stack.create_queue("share-b", weight=1)
    with stack.namespace("harvest") as ns:
        ledger = TaskLedger(stack.api, ns).start()
        try:
            # The classifier learns that the `spill` tasks are short (an `auto` task of unknown kind is long).
            stack.create_job(ns, stack.job_body("spill-0", [group("w", 6, run_s=3)], queue="share-b",
                                                opportunistic="auto"))
            wait_for(lambda: (stack.job(ns, "spill-0").get("status") or {}).get("phase") == "Succeeded", 180,
                     "the first auto Job to run (on regular capacity) and succeed")
            # The spike needs the nodes full: the regular Job holds them until the eviction below, then the fake
            # kubelet ends its tasks (run_s only bounds a run whose test failed before letting them go: longer than
            # the waits below, so a slow spill on a loaded machine still finds the nodes full).
            stack.create_job(ns, stack.job_body("hold", [group("r", 21, run_s=600)], queue="share-a"))
            wait_for(lambda: running_cores(stack, ns)["share-a"] >= 21, 240, "every regular slot taken")
            stack.create_job(ns, stack.job_body("spill-1", [group("w", 24, run_s=40)], queue="share-b",
                                                opportunistic="auto"))
            spilled = wait_for(lambda: len(_opportunistic_running(stack, ns, "spill-1")) >= 4
                               and _opportunistic_running(stack, ns, "spill-1"), 180,
                               "auto tasks running opportunistic on harvested capacity while the nodes are full")
            nodes = sorted({p["node"] for p in spilled.values()})
            print(f"spilled: {len(spilled)} opportunistic pods running on {nodes}")

            # Sustained contention on every node until the monitors have evicted something.
            before = _opportunistic_running(stack, ns, "spill-1")
            assert running_cores(stack, ns)["share-a"] >= 14, "the regular Job still fills the nodes at the spike"
            for node in stack.nodes:
                stack.load.spike(node, SPIKE)
            try:
                wait_for(lambda: _evicted(stack, ns, "spill-1") >= 1, 180,
                         "an opportunistic pod evicted under the spike", interval_s=1.0)
            finally:
                for node in stack.nodes:
                    stack.load.spike(node, None)
            assert stack.kubelet is not None
            stack.kubelet.finish_now(ns, "hold-")  # they succeed; a regular pod evicted meanwhile shows below
            problems = finished_nothing_lost(stack, ns, ledger, timeout_s=400, unique_names=False)
        finally:
            ledger.stop()
        assert problems == []
        pods = ledger.pods()
        regular = [p for p in pods if p["labels"].get(labels.LABEL_CLASS) == "regular"]
        assert regular and all(p["phase"] == "Succeeded" for p in regular), \
            [p for p in regular if p["phase"] != "Succeeded"]  # no regular pod was ever evicted (or failed)
        not_succeeded = [p for p in pods if p["phase"] != "Succeeded"]
        assert not_succeeded, "the spike evicted a pod"
        assert all(p["labels"].get(labels.LABEL_CLASS) == "opportunistic" for p in not_succeeded), not_succeeded
        evicted = _evicted(stack, ns, "spill-1")
        assert evicted >= len({p["uid"] for p in not_succeeded if p["labels"].get(labels.LABEL_JOB) == "spill-1"})
        # The node monitors counted them too (as Prometheus scraped them).
        assert stack.prometheus is not None
        counted = sum(float(r["value"][1]) for r in stack.prometheus.query(f"sum({labels.METRICS.EVICTIONS_TOTAL})"))
        assert counted >= 1, "no eviction counted by the node monitors"
        gone = {uid: seen for uid, seen in before.items()
                if uid in {p["uid"] for p in not_succeeded}}
        survivors = {uid: seen for uid, seen in before.items() if uid not in gone}
        print(f"spike: {evicted} evictions (job status), {counted:.0f} (monitors); of the {len(before)} "
              f"opportunistic pods running at the spike, evicted (node, start): "
              f"{sorted((s['node'], str(s['start'])) for s in gone.values())}; kept: "
              f"{sorted((s['node'], str(s['start'])) for s in survivors.values())}")
