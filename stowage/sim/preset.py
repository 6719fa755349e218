"""What every simulator preset is: the hooks the engine calls and the helpers they share.

The named presets and how to make one are in :mod:`stowage.sim.presets`; the kube-like ones in
:mod:`stowage.sim.baselines`, the packing ones (``tetris``, ``stowage``) in :mod:`stowage.sim.packing`.
This module imports none of them, so each imports it without a cycle.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.policy import room

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["Preset", "View"]


class View:
    """What a preset reads and changes: what a cluster knows, never the simulated truth.

    The submitted work (``spec``), its progress (``status``), the nodes (``cluster``: capacity, allocations,
    the monitor's usage sample) and the running tasks (``running``: a preset reads their group, node, start and
    pool). True durations only as ``oracle_durations``, under ``SimConfig.oracle_durations`` (else None).
    """

    __slots__ = ("_sim", "cluster", "oracle_durations", "rng", "running", "settings", "spec", "status")

    def __init__(self, sim: Simulation) -> None:
        self._sim, self.spec, self.status, self.cluster = sim, sim.spec, sim.status, sim.cluster
        self.running, self.settings, self.rng = sim.running, sim.settings, sim.rng
        self.oracle_durations = sim.truth.g_dur if sim.config.oracle_durations else None

    now = property(lambda self: self._sim.now, doc="The simulated time.")
    regular_changed = property(lambda self: self._sim.regular_changed,
                               doc="Regular capacity freed or new work since the last pass.")

    def promote(self, rows: NDArray[np.int64]) -> None:
        """Make running opportunistic rows (of ``running``) regular in place."""
        self._sim.promote(rows)

    def place(self, g: int, n: int, opp: bool) -> None:
        """Start a task of group ``g`` on node ``n`` (as opportunistic if ``opp``)."""
        self._sim.place(g, n, opp)

    def seen_at(self, window_s: float) -> NDArray[np.float64]:
        """(P,) when each running row is first seen by :meth:`sustained_use`: its start + ramp-up + one window."""
        return self.running.start + self._sim.usage_model.ramp_s + window_s

    def sustained_use(self, window_s: float) -> NDArray[np.float64]:
        """(P, R) each running row's sustained disk and network use as the node monitor's per-pod series show it
        (``policy.use_estimates``): its use averaged over ``window_s``, the highest such average so far; NaN on the
        other columns and for rows that have not run their ramp-up and one window yet (not seen).

        The usage model (``sim.usage``) gives a row a steady I/O fraction ``u`` after its ramp-up and bursts to its
        whole demand for ``burst_s``; the highest window average with one burst in it is ``u + (1 − u)·b/W``
        (``b = min(burst_s, W)``). What the row used, never what it will use: the rest of its life is unknown."""
        sim, run = self._sim, self.running
        model, spec = sim.usage_model, self.spec
        out = np.full((len(run), len(spec.resources)), np.nan)
        if not len(run) or window_s <= 0:
            return out
        seen = self.seen_at(window_s) <= self.now
        if not seen.any():
            return out
        u = run.io_base[seen]
        burst = min(model.burst_s, window_s) / window_s if model.burst_rate_per_s > 0 else 0.0
        frac = np.minimum(u + (1.0 - u) * burst, 1.0)
        io = spec.io_resources
        rows = np.flatnonzero(seen)
        out[np.ix_(rows, np.flatnonzero(io))] = spec.g_demand[run.group[rows]][:, io] * frac[:, None]
        return out

    def usage(self, max_age_s: float) -> NDArray[np.float64]:
        """``cluster.usage``, sampled again by the node monitor if its sample is ``max_age_s`` old or older."""
        monitor = self._sim.monitor
        if self.now - monitor.last_sample >= max_age_s:
            monitor.sample()
        return self.cluster.usage


class Preset:
    """Base: hooks the engine calls, and shared helpers."""

    name = "base"
    harvesting = False

    def attach(self, view: View) -> None:
        self.view = view

    def regular_resources(self) -> NDArray[np.bool_]:
        """Resources checked when fitting a regular pod."""
        return np.ones(len(self.view.spec.resources), dtype=bool)

    def wake_at(self) -> float:
        """When the preset's view next changes with no event of its own, so a pass is due then (``inf``: never)."""
        return math.inf

    def on_job_arrived(self, j: int) -> None: ...
    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64],
                    rows: NDArray[np.int64] | None = None) -> None:
        """Tasks finished: their groups, run times and (``rows``) their rows of ``View.running``, still there."""

    def schedule(self) -> None:
        """One pass: place what fits with ``self.view.place``."""
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
        return int(best[self.view.rng.integers(best.size)])

    def _harvestable(self) -> NDArray[np.float64]:
        """``A_opp`` per node (UBIS Alg. 1 l.21), from a fresh-enough monitor sample, by the cluster's rule
        (:mod:`stowage.policy.room`): every running task until the monitor's latest sample includes it."""
        v = self.view
        c, settings = v.cluster, v.settings
        period = settings.contention.sample_interval_s
        usage = v.usage(period)  # sampled again when a period old: always fresh, and a finished task is gone
        run = v.running  # every running row, regular or opportunistic: any new task's usage lags U
        sampled = np.full(c.n, v._sim.monitor.last_sample)
        assumed = room.assumed_usage(v.spec.g_demand[run.group], run.start, run.start, run.node, sampled, v.now,
                                     ramp_up_s=settings.harvest.ramp_up_s, period_s=period)
        return room.harvested_room(c.cap, usage, np.ones(c.n, dtype=bool), c.blocked, assumed,
                                   settings.harvest.t_alloc.array(c.resources), c.harvest)
