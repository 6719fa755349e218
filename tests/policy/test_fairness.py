"""Weighted DRF per pool, fair shares, the fairness knob f and the barrier knob b."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.model import QueueOpportunistic
from stowage.policy.fairness import (
    barrier_boost,
    dominant_shares,
    drf_pick,
    fair_share,
    fairness_candidates,
)

INF = np.inf

# Pool of (cpu 10, memory 100) unless a case says otherwise.
SHARE_CASES = [
    pytest.param([[2, 10], [1, 40]], [10, 100], [1, 1], [0.2, 0.4], id="max-over-resources"),
    pytest.param([[2, 10], [1, 40]], [10, 100], [2, 1], [0.1, 0.4], id="divided-by-weight"),
    pytest.param([[2, 10]], [0, 100], [1], [0.1], id="zero-total-resource-ignored"),
    pytest.param([[2, 10]], [0, 0], [1], [0.0], id="empty-pool-all-zero"),
    pytest.param([[0, 0]], [10, 100], [1], [0.0], id="nothing-held-zero"),
    pytest.param([[-3, np.nan]], [10, 100], [1], [0.0], id="negative-and-nan-allocation-count-zero"),
    pytest.param([[2, 10], [0, 0]], [10, 100], [0, -1], [INF, INF], id="non-positive-weight-infinite-share"),
]


@pytest.mark.parametrize(("alloc", "total", "weights", "expected"), SHARE_CASES)
def test_dominant_share_is_largest_fraction_over_weight(alloc, total, weights, expected):
    got = dominant_shares(np.array(alloc, float), np.array(total, float), np.array(weights, float))
    np.testing.assert_allclose(got, expected)


PICK_CASES = [
    pytest.param([[2, 10], [1, 40], [3, 0]], [1, 1, 1], [True, True, True], 0, id="lowest-share-wins"),
    pytest.param([[2, 10], [1, 40], [3, 0]], [1, 1, 1], [False, True, True], 2, id="ineligible-skipped"),
    pytest.param([[2, 10], [1, 40]], [1, 4], [True, True], 1, id="weight-makes-bigger-holder-win"),
    pytest.param([[1, 10], [1, 10], [0, 20]], [1, 1, 1], [True, True, True], 0, id="tie-goes-to-lowest-index"),
    pytest.param([[1, 10], [5, 10], [1, 10]], [1, 1, 1], [False, True, True], 2, id="tie-among-eligible-lowest"),
    pytest.param([[1, 10]], [1], [False], None, id="none-eligible-none"),
    pytest.param([[0, 0], [0, 0]], [0, 0], [True, True], 0, id="all-infinite-picks-first-eligible"),
    pytest.param([[0, 0], [9, 90]], [0, 1], [True, True], 1, id="positive-weight-beats-zero-weight"),
]


@pytest.mark.parametrize(("alloc", "weights", "eligible", "expected"), PICK_CASES)
def test_drf_picks_eligible_queue_with_lowest_weighted_dominant_share(alloc, weights, eligible, expected):
    got = drf_pick(np.array(alloc, float), np.array([10.0, 100.0]), np.array(weights, float), np.array(eligible))
    assert got == expected


def test_each_pool_is_shared_separately_and_only_allowing_queues_get_harvest():
    # UBIS §IV-E: queue 0 holds a lot of regular capacity but nothing harvested;
    # queue 1 holds harvested capacity; queue 2 denies opportunistic pods.
    policies = [QueueOpportunistic.ALLOW, QueueOpportunistic.ALLOW, QueueOpportunistic.DENY]
    weights = np.ones(3)
    regular_total = np.array([30.0, 120.0])  # Σ allocatable
    harvest_total = np.array([6.0, 24.0])  # Σ harvestable
    regular_alloc = np.array([[15.0, 60.0], [3.0, 12.0], [6.0, 24.0]])
    opportunistic_alloc = np.array([[0.0, 0.0], [3.0, 6.0], [0.0, 0.0]])
    every_queue = np.ones(3, dtype=bool)
    allowing = np.array([p is QueueOpportunistic.ALLOW for p in policies])
    assert drf_pick(regular_alloc, regular_total, weights, every_queue) == 1
    assert drf_pick(opportunistic_alloc, harvest_total, weights, allowing) == 0
    np.testing.assert_allclose(dominant_shares(opportunistic_alloc, harvest_total, weights), [0.0, 0.5, 0.0])


FAIR_CASES = [
    pytest.param([1, 1, 2], [True, True, True], [0.25, 0.25, 0.5], id="proportional-to-weight"),
    pytest.param([1, 1, 2], [True, False, True], [1 / 3, 0.0, 2 / 3], id="inactive-gets-zero-and-share-moves"),
    pytest.param([1, 1], [False, False], [0.0, 0.0], id="nobody-active"),
    pytest.param([0, 0], [True, True], [0.0, 0.0], id="zero-weights-zero-shares"),
    pytest.param([np.nan, 1], [True, True], [0.0, 1.0], id="nan-weight-counts-zero"),
]


@pytest.mark.parametrize(("weights", "active", "expected"), FAIR_CASES)
def test_fair_share_is_weight_over_active_weight(weights, active, expected):
    np.testing.assert_allclose(fair_share(np.array(weights, float), np.array(active)), expected)


# deficits, f → candidate indices (largest deficit first, stable)
CANDIDATE_CASES = [
    pytest.param([0.1, 0.3, -0.2, 0.3], 0.0, [1, 3, 0, 2], id="f-zero-all-jobs-sorted"),
    pytest.param([0.1, 0.3, -0.2, 0.3], 0.25, [1, 3, 0], id="f-quarter-drops-one-of-four"),
    pytest.param([0.1, 0.3, -0.2, 0.3], 0.5, [1, 3], id="f-half-keeps-two"),
    pytest.param([0.1, 0.3, -0.2, 0.3], 0.99, [1], id="f-near-one-most-deprived-only"),
    pytest.param([0.1, 0.3, -0.2, 0.3], 1.0, [1], id="f-one-never-empty"),
    pytest.param([0.1, 0.3, -0.2, 0.3], 7.0, [1], id="f-above-one-clamped"),
    pytest.param([0.1, 0.3, -0.2, 0.3], -1.0, [1, 3, 0, 2], id="f-negative-clamped-to-zero"),
    pytest.param([0.0] * 10, 0.7, [0, 1, 2], id="float-rounding-does-not-add-a-job"),
    pytest.param([0.2, np.nan, 0.1], 0.0, [0, 2, 1], id="nan-deficit-least-deprived"),
    pytest.param([0.5], 0.9, [0], id="single-job"),
    pytest.param([], 0.5, [], id="no-jobs"),
]


@pytest.mark.parametrize(("deficit", "f", "expected"), CANDIDATE_CASES)
def test_fairness_candidates_are_the_most_deprived_ceil_one_minus_f_jobs(deficit, f, expected):
    got = fairness_candidates(np.array(deficit, float), f)
    assert got.dtype == np.int64
    assert got.tolist() == expected


def test_default_fairness_knob_keeps_three_quarters_of_jobs():
    assert PackingSettings().fairness_knob == 0.25
    assert len(fairness_candidates(np.arange(8.0), PackingSettings().fairness_knob)) == 6


# finished fraction, has waiters, b → boosted
BARRIER_CASES = [
    pytest.param([0.9, 0.95, 0.5], [True, True, True], 0.9, [True, True, False], id="at-or-past-b-boosted"),
    pytest.param([0.95], [False], 0.9, [False], id="nobody-waiting-no-boost"),
    pytest.param([1.0], [True], 0.9, [False], id="finished-group-has-no-stragglers"),
    pytest.param([0.99], [True], 1.0, [False], id="b-one-boosts-nothing"),
    pytest.param([0.0], [True], 0.0, [True], id="b-zero-boosts-every-waited-group"),
    pytest.param([9 / 10], [True], 0.9, [True], id="exact-fraction-counts"),
    pytest.param([0.7 / 0.7 * 0.9 - 1e-12], [True], 0.9, [True], id="float-noise-below-b-counts"),
    pytest.param([np.nan], [True], 0.5, [False], id="nan-fraction-never-boosted"),
]


@pytest.mark.parametrize(("fraction", "waiters", "b", "expected"), BARRIER_CASES)
def test_barrier_boost_prefers_stragglers_once_b_finished(fraction, waiters, b, expected):
    got = barrier_boost(np.array(fraction, float), np.array(waiters), b)
    assert got.tolist() == expected


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(
            lambda: dominant_shares(np.ones((2, 3)), np.ones(2), np.ones(2)),
            "allocated.shape",
            id="shares-resource-mismatch",
        ),
        pytest.param(
            lambda: dominant_shares(np.ones((2, 2)), np.ones(2), np.ones(3)), "weights.shape", id="shares-weight-count"
        ),
        pytest.param(
            lambda: drf_pick(np.ones((2, 2)), np.ones(2), np.ones(2), [True]),
            "eligible.shape",
            id="pick-eligible-count",
        ),
        pytest.param(lambda: fair_share(np.ones(2), [True]), "active.shape", id="fair-active-count"),
        pytest.param(lambda: barrier_boost(np.ones(2), [True], 0.9), "has_waiters.shape", id="barrier-count"),
        pytest.param(lambda: fairness_candidates(np.ones((2, 2)), 0.5), "share_deficit.shape", id="deficit-2d"),
    ],
)
def test_shape_errors_name_the_field(call, field):
    with pytest.raises(InvalidInput) as info:
        call()
    assert info.value.field == field


# --- properties -------------------------------------------------------------------------------


@st.composite
def _queues(draw):
    q = draw(st.integers(1, 6))
    r = draw(st.integers(1, 4))
    alloc = draw(hnp.arrays(np.float64, (q, r), elements=st.floats(0, 1e3)))
    total = draw(hnp.arrays(np.float64, (r,), elements=st.one_of(st.just(0.0), st.floats(1e-3, 1e4))))
    weights = draw(hnp.arrays(np.float64, (q,), elements=st.floats(0.01, 100)))
    eligible = draw(hnp.arrays(np.bool_, (q,)))
    return alloc, total, weights, eligible


@settings(max_examples=300, deadline=None)
@given(_queues())
def test_drf_pick_returns_the_eligible_queue_with_lowest_weighted_dominant_share(queues):
    alloc, total, weights, eligible = queues
    got = drf_pick(alloc, total, weights, eligible)
    if not eligible.any():
        assert got is None
        return
    assert got is not None and eligible[got]
    # Recompute the definition independently of the implementation.
    fractions = [
        max((alloc[q, r] / total[r] for r in range(len(total)) if total[r] > 0), default=0.0) / weights[q]
        for q in range(len(weights))
    ]
    best = min(fractions[q] for q in range(len(weights)) if eligible[q])
    assert fractions[got] == pytest.approx(best, rel=1e-12, abs=0)
    assert all(fractions[q] > fractions[got] for q in range(got) if eligible[q])  # ties → lowest index


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 30), elements=st.floats(-1, 1)), st.floats(0, 1))
def test_fairness_candidates_size_and_order(deficit, f):
    got = fairness_candidates(deficit, f)
    j = len(deficit)
    assert len(got) == (0 if j == 0 else max(1, int(np.ceil(round((1 - f) * j, 9)))))
    assert len(set(got.tolist())) == len(got)
    assert np.all(np.diff(deficit[got]) <= 0)  # most deprived first
    if len(got):
        # Nobody left out is more deprived than anyone let in.
        rest = np.setdiff1d(np.arange(j), got)
        assert np.all(deficit[rest] <= deficit[got].min())
