"""``PassInput.queue_quota`` (a Queue's ``spec.quota``): a pass never takes a queue above it, and the
capacity the capped queue cannot take goes to the others."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stowage.config import PackingSettings
from stowage.policy import dispatch

KNOBS = PackingSettings()


def _inp(nodes: int, shapes, group_shape, queue, pending, quota, *, alloc=None, skips=None) -> dispatch.PassInput:
    cap = np.tile([8.0, 32.0], (nodes, 1))
    g = len(group_shape)
    n_q = int(max(queue)) + 1
    return dispatch.PassInput(
        capacity=cap, available=cap.copy(), shapes=np.asarray(shapes, float), group_shape=np.asarray(group_shape),
        group_job=np.arange(g), group_queue=np.asarray(queue), pending=np.asarray(pending, np.int64),
        finished_fraction=np.zeros(g), job_work=np.ones(g),
        queue_alloc=np.zeros((n_q, 2)) if alloc is None else np.asarray(alloc, float),
        pool_total=cap.sum(axis=0), queue_weight=np.ones(n_q), queue_quota=np.asarray(quota, float),
        skips=None if skips is None else np.asarray(skips, np.int64), held=None)


def _held(inp: dispatch.PassInput, result: dispatch.PassResult) -> np.ndarray:
    qa = np.array(inp.queue_alloc, float)
    for p in result.placements:
        qa[inp.group_queue[p.group]] += inp.shapes[inp.group_shape[p.group]]
    return qa


def test_a_queue_stops_at_its_quota_and_the_other_takes_the_rest() -> None:
    # Queue 0 (weight 1, favoured by nothing) may hold 5 cpu; the pool has 32. Queue 1 is unlimited.
    inp = _inp(4, [[1.0, 1.0]], [0, 0], [0, 1], [100, 100], [[5.0, np.inf], [np.inf, np.inf]])
    held = _held(inp, dispatch.pack(inp, KNOBS))
    assert held[:, 0].tolist() == [5.0, 27.0]


def test_a_quota_already_reached_releases_nothing_of_that_queue() -> None:
    inp = _inp(2, [[1.0, 4.0]], [0, 0], [0, 1], [10, 10], [[np.inf, 8.0], [np.inf, np.inf]], alloc=[[0, 8], [0, 0]])
    result = dispatch.pack(inp, KNOBS)
    assert {p.group for p in result.placements} == {1}


def test_a_zero_quota_means_none_of_that_resource() -> None:
    inp = _inp(1, [[1.0, 1.0], [0.0, 1.0]], [0, 1], [0, 0], [3, 3], [[0.0, np.inf]])
    assert {p.group for p in dispatch.pack(inp, KNOBS).placements} == {1}


def test_a_row_held_back_by_its_quota_is_not_skipped() -> None:
    # The starvation guard must not count a pass that could never release it: no capacity would help.
    knobs = PackingSettings(starvation_skip_limit=2)
    inp = _inp(2, [[1.0, 1.0]], [0, 0], [0, 1], [10, 10], [[2.0, np.inf], [np.inf, np.inf]], skips=[0, 0])
    result = dispatch.pack(inp, knobs)
    assert not result.skipped[0]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.25, 0.9]))
def test_no_pass_takes_a_queue_above_its_quota(seed: int, f: float) -> None:
    rng = np.random.default_rng(seed)
    n_q, g = int(rng.integers(1, 4)), int(rng.integers(1, 7))
    shapes = rng.choice([0.5, 1.0, 2.0, 3.0], size=(g, 2))
    quota = np.where(rng.random((n_q, 2)) < 0.6, rng.choice([0.0, 2.0, 5.0, 11.0], size=(n_q, 2)), np.inf)
    queue = rng.integers(0, n_q, g)
    queue[0] = n_q - 1  # every queue index up to n_q - 1 exists
    inp = _inp(int(rng.integers(1, 5)), shapes, np.arange(g), queue, rng.integers(0, 20, g), quota)
    result = dispatch.pack(inp, PackingSettings(fairness_knob=f))
    held = _held(inp, result)
    assert (held <= quota + 1e-9).all()
    # Work-conserving within the quotas: whatever is left pending either fits no node or its queue's quota.
    avail = inp.available.copy()
    for p in result.placements:
        avail[p.node] -= shapes[p.group]
    left = inp.pending - np.bincount([p.group for p in result.placements], minlength=g)
    for row in np.flatnonzero(left > 0):
        fits_node = (shapes[row] <= avail + 1e-9).all(axis=1).any()
        fits_quota = (held[queue[row]] + shapes[row] <= quota[queue[row]] + 1e-9).all()
        assert not (fits_node and fits_quota), f"row {row} could still start"
