"""With no duration stated, the whole stack still orders jobs by size (issue #19, ``stowage.policy.estimates``).

The chart's default settings, the healthy stack (three fake nodes of 7.5 allocatable cores: 21 one-core slots).
A Job of 80 one-core tasks of 8 s fills the cluster for about four waves; a one-task Job of the same shape is
submitted just after it. Neither states ``expectedDuration``. Before estimates the dispatcher ordered jobs by
arrival (remaining work NaN), so the small Job waited behind every task of the big one. Now each group's
duration is the queue's prior until tasks finish, so remaining work is tasks × demand × prior and SRTF puts the
one-task Job first at the next free slot: it must finish while the big Job still has tasks waiting.
"""

from __future__ import annotations

import pytest

from tests.support.stack import TaskLedger, WholeStack, wait_for
from tests.system.workloads import group

pytestmark = pytest.mark.timeout(600)


def _done(job: dict) -> bool:
    return (job.get("status") or {}).get("phase") == "Succeeded"


def test_a_one_task_job_submitted_after_a_job_that_fills_the_cluster_finishes_first(healthy: WholeStack) -> None:
    stack = healthy
    with stack.namespace("estimates") as ns:
        ledger = TaskLedger(stack.api, ns).start()
        try:
            stack.create_job(ns, stack.job_body("big", [group("t", 80, run_s=8)]))
            wait_for(lambda: any(p.spec.node_name for p in stack.pods(ns)), 120, "the big Job's first pod bound")
            stack.create_job(ns, stack.job_body("small", [group("t", 1, run_s=8)]))
            wait_for(lambda: _done(stack.job(ns, "small")), 240, "the small Job finished")
            big = stack.job(ns, "big")
            groups = (big.get("status") or {}).get("groups") or {}
            waiting = sum(int(g.get("pending", 0)) for g in groups.values())
            assert not _done(big) and waiting > 0, f"the big Job finished first or had nothing waiting: {big['status']}"
            jobs = stack.wait_jobs_done(ns, timeout_s=300)
        finally:
            ledger.stop()
        assert ledger.problems(jobs) == []
        assert jobs["small"]["status"]["completionTime"] < jobs["big"]["status"]["completionTime"]
