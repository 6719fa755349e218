"""``stowage bench simulator`` on the speed target's kind of run: events, CPU per event, ratio to kube-default."""

from __future__ import annotations

import json

from click.testing import CliRunner

from stowage.bench import bench
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from tests.sim.kit import contended


def test_the_bench_times_a_batch_slice_per_event_and_against_kube_default(tmp_path) -> None:
    out = tmp_path / "b.json"
    result = CliRunner().invoke(bench, ["simulator", "--workload", "swim", "--nodes", "20", "--first-jobs", "30",
                                        "--arrivals", "batch", "--policy", "kube-default", "--policy", "stowage",
                                        "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "30 jobs" in result.output and result.output.count("us/event") == 2
    runs = {r["policy"]: r for r in json.loads(out.read_text())["runs"]}
    assert runs["kube-default"]["cpu_vs_kube_default"] == 1.0
    for run in runs.values():
        assert run["events"] > 0 and run["summary"]["lost_tasks"] == 0
        assert run["summary"]["jobs"] == 30


def test_a_timing_slice_says_it_stopped_at_the_cap_instead_of_counting_lost_tasks() -> None:
    result = CliRunner().invoke(bench, ["simulator", "--workload", "swim", "--nodes", "20", "--first-jobs", "30",
                                        "--arrivals", "batch", "--max-sim-time", "5", "--policy", "kube-default"])
    assert result.exit_code == 0, result.output
    assert "stopped at --max-sim-time" in result.output and "lost" not in result.output


def test_the_engine_counts_one_event_per_loop_step() -> None:
    sim = Simulation(contended(seed=1, n_jobs=6), make("kube-default"), SimConfig(), 1)
    steps = 0
    original = sim.recorder.sample_until

    def counting(t: float, now: float) -> None:  # called once per loop step, before the clock moves
        nonlocal steps
        steps += 1
        original(t, now)

    sim.recorder.sample_until = counting  # type: ignore[method-assign]
    sim.run()
    assert sim.events == steps > 0
