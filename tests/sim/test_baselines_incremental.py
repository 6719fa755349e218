"""The kube-like presets' incremental node cache gives the numbers a full rescore gives."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import scoring
from stowage.sim.baselines import _NodeCache, _shape_index
from tests.sim.kit import contended


def _full(d: np.ndarray, free: np.ndarray, reg: np.ndarray, cap_u: np.ndarray, fit_res: np.ndarray,
          score: str) -> tuple[np.ndarray, np.ndarray]:
    """The plain computation the presets did before the cache: every node, every pod."""
    ok = (d[fit_res] <= free[:, fit_res] * (1 + 1e-9) + 1e-12).all(axis=1)
    to_u = np.array([1000.0, 1.0])
    s = scoring.kube_scores(np.rint(reg[:, :2] * to_u), cap_u, np.rint(d[:2] * to_u), score)
    return ok, s


@pytest.mark.parametrize("score", ["least", "most"])
def test_cache_matches_full_rescore_on_random_placements_and_releases(score: str) -> None:
    rng = np.random.default_rng(7)
    n, r = 40, 4
    cap = rng.choice([8.0, 16.0, 32.0], size=(n, 1)) * np.array([1.0, 4e9, 1e9, 1e9])
    shapes = rng.uniform(0.05, 0.3, size=(6, r)) * cap.max(axis=0)
    fit_res = np.array([True, True, True, False])
    to_u = np.array([1000.0, 1.0])
    cap_u = np.rint(cap[:, :2] * to_u)
    cache = _NodeCache(n, fit_res, [0, 1], to_u, cap_u, score)
    reg = np.zeros((n, r))
    checked = placed = 0
    for _ in range(30):  # passes
        # between passes: some nodes free part of what they hold (float noise included)
        gone = rng.random(n) < 0.2
        reg[gone] *= rng.uniform(0.0, 0.9, size=(int(gone.sum()), 1))
        free = cap - reg
        cache.sync(reg, free)
        for _ in range(20):  # pods in the pass
            k = int(rng.integers(len(shapes)))
            d = shapes[k]
            ok, s = cache.lookup(k, d, reg)
            ok_full, s_full = _full(d, free, reg, cap_u, fit_res, score)
            np.testing.assert_array_equal(ok, ok_full)
            np.testing.assert_array_equal(s, s_full)
            checked += 1
            if ok.any():
                node = int(np.flatnonzero(ok)[np.argmax(s[ok])])
                reg[node] += d
                free[node] -= d
                cache.placed(node, reg)
                placed += 1
    assert checked == 600 and placed > 100  # the comparisons ran on a filling, draining cluster


def test_shape_index_equals_numpy_unique() -> None:
    from stowage.sim.engine import SimConfig, Simulation
    from stowage.sim.presets import make

    sim = Simulation(contended(seed=2, n_jobs=14), make("kube-default"), SimConfig(), 2)
    rng = np.random.default_rng(1)
    for size in (1, 5, sim.n_groups):
        groups = rng.choice(sim.n_groups, size=size, replace=False)
        present, which = _shape_index(sim, groups)
        want_present, want_which = np.unique(sim.g_shape[groups], return_inverse=True)
        np.testing.assert_array_equal(present, want_present)
        np.testing.assert_array_equal(which, want_which.reshape(-1))


@pytest.mark.parametrize("preset", ["kube-default", "drf", "ubis"])
def test_kept_queue_order_equals_a_fresh_sort_at_every_pass(preset: str) -> None:
    from stowage.sim.engine import SimConfig, Simulation
    from stowage.sim.presets import make
    from tests.sim.kit import BURSTY

    p = make(preset)
    sim = Simulation(contended(seed=2, n_jobs=14), p, SimConfig(usage=BURSTY), 2)
    plain_schedule = p.schedule
    passes = []

    def checked(s: Simulation) -> None:
        want = p._queue_order(s, s.ready_groups())  # type: ignore[attr-defined]
        np.testing.assert_array_equal(p._ready_in_order(s), want)  # type: ignore[attr-defined]
        passes.append(want.size)
        plain_schedule(s)

    p.schedule = checked  # type: ignore[method-assign]
    sim.run()
    assert len(passes) > 20 and max(passes) > 1  # many passes, some with several groups waiting


@pytest.mark.parametrize("strategy", ["least", "most"])
def test_one_node_score_on_floats_equals_numpy_bit_for_bit(strategy: str) -> None:
    from stowage.sim.baselines import _kube_score_one

    rng = np.random.default_rng(11)
    n = 4000
    cap = np.rint(rng.choice([0.0, 1.0, 7.0, 16.0, 96.0], size=(n, 1)) * np.array([1000.0, 2**30]))
    cap[rng.random(n) < 0.05, 1] = 0.0  # one resource without capacity
    req = np.rint(cap * rng.uniform(0.0, 1.3, size=(n, 2)))  # some nodes already over capacity
    pods = np.rint(rng.uniform(0.0, 4.0, size=(n, 2)) * np.array([1000.0, 2**30]))
    pods[rng.random(n) < 0.1] = 0.0  # pods that request nothing (upstream's non-zero defaults)
    for i in range(n):
        want = scoring.kube_scores(req[i:i + 1], cap[i:i + 1], pods[i], strategy)[0]
        got = _kube_score_one(req[i].tolist(), cap[i].tolist(), pods[i].tolist(), strategy)
        assert got == want, (req[i], cap[i], pods[i])


def test_shape_verdicts_kept_per_node_equal_a_fresh_check_at_every_pass_and_placement() -> None:
    """_NodeCache.shape_fits (each node's check redone only where it changed) against alignment.feasible on
    every node: at each pass's start (releases, float noise, NaN room) and after each placement in it."""
    from stowage.policy import alignment

    rng = np.random.default_rng(11)
    n, r = 30, 4
    cap = rng.choice([8.0, 16.0], size=(n, 1)) * np.array([1.0, 4e9, 1e9, 1e9])
    shapes = alignment.clamp_demand(rng.uniform(0.1, 0.6, size=(5, r)) * cap.max(axis=0))
    fit_res = np.array([True, True, False, False])
    cache = _NodeCache(n, fit_res, [0, 1], np.array([1000.0, 1.0]), np.rint(cap[:, :2] * [1000.0, 1.0]), "least")
    reg = np.zeros((n, r))
    verdicts = set()
    for p in range(40):
        gone = rng.random(n) < 0.3
        reg[gone] *= rng.uniform(0.0, 0.9, size=(int(gone.sum()), 1))
        free = cap - reg
        if p % 7 == 3:
            free[int(rng.integers(n)), 0] = np.nan  # an unknown room fits nothing, and is checked again after
        cache.sync(reg, free)
        for _ in range(15):
            want = alignment.feasible(shapes[:, fit_res], free[:, fit_res]).any(axis=1)
            np.testing.assert_array_equal(cache.shape_fits(shapes[:, fit_res]), want)
            verdicts.add(tuple(want.tolist()))
            fits = np.flatnonzero((shapes[0, fit_res] <= free[:, fit_res]).all(axis=1))
            if fits.size == 0:
                break
            node = int(rng.choice(fits))
            reg[node] += shapes[0]
            free[node] -= shapes[0]
            cache.placed(node, reg)
    assert len(verdicts) >= 3  # not one fixed answer: shapes fit and stop fitting as the cluster fills and drains


def test_one_node_recheck_on_floats_equals_the_full_fit_at_the_edges() -> None:
    """lookup's one-changed-node path (Python floats) against the full check: NaN, ±inf, exact and tolerance rooms."""
    n = 12
    cap = np.full((n, 4), 8.0)
    fit_res = np.array([True, True, False, True])
    cache = _NodeCache(n, fit_res, [0, 1], np.array([1000.0, 1.0]), np.rint(cap[:, :2] * [1000.0, 1.0]), "least")
    reg = np.zeros((n, 4))
    free = cap - reg
    # The third resource is not checked; the second demand is within the absolute 1e-12 of an empty node.
    demands = [np.array([2.0, 3.0, 99.0, 1.0]), np.array([1e-12, 3.0, 99.0, 1.0])]
    cache.sync(reg, free)
    for shape, d in enumerate(demands):
        cache.lookup(shape, d, reg)
    edges = [2.0, 2.0 * (1 + 1e-9) + 1e-12, np.nextafter(2.0, 0.0), 2.0 - 1e-9, 2.0 - 5e-12, np.nan, np.inf, -np.inf,
             0.0, -0.0, 5e-13]
    verdicts = set()
    for k, value in enumerate(edges):
        node = k % n
        free[node] = [value, 3.0, 0.0, 1.0]
        for shape, d in enumerate(demands):
            cache.placed(node, reg)
            ok, _ = cache.lookup(shape, d, reg)
            want = _full(d, free, reg, np.rint(cap[:, :2] * [1000.0, 1.0]), fit_res, "least")[0]
            np.testing.assert_array_equal(ok, want)
            verdicts.add((shape, bool(ok[node])))
    assert len(verdicts) == 4  # each demand both fits and does not at some edge


@pytest.mark.parametrize("width", [1, 2, 4, 5])
def test_one_nodes_spread_score_on_floats_equals_numpys_row_sum(width: int) -> None:
    """ubis's spread score for the node a placement changed, against the whole array's row sums, bit for bit
    (terms of mixed magnitude and sign, so another order of the sum would show)."""
    from stowage.sim.baselines import _spread_score_one

    rng = np.random.default_rng(width)
    room = rng.uniform(0, 1, (3000, width)) * rng.choice([1.0, 1e8, 1e-8, 1e16], size=(3000, width))
    d = rng.uniform(0, 1, width) * rng.choice([1.0, 1e8, 1e-8], size=width)
    inv = rng.choice([0.0, 1e-16, 0.125, 1.0, 3.0], size=(3000, width))
    want = ((room - d) * inv).sum(axis=1)
    got = np.array([_spread_score_one(a, d.tolist(), i) for a, i in zip(room.tolist(), inv.tolist(), strict=True)])
    assert got.tobytes() == want.tobytes()
