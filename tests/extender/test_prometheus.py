"""Utilization read from a REAL Prometheus server scraping a test exporter with the node monitor's metric names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from stowage.extender import filtering
from stowage.extender.app import create_app
from stowage.extender.messages import REASONS
from stowage.extender.pods import parse_pod
from stowage.extender.snapshot import take

from stowage.config import StowageSettings, apply_overrides
from stowage.kube.cluster import ClusterModel
from stowage.labels import METRICS
from stowage.prom import PrometheusReader, Utilization, peak_query
from tests.extender.objects import GI, extender_args, node, opportunistic_pod, regular_pod
from tests.support.kube import wait_until
from tests.support.prometheus import prometheus_server, wait_for_query
from tests.support.serving import serving

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

NODES = [node("n1"), node("n2"), node("n3")]


#: A node whose monitor is scraped on time but whose sampler is stuck: its sample time is two minutes old.
STUCK = "n9"
STUCK_AGE_S = 120.0


class Exporter:
    """A tiny node-monitor stand-in: the node series and the sample time on a prometheus_client HTTP server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["node", "resource"]
        self.usage = Gauge(METRICS.NODE_USAGE, "usage", labels, registry=self.registry)
        self.capacity = Gauge(METRICS.NODE_CAPACITY, "capacity", labels, registry=self.registry)
        self.blocked = Gauge(METRICS.NODE_BLOCKED, "blocked", labels, registry=self.registry)
        self.contention = Gauge(METRICS.NODE_CONTENTION, "contention", labels, registry=self.registry)
        self.sampled = Gauge(METRICS.SAMPLE_TIME, "sample time", ["node"], registry=self.registry)
        self.pods = Gauge(METRICS.POD_USAGE, "pod usage", ["node", "namespace", "pod", "class", "resource"],
                          registry=self.registry)
        for name in ("n1", "n2"):
            self.sampled.labels(name).set_function(time.time)  # a live monitor samples every second
            self.capacity.labels(name, "cpu").set(16)
            self.capacity.labels(name, "memory").set(16 * GI)
            self.contention.labels(name, "cpu").set(0)
            self.contention.labels(name, "memory").set(0)
            self.blocked.labels(name, "memory").set(0)
        self.usage.labels("n1", "cpu").set(2)
        self.usage.labels("n1", "memory").set(4 * GI)
        self.blocked.labels("n1", "memory").set(1 * GI)
        self.usage.labels("n2", "cpu").set(3)
        self.usage.labels("n2", "memory").set(5 * GI)
        self.contention.labels("n2", "memory").set(1)
        self.usage.labels(STUCK, "cpu").set(1)
        self.usage.labels(STUCK, "memory").set(1 * GI)
        self.capacity.labels(STUCK, "memory").set(16 * GI)
        self.sampled.labels(STUCK).set(time.time() - STUCK_AGE_S)
        # Port 0 and the port bound: a port picked free first could be taken before the server binds it.
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.port = int(self.server.server_port)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def explained(model: ClusterModel, utilization: Utilization, settings: StowageSettings, pod: dict,
              names: list[str]) -> str:
    """The numbers the extender's Event about ``pod`` would carry (``filtering.explain``)."""
    parsed = parse_pod(pod)
    snap = take(model, utilization, settings, names)
    return filtering.explain(parsed, snap, filtering.filter_nodes(parsed, snap))


def filter_once(prometheus: str, nodes: list[dict], pod: dict,
                settings: StowageSettings | None = None) -> tuple[dict, str]:
    """One filter of ``pod`` over ``nodes`` by an extender fed from ``prometheus``: the answer and its Event text."""
    settings = settings or StowageSettings()
    model = ClusterModel()
    model.replace_nodes(nodes)
    model.replace_pods([])
    utilization = Utilization(PrometheusReader(prometheus))
    utilization.refresh()
    try:
        with serving(create_app(settings, model, utilization)) as url:
            body = httpx.post(f"{url}/filter", json=extender_args(pod, nodes, cache=True)).json()
    finally:
        utilization.stop()
    names = [n["metadata"]["name"] for n in nodes]
    return body, explained(model, utilization, settings, pod, names)


@pytest.fixture(scope="module")
def exporter() -> Iterator[Exporter]:
    exp = Exporter()
    yield exp
    exp.close()


#: Scrape interval for the static exporter. Prometheus caps a scrape's timeout at the interval, and one failed
#: scrape marks every series stale (the tests below then read nothing): give a loaded machine 2 s to answer.
SCRAPE_INTERVAL_S = 2.0


