"""The chart's alerting rules (charts/stowage/files/alerts.yaml) in a real Prometheus, against the operator's own
metrics endpoint (``stowage.operator.metrics.serve``): a stalled replica and failing passes fire their alerts, a
healthy replica fires none.

Prometheus evaluates a copy with every ``for:`` set to 0s, so the test need not wait minutes; the expressions,
labels and annotations are the shipped ones (``promtool check rules`` checks the shipped file as it is).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from stowage.operator.metrics import OperatorMetrics, serve

from tests.chart.render import CHART, render_documents
from tests.support.prometheus import prometheus_server, query

pytestmark = pytest.mark.prometheus

RULES = CHART / "files" / "alerts.yaml"


def test_the_shipped_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (apt-get install prometheus)")
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_chart_ships_the_rules_with_and_without_the_prometheus_operator() -> None:
    rules = yaml.safe_load(RULES.read_text())
    (rule,) = [d for d in render_documents(api_versions=("monitoring.coreos.com/v1",))
               if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == rules
    (configmap,) = [d for d in render_documents() if d["kind"] == "ConfigMap" and "alerts" in d["metadata"]["name"]]
    assert yaml.safe_load(configmap["data"]["stowage-alerts.yaml"]) == rules


def _firing(url: str) -> dict[str, list[dict[str, str]]]:
    alerts = httpx.get(f"{url}/api/v1/alerts", timeout=5.0).json()["data"]["alerts"]
    out: dict[str, list[dict[str, str]]] = {}
    for a in alerts:
        if a["state"] == "firing":
            out.setdefault(a["labels"]["alertname"], []).append(a["labels"])
    return out


def test_a_stalled_replica_and_failing_passes_fire_and_a_healthy_replica_does_not(tmp_path: Path) -> None:
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    immediate = tmp_path / "alerts.yaml"
    immediate.write_text(yaml.safe_dump(rules))

    stalled, healthy = OperatorMetrics(), OperatorMetrics()
    stalled.last_pass_age.set_function(lambda: 600.0)
    healthy.last_pass_age.set_function(lambda: 0.4)
    servers = [serve(m, "127.0.0.1", 0) for m in (stalled, healthy)]
    try:
        targets = [f"127.0.0.1:{s.port}" for s in servers]
        with prometheus_server(tmp_path, targets, scrape_interval_s=0.5, rule_files=[immediate]) as url:
            deadline = time.monotonic() + 60.0
            scraped = f'stowage_pass_errors_total{{stage="decide",instance="{targets[0]}"}}'
            while not query(url, scraped) and time.monotonic() < deadline:
                time.sleep(0.2)  # the stalled replica's counters scraped at 0 first: increase() then sees the failures
            for _ in range(5):
                stalled.pass_errors.labels("decide").inc()
            stalled.bad_objects.inc("job")
            firing: dict[str, list[dict[str, str]]] = {}
            wanted = {"StowageDispatcherStalled", "StowagePassesFailing", "StowageBadObjects"}
            while time.monotonic() < deadline and not wanted <= set(firing):
                time.sleep(0.5)
                firing = _firing(url)
            assert wanted <= set(firing), firing
            assert [a["instance"] for a in firing["StowageDispatcherStalled"]] == [targets[0]]
            assert [a["stage"] for a in firing["StowagePassesFailing"]] == ["decide"]
            assert [a["kind"] for a in firing["StowageBadObjects"]] == ["job"]
            assert {a["severity"] for a in firing["StowageDispatcherStalled"]} == {"critical"}
    finally:
        for s in servers:
            s.stop()


def test_the_operator_endpoint_answers_probes_with_the_reason() -> None:
    reasons = iter([(False, "not ready: informer nodes not synced\n"), (True, "ready: last complete pass 0.3s ago\n")])
    server = serve(OperatorMetrics(), "127.0.0.1", 0, ready=lambda: next(reasons))
    try:
        base = f"http://127.0.0.1:{server.port}"
        first = httpx.get(f"{base}/readyz", timeout=5.0)
        assert first.status_code == 503 and "informer nodes not synced" in first.text
        assert httpx.get(f"{base}/readyz", timeout=5.0).status_code == 200
        assert httpx.get(f"{base}/healthz", timeout=5.0).status_code == 200
        assert "stowage_last_pass_age_seconds +Inf" in httpx.get(f"{base}/metrics", timeout=5.0).text
    finally:
        server.stop()
