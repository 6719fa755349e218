"""The kube-scheduler-like baselines: kube-default, binpack, drf, load-aware, and ubis on top of them.

kube-scheduler places pods one at a time in queue order (PrioritySort), and a pod that fits nowhere does not block
the pods behind it. The Fit filter checks every Kubernetes resource except disk and network bandwidth, which are not
Kubernetes resources. Score plugins: ``stowage.sim.scoring``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from stowage.policy import alignment, decide, fairness
from stowage.sim import scoring
from stowage.sim.preset import Preset, View
from stowage.sim.tables import Spec

__all__ = ["KubePreset"]


def _fitting(spec: Spec, groups: NDArray[np.int64], fit_res: NDArray | None, free: NDArray
             ) -> NDArray[np.int64]:
    """Those of ``groups`` (in order) whose demand shape fits at least one node of ``free`` on the resources
    ``fit_res`` (None: all of them)."""
    shapes = spec.clamped_shapes
    if fit_res is not None:
        free, shapes = free[:, fit_res], shapes[:, fit_res]
    fits = alignment.feasible_clamped(shapes, free).any(axis=1)
    return groups if fits.all() else groups[fits[spec.g_shape[groups]]]


def _spread_scores(avail: NDArray[np.float64], d: NDArray[np.float64], inv_cap: NDArray[np.float64]
                   ) -> NDArray[np.float64]:
    """The opportunistic pass's spread score per node (rows of ``avail``): LeastAllocated on the harvestable room."""
    return ((avail - d) * inv_cap).sum(axis=1)


class _PassNodes:
    """Each node's Fit verdict and score per demand shape during one regular pass.

    Worked out for every node the first time a shape is tried; a placement changes one node's free
    room and requests, so only the nodes placed on since are worked out again (by the same function).
    """

    def __init__(self, preset: KubePreset, free: NDArray[np.float64]) -> None:
        self.preset, self.free = preset, free
        self.by_shape: dict[int, tuple[NDArray[np.bool_], NDArray[np.float64], set[int]]] = {}

    def get(self, shape: int) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        entry = self.by_shape.get(shape)
        if entry is None:
            ok, scores = self.preset._fit_and_score(shape, self.free, slice(None))
            self.by_shape[shape] = (ok, scores, set())
            return ok, scores
        ok, scores, stale = entry
        if stale:
            rows = np.fromiter(stale, dtype=np.int64, count=len(stale))
            ok[rows], scores[rows] = self.preset._fit_and_score(shape, self.free, rows)
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


def _in_order(spec: Spec, pending: NDArray[np.int64], ordered: NDArray[np.int64], fill: Callable[[int], None]
              ) -> None:
    """``fill(g)`` for the groups of ``ordered`` in turn, skipping those whose demand shape failed in this pass.

    Room only shrinks during a pass: a demand at least as big as one that failed (its group still has tasks
    ``pending`` after ``fill``) fails too, so a failure kills its shape and every bigger one for the rest of the
    pass (at most one failure per distinct shape); the pass ends when no live shape is left.
    """
    shapes, shape_of = spec.shapes, spec.g_shape[ordered]
    alive = np.bincount(shape_of, minlength=len(shapes)) > 0
    todo = _live_rows(alive, shape_of, 0)
    while todo:
        for i in todo:
            g = int(ordered[i])
            fill(g)
            if pending[g] > 0:
                alive &= ~(shapes >= shapes[shape_of[i]]).all(axis=1)
                todo = _live_rows(alive, shape_of, i + 1)
                break
        else:
            todo = []

