"""One packing pass (``dispatch.pack``) and its search (``candidates``): masks, knobs, guard, exactness."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stowage.config import PackingSettings
from stowage.model import JobOrder
from stowage.policy import alignment, candidates, dispatch, ordering, tolerances

KNOBS = PackingSettings()
NO_KNOBS = dataclasses.replace(KNOBS, fairness_knob=0.0, barrier_knob=1.0, remaining_work_weight=0.0)


def _input(avail, shapes, group_shape, *, capacity=None, queue=None, job=None, pending=None, finished=None,
           work=None, queue_alloc=None, weight=None, rank=None, skips=None, held=None) -> dispatch.PassInput:
    avail = np.asarray(avail, dtype=float)
    shapes = np.asarray(shapes, dtype=float)
    g = len(group_shape)
    queue = np.zeros(g, np.int64) if queue is None else np.asarray(queue)
    n_q = int(queue.max()) + 1
    job = np.arange(g) if job is None else np.asarray(job)
    return dispatch.PassInput(
        capacity=avail.copy() if capacity is None else np.asarray(capacity, dtype=float),
        available=avail,
        shapes=shapes,
        group_shape=np.asarray(group_shape),
        group_job=job,
        group_queue=queue,
        pending=np.ones(g, np.int64) if pending is None else np.asarray(pending),
        finished_fraction=np.zeros(g) if finished is None else np.asarray(finished, dtype=float),
        job_work=np.zeros(int(job.max()) + 1) if work is None else np.asarray(work, dtype=float),
        queue_alloc=np.zeros((n_q, shapes.shape[1])) if queue_alloc is None else np.asarray(queue_alloc, float),
        pool_total=avail.sum(axis=0) if capacity is None else np.asarray(capacity, dtype=float).sum(axis=0),
        queue_weight=np.ones(n_q) if weight is None else np.asarray(weight, dtype=float),
        job_rank=rank,
        skips=None if skips is None else np.asarray(skips),
        held=None if held is None else np.asarray(held),
    )


def _groups(result: dispatch.PassResult) -> list[int]:
    return [p.group for p in result.placements]


# --- the pass ------------------------------------------------------------------------------------


def test_one_task_at_a_time_on_the_best_aligned_node_until_nothing_fits() -> None:
    # Node 0 has cpu room, node 1 memory room: the cpu-heavy task goes to node 0, the memory-heavy to 1.
    avail = [[4.0, 1.0], [1.0, 4.0]]
    result = dispatch.pack(_input(avail, [[2.0, 0.5], [0.5, 2.0]], [0, 1], pending=[2, 2]), NO_KNOBS)
    assert [(p.group, p.node) for p in result.placements] == [(0, 0), (1, 1), (0, 0), (1, 1)]


def test_the_callers_arrays_are_left_as_given() -> None:
    inp = _input([[4.0, 4.0]], [[1.0, 1.0]], [0], pending=[3])
    before = (inp.available.copy(), inp.queue_alloc.copy(), inp.pending.copy())
    dispatch.pack(inp, KNOBS)
    assert all(np.array_equal(x, y) for x, y in zip(before, (inp.available, inp.queue_alloc, inp.pending),
                                                     strict=True))


def test_limit_stops_the_pass() -> None:
    result = dispatch.pack(_input([[10.0, 10.0]], [[1.0, 1.0]], [0], pending=[8]), KNOBS, limit=3)
    assert len(result.placements) == 3


@pytest.mark.parametrize(("f", "expected_first"), [pytest.param(0.0, 0, id="f0-best-score-wins"),
                                                    pytest.param(0.9, 1, id="f-high-deprived-queue-first")])
def test_fairness_knob_lets_only_the_most_deprived_queues_compete(f: float, expected_first: int) -> None:
    # Queue 0 already holds half the pool; queue 1 nothing. Row 0 (queue 0) aligns better.
    avail = [[4.0, 4.0], [4.0, 4.0]]
    inp = _input(avail, [[2.0, 2.0], [0.5, 0.5]], [0, 1], queue=[0, 1], queue_alloc=[[4.0, 4.0], [0.0, 0.0]],
                 capacity=avail)
    knobs = dataclasses.replace(NO_KNOBS, fairness_knob=f)
    assert _groups(dispatch.pack(inp, knobs))[0] == expected_first


def test_a_heavier_queue_weight_keeps_it_competing() -> None:
    # Queue 0 holds twice what queue 1 holds, but weighs 4: its weighted dominant share is the lower one.
    avail = [[4.0, 4.0], [4.0, 4.0]]
    inp = _input(avail, [[0.5, 0.5], [2.0, 2.0]], [0, 1], queue=[0, 1], queue_alloc=[[1.0, 1.0], [0.5, 0.5]],
                 weight=[4.0, 1.0], capacity=avail)
    knobs = dataclasses.replace(NO_KNOBS, fairness_knob=0.9, queue_share_floor=0.0)  # by weight, not the floor
    assert _groups(dispatch.pack(inp, knobs))[0] == 0


def test_job_order_mask_lets_the_first_jobs_of_a_queue_go_first() -> None:
    # Three jobs in one queue; ranks say job 2 first. With f = 0.9 only the first ⌈0.1·3⌉ = 1 competes.
    inp = _input([[10.0, 10.0]], [[1.0, 1.0], [2.0, 2.0]], [1, 1, 0], rank=lambda jobs: np.array([2.0, 1.0, 0.0]))
    order = _groups(dispatch.pack(inp, dataclasses.replace(NO_KNOBS, fairness_knob=0.9)))
    assert order == [2, 1, 0]


def test_rows_outside_the_masks_still_take_what_the_allowed_rows_cannot_use() -> None:
    # Job 0 (first in order) does not fit; job 1 is masked out but takes the node anyway.
    inp = _input([[2.0, 2.0]], [[4.0, 4.0], [1.0, 1.0]], [0, 1], capacity=[[4.0, 4.0]],
                 rank=lambda jobs: jobs.astype(float))
    assert _groups(dispatch.pack(inp, dataclasses.replace(NO_KNOBS, fairness_knob=0.9))) == [1]


def test_barrier_boost_puts_the_stragglers_of_an_almost_finished_group_first() -> None:
    # Row 1 aligns worse, but 95% of its group finished and b = 0.9.
    inp = _input([[4.0, 4.0]], [[2.0, 2.0], [1.0, 1.0]], [0, 1], finished=[0.0, 0.95], pending=[1, 1])
    knobs = dataclasses.replace(NO_KNOBS, barrier_knob=0.9)
    assert _groups(dispatch.pack(inp, knobs)) == [1, 0]
    assert _groups(dispatch.pack(inp, NO_KNOBS)) == [0, 1]


def test_remaining_work_puts_the_small_job_first() -> None:
    # Tetris §3.3: the big job aligns better, but with m = 1 the small job goes first.
    inp = _input([[4.0, 4.0]], [[2.0, 3.0], [1.0, 2.0]], [0, 1], work=[10.5, 2.0], pending=[1, 1])
    assert _groups(dispatch.pack(inp, dataclasses.replace(NO_KNOBS, remaining_work_weight=1.0)))[0] == 1
    assert _groups(dispatch.pack(inp, NO_KNOBS))[0] == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.25, 0.9]))
def test_placements_never_exceed_what_each_node_has_free(seed: int, f: float) -> None:
    rng = np.random.default_rng(seed)
    n, g, r = int(rng.integers(1, 6)), int(rng.integers(1, 9)), 3
    cap = rng.choice([4.0, 8.0, 16.0], size=(n, r))
    avail = cap * rng.uniform(0, 1, size=(n, r))
    shapes = rng.choice([0.5, 1.0, 2.0, 3.0], size=(g, r))
    inp = _input(avail, shapes, np.arange(g), capacity=cap, queue=rng.integers(0, 3, g), pending=rng.integers(0, 6, g),
                 work=rng.uniform(0, 50, g), finished=rng.uniform(0, 1, g), rank=lambda jobs: jobs[::-1].astype(float))
    result = dispatch.pack(inp, dataclasses.replace(KNOBS, fairness_knob=f))
    used = np.zeros_like(avail)
    count = np.zeros(g, np.int64)
    for p in result.placements:
        used[p.node] += shapes[p.group]
        count[p.group] += 1
    assert (used <= avail * (1 + tolerances.FEASIBILITY_RTOL) + 1e-12).all()
    assert (count <= inp.pending).all()
    # and the pass stops only when nothing more fits
    left = avail - used
    waiting = count < inp.pending
    assert not alignment.feasible(shapes[waiting], np.maximum(left, 0)).any()


# --- the starvation guard ------------------------------------------------------------------------


def test_guard_off_reports_no_skips() -> None:
    inp = _input([[2.0, 2.0]], [[2.0, 2.0], [2.0, 2.0]], [0, 1], skips=[0, 0])
    result = dispatch.pack(inp, dataclasses.replace(KNOBS, starvation_skip_limit=0))
    assert not result.skipped.any()


def test_a_group_passed_over_while_it_fits_a_node_is_skipped() -> None:
    # One slot; row 0 takes it. Row 1 fits the node's capacity: skipped. Row 2 never fits: not skipped.
    inp = _input([[2.0, 2.0]], [[2.0, 2.0], [2.0, 2.0], [9.0, 9.0]], [0, 1, 2], capacity=[[4.0, 4.0]],
                 skips=[0, 0, 0])
    result = dispatch.pack(inp, KNOBS)
    assert _groups(result) == [0]
    assert result.skipped.tolist() == [False, True, False]


def test_a_starved_group_goes_first_whatever_the_masks_say() -> None:
    # Row 1 is last in job order and aligns worse; skipped 31 > 30 times, it goes first.
    inp = _input([[2.0, 2.0]], [[2.0, 2.0], [1.5, 1.5]], [0, 1], rank=lambda jobs: jobs.astype(float),
                 skips=[0, 31])
    knobs = dataclasses.replace(KNOBS, fairness_knob=0.9, starvation_skip_limit=30)
    assert _groups(dispatch.pack(inp, knobs)) == [1]
    assert _groups(dispatch.pack(dataclasses.replace(inp, skips=np.array([0, 30])), knobs)) == [0]


def test_a_starved_group_that_fits_nowhere_holds_the_node_closest_to_fitting() -> None:
    # Row 1 (starved) needs 3 cpu; node 1 has 2 free (closest), node 0 has 1. Nobody else may use node 1.
    cap = [[4.0, 4.0], [4.0, 4.0]]
    avail = [[1.0, 4.0], [2.0, 4.0]]
    inp = _input(avail, [[1.0, 1.0], [3.0, 1.0]], [0, 1], capacity=cap, pending=[4, 1], skips=[0, 50])
    result = dispatch.pack(inp, KNOBS)
    assert result.held.tolist() == [-1, 1]
    assert {p.node for p in result.placements} == {0}
    # the previous hold is kept while it can still take the task
    again = dispatch.pack(dataclasses.replace(inp, held=np.array([-1, 0])), KNOBS)
    assert again.held.tolist() == [-1, 0]


# --- job ranks and features ----------------------------------------------------------------------


def test_job_ranks_follow_each_queues_order() -> None:
    jobs = np.array([0, 1, 2, 3, 4])
    job_queue = np.array([0, 0, 1, 1, 2])
    arrival = np.array([5.0, 1.0, 0.0, 0.0, 3.0])
    work = np.array([1.0, 9.0, 7.0, 2.0, 0.0])
    ranks = dispatch.job_ranks(jobs, job_queue, [JobOrder.FIFO, JobOrder.SRTF, JobOrder.FSP], arrival, work,
                               lambda q: [4] if q == 2 else [])
    assert ranks.tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]
    unknown = dispatch.job_ranks(jobs, job_queue, [JobOrder.FIFO, JobOrder.SRTF, JobOrder.FSP], arrival, work,
                                 lambda q: [])
    assert math.isinf(unknown[4])


def test_fsp_rank_follows_the_trackers_order() -> None:
    tracker = ordering.FspTracker(1.0)
    tracker.arrive(0, 0.0, 30.0)
    tracker.arrive(1, 10.0, 10.0)  # finishes first under PS: FSP §3.2 Figure 1
    ranks = dispatch.job_ranks(np.array([0, 1]), np.array([0, 0]), [JobOrder.FSP], np.zeros(2), np.zeros(2),
                               lambda q: tracker.order())
    assert ranks.tolist() == [1.0, 0.0]


# --- the search: exactness -----------------------------------------------------------------------


@st.composite
def _matrices(draw: st.DrawFn) -> tuple:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_shapes, n_nodes, n_rows = draw(st.integers(1, 4)), draw(st.integers(1, 9)), draw(st.integers(1, 12))
    score = rng.choice([0.0, 0.25, 0.5, 1.0 / 3.0, 0.7, 1.3], size=(n_shapes, n_nodes))
    ulps = rng.integers(-2, 3, size=score.shape)  # near-ties, one or two ulps apart
    for _ in range(2):
        score = np.where(ulps > 0, np.nextafter(score, np.inf), np.where(ulps < 0, np.nextafter(score, 0), score))
    score = score * draw(st.sampled_from([1.0, 1e-3, 7.0]))
    score[rng.random(score.shape) < draw(st.sampled_from([0.0, 0.3, 0.7]))] = -np.inf
    shape_of = rng.integers(0, n_shapes, size=n_rows)
    p = rng.choice([0.0, 1.0, 2.5, 1e6, 3.0 + 1e-12, np.nan, np.inf], size=n_rows)
    boost = rng.choice([0.0, 1e6, 3e6], size=n_rows, p=[0.7, 0.2, 0.1])
    rows = rng.random(n_rows) < draw(st.sampled_from([0.5, 1.0]))
    m = draw(st.sampled_from([0.0, 1.0, 0.3, 7.0]))
    updates = [(int(rng.integers(0, n_nodes)), score[:, int(rng.integers(0, n_nodes))] * rng.choice([0.5, 1.0]))
               for _ in range(draw(st.integers(0, 4)))]
    return score, shape_of, p, boost, rows, m, updates


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_matrices())
def test_every_search_picks_what_the_dense_matrix_picks_after_column_updates(case: tuple) -> None:
    score, shape_of, p, boost, rows, m, updates = case
    shaped = candidates.ShapeScores(score.copy())
    for n, column in updates:
        shaped.set_column(n, column.copy())
    dense = candidates.dense_best_candidate(shaped.score[shape_of], p, boost, rows, m)
    assert candidates.exact_best_candidate(shaped, candidates.Rows(shape_of, p, boost), rows, m) == dense
    assert candidates.best_candidate(shaped, candidates.Rows(shape_of, p, boost), rows, m) == dense
    certified = candidates.certified_best_candidate(shaped, candidates.Rows(shape_of, p, boost), rows, m)
    assert certified in (dense, candidates.UNDECIDED)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([8, 3000]))
def test_column_updates_keep_the_shape_summaries_of_a_fresh_matrix(seed: int, n: int) -> None:
    # 3 × 3000 is past the size where columns are updated in place instead of recounted.
    rng = np.random.default_rng(seed)
    score = np.where(rng.random((3, n)) < 0.3, -np.inf, rng.uniform(0, 2, (3, n)))
    shaped = candidates.ShapeScores(score.copy())
    shaped.summaries()  # from here on the sums are kept current too
    for _ in range(30):
        column = rng.uniform(0, 2, 3)
        column[rng.random(3) < 0.3] = -np.inf
        shaped.set_column(int(rng.integers(0, min(n, 5))), column)  # a few nodes, again and again
    fresh = candidates.ShapeScores(shaped.score.copy())
    assert shaped.count.tolist() == fresh.count.tolist()
    assert shaped.row_max.tolist() == fresh.row_max.tolist()
    summaries = shaped.summaries()
    for s in range(3):
        exact = math.fsum(x for x in shaped.score[s] if math.isfinite(x))
        assert abs(summaries.sums[s] - exact) <= summaries.error[s]


def test_the_certified_search_decides_on_its_own_for_ordinary_scores() -> None:
    rng = np.random.default_rng(3)
    decided = 0
    for _ in range(200):
        score = np.where(rng.random((6, 300)) < 0.2, -np.inf, rng.uniform(0, 2, (6, 300)))
        shape_of = rng.integers(0, 6, 40)
        p, boost = rng.uniform(0, 100, 40), np.where(rng.random(40) < 0.1, dispatch.BOOST, 0.0)
        got = candidates.certified_best_candidate(candidates.ShapeScores(score),
                                                  candidates.Rows(shape_of, p, boost), np.ones(40, bool), 1.0)
        decided += got != candidates.UNDECIDED
        if got != candidates.UNDECIDED:
            assert got == candidates.dense_best_candidate(score[shape_of], p, boost, np.ones(40, bool), 1.0)
    assert decided >= 198


def test_rows_whose_work_differs_by_one_ulp_get_the_references_answer() -> None:
    # p/p̄ of two rows one ulp apart may round equal or not depending on p̄'s last bits, which the
    # certified search only bounds: it must leave such cases to the exact search (a zero radius fails here).
    rng = np.random.default_rng(2)
    undecided = 0
    for _ in range(3000):
        score = rng.uniform(0, 1, (2, int(rng.integers(5, 60))))
        score[rng.random(score.shape) < 0.2] = -np.inf
        score[:, 0] = 1.5  # every shape's best alignment is the same
        shape_of, p = rng.integers(0, 2, 8), rng.uniform(1, 100, 8)
        k = int(rng.integers(1, 8))
        p[k] = np.nextafter(p[k - 1], np.inf if rng.random() < 0.5 else 0)
        boost, rows = np.zeros(8), np.ones(8, dtype=bool)
        searched = candidates.Rows(shape_of, p, boost)
        got = candidates.certified_best_candidate(candidates.ShapeScores(score.copy()), searched, rows, 1.0)
        undecided += got == candidates.UNDECIDED
        assert got in (candidates.UNDECIDED, candidates.dense_best_candidate(score[shape_of], p, boost, rows, 1.0))
    assert undecided < 1000


def test_a_large_pass_makes_every_choice_the_dense_search_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    # 800 nodes × 60 rows × 12 shapes: past the sizes where the certified search takes over and columns
    # are updated in place; each answer is checked against the dense matrix as it happens.
    rng = np.random.default_rng(11)
    n, g = 800, 60
    cap = np.tile([32.0, 128.0, 100.0], (n, 1))
    avail = cap * rng.uniform(0.0, 0.6, size=(n, 1)) * rng.uniform(0.8, 1.0, size=(n, 3))
    shapes = rng.choice([0.5, 1.0, 2.0, 4.0], size=(12, 3))
    inp = _input(avail, shapes, rng.integers(0, 12, g), capacity=cap, queue=rng.integers(0, 5, g),
                 pending=rng.integers(1, 30, g), work=rng.uniform(0, 100, g), finished=rng.uniform(0, 1, g),
                 rank=lambda jobs: rng.permutation(jobs.size).astype(float))
    checked = Counter()
    search = candidates.best_candidate

    def checking(shaped, searched, rows, m):
        got = search(shaped, searched, rows, m)
        shape_of, p, boost = searched.shape_of, searched.p, searched.boost
        assert got == candidates.dense_best_candidate(shaped.score[shape_of], p, boost, rows, m)
        fresh = candidates.ShapeScores(shaped.score.copy())
        assert shaped.row_max.tolist() == fresh.row_max.tolist() and shaped.count.tolist() == fresh.count.tolist()
        decided = candidates.certified_best_candidate(shaped, candidates.Rows(shape_of, p, boost), rows, m)
        checked[decided != candidates.UNDECIDED] += 1
        return got

    monkeypatch.setattr(candidates, "best_candidate", checking)
    result = dispatch.pack(inp, KNOBS)
    assert len(result.placements) > 200
    assert checked[True] > 0.95 * len(result.placements)


def test_one_rows_and_mask_reused_while_columns_change_give_the_references_answers() -> None:
    # A pass keeps one Rows and one mask object while the tiers, rows and fitting shapes stay: what the search
    # keeps of them (Rows.select) must follow every column update, and a new mask object must be read afresh.
    rng = np.random.default_rng(5)
    score = rng.uniform(0, 1, (3, 40))
    score[rng.random(score.shape) < 0.3] = -np.inf
    shaped = candidates.ShapeScores(score.copy())
    shape_of, p, boost = rng.integers(0, 3, 30), rng.uniform(0, 50, 30), np.zeros(30)
    p[:4] = np.nan  # unknown work
    searched = candidates.Rows(shape_of, p, boost)
    masks = [rng.random(30) < 0.6, rng.random(30) < 0.3]
    decided = 0
    for step in range(300):
        allowed = masks[(step // 50) % 2]  # the same object for 50 steps, then the other
        got = candidates.certified_best_candidate(shaped, searched, allowed, 1.0)
        want = candidates.dense_best_candidate(shaped.score[shape_of], p, boost, allowed, 1.0)
        assert got in (candidates.UNDECIDED, want)
        assert candidates.best_candidate(shaped, searched, allowed, 1.0) == want
        decided += got != candidates.UNDECIDED
        n = int(rng.integers(0, 40))
        column = np.where(rng.random(3) < 0.2, -np.inf, rng.uniform(0, 1, 3))
        shaped.set_column(n, column)
    assert decided > 200
