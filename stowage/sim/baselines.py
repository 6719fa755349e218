"""The kube-scheduler-like baselines: kube-default, binpack, drf, load-aware, and ubis on top of them.

kube-scheduler places pods one at a time in queue order (PrioritySort), and a pod
that fits nowhere does not block the pods behind it. The Fit filter checks every
Kubernetes resource except disk and network bandwidth, which are not Kubernetes
resources. Score plugins: ``stowage.sim.scoring``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.policy import alignment, fairness
from stowage.sim import scoring
from stowage.sim.presets import OPP_TRUE, Preset

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["KubePreset"]


def _fits_somewhere(sim: Simulation, groups: NDArray[np.int64], fit_res: NDArray, free: NDArray) -> NDArray[np.bool_]:
    """Which of ``groups`` fit at least one node now, checked once per distinct demand shape."""
    present, which = np.unique(sim.g_shape[groups], return_inverse=True)
    fits = alignment.feasible(sim.shapes[present][:, fit_res], free[:, fit_res]).any(axis=1)
    return fits[which.reshape(-1)]


class KubePreset(Preset):
    """kube-scheduler: PrioritySort queue, Fit filter on Kubernetes resources, one Score plugin set."""

    def __init__(self, name: str, score: str, order: str = "priority", harvesting: bool = False) -> None:
        self.name, self.score, self.order, self.harvesting = name, score, order, harvesting

    def regular_resources(self, sim: Simulation) -> NDArray[np.bool_]:
        return sim.kube_resources

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        self._cm = [sim.resources.index("cpu"), sim.resources.index("memory")]
        self._to_u = np.array([1000.0, 1.0])
        self._cap_u = np.rint(sim.cluster.cap[:, self._cm] * self._to_u)
        self._tlp_sample_t = -math.inf
        self._tlp_measured = np.zeros(sim.cluster.n)
        self._tlp_binds: deque[tuple[float, int, float]] = deque()  # (time, node, predicted cpu)
        self._tlp_missing = np.zeros(sim.cluster.n)  # Σ predicted cpu of the binds above, per node

    def _scores(self, sim: Simulation, g: int) -> NDArray:
        c = sim.cluster
        if self.score in ("least", "most"):
            # Upstream's int64 milli-CPU and bytes: rounding once per quantity, as the API stores it.
            req_u = np.rint(c.reg_alloc[:, self._cm] * self._to_u)
            pod_u = np.rint(sim.g_demand[g, self._cm] * self._to_u)
            return scoring.kube_scores(req_u, self._cap_u, pod_u, self.score)
        pod = sim.g_demand[g, self._cm]
        # Trimaran: the load watcher reports every 60 s; pods bound since count at 1.5 × request.
        if sim.now - self._tlp_sample_t >= scoring.TLP_METRICS_INTERVAL_S:
            sim.monitor.sample()
            self._tlp_measured = c.usage[:, c.cpu].copy()
            self._tlp_sample_t = sim.now
        horizon = sim.now - scoring.TLP_METRICS_INTERVAL_S
        while self._tlp_binds and self._tlp_binds[0][0] <= horizon:
            _, n, cpu = self._tlp_binds.popleft()
            self._tlp_missing[n] -= cpu
        missing = np.maximum(self._tlp_missing, 0.0)
        return scoring.target_load_packing(self._tlp_measured, missing, c.cap[:, c.cpu], float(pod[0]))

    def _place_regular(self, sim: Simulation, g: int, free: NDArray[np.float64], fit_res: NDArray) -> bool:
        d = sim.g_demand[g]
        ok = (d[fit_res] <= free[:, fit_res] * (1 + 1e-9) + 1e-12).all(axis=1)
        if not ok.any():
            return False
        n = self._pick(self._scores(sim, g), ok)
        if n is None:
            return False
        sim.place(g, n, opp=False)
        free[n] -= d
        if self.score == "tlp":
            cpu = float(d[sim.cluster.cpu]) * scoring.TLP_REQUESTS_MULTIPLIER
            self._tlp_binds.append((sim.now, n, cpu))
            self._tlp_missing[n] += cpu
        return True

    def _queue_order(self, sim: Simulation, groups: NDArray[np.int64]) -> NDArray[np.int64]:
        key = np.lexsort((groups, sim.g_ready_at[groups], -sim.j_priority[sim.g_job[groups]]))
        return groups[key]

    def schedule(self, sim: Simulation) -> None:
        ready = sim.ready_groups()
        if ready.size == 0:
            return
        regular = ready[sim.j_opp[sim.g_job[ready]] != OPP_TRUE] if self.harvesting else ready
        if not sim.regular_changed:
            regular = regular[:0]  # only a monitor tick since the last pass: regular room is unchanged
        fit_res = self.regular_resources(sim)
        free = sim.regular_free()
        if regular.size:
            regular = regular[_fits_somewhere(sim, regular, fit_res, free)]
        if self.order == "drf":
            self._schedule_drf(sim, regular, free, fit_res)
        else:
            ordered = self._queue_order(sim, regular)
            demands = sim.g_demand[ordered]
            # Room only shrinks during a pass: a demand at least as big as one that failed fails too.
            # Failures are few (one per distinct shape at most), so mark the dominated groups all at once.
            skip = np.zeros(ordered.size, dtype=bool)
            for i, g in enumerate(ordered.tolist()):
                if skip[i]:
                    continue
                while sim.g_pending[g] > 0 and self._place_regular(sim, g, free, fit_res):
                    pass
                if sim.g_pending[g] > 0:
                    skip[i + 1 :] |= (demands[i + 1 :] >= demands[i]).all(axis=1)
        if self.harvesting:
            self._schedule_opportunistic(sim)

    def _schedule_drf(self, sim: Simulation, groups: NDArray[np.int64], free: NDArray, fit_res: NDArray) -> None:
        """DRF: the queue furthest below its share places its oldest job's next task."""
        ordered = np.array(sorted(groups.tolist(), key=lambda g: (sim.j_arrival[sim.g_job[g]], g)), dtype=np.int64)
        demands = sim.g_demand[ordered]
        # Room only shrinks during a pass: once a demand fits nowhere, every group at least as big is skipped.
        skip = np.zeros(ordered.size, dtype=bool)
        by_queue: list[deque[int]] = [deque() for _ in sim.queue_names]
        for i, g in enumerate(ordered.tolist()):
            by_queue[sim.g_queue[g]].append(i)
        total = sim.cluster.total * fit_res
        shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)
        while True:
            for queue in by_queue:
                while queue and skip[queue[0]]:
                    queue.popleft()
            eligible = np.array([bool(q) for q in by_queue])
            if not eligible.any():
                return
            # drf_pick's rule (lowest share, ties to the lowest index) on shares kept between placements.
            q = int(np.flatnonzero(eligible)[np.argmin(shares[eligible])])
            i = by_queue[q][0]
            g = int(ordered[i])
            if sim.g_pending[g] == 0:
                by_queue[q].popleft()
            elif not self._place_regular(sim, g, free, fit_res):
                by_queue[q].popleft()  # fits nowhere now: it does not block the queue
                skip[i:] |= (demands[i:] >= demands[i]).all(axis=1)
            else:
                shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)

    def _schedule_opportunistic(self, sim: Simulation) -> None:
        """UBIS: what did not fit regularly runs on harvested capacity, in queue order."""
        ready = sim.ready_groups()
        ready = ready[self._opp_eligible(sim, ready)]
        if ready.size == 0:
            return
        avail = self._harvestable(sim)
        ready = ready[alignment.feasible(sim.g_demand[ready], avail).any(axis=1)]
        c = sim.cluster
        inv = np.divide(1.0, c.cap, out=np.zeros_like(c.cap), where=c.cap > 0)
        failed: list[NDArray[np.float64]] = []  # as in the regular pass: room only shrinks
        for g in self._queue_order(sim, ready):
            d = sim.g_demand[g]
            if failed and (np.array(failed) <= d).all(axis=1).any():
                continue
            while sim.g_pending[g] > 0:
                ok = alignment.feasible(d, avail)
                if not ok.any():
                    failed.append(d)
                    break
                # Spread like LeastAllocated, on the harvestable room.
                n = self._pick(((avail - d) * inv).sum(axis=1), ok)
                assert n is not None
                sim.place(int(g), n, opp=True)
                avail[n] = np.maximum(avail[n] - d, 0.0)
