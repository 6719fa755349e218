"""pytest-benchmark of the node monitor's hot path (no timing asserts: `pytest --benchmark-only` reports them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stowage.node_monitor.bench import build_tree
from stowage.node_monitor.cgroups import Driver
from stowage.node_monitor.metrics import NodeMetrics
from stowage.node_monitor.monitor import NodeMonitor
from stowage.node_monitor.sampling import Sampler
from stowage.node_monitor.summary import summarise

from stowage.config import ContentionSettings

PODS = 110  # the kubelet's default maximum pods per node


@pytest.mark.parametrize(("version", "driver"), [(2, Driver.SYSTEMD), (2, Driver.CGROUPFS), (1, Driver.CGROUPFS)],
                         ids=["v2-systemd", "v2-cgroupfs", "v1-cgroupfs"])
def test_bench_one_sample_of_110_pods(benchmark, tmp_path: Path, version: int, driver: Driver) -> None:
    tree, uids = build_tree(tmp_path, PODS, version, driver)
    sampler = Sampler(tree.root, tree.proc_root)
    sample = benchmark(sampler.sample)
    assert sorted(sample.pods) == sorted(uids)


def test_bench_summarise_110_pods(benchmark, tmp_path: Path) -> None:
    tree, _ = build_tree(tmp_path, PODS)
    sampler = Sampler(tree.root, tree.proc_root)
    first = sampler.sample()
    for uid in list(tree.pods)[:10]:
        tree.advance_pod(uid, cpu_usec=100_000)
    second = sampler.sample()
    usage = benchmark(summarise, first, second)
    assert usage.pods.shape == (PODS, 4)


def test_bench_one_tick_without_kubernetes(benchmark, tmp_path: Path) -> None:
    tree, _ = build_tree(tmp_path, PODS)
    monitor = NodeMonitor("bench", Sampler(tree.root, tree.proc_root), ContentionSettings(), NodeMetrics("bench"),
                          capacity_flags={"cpu": 64.0, "memory": float(64 << 30)})
    report = benchmark(monitor.tick)
    assert len(report.usage.pod_uids) == PODS


def test_bench_metrics_render_110_pods(benchmark, tmp_path: Path) -> None:
    tree, _ = build_tree(tmp_path, PODS)
    metrics = NodeMetrics("bench")
    monitor = NodeMonitor("bench", Sampler(tree.root, tree.proc_root), ContentionSettings(), metrics)
    monitor.tick()
    monitor.tick()
    text = benchmark(metrics.render)
    assert text.count(b"stowage_pod_usage{") == PODS * 3  # cpu, memory, disk per pod


def test_the_bench_command_reports_every_measurement_it_was_asked_for(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from stowage.bench import bench

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(bench, ["node-monitor", "--pods", "5", "--repeat", "10", "--skip", "rss",
                                        "--skip", "reaction", "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.count("one sample, 5 pods") == 3
    assert {"sample_v2-systemd", "sample_v2-cgroupfs", "sample_v1-cgroupfs"} <= set(json.loads(out.read_text()))


def test_the_reaction_measurement_sees_the_eviction_request() -> None:
    from stowage.node_monitor.bench import measure_reaction

    result = measure_reaction(interval_s=0.2, sustained_count=3, pods=5, runs=1)
    assert len(result["reaction_s"]) == 1 and result["reaction_s"][0] > 0  # an eviction arrived (no timing assert)
