"""Alignment score (Tetris §3.2), feasibility and the extender's 0..10 scale."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.policy.alignment import (
    MAX_EXTENDER_PRIORITY,
    alignment,
    feasible,
    over_quota,
    shortfall,
    to_extender_scores,
)
from stowage.policy.tolerances import FEASIBILITY_RTOL

INF = -np.inf

# Two resources (cpu cores, memory GB) unless a case says otherwise.
ALIGNMENT_CASES = [
    pytest.param([2, 3], [[2, 4]], [[2, 4]], None, [1.0 + 0.75], id="whole-empty-node-dot-product"),
    pytest.param([1, 2], [[2, 4]], [[1, 2]], None, [0.25 + 0.25], id="half-free-node-scores-quarter-per-resource"),
    pytest.param([1, 1], [[4, 4], [2, 2]], [[4, 4], [2, 2]], None, [0.5, 1.0], id="normalised-by-each-nodes-capacity"),
    pytest.param([3, 1], [[2, 4]], [[2, 4]], None, [INF], id="infeasible-cpu-is-minus-inf"),
    pytest.param([1, 5], [[2, 4]], [[2, 4]], None, [INF], id="infeasible-memory-is-minus-inf"),
    pytest.param([1, 1], [[2, 4]], [[0.5, 4]], None, [INF], id="fits-capacity-but-not-available"),
    pytest.param([1, 0], [[2, 0]], [[2, 0]], None, [0.5], id="zero-capacity-resource-zero-demand-fits-and-adds-0"),
    pytest.param([1, 0.1], [[2, 0]], [[2, 0]], None, [INF], id="zero-capacity-resource-any-demand-infeasible"),
    pytest.param([0, 0], [[2, 4]], [[2, 4]], None, [0.0], id="zero-demand-fits-and-scores-zero"),
    pytest.param([-1, 2], [[2, 4]], [[2, 4]], None, [0.5], id="negative-demand-clamped-to-zero"),
    pytest.param([1, 1], [[2, 4]], [[-1, 4]], None, [INF], id="negative-available-clamped-to-zero"),
    pytest.param([1, 2], [[2, 4]], [[8, 8]], None, [0.5 + 0.5], id="available-above-capacity-clamped-to-capacity"),
    pytest.param([np.nan, 1], [[2, 4]], [[2, 4]], None, [INF], id="nan-demand-never-fits"),
    pytest.param([1, 1], [[np.nan, 4]], [[2, 4]], None, [INF], id="nan-capacity-counts-as-zero"),
    pytest.param(
        [2, 3],
        [[2, 4], [2, 4]],
        [[2, 4], [2, 4]],
        [True, False],
        [1.75 * 0.9, 1.75],
        id="remote-node-loses-ten-percent",
    ),
    pytest.param(
        [3, 3],
        [[2, 4], [4, 4]],
        [[2, 4], [4, 4]],
        [False, True],
        [INF, 0.75 * 0.9 + 0.75 * 0.9],
        id="remote-penalty-leaves-infeasible-infeasible",
    ),
    pytest.param(
        [0.1 + 0.2, 1],
        [[0.3, 4]],
        [[0.3, 4]],
        None,
        [1.0 * 1.0 + 0.25],
        id="float-noise-within-tolerance-fits",
    ),
]


@pytest.mark.parametrize(("demand", "capacity", "available", "remote", "expected"), ALIGNMENT_CASES)
def test_alignment_matches_the_tetris_dot_product(demand, capacity, available, remote, expected):
    got = alignment(np.array(demand, float), np.array(capacity, float), np.array(available, float), remote=remote)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_remote_penalty_default_comes_from_packing_settings():
    cap = np.array([[2.0, 4.0]])
    got = alignment([2.0, 4.0], cap, cap, remote=[True])
    assert got[0] == pytest.approx(2.0 * (1 - PackingSettings().remote_penalty))
    assert PackingSettings().remote_penalty == 0.10


@pytest.mark.parametrize(
    ("penalty", "expected"),
    [
        pytest.param(0.0, 2.0, id="zero-penalty-no-change"),
        pytest.param(0.5, 1.0, id="half-penalty-halves"),
        pytest.param(1.0, 0.0, id="full-penalty-zero-but-still-feasible"),
        pytest.param(1.7, 0.0, id="penalty-above-one-clamped"),
        pytest.param(-0.3, 2.0, id="negative-penalty-clamped-to-zero"),
    ],
)
def test_remote_penalty_is_clamped_to_unit_interval(penalty, expected):
    cap = np.array([[2.0, 4.0]])
    assert alignment([2.0, 4.0], cap, cap, remote=[True], remote_penalty=penalty)[0] == pytest.approx(expected)


def test_task_matrix_gives_one_row_per_task_and_per_task_remote_mask():
    cap = np.array([[2.0, 4.0], [4.0, 8.0]])
    demand = np.array([[2.0, 3.0], [1.0, 2.0]])
    remote = np.array([[False, True], [True, False]])
    got = alignment(demand, cap, cap, remote=remote)
    assert got.shape == (2, 2)
    np.testing.assert_allclose(got, [[1.75, (0.5 + 0.375) * 0.9], [(0.5 + 0.5) * 0.9, 0.25 + 0.25]])


def test_bigger_task_on_abundant_resource_scores_higher():
    # Tetris §3.2: a task needing the resource the node has in abundance scores higher.
    cap = np.array([[4.0, 4.0]])
    free = np.array([[4.0, 1.0]])  # cpu abundant, memory scarce
    cpu_heavy, mem_heavy = alignment(np.array([[1.0, 0.5], [0.5, 1.0]]), cap, free)[:, 0]
    assert cpu_heavy > mem_heavy


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"demand": np.zeros((2, 2, 2))}, "demand", id="three-d-demand"),
        pytest.param({"capacity": np.zeros((1, 3))}, "capacity.shape", id="capacity-resource-count-mismatch"),
        pytest.param({"available": np.zeros((2, 2))}, "available.shape", id="available-node-count-mismatch"),
        pytest.param({"remote": [True, False, True]}, "remote.shape", id="remote-mask-wrong-length"),
        pytest.param({"capacity": np.zeros(2)}, "capacity", id="one-d-capacity"),
    ],
)
def test_bad_shapes_name_the_field(kwargs, field):
    args = {"demand": np.ones(2), "capacity": np.ones((1, 2)), "available": np.ones((1, 2))} | kwargs
    remote = args.pop("remote", None)
    with pytest.raises(InvalidInput) as info:
        alignment(args["demand"], args["capacity"], args["available"], remote=remote)
    assert info.value.field == field


FEASIBLE_CASES = [
    pytest.param([1, 1], [[1, 1], [0.5, 2], [2, 0.99]], [True, False, False], id="every-resource-must-fit"),
    pytest.param([0, 0], [[0, 0]], [True], id="zero-demand-fits-empty-node"),
    pytest.param([1e-12, 0], [[0, 0]], [False], id="any-demand-on-zero-available-does-not-fit"),
    pytest.param([1, 1], [[np.nan, 5]], [False], id="nan-available-counts-as-zero"),
    pytest.param([1.0 + 1e-12, 1], [[1, 1]], [True], id="float-noise-fits"),
    pytest.param([1.0 + 1e-6, 1], [[1, 1]], [False], id="real-excess-does-not-fit"),
]


@pytest.mark.parametrize(("demand", "available", "expected"), FEASIBLE_CASES)
def test_feasible_requires_every_resource_to_fit(demand, available, expected):
    assert feasible(np.array(demand, float), np.array(available, float)).tolist() == expected


def test_feasible_agrees_with_alignment_on_task_matrices():
    cap = np.array([[2.0, 4.0], [1.0, 1.0]])
    demand = np.array([[2.0, 3.0], [1.0, 2.0], [0.5, 0.5]])
    assert np.array_equal(feasible(demand, cap), np.isfinite(alignment(demand, cap, cap)))


EXTENDER_CASES = [
    pytest.param([1.75, 1.0, INF], [10, 1, 0], id="best-10-worst-feasible-1-infeasible-0"),
    pytest.param([0.5, 0.5, 0.5], [10, 10, 10], id="all-equal-feasible-get-10"),
    pytest.param([0.3], [10], id="single-feasible-node-gets-10"),
    pytest.param([INF, INF], [0, 0], id="all-infeasible-get-0"),
    pytest.param([np.nan, 2.0], [0, 10], id="nan-counts-as-infeasible"),
    pytest.param([0.0, 0.5, 1.0], [1, 6, 10], id="linear-with-half-rounded-up"),
    pytest.param([-3.0, -1.0], [1, 10], id="negative-combined-scores-still-scale"),
    pytest.param([], [], id="no-nodes"),
]


# allocation after the next task, quota → over, per resource
QUOTA_CASES = [
    pytest.param([1.0, 2.0], [2.0, 2.0], [False, False], id="at-the-quota-is-within"),
    pytest.param([2.5, 1.0], [2.0, 2.0], [True, False], id="above-on-one-resource"),
    pytest.param([0.0], [0.0], [False], id="nothing-in-a-zero-quota-is-within"),
    pytest.param([1e-13], [0.0], [False], id="float-noise-in-a-zero-quota-is-within"),
    pytest.param([0.001], [0.0], [True], id="any-real-amount-in-a-zero-quota-is-over"),
    pytest.param([0.1 + 0.2], [0.3], [False], id="float-noise-above-the-quota-is-within"),
    pytest.param([1e9], [np.inf], [False], id="infinite-quota-is-unlimited"),
    pytest.param([np.nan, 1.0], [2.0, np.nan], [True, True], id="nan-is-over"),
]


@pytest.mark.parametrize(("after", "quota", "expected"), QUOTA_CASES)
def test_over_quota_allows_only_float_noise(after, quota, expected):
    assert over_quota(np.array(after), np.array(quota)).tolist() == expected


# demand, free (N, R), capacity (N, R) → shortfall per node
SHORTFALL_CASES = [
    pytest.param([2, 2], [[1, 2]], [[4, 4]], [0.25], id="largest-lack-over-capacity"),
    pytest.param([2, 2], [[0, 0], [1, 1]], [[4, 4], [2, 8]], [0.5, 0.5], id="each-node-by-its-own-capacity"),
    pytest.param([1, 1], [[2, 2]], [[2, 2]], [0.0], id="fits-is-zero"),
    pytest.param([1, 1], [[4, 0]], [[4, 0]], [np.inf], id="needed-resource-the-node-has-none-of-is-infinite"),
    pytest.param([1, 0], [[0, 0]], [[4, 0]], [0.25], id="unneeded-resource-the-node-has-none-of-adds-nothing"),
    pytest.param([1, 1e9], [[0, 0], [0, 1]], [[4, 0], [4, 2e9]], [np.inf, 0.5], id="never-closer-than-a-node-that-can"),
]


@pytest.mark.parametrize(("demand", "free", "capacity", "expected"), SHORTFALL_CASES)
def test_shortfall_is_the_largest_lack_as_a_fraction_of_capacity(demand, free, capacity, expected):
    d, a, c = (np.array(x, dtype=np.float64) for x in (demand, free, capacity))
    np.testing.assert_allclose(shortfall(d, a, c), expected)
    np.testing.assert_allclose(shortfall(np.stack([d, d]), a, c), [expected, expected])  # one row per shape


@pytest.mark.parametrize(("scores", "expected"), EXTENDER_CASES)
def test_extender_scores_scale_feasible_range_onto_one_to_ten(scores, expected):
    got = to_extender_scores(np.array(scores, dtype=float))
    assert got.dtype == np.int64
    assert got.tolist() == expected


# --- properties -------------------------------------------------------------------------------

_values = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def _cluster(draw):
    n = draw(st.integers(1, 6))
    r = draw(st.integers(1, 4))
    t = draw(st.integers(1, 5))
    cap = draw(hnp.arrays(np.float64, (n, r), elements=_values))
    frac = draw(hnp.arrays(np.float64, (n, r), elements=st.floats(0.0, 1.0)))
    demand = draw(hnp.arrays(np.float64, (t, r), elements=_values))
    remote = draw(hnp.arrays(np.bool_, (t, n)))
    return demand, cap, cap * frac, remote


@settings(max_examples=300, deadline=None)
@given(_cluster(), st.floats(0.0, 1.0))
def test_a_finite_score_never_admits_an_over_allocation(cluster, penalty):
    demand, cap, avail, remote = cluster
    score = alignment(demand, cap, avail, remote=remote, remote_penalty=penalty)
    for t, n in zip(*np.nonzero(np.isfinite(score)), strict=True):
        # d ≤ A on every resource, up to the documented float-noise tolerance.
        assert np.all(demand[t] <= avail[n] * (1 + FEASIBILITY_RTOL))
    for t, n in zip(*np.nonzero(~np.isfinite(score)), strict=True):
        assert np.any(demand[t] > avail[n])
    assert np.all(score[np.isfinite(score)] >= 0)


@settings(max_examples=300, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.integers(0, 12),
        elements=st.one_of(st.floats(allow_nan=True, allow_infinity=False, width=64), st.just(-np.inf)),
    )
)
def test_extender_scores_are_in_range_and_monotone(scores):
    got = to_extender_scores(scores)
    assert np.all((got >= 0) & (got <= MAX_EXTENDER_PRIORITY))
    finite = np.isfinite(scores)
    assert np.all(got[~finite] == 0)
    assert np.all(got[finite] >= 1)
    if finite.any():
        assert got[finite][np.argmax(scores[finite])] == MAX_EXTENDER_PRIORITY
    order = np.argsort(np.where(finite, scores, -np.inf), kind="stable")
    assert np.all(np.diff(got[order]) >= 0)
