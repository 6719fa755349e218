"""The kube-like presets' state kept across placements and passes equals a fresh computation."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import baselines
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from tests.sim.kit import BURSTY, contended


@pytest.mark.parametrize("preset", ["kube-default", "binpack", "drf", "ubis"])
def test_a_passs_kept_verdicts_and_scores_equal_a_fresh_computation_at_every_placement(
        preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = [0]
    original = baselines.KubePreset._place_regular

    def checking(self: baselines.KubePreset, g: int, free: np.ndarray, fit_res: np.ndarray) -> bool:
        placed = original(self, g, free, fit_res)
        shape = int(self.view.spec.g_shape[g])
        nodes = self._pass_nodes  # type: ignore[attr-defined]
        assert nodes is not None and nodes.free is free
        ok, scores = nodes.get(shape)
        want_ok, want_scores = self._fit_and_score(shape, free, slice(None))
        np.testing.assert_array_equal(ok, want_ok)
        np.testing.assert_array_equal(scores, want_scores)
        checked[0] += 1
        return placed

    monkeypatch.setattr(baselines.KubePreset, "_place_regular", checking)
    result = Simulation(contended(seed=2, n_jobs=14), make(preset), SimConfig(usage=BURSTY, check=True), 2).run()
    assert checked[0] > 50 and result.summary["lost_tasks"] == 0


@pytest.mark.parametrize("preset", ["kube-default", "drf", "ubis"])
def test_kept_queue_order_equals_a_fresh_sort_at_every_pass(preset: str) -> None:
    p = make(preset)
    sim = Simulation(contended(seed=2, n_jobs=14), p, SimConfig(usage=BURSTY), 2)
    plain_schedule = p.schedule
    passes = []

    def checked() -> None:
        want = p._queue_order(np.flatnonzero(sim.status.waiting()))  # type: ignore[attr-defined]
        p._refresh_queue()  # type: ignore[attr-defined]
        kept = p._queue  # type: ignore[attr-defined]
        np.testing.assert_array_equal(kept[sim.status.g_pending[kept] > 0], want)
        passes.append(want.size)
        plain_schedule()

    p.schedule = checked  # type: ignore[method-assign]
    sim.run()
    assert len(passes) > 20 and max(passes) > 1  # many passes, some with several groups waiting
