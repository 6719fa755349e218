"""A task's attempts outlive its pods, and the operator's metrics listen where told (real control plane).

Real API server, kube-scheduler with ``stowage extender``, the fake kubelet, ``stowage operator`` as a process
(:mod:`tests.operator.support`) started with ``--metrics-host 127.0.0.1``. A pod is deleted by hand (grace 0,
as kube-controller-manager's orphan GC does once a node is gone): its failure still counts toward
``maxRetries`` and its name is never used again. Waits are bounds for a loaded machine, never timing assertions.
"""

from __future__ import annotations

import socket

import pytest
from kubernetes import client

from tests.operator.support import OperatorStack, job_body, wait_for
from tests.scheduler.stack import Proc

pytestmark = pytest.mark.timeout(600)


NAMESPACE_PREFIX = "attempts"
OPERATOR_KWARGS = {"extra": ("--metrics-host", "127.0.0.1")}


def _delete_now(stack: OperatorStack, namespace: str, name: str) -> None:
    stack.core.delete_namespaced_pod(name, namespace, body=client.V1DeleteOptions(grace_period_seconds=0))


def test_a_failed_pod_deleted_by_hand_still_counts_toward_max_retries(operator_stack: OperatorStack,
                                                                      operator: Proc, ns: str) -> None:
    stack = operator_stack
    body = job_body("bad", [{"name": "step", "replicas": 1, "run_s": 5, "exit_code": 3, "maxRetries": 2}],
                    stack_id=stack.id)
    stack.create_job(ns, body)
    # The first failure is in the status before its pod goes.
    def failed_once() -> dict | None:
        job = stack.job(ns, "bad")
        return job if ((job.get("status") or {}).get("groups") or {}).get("step", {}).get("failed", 0) >= 1 else None

    job = wait_for(failed_once, 240, "the first failure in the status")
    assert job["status"]["phase"] != "Failed", "the deletion must happen while retries are left"
    _delete_now(stack, ns, "bad-step-0")
    job = stack.wait_job_phase(ns, "bad", "Failed")
    group = job["status"]["groups"]["step"]
    assert group["failed"] == 3 and group["attempts"] == {"0": {"next": 3, "failed": [0, 1, 2]}}, group
    assert "task 0 failed more than maxRetries (2) times" in \
        next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["message"]
    names = sorted(p.metadata.name for p in stack.pods(ns))
    assert names == ["bad-step-0-r1", "bad-step-0-r2"], "three attempts in all (no -r3), the deleted one not re-made"


def test_a_running_pod_deleted_by_hand_reruns_under_a_fresh_name_without_spending_a_retry(
        operator_stack: OperatorStack, operator: Proc, ns: str) -> None:
    stack = operator_stack
    body = job_body("lost", [{"name": "step", "replicas": 1, "run_s": 15, "maxRetries": 0}], stack_id=stack.id)
    stack.create_job(ns, body)
    first = wait_for(lambda: next((p for p in stack.pods(ns) if p.status.phase == "Running"), None), 240,
                     "the first attempt running")
    assert first.metadata.name == "lost-step-0"
    _delete_now(stack, ns, "lost-step-0")
    try:
        again = wait_for(lambda: next((p for p in stack.pods(ns) if p.metadata.uid != first.metadata.uid), None),
                         120, "the task's next attempt")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; job status: {stack.job(ns, 'lost').get('status')}; "
                             f"pods: {[(p.metadata.name, p.status.phase) for p in stack.pods(ns)]}") from None
    assert again.metadata.name == "lost-step-0-r1", "a task never gets the same pod name twice"
    job = stack.wait_job_phase(ns, "lost", "Succeeded")
    group = job["status"]["groups"]["step"]
    assert (group["succeeded"], group["failed"], group["evicted"]) == (1, 0, 0), group
    assert sorted(p.metadata.name for p in stack.pods(ns)) == ["lost-step-0-r1"]


def test_metrics_listen_on_the_metrics_host_only(operator_stack: OperatorStack, operator: Proc) -> None:
    assert f"metrics on http://127.0.0.1:{operator.port}/metrics" in operator.tail(200_000)
    assert "stowage_" in operator_stack.operator_metrics(operator)
    # All of 127.0.0.0/8 is loopback: a socket bound to 0.0.0.0 would accept on 127.0.0.2 too.
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.2", operator.port), timeout=10):
        pass
