"""Remaining work per job (Tetris §3.3.1) and the combined score a + ε·p̃ (§3.3.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from stowage.operator import crd

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.policy import ordering
from stowage.policy.remaining_work import bottleneck_bonus, combined_score, critical_rows, drain_times, remaining_work

INF = -np.inf

# Mean capacity (2 cores, 4 GB) unless a case says otherwise.
WORK_CASES = [
    pytest.param([10], [[2, 4]], [0], 1, [2, 4], [20.0], id="one-task-whole-node-counts-r-per-second"),
    pytest.param([10, 10], [[2, 3], [1, 2]], [0, 1], 2, [2, 4], [17.5, 10.0], id="one-task-per-job"),
    pytest.param(
        [1, 1, 1],
        [[2, 3], [2, 3], [1, 2]],
        [0, 0, 1],
        3,
        [2, 4],
        [3.5, 1.0, 0.0],
        id="summed-per-job-and-empty-job-zero",
    ),
    pytest.param([5], [[1, 2]], [0], 1, [0, 4], [2.5], id="zero-mean-capacity-resource-left-out"),
    pytest.param([-5, np.nan], [[1, 2], [1, 2]], [0, 0], 1, [2, 4], [0.0], id="bad-durations-count-zero"),
    pytest.param([1], [[-1, np.nan]], [0], 1, [2, 4], [0.0], id="bad-demands-count-zero"),
    pytest.param([1, 1], [[2, 4], [2, 4]], [-1, 7], 2, [2, 4], [0.0, 0.0], id="out-of-range-job-ignored"),
    pytest.param([], np.zeros((0, 2)), [], 2, [2, 4], [0.0, 0.0], id="no-tasks"),
    # Work past the largest float is infinite, never 0 (which would order the job first) and never NaN.
    pytest.param([np.inf], [[2, 4]], [0], 1, [2, 4], [np.inf], id="infinite-duration-infinite-work"),
    pytest.param([1e308, 1e308], [[2, 4], [2, 4]], [0, 0], 1, [2, 4], [np.inf], id="sum-overflows-to-infinite"),
    pytest.param([1e308], [[2, 4]], [0], 1, [1e-300, 4], [np.inf], id="product-overflows-to-infinite"),
    pytest.param([np.inf, 3], [[0, 0], [2, 4]], [0, 1], 2, [2, 4], [0.0, 6.0],
                 id="infinite-duration-no-demand-no-work"),
    pytest.param([np.inf], [[2, 4]], [0], 1, [0, 0], [0.0], id="infinite-duration-no-capacity-no-work"),
]


@pytest.mark.parametrize(("dur", "demand", "job", "n_jobs", "cbar", "expected"), WORK_CASES)
def test_remaining_work_is_duration_times_normalised_demand_summed_per_job(dur, demand, job, n_jobs, cbar, expected):
    got = remaining_work(np.array(dur, float), np.array(demand, float), np.array(job, int), n_jobs,
                         np.array(cbar, float))  # fmt: skip
    np.testing.assert_allclose(got, expected)
    assert got.shape == (n_jobs,)


# Defect 11 of issue #31, as the dispatcher computes it (stowage.policy.decide): a job's work is each group's
# task duration × its tasks, summed per job, then SRTF orders the jobs. (durations, tasks, job of each group,
# the order expected.)
SRTF_CASES = [
    pytest.param([60, 1e308, 30], [2, 5, 1], [0, 1, 2], [2, 0, 1], id="duration-times-tasks-overflows-orders-last"),
    pytest.param([60, np.inf, 30], [2, 1, 1], [0, 1, 2], [2, 0, 1], id="infinite-duration-orders-last"),
    pytest.param([1e308, 1e308, 30], [1, 1, 1], [0, 0, 1], [1, 0], id="groups-summing-past-the-float-order-last"),
    pytest.param([np.inf, 1e308], [1, 2], [0, 1], [0, 1], id="two-overflowing-jobs-by-arrival"),
]


@pytest.mark.parametrize(("duration", "tasks", "job", "order"), SRTF_CASES)
def test_a_job_whose_work_overflows_orders_last_under_srtf(duration, tasks, job, order):
    n_jobs = max(job) + 1
    with np.errstate(over="ignore"):
        left = np.asarray(duration, float) * np.asarray(tasks, float)  # overflows to +inf, as decide's does
    work = remaining_work(left, np.tile([1.0, 2.0], (len(job), 1)), np.array(job), n_jobs, np.array([2.0, 4.0]))
    assert not np.isnan(work).any()
    assert ordering.srtf_order(work, np.arange(n_jobs, dtype=float)).tolist() == order


def test_the_largest_work_admission_allows_stays_finite():
    # 64 groups of 100,000 tasks, each 30 days, each asking a whole average node: far from overflow.
    n = crd.MAX_TASKS
    left = np.full(n, crd.MAX_EXPECTED_DURATION_S * crd.MAX_REPLICAS, dtype=float)
    work = remaining_work(left, np.tile([2.0, 4.0], (n, 1)), np.zeros(n, int), 1, np.array([2.0, 4.0]))
    assert np.isfinite(work).all() and work[0] == pytest.approx(2 * n * crd.MAX_EXPECTED_DURATION_S * crd.MAX_REPLICAS)


# Drain times, the bottleneck bonus and the critical path with work that overflowed: never NaN, and the
# overflowed group is never promoted by the critical path. (duration per group, expected drain, bonus, critical)
END_GAME_CASES = [
    pytest.param([10, 40], [10.0, 20.0], [0.5, 1.0], [True, True], id="finite"),
    pytest.param([np.inf, 40], [0.0, 20.0], [0.0, 1.0], [False, True], id="infinite-duration-counts-no-drain"),
    pytest.param([1e308, 1e308], [np.inf, np.inf], [1.0, 1.0], [False, False], id="drain-overflows"),
]


@pytest.mark.parametrize(("duration", "drain", "bonus", "critical"), END_GAME_CASES)
def test_end_game_terms_with_overflowing_work_are_never_nan(duration, drain, bonus, critical):
    demand = np.array([[2.0, 0.0], [0.0, 2.0]])
    got = drain_times(demand, [2, 1], duration, [4.0, 4.0])
    np.testing.assert_allclose(got, drain)
    b = bottleneck_bonus(demand, got, [2.0, 2.0], 1.0)
    assert not np.isnan(b).any()
    np.testing.assert_allclose(b, bonus)
    assert critical_rows(np.asarray(duration, float), got, 0.1).tolist() == critical


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"task_demand": np.zeros((3, 2))}, "task_demand.shape", id="demand-rows-mismatch"),
        pytest.param({"task_job": np.zeros(3, int)}, "task_job.shape", id="job-length-mismatch"),
        pytest.param({"mean_capacity": np.ones(3)}, "mean_capacity.shape", id="capacity-length-mismatch"),
    ],
)
def test_remaining_work_rejects_mismatched_shapes(kwargs, field):
    args = {"task_duration_s": np.ones(2), "task_demand": np.ones((2, 2)), "task_job": np.zeros(2, int),
            "n_jobs": 1, "mean_capacity": np.ones(2)} | kwargs  # fmt: skip
    with pytest.raises(InvalidInput) as info:
        remaining_work(**args)
    assert info.value.field == field


# align (T, N), work per task, m → expected. ā, p̄ over feasible (task, node) pairs.
COMBINED_CASES = [
    # ā = (1+1+0.5+0.5)/4 = 0.75, p̄ = (4+4+2+2)/4 = 3, ε = 0.25: a − 0.25·p
    pytest.param([[1.0, 1.0], [0.5, 0.5]], [4.0, 2.0], 1.0, [[0.0, 0.0], [0.0, 0.0]], id="epsilon-is-a-bar-over-p-bar"),
    pytest.param([[1.0, 1.0], [0.5, 0.5]], [4.0, 2.0], 2.0, [[-1.0, -1.0], [-0.5, -0.5]], id="m-scales-epsilon"),
    pytest.param([[1.0, 1.0], [0.5, 0.5]], [4.0, 2.0], 0.0, [[1.0, 1.0], [0.5, 0.5]], id="m-zero-is-pure-alignment"),
    pytest.param([[1.0, 1.0], [0.5, 0.5]], [4.0, 2.0], -3.0, [[1.0, 1.0], [0.5, 0.5]], id="negative-m-clamped-to-zero"),
    # Infeasible pairs neither count in the means nor change: ā = 2/3, p̄ = 8/3, ε = 0.25.
    pytest.param([[1.0, INF], [0.5, 0.5]], [4.0, 2.0], 1.0, [[0.0, INF], [0.0, 0.0]], id="infeasible-stays-minus-inf"),
    pytest.param([[INF, INF]], [4.0], 1.0, [[INF, INF]], id="nothing-feasible-unchanged"),
    pytest.param([[1.0, 0.5]], [0.0], 1.0, [[1.0, 0.5]], id="no-work-left-anywhere-unchanged"),
    # Unknown work counts as average: p̄ over known = 2, the NaN task loses m·ā = 0.75.
    pytest.param(
        [[1.0, 1.0], [0.5, 0.5]],
        [np.nan, 2.0],
        1.0,
        [[0.25, 0.25], [-0.25, -0.25]],
        id="unknown-work-counts-as-average",
    ),
]


@pytest.mark.parametrize(("align", "work", "m", "expected"), COMBINED_CASES)
def test_combined_score_subtracts_scaled_remaining_work(align, work, m, expected):
    got = combined_score(np.array(align), np.array(work), m)
    np.testing.assert_allclose(got, expected)


def test_scalar_work_for_one_pod_shifts_every_node_equally():
    align = np.array([1.75, 1.0, INF])
    got = combined_score(align, 5.0, PackingSettings().remaining_work_weight)
    # p = p̄ for a single job, so every feasible node loses m·ā = 1.375; ranking unchanged.
    np.testing.assert_allclose(got, [1.75 - 1.375, 1.0 - 1.375, INF])


def test_smaller_remaining_work_wins_between_equally_aligned_tasks():
    got = combined_score(np.array([[1.0], [1.0]]), np.array([10.0, 1.0]), 1.0)
    assert got[1, 0] > got[0, 0]


def test_combined_score_rejects_work_not_lined_up_with_tasks():
    with pytest.raises(InvalidInput) as info:
        combined_score(np.ones((3, 2)), np.ones(2), 1.0)
    assert info.value.field == "job_work.shape"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_combined_score_keeps_infeasible_and_prefers_less_work_at_equal_alignment(data):
    t = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(1, 4))
    align = data.draw(hnp.arrays(np.float64, (t, n), elements=st.one_of(st.floats(0, 4), st.just(INF))))
    work = data.draw(hnp.arrays(np.float64, (t,), elements=st.floats(0, 1e4)))
    got = combined_score(align, work, data.draw(st.floats(0, 5)))
    assert np.array_equal(np.isfinite(got), np.isfinite(align))
    # For two tasks on the same node with the same alignment, less work never scores lower.
    for j in range(n):
        for x in range(t):
            for y in range(t):
                if np.isfinite(align[x, j]) and align[x, j] == align[y, j] and work[x] < work[y]:
                    assert got[x, j] >= got[y, j]
