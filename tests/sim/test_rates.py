"""The incremental usage and rates (stowage.sim.rates) answer exactly as the plain full recomputation."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import rates
from stowage.sim.cluster import Cluster
from stowage.sim.engine import SimConfig, Simulation, simulate
from stowage.sim.presets import make
from tests.sim.kit import BURSTY, contended


def plain_use(sim: Simulation) -> np.ndarray:
    """Every running row's usage from scratch (the engine's code before the tracker)."""
    run = sim.running
    both = sim.usage_model.fraction(sim.now, run.start, np.stack([run.base, run.io_base], axis=1), run.burst_until)
    return sim.g_demand[run.group] * np.where(sim.io_resources, both[:, 1:2], both[:, 0:1])


def plain_rates(tracker: rates.RateTracker, out: np.ndarray | None = None) -> np.ndarray:
    """Cluster.rates over every row; into ``out`` when given, as RateTracker.rates writes it."""
    sim = tracker.sim
    run = sim.running
    got = sim.cluster.rates(plain_use(sim), run.node, run.opp, sim.g_uses[run.group])
    if out is not None:
        out[:] = got
    return got


@pytest.mark.parametrize("seed", range(6))
def test_the_contention_table_gives_cluster_rates_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, p = 7, 60
    cap = rng.choice([0.0, 1.0, 4.0, 8.0], size=(n, 4), p=[0.05, 0.15, 0.4, 0.4])
    cluster = Cluster(("cpu", "memory", "disk", "network"), cap, np.ones(n, bool))
    node = rng.integers(0, n, p)
    opp = rng.random(p) < 0.4
    uses = rng.random((p, 4)) < 0.7
    use = rng.uniform(0, 3, (p, 4)) * uses
    expected = cluster.rates(use, node, opp, uses)
    reg = cluster.node_sums(np.where(opp[:, None], 0.0, use), node)
    opp_sum = cluster.node_sums(np.where(opp[:, None], use, 0.0), node)
    masks, which = np.unique(uses, axis=0, return_inverse=True)
    table = rates.contention_table(reg, opp_sum, cap, cluster.cpu, cluster.mem, masks)
    if table is None:
        assert (expected == 1.0).all()
        return
    got = table[opp.astype(np.int64), which.reshape(-1), node]
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("seed", range(40))
def test_the_contention_table_at_the_edges_gives_cluster_rates(seed: int) -> None:
    """Node sums at capacity's edges, zero capacities and infinite use: one regular and one opportunistic task
    per node carry the sums, so Cluster.rates (the model) sees the very numbers the table gets."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    cap = rng.choice([0.0, 1.0, 2.0, 4.0], size=(n, 4))
    reg = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0], size=(n, 4)) * rng.choice([1, 0.999999, 1.0000001], (n, 4))
    opp = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, np.inf], size=(n, 4), p=[0.3, 0.2, 0.2, 0.1, 0.1, 0.1])
    masks = np.unique(rng.random((5, 4)) < 0.6, axis=0)
    node = np.concatenate([np.arange(n), np.arange(n)])
    is_opp = np.repeat([False, True], n)
    for cpu, mem in ((0, 1), (1, 0), (2, 3)):
        names = ["disk", "network", "gpu", "x"]
        names[cpu], names[mem] = "cpu", "memory"
        cluster = Cluster(tuple(names), cap, np.ones(n, bool))
        table = rates.contention_table(reg, opp, cap, cpu, mem, masks)
        for k, m in enumerate(masks):
            want = cluster.rates(np.concatenate([reg, opp]), node, is_opp, np.tile(m, (2 * n, 1)))
            got = np.ones(2 * n) if table is None else table[is_opp.astype(np.int64), k, node]
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("preset", ["ubis", "stowage", "kube-default"])
def test_the_tracker_matches_a_full_recomputation_at_every_event(preset: str, monkeypatch) -> None:
    checked = {"rates": 0, "starts": 0}
    original_rates, original_start = rates.RateTracker.rates, rates.RateTracker._start

    def counting_start(self: rates.RateTracker) -> None:
        checked["starts"] += 1
        original_start(self)

    def checking(self: rates.RateTracker, out: np.ndarray | None = None) -> np.ndarray:
        got = original_rates(self, out)
        assert self.current_use().tobytes() == plain_use(self.sim).tobytes()
        assert got.tobytes() == plain_rates(self).tobytes()
        checked["rates"] += 1
        return got

    monkeypatch.setattr(rates.RateTracker, "rates", checking)
    monkeypatch.setattr(rates.RateTracker, "_start", counting_start)
    result = Simulation(contended(seed=1, n_jobs=20), make(preset), SimConfig(usage=BURSTY), seed=1).run()
    assert checked["rates"] > 50 and result.summary["lost_tasks"] == 0
    assert checked["starts"] >= 2  # paused while no node could contend, and started again


def test_whole_runs_are_identical_with_the_plain_path(monkeypatch) -> None:
    workload = contended(seed=7, n_jobs=16)
    fast = {p: simulate(workload, p, config=SimConfig(usage=BURSTY), seed=1) for p in ("ubis", "stowage")}
    monkeypatch.setattr(rates.RateTracker, "rates", plain_rates)
    monkeypatch.setattr(rates.RateTracker, "current_use", lambda self: plain_use(self.sim))
    for preset, result in fast.items():
        plain = simulate(workload, preset, config=SimConfig(usage=BURSTY), seed=1)
        assert plain.summary == result.summary, preset
        assert plain.jct.tobytes() == result.jct.tobytes(), preset
