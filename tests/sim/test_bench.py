"""Simulator throughput (pytest-benchmark; no timing assertions)."""

from __future__ import annotations

from click.testing import CliRunner

from stowage.bench import bench
from stowage.sim.engine import SimConfig, simulate
from tests.sim.kit import contended


def test_simulator_throughput_on_a_contended_workload(benchmark) -> None:
    wl = contended(seed=2, n_jobs=40)
    result = benchmark(lambda: simulate(wl, "stowage", config=SimConfig(), seed=2))
    assert result.summary["lost_tasks"] == 0


def test_bench_simulator_command_reports_tasks_per_second(tmp_path) -> None:
    wl_file = tmp_path / "w.yaml"
    wl_file.write_text(
        "nodes: [{name: n, count: 3, cpu: 4, memory: 8Gi}]\n"
        "jobs: [{name: j, groups: [{name: g, replicas: 20, demand: {cpu: 1, memory: 1Gi}, duration: 5}]}]\n"
    )
    result = CliRunner().invoke(bench, ["simulator", "--workload", str(wl_file), "--policy", "kube-default",
                                        "--policy", "stowage", "--json", str(tmp_path / "b.json")])
    assert result.exit_code == 0, result.output
    assert result.output.count("tasks/s") == 2
    assert (tmp_path / "b.json").exists()
