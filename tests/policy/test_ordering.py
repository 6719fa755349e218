"""Job order inside a queue: FIFO, SRTF, processor-sharing finish times, FSP order and tracker."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.errors import InvalidInput
from stowage.model import JobOrder
from stowage.policy import ordering

# --- FIFO and SRTF -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrival", "expected"),
    [
        pytest.param([3.0, 1.0, 2.0], [1, 2, 0], id="by-arrival"),
        pytest.param([1.0, 0.0, 1.0, 0.0], [1, 3, 0, 2], id="equal-arrivals-keep-input-order"),
        pytest.param([math.nan, 5.0, 1.0], [2, 1, 0], id="nan-arrival-sorts-last"),
        pytest.param([], [], id="empty"),
    ],
)
def test_fifo_order_sorts_by_arrival_stably(arrival, expected):
    assert list(ordering.fifo_order(arrival)) == expected


@pytest.mark.parametrize(
    ("remaining", "arrival", "expected"),
    [
        pytest.param([5.0, 1.0, 3.0], [0.0, 1.0, 2.0], [1, 2, 0], id="least-remaining-first"),
        pytest.param([2.0, 2.0, 1.0], [5.0, 1.0, 9.0], [2, 1, 0], id="ties-broken-by-arrival"),
        pytest.param([2.0, 2.0], [1.0, 1.0], [0, 1], id="full-ties-keep-input-order"),
        pytest.param([math.nan, 1.0, -4.0], [0.0, 0.0, 1.0], [2, 1, 0], id="negative-is-zero-nan-is-last"),
    ],
)
def test_srtf_order_serves_least_remaining_work_first(remaining, arrival, expected):
    assert list(ordering.srtf_order(remaining, arrival)) == expected


def test_srtf_order_rejects_mismatched_lengths_naming_the_field():
    with pytest.raises(InvalidInput, match="remaining_work"):
        ordering.srtf_order([1.0, 2.0], [0.0])


# --- processor sharing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrival", "size", "kwargs", "expected"),
    [
        pytest.param([0.0], [4.0], {}, [4.0], id="alone-takes-size-over-capacity"),
        pytest.param([0.0], [4.0], {"capacity": 2.0}, [2.0], id="capacity-two-halves-the-time"),
        pytest.param([0.0, 0.0], [1.0, 1.0], {}, [2.0, 2.0], id="two-equal-jobs-share-and-end-together"),
        pytest.param([0.0, 0.0], [1.0, 3.0], {}, [2.0, 4.0], id="short-job-leaves-then-long-runs-alone"),
        pytest.param([0.0, 0.0], [3.0, 3.0], {"weights": [2.0, 1.0]}, [4.5, 6.0], id="weighted-gps-gives-two-thirds"),
        pytest.param([5.0, 0.0], [0.0, 2.0], {}, [5.0, 2.0], id="zero-size-finishes-on-arrival"),
        pytest.param([0.0, 10.0], [2.0, 2.0], {}, [2.0, 12.0], id="idle-gap-between-jobs"),
        pytest.param(
            [0.0, 0.0], [2.0, 2.0], {"max_rate": [0.25, 0.25]}, [8.0, 8.0], id="capped-jobs-leave-idle-capacity"
        ),
        pytest.param(
            [0.0, 0.0], [1.0, 4.0], {"max_rate": [0.2, np.nan]}, [5.0, 5.0], id="water-filling-gives-rest-to-uncapped"
        ),
        pytest.param([0.0, 0.0], [1.0, 1.0], {"weights": [0.0, -1.0]}, [2.0, 2.0], id="bad-weights-become-one"),
    ],
)
def test_ps_finish_times_match_hand_computed_schedules(arrival, size, kwargs, expected):
    assert ordering.ps_finish_times(arrival, size, **kwargs) == pytest.approx(expected, abs=1e-9)


def test_ps_finish_times_with_no_capacity_never_finish_work():
    finish = ordering.ps_finish_times([0.0, 1.0], [1.0, 0.0], capacity=0.0)
    assert math.isinf(finish[0]) and finish[1] == 1.0


def test_ps_finish_times_of_no_jobs_is_empty():
    assert ordering.ps_finish_times([], []).shape == (0,)


job_lists = st.lists(
    st.tuples(
        st.floats(0, 100, allow_nan=False),
        st.floats(0, 50, allow_nan=False),
        st.floats(0.1, 5, allow_nan=False),
        st.one_of(st.none(), st.floats(0.05, 2, allow_nan=False)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(job_lists, st.floats(0.5, 4.0))
def test_ps_never_finishes_a_job_before_its_work_could_be_done(jobs, capacity):
    arrival = np.array([j[0] for j in jobs])
    size = np.array([j[1] for j in jobs])
    weights = np.array([j[2] for j in jobs])
    caps = np.array([np.nan if j[3] is None else j[3] for j in jobs])
    finish = ordering.ps_finish_times(arrival, size, weights, capacity, max_rate=caps)
    fastest = np.minimum(capacity, np.where(np.isnan(caps), np.inf, caps))
    assert np.isfinite(finish).all()
    assert (finish >= arrival + size / fastest - 1e-6).all()


@settings(max_examples=150, deadline=None)
@given(job_lists, st.floats(0.5, 4.0))
def test_uncapped_ps_is_work_conserving_so_its_last_finish_ends_the_busy_period(jobs, capacity):
    # Any work-conserving discipline ends the final busy period at the same moment; FIFO shows it.
    arrival = np.array([j[0] for j in jobs])
    size = np.array([j[1] for j in jobs])
    weights = np.array([j[2] for j in jobs])
    finish = ordering.ps_finish_times(arrival, size, weights, capacity)
    t = -math.inf
    for i in np.argsort(arrival, kind="stable"):
        t = max(t, arrival[i]) + size[i] / capacity
    assert finish.max() == pytest.approx(t, rel=1e-9, abs=1e-6)


# --- FSP order -----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(job_lists)
def test_fsp_order_is_a_permutation_of_the_jobs(jobs):
    arrival = [j[0] for j in jobs]
    size = [j[1] for j in jobs]
    order = ordering.fsp_order(arrival, size, [j[2] for j in jobs])
    assert sorted(order.tolist()) == list(range(len(jobs)))


def test_fsp_order_lets_a_short_newcomer_overtake_a_long_job():
    assert list(ordering.fsp_order([0.0, 5.0], [100.0, 1.0])) == [1, 0]


def test_fsp_order_keeps_a_job_that_already_finished_virtually_in_front():
    # Job 0 finishes under PS at 1 s, before job 1 even arrives: it stays first although larger.
    assert list(ordering.fsp_order([0.0, 2.0], [1.0, 0.5])) == [0, 1]


def test_fsp_order_breaks_exact_ties_by_arrival():
    # Both end at 3 s under PS; the earlier arrival goes first.
    assert list(ordering.fsp_order([1.0, 0.0], [1.0, 2.0])) == [1, 0]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 30), st.integers(1, 3)),
        min_size=1,
        max_size=20,
    )
)
def test_fsp_tracker_agrees_with_the_offline_fsp_order(jobs):
    arrival = [float(a) for a, _, _ in jobs]
    size = [float(s) for _, s, _ in jobs]
    weight = [float(w) for _, _, w in jobs]
    tracker = ordering.FspTracker()
    for i in np.argsort(arrival, kind="stable"):
        tracker.arrive(int(i), arrival[i], size[i], weight[i])
    offline = ordering.ps_finish_times(arrival, size, weight)
    online = [tracker.virtual_finish(i) for i in range(len(jobs))]
    assert online == pytest.approx(list(offline), abs=1e-6)
    order = tracker.order()
    assert sorted(order) == list(range(len(jobs)))
    # The tracker's order is non-decreasing in virtual finish time.
    assert all(offline[a] <= offline[b] + 1e-6 for a, b in itertools.pairwise(order))


def test_fsp_tracker_keeps_a_removed_job_in_the_virtual_system_until_its_virtual_finish():
    tracker = ordering.FspTracker()
    tracker.arrive("a", 0.0, 10.0)
    tracker.arrive("b", 0.0, 10.0)
    tracker.remove("a")  # finished for real at once; its virtual share still counts
    assert tracker.order() == ["b"]
    assert tracker.virtual_finish("b") == pytest.approx(20.0)
    assert "a" not in tracker and len(tracker) == 1


def test_fsp_tracker_withdraws_virtual_work_of_a_cancelled_job():
    tracker = ordering.FspTracker()
    tracker.arrive("a", 0.0, 10.0)
    tracker.arrive("b", 0.0, 10.0)
    tracker.remove("a", virtual=True)
    assert tracker.virtual_finish("b") == pytest.approx(10.0)


def test_fsp_tracker_orders_virtually_finished_jobs_by_their_finish_time():
    tracker = ordering.FspTracker()
    tracker.arrive("long", 0.0, 4.0)
    tracker.arrive("short", 0.0, 1.0)
    tracker.advance(100.0)
    tracker.arrive("new", 100.0, 0.5)
    assert tracker.order() == ["short", "long", "new"]
    assert tracker.virtual_finish("short") == pytest.approx(2.0)
    assert tracker.virtual_finish("long") == pytest.approx(5.0)


def test_fsp_tracker_rejects_a_job_that_arrives_twice():
    tracker = ordering.FspTracker()
    tracker.arrive("a", 0.0, 1.0)
    with pytest.raises(InvalidInput, match="job_id"):
        tracker.arrive("a", 1.0, 1.0)


def test_fsp_tracker_treats_an_arrival_in_the_past_as_now():
    tracker = ordering.FspTracker()
    tracker.arrive("a", 10.0, 2.0)
    tracker.arrive("b", 5.0, 2.0)
    assert tracker.virtual_finish("a") == pytest.approx(14.0)
    assert tracker.virtual_finish("b") == pytest.approx(14.0)


def test_fsp_tracker_honours_max_rate_caps():
    tracker = ordering.FspTracker()
    tracker.arrive("narrow", 0.0, 1.0, max_rate=0.1)  # would take 10 s at its cap
    tracker.arrive("wide", 0.0, 3.0)  # gets 0.9 while narrow runs
    assert tracker.virtual_finish("narrow") == pytest.approx(10.0)
    assert tracker.virtual_finish("wide") == pytest.approx(10.0 / 3.0)
    assert tracker.order() == ["wide", "narrow"]


# --- dispatch ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_order", "ps_finish", "expected"),
    [
        pytest.param(JobOrder.FIFO, None, [0, 1, 2], id="fifo-by-arrival"),
        pytest.param(JobOrder.SRTF, None, [2, 1, 0], id="srtf-by-remaining-work"),
        pytest.param(JobOrder.FSP, [9.0, 3.0, 7.0], [1, 2, 0], id="fsp-by-given-ps-finish"),
        pytest.param(JobOrder.FSP, None, [2, 1, 0], id="fsp-without-finish-uses-remaining-as-size"),
        pytest.param("SRTF", None, [2, 1, 0], id="plain-string-accepted"),
    ],
)
def test_order_jobs_dispatches_on_the_queue_job_order(job_order, ps_finish, expected):
    arrival = [0.0, 1.0, 2.0]
    remaining = [30.0, 20.0, 1.0]
    assert list(ordering.order_jobs(job_order, arrival, remaining, ps_finish)) == expected
