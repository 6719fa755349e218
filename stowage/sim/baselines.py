"""The kube-scheduler-like baselines: kube-default, binpack, drf, load-aware, and ubis on top of them.

kube-scheduler places pods one at a time in queue order (PrioritySort), and a pod
that fits nowhere does not block the pods behind it. The Fit filter checks every
Kubernetes resource except disk and network bandwidth, which are not Kubernetes
resources. Score plugins: ``stowage.sim.scoring``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.policy import alignment, fairness, harvest
from stowage.sim import scoring
from stowage.sim.assumed import AssumedTracker
from stowage.sim.preset import OPP_TRUE, Preset

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["KubePreset"]


def _shape_index(sim: Simulation, groups: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``np.unique(sim.g_shape[groups], return_inverse=True)`` without its sort: shape ids are small ints."""
    shape = sim.g_shape[groups]
    present = np.flatnonzero(np.bincount(shape, minlength=len(sim.shapes)))
    rank = np.empty(len(sim.shapes), dtype=np.int64)
    rank[present] = np.arange(present.size)
    return present, rank[shape]


_FEW_SHAPES = 32  # up to this many demand shapes in the workload, a pass works on all of them
_FEW_NODES = 8  # up to this many nodes changed since the last pass, their fit verdicts are redone on floats


def _pass_shapes(sim: Simulation, groups: NDArray[np.int64]
                 ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.bool_]]:
    """(shapes, each group's row in shapes, shapes alive at the start of a pass: those present).

    With few shapes in the workload (FB-2009: 2) the workload's own shape ids serve; otherwise only
    the shapes present, renumbered, so that work per failure stays proportional to them.
    """
    if len(sim.shapes) <= _FEW_SHAPES:
        shape_of = sim.g_shape[groups]
        return sim.shapes, shape_of, np.bincount(shape_of, minlength=len(sim.shapes)) > 0
    present, shape_of = _shape_index(sim, groups)
    return sim.shapes[present], shape_of, np.ones(present.size, dtype=bool)


def _fitting(sim: Simulation, groups: NDArray[np.int64], fit_res: NDArray | None, free: NDArray
             ) -> tuple[NDArray[np.int64], bool]:
    """Those of ``groups`` (in order) that fit at least one node now, checked once per distinct demand shape
    on the resources ``fit_res`` (None: all of them); and whether no shape of the workload fits anywhere
    (known only with few shapes, where every shape is checked; else False)."""
    if fit_res is not None:
        free = free[:, fit_res]
    if len(sim.shapes) <= _FEW_SHAPES:  # every shape's verdict: cheaper than finding those present
        shapes = sim.clamped_shapes if fit_res is None else sim.clamped_shapes[:, fit_res]
        return _with_fitting_shapes(sim, groups, alignment.feasible_clamped(shapes, free).any(axis=1))
    present, which = _shape_index(sim, groups)
    shapes = sim.shapes[present] if fit_res is None else sim.shapes[present][:, fit_res]
    fits = alignment.feasible(shapes, free).any(axis=1)
    return groups[fits[which]], False


def _with_fitting_shapes(sim: Simulation, groups: NDArray[np.int64], fits: NDArray[np.bool_]
                         ) -> tuple[NDArray[np.int64], bool]:
    """``_fitting``'s answer from each workload shape's verdict ``fits``."""
    if fits.all():  # the usual verdicts: no gather over the groups
        return groups, False
    if not fits.any():
        return groups[:0], True
    return groups[fits[sim.g_shape[groups]]], False


_ROW_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # a row of R bools read as one integer


