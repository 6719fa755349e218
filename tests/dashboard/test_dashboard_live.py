"""Every query of the chart's Grafana dashboard, run against a real Prometheus that scraped the running parts.

One stack for the module (:class:`tests.operator.support.OperatorStack`, harvesting): three fake nodes, a node
monitor per node, the extender behind the real kube-scheduler, and the operator. Besides, a second real
kube-scheduler that schedules nothing (its own profile name) serves ``/metrics/resources`` with the
chart's ``--authorization-always-allow-paths``, as the chart's scheduler does. A Prometheus of this module
scrapes all of them every second: node monitors, extender and operator over HTTP, kube-scheduler over HTTPS
without a token (proof the chart's flag is enough).

Then a little work so counters and histograms have samples: a regular Job that completes, an opportunistic
Job one of whose tasks the node monitor evicts (its usage is pushed above the preemption threshold), and an
opportunistic pod no node can hold (the extender rejects it).

Each query is sent the way Grafana would send it (:mod:`tests.dashboard.grafana`: ``$node`` = every node
the dashboard's variable query finds, ``$__rate_interval`` from the 1 s scrape interval) as a range query
over the run. Every query must return a finite value; one that cannot is a dashboard bug. A last test draws
every panel into one PNG (``build/artifacts/dashboard.png``): an artifact for a person, not an assertion; and the
rows "Waiting pods" and "When will it run" into the picture docs/operator.md shows (``build/artifacts/``, or
``docs/images/dashboard-waiting.png`` itself with ``STOWAGE_DOCS_IMAGES=1``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from stowage import labels
from tests.chart.render import CHART, REPO, docs_of_kind, find_helm, render_documents
from tests.dashboard import grafana
from tests.operator.support import NODE_LABEL, OperatorStack, job_body, running_operator, wait_for
from tests.scheduler.stack import opportunistic_pod
from tests.support.controlplane import ControlPlane
from tests.support.processes import stop_process, wait_for_logged_port
from tests.support.prometheus import prometheus_binary, prometheus_server, query, wait_for_query

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(1200)]

DASHBOARD = CHART / "dashboards" / "stowage.json"
ARTIFACT = REPO / "build" / "artifacts" / "dashboard.png"
#: The picture of the queue rows in docs/operator.md ("When will it run"), drawn from this run.
DOCS_IMAGE = REPO / "docs" / "images" / "dashboard-waiting.png"
DOCS_ROWS = ("Waiting pods", "When will it run (the forecast)")
SCRAPE_S = 1.0
GI = 1 << 30
#: Panels whose series exist only once the work happened: they must show more than zeros.
DRIVEN = ("Evictions by resource and policy", "Extender rejections by reason", "Job completion time",
          "Release-to-bind latency", "Extender latency", "Dispatches by class",
          "Queue wait time (submission → release)", "Forecast error (first predicted finish)",
          "Forecast refresh CPU")
#: Panels whose series this stack may not have, and why: its kube-scheduler serves no metrics port to scrape
#: (the observer's profile is not stowage-scheduler), and a pod may never be held at the gate at a scrape.
#: ``test_prometheus_operator.py`` runs their queries on every series the components export, scraped through
#: the Prometheus Operator's configuration; here they are checked only when the series exist.
MAYBE_EMPTY = {"Pending pods in the Stowage scheduler": "the stack's kube-scheduler is not scraped",
               "Scheduling attempt latency (stowage-scheduler)": "the stack's kube-scheduler is not scraped",
               "Held pods by reason": "no pod was held at the admission gate at a scrape",
               "Predicted wait per queue": "nothing may be pending when the forecast runs"}


class _BandwidthStack(OperatorStack):
    """The operator stack whose nodes declare disk and network bandwidth (the annotations panel 4's capacity
    series reads), set before each node monitor starts: a monitor reads its Node at start and on resync."""

    def _start_monitor(self, node: str) -> None:
        client.CoreV1Api(self.api).patch_node(node, {"metadata": {"annotations": {
            labels.ANN_DISK_BANDWIDTH: "500Mi", labels.ANN_NETWORK_BANDWIDTH: "1250Mi"}}})
        super()._start_monitor(node)


@dataclass
class Live:
    stack: OperatorStack
    prometheus: str
    start: float
    nodes: list[str]
    results: dict[tuple[int, str], list[dict[str, Any]]] = field(default_factory=dict)
    sent: dict[tuple[int, str], str] = field(default_factory=dict)


def _chart_scheduler_allow_paths() -> str:
    """The chart's ``--authorization-always-allow-paths`` argument of kube-scheduler (rendered by Helm)."""
    (deployment,) = [d for d in docs_of_kind(render_documents(), "Deployment")
                     if d["metadata"]["name"].endswith("-scheduler")]
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler")
    (arg,) = [a for a in container["args"] if a.startswith("--authorization-always-allow-paths=")]
    return arg


