"""Harvestable and regular capacity, the allowance for pods not yet sampled, and same-node promotion."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.config import HarvestSettings
from stowage.errors import InvalidInput
from stowage.policy.harvest import (
    assumed,
    harvestable,
    in_sample,
    promotions,
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


# Promotion (UBIS Alg. 1 l.6–8, §IV-D): two nodes, resources (cpu, memory); pods in the caller's order.
PROMOTION_CASES = [
    pytest.param([[1, 1]], [0], [0], [[2, 2], [0, 0]], None, [0], [[1, 1], [0, 0]], id="fits-its-node"),
    pytest.param([[3, 1]], [0], [0], [[2, 2], [9, 9]], None, [], [[2, 2], [9, 9]], id="never-across-nodes"),
    pytest.param([[2, 2], [1, 1]], [0, 0], [0, 0], [[2, 2], [0, 0]], None, [0], [[0, 0], [0, 0]],
                 id="first-in-order-takes-the-room"),
    pytest.param([[3, 3], [1, 1]], [0, 0], [0, 0], [[2, 2], [0, 0]], None, [1], [[1, 1], [0, 0]],
                 id="a-bigger-one-does-not-block-a-later-one"),
    pytest.param([[1, 1]], [0], [0], [[2, 2], [0, 0]], [[0.5, 9]], [], [[2, 2], [0, 0]],
                 id="queue-quota-holds-it"),
    pytest.param([[1, 1]], [0], [-1], [[2, 2], [0, 0]], [[0, 0]], [0], [[1, 1], [0, 0]], id="no-queue-no-quota"),
    pytest.param([[NAN, 1]], [0], [0], [[2, 2], [0, 0]], None, [], [[2, 2], [0, 0]], id="nan-demand-never"),
    pytest.param([[1, 1]], [5], [0], [[2, 2], [0, 0]], None, [], [[2, 2], [0, 0]], id="unknown-node-never"),
    pytest.param([[1, 1], [1, 1]], [0, 1], [0, 0], [[2, 2], [2, 2]], [[1.5, 9]], [0], [[1, 1], [2, 2]],
                 id="quota-spent-by-the-first"),
]


@pytest.mark.parametrize(("demands", "nodes", "queues", "reg", "quota", "expected", "left"), PROMOTION_CASES)
def test_promotions_follow_ubis_same_node_promotion(demands, nodes, queues, reg, quota, expected, left):
    rows, after = promotions(np.array(demands, float).reshape(-1, 2), nodes, queues, np.array(reg, float),
                             None if quota is None else np.array(quota, float))
    assert rows.tolist() == expected
    np.testing.assert_allclose(after, left)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(0, 8), st.just(2)), elements=st.floats(0, 10)), st.data())
def test_promotions_never_overfill_a_node(demands, data):
    p = demands.shape[0]
    nodes = data.draw(hnp.arrays(np.int64, (p,), elements=st.integers(0, 2)))
    reg = data.draw(hnp.arrays(np.float64, (3, 2), elements=st.floats(0, 20)))
    rows, after = promotions(demands, nodes, np.zeros(p, np.int64), reg)
    for n in range(3):
        mine = rows[nodes[rows] == n]
        assert np.all(demands[mine].sum(axis=0) <= reg[n] * (1 + 1e-9) + 1e-9)
    assert np.all(after >= 0)


# --- the allowance ends on the first sample that includes the pod --------------------------------

def test_a_pod_is_in_a_sample_taken_a_period_after_it_started():
    # Node 0 sampled at t=10, node 1 never; period 1 s.
    got = in_sample([8.0, 9.5, 9.0, NAN, 5.0, 5.0], [0, 0, 0, 0, 1, 7], [10.0, -np.inf], 1.0)
    assert got.tolist() == [True, False, True, False, False, False]


def test_the_allowance_ends_on_the_first_sample_that_includes_the_pod():
    # One pod of demand (2 cpu, 4 GiB) bound at t=100 on node 0; the monitor samples every second.
    demand = np.array([[2.0, 4.0]])
    for sampled_at, expected in ((100.5, [2.0, 4.0]), (100.9, [2.0, 4.0]), (101.0, [0.0, 0.0]), (130.0, [0, 0])):
        seen = in_sample([100.0], [0], [sampled_at], 1.0)
        got = assumed(demand, [100.0], [0], sampled_at + 0.2, 30.0, 1, included=seen)
        np.testing.assert_allclose(got[0], expected, err_msg=f"sampled at {sampled_at}")
    # Without a sample that includes it, ramp_up is the upper limit.
    never = in_sample([100.0], [0], [-np.inf], 1.0)
    np.testing.assert_allclose(assumed(demand, [100.0], [0], 129.0, 30.0, 1, included=never)[0], [2.0, 4.0])
    np.testing.assert_allclose(assumed(demand, [100.0], [0], 130.0, 30.0, 1, included=never)[0], [0.0, 0.0])
    # What its own measured usage already shows is not counted twice.
    np.testing.assert_allclose(
        assumed(demand, [100.0], [0], 100.5, 30.0, 1, measured=[[0.5, 1.0]], included=[False])[0], [1.5, 3.0])


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
