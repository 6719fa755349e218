"""Rates evaluated only on the nodes that may contend (``RateTracker._hot``) equal the full recomputation
(``Cluster.rates`` over every running row) at every event, while both kinds of node are present."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import rates
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from tests.sim.kit import BURSTY, contended
from tests.sim.test_rates import plain_rates


@pytest.mark.parametrize(("preset", "seed"), [("ubis", 3), ("ubis", 8), ("stowage", 31), ("binpack", 2)])
def test_rates_on_hot_nodes_only_equal_the_full_recomputation_at_every_event(preset: str, seed: int,
                                                                           monkeypatch) -> None:
    original = rates.RateTracker.rates
    seen = {"events": 0, "partial": 0, "slowed_on_hot": 0, "bound_below": 0, "few_hot_rows": 0, "most_hot_rows": 0}

    def checking(self: rates.RateTracker, out: np.ndarray | None = None) -> np.ndarray:
        got = original(self, out)
        want = plain_rates(self)
        assert got.tobytes() == want.tobytes()
        if out is not None:
            assert out.tobytes() == want.tobytes()
        hot = self._hot()
        seen["events"] += 1
        if hot is not None and hot.any():
            seen["partial"] += 1
            run = self.sim.running
            hot_rows = hot[run.node]
            # Both ways are checked: the hot nodes' rows alone (few), every row (most).
            seen["few_hot_rows" if 2 * hot_rows.sum() <= len(run) else "most_hot_rows"] += 1
            seen["slowed_on_hot"] += bool((want[hot_rows] < 1.0).any())
        # The bound really bounds: every node's summed usage (plain) is at most its bound, up to rounding.
        use = self.sim.cluster.node_sums(self.sim.current_use(), self.sim.running.node)
        assert self.bound is not None
        assert (use <= self.bound * (1 + 1e-12) + 1e-12).all()
        seen["bound_below"] += 1
        return got

    monkeypatch.setattr(rates.RateTracker, "rates", checking)
    result = Simulation(contended(seed=seed, n_jobs=16), make(preset), SimConfig(usage=BURSTY), seed=seed).run()
    assert result.summary["lost_tasks"] == 0
    # Not vacuous: many events, some with cold and hot nodes at once, and contention on the hot ones.
    assert seen["events"] > 50 and seen["partial"] > 10 and seen["slowed_on_hot"] > 0, seen
    assert seen["few_hot_rows"] > 0 and seen["most_hot_rows"] > 0, seen


def test_a_node_is_cold_only_below_capacity_on_every_resource_but_memory() -> None:
    sim = Simulation(contended(seed=1, n_jobs=2), make("ubis"), SimConfig(), 0)
    tracker = sim._tracker
    cap = sim.cluster.cap
    tracker.bound = cap * 0.5
    tracker.bound_at = sim.monitor.last_tick
    tracker.bound[0, sim.cluster.mem] = cap[0, sim.cluster.mem] * 10  # memory: never a slowdown
    tracker.bound[1, sim.cluster.cpu] = cap[1, sim.cluster.cpu] * (1 - 1e-6)  # inside the margin: hot
    tracker.bound[2, 3] = cap[2, 3] * 1.5
    tracker.hot = None
    hot = tracker._hot()
    assert hot is not None
    assert hot[:3].tolist() == [False, True, True] and not hot[3:].any()
