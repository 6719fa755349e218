"""The whole ``stowage node-monitor`` process wired to the kmock emulator: watch, capacity, metrics, eviction."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.eviction import EVENT_REASON_EVICTED
from stowage.node_monitor.synthetic import SyntheticNode

from stowage.labels import ANN_DISK_BANDWIDTH, METRICS
from tests.support.kube import wait_until
from tests.support.processes import NODE_MONITOR_PORT_LOGGED, stop_process, wait_for_logged_port

from .emulator import EVENTS, NODES, PODS, Emulator, running_emulator, write_kubeconfig
from .world import GiB, PodSpec, pod_object

NODE = "daemon-node"
NS = f"ns-{NODE}"


@pytest.fixture()
def emulator() -> Iterator[Emulator]:
    with running_emulator() as emu:
        yield emu


def _start(tmp_path: Path, emulator: Emulator, pods: list[PodSpec], *extra: str) -> tuple[subprocess.Popen, str]:
    tree = SyntheticNode(tmp_path / "cg", 2, Driver.SYSTEMD, tmp_path / "proc")
    for spec in pods:
        tree.add_pod(spec.uid, QoS.BURSTABLE, memory_current=spec.memory)
        emulator.put(PODS, pod_object(spec, NODE, NS))
    emulator.put(NODES, {"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": NODE, "uid": "node-uid", "annotations": {ANN_DISK_BANDWIDTH: "200Mi"}},
                         "status": {"allocatable": {"cpu": "4", "memory": "4Gi"}}})
    log_path = tmp_path / "monitor.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage", "node-monitor", "--kubeconfig",
         str(write_kubeconfig(tmp_path / "kubeconfig", emulator.url)), "--cgroup-root", str(tree.root),
         "--proc-root", str(tree.proc_root), "--address", "127.0.0.1", "--port", "0", "--interval", "200ms",
         *extra],
        stdout=log, stderr=subprocess.STDOUT, env={"NODE_NAME": NODE, "PATH": "/usr/bin:/bin"},
    )
    log.close()
    # --port 0 and the port the monitor logs: a port picked here could be taken before the child binds it.
    try:
        port = wait_for_logged_port(proc, log_path, NODE_MONITOR_PORT_LOGGED)
    except BaseException:
        stop_process(proc)
        raise
    return proc, f"http://127.0.0.1:{port}"


def _metric(url: str, name: str, **labels: str) -> float | None:
    try:
        text = httpx.get(f"{url}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


PODS_OVER = [
    PodSpec("db", pod_class="regular", started_s=1, memory=3 * GiB),
    PodSpec("batch-old", started_s=2, memory=GiB // 2),
    PodSpec("batch-new", started_s=3, memory=GiB // 2),  # 4Gi used of 4Gi: over 0.95 × 4Gi
]


def test_the_process_evicts_the_newest_opportunistic_pod_and_explains_it(tmp_path: Path, emulator: Emulator) -> None:
    proc, url = _start(tmp_path, emulator, PODS_OVER)
    try:
        wait_until(lambda: any(ns == NS for ns, _n, _s in emulator.emu.evictions), timeout_s=60)
        wait_until(lambda: _metric(url, METRICS.EVICTIONS_TOTAL, resource="memory") == 1, timeout_s=30)
        assert [(n, s) for ns, n, s in emulator.emu.evictions if ns == NS] == [("batch-new", 201)]
        assert _metric(url, METRICS.NODE_CAPACITY, node=NODE, resource="memory") == 4 * GiB  # allocatable
        assert _metric(url, METRICS.NODE_CAPACITY, node=NODE, resource="disk") == 200 * 2**20  # annotation
        assert _metric(url, METRICS.POD_USAGE, namespace=NS, pod="db", resource="memory") == 3 * GiB
        assert _metric(url, METRICS.POD_USAGE, pod="batch-old", resource="memory", **{"class": "opportunistic"})
        events = [e for e in emulator.live(EVENTS) if e["reason"] == EVENT_REASON_EVICTED]
        assert [e["involvedObject"]["name"] for e in events] == ["batch-new"]
    finally:
        stop_process(proc)
    assert proc.returncode == 0, (tmp_path / "monitor.log").read_text()  # SIGTERM is a clean stop


def test_the_process_in_dry_run_counts_but_never_evicts(tmp_path: Path, emulator: Emulator) -> None:
    proc, url = _start(tmp_path, emulator, PODS_OVER, "--dry-run")
    try:
        wait_until(lambda: (_metric(url, METRICS.EVICTIONS_TOTAL, resource="memory") or 0) >= 1, timeout_s=60)
        assert emulator.emu.evictions == []
        assert [e for e in emulator.live(EVENTS) if e["reason"] == EVENT_REASON_EVICTED] == []
        assert "dry-run: would evict" in (tmp_path / "monitor.log").read_text()
    finally:
        stop_process(proc)
