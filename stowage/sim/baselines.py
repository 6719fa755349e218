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


def _live_rows(alive: NDArray[np.bool_], shape_of: NDArray[np.int64], start: int) -> list[int]:
    """Positions from ``start`` on whose demand shape has not failed yet in this pass."""
    return (np.flatnonzero(alive[shape_of[start:]]) + start).tolist()


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
        self._drf_rank_cache: NDArray[np.int64] | None = None

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
            present, shape_of = np.unique(sim.g_shape[ordered], return_inverse=True)
            shape_of = shape_of.reshape(-1)
            shapes = sim.shapes[present]
            # Room only shrinks during a pass: a demand at least as big as one that failed fails too,
            # so a failure kills its shape and every bigger one for the rest of the pass (at most one
            # failure per distinct shape); the pass ends when no live shape is left.
            alive = np.ones(present.size, dtype=bool)
            todo = _live_rows(alive, shape_of, 0)
            while todo:
                for i in todo:
                    g = int(ordered[i])
                    while sim.g_pending[g] > 0 and self._place_regular(sim, g, free, fit_res):
                        pass
                    if sim.g_pending[g] > 0:
                        alive &= ~(shapes >= shapes[shape_of[i]]).all(axis=1)
                        todo = _live_rows(alive, shape_of, i + 1)
                        break
                else:
                    todo = []
        if self.harvesting:
            self._schedule_opportunistic(sim)

    def _schedule_drf(self, sim: Simulation, groups: NDArray[np.int64], free: NDArray, fit_res: NDArray) -> None:
        """DRF: the queue furthest below its share places its oldest job's next task.

        Each queue's head is its first group (oldest job first) whose demand shape is still alive.
        Room only shrinks during a pass, so once a demand fits nowhere every shape at least as big
        fails too (a failed try changes nothing): those shapes die for the rest of the pass, and the
        pass ends as soon as no queue has a live group left, however many groups are pending.
        """
        if groups.size == 0:
            return
        ordered = groups[np.argsort(self._drf_rank(sim)[groups], kind="stable")]
        present, shape_of = np.unique(sim.g_shape[ordered], return_inverse=True)
        shape_of = shape_of.reshape(-1)
        shapes = sim.shapes[present]
        alive = np.ones(present.size, dtype=bool)
        queues = sim.g_queue[ordered]
        by_queue = [np.flatnonzero(queues == q) for q in range(len(sim.queue_names))]
        head = [0] * len(by_queue)  # index into by_queue[q]; len(...) once the queue is done

        def advance(q: int, start: int) -> None:
            rows = by_queue[q][start:]
            live = alive[shape_of[rows]]
            k = int(np.argmax(live)) if live.size else 0
            head[q] = start + k if live.size and live[k] else len(by_queue[q])

        for q in range(len(by_queue)):
            advance(q, 0)
        total = sim.cluster.total * fit_res
        shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)
        while True:
            eligible = np.array([h < len(rows) for h, rows in zip(head, by_queue, strict=True)])
            if not eligible.any():
                return
            # drf_pick's rule (lowest share, ties to the lowest index) on shares kept between placements.
            q = int(np.flatnonzero(eligible)[np.argmin(shares[eligible])])
            i = int(by_queue[q][head[q]])
            g = int(ordered[i])
            if sim.g_pending[g] == 0:
                advance(q, head[q] + 1)
            elif not self._place_regular(sim, g, free, fit_res):
                alive &= ~(shapes >= shapes[shape_of[i]]).all(axis=1)
                for other, rows in enumerate(by_queue):
                    if head[other] < len(rows) and not alive[shape_of[rows[head[other]]]]:
                        advance(other, head[other])
            else:
                shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)

    def _drf_rank(self, sim: Simulation) -> NDArray[np.int64]:
        """Each group's place in DRF's order inside a queue: its job's arrival, then the group index."""
        if self._drf_rank_cache is None:
            order = np.lexsort((np.arange(sim.n_groups), sim.j_arrival[sim.g_job]))
            self._drf_rank_cache = np.empty(sim.n_groups, dtype=np.int64)
            self._drf_rank_cache[order] = np.arange(sim.n_groups)
        return self._drf_rank_cache

    def _schedule_opportunistic(self, sim: Simulation) -> None:
        """UBIS: what did not fit regularly runs on harvested capacity, in queue order."""
        ready = sim.ready_groups()
        ready = ready[self._opp_eligible(sim, ready)]
        if ready.size == 0:
            return
        avail = self._harvestable(sim)
        ready = ready[_fits_somewhere(sim, ready, np.ones(len(sim.resources), dtype=bool), avail)]
        c = sim.cluster
        inv = np.divide(1.0, c.cap, out=np.zeros_like(c.cap), where=c.cap > 0)
        ordered = self._queue_order(sim, ready)
        present, shape_of = np.unique(sim.g_shape[ordered], return_inverse=True)
        shape_of = shape_of.reshape(-1)
        shapes = sim.shapes[present]
        alive = np.ones(present.size, dtype=bool)  # as in the regular pass: room only shrinks
        todo = _live_rows(alive, shape_of, 0)
        while todo:
            for i in todo:
                g = int(ordered[i])
                d = sim.g_demand[g]
                failed = False
                while sim.g_pending[g] > 0:
                    ok = alignment.feasible(d, avail)
                    if not ok.any():
                        failed = True
                        break
                    # Spread like LeastAllocated, on the harvestable room.
                    n = self._pick(((avail - d) * inv).sum(axis=1), ok)
                    assert n is not None
                    sim.place(g, n, opp=True)
                    avail[n] = np.maximum(avail[n] - d, 0.0)
                if failed:
                    alive &= ~(shapes >= d).all(axis=1)
                    todo = _live_rows(alive, shape_of, i + 1)
                    break
            else:
                todo = []
