"""Remaining work per job (Tetris §3.3.1) and the combined score a + ε·p̃ (§3.3.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.policy.remaining_work import combined_score, remaining_work

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
]


@pytest.mark.parametrize(("dur", "demand", "job", "n_jobs", "cbar", "expected"), WORK_CASES)
def test_remaining_work_is_duration_times_normalised_demand_summed_per_job(dur, demand, job, n_jobs, cbar, expected):
    got = remaining_work(np.array(dur, float), np.array(demand, float), np.array(job, int), n_jobs,
                         np.array(cbar, float))  # fmt: skip
    np.testing.assert_allclose(got, expected)
    assert got.shape == (n_jobs,)


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
