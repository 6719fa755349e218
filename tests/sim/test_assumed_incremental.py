"""The kept harvestable room of ``ubis`` (stowage.sim.assumed, KubePreset._harvestable) equals the one
recomputed from every running row (``Preset._harvestable``: ``harvest.assumed`` + ``harvest.harvestable``)
at every opportunistic pass, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.policy import harvest
from stowage.sim import baselines
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import Preset, make
from tests.sim.kit import BURSTY, contended


@pytest.mark.parametrize("seed", [4, 7])
def test_kept_harvestable_room_equals_a_full_recomputation_at_every_pass(seed: int, monkeypatch) -> None:
    kept = baselines.KubePreset._harvestable
    seen = {"calls": 0, "assumed_nonzero": 0, "expired": 0}

    def checking(self: baselines.KubePreset, sim: Simulation) -> np.ndarray:
        got = kept(self, sim)
        run = sim.running
        rows = np.arange(len(run))
        full = harvest.assumed(sim.g_demand[run.group[rows]], run.start[rows], run.node[rows], sim.now,
                               sim.settings.harvest.ramp_up_s, sim.cluster.n)
        assert self._assumed is not None
        assert self._assumed.current(sim.now).tobytes() == full.tobytes()
        assert got.tobytes() == Preset._harvestable(self, sim).tobytes()
        seen["calls"] += 1
        seen["assumed_nonzero"] += bool(full.any())
        # Rows older than the window: the kept sums must have let them go.
        seen["expired"] += bool((sim.now - run.start[rows] >= sim.settings.harvest.ramp_up_s).any())
        return got

    monkeypatch.setattr(baselines.KubePreset, "_harvestable", checking)
    result = Simulation(contended(seed=seed, n_jobs=16), make("ubis"), SimConfig(usage=BURSTY), seed=seed).run()
    assert result.summary["lost_tasks"] == 0
    # The comparison saw real work: many passes, pods counted as assumed, and pods past the window.
    assert seen["calls"] > 50 and seen["assumed_nonzero"] > 10 and seen["expired"] > 0, seen


def test_headroom_then_assumed_is_harvestable_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    n, r = 9, 4
    cap = rng.choice([0.0, 1.0, 3.7, 8.0, np.nan], size=(n, r))
    use = rng.uniform(-1, 9, (n, r))
    use[rng.random((n, r)) < 0.1] = np.nan
    blk = rng.uniform(-1, 2, (n, r))
    ass = rng.uniform(-1, 5, (n, r))
    t = rng.uniform(0, 1.2, r)
    head, ceiling = harvest.harvest_headroom(cap, use, blk, t)
    assert harvest.harvestable_after(head, ceiling, ass).tobytes() == harvest.harvestable(
        cap, use, blk, ass, t).tobytes()


def test_one_node_sum_is_assumeds_row_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    d = rng.uniform(0, 1, (40, 3)) * 10.0 ** rng.integers(-3, 9, (40, 3))
    node = rng.integers(0, 4, 40)
    full = harvest.assumed(d, np.zeros(40), node, 1.0, 30.0, 4)
    clean = harvest.clean_demands(d).tolist()
    for n in range(4):
        mine = harvest.assumed_node([clean[i] for i in np.flatnonzero(node == n)], 3)
        assert np.array(mine).tobytes() == full[n].tobytes()
