"""Stowage's processes against a real cluster: the extender's informers and the node monitor's Node read."""

from __future__ import annotations

from pathlib import Path

import httpx

from stowage.labels import METRICS
from stowage.resources import parse_quantity
from tests.e2e.conftest import running
from tests.extender.objects import extender_args, opportunistic_pod, regular_pod
from tests.support.processes import EXTENDER_PORT_LOGGED, NODE_MONITOR_PORT_LOGGED


def test_extender_syncs_the_real_cluster_and_filters_its_nodes(
    kubeconfig: str, nodes: list[dict], tmp_path: Path
) -> None:
    args = ["extender", "--kubeconfig", kubeconfig, "--host", "127.0.0.1", "--port", "0"]

    names = sorted(n["metadata"]["name"] for n in nodes)
    with running(args, EXTENDER_PORT_LOGGED, "/readyz", tmp_path / "extender.log") as base:
        regular = httpx.post(
            f"{base}/filter",
            json=extender_args(regular_pod("e2e", cpu="10m", memory="16Mi"), nodes, cache=True),
            timeout=10,
        ).json()
        # No Prometheus: regular pods are never blocked by a degraded Stowage...
        assert sorted(regular["NodeNames"]) == names
        assert regular["Error"] == ""
        # ...and opportunistic pods harvest nothing anywhere, with a message that says why.
        opp = httpx.post(
            f"{base}/filter",
            json=extender_args(opportunistic_pod("e2e-opp", cpu="10m", memory="16Mi"), nodes, cache=True),
            timeout=10,
        ).json()
        assert opp["NodeNames"] == []
        failed = {**opp["FailedNodes"], **opp["FailedAndUnresolvableNodes"]}
        assert sorted(failed) == names
        assert all("utilization" in message for message in failed.values())
        scores = httpx.post(
            f"{base}/prioritize",
            json=extender_args(regular_pod("e2e", cpu="10m", memory="16Mi"), nodes, cache=False),
            timeout=10,
        ).json()
        assert sorted(s["Host"] for s in scores) == names
        assert all(0 <= s["Score"] <= 10 for s in scores)


def test_node_monitor_publishes_the_real_nodes_allocatable(
    kubeconfig: str, nodes: list[dict], tmp_path: Path
) -> None:
    node = nodes[0]
    name = node["metadata"]["name"]

    args = ["node-monitor", "--node-name", name, "--kubeconfig", kubeconfig, "--address", "127.0.0.1",
            "--port", "0", "--dry-run"]

    with running(args, NODE_MONITOR_PORT_LOGGED, "/healthz", tmp_path / "node-monitor.log") as base:
        text = httpx.get(f"{base}/metrics", timeout=10).text
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(METRICS.NODE_CAPACITY + "{") and f'node="{name}"' in line and 'resource="cpu"' in line
    ]
    assert values == [parse_quantity(node["status"]["allocatable"]["cpu"])], text
