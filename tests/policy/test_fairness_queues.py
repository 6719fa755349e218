"""Weighted DRF between queues under the DEFAULT knobs: ``fairness.deprived_queues`` and ``dispatch.pack``'s queue mask.

With ``packing.fairness_knob = 0.25`` and two queues, the old count rule kept ⌈0.75·2⌉ = 2 queues, i.e. nobody was
held back; these tests fail on it (issue #9).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.policy import dispatch, fairness
from stowage.policy.fairness import deprived_queues

DEFAULTS = PackingSettings()
QUEUE_SHARE_SLACK = DEFAULTS.queue_share_slack


def _pass(nodes: int, shape: list[float], pending: list[int], weight: list[float], *, shapes=None, group_shape=None,
          queue=None, node_cap=(8.0, 32.0),
          knobs: PackingSettings = DEFAULTS) -> tuple[dispatch.PassResult, np.ndarray]:
    """One pass over an empty pool of identical nodes; one row per queue unless ``queue`` says otherwise."""
    cap = np.tile(np.asarray(node_cap, float), (nodes, 1))
    shapes = np.asarray([shape] if shapes is None else shapes, float)
    g = len(pending)
    queue = np.arange(g) if queue is None else np.asarray(queue)
    inp = dispatch.PassInput(
        capacity=cap, available=cap.copy(), shapes=shapes,
        group_shape=np.zeros(g, np.int64) if group_shape is None else np.asarray(group_shape),
        group_job=np.arange(g), group_queue=queue, pending=np.asarray(pending, np.int64),
        finished_fraction=np.zeros(g), job_work=np.ones(g), queue_alloc=np.zeros((len(weight), cap.shape[1])),
        pool_total=cap.sum(axis=0), queue_weight=np.asarray(weight, float),
    )
    result = dispatch.pack(inp, knobs)
    alloc = np.zeros((len(weight), cap.shape[1]))
    for p in result.placements:
        alloc[queue[p.group]] += shapes[inp.group_shape[p.group]]
    return result, alloc


def test_default_knob_gives_two_queues_of_weights_2_to_1_a_2_to_1_split() -> None:
    # 12 nodes x 8 cpu, 1-cpu tasks, both queues with far more work than fits: 96 slots -> 64 : 32.
    _, alloc = _pass(12, [1.0, 1.0], [500, 500], [2.0, 1.0])
    assert alloc[:, 0].tolist() == [64.0, 32.0]


def test_default_knob_splits_by_dominant_share_for_different_shapes() -> None:
    # DRF's own example shape: queue 0 is cpu-heavy, queue 1 memory-heavy, equal weights -> equal dominant shares.
    _, alloc = _pass(10, [0.0], [500, 500], [1.0, 1.0], shapes=[[1.0, 1.0], [0.25, 4.0]], group_shape=[0, 1])
    dom = (alloc / np.array([80.0, 320.0])).max(axis=1)
    assert abs(dom[0] - dom[1]) <= QUEUE_SHARE_SLACK + 4.0 / 320.0


def test_a_held_back_queue_takes_what_the_deprived_queue_cannot_use() -> None:
    # Queue 1 (weight 4, nothing held) has only 6-cpu tasks; after one per node, 2 cpu stay free on each node,
    # which only queue 0's 1-cpu tasks can use, however far ahead queue 0 then is: the pass is work-conserving.
    result, alloc = _pass(3, [0.0], [100, 100], [1.0, 4.0], shapes=[[1.0, 1.0], [6.0, 1.0]], group_shape=[0, 1])
    assert alloc[:, 0].tolist() == [6.0, 18.0]
    assert len(result.placements) == 9


def test_three_queues_next_most_deprived_gets_the_slot_when_the_most_deprived_cannot_fit() -> None:
    # Queue 2 is most deprived but its task fits nowhere; queue 1 (next) must go before queue 0 (furthest ahead).
    cap = np.array([[4.0, 4.0]])
    inp = dispatch.PassInput(
        capacity=cap, available=np.array([[2.0, 2.0]]), shapes=np.array([[1.0, 1.0], [3.0, 3.0]]),
        group_shape=np.array([0, 0, 1]), group_job=np.arange(3), group_queue=np.arange(3),
        pending=np.array([1, 1, 1]), finished_fraction=np.zeros(3), job_work=np.ones(3),
        queue_alloc=np.array([[2.0, 2.0], [0.4, 0.4], [0.0, 0.0]]), pool_total=np.array([4.0, 4.0]),
        queue_weight=np.ones(3),
    )
    # The 3x3 task fit the node's capacity, so it takes part; with 2 free it fits nowhere now.
    assert [p.group for p in dispatch.pack(inp, DEFAULTS).placements] == [1, 0]


def test_f_zero_lifts_the_queue_mask_most_efficient() -> None:
    # Tetris §3.4: f = 0 is the most efficient choice; queue order then follows the score (ties: lowest row).
    knobs = dataclasses.replace(DEFAULTS, fairness_knob=0.0, remaining_work_weight=0.0)
    _, alloc = _pass(2, [1.0, 1.0], [500, 500], [1.0, 1.0], knobs=knobs)
    assert alloc[:, 0].tolist() == [16.0, 0.0]


def test_a_slack_as_large_as_the_pool_lets_every_queue_compete() -> None:
    # packing.queue_share_slack = 1: no queue is held back while the knob f still applies to jobs; with equal
    # scores the first row then takes every slot, as with f = 0 (the default slack gives 8 : 8).
    knobs = dataclasses.replace(DEFAULTS, queue_share_slack=1.0, remaining_work_weight=0.0)
    _, alloc = _pass(2, [1.0, 1.0], [500, 500], [1.0, 1.0], knobs=knobs)
    assert alloc[:, 0].tolist() == [16.0, 0.0]
    _, alloc = _pass(2, [1.0, 1.0], [500, 500], [1.0, 1.0], knobs=dataclasses.replace(knobs, queue_share_slack=0.01))
    assert alloc[:, 0].tolist() == [8.0, 8.0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0]), min_size=2, max_size=5),
    nodes=st.integers(1, 12),
    task=st.sampled_from([[1.0, 1.0], [2.0, 1.0], [1.0, 6.0], [0.5, 3.0]]),
    f=st.sampled_from([0.25, 0.5, 0.9]),
    slack=st.sampled_from([0.0, QUEUE_SHARE_SLACK, 0.1]),
    data=st.data(),
)
def test_queues_with_work_left_end_within_slack_plus_one_task(weights, nodes, task, f, slack, data) -> None:
    # One task shape for all: a queue that got a task while another had fitting work was within the slack of the
    # most deprived, so at the end any two queues with work left differ by at most slack + one task's share.
    pending = data.draw(st.lists(st.integers(0, 200), min_size=len(weights), max_size=len(weights)))
    knobs = dataclasses.replace(DEFAULTS, fairness_knob=f, queue_share_slack=slack)
    result, alloc = _pass(nodes, task, pending, weights, knobs=knobs)
    total = np.array([8.0, 32.0]) * nodes
    w = np.asarray(weights)
    shares = fairness.dominant_shares(alloc, total, w)
    placed = np.bincount([p.group for p in result.placements], minlength=len(weights))
    left = np.asarray(pending) - placed
    one_task = (np.asarray(task) / total).max() / w
    for i in np.flatnonzero(left > 0):
        for j in np.flatnonzero(left > 0):
            assert shares[i] <= shares[j] + slack + one_task[i] + 1e-12


# --- deprived_queues ----------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    shares=st.lists(st.one_of(st.floats(0.0, 2.0), st.just(float("inf"))), min_size=1, max_size=8),
    data=st.data(),
    slack=st.sampled_from([0.0, QUEUE_SHARE_SLACK, 0.2]),
)
def test_deprived_queues_properties(shares, data, slack) -> None:
    s = np.asarray(shares)
    active = np.asarray(data.draw(st.lists(st.booleans(), min_size=s.size, max_size=s.size)))
    got = deprived_queues(s, active, slack)
    assert not (got & ~active).any(), "an inactive queue never competes"
    if not active.any():
        assert not got.any()
        return
    floor = s[active].min()
    assert got[np.flatnonzero(active)[np.argmin(s[active])]], "the most deprived queue always competes"
    assert (s[got] <= floor + slack).all() or np.isinf(floor)
    assert got[active & (s <= floor + slack)].all(), "every active queue within the slack competes"


def test_deprived_queues_default_slack_and_zero_weight() -> None:
    assert deprived_queues([0.10, 0.105, 0.2], [True, True, True], QUEUE_SHARE_SLACK).tolist() == [True, True, False]
    assert deprived_queues([np.inf, 0.5], [True, True], QUEUE_SHARE_SLACK).tolist() == [False, True]
    assert deprived_queues([np.inf, np.inf], [True, True], QUEUE_SHARE_SLACK).tolist() == [True, True]


def test_deprived_queues_checks_shapes() -> None:
    with pytest.raises(InvalidInput, match=r"active\.shape"):
        deprived_queues([0.1, 0.2], [True], QUEUE_SHARE_SLACK)


@pytest.mark.parametrize("seed", range(8))
def test_deprived_queues_on_floats_equals_the_numpy_rule(seed: int, monkeypatch) -> None:
    """The few-queues path against the numpy one (forced by _FEW_QUEUES = 0): NaN, ±inf shares, odd slacks."""
    from stowage.policy import fairness as fq

    rng = np.random.default_rng(seed)
    values = [0.0, -0.0, 0.1, 0.1 + 1e-17, 0.11, 0.5, 1.0, np.inf, np.nan, -np.inf]
    slacks = [0.0, 0.01, 0.1, -0.5, np.nan, np.inf, -np.inf, 1e308]
    cases = [(rng.choice(values, size=q), rng.random(q) < 0.7, float(rng.choice(slacks)))
             for q in rng.integers(1, 9, size=200)]
    fast = [fq.deprived_queues(s, a, sl) for s, a, sl in cases]
    monkeypatch.setattr(fq, "_FEW_QUEUES", 0)
    plain = [fq.deprived_queues(s, a, sl) for s, a, sl in cases]
    for got, want in zip(fast, plain, strict=True):
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    assert any(w.any() and not w.all() for w in plain)  # some queues held back, not all-or-nothing