@pytest.fixture(scope="module")
def prometheus(exporter: Exporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prometheus_server(tmp_path_factory.mktemp("prom"), [exporter.target], SCRAPE_INTERVAL_S) as url:
        wait_for_query(url, f'{METRICS.NODE_USAGE}{{node="n2",resource="memory"}}')
        wait_for_query(url, f'{METRICS.NODE_CONTENTION}{{node="n2",resource="memory"}} == 1')
        yield url


def test_a_refresh_reads_every_series_with_its_sample_age(prometheus: str) -> None:
    reader = PrometheusReader(prometheus)
    try:
        snapshot = reader.fetch(fetched_at_s=0.0)
    finally:
        reader.close()
    assert snapshot.error is None
    assert set(snapshot.index) == {"n1", "n2", STUCK}
    samples = snapshot.lookup(["n1", "n2", "n3"], ("cpu", "memory", "disk"), now_s=0.0)
    assert samples.present.tolist() == [True, True, False]
    # Usage nobody published (disk here, all of n3) is unknown, never 0: unknown harvests nothing.
    np.testing.assert_array_equal(samples.usage, [[2.0, 4 * GI, np.nan], [3.0, 5 * GI, np.nan], [np.nan] * 3])
    assert samples.capacity[0].tolist() == [16.0, 16 * GI, 0.0]
    assert samples.blocked[0, 1] == 1 * GI
    assert samples.contention.tolist() == [[False, False, False], [False, True, False], [False, False, False]]
    # Age is Prometheus' evaluation time minus the monitor's sample time: at most a few scrape intervals.
    assert 0.0 <= samples.age_s[0] < 10.0 and samples.age_s[2] == float("inf")
    # Scraped as recently as the others, but sampled two minutes ago: its age says so.
    stuck = snapshot.lookup([STUCK], ("memory",), now_s=0.0)
    assert stuck.present.tolist() == [True] and stuck.age_s[0] >= STUCK_AGE_S


def test_a_stuck_sampler_harvests_nothing_although_it_is_scraped(prometheus: str) -> None:
    body, detail = filter_once(prometheus, [node(STUCK)], opportunistic_pod(cpu="1", memory="1Gi"))
    assert body["NodeNames"] == []
    assert "old (limit 30s" in detail


def test_the_extender_harvests_from_prometheus_numbers(prometheus: str) -> None:
    body, detail = filter_once(prometheus, NODES, opportunistic_pod(cpu="2", memory="10Gi"))
    # n1: 0.9·16Gi − 4Gi − 1Gi = 9.4Gi < 10Gi; n2 contended; n3 has no samples.
    assert body["NodeNames"] == []
    assert body["FailedNodes"] == {"n1": REASONS["harvest-capacity"], "n2": REASONS["contention"],
                                   "n3": REASONS["utilization-unavailable"]}
    assert "n1: memory 10.0Gi > harvestable 9.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 1.0Gi)" in detail


def test_samples_older_than_the_limit_harvest_nothing(prometheus: str) -> None:
    settings = apply_overrides(StowageSettings(), {"harvest": {"utilization_stale_after_s": 1e-6}})
    body, detail = filter_once(prometheus, NODES[:1], opportunistic_pod(cpu="1", memory="1Gi"), settings)
    assert body["NodeNames"] == []
    assert body["FailedNodes"]["n1"] == REASONS["utilization-unavailable"]
    assert "old (limit 0s, harvest.utilization_stale_after_s)" in detail


def test_when_prometheus_stops_no_node_harvests_and_regular_pods_are_unaffected(
    exporter: Exporter, tmp_path: Path
) -> None:
    model = ClusterModel()
    model.replace_nodes(NODES[:1])
    model.replace_pods([])
    opp = extender_args(opportunistic_pod(cpu="1", memory="1Gi"), NODES[:1], cache=True)
    reg = extender_args(regular_pod(), NODES[:1], cache=True)
    with prometheus_server(tmp_path, [exporter.target], SCRAPE_INTERVAL_S) as prom_url:
        wait_for_query(prom_url, f'{METRICS.NODE_USAGE}{{node="n1"}}')
        # A generous query timeout: one refresh timing out under load would turn the harvest below into a miss.
        utilization = Utilization(PrometheusReader(prom_url, timeout_s=10.0), interval_s=0.2).start()
        app = create_app(StowageSettings(), model, utilization)
        with serving(app) as url:
            wait_until(lambda: utilization.current.error is None, 30)
            assert httpx.post(f"{url}/filter", json=opp).json()["NodeNames"] == ["n1"]
    # Prometheus is stopped now; the same app keeps answering.
    try:
        with serving(app) as url:
            # A refresh during Prometheus' shutdown may have seen its 503; wait for one after it.
            wait_until(lambda: "unreachable" in (utilization.current.error or ""), 30)
            body = httpx.post(f"{url}/filter", json=opp).json()
            assert body["NodeNames"] == [] and body["Error"] == ""
            assert body["FailedNodes"]["n1"] == REASONS["utilization-unavailable"]
            assert httpx.post(f"{url}/filter", json=reg).json()["NodeNames"] == ["n1"]
            ready = httpx.get(f"{url}/readyz").json()
            assert ready["status"] == "ready" and "unreachable" in ready["utilization_error"]
    finally:
        utilization.stop()


def test_usage_is_the_maximum_over_the_window_not_the_last_rate(exporter: Exporter, prometheus: str) -> None:
    """A burst seen in one scrape keeps counting for ``harvest.usage_window_s``: one quiet rate opens nothing."""
    burst = "n8"
    exporter.sampled.labels(burst).set_function(time.time)
    exporter.usage.labels(burst, "memory").set(12 * GI)
    wait_for_query(prometheus, f'{METRICS.NODE_USAGE}{{node="{burst}",resource="memory"}} == {12 * GI}')
    exporter.usage.labels(burst, "memory").set(1 * GI)
    wait_for_query(prometheus, f'{METRICS.NODE_USAGE}{{node="{burst}",resource="memory"}} == {1 * GI}')
    reader = PrometheusReader(prometheus, usage_window_s=600.0)  # the burst stays inside the window
    try:
        windowed = reader.fetch(fetched_at_s=0.0).lookup([burst], ("memory",), now_s=0.0)
    finally:
        reader.close()
    assert windowed.usage[0, 0] == 12 * GI


def test_a_finished_pod_leaves_usage_at_once_not_when_it_leaves_the_window(
    exporter: Exporter, prometheus: str
) -> None:
    """A pod that finished inside the usage window is taken off ``U`` (its per-pod series is gone), never below the
    node's latest sample; a pod whose class label changed (a promotion) is still there and stays in ``U``."""
    name = "n7"
    exporter.sampled.labels(name).set_function(time.time)
    exporter.usage.labels(name, "memory").set(10 * GI)
    exporter.pods.labels(name, "batch", "done", "opportunistic", "memory").set(7 * GI)
    exporter.pods.labels(name, "batch", "stays", "opportunistic", "memory").set(2 * GI)
    wait_for_query(prometheus, f'{METRICS.POD_USAGE}{{node="{name}",pod="done"}}')
    # "done" finishes (the monitor stops exporting it); "stays" is promoted (its class label changes).
    exporter.pods.remove(name, "batch", "done", "opportunistic", "memory")
    exporter.pods.remove(name, "batch", "stays", "opportunistic", "memory")
    exporter.pods.labels(name, "batch", "stays", "regular", "memory").set(2 * GI)
    exporter.usage.labels(name, "memory").set(2.5 * GI)
    wait_for_query(prometheus, f'{METRICS.NODE_USAGE}{{node="{name}",resource="memory"}} == {2.5 * GI}')
    reader = PrometheusReader(prometheus, usage_window_s=600.0)  # the 10 Gi sample stays inside the window
    try:
        got = reader.fetch(fetched_at_s=0.0).lookup([name], ("memory",), now_s=0.0)
    finally:
        reader.close()
    # max(10 − 7 (the finished pod's windowed usage), 2.5 (the latest sample)) = 3 Gi, not the window's 10 Gi
    assert got.usage[0, 0] == 3 * GI
    assert got.sampled_at_s is not None and abs(got.sampled_at_s[0] - time.time()) < 60.0


def test_a_task_groups_sustained_use_counts_its_finished_pods_too(exporter: Exporter, prometheus: str) -> None:
    """Query 4 (``prom.peak_query``): each pod's disk use averaged over the window, the highest such average over
    the lookback; a task group's (``use_peak``) is the highest of its pods', one that finished included."""
    name, mi = "n6", float(1 << 20)
    exporter.pods.labels(name, "batch", "etl-read-0", "regular", "disk").set(30 * mi)
    exporter.pods.labels(name, "batch", "etl-read-1", "regular", "disk").set(10 * mi)
    exporter.pods.labels(name, "batch", "lone", "regular", "network").set(5 * mi)
    wait_for_query(prometheus, f'{peak_query(30)} and on (pod) {METRICS.POD_USAGE}{{pod="etl-read-0"}}')
    exporter.pods.remove(name, "batch", "etl-read-0", "regular", "disk")  # it finished: its series goes stale
    wait_for_query(prometheus, f'absent({METRICS.POD_USAGE}{{pod="etl-read-0"}})')
    reader = PrometheusReader(prometheus, bandwidth_window_s=30.0)
    try:
        snap = reader.fetch(fetched_at_s=0.0)
    finally:
        reader.close()
    assert snap.use_peak(("batch", "etl-read")) == {"disk": 30 * mi}
    assert snap.use_peak(("batch", "etl-read-1")) == {"disk": 10 * mi}
    assert snap.use_peak(("batch", "lone")) == {"network": 5 * mi}
    assert snap.use_peak(("other", "etl-read")) is None
