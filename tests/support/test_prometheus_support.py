"""The Prometheus test harness really scrapes: a prometheus_client exporter's value comes back by PromQL."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.prometheus import prometheus_server, wait_for_query


def test_prometheus_scrapes_a_loopback_exporter_and_answers_promql(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("stowage_test_value", "test gauge", ["node"], registry=registry)
    gauge.labels(node="n1").set(42.5)
    # Port 0 and the port bound: a port picked free first could be taken before the exporter binds it.
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_port
    try:
        with prometheus_server(tmp_path, [f"127.0.0.1:{port}"], scrape_interval_s=0.5) as url:
            result = wait_for_query(url, 'stowage_test_value{node="n1"}')
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert [float(r["value"][1]) for r in result] == [42.5]
