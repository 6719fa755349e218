"""The chart's monitors under the Prometheus Operator: the real Prometheus, run with the scrape configuration the
operator generates from them (:mod:`tests.dashboard.operator_scrape`), keeps the components' own labels, and
every dashboard query answers from what it stored.

The targets are a stand-in on loopback serving, per monitor endpoint, the series that component exports (names
from :class:`stowage.labels.METRICS`, kube-scheduler's for the scheduler's two paths). The node monitor's pod is
``stowage-node-monitor-…`` in the release namespace; the workload pods it reports are in namespace ``work``. The
Prometheus Operator's target labels (``namespace``, ``pod``, ``container``, ``service``, ``endpoint``) would
overwrite them, renaming the scraped ones ``exported_namespace``/``exported_pod``, without ``honorLabels``.
"""

from __future__ import annotations

import http.server
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from stowage.labels import METRICS, SCHEDULER_NAME
from tests.chart.render import CHART, find_helm, render_documents
from tests.dashboard import grafana, operator_scrape
from tests.dashboard.test_dashboard_live import finite, node_values, range_query
from tests.support.prometheus import prometheus_server, query, wait_for_query

pytestmark = pytest.mark.prometheus

NAMESPACE = "stowage-system"
NODES = ("node-a", "node-b")
#: (namespace, pod, class) the node monitor on node-a reports: the workload, never the monitor's own pod.
WORKLOAD = (("work", "etl-0", "opportunistic"), ("work", "etl-1", "opportunistic"), ("work", "web-0", "regular"))
SCRAPE = "1s"
HELD_REASONS = ("share", "quota", "room", "sample")


def _histogram(name: str, labels: str, n: int) -> list[str]:
    sep = "," if labels else ""
    lines = [f'{name}_bucket{{{labels}{sep}le="{le}"}} {n * (i + 1)}' for i, le in enumerate(("0.01", "0.1", "1"))]
    return [*lines, f'{name}_bucket{{{labels}{sep}le="+Inf"}} {n * 4}', f"{name}_sum{{{labels}}} {n * 0.3}",
            f"{name}_count{{{labels}}} {n * 4}"]


def exposition(component: str, path: str, n: int) -> str:
    """What the container ``component`` serves on ``path`` at its ``n``-th scrape (counters grow with ``n``)."""
    m = METRICS
    lines: list[str] = []
    if component == "node-monitor":
        for node in NODES:
            for resource, cap in (("cpu", 8), ("memory", 16 << 30), ("disk", 500 << 20), ("network", 1250 << 20)):
                lines += [f'{m.NODE_CAPACITY}{{node="{node}",resource="{resource}"}} {cap}',
                          f'{m.NODE_USAGE}{{node="{node}",resource="{resource}"}} {cap / 4}',
                          f'{m.NODE_CONTENTION}{{node="{node}",resource="{resource}"}} 0',
                          f'{m.NODE_BLOCKED}{{node="{node}",resource="{resource}"}} 0',
                          f'{m.EVICTIONS_TOTAL}{{node="{node}",resource="{resource}",policy="preserve"}} {n}']
            lines += [f'{m.SAMPLE_TIME}{{node="{node}"}} {time.time()}',
                      *_histogram(m.SAMPLE_SECONDS, f'node="{node}"', n)]
        for namespace, pod, cls in WORKLOAD:
            for resource in ("cpu", "memory"):
                lines.append(f'{m.POD_USAGE}{{node="{NODES[0]}",namespace="{namespace}",pod="{pod}",class="{cls}",'
                             f'resource="{resource}"}} 1')
    elif component == "extender":
        lines += [*_histogram(m.EXTENDER_REQUEST_SECONDS, 'verb="filter"', n),
                  f'{m.EXTENDER_REJECTIONS_TOTAL}{{reason="no harvestable room"}} {n}',
                  f'{m.EXTENDER_EVENTS_TOTAL}{{outcome="posted"}} {n}',
                  *(f'{m.NODE_HARVESTABLE}{{node="{node}",resource="{r}"}} 2'
                    for node in NODES for r in ("cpu", "memory"))]
    elif component == "operator":
        lines += [f'{m.QUEUE_DOMINANT_SHARE}{{queue="default",pool="regular"}} 0.5',
                  f'{m.QUEUE_FAIR_SHARE}{{queue="default"}} 1',
                  f'{m.QUEUE_USAGE}{{queue="default",pool="regular"}} 0.5',
                  f'{m.QUEUE_USAGE_TARGET}{{queue="default",pool="regular"}} 0.5',
                  *(f'{m.QUEUE_ALLOCATED}{{queue="default",pool="regular",resource="{r}"}} 1'
                    for r in ("cpu", "memory")),
                  f'{m.QUEUE_PENDING_TASKS}{{queue="default"}} 3',
                  *_histogram(m.JOB_COMPLETION_SECONDS, 'queue="default"', n),
                  *_histogram(m.QUEUE_WAIT_SECONDS, 'queue="default",kind="job"', n),
                  f'{m.QUEUE_PREDICTED_WAIT}{{queue="default",job="first"}} 30',
                  f'{m.QUEUE_PREDICTED_WAIT}{{queue="default",job="last"}} 90',
                  *_histogram(m.FORECAST_ERROR, 'queue="default"', n),
                  *_histogram(m.FORECAST_SECONDS, "", n),
                  *_histogram(m.RELEASE_TO_BIND_SECONDS, "", n),
                  f'{m.DISPATCH_TOTAL}{{class="regular"}} {n}',
                  # Added by #20's "why a pod waits" part: the panel reads it by this name.
                  *(f'stowage_held_pods{{queue="default",reason="{r}"}} 1' for r in HELD_REASONS)]
    elif component == "kube-scheduler" and path.endswith("/metrics/resources"):
        for namespace, pod, _ in WORKLOAD:
            for resource, value in (("cpu", 1), ("memory", 1 << 30)):
                lines.append(f'kube_pod_resource_request{{namespace="{namespace}",node="{NODES[0]}",pod="{pod}",'
                             f'priority="0",resource="{resource}",scheduler="{SCHEDULER_NAME}",unit="cores"}} {value}')
    elif component == "kube-scheduler":
        lines += [*(f'scheduler_pending_pods{{queue="{q}"}} 2'
                    for q in ("active", "backoff", "unschedulable", "gated")),
                  f'scheduler_schedule_attempts_total{{profile="{SCHEDULER_NAME}",result="scheduled"}} {n}',
                  *_histogram("scheduler_scheduling_attempt_duration_seconds",
                              f'profile="{SCHEDULER_NAME}",result="scheduled"', n)]
    return "\n".join(lines) + "\n"


