"""The dispatcher's throughput at a small size (pytest-benchmark; no timing asserts) and `stowage bench dispatcher`."""

from __future__ import annotations

import json

from click.testing import CliRunner
from stowage.operator import bench as dispatcher_bench
from stowage.operator.dispatcher import Dispatcher

from stowage.bench import bench
from stowage.config import StowageSettings


def test_decide_over_a_small_backlog(benchmark) -> None:
    scenario = dispatcher_bench.Scenario(n_nodes=200, n_jobs=40, n_tasks=400, n_queues=5, seed=3)
    view = scenario.view()
    releases = benchmark(lambda: Dispatcher(StowageSettings(), clock=lambda: 1000.0).decide(view))
    assert 0 < sum(r.count for r in releases) <= 400


def test_the_bench_releases_everything_with_the_same_decisions_as_the_policy_core() -> None:
    r = dispatcher_bench.run(120, 24, 240, 4, rounds=30, finish_fraction=0.2, seed=5, pin=False)
    assert r.released == 240 and r.released_opportunistic > 0
    assert r.calls > 1 and r.tasks_per_cpu_s > 0 and r.p99_ms >= r.p50_ms
    assert r.core_cpu_s > 0  # every pass was re-run alone and placed the same tasks (else it raises)


def test_bench_dispatcher_command_reports_throughput_latency_and_the_ratio() -> None:
    args = ["dispatcher", "--nodes", "60", "--jobs", "12", "--tasks", "120", "--queues", "4", "--rounds", "5",
            "--no-pin"]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    assert "tasks/s" in result.output and "p99" in result.output and "decide() / core" in result.output
    as_json = CliRunner().invoke(bench, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["tasks"] == 120


def test_bench_dispatcher_refuses_fewer_tasks_than_jobs() -> None:
    result = CliRunner().invoke(bench, ["dispatcher", "--jobs", "10", "--tasks", "5", "--no-pin"])
    assert result.exit_code != 0 and "--tasks" in result.output


def test_bench_gangs_times_a_pass_of_gangs_against_the_same_pass_without() -> None:
    r = dispatcher_bench.gang_pass(40, 30, 3, 4, repeats=1, seed=5, pin=False)
    assert r.gang_released % 3 == 0 and 0 < r.gang_released <= r.plain_released  # whole gangs only
    assert r.plain_ms > 0 and r.gang_ms > 0 and r.ratio > 0
    result = CliRunner().invoke(bench, ["gangs", "--nodes", "20", "--gangs", "10", "--repeats", "1", "--no-pin"])
    assert result.exit_code == 0, result.output
    assert "gangs / without" in result.output
