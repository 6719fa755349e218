"""The kube-scheduler-like baselines: kube-default, binpack, drf, load-aware, and ubis on top of them.

kube-scheduler places pods one at a time in queue order (PrioritySort), and a pod
that fits nowhere does not block the pods behind it. The Fit filter checks every
Kubernetes resource except disk and network bandwidth, which are not Kubernetes
resources. Score plugins: ``stowage.sim.scoring``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.policy import alignment, fairness
from stowage.sim import scoring
from stowage.sim.preset import OPP_FALSE, OPP_TRUE, Preset

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["KubePreset"]


def _fitting(sim: Simulation, groups: NDArray[np.int64], fit_res: NDArray | None, free: NDArray
             ) -> NDArray[np.int64]:
    """Those of ``groups`` (in order) whose demand shape fits at least one node of ``free`` on the resources
    ``fit_res`` (None: all of them)."""
    shapes = sim.clamped_shapes
    if fit_res is not None:
        free, shapes = free[:, fit_res], shapes[:, fit_res]
    fits = alignment.feasible_clamped(shapes, free).any(axis=1)
    return groups if fits.all() else groups[fits[sim.g_shape[groups]]]


def _spread_scores(avail: NDArray[np.float64], d: NDArray[np.float64], inv_cap: NDArray[np.float64]
                   ) -> NDArray[np.float64]:
    """The opportunistic pass's spread score per node (rows of ``avail``): LeastAllocated on the harvestable room."""
    return ((avail - d) * inv_cap).sum(axis=1)


class _PassNodes:
    """Each node's Fit verdict and score per demand shape during one regular pass.

    Worked out for every node the first time a shape is tried; a placement changes one node's free
    room and requests, so only the nodes placed on since are worked out again (by the same function).
    """

    def __init__(self, preset: KubePreset, sim: Simulation, free: NDArray[np.float64]) -> None:
        self.preset, self.sim, self.free = preset, sim, free
        self.by_shape: dict[int, tuple[NDArray[np.bool_], NDArray[np.float64], set[int]]] = {}

    def get(self, shape: int) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        entry = self.by_shape.get(shape)
        if entry is None:
            ok, scores = self.preset._fit_and_score(self.sim, shape, self.free, slice(None))
            self.by_shape[shape] = (ok, scores, set())
            return ok, scores
        ok, scores, stale = entry
        if stale:
            rows = np.fromiter(stale, dtype=np.int64, count=len(stale))
            ok[rows], scores[rows] = self.preset._fit_and_score(self.sim, shape, self.free, rows)
            stale.clear()
        return ok, scores

    def placed(self, n: int) -> None:
        for _, _, stale in self.by_shape.values():
            stale.add(n)


def _live_rows(alive: NDArray[np.bool_], shape_of: NDArray[np.int64], start: int) -> Iterator[int]:
    """Positions from ``start`` on whose demand shape has not failed yet in this pass, found lazily.

    A pass usually stops at the next failure, a few rows on, while thousands of groups wait: rows are
    looked at in doubling chunks instead of all at once. The caller starts over after a failure
    (``alive`` changed); the chunks read ``alive`` as it is when they are taken.
    """
    n, chunk = shape_of.shape[0], 32
    while start < n and alive.any():
        end = min(start + chunk, n)
        yield from (np.flatnonzero(alive[shape_of[start:end]]) + start).tolist()
        start, chunk = end, chunk * 2


def _in_order(sim: Simulation, ordered: NDArray[np.int64], fill: Callable[[int], None]) -> None:
    """``fill(g)`` for the groups of ``ordered`` in turn, skipping those whose demand shape failed in this pass.

    Room only shrinks during a pass: a demand at least as big as one that failed (its group still has tasks
    waiting after ``fill``) fails too, so a failure kills its shape and every bigger one for the rest of the
    pass (at most one failure per distinct shape); the pass ends when no live shape is left.
    """
    shapes, shape_of = sim.shapes, sim.g_shape[ordered]
    alive = np.bincount(shape_of, minlength=len(shapes)) > 0
    todo = _live_rows(alive, shape_of, 0)
    while todo:
        for i in todo:
            g = int(ordered[i])
            fill(g)
            if sim.g_pending[g] > 0:
                alive &= ~(shapes >= shapes[shape_of[i]]).all(axis=1)
                todo = _live_rows(alive, shape_of, i + 1)
                break
        else:
            todo = []

