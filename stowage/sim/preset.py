"""What every simulator preset is: the hooks the engine calls and the helpers they share.

The named presets and how to make one are in :mod:`stowage.sim.presets`; the kube-like ones in
:mod:`stowage.sim.baselines`, the packing ones (``tetris``, ``stowage``) in :mod:`stowage.sim.packing`.
This module imports none of them, so each imports it without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.policy import decide, harvest

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["OPP_AUTO", "OPP_FALSE", "OPP_TRUE", "Preset"]

# JobSpec.opportunistic as the engine codes it: the decision's intent codes
OPP_FALSE, OPP_AUTO, OPP_TRUE = decide.INTENT_FALSE, decide.INTENT_AUTO, decide.INTENT_TRUE


class Preset:
    """Base: hooks the engine calls, and shared helpers."""

    name = "base"
    harvesting = False

    def attach(self, sim: Simulation) -> None:
        self.sim = sim

    def regular_resources(self, sim: Simulation) -> NDArray[np.bool_]:
        """Resources checked when fitting a regular pod."""
        return np.ones(len(sim.resources), dtype=bool)

    def on_job_arrived(self, j: int) -> None: ...
    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64]) -> None: ...

    def schedule(self, sim: Simulation) -> None:
        raise NotImplementedError

    # --- helpers ---------------------------------------------------------------------------------

    def _pick(self, scores: NDArray, ok: NDArray[np.bool_]) -> int | None:
        """Highest-scoring feasible node; ties at random like kube's selectHost."""
        if not ok.any():
            return None
        s = np.where(ok, scores, -np.inf)
        best = np.flatnonzero(s == s.max())
        if best.size == 1:
            return int(best[0])
        return int(best[self.sim.rng.integers(best.size)])

    def _harvestable(self, sim: Simulation) -> NDArray[np.float64]:
        """``A_opp`` per node (UBIS Alg. 1 l.21), from a fresh-enough monitor sample."""
        c = sim.cluster
        if sim.now - sim.monitor.last_sample >= sim.settings.contention.sample_interval_s:
            sim.monitor.sample()
        run = sim.running  # every running row, regular or opportunistic: any new task's usage lags U
        assumed = harvest.assumed(
            sim.g_demand[run.group], run.start, run.node, sim.now, sim.settings.harvest.ramp_up_s, c.n,
        )
        a = harvest.harvestable(c.cap, c.usage, c.blocked, assumed, sim.settings.harvest.t_alloc.array(sim.resources))
        a[~c.harvest] = 0.0
        return a
