"""The whole stack runs a Job end to end, every component under its own chart ServiceAccount, all scraped."""

from __future__ import annotations

from tests.support.stack import TaskLedger, WholeStack, wait_for


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


def test_prometheus_scrapes_every_component_at_the_charts_interval(healthy: WholeStack) -> None:
    stack = healthy
    assert stack.prometheus is not None and stack.chart is not None
    assert stack.prometheus.scrape_interval_s == stack.chart.scrape_interval_s()

    def targets_up() -> dict[str, int] | None:
        up: dict[str, int] = {}
        for series in stack.prometheus.query("up == 1"):
            job = series["metric"].get("job", "")
            up[job] = up.get(job, 0) + 1
        want = {"stowage-node-monitor": len(stack.monitors), "stowage-extender": 1, "stowage-operator": 1}
        return up if all(up.get(job, 0) >= n for job, n in want.items()) else None

    wait_for(targets_up, 120, "every monitor, the extender and the operator up in Prometheus")
