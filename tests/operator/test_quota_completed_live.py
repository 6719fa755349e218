"""On a real control plane: a Queue's ``spec.quota`` caps what the dispatcher releases, and a succeeded task
whose pod is deleted by hand is not run again (``status.groups.<g>.completedIndexes``, issue #9).

Real API server, kube-scheduler with the extender, the fake kubelet, ``stowage operator`` as a process with the
default settings (:mod:`tests.operator.support`). Waits are bounds for a loaded machine, never assertions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.operator.support import OperatorStack, PodLedger, job_body, running_operator, wait_for
from tests.scheduler.stack import Proc

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def operator(operator_stack: OperatorStack) -> Iterator[Proc]:
    with running_operator(operator_stack, webhooks=False) as proc:
        yield proc


def _live(stack: OperatorStack, ns: str, job: str) -> int:
    """Pods of the Job that hold capacity: not finished (the dispatcher counts released, unbound ones too)."""
    return sum(1 for p in stack.pods(ns) if p.metadata.name.startswith(f"{job}-")
               and p.status.phase not in ("Succeeded", "Failed"))


def test_a_queue_never_holds_more_than_its_quota(operator_stack: OperatorStack, operator: Proc) -> None:
    # The cluster has 22.5 free cores; queue "capped" may hold 2. Eight 1-core tasks run two at a time.
    stack = operator_stack
    stack.create_queue("capped", quota={"cpu": "2"})
    with stack.namespace("quota") as ns:
        stack.create_job(ns, job_body("q", [{"name": "t", "replicas": 8, "run_s": 3}], queue="capped",
                                      stack_id=stack.id))
        most, at_quota = 0, False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            most = max(most, _live(stack, ns, "q"))
            used = ((stack.queue("capped").get("status") or {}).get("quotaUsed") or {}).get("regular") or {}
            at_quota |= used.get("cpu") == 1.0
            if (stack.job(ns, "q").get("status") or {}).get("phase") == "Succeeded":
                break
            time.sleep(0.5)
        status = stack.job(ns, "q")["status"]
        assert status["phase"] == "Succeeded" and status["tasksSucceeded"] == 8, status
        assert most == 2, f"at most {most} of the queue's 1-core tasks held capacity at once (quota: 2 cores)"
        assert at_quota, "Queue status never showed quotaUsed.regular.cpu = 1.0"


def test_a_succeeded_task_whose_pod_is_deleted_is_not_run_again(operator_stack: OperatorStack,
                                                                 operator: Proc) -> None:
    stack = operator_stack
    with stack.namespace("done") as ns:
        ledger = PodLedger(stack.api, ns).start()
        try:
            # Group "quick" finishes while "slow" keeps the Job running for a while after the deletion.
            stack.create_job(ns, job_body("keep", [{"name": "quick", "replicas": 2, "run_s": 1},
                                                   {"name": "slow", "replicas": 1, "run_s": 25}], stack_id=stack.id))

            def recorded() -> bool:
                groups = (stack.job(ns, "keep").get("status") or {}).get("groups") or {}
                return (groups.get("quick") or {}).get("completedIndexes") == "0-1"

            wait_for(recorded, 240, "status.groups.quick.completedIndexes = 0-1")
            for name in ("keep-quick-0", "keep-quick-1"):
                stack.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            job = stack.wait_job_phase(ns, "keep", "Succeeded")
        finally:
            ledger.stop()
        status = job["status"]
        assert status["tasksSucceeded"] == 3 and status["groups"]["quick"]["succeeded"] == 2, status
        assert status["groups"]["quick"]["completedIndexes"] == "0-1"
        quick = {n: u for n, u in ledger.uids.items() if n.startswith("keep-quick-")}
        assert quick == {n: quick[n] for n in ("keep-quick-0", "keep-quick-1")}, f"re-run attempts: {sorted(quick)}"
        assert all(len(u) == 1 for u in quick.values()), f"a deleted task was created again: {quick}"