class KubePreset(Preset):
    """kube-scheduler: PrioritySort queue, Fit filter on Kubernetes resources, one Score plugin set."""

    def __init__(self, name: str, score: str, order: str = "priority", harvesting: bool = False) -> None:
        self.name, self.score, self.order, self.harvesting = name, score, order, harvesting

    def regular_resources(self, sim: Simulation) -> NDArray[np.bool_]:
        return sim.kube_resources

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        self._cm = [sim.resources.index("cpu"), sim.resources.index("memory")]
        self._cap_u = scoring.to_units(sim.cluster.cap[:, self._cm])
        self._shape_u = scoring.to_units(sim.shapes[:, self._cm])  # each demand shape's pod request
        self._tlp_sample_t = -math.inf
        self._tlp_measured = np.zeros(sim.cluster.n)
        self._tlp_binds: deque[tuple[float, int, float]] = deque()  # (time, node, predicted cpu)
        self._tlp_missing = np.zeros(sim.cluster.n)  # Σ predicted cpu of the binds above, per node
        # Every group in DRF's order inside a queue: its job's arrival, then the group index.
        self._drf_rank = np.lexsort((np.arange(sim.n_groups), sim.j_arrival[sim.g_job]))
        self._queue = np.zeros(0, dtype=np.int64)  # open, unfinished groups in queue order
        self._opened = 0  # how many groups were open when ``_queue`` was sorted
        self._queue_regular = self._queue_opp = self._queue  # with harvesting: those of _queue that may run so
        # Static per group: may it run regular (not opportunistic: true), may it run opportunistically.
        self._regular_ok = sim.j_opp[sim.g_job] != OPP_TRUE
        self._opp_ok = (sim.j_opp[sim.g_job] != OPP_FALSE) & sim.q_opp[sim.g_queue]
        self._fit_shapes = sim.clamped_shapes[:, self.regular_resources(sim)]
        self._pass_nodes: _PassNodes | None = None  # the current regular pass's verdicts and scores
        cap = sim.cluster.cap
        self._inv_cap = np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0)  # capacity never changes

    def _scores(self, sim: Simulation, g: int) -> NDArray:
        """load-aware's Trimaran scores for ``g`` on every node (the kube strategies' come from ``_PassNodes``)."""
        c = sim.cluster
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

    def _fit_and_score(self, sim: Simulation, shape: int, free: NDArray[np.float64],
                       rows: slice | NDArray[np.int64]) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """(Fit verdict, score) of demand ``shape`` on nodes ``rows``; the score only for the kube strategies
        (load-aware's is worked out per placement, ``_scores``)."""
        room = free[rows][:, self.regular_resources(sim)]
        ok = alignment.feasible_clamped(self._fit_shapes[shape : shape + 1], room)[0]
        if self.score not in ("least", "most"):
            return ok, np.zeros(ok.shape)
        # Upstream's int64 milli-CPU and bytes: rounding once per quantity, as the API stores it.
        req_u = scoring.to_units(sim.cluster.reg_alloc[rows][:, self._cm])
        fit, balanced = scoring.plugin_scores(req_u, self._cap_u[rows], self._shape_u[shape], self.score)
        return ok, fit + balanced

    def _place_regular(self, sim: Simulation, g: int, free: NDArray[np.float64], fit_res: NDArray) -> bool:
        """Place one task of ``g`` on its best node that fits ``free`` (the pass's room, updated here)."""
        d = sim.g_demand[g]
        nodes = self._pass_nodes
        if nodes is None or nodes.free is not free:  # the first try of a pass (each pass has a new ``free``)
            nodes = self._pass_nodes = _PassNodes(self, sim, free)
        ok, scores = nodes.get(int(sim.g_shape[g]))
        n = self._pick(self._scores(sim, g) if self.score == "tlp" else scores, ok)
        if n is None:
            return False
        sim.place(g, n, opp=False)
        free[n] -= d
        nodes.placed(n)
        if self.score == "tlp":
            cpu = float(d[sim.cluster.cpu]) * scoring.TLP_REQUESTS_MULTIPLIER
            self._tlp_binds.append((sim.now, n, cpu))
            self._tlp_missing[n] += cpu
        return True

    def _queue_order(self, sim: Simulation, groups: NDArray[np.int64]) -> NDArray[np.int64]:
        key = np.lexsort((groups, sim.g_ready_at[groups], -sim.j_priority[sim.g_job[groups]]))
        return groups[key]

    def _refresh_queue(self, sim: Simulation) -> None:
        """Sort the open, unfinished groups again if one opened; with harvesting, also the ones that may run
        regular and the ones that may run opportunistically (static per group).

        A group's key (priority, when its barrier opened, index) never changes once it is open, so between
        two openings filtering ``_queue`` by waiting tasks is ``_queue_order(sim.ready_groups())`` without a
        sort per pass.
        """
        opened = int(np.count_nonzero(sim.g_ready))
        if opened != self._opened:
            self._opened = opened
            self._queue = q = self._queue_order(sim, np.flatnonzero(sim.g_ready & (sim.g_done < sim.g_tasks)))
            if self.harvesting:
                self._queue_regular, self._queue_opp = q[self._regular_ok[q]], q[self._opp_ok[q]]

    def schedule(self, sim: Simulation) -> None:
        self._refresh_queue(sim)
        q = self._queue_regular if self.harvesting else self._queue
        # After only a monitor tick since the last pass, regular room is unchanged: no regular try.
        regular = q[sim.g_pending[q] > 0] if sim.regular_changed else q[:0]
        if regular.size == 0 and not self.harvesting:
            return
        fit_res = self.regular_resources(sim)
        free = sim.regular_free()
        if regular.size:
            regular = _fitting(sim, regular, fit_res, free)
        if self.order == "drf":
            self._schedule_drf(sim, regular, free, fit_res)
        else:
            def fill(g: int) -> None:
                while sim.g_pending[g] > 0 and self._place_regular(sim, g, free, fit_res):
                    pass

            _in_order(sim, regular, fill)  # filtering kept the queue order
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
        chosen = np.zeros(sim.n_groups, dtype=bool)
        chosen[groups] = True
        ordered = self._drf_rank[chosen[self._drf_rank]]  # groups in DRF order, without a sort per pass
        shapes, shape_of = sim.shapes, sim.g_shape[ordered]
        alive = np.bincount(shape_of, minlength=len(shapes)) > 0  # as in _in_order
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
        shares: NDArray[np.float64] | None = None  # None: a placement changed them since they were last needed
        while True:
            eligible = np.array([h < len(rows) for h, rows in zip(head, by_queue, strict=True)])
            if not eligible.any():
                return
            # drf_pick's rule (lowest share, ties to the lowest index) on shares kept between placements;
            # with one queue eligible the shares cannot change the pick, so they wait until needed.
            live = np.flatnonzero(eligible)
            if live.size == 1:
                q = int(live[0])
            else:
                if shares is None:
                    shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)
                q = int(live[np.argmin(shares[eligible])])
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
                shares = None

    def _schedule_opportunistic(self, sim: Simulation) -> None:
        """UBIS: what did not fit regularly runs on harvested capacity, in queue order."""
        # The kept queue order (``_refresh_queue``, by this pass's regular part) filtered by waiting tasks.
        q = self._queue_opp
        ready = q[sim.g_pending[q] > 0]
        if ready.size == 0:
            return
        avail = self._harvestable(sim)
        inv = self._inv_cap

        def fill(g: int) -> None:
            """Spread like LeastAllocated, on the harvestable room, while some node fits."""
            d = sim.g_demand[g]
            clamped = sim.clamped_shapes[sim.g_shape[g] : sim.g_shape[g] + 1]
            ok = alignment.feasible_clamped(clamped, avail)[0]  # = alignment.feasible(d, avail)
            score = _spread_scores(avail, d, inv)
            while sim.g_pending[g] > 0 and ok.any():
                n = self._pick(score, ok)
                assert n is not None
                sim.place(g, n, opp=True)
                avail[n] = np.maximum(avail[n] - d, 0.0)
                # Only node n's room changed: its verdict and score again.
                ok[n : n + 1] = alignment.feasible_clamped(clamped, avail[n : n + 1])[0]
                score[n : n + 1] = _spread_scores(avail[n : n + 1], d, inv[n : n + 1])

        _in_order(sim, _fitting(sim, ready, None, avail), fill)  # as in the regular pass: room only shrinks
