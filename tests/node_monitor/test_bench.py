"""pytest-benchmark of the node monitor's hot path (no timing asserts: `pytest --benchmark-only` reports them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from stowage.node_monitor.bench import build_tree
from stowage.node_monitor.cgroups import Driver
from stowage.node_monitor.metrics import NodeMetrics
from stowage.node_monitor.monitor import NodeMonitor
from stowage.node_monitor.sampling import Sampler
from stowage.node_monitor.summary import summarise

from stowage.bench import bench
from stowage.config import ContentionSettings

from .emulator import running_emulator, write_kubeconfig

PODS = 110  # the kubelet's default maximum pods per node


@pytest.mark.parametrize(("version", "driver"), [(2, Driver.SYSTEMD), (2, Driver.CGROUPFS), (1, Driver.CGROUPFS)],
                         ids=["v2-systemd", "v2-cgroupfs", "v1-cgroupfs"])
def test_bench_one_sample_of_110_pods(benchmark, tmp_path: Path, version: int, driver: Driver) -> None:
    tree, uids = build_tree(tmp_path, PODS, version, driver)
    sampler = Sampler(tree.root, tree.proc_root)
    sample = benchmark(sampler.sample)
    assert sorted(sample.pods) == sorted(uids)
    assert sample.pod_pids == PODS and all(p.net_bytes is not None for p in sample.pods.values())  # network read


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
    assert text.count(b"stowage_pod_usage{") == PODS * 4  # cpu, memory, disk, network per pod


def test_the_bench_command_reports_every_measurement_it_was_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(bench, ["node-monitor", "--pods", "5", "--repeat", "10", "--skip", "rss",
                                        "--skip", "reaction", "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.count("one sample, 5 pods") == 3
    assert {"sample_v2-systemd", "sample_v2-cgroupfs", "sample_v1-cgroupfs"} <= set(json.loads(out.read_text()))


def test_without_a_kubeconfig_memory_and_reaction_are_skipped_and_say_why() -> None:
    result = CliRunner().invoke(bench, ["node-monitor", "--pods", "5", "--repeat", "10"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.count("skipped: needs a real API server (--kubeconfig PATH)") == 2
    help_text = " ".join(CliRunner().invoke(bench, ["node-monitor", "--help"]).output.split())
    assert "--kubeconfig" in help_text and "Without it, only the sample cost is measured" in help_text


def test_with_a_kubeconfig_memory_and_reaction_are_measured_against_that_server(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    with running_emulator() as emulator:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.url)
        result = CliRunner().invoke(bench, ["node-monitor", "--pods", "5", "--repeat", "10", "--interval", "0.2",
                                            "--runs", "1", "--kubeconfig", str(kubeconfig), "--json", str(out)],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert [status for _, _, status in emulator.emu.evictions] == [201]  # the newest pod, the only candidate
        assert emulator.live("v1/nodes") == [] and emulator.live("v1/pods") == []  # the bench cleaned up
    results = json.loads(out.read_text())
    assert results["rss"]["rss_mb"] > 0  # a running monitor was measured (no timing or size asserts)
    assert len(results["reaction"]["reaction_s"]) == 1 and results["reaction"]["reaction_s"][0] > 0
