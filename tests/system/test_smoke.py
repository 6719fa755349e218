"""The whole stack runs a Job end to end, every component under its own chart ServiceAccount."""

from __future__ import annotations

from tests.support.stack import TaskLedger, WholeStack


def test_a_job_runs_to_success_and_no_component_was_forbidden_anything(healthy: WholeStack) -> None:
    stack = healthy
    with stack.namespace("smoke") as ns:
        ledger = TaskLedger(stack.api, ns).start()
        try:
            stack.create_job(ns, stack.job_body("smoke", [{"name": "w", "replicas": 4, "cpu": "1", "run_s": 3}]))
            jobs = stack.wait_jobs_done(ns, timeout_s=180)
        finally:
            ledger.stop()
        assert ledger.problems(jobs) == []
    assert stack.forbidden() == {}
