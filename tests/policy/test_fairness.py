"""Weighted dominant shares per pool, fair shares and the barrier knob b (the fairness knob f: test_dispatch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.errors import InvalidInput
from stowage.model import QueueOpportunistic
from stowage.policy.fairness import (
    barrier_boost,
    dominant_shares,
    fair_levels,
    fair_shares,
    usage_targets,
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


def test_each_pool_is_shared_separately_and_only_allowing_queues_get_harvest():
    # UBIS §IV-E: queue 0 holds a lot of regular capacity but nothing harvested;
    # queue 1 holds harvested capacity; queue 2 denies opportunistic pods.
    policies = [QueueOpportunistic.ALLOW, QueueOpportunistic.ALLOW, QueueOpportunistic.DENY]
    weights = np.ones(3)
    regular_total = np.array([30.0, 120.0])  # Σ allocatable
    harvest_total = np.array([6.0, 24.0])  # Σ harvestable
    regular_alloc = np.array([[15.0, 60.0], [3.0, 12.0], [6.0, 24.0]])
    opportunistic_alloc = np.array([[0.0, 0.0], [3.0, 6.0], [0.0, 0.0]])
    allowing = np.array([p is QueueOpportunistic.ALLOW for p in policies])
    regular = dominant_shares(regular_alloc, regular_total, weights)
    harvested = dominant_shares(opportunistic_alloc, harvest_total, weights)
    np.testing.assert_allclose(regular, [0.5, 0.1, 0.2])
    np.testing.assert_allclose(harvested, [0.0, 0.5, 0.0])
    assert int(np.argmin(regular)) == 1  # lowest in the regular pool
    assert int(np.flatnonzero(allowing)[np.argmin(harvested[allowing])]) == 0  # among the queues that Allow


# dominant (unweighted), weights, backlogged → fair_shares (weighted max-min: the one fair share, issue #34)
FAIR_CASES = [
    pytest.param([0, 0, 0], [1, 1, 2], [True, True, True], [0.25, 0.25, 0.5], id="all-backlogged-by-weight"),
    pytest.param([0.2, 0.3, 0.5], [1, 1, 2], [True, True, True], [0.25, 0.25, 0.5],
                 id="backlogged-shares-ignore-what-they-hold"),
    pytest.param([0, 0, 0], [1, 1, 2], [True, False, True], [1 / 3, 0.0, 2 / 3], id="idle-and-empty-gets-zero"),
    pytest.param([0.5, 0.1, 0.0], [1, 1, 1], [False, False, True], [0.45, 0.1, 0.45],
                 id="one-below-the-level-keeps-what-it-holds-the-rest-split"),
    pytest.param([0.9, 0.0], [1, 1], [False, True], [0.5, 0.5], id="one-above-the-level-gets-the-level"),
    pytest.param([0.5, 0.2, 0.1], [2, 1, 1], [True, True, False], [0.6, 0.3, 0.1], id="weights-split-what-is-left"),
    pytest.param([0.3, 0.0], [1, 1], [False, False], [0.3, 0.0], id="nobody-backlogged-each-its-own"),
    pytest.param([0, 0], [1, 1], [False, False], [0.0, 0.0], id="nobody-active"),
    pytest.param([0, 0], [0, 0], [True, True], [0.0, 0.0], id="zero-weights-zero-shares"),
    pytest.param([0, 0], [np.nan, 1], [True, True], [0.0, 1.0], id="nan-weight-counts-zero"),
]


@pytest.mark.parametrize(("dominant", "weights", "backlogged", "expected"), FAIR_CASES)
def test_fair_shares_are_weighted_max_min(dominant, weights, backlogged, expected):
    got = fair_shares(np.array(dominant, float), np.array(weights, float), np.array(backlogged))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # The dispatcher's levels (floor, holds) are the backlogged queues' shares, nothing else.
    levels = fair_levels(np.array(dominant, float), np.array(weights, float), np.array(backlogged))
    np.testing.assert_array_equal(levels, np.where(backlogged, got, 0.0))


def test_fair_shares_with_every_holder_backlogged_are_weight_over_their_weight_bit_for_bit():
    """What the simulator's relative-unfairness metric reads (Tetris §5.4: every active queue wants more)."""
    w = np.array([1.0, 3.0, 0.7, 2.0])
    on = np.array([True, True, False, True])
    got = fair_shares(np.zeros(4), w, on)
    expected = np.where(on, w, 0.0) / np.where(on, w, 0.0).sum()
    assert got.tolist() == expected.tolist()


# usage, weights, backlogged → usage_targets
TARGET_CASES = [
    pytest.param([0.4, 0.2], [2, 1], [True, True], [0.4, 0.2], id="on-target"),
    pytest.param([0.3, 0.3], [2, 1], [True, True], [0.4, 0.2], id="split-by-weight"),
    pytest.param([0.3, 0.3, 0.2], [2, 1, 1], [True, True, False], [0.4, 0.2, 0.2],
                 id="nothing-waiting-its-own-usage"),
    pytest.param([0.3, 0.0], [0, 1], [True, True], [0.3, 0.0], id="zero-weight-not-counted"),
]


@pytest.mark.parametrize(("usage", "weights", "backlogged", "expected"), TARGET_CASES)
def test_usage_targets_split_the_backlogged_queues_usage_by_weight(usage, weights, backlogged, expected):
    got = usage_targets(np.array(usage, float), np.array(weights, float), np.array(backlogged))
    np.testing.assert_allclose(got, expected, atol=1e-12)


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
        pytest.param(lambda: fair_shares(np.ones(2), np.ones(2), [True]), "backlogged.shape", id="fair-count"),
        pytest.param(lambda: usage_targets(np.ones(2), np.ones(2), [True]), "backlogged.shape", id="target-count"),
        pytest.param(lambda: barrier_boost(np.ones(2), [True], 0.9), "has_waiters.shape", id="barrier-count"),
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
def test_dominant_shares_match_the_definition(queues):
    alloc, total, weights, _ = queues
    got = dominant_shares(alloc, total, weights)
    # Recompute the definition independently of the implementation.
    fractions = [
        max((alloc[q, r] / total[r] for r in range(len(total)) if total[r] > 0), default=0.0) / weights[q]
        for q in range(len(weights))
    ]
    np.testing.assert_allclose(got, fractions, rtol=1e-12, atol=0)
