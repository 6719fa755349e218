"""The fluid weighted-fair-sharing reference on cases checkable by hand (FSP Fig. 1 and 2 among them)."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import fluid
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from stowage.sim.workload import QueueSpec
from tests.sim import kit


def completion(arrival: list[float], size: list[float], path: list[float], queue: list[int] | None = None,
               weight: list[float] | None = None) -> list[float]:
    q = np.array(queue if queue is not None else [0] * len(arrival), dtype=np.int64)
    w = np.array(weight if weight is not None else [1.0])
    return list(fluid.fluid_completion(np.array(arrival, float), np.array(size, float), np.array(path, float), q, w))


def test_fsp_figure_1_processor_sharing_finishes_j2_j3_j1_at_37_5_42_5_50() -> None:
    # Three jobs needing the whole cluster, 30/10/10 s of work, arriving at 0/10/15 s.
    # 0–10 j1 alone (20 left); 10–15 halves (17.5, 7.5); then thirds: j2 done after 22.5 s at 37.5,
    # j1 10 and j3 2.5 left; halves: j3 at 42.5, j1 7.5 left alone: 50.
    assert completion([0, 10, 15], [30, 10, 10], [30, 10, 10]) == pytest.approx([50.0, 37.5, 42.5])


def test_fsp_figure_2_jobs_needing_part_of_the_cluster_finish_j3_j2_j1_at_23_5_24_5_39() -> None:
    # 100 %, 55 %, 35 % of the cluster for 30, 10, 10 s: sizes 30, 5.5, 3.5, caps 1, 0.55, 0.35.
    # 0–10 j1 (20 left); 10–13 halves (18.5, 4); thirds (all under their caps): j3's 3.5 takes 10.5 s
    # → 23.5, j2 0.5 left, j1 15; halves: j2 at 24.5; j1 14.5 alone: 39. PS order j3, j2, j1 (paper).
    got = completion([0, 10, 13], [30, 5.5, 3.5], [30, 10, 10])
    assert got == pytest.approx([39.0, 24.5, 23.5])
    assert np.argsort(got).tolist() == [2, 1, 0]


def test_a_capped_job_leaves_its_unused_share_to_the_other() -> None:
    # j1 can use only 20 %: j0 gets 80 % while both run. j1: 2 work at 0.2 → 10 s; j0: 8 done by then,
    # 2 left alone → 12.
    assert completion([0, 0], [10, 2], [0, 10]) == pytest.approx([12.0, 10.0])


def test_weighted_queues_2_to_1_share_two_thirds_and_one_third() -> None:
    # Queue a (weight 2) and b (weight 1), one job each of 30: a at 2/3 done at 45 (b has 15 left),
    # then b alone: 60.
    assert completion([0, 0], [30, 30], [1, 1], [0, 1], [2.0, 1.0]) == pytest.approx([45.0, 60.0])


def test_jobs_of_one_queue_split_their_queues_weighted_share_evenly() -> None:
    # Queue a (weight 2) holds two jobs of 20, queue b (weight 1) one of 40: each a job gets 1/3, b 1/3.
    # a's jobs done at 60 (b has 20 left), then b alone: 80.
    got = completion([0, 0, 0], [20, 20, 40], [1, 1, 1], [0, 0, 1], [2.0, 1.0])
    assert got == pytest.approx([60.0, 60.0, 80.0])


def test_an_arrival_while_another_runs_halves_both_rates() -> None:
    # j0 (10) alone until 4 (6 left); j1 (2) arrives: halves, j1 done at 8, j0 4 left alone → 12.
    assert completion([0, 4], [10, 2], [1, 1]) == pytest.approx([12.0, 8.0])


def test_an_idle_gap_between_jobs_is_skipped() -> None:
    assert completion([0, 100], [10, 10], [1, 1]) == pytest.approx([10.0, 110.0])


def test_a_job_finishing_exactly_at_an_arrival_does_not_share_with_it() -> None:
    assert completion([0, 10], [10, 10], [1, 1]) == pytest.approx([10.0, 20.0])


@pytest.mark.parametrize(
    ("arrival", "size", "path", "expected"),
    [
        pytest.param([], [], [], [], id="no-jobs"),
        pytest.param([5.0], [0.0], [7.0], [12.0], id="zero-size-takes-its-critical-path"),
        pytest.param([5.0], [0.0], [0.0], [5.0], id="no-tasks-finishes-on-arrival"),
        pytest.param([0.0, 0.0], [np.inf, 4.0], [1.0, 1.0], [np.nan, 4.0], id="infinite-size-never-finishes"),
        pytest.param([3.0], [2.0], [10.0], [13.0], id="alone-no-faster-than-its-critical-path"),
        pytest.param([3.0], [20.0], [10.0], [23.0], id="alone-no-faster-than-the-whole-cluster"),
    ],
)
def test_degenerate_inputs(arrival: list[float], size: list[float], path: list[float], expected: list[float]) -> None:
    got = completion(arrival, size, path)
    np.testing.assert_allclose(got, expected)


def test_a_queue_weight_of_zero_counts_as_one() -> None:
    assert completion([0, 0], [10, 10], [1, 1], [0, 1], [0.0, 1.0]) == pytest.approx([20.0, 20.0])


def test_job_size_charges_each_task_its_dominant_share() -> None:
    # Cluster: 10 cpu, 100 memory. Group 0 of job 0: 4 tasks × 5 s × max(1/10, 20/100) = 4;
    # group 1 of job 0: 1 × 10 s × max(5/10, 0) = 5; job 1: zero tasks; job 2: needs a resource of capacity 0.
    g_job = np.array([0, 0, 1, 2])
    demand = np.array([[1.0, 20.0, 0.0], [5.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    total = np.array([10.0, 100.0, 0.0])
    got = fluid.job_sizes(g_job, np.array([4, 1, 0, 1]), np.array([5.0, 10.0, 3.0, 1.0]), demand, total, 3)
    np.testing.assert_allclose(got, [9.0, 0.0, np.inf])


def test_the_run_summary_reports_the_fraction_slowed_against_fluid_sharing() -> None:
    # One node of 4 cpu. Two jobs of 4 one-cpu tasks × 10 s, arriving together, queues 1:1.
    # Fluid: each gets half the cluster, both finish at 20. kube-default runs them one after the
    # other (FIFO): the first at 10 (not slowed), the second at 20 (not slowed either).
    wl = kit.workload(kit.nodes(1, cpu=4.0, memory=16.0),
                      [kit.job("a", 0.0, kit.group("m", 4, 10.0), queue="a"),
                       kit.job("b", 0.0, kit.group("m", 4, 10.0), queue="b")],
                      queues=(QueueSpec("a"), QueueSpec("b")))
    sim = Simulation(wl, make("kube-default"), SimConfig(usage=kit.FLAT), 0)
    np.testing.assert_allclose(sim.recorder.fluid_jct(), [20.0, 20.0])
    result = sim.run()
    assert result.summary["slowed_vs_fluid_fraction"] == 0.0
    assert result.summary["jct_mean_fluid_s"] == pytest.approx(20.0)
