"""A Stowage Job's life on a real control plane: barriers, eviction, retries, suspension, status, Events, metrics.

Real API server, kube-scheduler from ``manifests/scheduler-config.yaml`` calling ``stowage extender``, the
fake kubelet, ``stowage operator`` as a process (:mod:`tests.operator.support`). Each task tells the fake
kubelet how long it runs; the waits are bounds for a loaded machine, never timing assertions.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from kubernetes import client

from stowage import labels
from stowage.policy.estimates import SOURCE_NAMES
from tests.operator.support import OperatorStack, job_body, metric, wait_for
from tests.scheduler.stack import Proc

pytestmark = pytest.mark.timeout(600)


NAMESPACE_PREFIX = "life"


def _time(value: object) -> float:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _finished_at(pod: client.V1Pod) -> float:
    return max(_time(c.state.terminated.finished_at) for c in pod.status.container_statuses)


def _events(stack: OperatorStack, namespace: str, name: str) -> list[tuple[str, str]]:
    items = stack.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in items]


def test_a_job_of_two_groups_with_a_barrier_runs_to_succeeded(operator_stack: OperatorStack, operator: Proc,
                                                               ns: str) -> None:
    stack = operator_stack
    body = job_body("etl", [{"name": "map", "replicas": 3, "run_s": 4, "expectedDuration": 4},
                            {"name": "reduce", "replicas": 1, "run_s": 2, "dependsOn": ["map"]}], stack_id=stack.id)
    stack.create_job(ns, body)
    job = stack.wait_job_phase(ns, "etl", "Succeeded")
    status = job["status"]
    assert status["progress"] == "4/4" and status["tasksSucceeded"] == 4 and status["tasksTotal"] == 4
    assert status["groups"]["map"] | {"succeeded": 3} == status["groups"]["map"]
    assert {k: status["groups"]["reduce"][k] for k in ("pending", "running", "succeeded", "failed", "evicted")} == \
        {"pending": 0, "running": 0, "succeeded": 1, "failed": 0, "evicted": 0}
    assert [c["type"] for c in status["conditions"] if c["status"] == "True"] == ["Complete"]
    assert _time(status["completionTime"]) >= _time(status["startTime"])

    pods = {p.metadata.name: p for p in stack.pods(ns)}
    assert sorted(pods) == ["etl-map-0", "etl-map-1", "etl-map-2", "etl-reduce-0"], "one pod per task, by name"
    for pod in pods.values():
        assert pod.status.phase == "Succeeded"
        assert pod.spec.scheduler_name == labels.SCHEDULER_NAME and pod.spec.node_name in stack.nodes
        assert pod.metadata.labels[labels.LABEL_JOB] == "etl"
        assert pod.metadata.labels[labels.LABEL_QUEUE] == "default"
        assert pod.metadata.labels[labels.LABEL_CLASS] == "regular"
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Job", "etl", job["metadata"]["uid"], True)
    # The barrier: the reduce task was created only after every map task had finished.
    last_map = max(_finished_at(pods[f"etl-map-{i}"]) for i in range(3))
    assert _time(pods["etl-reduce-0"].metadata.creation_timestamp) >= last_map - 1.0  # timestamps are whole seconds

    assert ("Completed", "all 4 tasks succeeded") in _events(stack, ns, "etl")
    text = stack.operator_metrics(operator)
    assert metric(text, "stowage_job_completion_seconds_count", {"queue": "default"}) >= 1
    assert metric(text, "stowage_dispatch_total", {"class": "regular"}) >= 4
    assert metric(text, "stowage_release_to_bind_seconds_count") >= 4
    # Submission → first release, once per Job whatever its task count (Kueue's admission_wait_time).
    assert metric(text, "stowage_queue_wait_seconds_count", {"queue": "default", "kind": "job"}) >= 1
    assert "exists already" not in operator.tail(1_000_000), "a running operator never tries a task twice"
    # The dispatcher's estimates (issue #19): in the status, and each finished task measured against them.
    estimate = status["estimate"]
    assert estimate["remainingWorkSeconds"] == 0, estimate
    assert estimate["groups"]["map"]["source"] in ("hint", "elapsed"), estimate  # expectedDuration 4 (or outrun)
    assert estimate["groups"]["map"]["taskSeconds"] >= 4, estimate
    assert estimate["groups"]["reduce"]["source"] in SOURCE_NAMES and estimate["groups"]["reduce"]["taskSeconds"] > 0
    assert metric(text, "stowage_estimate_ratio_count") >= 4, "every finished task observed against its estimate"


#: A blocker's cpu: a node's regular room all but 100m (regular room first: a `"true"` task of 500m then finds none
#: and runs opportunistic; kube-scheduler still fits a converted pod's 1m request beside it).
BLOCKER_CPU = "7400m"


def fill_regular_room(stack: OperatorStack, ns: str) -> list[str]:
    """One blocker pod per node (bound by name, outside Stowage, running until deleted) that requests the node's
    regular room but 100m of cpu; its usage (half its request, the fake kubelet's default) leaves harvested room
    of about 0.9 × 7.5 − 3.7 ≈ 3 cores. Returns their names, once all run."""
    names = []
    for i, node in enumerate(stack.nodes):
        names.append(f"blocker-{i}")
        stack.core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": names[-1]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {"cpu": BLOCKER_CPU, "memory": "1Gi"}, "limits": {"memory": "1Gi"}}}]}})
    wait_for(lambda: all(stack.core.read_namespaced_pod(n, ns).status.phase == "Running" for n in names), 120,
             "the blockers running")
    return names


def test_an_evicted_opportunistic_task_is_rerun_and_the_job_still_succeeds(operator_stack: OperatorStack,
                                                                            operator: Proc, ns: str) -> None:
    stack = operator_stack
    if not stack.harvest:
        pytest.skip("an opportunistic pod binds only with harvestable capacity: needs Prometheus (apt-get install "
                    "prometheus)")
    # Regular room first (docs/policy.md): the `"true"` tasks run opportunistic only where no regular room holds
    # them, and a running one is promoted once its node has room. The blockers take that room for the whole run.
    blockers = fill_regular_room(stack, ns)
    try:
        _evict_and_rerun(stack, ns)
    finally:
        for name in blockers:
            stack.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def _evict_and_rerun(stack: OperatorStack, ns: str) -> None:
    body = job_body("opp", [{"name": "work", "replicas": 2, "run_s": 12, "cpu": "500m", "memory": "512Mi"}],
                    opportunistic="true", stack_id=stack.id)
    stack.create_job(ns, body)

    def running_victim() -> client.V1Pod | None:
        running = [p for p in stack.pods(ns, "app=opp") if p.status.phase == "Running"]
        return running[0] if running else None

    victim = wait_for(running_victim, 180, "an opportunistic task running")
    assert victim.metadata.labels[labels.LABEL_CLASS] == "opportunistic"
    assert victim.spec.priority_class_name == labels.OPPORTUNISTIC_PRIORITY_CLASS
    assert victim.spec.containers[0].resources.requests["cpu"] == "1m", "converted: requests at the floor (Burstable)"
    assert labels.ANN_DEMAND in victim.metadata.annotations
    stack.core.create_namespaced_pod_eviction(
        victim.metadata.name, ns,
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim.metadata.name, "namespace": ns}})

    job = stack.wait_job_phase(ns, "opp", "Succeeded")
    group = job["status"]["groups"]["work"]
    assert (group["succeeded"], group["evicted"], group["failed"]) == (2, 1, 0), group
    index = victim.metadata.name.removeprefix("opp-work-").split("-")[0]
    rerun = [p for p in stack.pods(ns, "app=opp") if p.metadata.name.startswith(f"opp-work-{index}")
             and p.status.phase == "Succeeded"]
    assert len(rerun) == 1 and rerun[0].metadata.uid != victim.metadata.uid, "the evicted task ran again, once"
    reasons = [r for r, _ in _events(stack, ns, "opp")]
    assert "TaskEvicted" in reasons and "TaskFailed" not in reasons


def test_a_failing_task_is_retried_up_to_max_retries_then_the_job_fails(operator_stack: OperatorStack,
                                                                         operator: Proc, ns: str) -> None:
    stack = operator_stack
    body = job_body("bad", [{"name": "step", "replicas": 1, "run_s": 1, "exit_code": 3, "maxRetries": 1}],
                    stack_id=stack.id)
    stack.create_job(ns, body)
    job = stack.wait_job_phase(ns, "bad", "Failed")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RetriesExhausted"
    assert "task 0 failed more than maxRetries (1) times" in failed["message"]
    names = sorted(p.metadata.name for p in stack.pods(ns))
    assert names == ["bad-step-0", "bad-step-0-r1"], "one first attempt and one retry, nothing more"
    assert job["status"]["groups"]["step"]["failed"] == 2
    # Events follow the status write that shows the phase: wait for them (bounded), do not race them.
    wait_for(lambda: {"Failed", "TaskFailed"} <= {r for r, _ in _events(stack, ns, "bad")}, 30,
             "the Failed and TaskFailed Events")


def test_suspend_holds_tasks_back_until_resumed(operator_stack: OperatorStack, operator: Proc, ns: str) -> None:
    stack = operator_stack
    stack.create_job(ns, job_body("held", [{"name": "a", "replicas": 2, "run_s": 2}], stack_id=stack.id,
                                  suspend=True))
    job = stack.wait_job_phase(ns, "held", "Suspended", timeout_s=60)
    assert job["status"]["groups"]["a"]["pending"] == 2
    time.sleep(5)  # an absence takes time to show: five dispatch passes (one a second) release nothing
    assert stack.pods(ns) == []
    stack.patch_job(ns, "held", {"spec": {"suspend": False}})
    job = stack.wait_job_phase(ns, "held", "Succeeded")
    reasons = [r for r, _ in _events(stack, ns, "held")]
    assert "Suspended" in reasons and "Resumed" in reasons


def test_queue_status_and_kubectl_get_sjob_sq(operator_stack: OperatorStack, operator: Proc, ns: str,
                                              tmp_path: Path) -> None:
    stack = operator_stack
    stack.create_queue("research", weight=2)
    stack.create_job(ns, job_body("train", [{"name": "shard", "replicas": 6, "run_s": 30, "expectedDuration": 30}],
                                  queue="research", stack_id=stack.id))
    stack.create_job(ns, job_body("eval", [{"name": "run", "replicas": 2, "run_s": 1}], stack_id=stack.id))
    if stack.harvest:
        stack.create_job(ns, job_body("sweep", [{"name": "try", "replicas": 2, "run_s": 30, "cpu": "500m",
                                                 "memory": "512Mi"}], opportunistic="true", stack_id=stack.id))
    stack.wait_job_phase(ns, "eval", "Succeeded")

    def research_running() -> dict | None:
        status = stack.queue("research").get("status") or {}
        return status if status.get("runningTasks", 0) >= 6 else None

    status = wait_for(research_running, 120, "queue research's status with its running tasks")
    assert status["dominantShare"]["regular"] > 0 and status["fairShare"] > 0
    assert status["allocated"]["regular"]["cpu"] == "6" and status["pendingTasks"] == 0
    text = stack.operator_metrics(operator)
    assert metric(text, "stowage_queue_dominant_share", {"queue": "research", "pool": "regular"}) == \
        pytest.approx(status["dominantShare"]["regular"], abs=1e-3)
    assert metric(text, "stowage_queue_allocated", {"queue": "research", "pool": "regular", "resource": "cpu"}) == 6
    assert metric(text, "stowage_queue_fair_share", {"queue": "research"}) > 0
    assert "stowage_queue_pending_tasks{queue=\"research\"} 0.0" in text
    if stack.harvest:
        # The sweep is here only to be listed running beside the others: train and eval hold 8 of the 22.5
        # cores, so its `"true"` tasks take regular room first (docs/policy.md, "Regular first, then
        # promotion") and it runs regular, as its status says. Opportunistic placement is the eviction test's.
        def sweep_running() -> dict | None:
            status = stack.job(ns, "sweep").get("status") or {}
            return status if (status.get("groups") or {}).get("try", {}).get("running", 0) == 2 else None

        sweep = wait_for(sweep_running, 120, "the sweep's two tasks running")
        assert sweep.get("opportunisticRunning", 0) == 0, sweep
        assert {p.metadata.labels[labels.LABEL_CLASS] for p in stack.pods(ns, "app=sweep")} == {"regular"}
        time.sleep(6)  # one more Queue status round (every 5 s), so the default queue shows the sweep
    output = "".join(f"$ kubectl {' '.join(args)}\n{stack.kubectl(*args)}\n" for args in (
        ("get", "sjob,sq", "-n", ns), ("get", "sjob", "-n", ns, "-o", "wide"), ("get", "sq", "-o", "wide")))
    (tmp_path / "kubectl-get-sjob-sq.txt").write_text(output)
    print(output)
    assert "train" in output and "research" in output and "Succeeded" in output
