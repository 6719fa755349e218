"""Fairness over time between queues: ``fairness.QueueDeficits`` / ``update_deficits`` and ``dispatch.pack``'s
``queue_overdue`` (``packing.queue_share_deficit_s``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.policy import dispatch, fairness
from stowage.policy.fairness import QueueDeficits, update_deficits

ON = [True, True]


def test_a_queue_held_below_its_weighted_share_accrues_what_it_is_owed() -> None:
    # Weights 2:1; b holds the whole pool for 10 s while a waits: level L = 1/3, a is owed 2/3 of the pool.
    s = update_deficits(QueueDeficits(), [0.0, 1.0], [2.0, 1.0], ON, now=0.0)
    assert s.deficit == (0.0, 0.0)
    s = update_deficits(s, [0.0, 1.0], [2.0, 1.0], ON, now=10.0)
    assert s.deficit == pytest.approx((20 / 3, -20 / 3))
    assert s.overdue(5.0, [2.0, 1.0], 10.0).tolist() == [True, False]
    assert s.overdue(7.0, [2.0, 1.0], 10.0).tolist() == [False, False]
    # By a later time the shares of the last update count until then: 5 s more, 10/3 more owed.
    assert s.overdue(9.0, [2.0, 1.0], 15.0).tolist() == [True, False]


def test_at_the_weighted_share_nothing_accrues() -> None:
    s = update_deficits(QueueDeficits(), [2 / 3, 1 / 3], [2.0, 1.0], ON, now=0.0)
    s = update_deficits(s, [2 / 3, 1 / 3], [2.0, 1.0], ON, now=100.0)
    assert s.deficit == pytest.approx((0.0, 0.0), abs=1e-12)


def test_the_shares_of_a_pass_count_from_that_pass_until_the_next() -> None:
    # Each update integrates the PREVIOUS shares over the elapsed time, then keeps the new ones.
    s = update_deficits(QueueDeficits(), [0.0, 0.5], [1.0, 1.0], ON, now=0.0)
    s = update_deficits(s, [0.5, 0.0], [1.0, 1.0], ON, now=4.0)  # [0, 0.5] held 4 s: a owed 1
    assert s.deficit == pytest.approx((1.0, -1.0))
    s = update_deficits(s, [0.5, 0.0], [1.0, 1.0], ON, now=8.0)  # [0.5, 0] held 4 s: repaid
    assert s.deficit == pytest.approx((0.0, 0.0))


def test_a_queue_without_waiting_work_forfeits_its_deficit_and_does_not_count() -> None:
    s = update_deficits(QueueDeficits(), [0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [True, True, False], now=0.0)
    s = update_deficits(s, [0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [True, True, False], now=2.0)
    assert s.deficit == pytest.approx((1.0, -1.0, 0.0))  # the idle third queue is owed nothing
    s = update_deficits(s, [0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [False, True, False], now=3.0)
    assert s.deficit[0] == 0.0


def test_a_gap_accrues_in_full_unless_resumed_skips_it() -> None:
    # b holds the pool while a waits; then no update for an hour (an operator that was down).
    s = update_deficits(update_deficits(QueueDeficits(), [0.0, 1.0], [1.0, 1.0], ON, now=0.0),
                        [0.0, 1.0], [1.0, 1.0], ON, now=2.0)
    assert s.deficit == pytest.approx((1.0, -1.0))
    later = update_deficits(s, [0.0, 1.0], [1.0, 1.0], ON, now=3602.0)
    assert later.deficit == pytest.approx((1801.0, -1801.0))
    resumed = s.resumed(3602.0)
    assert resumed.deficit == s.deficit and resumed.dominant == s.dominant and resumed.at == 3602.0
    assert update_deficits(resumed, [0.0, 1.0], [1.0, 1.0], ON, now=3602.0).deficit == s.deficit
    assert update_deficits(resumed, [0.0, 1.0], [1.0, 1.0], ON, now=3604.0).deficit == pytest.approx((2.0, -2.0))
    assert update_deficits(s, [0.0, 1.0], [1.0, 1.0], ON, now=1.0).deficit == s.deficit  # back in time: nothing


@pytest.mark.parametrize(("values", "q", "fill", "expected"), [
    pytest.param((1.5, -1.5), 3, 0.0, [1.5, -1.5, 0.0], id="extended"),
    pytest.param((1.5, -1.5, 2.0), 2, 0.0, [1.5, -1.5], id="cut"),
    pytest.param((), 2, math.nan, [math.nan, math.nan], id="empty"),
    pytest.param((True,), 3, False, [True, False, False], id="bool"),
    pytest.param(np.array([True, False, True]), 2, False, [True, False], id="bool-cut"),
])
def test_padded_cuts_or_extends_a_per_queue_vector(values: tuple, q: int, fill: float, expected: list) -> None:
    got = fairness.padded(values, q, fill)
    assert got.dtype == (bool if isinstance(fill, bool) else np.float64)
    np.testing.assert_array_equal(got, expected)


def test_reordered_follows_the_queues_by_name() -> None:
    s = update_deficits(QueueDeficits(), [0.0, 1.0], [1.0, 1.0], ON, now=0.0)
    s = update_deficits(s, [0.0, 1.0], [1.0, 1.0], ON, now=2.0)
    r = s.reordered(["a", "b"], ["c", "b", "a"])
    assert r.deficit == (0.0, -1.0, 1.0) and r.active == (False, True, True) and r.at == 2.0
    assert math.isnan(r.dominant[0]) and r.dominant[1:] == (1.0, 0.0)
    assert s.reordered(["a", "b"], ["a", "b"]) is s


def test_zero_weight_nan_and_a_growing_queue_count_take_no_part() -> None:
    s = update_deficits(QueueDeficits(), [0.0, 1.0], [0.0, 1.0], ON, now=0.0)
    s = update_deficits(s, [math.nan, 1.0, 0.0], [1.0, 1.0, 1.0], [True, True, True], now=5.0)
    assert s.deficit == (0.0, 0.0, 0.0)  # alone, queue 1 holds its share; the new queue starts at 0
    with pytest.raises(InvalidInput):
        update_deficits(s, [0.0], [1.0, 1.0], ON, now=6.0)


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 50)), min_size=1,
                max_size=20))
def test_deficits_of_the_queues_with_work_sum_to_zero(steps) -> None:
    s, now = QueueDeficits(), 0.0
    for a, b, c, dt in steps:
        now += dt
        s = update_deficits(s, [a, b, c], [4.0, 2.0, 1.0], [True, True, True], now)
        assert sum(s.deficit) == pytest.approx(0.0, abs=1e-6 * max(1.0, now))


def _pass(overdue: list[bool] | None) -> list[int]:
    """One pass, 4 one-core slots; queue 0's job is large, queue 1's small (the remaining-work score favours it)."""
    cap = np.array([[4.0, 16.0]])
    inp = dispatch.PassInput(
        capacity=cap, available=cap.copy(), shapes=np.array([[1.0, 1.0]]), group_shape=np.zeros(2, np.int64),
        group_job=np.arange(2), group_queue=np.arange(2), pending=np.array([10, 10]),
        finished_fraction=np.zeros(2), job_work=np.array([1000.0, 1.0]),
        queue_alloc=np.zeros((2, 2)), pool_total=cap.sum(axis=0), queue_weight=np.array([1.0, 1.0]),
        queue_overdue=None if overdue is None else np.array(overdue),
    )
    return [p.group for p in dispatch.pack(inp, PackingSettings()).placements]


def test_nobody_overdue_every_queue_competes_and_an_overdue_queue_goes_first() -> None:
    assert _pass(None) == [1, 0, 1, 0]  # strict weighted DRF alternates
    assert _pass([False, False]) == [1, 1, 1, 1]  # the small job takes every slot
    assert _pass([True, False]) == [0, 0, 0, 0]  # queue 0 is owed: it goes first
    assert _pass([]) == [1, 1, 1, 1]  # an empty state (nothing seen yet): nobody owed


def test_after_pass_takes_the_active_queues_from_the_waiting_rows() -> None:
    # Queues 0 and 1 hold 0.6 and 0.2 of the pool for 10 s at weights 1:1 (level 0.4): queue 1 is owed 2.
    state = fairness.after_pass(fairness.QueueDeficits(), [[6.0], [2.0], [0.0]], [10.0], [1.0, 1.0, 1.0],
                                [0, 1, 1], 0.0)
    assert state.active == (True, True, False)  # queue 2 has no waiting row
    later = fairness.after_pass(state, [[6.0], [2.0], [0.0]], [10.0], [1.0, 1.0, 1.0], [1], 10.0)
    assert later.deficit == pytest.approx((0.0, 2.0, 0.0))  # queue 0 has nothing waiting now: it forfeits