class KubePreset(Preset):
    """kube-scheduler: PrioritySort queue, Fit filter on Kubernetes resources, one Score plugin set."""

    def __init__(self, name: str, score: str, order: str = "priority", harvesting: bool = False) -> None:
        self.name, self.score, self.order, self.harvesting = name, score, order, harvesting

    def regular_resources(self) -> NDArray[np.bool_]:
        return self.view.spec.kube_resources

    def attach(self, view: View) -> None:
        super().attach(view)
        spec, c = view.spec, view.cluster
        self._cm = [spec.resources.index("cpu"), spec.resources.index("memory")]
        self._cap_u = scoring.to_units(c.cap[:, self._cm])
        self._shape_u = scoring.to_units(spec.shapes[:, self._cm])  # each demand shape's pod request
        self._tlp_sample_t = -math.inf
        self._tlp_measured = np.zeros(c.n)
        self._tlp_binds: deque[tuple[float, int, float]] = deque()  # (time, node, predicted cpu)
        self._tlp_missing = np.zeros(c.n)  # Σ predicted cpu of the binds above, per node
        # Every group in DRF's order inside a queue: its job's arrival, then the group index.
        self._drf_rank = np.lexsort((np.arange(spec.n_groups), spec.j_arrival[spec.g_job]))
        self._queue = np.zeros(0, dtype=np.int64)  # open, unfinished groups in queue order
        self._opened = 0  # how many groups were open when ``_queue`` was sorted
        self._queue_regular = self._queue_opp = self._queue  # with harvesting: those of _queue that may run so
        # Static per group: may it run regular (not opportunistic: true), may it run opportunistically.
        self._regular_ok = spec.j_opp[spec.g_job] != decide.INTENT_TRUE
        self._opp_ok = (spec.j_opp[spec.g_job] != decide.INTENT_FALSE) & spec.q_opp[spec.g_queue]
        self._fit_shapes = spec.clamped_shapes[:, self.regular_resources()]
        self._pass_nodes: _PassNodes | None = None  # the current regular pass's verdicts and scores
        cap = c.cap
        self._inv_cap = np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0)  # capacity never changes

    def _scores(self, g: int) -> NDArray:
        """load-aware's Trimaran scores for ``g`` on every node (the kube strategies' come from ``_PassNodes``)."""
        v = self.view
        c = v.cluster
        pod = v.spec.g_demand[g, self._cm]
        # Trimaran: the load watcher reports every 60 s; pods bound since count at 1.5 × request.
        if v.now - self._tlp_sample_t >= scoring.TLP_METRICS_INTERVAL_S:
            self._tlp_measured = v.usage(0.0)[:, c.cpu].copy()  # max age 0: the load watcher's sample, now
            self._tlp_sample_t = v.now
        horizon = v.now - scoring.TLP_METRICS_INTERVAL_S
        while self._tlp_binds and self._tlp_binds[0][0] <= horizon:
            _, n, cpu = self._tlp_binds.popleft()
            self._tlp_missing[n] -= cpu
        missing = np.maximum(self._tlp_missing, 0.0)
        return scoring.target_load_packing(self._tlp_measured, missing, c.cap[:, c.cpu], float(pod[0]))

    def _fit_and_score(self, shape: int, free: NDArray[np.float64],
                       rows: slice | NDArray[np.int64]) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """(Fit verdict, score) of demand ``shape`` on nodes ``rows``; the score only for the kube strategies
        (load-aware's is worked out per placement, ``_scores``)."""
        room = free[rows][:, self.regular_resources()]
        ok = alignment.feasible_clamped(self._fit_shapes[shape : shape + 1], room)[0]
        if self.score not in ("least", "most"):
            return ok, np.zeros(ok.shape)
        # Upstream's int64 milli-CPU and bytes: rounding once per quantity, as the API stores it.
        req_u = scoring.to_units(self.view.cluster.reg_alloc[rows][:, self._cm])
        fit, balanced = scoring.plugin_scores(req_u, self._cap_u[rows], self._shape_u[shape], self.score)
        return ok, fit + balanced

    def _place_regular(self, g: int, free: NDArray[np.float64], fit_res: NDArray) -> bool:
        """Place one task of ``g`` on its best node that fits ``free`` (the pass's room, updated here)."""
        v = self.view
        d = v.spec.g_demand[g]
        nodes = self._pass_nodes
        if nodes is None or nodes.free is not free:  # the first try of a pass (each pass has a new ``free``)
            nodes = self._pass_nodes = _PassNodes(self, free)
        ok, scores = nodes.get(int(v.spec.g_shape[g]))
        n = self._pick(self._scores(g) if self.score == "tlp" else scores, ok)
        if n is None:
            return False
        v.place(g, n, opp=False)
        free[n] -= d
        nodes.placed(n)
        if self.score == "tlp":
            cpu = float(d[v.cluster.cpu]) * scoring.TLP_REQUESTS_MULTIPLIER
            self._tlp_binds.append((v.now, n, cpu))
            self._tlp_missing[n] += cpu
        return True

    def _queue_order(self, groups: NDArray[np.int64]) -> NDArray[np.int64]:
        spec = self.view.spec
        return groups[np.lexsort((groups, self.view.status.g_ready_at[groups], -spec.j_priority[spec.g_job[groups]]))]

    def _refresh_queue(self) -> None:
        """Sort the open, unfinished groups again if one opened; with harvesting, also the ones that may run
        regular and the ones that may run opportunistically (static per group).

        A group's key (priority, when its barrier opened, index) never changes once it is open, so between
        two openings filtering ``_queue`` by waiting tasks is ``_queue_order`` of the waiting groups without
        a sort per pass.
        """
        spec, st = self.view.spec, self.view.status
        opened = int(np.count_nonzero(st.g_ready))
        if opened != self._opened:
            self._opened = opened
            self._queue = q = self._queue_order(np.flatnonzero(st.g_ready & (st.g_done < spec.g_tasks)))
            if self.harvesting:
                self._queue_regular, self._queue_opp = q[self._regular_ok[q]], q[self._opp_ok[q]]

    def schedule(self) -> None:
        v, spec, st = self.view, self.view.spec, self.view.status
        self._refresh_queue()
        q = self._queue_regular if self.harvesting else self._queue
        # After only a monitor tick since the last pass, regular room is unchanged: no regular try.
        regular = q[st.g_pending[q] > 0] if v.regular_changed else q[:0]
        if regular.size == 0 and not self.harvesting:
            return
        fit_res = self.regular_resources()
        free = v.cluster.regular_free()
        if regular.size:
            regular = _fitting(spec, regular, fit_res, free)
        if self.order == "drf":
            self._schedule_drf(regular, free, fit_res)
        else:
            def fill(g: int) -> None:
                while st.g_pending[g] > 0 and self._place_regular(g, free, fit_res):
                    pass

            _in_order(spec, st.g_pending, regular, fill)  # filtering kept the queue order
        if self.harvesting:
            self._schedule_opportunistic()

    def _schedule_drf(self, groups: NDArray[np.int64], free: NDArray, fit_res: NDArray) -> None:
        """DRF: the queue furthest below its share places its oldest job's next task.

        Each queue's head is its first group (oldest job first) whose demand shape is still alive.
        Room only shrinks during a pass, so once a demand fits nowhere every shape at least as big
        fails too (a failed try changes nothing): those shapes die for the rest of the pass, and the
        pass ends as soon as no queue has a live group left, however many groups are pending.
        """
        v, spec, st = self.view, self.view.spec, self.view.status
        if groups.size == 0:
            return
        chosen = np.zeros(spec.n_groups, dtype=bool)
        chosen[groups] = True
        ordered = self._drf_rank[chosen[self._drf_rank]]  # groups in DRF order, without a sort per pass
        shapes, shape_of = spec.shapes, spec.g_shape[ordered]
        alive = np.bincount(shape_of, minlength=len(shapes)) > 0  # as in _in_order
        queues = spec.g_queue[ordered]
        by_queue = [np.flatnonzero(queues == q) for q in range(len(spec.queue_names))]
        head = [0] * len(by_queue)  # index into by_queue[q]; len(...) once the queue is done

        def advance(q: int, start: int) -> None:
            rows = by_queue[q][start:]
            live = alive[shape_of[rows]]
            k = int(np.argmax(live)) if live.size else 0
            head[q] = start + k if live.size and live[k] else len(by_queue[q])

        for q in range(len(by_queue)):
            advance(q, 0)
        total = v.cluster.total * fit_res
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
                    shares = fairness.dominant_shares(st.queue_alloc[0] * fit_res, total, spec.q_weight)
                q = int(live[np.argmin(shares[eligible])])
            i = int(by_queue[q][head[q]])
            g = int(ordered[i])
            if st.g_pending[g] == 0:
                advance(q, head[q] + 1)
            elif not self._place_regular(g, free, fit_res):
                alive &= ~(shapes >= shapes[shape_of[i]]).all(axis=1)
                for other, rows in enumerate(by_queue):
                    if head[other] < len(rows) and not alive[shape_of[rows[head[other]]]]:
                        advance(other, head[other])
            else:
                shares = None

    def _schedule_opportunistic(self) -> None:
        """UBIS: what did not fit regularly runs on harvested capacity, in queue order."""
        v, spec, st = self.view, self.view.spec, self.view.status
        # The kept queue order (``_refresh_queue``, by this pass's regular part) filtered by waiting tasks.
        q = self._queue_opp
        ready = q[st.g_pending[q] > 0]
        if ready.size == 0:
            return
        avail = self._harvestable()
        inv = self._inv_cap

        def fill(g: int) -> None:
            """Spread like LeastAllocated, on the harvestable room, while some node fits."""
            d = spec.g_demand[g]
            clamped = spec.clamped_shapes[spec.g_shape[g] : spec.g_shape[g] + 1]
            ok = alignment.feasible_clamped(clamped, avail)[0]  # = alignment.feasible(d, avail)
            score = _spread_scores(avail, d, inv)
            while st.g_pending[g] > 0 and ok.any():
                n = self._pick(score, ok)
                assert n is not None
                v.place(g, n, opp=True)
                avail[n] = np.maximum(avail[n] - d, 0.0)
                # Only node n's room changed: its verdict and score again.
                ok[n : n + 1] = alignment.feasible_clamped(clamped, avail[n : n + 1])[0]
                score[n : n + 1] = _spread_scores(avail[n : n + 1], d, inv[n : n + 1])

        # As in the regular pass: room only shrinks.
        _in_order(spec, st.g_pending, _fitting(spec, ready, None, avail), fill)