@contextlib.contextmanager
def observing_scheduler(plane: ControlPlane, workdir: Path, allow_paths: str) -> Iterator[int]:
    """A kube-scheduler on 127.0.0.1 that schedules nothing (profile ``stowage-dashboard-observer``) and serves
    ``/metrics/resources`` over HTTPS; yields its port. kube-scheduler has no 'any free port' (0 turns HTTPS
    off), so a free port is picked and the start retried if another process took it in between."""
    config = plane.scheduler_config({"profiles": [{"schedulerName": "stowage-dashboard-observer"}]})
    path = workdir / "observer.yaml"
    path.write_text(yaml.safe_dump(config))
    kubeconfig = str(plane.kubeconfig)
    for attempt in range(5):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = workdir / f"observer-scheduler-{attempt}.log"
        argv = [str(plane.assets / "kube-scheduler"), f"--config={path}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--cert-dir={workdir / 'observer-certs'}", allow_paths, "--v=1"]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_for_logged_port(proc, log, r"Serving securely on 127\.0\.0\.1:(\d+)", 120)
        except RuntimeError:
            stop_process(proc, timeout_s=15)
            if "address already in use" in log.read_text(errors="replace"):
                continue
            raise
        try:
            yield port
        finally:
            stop_process(proc, timeout_s=15)
        return
    raise RuntimeError("kube-scheduler found no free port in 5 attempts")


def _first(url: str, promql: str) -> float:
    """The largest value of an instant query (0 when empty)."""
    values = [float(r["value"][1]) for r in query(url, promql)]
    return max(values, default=0.0)


def drive_work(stack: OperatorStack, url: str) -> None:
    """A completed regular Job, an evicted opportunistic task, a rejected opportunistic pod (see the docstring)."""
    stack.create_queue("dashboard", weight=2.0)
    with stack.namespace("dash") as ns:
        # Regular room first (docs/policy.md): a `"true"` task runs opportunistic only where no regular room holds
        # it, and a running one is promoted once its node has room for it. So a blocker on every node (bound by
        # name, outside Stowage, running until the namespace goes) takes all but 3Gi of its memory: the regular
        # tasks (1Gi) still fit, the opportunistic ones (4Gi) never do. The blocker uses half its request (the
        # fake kubelet's default), which leaves about 0.9 × 15 − 6 = 7.5Gi harvestable per node.
        for i, node in enumerate(stack.nodes):
            stack.core.create_namespaced_pod(ns, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"blocker-{i}"},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "main", "image": "busybox",
                    "resources": {"requests": {"cpu": "1", "memory": "12Gi"}, "limits": {"memory": "12Gi"}}}]}})
        wait_for(lambda: all(stack.core.read_namespaced_pod(f"blocker-{i}", ns).status.phase == "Running"
                             for i in range(len(stack.nodes))), 120, "the blockers running")
        stack.create_job(ns, job_body("regular", [{"name": "work", "replicas": 3, "run_s": 10, "cpu": "1"}],
                                      stack_id=stack.id))
        stack.create_job(ns, job_body("opp", [{"name": "work", "replicas": 2, "run_s": 90, "cpu": "500m",
                                               "memory": "4Gi"}], queue="dashboard", opportunistic="true",
                                      stack_id=stack.id))
        victim = wait_for(lambda: next((p for p in stack.pods(ns, "app=opp") if p.status.phase == "Running"), None),
                          240, "an opportunistic task running")
        assert victim.metadata.labels[labels.LABEL_CLASS] == "opportunistic", "the node monitor evicts only these"
        # 14.6Gi of the node's 15Gi allocatable: memory contention on every sample → the node monitor evicts.
        stack.kubelet.set_usage(f"{ns}/{victim.metadata.name}", {"cpu": 0.5, "memory": 14.6 * GI})
        wait_for(lambda: _first(url, f"sum({labels.METRICS.EVICTIONS_TOTAL})") >= 1, 180,
                 "the node monitor's eviction, scraped")
        stack.kubelet.set_usage(f"{ns}/{victim.metadata.name}", None)
        too_big = opportunistic_pod("too-big", cpu="64", memory="1Gi", stack_id=stack.id)
        too_big["spec"]["nodeSelector"] = {NODE_LABEL: stack.id}
        stack.core.create_namespaced_pod(ns, too_big)
        wait_for(lambda: _first(url, f"sum({labels.METRICS.EXTENDER_REJECTIONS_TOTAL})") >= 1, 180,
                 "the extender's rejection, scraped")
        stack.wait_job_phase(ns, "regular", "Succeeded")
        completions = f"sum({labels.METRICS.JOB_COMPLETION_SECONDS}_count)"
        wait_for(lambda: _first(url, completions) >= 1, 120, "the Job's completion, scraped")
        # The completion histogram's series (label queue) appears with its first completion, so rate() needs
        # a second one; in a running cluster every later completion counts.
        stack.create_job(ns, job_body("regular-2", [{"name": "work", "run_s": 3, "cpu": "1"}], stack_id=stack.id))
        stack.wait_job_phase(ns, "regular-2", "Succeeded")
        wait_for(lambda: _first(url, completions) >= 2, 120, "the second Job's completion, scraped")