class _StandIn(http.server.ThreadingHTTPServer):
    def __init__(self, jobs: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.jobs = jobs
        self.scrapes = itertools.count(1)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _StandIn

    def do_GET(self) -> None:
        job = next((j for j in self.server.jobs if self.path.startswith(f"/{j}/")), None)
        if job is None:
            self.send_error(404)
            return
        body = exposition(self.server.jobs[job], self.path, next(self.server.scrapes)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def monitors() -> list[dict[str, Any]]:
    return [d for d in render_documents({"monitoring.prometheusOperator": True, "monitoring.interval": SCRAPE},
                                        namespace=NAMESPACE)]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    if find_helm() is None:
        pytest.skip("helm not found: run `bash scripts/setup.sh --test`")
    endpoints = operator_scrape.discovered(monitors())
    server = _StandIn({e.job_name: e.container for e in endpoints})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        configs = operator_scrape.scrape_configs(endpoints, address, SCRAPE)
        start = time.time()
        with prometheus_server(tmp_path_factory.mktemp("prom-operator"), [], extra_scrape_configs=configs) as url:
            wait_for_query(url, "up == 1", timeout_s=120, min_series=len(endpoints))
            # Enough samples for every rate() over the dashboard's windows (4 × the 1 s scrape).
            wait_for_query(url, "count_over_time(up[30s]) >= 8", timeout_s=120, min_series=len(endpoints))
            yield url, start
    finally:
        server.shutdown()


def test_every_monitor_endpoint_honours_the_components_labels() -> None:
    endpoints = operator_scrape.discovered(monitors())
    assert {e.container for e in endpoints} == {"extender", "kube-scheduler", "node-monitor", "operator"}
    assert [e.job_name for e in endpoints if not e.honor_labels] == []


def test_the_stowage_schedulers_own_metrics_are_scraped_too() -> None:
    paths = {e.spec["path"] for e in operator_scrape.discovered(monitors()) if e.container == "kube-scheduler"}
    assert paths == {"/metrics", "/metrics/resources"}


def test_pod_usage_keeps_the_workloads_namespace_and_pod(scraped: tuple[str, float]) -> None:
    url, _ = scraped
    series = query(url, METRICS.POD_USAGE)
    assert {(s["metric"]["namespace"], s["metric"]["pod"]) for s in series} == {(n, p) for n, p, _ in WORKLOAD}
    assert not [s["metric"] for s in series if any(k.startswith("exported_") for k in s["metric"])]
    # The operator's target labels still name where the series came from, for labels the component left unset.
    assert {s["metric"]["job"] for s in series} == {f"{NAMESPACE}/stowage-node-monitor"}
    (capacity,) = query(url, f'{METRICS.NODE_CAPACITY}{{node="{NODES[0]}",resource="cpu"}}')
    assert capacity["metric"]["namespace"] == NAMESPACE
    assert capacity["metric"]["pod"].startswith("stowage-node-monitor-")


def test_the_dashboard_counts_workload_pods_not_monitor_pods(scraped: tuple[str, float]) -> None:
    url, _ = scraped
    dashboard = grafana.load(CHART / "dashboards" / "stowage.json")
    (panel,) = [t for t in grafana.targets(dashboard) if t.panel == "Opportunistic pods running" and t.ref_id == "A"]
    expr = grafana.interpolate(panel.expr, {"node": list(NODES)}, range_s=60, scrape_interval_s=1.0)
    assert [float(r["value"][1]) for r in query(url, expr)] == [2.0]


def test_every_dashboard_query_answers_from_the_operators_scrape_config(scraped: tuple[str, float]) -> None:
    url, start = scraped
    dashboard = grafana.load(CHART / "dashboards" / "stowage.json")
    end = time.time()
    variables = {name: node_values(url, q, start, end) for name, q in grafana.variable_queries(dashboard).items()}
    assert variables == {"node": sorted(NODES), "queue": ["default"]}
    empty = []
    for target in grafana.targets(dashboard):
        sent = grafana.interpolate(target.expr, variables, range_s=end - start, scrape_interval_s=1.0)
        if not finite(range_query(url, sent, start, end, 1.0)):
            empty.append(f"{target.panel} {target.ref_id}: {sent}")
    assert not empty, "\n".join(empty)


def test_stand_in_paths_cover_every_endpoint() -> None:
    """Each endpoint's stand-in serves something: a monitor whose component served nothing would pass vacuously."""
    for endpoint in operator_scrape.discovered(monitors()):
        assert exposition(endpoint.container, endpoint.spec["path"], 1).strip(), endpoint.job_name
