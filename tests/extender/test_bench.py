"""Benchmarks of filter + prioritize over real HTTP (timed with pytest-benchmark; CI runs them once untimed)."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest
from click.testing import CliRunner
from stowage.extender.app import create_app
from stowage.extender.bench import bench_extender, build_cluster, opportunistic_pod

from stowage.config import StowageSettings
from tests.support.serving import serving

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("n_nodes", [500])
def test_filter_then_prioritize_of_one_opportunistic_pod(benchmark, n_nodes: int) -> None:
    model, utilization, names = build_cluster(n_nodes, pods_per_node=2, seed=7)
    counter = itertools.count()
    with serving(create_app(StowageSettings(), model, utilization)) as url, httpx.Client(timeout=10.0) as http:

        def one_pod() -> tuple[dict, list]:
            pod = opportunistic_pod(next(counter))
            kept = http.post(f"{url}/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names}).json()
            scores = http.post(f"{url}/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": kept["NodeNames"]})
            return kept, scores.json()

        kept, scores = benchmark(one_pod)
    assert kept["Error"] == "" and 0 < len(kept["NodeNames"]) < n_nodes
    assert len(kept["NodeNames"]) + len(kept["FailedNodes"]) + len(kept["FailedAndUnresolvableNodes"]) == n_nodes
    assert [s["Host"] for s in scores] == kept["NodeNames"]
    assert max(s["Score"] for s in scores) == 10


def test_the_bench_command_reports_every_size_as_json() -> None:
    result = CliRunner().invoke(bench_extender, ["--nodes", "20,40", "--requests", "5", "--json", "--cpu", "0"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["nodes"] for r in rows] == [20, 40]
    for row in rows:
        assert row["requests"] == 5
        assert 0 < row["filter_p50_ms"] <= row["filter_p99_ms"]
        assert row["ratio_to_orjson"] > 0 and row["pods_per_s"] > 0


def test_the_bench_command_rejects_a_bad_node_list() -> None:
    result = CliRunner().invoke(bench_extender, ["--nodes", "five"])
    assert result.exit_code == 2
    assert "comma list of node counts" in result.output