def node_values(url: str, variable_query: str, start: float, end: float) -> list[str]:
    """A ``label_values(metric, label)`` variable, answered as Grafana's Prometheus data source asks it."""
    found = re.fullmatch(r"\s*label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)\s*", variable_query)
    assert found, f"not a label_values() query: {variable_query!r}"
    metric, label = found.groups()
    response = httpx.get(f"{url}/api/v1/label/{label}/values",
                         params={"match[]": metric, "start": start, "end": end}, timeout=10.0)
    response.raise_for_status()
    return sorted(response.json()["data"])


def range_query(url: str, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/api/v1/query_range",
                         params={"query": promql, "start": start, "end": end, "step": step_s}, timeout=30.0)
    body = response.json()
    assert response.status_code == 200 and body.get("status") == "success", f"{promql}: {body}"
    return list(body["data"]["result"])


def finite(series: list[dict[str, Any]]) -> list[float]:
    return [float(v) for s in series for _, v in s["values"] if math.isfinite(float(v))]


def run_all(live: Live, dashboard: dict[str, Any]) -> None:
    """Every target as Grafana sends it, over the run so far."""
    end = time.time()
    range_s = end - live.start
    variables = {name: node_values(live.prometheus, q, live.start, end)
                 for name, q in grafana.variable_queries(dashboard).items()}
    step = grafana.interval_s(range_s, 1000, SCRAPE_S)
    for target in grafana.targets(dashboard):
        key = (target.panel_id, target.ref_id)
        sent = grafana.interpolate(target.expr, variables, range_s=range_s, scrape_interval_s=SCRAPE_S)
        live.sent[key] = sent
        live.results[key] = range_query(live.prometheus, sent, live.start, end, step)


def answered(live: Live, target: grafana.Target) -> bool:
    """The target's query answers as :func:`test_every_dashboard_query_returns_data` requires (an empty answer
    only for a MAYBE_EMPTY panel)."""
    values = finite(live.results[(target.panel_id, target.ref_id)])
    if not values:
        return target.panel in MAYBE_EMPTY
    return target.panel not in DRIVEN or max(values) > 0


def raw_series(live: Live, promql: str) -> str:
    """The samples of every metric a query reads, over the run (a failing query's message shows them)."""
    out = []
    for name in sorted(set(re.findall(r"\b(stowage_[a-z_]+|kube_[a-z_]+)\b", promql))):
        for series in range_query(live.prometheus, name, live.start, time.time(), 1.0):
            values = [v for _, v in series["values"]]
            out.append(f"{name}{series['metric']}: {values[:3]}..{values[-3:]} ({len(values)} points)")
    return "\n".join(out)


def scrape_health(live: Live) -> str:
    """Each scrape target's job, URL, health and last error (what a failing query's message shows)."""
    active = httpx.get(f"{live.prometheus}/api/v1/targets", timeout=10.0).json()["data"]["activeTargets"]
    return "\n".join(f"{t['labels'].get('job')} {t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}"
                     for t in active)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return grafana.load(DASHBOARD)


