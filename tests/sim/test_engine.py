"""The simulator's own invariants: no task lost or duplicated, capacity respected, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stowage.errors import WorkloadError
from stowage.labels import Opportunistic
from stowage.sim import baselines
from stowage.sim.cluster import Cluster
from stowage.sim.engine import InvariantViolation, SimConfig, simulate
from stowage.sim.presets import PRESETS
from stowage.sim.report import build_report
from tests.sim.kit import BURSTY, FLAT, contended, group, job, model_rates, nodes, workload


@pytest.mark.parametrize("preset", PRESETS)
def test_every_task_finishes_exactly_once_under_heavy_contention(preset: str) -> None:
    wl = contended(seed=3)
    result = simulate(wl, preset, config=SimConfig(usage=BURSTY, check=True), seed=3)
    s = result.summary
    assert s["lost_tasks"] == 0
    assert s["jobs_finished"] == s["jobs"] == len(wl.jobs)
    # Every eviction or OOM kill is one more start: tasks re-run, never vanish, never double-finish.
    assert s["tasks_started"] == s["tasks"] + s["evictions"] + s["oom_kills"]


@pytest.mark.parametrize("preset", ["ubis", "stowage"])
def test_harvesting_presets_evict_under_contention_and_lose_nothing(preset: str) -> None:
    result = simulate(contended(seed=1), preset, config=SimConfig(usage=BURSTY, check=True), seed=1)
    s = result.summary
    assert s["opportunistic_fraction"] > 0
    assert s["evictions"] + s["oom_kills"] > 0
    assert s["wasted_work_s"] > 0
    assert s["lost_tasks"] == 0


@pytest.mark.parametrize("preset", ["ubis", "stowage"])
def test_the_simulated_monitor_chooses_victims_from_what_a_node_knows(preset: str, monkeypatch) -> None:
    """It calls choose_victims as the node monitor does (node-monitor/monitor.py): usage, start times, pools,
    thresholds, and now (run times count until now). A task's progress (its true work done) is not passed: a node
    knows when a pod started, not how far it got, and its victims must not depend on that."""
    from stowage.policy import contention

    original, calls = contention.choose_victims, []

    def recording(*args, **kwargs):
        calls.append((len(args), tuple(sorted(kwargs))))
        return original(*args, **kwargs)

    monkeypatch.setattr(contention, "choose_victims", recording)
    result = simulate(contended(seed=1), preset, config=SimConfig(usage=BURSTY), seed=1)
    assert result.summary["evictions"] > 0 and calls
    assert set(calls) == {(6, ("now_s",))}


def test_checking_mode_catches_a_scheduler_that_overfills_a_node() -> None:
    class Overfill(baselines.KubePreset):
        def schedule(self) -> None:
            view = self.view
            for g in np.flatnonzero(view.status.waiting()):
                while view.status.g_pending[g] > 0:
                    view.place(int(g), 0, opp=False)

    wl = workload(nodes(2), [job("j", 0, group("g", 8, 10.0))])
    with pytest.raises(InvariantViolation, match="exceed capacity"):
        simulate(wl, Overfill("overfill", "least"), config=SimConfig(usage=FLAT, check=True))


def test_same_seed_gives_identical_reports_and_another_seed_differs() -> None:
    def report(seed: int) -> str:
        wl = contended(seed=5)
        results = {p: simulate(wl, p, seed=seed) for p in ("kube-default", "drf", "stowage")}
        doc = build_report(wl, results, shown=list(results), settings=SimConfig().settings,
                           usage=SimConfig().usage, seed=seed)
        return json.dumps(doc, sort_keys=True)

    assert report(7) == report(7)
    assert report(7) != report(8)


def test_barrier_holds_a_group_until_the_groups_it_depends_on_finish(flat_config: SimConfig) -> None:
    # 8 cpus: both groups would fit at once; the barrier serialises them: 10 s then 20 s.
    wl = workload(nodes(2), [job("j", 0, group("map", 4, 10.0), group("reduce", 4, 20.0, deps=["map"]))])
    result = simulate(wl, "kube-default", config=flat_config)
    assert result.jct[0] == pytest.approx(30.0)


def test_disk_over_allocation_slows_the_tasks_sharing_it(flat_config: SimConfig) -> None:
    # kube-default ignores disk: both tasks land on one node and share 100 B/s at half speed.
    # Tetris sees disk: the second task waits for the first.
    wl = workload(nodes(1), [job("a", 0, group("g", 2, 10.0, disk=100.0))])
    kube = simulate(wl, "kube-default", config=flat_config)
    tetris = simulate(wl, "tetris", config=flat_config)
    assert kube.jct[0] == pytest.approx(20.0)
    assert tetris.jct[0] == pytest.approx(20.0)
    assert kube.summary["utilization"]["disk"]["allocated"] == pytest.approx(2.0)
    assert tetris.summary["utilization"]["disk"]["allocated"] == pytest.approx(1.0)


def test_an_opportunistic_task_runs_on_reserved_but_idle_cpu(flat_config: SimConfig) -> None:
    # One 4-cpu node, fully requested by a task that uses half. Harvestable cpu = 0.9·4 − 2 = 1.6 once a
    # sample includes the regular task (the monitor samples every second: its allowance ends at 1 s), so the
    # 1.5-cpu opportunistic task arriving at 1 s starts at once beside it (JCT 10 s); 2 + 1.5 < 4 cpus: nobody
    # slows down.
    wl = workload(nodes(1, cpu=4.0), [
        job("reg", 0, group("g", 1, 100.0, cpu=4.0, memory=1.0, usage=0.5)),
        job("opp", 1, group("g", 1, 10.0, cpu=1.5, memory=1.0, usage=1.0), opportunistic=Opportunistic.TRUE),
    ])
    result = simulate(wl, "ubis", config=flat_config)
    assert result.summary["opportunistic_fraction"] == pytest.approx(0.5)
    assert result.jct.tolist() == pytest.approx([100.0, 10.0])
    # kube-default has no harvesting: the second job waits for the first.
    assert simulate(wl, "kube-default", config=flat_config).jct[1] == pytest.approx(109.0)


@pytest.mark.parametrize(
    ("uses", "opp", "expected"),
    [
        pytest.param([[3, 0, 0, 0], [2, 0, 0, 0]], [False, True], [1.0, 0.5], id="cpu-opportunistic-gets-the-rest"),
        pytest.param([[3, 0, 0, 0], [2, 0, 0, 0]], [False, False], [0.8, 0.8], id="cpu-regular-overload-shared"),
        pytest.param([[1, 0, 0, 0], [1, 0, 0, 0]], [False, True], [1.0, 1.0], id="no-overload-full-speed"),
        pytest.param([[1, 0, 150, 0], [1, 0, 50, 0]], [False, True], [0.5, 0.5], id="disk-shared-without-priority"),
        pytest.param([[1, 20, 0, 0], [1, 20, 0, 0]], [False, True], [1.0, 1.0], id="memory-is-not-a-slowdown"),
        pytest.param([[4, 0, 0, 0], [1, 0, 0, 0]], [False, True], [1.0, 0.0], id="cpu-saturated-opportunistic-stalls"),
    ],
)
def test_contention_model_slows_tasks_as_stated(uses: list, opp: list, expected: list) -> None:
    cluster = Cluster(("cpu", "memory", "disk", "network"), np.array([[4.0, 16.0, 100.0, 100.0]]), np.ones(1, bool))
    use = np.array(uses, dtype=float)
    rates = model_rates(cluster, use, np.zeros(2, np.int64), np.array(opp), use > 0)
    assert rates.tolist() == pytest.approx(expected)


def test_a_task_bigger_than_every_node_is_reported_before_running() -> None:
    wl = workload(nodes(2), [job("huge", 0, group("g", 1, 10.0, cpu=64.0))])
    with pytest.raises(WorkloadError, match=r"jobs\[huge\].groups\[g\].demand"):
        simulate(wl, "kube-default")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(1, 6), st.floats(1.0, 50.0), st.sampled_from([1.0, 2.0, 3.0]),
                             st.floats(0.0, 40.0)), min_size=1, max_size=6),
    preset=st.sampled_from(PRESETS),
    seed=st.integers(0, 3),
)
def test_any_small_workload_finishes_every_task_within_capacity(sizes, preset: str, seed: int) -> None:
    jobs = [job(f"j{i}", arrival, group("g", n, dur, usage=None, cpu=cpu, memory=2.0 * cpu, disk=30.0))
            for i, (n, dur, cpu, arrival) in enumerate(sizes)]
    wl = workload(nodes(2, cpu=4.0, memory=16.0), jobs)
    result = simulate(wl, preset, config=SimConfig(check=True), seed=seed)
    assert result.summary["lost_tasks"] == 0
    assert np.isfinite(result.jct).all()
    # Nothing finishes faster than its critical path at full speed.
    durations = np.array([dur for _, dur, _, _ in sizes])
    assert (result.jct >= durations - 1e-6).all()
