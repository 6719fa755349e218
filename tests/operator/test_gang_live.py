"""Gangs on a real control plane: all-or-nothing task groups (``minAvailable``) start whole or not at all.

Real API server, kube-scheduler with ``stowage extender``, the fake kubelet's three nodes (7.5 cpu allocatable
each), ``stowage operator`` as a process (:mod:`tests.operator.support`). Two Jobs in two queues whose gangs each
need 60 % of the cluster's cpu (three 4.5-cpu tasks, one per node), waiting behind a filler on every node, both
finish, one after the other, and no sample ever shows a gang half-placed (some of its members with a pod while
others have none, still so a second look later) or both gangs holding room at once; without ``minAvailable`` the
same test fails (the queues alternate as the filler's nodes free: 2 + 1 tasks placed, both gangs part-placed).
A member evicted by hand brings the gang back whole: the others are deleted, all three start again, and the Job
succeeds without spending a retry; the same for a pod group (``stowage.io/pod-group``), whose pods are created
again. The examples ``gang-job.yaml`` and ``gang-pods.yaml`` run as written. Waits are bounds for a loaded
machine, never timing assertions.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from stowage import labels
from tests.operator.support import NODE_LABEL, OperatorStack, job_body, wait_for
from tests.scheduler.stack import Proc
from tests.support.fake_kubelet import ANN_RUN_SECONDS

pytestmark = pytest.mark.timeout(900)

NAMESPACE_PREFIX = "gang"
GANG = {"name": "workers", "replicas": 3, "minAvailable": 3, "cpu": "4.5", "memory": "1Gi", "maxRetries": 0}


def _live(pods: list[client.V1Pod]) -> dict[str, dict[str, str]]:
    """Job → {pod uid: phase} of its pods that hold or wait for room (not finished, not being deleted)."""
    out: dict[str, dict[str, str]] = {}
    for p in pods:
        if p.metadata.deletion_timestamp is not None or p.status.phase in ("Succeeded", "Failed"):
            continue
        job = (p.metadata.labels or {}).get(labels.LABEL_JOB, "")
        out.setdefault(job, {})[p.metadata.uid] = p.status.phase
    return out


def _half(live: Mapping[str, Mapping[str, str]], size: int) -> set[str]:
    return {job for job, pods in live.items() if 0 < len(pods) < size}


def test_two_gangs_of_60_percent_both_finish_one_after_the_other(operator_stack: OperatorStack, operator: Proc,
                                                                 ns: str) -> None:
    """The gangs are in two queues of one weight and wait behind a filler that holds every node: as its tasks end,
    node by node, task-by-task release would alternate the queues and leave both gangs part-placed."""
    stack = operator_stack
    for queue in ("gang-a", "gang-b"):
        stack.create_queue(queue)
    stack.create_job(ns, job_body("filler", [{**GANG, "name": "fill", "minAvailable": 1, "run_s": 12}],
                                  stack_id=stack.id))
    wait_for(lambda: len([p for p in stack.pods(ns) if p.status.phase == "Running"]) == 3 or None, 300,
             "the filler on every node")
    for name, queue in (("ga", "gang-a"), ("gb", "gang-b")):
        stack.create_job(ns, job_body(name, [{**GANG, "run_s": 8}], queue=queue, stack_id=stack.id))
    samples = together = 0
    held: set[str] = set()
    half: list[tuple[int, dict[str, dict[str, str]]]] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        jobs = stack.jobs(ns)
        if jobs and all((j.get("status") or {}).get("phase") in ("Succeeded", "Failed") for j in jobs.values()):
            break
        held |= {n for n, j in jobs.items() if any(c.get("type") == "Held" and c.get("reason") == "WaitingForGang"
                                                   for c in (j.get("status") or {}).get("conditions") or [])}
        live = {j: pods for j, pods in _live(stack.pods(ns)).items() if j in ("ga", "gb")}
        samples += 1
        together += len([j for j in live if live[j]]) > 1
        suspects = _half(live, 3)
        if suspects:  # a gang's creates land one by one within a pass: half-placed only if it stays so
            time.sleep(2.0)
            again = {j: pods for j, pods in _live(stack.pods(ns)).items() if j in ("ga", "gb")}
            still = {j for j in suspects & _half(again, 3) if set(again[j]) == set(live[j])}
            if still:
                half.append((samples, again))
        time.sleep(0.5)
    jobs = stack.jobs(ns)
    phases = {n: (j.get("status") or {}).get("phase") for n, j in jobs.items()}
    assert phases == {"filler": "Succeeded", "ga": "Succeeded", "gb": "Succeeded"}, f"{phases}\n{stack.logs()}"
    assert samples > 10, "the run was sampled"
    assert half == [], f"half-placed gangs at samples {half}"
    assert together == 0, "both gangs held room at once: 2 x 60 % of the cluster cannot fit"
    assert held == {"ga", "gb"}, "each gang waited, saying WaitingForGang"
    for name in ("ga", "gb"):
        group = jobs[name]["status"]["groups"]["workers"]
        assert (group["succeeded"], group["failed"]) == (3, 0), group


def test_an_evicted_member_brings_the_gang_back_whole(operator_stack: OperatorStack, operator: Proc,
                                                      ns: str) -> None:
    stack = operator_stack
    stack.create_job(ns, job_body("ge", [{**GANG, "run_s": 40}], stack_id=stack.id))
    first = wait_for(lambda: (lambda pods: pods if len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
                              else None)([p for p in stack.pods(ns) if p.metadata.deletion_timestamp is None]),
                     300, "the gang's three members Running")
    victim = first[0].metadata.name
    stack.core.create_namespaced_pod_eviction(victim, ns, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=victim, namespace=ns)))
    old = {p.metadata.uid for p in first}

    def whole_again() -> list[client.V1Pod] | None:
        pods = [p for p in stack.pods(ns) if p.metadata.uid not in old and p.metadata.deletion_timestamp is None]
        return pods if len(pods) == 3 else None

    again = wait_for(whole_again, 300, "the gang released whole again")
    assert sorted(p.metadata.name for p in again) == ["ge-workers-0-r1", "ge-workers-1-r1", "ge-workers-2-r1"]
    job = stack.wait_job_phase(ns, "ge", "Succeeded")
    group = job["status"]["groups"]["workers"]
    assert (group["succeeded"], group["failed"]) == (3, 0), group
    (event,) = stack.core.list_namespaced_event(ns, field_selector="reason=GangTakenBack").items
    assert event.involved_object.name == "ge" and event.type == "Warning"
    assert event.message == ("task group 'workers' is all or nothing (minAvailable 3): 2 of its 3 tasks are active "
                             "(a member failed, was evicted or deleted, or was not created); its 2 pod(s) were "
                             "deleted, without spending a retry, and the group waits to start whole again")


EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def test_the_examples_gangs_start_whole(operator_stack: OperatorStack, operator: Proc, ns: str) -> None:
    """manifests/examples/gang-job.yaml and gang-pods.yaml as written (on this stack's nodes, in its queue): the
    pod group is released once all three pods exist, and both finish whole."""
    stack = operator_stack
    pods = [d for d in yaml.safe_load_all((EXAMPLES / "gang-pods.yaml").read_text()) if d]
    (job,) = [d for d in yaml.safe_load_all((EXAMPLES / "gang-job.yaml").read_text()) if d]
    job["spec"]["queue"] = "default"
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        spec["nodeSelector"] = {NODE_LABEL: stack.id}
        task["template"].setdefault("metadata", {})["annotations"] = {ANN_RUN_SECONDS: "5"}
    stack.create_job(ns, job)
    for pod in pods[:2]:
        _create_example_pod(stack, ns, pod)

    def told() -> list[client.V1Pod] | None:  # two of three exist: both held, saying why
        group = stack.pods(ns, "stowage.io/pod-group=allreduce")
        held = [c for p in group for c in p.status.conditions or [] if c.type == labels.CONDITION_HELD]
        return group if len(held) == 2 and all(c.reason == "WaitingForGang" for c in held) else None

    two = wait_for(told, 120, "the two pods held with reason WaitingForGang")
    assert all(p.spec.scheduling_gates for p in two), "a pod group is released only once all its pods exist"
    message = next(c.message for c in two[0].status.conditions if c.type == labels.CONDITION_HELD)
    assert message == "all or nothing: only 2 of its 3 tasks are there to start; it starts once all 3 are"
    _create_example_pod(stack, ns, pods[2])

    def all_done() -> list[client.V1Pod] | None:
        group = stack.pods(ns, "stowage.io/pod-group=allreduce")
        return group if len(group) == 3 and all(p.status.phase == "Succeeded" for p in group) else None

    wait_for(all_done, 300, "the pod group released whole and finished")
    job_done = stack.wait_job_phase(ns, "train-mpi", "Succeeded")
    assert job_done["status"]["groups"]["workers"]["failed"] == 0


def _create_example_pod(stack: OperatorStack, ns: str, pod: dict[str, Any], run_s: int = 5) -> None:
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"][labels.LABEL_QUEUE] = "default"
    pod["metadata"]["annotations"] = {ANN_RUN_SECONDS: str(run_s)}
    pod["spec"]["nodeSelector"] = {NODE_LABEL: stack.id}
    stack.core.create_namespaced_pod(ns, pod)


def test_an_evicted_pod_group_member_takes_its_group_back_and_the_group_comes_back_whole(
        operator_stack: OperatorStack, operator: Proc, ns: str) -> None:
    """A member of a running pod group evicted: the other two are deleted (a Warning Event GangTakenBack on each),
    nothing of the group holds room; the group's pods created again are released whole and finish."""
    stack = operator_stack
    pods = [d for d in yaml.safe_load_all((EXAMPLES / "gang-pods.yaml").read_text()) if d]
    for pod in pods:
        _create_example_pod(stack, ns, pod, run_s=120)
    selector = f"{labels.LABEL_POD_GROUP}=allreduce"

    def running() -> list[client.V1Pod] | None:
        group = stack.pods(ns, selector)
        return group if len(group) == 3 and all(p.status.phase == "Running" for p in group) else None

    first = wait_for(running, 300, "the pod group Running")
    victim = first[0].metadata.name
    stack.core.create_namespaced_pod_eviction(victim, ns, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=victim, namespace=ns)))
    wait_for(lambda: not stack.pods(ns, selector) or None, 180, "the group's other pods deleted")
    events = stack.core.list_namespaced_event(ns, field_selector="reason=GangTakenBack").items
    assert sorted(e.involved_object.name for e in events) == sorted(p.metadata.name for p in first[1:])
    assert "only 2 of its pods are live (a member failed, was evicted or deleted)" in events[0].message
    for pod in pods:
        _create_example_pod(stack, ns, pod)

    def done() -> list[client.V1Pod] | None:
        group = stack.pods(ns, selector)
        return group if len(group) == 3 and all(p.status.phase == "Succeeded" for p in group) else None

    wait_for(done, 300, "the group created again, released whole and finished")