@pytest.fixture(scope="module")
def live(control_plane: Any, tmp_path_factory: pytest.TempPathFactory, dashboard: dict[str, Any]) -> Iterator[Live]:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    prometheus_binary()  # skips here, fails under CI, when missing
    if find_helm() is None:
        reason = "helm not found: run `bash scripts/setup.sh --test` (the chart's scheduler flags are rendered)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the dashboard tests: {reason}", pytrace=False)
        pytest.skip(reason)
    allow_paths = _chart_scheduler_allow_paths()
    workdir = tmp_path_factory.mktemp("dashboard")
    with (_BandwidthStack(control_plane, workdir / "stack", harvest=True) as stack,
          running_operator(stack, webhooks=False) as operator,
          observing_scheduler(control_plane, workdir, allow_paths) as scheduler_port):
        assert stack.extender is not None
        targets = [f"127.0.0.1:{m.port}" for m in stack.monitors.values()]
        targets += [f"127.0.0.1:{stack.extender.port}", f"127.0.0.1:{operator.port}"]
        scheduler_job = {"job_name": "kube-scheduler", "scheme": "https", "metrics_path": "/metrics/resources",
                         "tls_config": {"insecure_skip_verify": True},
                         "static_configs": [{"targets": [f"127.0.0.1:{scheduler_port}"]}]}
        with prometheus_server(workdir, targets, scrape_interval_s=SCRAPE_S,
                               extra_scrape_configs=[scheduler_job]) as url:
            # Every target scraped once before the work: a counter's first sample is its baseline (rate()
            # and increase() see nothing of what happened before it). Prometheus applies static targets
            # a few seconds after it is ready.
            wait_for_query(url, "up == 1", timeout_s=120, min_series=len(targets) + 1)
            state = Live(stack, url, time.time() - 5, list(stack.nodes))
            drive_work(stack, url)
            # Until every query answers as the tests below require (the last scrapes land) or the bound passes;
            # the tests then judge. A MAYBE_EMPTY panel's series may never exist: it is not waited for.
            deadline = time.monotonic() + 60
            while True:
                run_all(state, dashboard)
                if all(answered(state, t) for t in grafana.targets(dashboard)) or time.monotonic() > deadline:
                    break
                time.sleep(2)
            yield state


TARGETS = list(grafana.targets(grafana.load(DASHBOARD)))


def test_the_node_variable_finds_every_monitored_node(live: Live, dashboard: dict[str, Any]) -> None:
    variable_query = grafana.variable_queries(dashboard)["node"]
    assert node_values(live.prometheus, variable_query, live.start, time.time()) == sorted(live.nodes)


def test_the_queue_variable_finds_the_queues_with_work(live: Live, dashboard: dict[str, Any]) -> None:
    """``$queue`` lists Stowage Queues (the operator's gauges), never kube-scheduler's internal queues."""
    found = node_values(live.prometheus, grafana.variable_queries(dashboard)["queue"], live.start, time.time())
    assert {"default", "dashboard"} <= set(found), found
    assert not {"active", "backoff", "unschedulable", "gated"} & set(found), found


@pytest.mark.parametrize("target", TARGETS, ids=[f"{t.panel_id}{t.ref_id}-{t.panel}" for t in TARGETS])
def test_every_dashboard_query_returns_data(live: Live, target: grafana.Target) -> None:
    key = (target.panel_id, target.ref_id)
    sent = live.sent[key]
    assert "$" not in sent, f"a variable Grafana would have substituted is left: {sent}"
    values = finite(live.results[key])
    if not values and target.panel in MAYBE_EMPTY:
        pytest.skip(f"{target.panel}: {MAYBE_EMPTY[target.panel]} (covered by test_prometheus_operator.py)")
    assert values, f"panel {target.panel!r} query {target.ref_id} returned no data: {sent}\n{scrape_health(live)}"
    if target.panel in DRIVEN:
        assert max(values) > 0, f"panel {target.panel!r} query {target.ref_id} shows only zeros: {sent}\n" \
            f"{raw_series(live, sent)}"


def test_render_every_panel_to_one_png(live: Live, dashboard: dict[str, Any]) -> None:
    """An artifact for a person (build/artifacts/dashboard.png), not an assertion beyond 'it was written'."""
    pytest.importorskip("matplotlib", reason="matplotlib is in the 'sim' extra: pip install -e '.[sim]'")
    from tests.dashboard import png

    path = png.render(dashboard, live.results, live.start, ARTIFACT)
    print(f"\ndashboard grid written to {path}")
    assert path.stat().st_size > 10_000
    rows = DOCS_IMAGE if os.environ.get("STOWAGE_DOCS_IMAGES") == "1" else ARTIFACT.with_name(DOCS_IMAGE.name)
    rows = png.render(dashboard, live.results, live.start, rows, rows=DOCS_ROWS,
                      title="Stowage: the rows Waiting pods and When will it run, from a real Prometheus")
    print(f"the queue rows written to {rows}")
    assert rows.stat().st_size > 10_000

