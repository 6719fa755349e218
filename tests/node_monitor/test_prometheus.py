"""A real Prometheus scrapes a running ``stowage node-monitor`` process; PromQL finds every contract metric."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.synthetic import SyntheticNode

from stowage.labels import METRICS
from tests.support.processes import NODE_MONITOR_PORT_LOGGED, stop_process, wait_for_logged_port
from tests.support.prometheus import prometheus_server, wait_for_query

pytestmark = pytest.mark.prometheus

NODE = "prom-node"
BUSY = "5d0c0a1e-0000-4000-8000-00000000b005"
IDLE = "5d0c0a1e-0000-4000-8000-0000000001d1"
MiB = 1 << 20
#: The start-up line naming the port ``--port 0`` bound (node-monitor's cli logs it at info).


@pytest.fixture()
def monitor(tmp_path: Path) -> Iterator[tuple[str, SyntheticNode]]:
    """A node-monitor subprocess on a synthetic cgroup tree whose busy pod burns 0.5 cores and 4 MiB/s of disk."""
    tree = SyntheticNode(tmp_path / "cgroup", 2, Driver.CGROUPFS, tmp_path / "proc")
    tree.add_pod(BUSY, QoS.BURSTABLE, memory_current=900 * MiB)
    tree.add_pod(IDLE, QoS.BESTEFFORT, memory_current=100 * MiB)
    log_path = tmp_path / "node-monitor.log"
    log = log_path.open("wb")
    # --port 0: the monitor binds any free port and logs it (a port picked here could be taken before it binds).
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage", "node-monitor", "--no-kubernetes", "--node-name", NODE,
         "--cgroup-root", str(tree.root), "--proc-root", str(tree.proc_root), "--address", "127.0.0.1",
         "--port", "0", "--interval", "200ms", "--capacity", "cpu=2,memory=1000Mi,disk=100Mi,network=1Gi"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    stop = threading.Event()

    def burn() -> None:  # the workload: counters advance as a running pod's would
        while not stop.wait(0.1):
            tree.advance_pod(BUSY, cpu_usec=50_000, wbytes=400 * 1024)
            tree.advance_net("eth0", rx=100_000, tx=50_000)

    worker = threading.Thread(target=burn, daemon=True)
    worker.start()
    try:
        port = wait_for_logged_port(proc, log_path, NODE_MONITOR_PORT_LOGGED)
        deadline = time.monotonic() + 60  # readiness on a loaded machine, not a timing assertion
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "node-monitor never became healthy"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}", tree
    finally:
        stop.set()
        worker.join(5)
        stop_process(proc, timeout_s=10)
        log.close()


def _values(result: list[dict]) -> dict[str, float]:
    return {r["metric"].get("resource", r["metric"].get("__name__", "")): float(r["value"][1]) for r in result}


def test_prometheus_scrapes_every_contract_metric_from_a_running_monitor(tmp_path: Path, monitor) -> None:
    target, _tree = monitor
    with prometheus_server(tmp_path, [target], scrape_interval_s=0.5) as prom:
        assert wait_for_query(prom, 'up == 1')
        sel = f'node="{NODE}"'

        usage = _values(wait_for_query(prom, f'{METRICS.NODE_USAGE}{{{sel}}}', min_series=4))
        assert set(usage) == {"cpu", "memory", "disk", "network"}
        assert usage["memory"] == 1000 * MiB

        # Rates need two samples and a scrape: wait for the busy pod to show (0.5 cores, 4 MiB/s writes).
        # One rate can leave the band on a loaded machine (a sample's files read late after its timestamp
        # credits the next interval with extra counter), so wait for a sample inside it rather than take the first.
        cpu = wait_for_query(prom, f'{METRICS.NODE_USAGE}{{{sel},resource="cpu"}} > 0.2 < 1.0')
        assert 0.2 < float(cpu[0]["value"][1]) < 1.0
        assert wait_for_query(prom, f'{METRICS.NODE_USAGE}{{{sel},resource="disk"}} > 1e6')
        assert wait_for_query(prom, f'{METRICS.NODE_USAGE}{{{sel},resource="network"}} > 1e5')

        capacity = _values(wait_for_query(prom, f'{METRICS.NODE_CAPACITY}{{{sel}}}', min_series=4))
        assert capacity == {"cpu": 2.0, "memory": 1000.0 * MiB, "disk": 100.0 * MiB, "network": float(1 << 30)}

        # 1000Mi used of 1000Mi > 0.95: memory contention, sustained after 3 samples; cpu is fine.
        assert wait_for_query(prom, f'{METRICS.NODE_CONTENTION}{{{sel},resource="memory"}} == 1')
        contention = _values(wait_for_query(prom, f'{METRICS.NODE_CONTENTION}{{{sel}}}', min_series=4))
        assert contention["cpu"] == 0.0 and set(contention) == {"cpu", "memory", "disk", "network"}

        blocked = _values(wait_for_query(prom, f'{METRICS.NODE_BLOCKED}{{{sel}}}', min_series=4))
        assert set(blocked) == {"cpu", "memory", "disk", "network"}
        assert all(v == 0.0 for v in blocked.values())  # no opportunistic pods here: nothing evicted, nothing blocked

        pods = wait_for_query(prom, f'{METRICS.POD_USAGE}{{{sel},resource="memory"}}', min_series=2)
        assert {r["metric"]["pod"]: float(r["value"][1]) for r in pods} == {BUSY: 900.0 * MiB, IDLE: 100.0 * MiB}
        # Without Kubernetes a pod is named by uid; Prometheus drops the empty namespace label.
        assert all(r["metric"]["class"] == "unknown" and "namespace" not in r["metric"] for r in pods)
        assert wait_for_query(prom, f'{METRICS.POD_USAGE}{{{sel},pod="{BUSY}",resource="cpu"}} > 0.2')

        evictions = wait_for_query(prom, f'{METRICS.EVICTIONS_TOTAL}{{{sel}}}', min_series=4)
        assert {r["metric"]["resource"] for r in evictions} == {"cpu", "memory", "disk", "network"}
        assert {r["metric"]["policy"] for r in evictions} == {"preserve"}
        assert all(float(r["value"][1]) == 0.0 for r in evictions)

        samples = wait_for_query(prom, f'{METRICS.SAMPLE_SECONDS}_count{{{sel}}} > 5')
        assert float(samples[0]["value"][1]) > 5
        p90 = f'histogram_quantile(0.9, rate({METRICS.SAMPLE_SECONDS}_bucket{{{sel}}}[5s]))'
        assert wait_for_query(prom, f"{p90} >= 0")  # the histogram is exported and quantiles work (speed: the bench)
