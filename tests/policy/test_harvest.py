"""Harvestable and regular capacity, the ramp-up allowance, and UBIS Algorithm 1 on one node."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.config import HarvestSettings
from stowage.errors import InvalidInput
from stowage.policy.harvest import (
    NOT_PLACED,
    OPPORTUNISTIC,
    REGULAR,
    assign_on_node,
    assign_on_node_detailed,
    assumed,
    harvestable,
    regular_available,
)

NAN = np.nan

# One node, resources (cpu cores, memory GiB), T_alloc 0.9 unless a case says otherwise.
HARVESTABLE_CASES = [
    pytest.param([10, 100], [2, 30], [0, 0], [0, 0], [0.9, 0.9], [7, 60], id="t-alloc-times-capacity-minus-usage"),
    pytest.param([10, 100], [2, 30], [1, 10], [0, 0], [0.9, 0.9], [6, 50], id="blocked-comes-off"),
    pytest.param([10, 100], [2, 30], [0, 0], [3, 5], [0.9, 0.9], [4, 55], id="assumed-comes-off"),
    pytest.param([10, 100], [9.5, 30], [0, 0], [0, 0], [0.9, 0.9], [0, 60], id="usage-above-t-alloc-clamps-to-zero"),
    pytest.param([10, 100], [5, 30], [4, 0], [4, 0], [0.9, 0.9], [0, 60], id="negative-sum-clamps-to-zero"),
    pytest.param([10, 100], [-5, 30], [0, 0], [0, 0], [0.9, 0.9], [9, 60], id="negative-usage-counts-as-zero"),
    pytest.param([10, 100], [NAN, 30], [0, 0], [0, 0], [0.9, 0.9], [0, 60], id="unknown-usage-harvests-nothing"),
    pytest.param([10, 100], [2, 30], [0, 0], [0, 0], [1.5, -1], [8, 0], id="t-alloc-clamped-to-unit-interval"),
    pytest.param([0, 100], [0, 30], [0, 0], [0, 0], [0.9, 0.9], [0, 60], id="zero-capacity-harvests-zero"),
    pytest.param([10, 100], [2, 30], [-3, 0], [-3, 0], [0.9, 0.9], [7, 60], id="negative-blocked-and-assumed-ignored"),
]


@pytest.mark.parametrize(("cap", "use", "blocked", "assumed_", "t_alloc", "expected"), HARVESTABLE_CASES)
def test_harvestable_is_t_alloc_capacity_minus_usage_blocked_and_assumed(
    cap, use, blocked, assumed_, t_alloc, expected
):
    got = harvestable(
        np.array([cap], float), np.array([use], float), np.array([blocked], float),
        np.array([assumed_], float), np.array(t_alloc, float),
    )  # fmt: skip
    np.testing.assert_allclose(got, [expected], atol=1e-12)


def test_harvestable_accepts_a_per_node_t_alloc():
    cap = np.array([[10.0], [10.0]])
    zero = np.zeros_like(cap)
    got = harvestable(cap, zero, zero, zero, np.array([[0.5], [0.8]]))
    np.testing.assert_allclose(got, [[5.0], [8.0]])


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        pytest.param("usage.shape", {"usage": np.zeros((2, 2))}, id="usage-shape"),
        pytest.param("t_alloc.shape", {"t_alloc": np.zeros(3)}, id="t-alloc-length"),
        pytest.param("capacity.shape", {"capacity": np.zeros(2)}, id="capacity-not-2d"),
    ],
)
def test_harvestable_rejects_mismatched_shapes_naming_the_field(field, kwargs):
    args = {"capacity": np.ones((1, 2)), "usage": np.zeros((1, 2)), "blocked": np.zeros((1, 2)),
            "assumed": np.zeros((1, 2)), "t_alloc": np.ones(2)} | kwargs  # fmt: skip
    with pytest.raises(InvalidInput) as info:
        harvestable(**args)
    assert info.value.field == field


# Pods: demand (cpu, mem), bound at, node. now = 100 s, ramp-up 30 s, 2 nodes.
ASSUMED_CASES = [
    pytest.param([[1, 2]], [90], [0], None, [[1, 2], [0, 0]], id="recent-pod-counts-full-demand"),
    pytest.param([[1, 2]], [70], [0], None, [[0, 0], [0, 0]], id="ramp-up-expired-exactly-at-window"),
    pytest.param([[1, 2]], [50], [1], None, [[0, 0], [0, 0]], id="ramp-up-expired-long-ago"),
    pytest.param([[1, 2]], [70.5], [1], None, [[0, 0], [1, 2]], id="just-inside-window"),
    pytest.param([[1, 2]], [130], [0], None, [[1, 2], [0, 0]], id="future-bind-time-counts-as-recent"),
    pytest.param([[1, 2]], [NAN], [0], None, [[1, 2], [0, 0]], id="unknown-bind-time-counts-as-recent"),
    pytest.param([[1, 2], [3, 4], [1, 1]], [95, 99, 99], [1, 1, 0], None, [[1, 1], [4, 6]], id="summed-per-node"),
    pytest.param([[1, 2]], [90], [0], [[0.25, 3]], [[0.75, 0], [0, 0]], id="measured-part-not-counted-twice"),
    pytest.param([[1, 2]], [90], [-1], None, [[0, 0], [0, 0]], id="unbound-pod-ignored"),
    pytest.param([[1, 2]], [90], [2], None, [[0, 0], [0, 0]], id="out-of-range-node-ignored"),
    pytest.param([[-1, 2]], [90], [0], None, [[0, 2], [0, 0]], id="negative-demand-counts-as-zero"),
]


@pytest.mark.parametrize(("demands", "bound", "node", "measured", "expected"), ASSUMED_CASES)
def test_assumed_counts_recent_pods_until_ramp_up_expires(demands, bound, node, measured, expected):
    got = assumed(
        np.array(demands, float), np.array(bound, float), np.array(node), 100.0, 30.0, 2,
        None if measured is None else np.array(measured, float),
    )  # fmt: skip
    np.testing.assert_allclose(got, expected)


def test_assumed_with_zero_ramp_up_or_no_pods_is_zero():
    assert not assumed(np.ones((1, 2)), [100.0], [0], 100.0, 0.0, 1).any()
    assert assumed(np.zeros((0, 3)), [], [], 0.0, 30.0, 4).shape == (4, 3)


def test_ramp_up_default_is_thirty_seconds():
    # The caller passes HarvestSettings().ramp_up_s; pin the value docs/policy.md quotes.
    assert HarvestSettings().ramp_up_s == 30.0
    demand = np.array([[2.0, 4.0]])
    inside = assumed(demand, [71.0], [0], 100.0, HarvestSettings().ramp_up_s, 1)
    outside = assumed(demand, [69.0], [0], 100.0, HarvestSettings().ramp_up_s, 1)
    assert inside.tolist() == [[2.0, 4.0]] and outside.tolist() == [[0.0, 0.0]]


REGULAR_CASES = [
    pytest.param([[4, 16]], [[1, 4]], [[3, 12]], id="allocatable-minus-requests"),
    pytest.param([[4, 16]], [[5, 4]], [[0, 12]], id="overcommitted-clamps-to-zero"),
    pytest.param([[4, 16]], [[NAN, 4]], [[0, 12]], id="unknown-requests-leave-nothing"),
    pytest.param([[4, 16]], [[-2, 0]], [[4, 16]], id="negative-requests-ignored"),
]


@pytest.mark.parametrize(("alloc", "req", "expected"), REGULAR_CASES)
def test_regular_available_is_allocatable_minus_requests(alloc, req, expected):
    np.testing.assert_allclose(regular_available(np.array(alloc, float), np.array(req, float)), expected)


# --- UBIS Algorithm 1 on a hand-made node --------------------------------------------------------


def test_ubis_algorithm_1_places_regular_first_then_opportunistic_up_to_t_alloc():
    # Node: 8 cores, 32 GiB. Regular pods already request 6 cores / 24 GiB but use only 2 / 8.
    cap = np.array([[8.0, 32.0]])
    a_reg = regular_available(cap, np.array([[6.0, 24.0]]))[0]  # (2, 8)
    a_opp = harvestable(cap, np.array([[2.0, 8.0]]), np.zeros((1, 2)), np.zeros((1, 2)), np.array([0.9, 0.9]))[0]
    np.testing.assert_allclose(a_reg, [2.0, 8.0])
    np.testing.assert_allclose(a_opp, [0.9 * 8 - 2, 0.9 * 32 - 8])  # (5.2, 20.8)

    demands = np.array(
        [
            [1.0, 4.0],  # 0: fits regular                      → regular, reg (1, 4), opp (4.2, 16.8)
            [2.0, 4.0],  # 1: too big for regular now, may opp  → opportunistic, opp (2.2, 12.8)
            [1.0, 4.0],  # 2: fits regular                      → regular, reg (0, 0), opp (1.2, 8.8)
            [1.0, 4.0],  # 3: opt-out, regular is full          → not placed
            [1.0, 8.0],  # 4: may opp, fits                     → opportunistic, opp (0.2, 0.8)
            [0.5, 1.0],  # 5: may opp, cpu 0.5 > 0.2 left       → not placed
        ]
    )
    may = np.array([True, True, True, False, True, True])
    result = assign_on_node_detailed(demands, may, a_reg, a_opp)
    assert result.classes.tolist() == [REGULAR, OPPORTUNISTIC, REGULAR, NOT_PLACED, OPPORTUNISTIC, NOT_PLACED]
    np.testing.assert_allclose(result.regular_left, [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(result.harvestable_left, [0.2, 0.8], atol=1e-12)
    # Nothing opportunistic goes past T_alloc·C − U.
    placed = result.classes != NOT_PLACED
    assert np.all(demands[placed].sum(axis=0) - demands[result.classes == REGULAR].sum(axis=0) <= a_opp)
    assert assign_on_node(demands, may, a_reg, a_opp).tolist() == result.classes.tolist()


ASSIGN_CASES = [
    pytest.param([[1, 1]], [False], [2, 2], [0, 0], None, [REGULAR], id="regular-needs-no-harvest"),
    pytest.param([[3, 1]], [False], [2, 2], [9, 9], None, [NOT_PLACED], id="opt-out-never-opportunistic"),
    pytest.param([[3, 1]], [True], [2, 2], [9, 9], None, [OPPORTUNISTIC], id="overflow-goes-opportunistic"),
    pytest.param([[1, 1]], [True], [2, 2], [9, 9], [True], [OPPORTUNISTIC], id="must-opportunistic-skips-regular"),
    pytest.param([[1, 1]], [True], [0, 0], [0.5, 9], None, [NOT_PLACED], id="fits-neither-pool"),
    pytest.param(
        [[5, 1], [1, 1]], [False, False], [2, 2], [0, 0], None, [NOT_PLACED, REGULAR], id="no-head-of-line-blocking"
    ),
    pytest.param([[NAN, 1]], [True], [2, 2], [9, 9], None, [NOT_PLACED], id="nan-demand-never-placed"),
    pytest.param([[0, 0]], [True], [0, 0], [0, 0], None, [REGULAR], id="zero-demand-fits-full-node"),
    pytest.param(
        [[2, 2], [2, 2]],
        [True, True],
        [2, 2],
        [3, 3],
        None,
        [REGULAR, NOT_PLACED],
        id="regular-placement-shrinks-harvestable-too",
    ),
    pytest.param(
        [[3, 3], [1, 1]],
        [True, False],
        [2, 2],
        [9, 9],
        None,
        [OPPORTUNISTIC, REGULAR],
        id="overflow-opportunistic-does-not-block-later-regular",
    ),
    pytest.param([], [], [2, 2], [2, 2], None, [], id="no-requests"),
]


@pytest.mark.parametrize(("demands", "may", "reg", "opp", "must", "expected"), ASSIGN_CASES)
def test_assign_on_node_follows_ubis_algorithm_1(demands, may, reg, opp, must, expected):
    got = assign_on_node(
        np.array(demands, float).reshape(-1, 2), np.array(may, bool), np.array(reg, float),
        np.array(opp, float), must_be_opportunistic=must,
    )  # fmt: skip
    assert got.tolist() == expected


def test_regular_pass_first_means_later_regular_request_shrinks_room_for_earlier_opportunistic():
    # Request 0 overflows regular; request 1 fits regular and, placed first (Alg. 1 l.11–19),
    # eats the harvestable room request 0 would have needed.
    result = assign_on_node_detailed(
        np.array([[3.0, 1.0], [2.0, 2.0]]), np.array([True, True]), np.array([2.0, 2.0]), np.array([4.0, 4.0])
    )
    assert result.classes.tolist() == [NOT_PLACED, REGULAR]
    np.testing.assert_allclose(result.harvestable_left, [2.0, 2.0])


# --- properties -------------------------------------------------------------------------------

_amounts = st.one_of(st.floats(-1e6, 1e6), st.just(np.nan))


@st.composite
def _node_samples(draw):
    n = draw(st.integers(1, 5))
    r = draw(st.integers(1, 4))
    arrays = [draw(hnp.arrays(np.float64, (n, r), elements=_amounts)) for _ in range(4)]
    t_alloc = draw(hnp.arrays(np.float64, (r,), elements=st.one_of(st.floats(-1, 2), st.just(np.nan))))
    return (*arrays, t_alloc)


@settings(max_examples=300, deadline=None)
@given(_node_samples())
def test_harvestable_is_between_zero_and_t_alloc_times_capacity(sample):
    cap, use, blocked, assumed_, t_alloc = sample
    got = harvestable(cap, use, blocked, assumed_, t_alloc)
    ceiling = np.clip(np.nan_to_num(t_alloc), 0, 1) * np.maximum(np.nan_to_num(cap), 0)
    assert np.all(got >= 0)
    assert np.all(got <= ceiling)


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(0, 8), st.just(2)), elements=st.floats(0, 10)),
    st.data(),
)
def test_assignment_never_overfills_either_pool(demands, data):
    p = demands.shape[0]
    may = data.draw(hnp.arrays(np.bool_, (p,)))
    reg = data.draw(hnp.arrays(np.float64, (2,), elements=st.floats(0, 20)))
    opp = data.draw(hnp.arrays(np.float64, (2,), elements=st.floats(0, 20)))
    result = assign_on_node_detailed(demands, may, reg, opp)
    regular = demands[result.classes == REGULAR].sum(axis=0)
    placed = demands[result.classes != NOT_PLACED].sum(axis=0)
    tol = 1e-6 * (1 + np.maximum(reg, opp))
    assert np.all(regular <= reg + tol)
    # Opportunistic pods only get the harvestable room the new regular pods left (Alg. 1 l.22).
    assert np.all(placed - regular <= np.maximum(opp - regular, 0) + tol)
    assert not np.any((result.classes == OPPORTUNISTIC) & ~may)
