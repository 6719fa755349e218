"""/metrics and /healthz over real HTTP on loopback."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.metrics import MetricsServer, NodeMetrics
from stowage.node_monitor.monitor import NodeMonitor
from stowage.node_monitor.sampling import Sampler
from stowage.node_monitor.synthetic import SyntheticNode

from stowage.config import ContentionSettings
from stowage.labels import METRICS


class Clock:
    now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def served(tmp_path: Path):
    tree = SyntheticNode(tmp_path / "cg", 2, Driver.CGROUPFS, tmp_path / "proc")
    tree.add_pod("00000000-0000-0000-0000-00000000000a", QoS.BURSTABLE, memory_current=5 << 20)
    clock = Clock()
    metrics = NodeMetrics("n1")
    monitor = NodeMonitor("n1", Sampler(tree.root, tree.proc_root, clock=clock), ContentionSettings(), metrics,
                          capacity_flags={"cpu": 2.0}, clock=clock)
    server = MetricsServer(metrics, "127.0.0.1", 0, stale_after_s=10.0, clock=clock).start()
    try:
        yield f"http://127.0.0.1:{server.port}", monitor, clock
    finally:
        server.stop()


def _series(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_health_is_unready_until_the_first_sample_and_fails_when_sampling_stalls(served) -> None:
    url, monitor, clock = served
    first = httpx.get(f"{url}/healthz")
    assert first.status_code == 503 and "no sample yet" in first.text
    monitor.tick()
    assert httpx.get(f"{url}/healthz").status_code == 200
    clock.now += 30.0  # no tick for 30 s > 10 s
    stalled = httpx.get(f"{url}/healthz")
    assert stalled.status_code == 503 and "sampling loop stuck" in stalled.text


def test_metrics_leave_out_unknown_values_instead_of_exporting_zero(served) -> None:
    url, monitor, clock = served
    monitor.tick()  # first sample: memory known, rates not yet
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    series = _series(response.text)
    node = (("node", "n1"),)
    assert series[(METRICS.NODE_USAGE, (*node, ("resource", "memory")))] == 5 << 20
    assert (METRICS.NODE_USAGE, (*node, ("resource", "cpu"))) not in series
    assert series[(METRICS.NODE_CAPACITY, (*node, ("resource", "cpu")))] == 2.0
    assert (METRICS.NODE_CAPACITY, (*node, ("resource", "memory"))) not in series  # capacity unknown
    clock.now += 1.0
    monitor.tick()
    series = _series(httpx.get(f"{url}/metrics").text)
    assert series[(METRICS.NODE_USAGE, (*node, ("resource", "cpu")))] == 0.0
    assert series[(f"{METRICS.SAMPLE_SECONDS}_count", node)] == 2


def test_unknown_paths_are_404(served) -> None:
    url, _monitor, _clock = served
    assert httpx.get(f"{url}/").status_code == 404


def test_the_sample_time_is_exported_and_does_not_move_while_sampling_is_stuck(served) -> None:
    """Readers judge staleness by when the usage was sampled, not when it was scraped."""
    url, monitor, _clock = served
    before = time.time()
    monitor.tick()
    node = (("node", "n1"),)
    first = _series(httpx.get(f"{url}/metrics").text)[(METRICS.SAMPLE_TIME, node)]
    assert before <= first <= time.time()
    time.sleep(0.05)  # scrapes without a tick: the same usage, the same sample time
    assert _series(httpx.get(f"{url}/metrics").text)[(METRICS.SAMPLE_TIME, node)] == first
