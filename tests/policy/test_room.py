"""The room a node offers now (``stowage.policy.room``): staleness, finished pods, the allowance, A_opp, bandwidth."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.errors import InvalidInput
from stowage.policy import room

NAN, INF = np.nan, np.inf

FRESH_CASES = [
    pytest.param(True, 0.0, 30.0, True, id="new-sample"),
    pytest.param(True, 30.0, 30.0, True, id="exactly-at-the-limit-is-fresh"),
    pytest.param(True, 30.5, 30.0, False, id="older-than-the-limit"),
    pytest.param(False, 0.0, 30.0, False, id="no-sample"),
    pytest.param(True, INF, 30.0, False, id="infinite-age"),
    pytest.param(True, NAN, 30.0, False, id="unknown-age"),
    pytest.param(True, 0.0, 0.0, True, id="zero-limit-only-brand-new"),
]


@pytest.mark.parametrize(("present", "age", "limit", "expected"), FRESH_CASES)
def test_fresh(present: bool, age: float, limit: float, expected: bool) -> None:
    assert room.fresh([present], [age], limit).tolist() == [expected]


def test_fresh_shapes_must_agree() -> None:
    with pytest.raises(InvalidInput):
        room.fresh([True, True], [0.0], 30.0)


def test_sampled_at_is_now_minus_age() -> None:
    out = room.sampled_at(100.0, [0.0, 4.5, INF, NAN])
    assert out[:2].tolist() == [100.0, 95.5]
    assert np.isnan(out[2:]).all()


# One node, one resource: (window max, finished pods' usage, latest sample) → U
DEPARTURE_CASES = [
    pytest.param(6.0, 0.0, 2.0, 6.0, id="nothing-finished-keeps-the-window"),
    pytest.param(6.0, 4.0, 2.0, 2.0, id="finished-pod-leaves-at-once"),
    pytest.param(6.0, 4.0, 3.0, 3.0, id="never-below-the-latest-sample"),
    pytest.param(6.0, 8.0, 1.0, 1.0, id="more-taken-off-than-the-window-floors-at-latest"),
    pytest.param(6.0, 4.0, NAN, 6.0, id="no-latest-sample-takes-nothing-off"),
    pytest.param(NAN, 4.0, 2.0, NAN, id="unknown-window-stays-unknown"),
    pytest.param(6.0, NAN, 2.0, 6.0, id="unknown-departed-takes-nothing-off"),
    pytest.param(6.0, 4.0, 7.0, 7.0, id="latest-above-the-window-is-kept"),
]


@pytest.mark.parametrize(("window", "departed", "latest", "expected"), DEPARTURE_CASES)
def test_usage_after_departures(window: float, departed: float, latest: float, expected: float) -> None:
    out = room.usage_after_departures([[window]], [[departed]], [[latest]])
    np.testing.assert_equal(out, [[expected]])


# One pod of demand 4 on node 0, bound at 0, ramp-up 30, period 1; (started, sampled_at, now) → S on node 0
ALLOWANCE_CASES = [
    pytest.param(NAN, 10.0, 10.0, 4.0, id="not-started-is-assumed"),
    pytest.param(5.0, 5.5, 10.0, 4.0, id="sample-inside-its-first-period-is-assumed"),
    pytest.param(5.0, 6.0, 10.0, 0.0, id="ends-on-the-first-sample-that-includes-it"),
    pytest.param(5.0, NAN, 10.0, 4.0, id="node-without-sample-keeps-it"),
    pytest.param(5.0, 5.5, 30.0, 0.0, id="ramp-up-is-the-upper-limit"),
    pytest.param(5.0, 5.5, 29.9, 4.0, id="just-inside-the-ramp-up"),
]


@pytest.mark.parametrize(("started", "sampled", "now", "expected"), ALLOWANCE_CASES)
def test_assumed_usage_ends_on_the_first_sample_that_includes_the_pod(
    started: float, sampled: float, now: float, expected: float
) -> None:
    s = room.assumed_usage([[4.0]], [0.0], [started], [0], [sampled], now, ramp_up_s=30.0, period_s=1.0)
    assert s.tolist() == [[expected]]


def test_assumed_usage_counts_demand_above_measured_usage() -> None:
    s = room.assumed_usage([[4.0, 8.0]], [0.0], [NAN], [0], [10.0], 10.0, ramp_up_s=30.0, period_s=1.0,
                           measured=[[1.0, 10.0]])
    assert s.tolist() == [[3.0, 0.0]]


def test_assumed_usage_per_node() -> None:
    # pod 0 on node 0 included (started 1, node 0 sampled at 3); pod 1 on node 1 not (node 1 sampled at 1.5)
    s = room.assumed_usage([[2.0], [3.0]], [0.0, 0.0], [1.0, 1.0], [0, 1], [3.0, 1.5], 5.0,
                           ramp_up_s=30.0, period_s=1.0)
    assert s.tolist() == [[0.0], [3.0]]


# One node, one resource, C 10, T_alloc 0.9: (U, fresh, enabled, B, S) → A_opp
ROOM_CASES = [
    pytest.param(2.0, True, True, 0.0, 0.0, 7.0, id="fresh"),
    pytest.param(2.0, False, True, 0.0, 0.0, 0.0, id="stale-harvests-nothing"),
    pytest.param(2.0, True, False, 0.0, 0.0, 0.0, id="harvest-disabled"),
    pytest.param(NAN, True, True, 0.0, 0.0, 0.0, id="unknown-usage"),
    pytest.param(2.0, True, True, 1.0, 2.0, 4.0, id="blocked-and-assumed-come-off"),
    pytest.param(8.0, True, True, 0.0, 2.0, 0.0, id="clamped-at-zero"),
]


@pytest.mark.parametrize(("usage", "is_fresh", "enabled", "blocked", "assumed", "expected"), ROOM_CASES)
def test_harvested_room(usage: float, is_fresh: bool, enabled: bool, blocked: float, assumed: float,
                        expected: float) -> None:
    out = room.harvested_room([[10.0]], [[usage]], [is_fresh], [[blocked]], [[assumed]], [0.9], [enabled])
    assert out[0, 0] == pytest.approx(expected)


def test_harvested_room_shapes_must_agree() -> None:
    with pytest.raises(InvalidInput):
        room.harvested_room([[10.0]], [[1.0]], [True, True], [[0.0]], [[0.0]], [0.9], [True])


# Declared bandwidth (one node, one column): (capacity, regular pods' declarations) → room for a regular pod
BANDWIDTH_CASES = [
    pytest.param(100.0, 30.0, 70.0, id="regular-declarations-come-off"),
    pytest.param(100.0, 130.0, 0.0, id="over-declared-is-zero"),
    pytest.param(NAN, 0.0, 0.0, id="unknown-capacity"),
    pytest.param(100.0, NAN, 0.0, id="unknown-declarations-leave-nothing"),
]


@pytest.mark.parametrize(("capacity", "declared", "expected"), BANDWIDTH_CASES)
def test_bandwidth_room(capacity: float, declared: float, expected: float) -> None:
    assert room.bandwidth_room([[capacity]], [[declared]]).tolist() == [[expected]]


@pytest.mark.parametrize(("fill", "expected"), [(1.0, 70.0), (1.25, 95.0), (0.8, 50.0), (0.2, 0.0)])
def test_bandwidth_room_fills_the_fraction_of_capacity_the_setting_says(fill: float, expected: float) -> None:
    # estimates.bandwidth_fill: 30 reserved of 100
    assert room.bandwidth_room([[100.0]], [[30.0]], fill).tolist() == [[pytest.approx(expected)]]
    assert room.bandwidth_room([[NAN]], [[0.0]], fill).tolist() == [[0.0]], "unknown capacity stays nothing"