def _any_per_row(a: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """``a.any(axis=1)`` for an (N, R) mask with few columns: numpy's reduction along a short axis
    costs several times this column-by-column ``|``; with R of 1, 2, 4 or 8 (contiguous), each row's bytes
    (0 or 1 each) read as one integer are nonzero exactly when one is true."""
    word = _ROW_WORDS.get(a.shape[1])
    if word is not None and a.flags.c_contiguous and a.shape[0]:
        return a.view(word).reshape(-1) != 0
    out = np.zeros(a.shape[0], dtype=bool)
    for r in range(a.shape[1]):
        out |= a[:, r]
    return out


def _all_per_row(a: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """``a.all(axis=1)``, column by column or a row at once (see :func:`_any_per_row`: all true is every byte 1)."""
    word = _ROW_WORDS.get(a.shape[1])
    if word is not None and a.flags.c_contiguous and a.shape[0]:
        return a.view(word).reshape(-1) == np.ones(a.shape[1], dtype=bool).view(word)[0]
    out = np.ones(a.shape[0], dtype=bool)
    for r in range(a.shape[1]):
        out &= a[:, r]
    return out


def _kube_score_one(req: list[float], cap: list[float], pod: list[float], strategy: str) -> float:
    """``scoring.kube_scores`` for one node on Python floats: the same IEEE operations in the same order.

    A placement changes one node; scoring it through numpy costs more in call overhead than the
    arithmetic (``tests/sim/test_baselines_incremental.py`` compares the two bit for bit).
    """
    top = scoring.MAX_NODE_SCORE
    non_zero = (pod[0] if pod[0] > 0 else scoring.DEFAULT_MILLI_CPU_REQUEST,
                pod[1] if pod[1] > 0 else scoring.DEFAULT_MEMORY_REQUEST)
    per, frac = [0.0, 0.0], [0.0, 0.0]
    for r in (0, 1):
        c = cap[r]
        if c > 0:
            q = req[r] + non_zero[r]
            if strategy == "least":
                per[r] = float(math.floor((c - q) * top / c)) if q <= c else 0.0
            else:
                per[r] = float(math.floor(min(q, c) * top / c))
            frac[r] = min((req[r] + pod[r]) / c, 1.0)
    fit = math.floor((per[0] + per[1]) / 2.0)
    return float(fit + math.floor((1.0 - abs(frac[0] - frac[1]) / 2.0) * top))


class _NodeCache:
    """Per demand shape: each node's Fit verdict and kube score, recomputed only on nodes that changed.

    A node's verdict and score depend only on its row of the pass's ``free`` and of ``reg_alloc``
    (elementwise formulas), so recomputing the changed rows gives the very numbers a full rescore
    would. ``sync`` (a pass's first try) marks the rows that differ from what the cache last saw; ``placed``
    marks the chosen node after a placement.
    """

    def __init__(self, n: int, fit_res: NDArray[np.bool_], cm: list[int], to_u: NDArray, cap_u: NDArray,
                 score: str) -> None:
        self.fit_res, self.cm, self.to_u, self.cap_u, self.score = fit_res, cm, to_u, cap_u, score
        self.version = np.zeros(n, dtype=np.int64)
        self.seen_reg: NDArray[np.float64] | None = None
        self.seen_free: NDArray[np.float64] | None = None
        self.by_shape: dict[int, tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.int64]]] = {}
        self.cap_list: list[list[float]] = cap_u.tolist()
        self.units: list[float] = to_u.tolist()
        self.fit_ok: NDArray[np.bool_] | None = None  # (shape, node) verdicts of shape_fits
        self.fit_seen = self.version.copy()  # the node versions they were worked out at
        self.fit_cols: list[int] = np.flatnonzero(fit_res).tolist()
        self._fit_rows: list[list[float]] = []  # the shapes of shape_fits, as lists (set at its first call)

    def sync(self, reg: NDArray[np.float64], free: NDArray[np.float64]) -> None:
        """Start of a pass: ``free`` is the pass's room (mutated in place by the pass)."""
        if self.seen_reg is not None and self.seen_free is not None:
            changed = _any_per_row(reg != self.seen_reg) | _any_per_row(free != self.seen_free)
            self.version[changed] += 1
        self.seen_reg, self.seen_free = reg.copy(), free

    def shape_fits(self, shapes: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Whether each of ``shapes`` (clamped, on the fit resources) fits some node of the synced ``free``:
        ``_fitting``'s verdicts, with each node's check redone only where the node changed since (the same
        elementwise check on the same numbers, so the same verdicts)."""
        free = self.seen_free
        assert free is not None
        if self.fit_ok is None:
            self.fit_ok = alignment.feasible_clamped(shapes, free[:, self.fit_res])
            self.fit_seen = self.version.copy()
            self._fit_rows = shapes.tolist()
        else:
            rows = np.flatnonzero(self.fit_seen != self.version)
            if 0 < rows.size <= _FEW_NODES:  # a node or two since the last pass: on floats, the same verdicts
                cols, ok = self.fit_cols, self.fit_ok
                for n in rows.tolist():
                    room = free[n].tolist()
                    room = [room[c] for c in cols]
                    for s, shape in enumerate(self._fit_rows):
                        ok[s, n] = alignment.fits_on_floats(shape, room)
                self.fit_seen[rows] = self.version[rows]
            elif rows.size:
                self.fit_ok[:, rows] = alignment.feasible_clamped(shapes, free[rows][:, self.fit_res])
                self.fit_seen[rows] = self.version[rows]
        return self.fit_ok.any(axis=1)

    def placed(self, n: int, reg: NDArray[np.float64]) -> None:
        self.version[n] += 1
        assert self.seen_reg is not None
        self.seen_reg[n] = reg[n]

    def lookup(self, shape: int, d: NDArray[np.float64], reg: NDArray[np.float64]
               ) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """(fits, score) per node for demand ``d`` of ``shape``; score only for the kube strategies."""
        free = self.seen_free
        assert free is not None
        entry = self.by_shape.get(shape)
        if entry is None:
            rows: NDArray[np.int64] | slice = slice(None)
            ok = np.empty(len(self.version), dtype=bool)
            scores = np.empty(len(self.version))
            entry = (ok, scores, self.version.copy())
            self.by_shape[shape] = entry
        else:
            rows = np.flatnonzero(entry[2] != self.version)
            if rows.size == 0:
                return entry[0], entry[1]
            entry[2][rows] = self.version[rows]
        ok, scores, _ = entry
        fr = self.fit_res
        if not isinstance(rows, slice) and rows.size == 1:  # after a placement: one node, on floats
            n = int(rows[0])
            dl, room = d.tolist(), free[n].tolist()  # the check below, on floats (the same IEEE operations)
            ok[n] = all(dl[c] <= room[c] * (1 + 1e-9) + 1e-12 for c in self.fit_cols)
            if self.score in ("least", "most"):
                c, m = self.cm
                uc, um = self.units
                req = [float(round(float(reg[n, c]) * uc)), float(round(float(reg[n, m]) * um))]
                pod = [float(round(float(d[c]) * uc)), float(round(float(d[m]) * um))]
                scores[n] = _kube_score_one(req, self.cap_list[n], pod, self.score)
            return ok, scores
        ok[rows] = _all_per_row(d[fr] <= free[rows][:, fr] * (1 + 1e-9) + 1e-12)
        if self.score in ("least", "most"):
            # Upstream's int64 milli-CPU and bytes: rounding once per quantity, as the API stores it.
            req_u = np.rint(reg[rows][:, self.cm] * self.to_u)
            pod_u = np.rint(d[self.cm] * self.to_u)
            scores[rows] = scoring.kube_scores(req_u, self.cap_u[rows], pod_u, self.score)
        return ok, scores


def _spread_score_one(room: list[float], d: list[float], inv: list[float]) -> float:
    """One node's ``((avail - d) * inv).sum(axis=1)``: numpy sums each row of an (N, R) array left to right
    from +0.0 (``tests/sim/test_baselines_incremental.py`` checks it, signed zeros included), so the same
    products added in the same order."""
    total = 0.0
    for r in range(len(room)):
        total += (room[r] - d[r]) * inv[r]
    return total


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
        self._drf_order_cache: NDArray[np.int64] | None = None
        self._queue = np.zeros(0, dtype=np.int64)  # open, unfinished groups in queue order
        self._opened = 0  # how many groups were open when ``_queue`` was sorted
        self._queue_regular = self._queue_opp = self._queue  # with harvesting: those of _queue that may run so
        # Static per group: may it run regular (not opportunistic: true), may it run opportunistically.
        self._regular_ok = sim.j_opp[sim.g_job] != OPP_TRUE
        self._opp_ok = self._opp_eligible(sim, np.arange(sim.n_groups))
        self._nodes = _NodeCache(sim.cluster.n, self.regular_resources(sim), self._cm, self._to_u, self._cap_u,
                                 self.score)
        self._fit_shapes = sim.clamped_shapes[:, self.regular_resources(sim)]
        # Harvestable room: S kept per node, T·C − U − B kept while the sample and blocks are the same.
        self._assumed = AssumedTracker(sim) if self.harvesting else None
        self._t_alloc = sim.settings.harvest.t_alloc.array(sim.resources)
        cap = sim.cluster.cap
        self._inv_cap = np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0)  # capacity never changes
        self._head_of: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None  # (usage, blocked) seen
        self._head = (np.zeros(0), np.zeros(0))
        # (usage sample, blocks) when the last opportunistic pass found no demand shape fitting anywhere;
        # None: it found room (see _still_no_room).
        self._no_room: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None

    def _harvestable(self, sim: Simulation) -> NDArray[np.float64]:
        """``Preset._harvestable`` with ``S`` kept across events and ``T·C − U − B`` kept between samples:
        the same operations on the same numbers, so the same bits (``tests/sim/test_assumed_incremental.py``)."""
        if self._assumed is None:
            return super()._harvestable(sim)
        c = sim.cluster
        if sim.now - sim.monitor.last_sample >= sim.settings.contention.sample_interval_s:
            sim.monitor.sample()
        seen = self._head_of
        # A sample replaces cluster.usage (holding the old array keeps `is` meaningful); blocks change in place.
        if seen is None or seen[0] is not c.usage or not np.array_equal(seen[1], c.blocked):
            self._head = harvest.harvest_headroom(c.cap, c.usage, c.blocked, self._t_alloc)
            self._head_of = (c.usage, c.blocked.copy())
        a = harvest.harvestable_after(*self._head, self._assumed.current(sim.now))
        a[~c.harvest] = 0.0
        return a

    def _still_no_room(self, sim: Simulation) -> bool:
        """Whether no demand shape fits the harvestable room anywhere, known without a pass: the last
        opportunistic pass found none fitting, and the room can have grown since only where it is checked
        here again.

        The room is ``min(max(T·C − U − B − S, 0), T·C)``: the same while the usage sample ``U`` and the
        blocks ``B`` are the same and no sample is due (``_harvestable`` would take one: while the monitor
        does not tick, nothing else does). ``S`` only grows on a node until a row leaves it there
        (``AssumedTracker.shrunk``), and fitting only gets harder as the room shrinks; so the nodes where
        a row left are judged again, with the same operations as a pass (``harvest.harvestable_after``,
        ``alignment.feasible_clamped``) on their rows. If still none fits, the pass would place nothing
        and is skipped with everything it would have done (97 % of ``ubis``'s opportunistic passes on the
        FB-2009 batch day's first 300 s found no room).
        """
        assert self._no_room is not None and self._assumed is not None
        usage, blocked = self._no_room
        c = sim.cluster
        if not (c.usage is usage and sim.now - sim.monitor.last_sample < sim.settings.contention.sample_interval_s
                and np.array_equal(blocked, c.blocked)):
            return False
        assumed = self._assumed
        s = assumed.current(sim.now)
        if assumed.shrunk:
            rows = np.fromiter(assumed.shrunk, dtype=np.int64, count=len(assumed.shrunk))
            head, ceiling = self._head  # computed for this very sample and these blocks
            room = harvest.harvestable_after(head[rows], ceiling[rows], s[rows])
            room[~c.harvest[rows]] = 0.0
            if alignment.feasible_clamped(sim.clamped_shapes, room).any():
                return False
            assumed.shrunk.clear()
        return True

    def _scores(self, sim: Simulation, g: int) -> NDArray:
        """load-aware's Trimaran scores for ``g`` on every node (the kube strategies' come from ``_nodes``)."""
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

    def _place_regular(self, sim: Simulation, g: int, free: NDArray[np.float64], fit_res: NDArray) -> bool:
        d = sim.g_demand[g]
        reg = sim.cluster.reg_alloc
        if self._nodes.seen_free is not free:  # the first placement try of a pass (a new ``free``)
            self._nodes.sync(reg, free)
        ok, scores = self._nodes.lookup(int(sim.g_shape[g]), d, reg)
        if not ok.any():
            return False
        n = self._pick(self._scores(sim, g) if self.score == "tlp" else scores, ok)
        if n is None:
            return False
        sim.place(g, n, opp=False)
        free[n] -= d
        self._nodes.placed(n, reg)
        if self.score == "tlp":
            cpu = float(d[sim.cluster.cpu]) * scoring.TLP_REQUESTS_MULTIPLIER
            self._tlp_binds.append((sim.now, n, cpu))
            self._tlp_missing[n] += cpu
        return True

    def _queue_order(self, sim: Simulation, groups: NDArray[np.int64]) -> NDArray[np.int64]:
        key = np.lexsort((groups, sim.g_ready_at[groups], -sim.j_priority[sim.g_job[groups]]))
        return groups[key]

    def _ready_in_order(self, sim: Simulation) -> NDArray[np.int64]:
        """``_queue_order(sim.ready_groups())`` without a sort per pass.

        A group's key (priority, when its barrier opened, index) never changes once it is open, so
        the open groups are sorted again only when one opens; between, filtering by waiting tasks
        keeps the order.
        """
        self._refresh_queue(sim)
        return self._queue[sim.g_pending[self._queue] > 0]

    def _refresh_queue(self, sim: Simulation) -> None:
        """Sort the open, unfinished groups again if one opened; with harvesting, also the ones that may run
        regular and the ones that may run opportunistically (static per group), so a pass filters only
        by waiting tasks."""
        opened = int(np.count_nonzero(sim.g_ready))
        if opened != self._opened:
            self._opened = opened
            self._queue = q = self._queue_order(sim, np.flatnonzero(sim.g_ready & (sim.g_done < sim.g_tasks)))
            if self.harvesting:
                self._queue_regular, self._queue_opp = q[self._regular_ok[q]], q[self._opp_ok[q]]

    def schedule(self, sim: Simulation) -> None:
        if self.harvesting:
            # _ready_in_order then the regular ones: the same groups in the same order. (No early return
            # when nothing waits at all: both parts then find nothing to do.)
            self._refresh_queue(sim)
            q = self._queue_regular
            regular = q[sim.g_pending[q] > 0] if sim.regular_changed else q[:0]
        else:
            regular = self._ready_in_order(sim)
            if regular.size == 0:
                return
            if not sim.regular_changed:
                regular = regular[:0]  # only a monitor tick since the last pass: regular room is unchanged
        fit_res = self.regular_resources(sim)
        free = sim.regular_free()
        if regular.size:
            if len(sim.shapes) <= _FEW_SHAPES:  # verdicts kept per node (_NodeCache.shape_fits)
                self._nodes.sync(sim.cluster.reg_alloc, free)
                regular, _ = _with_fitting_shapes(sim, regular, self._nodes.shape_fits(self._fit_shapes))
            else:
                regular, _ = _fitting(sim, regular, fit_res, free)
        if self.order == "drf":
            self._schedule_drf(sim, regular, free, fit_res)
        else:
            ordered = regular  # filtering kept the queue order
            # Room only shrinks during a pass: a demand at least as big as one that failed fails too,
            # so a failure kills its shape and every bigger one for the rest of the pass (at most one
            # failure per distinct shape); the pass ends when no live shape is left.
            shapes, shape_of, alive = _pass_shapes(sim, ordered)
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
        chosen = np.zeros(sim.n_groups, dtype=bool)
        chosen[groups] = True
        by_rank = self._drf_order(sim)
        ordered = by_rank[chosen[by_rank]]  # groups in DRF order, without a sort per pass
        present, shape_of = _shape_index(sim, ordered)
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

    def _drf_order(self, sim: Simulation) -> NDArray[np.int64]:
        """Every group in DRF's order inside a queue: its job's arrival, then the group index."""
        if self._drf_order_cache is None:
            self._drf_order_cache = np.lexsort((np.arange(sim.n_groups), sim.j_arrival[sim.g_job]))
        return self._drf_order_cache

    def _schedule_opportunistic(self, sim: Simulation) -> None:
        """UBIS: what did not fit regularly runs on harvested capacity, in queue order."""
        # The kept queue order (``_ready_in_order``, refreshed by this pass's regular part) filtered
        # by waiting tasks is ``_queue_order(sim.ready_groups())``: no sort per pass.
        if self._no_room is not None and self._still_no_room(sim):
            return
        q = self._queue_opp
        ready = q[sim.g_pending[q] > 0]
        if ready.size == 0:
            return
        avail = self._harvestable(sim)
        ordered, none_fit = _fitting(sim, ready, None, avail)
        if none_fit and self._assumed is not None:
            c = sim.cluster
            self._no_room = (c.usage, c.blocked.copy())
            self._assumed.shrunk.clear()  # the room just judged counted every row
            return
        self._no_room = None
        inv = self._inv_cap
        shapes, shape_of, alive = _pass_shapes(sim, ordered)  # as in the regular pass: room only shrinks
        todo = _live_rows(alive, shape_of, 0)
        while todo:
            for i in todo:
                g = int(ordered[i])
                d = sim.g_demand[g]
                failed = False
                clamped = sim.clamped_shapes[sim.g_shape[g] : sim.g_shape[g] + 1]
                ok = alignment.feasible_clamped(clamped, avail)[0]  # = alignment.feasible(d, avail)
                score: NDArray[np.float64] | None = None
                while sim.g_pending[g] > 0:
                    if not ok.any():
                        failed = True
                        break
                    # Spread like LeastAllocated, on the harvestable room.
                    if score is None:
                        score = ((avail - d) * inv).sum(axis=1)
                    n = self._pick(score, ok)
                    assert n is not None
                    sim.place(g, n, opp=True)
                    avail[n] = np.maximum(avail[n] - d, 0.0)
                    # Only node n's room changed: its verdict and score again, on floats (the same numbers).
                    room = avail[n].tolist()
                    ok[n] = alignment.fits_on_floats(clamped[0].tolist(), room)
                    score[n] = _spread_score_one(room, d.tolist(), inv[n].tolist())
                if failed:
                    alive &= ~(shapes >= d).all(axis=1)
                    todo = _live_rows(alive, shape_of, i + 1)
                    break
            else:
                todo = []
