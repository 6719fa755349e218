"""The contention model at its edges, and the incremental usage and rates (stowage.sim.rates) against the plain
full recomputation."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import rates
from stowage.sim.cluster import Cluster, contention_table
from stowage.sim.engine import SimConfig, Simulation, simulate
from stowage.sim.presets import make
from tests.sim.kit import BURSTY, contended, model_rates


def plain_use(tracker: rates.RateTracker, now: float) -> np.ndarray:
    """Every running row's usage at ``now`` from scratch (the engine's code before the tracker)."""
    run = tracker.running
    both = tracker.usage.fraction(now, run.start, np.stack([run.base, run.io_base], axis=1), run.burst_until)
    io = np.array(tracker.io, dtype=bool)
    return tracker.g_demand[run.group] * np.where(io, both[:, 1:2], both[:, 0:1])


def plain_rates(tracker: rates.RateTracker, now: float, out: np.ndarray | None = None) -> np.ndarray:
    """The contention model over every row; into ``out`` when given, as RateTracker.rates writes it."""
    run = tracker.running
    uses = tracker.g_demand[run.group] > 0
    got = model_rates(tracker.cluster, plain_use(tracker, now), run.node, run.opp, uses)
    if out is not None:
        out[:] = got
    return got


@pytest.mark.parametrize("seed", range(20))
def test_the_contention_model_at_the_edges_gives_rates_in_0_1_and_full_speed_below_capacity(seed: int) -> None:
    """Zero capacities, usage at capacity's edges and infinite usage: every rate is in [0, 1] (NaN factors
    read as 1), a node whose usage stays within capacity runs its tasks at full speed, and memory never
    slows a task."""
    rng = np.random.default_rng(seed)
    n, p = int(rng.integers(1, 12)), 80
    cap = rng.choice([0.0, 1.0, 2.0, 4.0], size=(n, 4))
    cluster = Cluster(("cpu", "memory", "disk", "network"), cap, np.ones(n, bool))
    node = rng.integers(0, n, p)
    opp = rng.random(p) < 0.4
    use = rng.choice([0.0, 0.5, 1.0, 2.0, 1.0000001, np.inf], size=(p, 4), p=[0.3, 0.2, 0.2, 0.1, 0.1, 0.1])
    uses = use > 0
    got = model_rates(cluster, use, node, opp, uses)
    assert ((got >= 0.0) & (got <= 1.0)).all()
    total = cluster.node_sums(use, node)
    calm = ~(total > cap * (1 + 1e-9))[:, [0, 2, 3]].any(axis=1)  # memory aside
    assert (got[calm[node]] == 1.0).all()
    only_memory = uses.copy()
    only_memory[:, [0, 2, 3]] = False
    assert (model_rates(cluster, use, node, opp, only_memory) == 1.0).all()


@pytest.mark.parametrize(("loss", "delivered"), [(0.0, 100.0), (0.5, 100.0 / 1.5), (1.0, 50.0)])
def test_an_over_subscribed_disk_delivers_less_in_all_with_overcommit_loss(loss: float, delivered: float) -> None:
    """Two tasks asking 100 Mi/s each of a 100 Mi/s disk (ρ = 2): fluid sharing (loss 0) delivers the whole
    disk, β = 0.5 two thirds of it, β = 1 half; a node within capacity and cpu are untouched by the loss."""
    cap = np.array([[8.0, 16.0, 100.0], [8.0, 16.0, 100.0]])
    reg = np.array([[9.0, 1.0, 200.0], [1.0, 1.0, 50.0]])  # node 0: cpu and disk over; node 1: calm
    opp = np.zeros_like(reg)
    masks = np.array([[False, False, True], [True, False, False]])  # a disk-only task, a cpu-only task
    io = np.array([False, False, True])
    table = contention_table(reg, opp, cap, 0, 1, masks, io, loss)
    assert table is not None
    assert table[0, 0, 0] * 200.0 == pytest.approx(delivered)
    assert table[0, 1, 0] == pytest.approx(8.0 / 9.0)
    assert (table[:, :, 1] == 1.0).all()


@pytest.mark.parametrize("preset", ["ubis", "stowage", "kube-default"])
def test_the_tracker_matches_a_full_recomputation_at_every_event(preset: str, monkeypatch) -> None:
    checked = {"rates": 0, "starts": 0}
    original_rates, original_start = rates.RateTracker.rates, rates.RateTracker._start

    def counting_start(self: rates.RateTracker) -> None:
        checked["starts"] += 1
        original_start(self)

    def checking(self: rates.RateTracker, now: float, out: np.ndarray) -> np.ndarray:
        got = original_rates(self, now, out)
        assert self.current_use(now).tobytes() == plain_use(self, now).tobytes()
        assert got.tobytes() == plain_rates(self, now).tobytes()
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
    monkeypatch.setattr(rates.RateTracker, "current_use", plain_use)
    for preset, result in fast.items():
        plain = simulate(workload, preset, config=SimConfig(usage=BURSTY), seed=1)
        assert plain.summary == result.summary, preset
        assert plain.jct.tobytes() == result.jct.tobytes(), preset
