"""Running tasks' usage and progress rates, kept up to date incrementally (the engine's hot path).

After every event the engine needs each running task's usage (``UsageModel.fraction`` × demand)
and, while some node may be over capacity, each task's progress rate under the contention model
(:meth:`stowage.sim.cluster.Cluster.rates`). Recomputing both over every running task at every
event took half of ``ubis``'s time on the FB-2009 day with batch arrivals (kube-like placement
does not see bandwidth, so some node is always over-allocated and rates are always needed). Here:

* a task's usage is recomputed only while it can change: when it starts, during its ramp-up, and
  when a burst starts or ends; after the ramp, outside bursts, it is constant;
* rates sum usage only over the nodes that may contend (a per-node upper bound of usage is kept
  across starts and stops; below capacity every factor is exactly 1), each node's tasks in row
  order, as the full recomputation does, so every sum is bit-identical;
* rates come from per-node factors (N × R, cheap) through one table per (class, resource mask)
  and one gather per task, instead of gathering N × R factors for every task.

Every number is exactly what ``Cluster.node_sums`` + ``Cluster.rates`` over all running tasks
give (``tests/sim/test_rates.py`` checks it on random states and on whole runs); the timings it
buys are in docs/simulator.md ("Speed").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.sim.cluster import FEW_ROWS, Block, Running, block_field

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["RateTracker", "contention_table"]

#: Re-evaluate every row when at least this fraction moved (cheaper than gathering the ones that did).
_REDO_ALL_FRACTION = 0.25
_TOLERANCE = 1e-9  # Cluster.rates: usage above capacity × (1 + this) anywhere means contention
_COLD_MARGIN = 2e-6  # a node is cold below capacity × (1 − this): far above the bound's rounding drift
_BOUND_REFRESH = 4096  # row updates of the usage bound before it is summed afresh


def contention_table(
    reg_use: NDArray[np.float64], opp_use: NDArray[np.float64], cap: NDArray[np.float64], cpu: int, mem: int,
    masks: NDArray[np.bool_],
) -> NDArray[np.float64] | None:
    """(2, M, N): each class's smallest slowdown factor over each resource mask on each node, in [0, 1]; None
    when no node contends. The contention model of :meth:`Cluster.rates` per node (the same numbers, bit for
    bit; ``tests/sim/test_rates.py``): bandwidth and extended resources shared in proportion, cpu left to
    opportunistic tasks after regular ones, memory never a slowdown, NaN factors (0/0) read as 1.

    The two classes' factors differ only on cpu and are 1 on memory, so each mask's minimum over the shared
    columns is taken once for both; memory's 1 is what the final clip at 1 applies anyway (min is exact and,
    with no NaN left, order-free).
    """
    total = reg_use + opp_use
    if not (total > cap * (1 + _TOLERANCE)).any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        shared = np.where(total > cap, cap / total, 1.0)
        rc, oc, cc = reg_use[:, cpu], opp_use[:, cpu], cap[:, cpu]
        cpu_f = [np.where(rc > cc, cc / rc, 1.0)]
        left = np.maximum(cc - rc, 0.0)
        cpu_f.append(np.where(oc > left, left / np.where(oc > 0, oc, 1), 1.0))
    # NaN → 1 (the cpu and memory columns of ``shared`` are never read).
    if not (np.isfinite(shared).all() and np.isfinite(cpu_f[0]).all() and np.isfinite(cpu_f[1]).all()):
        shared = np.nan_to_num(shared, nan=1.0)
        cpu_f = [np.nan_to_num(f, nan=1.0) for f in cpu_f]
    n = cap.shape[0]
    table = np.ones((2, len(masks), n))
    for k, m in enumerate(masks.tolist()):
        cols = [r for r, used in enumerate(m) if used and r not in (cpu, mem)]
        if cols:
            s = table[0, k]
            np.copyto(s, shared[:, cols[0]])
            for r in cols[1:]:
                np.minimum(s, shared[:, r], out=s)
            if m[cpu]:
                np.minimum(s, cpu_f[1], out=table[1, k])
                np.minimum(s, cpu_f[0], out=s)
            else:
                np.copyto(table[1, k], s)
        elif m[cpu]:
            np.copyto(table[0, k], cpu_f[0])
            np.copyto(table[1, k], cpu_f[1])
    np.clip(table, 0.0, 1.0, out=table)
    return table


class RateTracker:
    """Usage of every running row and per-node usage sums, updated only where something changed.

    It observes the running table (:meth:`appended`, :meth:`dropping`, as ``sim.assumed`` does);
    bursts are noticed by comparing each row's burst state with the last one seen.
    It keeps that state only while rates are needed: while no node can contend (the engine then
    calls :meth:`pause`), usage is computed plainly when asked and nothing is kept, so presets that
    never contend pay no bookkeeping; the next :meth:`rates` starts over from every row.

    Per-row numbers are kept resource-major, (R, P): every step is then a handful of numpy calls on
    contiguous rows of P numbers (a (P, R) layout with R = 4 made numpy's broadcasts cost several
    times the arithmetic). :meth:`current_use` hands out the (P, R) view.
    """

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        r = len(sim.resources)
        self.active = False
        self.use_t: NDArray[np.float64] | None = np.zeros((r, 0))  # None: rows dropped, re-evaluate all
        # Per row, in the running table's order and dropped with it (sim.cluster.Block, in place):
        self._demand = Block(np.float64, r)  # each row's group demand (R, P): no gather per event
        self._ints = Block(np.int64, 2)  # slot, cell
        self._flags = Block(np.bool_, 2)  # final, bursting
        self.evaluated_at = -np.inf
        # Upper bound of each node's usage (Σ demand × base, or × 1 while bursting): where it stays
        # below capacity on every resource but memory, every factor is exactly 1 (see _cold).
        self.bound: NDArray[np.float64] | None = None  # None: compute afresh
        self.bound_at = -np.inf  # the time the bursts were read (they change only at monitor ticks)
        self.bound_updates = 0  # increments since; afresh past _BOUND_REFRESH (keeps rounding drift tiny)
        self.hot: NDArray[np.bool_] | None = None  # nodes that may contend; None: recompute from bound
        cap = sim.cluster.cap
        limited = np.ones(r, dtype=bool)
        limited[sim.cluster.mem] = False  # memory over capacity is an OOM kill, never a slowdown
        self.limited = limited
        self.cold_limit = np.where(cap > 0, cap * (1 - _COLD_MARGIN), -np.inf)[:, limited]
        self._cold_limits: list[list[float]] = self.cold_limit.tolist()
        self._limited_cols: list[int] = np.flatnonzero(limited).tolist()
        self._touched: set[int] = set()  # nodes whose bound changed since ``hot`` was worked out
        self._hot_version = 0  # bumped whenever ``hot`` changes
        self._numbering: tuple[int, tuple[NDArray, ...]] | None = None  # (_hot_version, _hot_numbering's)
        # Which fraction (0 base, 1 I/O) each resource reads.
        self.io: list[int] = sim.io_resources.astype(int).tolist()
        # Rates depend on which resources a task uses: a handful of distinct masks.
        self.masks, mask_of = np.unique(sim.g_uses, axis=0, return_inverse=True)
        self.g_mask = mask_of.reshape(-1).astype(np.int64)
        sim.running.observers.append(self)

    demand_t = property(lambda self: self._demand.view(), doc="(R, P) each row's group demand.")
    slot = block_field("_ints", 0, "node + N·class: the row's bin in the per-resource sums.")
    cell = block_field("_ints", 1, "The row's flat index in contention_table's (class, mask, node).")
    final = block_field("_flags", 0, "Past the ramp-up at the last evaluation: constant since.")
    bursting = block_field("_flags", 1, "Burst state at the last evaluation.")

    def _fill(self, lo: int) -> None:
        """Demand, sum slot and rate cell of the running rows from ``lo`` on (the blocks hold rows up to ``lo``);
        each to be evaluated afresh."""
        sim = self.sim
        run, n = sim.running, sim.cluster.n
        k = len(run) - lo
        s, si, sf = self._demand.reserve(k), self._ints.reserve(k), self._flags.reserve(k)
        if 0 < k <= FEW_ROWS:  # a start or two: single values (the same numbers as below)
            demand, ints, flags, masks = self._demand.data, self._ints.data, self._flags.data, len(self.masks)
            group, node, opp = run.group, run.node, run.opp
            for i in range(k):
                g, nd, o = int(group[lo + i]), int(node[lo + i]), int(opp[lo + i])
                demand[:, s.start + i] = sim.g_demand[g]
                ints[0, si.start + i] = nd + n * o
                ints[1, si.start + i] = (o * masks + int(self.g_mask[g])) * n + nd
                flags[:, sf.start + i] = False
            return
        group, node, opp = run.group[lo:], run.node[lo:], run.opp[lo:].astype(np.int64)
        self._demand.data[:, s] = sim.g_demand[group].T
        ints = self._ints.data
        np.add(node, n * opp, out=ints[0, si])
        ints[1, si] = (opp * len(self.masks) + self.g_mask[group]) * n + node
        self._flags.data[:, sf] = False

    def _start(self) -> None:
        """Track every running row from now on, each to be evaluated afresh."""
        for block in (self._demand, self._ints, self._flags):
            block.clear()
        self._fill(0)
        self.use_t = np.zeros((len(self.io), len(self.sim.running)))
        self.evaluated_at = -np.inf
        self.bound = None
        self.active = True

    def pause(self) -> None:
        """No node can contend now: stop keeping state until rates are needed again."""
        if self.active:
            self.active = False
            self.bound, self.hot, self.use_t = None, None, None
            for block in (self._demand, self._ints, self._flags):
                block.clear()

    # --- rows come and go ----------------------------------------------------------------------

    def appended(self, run: Running, lo: int) -> None:
        """``Running`` observer: rows ``lo:`` were just appended."""
        if not self.active:
            return
        self._fill(lo)
        if self.use_t is not None:
            self.use_t = np.concatenate([self.use_t, np.zeros((self.use_t.shape[0], len(run) - lo))], axis=1)
        self._bound_add(np.arange(lo, len(run)), self.demand_t[:, lo:], 1.0)

    def dropping(self, run: Running, gone: NDArray[np.int64]) -> None:
        """``Running`` observer: rows ``gone`` are about to go; drop the same rows."""
        if not self.active:
            return
        self._bound_add(gone, self._demand.take(gone), -1.0)
        # The kept rows' usage is not carried over: the next evaluation recomputes every row, which
        # gives the same bits for the rows that did not move and costs about what the gather would.
        self.use_t = None
        for block in (self._demand, self._ints, self._flags):
            block.drop(gone)

    # --- usage ---------------------------------------------------------------------------------

    def current_use(self) -> NDArray[np.float64]:
        """(P, R) usage of each running row at ``sim.now`` (a fresh array whenever a value changed)."""
        sim, run = self.sim, self.sim.running
        now, model = sim.now, sim.usage_model
        if not self.active:
            demand_t = sim.g_demand[run.group].T
            return self._usage(demand_t, model.fraction_t(now, run.start, (run.base, run.io_base), run.burst_until)).T
        burst = run.burst_until > now
        # Time going back (never in the engine) would undo "past the ramp": then redo every row.
        redo = np.ones(len(run), dtype=bool) if now < self.evaluated_at else ~self.final | (burst != self.bursting)
        self.evaluated_at = now
        k = int(np.count_nonzero(redo))
        if k == 0 and self.use_t is not None:
            return self.use_t.T
        if self.use_t is None or k >= _REDO_ALL_FRACTION * len(run):
            # Most rows moved (short tasks: nearly all still ramping), or rows were dropped: evaluate
            # every row. A row that did not move (past its ramp, same burst state) gets the very bits
            # it had, and gathering the others would cost more than the arithmetic.
            self.use_t = self._usage(self.demand_t, model.fraction_t(now, run.start, (run.base, run.io_base),
                                                                     run.burst_until))
            self.final = model.past_ramp(now, run.start)
            self.bursting = burst
        else:
            rows = np.flatnonzero(redo)
            f = model.fraction_t(now, run.start[rows], (run.base[rows], run.io_base[rows]), run.burst_until[rows])
            assert self.use_t is not None
            use_t = self.use_t.copy()  # callers may hold the previous array
            use_t[:, rows] = self._usage(self._demand.take(rows), f)
            self.use_t = use_t
            self.bursting[rows] = burst[rows]
            self.final[rows] = model.past_ramp(now, run.start[rows])
        return self.use_t.T

    def _usage(self, demand_t: NDArray[np.float64], fractions: list[NDArray[np.float64]]) -> NDArray[np.float64]:
        """(R, P) demand × fraction, each resource reading the base or the I/O fraction."""
        out = np.empty(demand_t.shape)
        for j, which in enumerate(self.io):
            np.multiply(demand_t[j], fractions[which], out=out[j])
        return out

    # --- rates ---------------------------------------------------------------------------------

    def rates(self, out: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """Progress rate of each running row (fraction of full speed), as :meth:`Cluster.rates` gives it;
        written into ``out`` when given (the running table's own field: no copy).

        Only the nodes that may contend (:meth:`_hot`) can have a factor below 1. While they hold few of the
        rows, only their rows are evaluated and summed, and only their factors worked out, on the hot nodes
        renumbered: a node's sums add its own rows in row order, as over every row, and the factors are
        elementwise. While they hold most rows, every row is (no gathers): the other nodes' sums stay below
        capacity and their factors are 1, as they would be.
        """
        sim = self.sim
        run, c = sim.running, sim.cluster
        if out is None:
            out = np.empty(len(run))
        if not self.active:
            self._start()
        hot = self._hot()
        rows = None if hot is None else np.flatnonzero(hot.take(run.node))
        if rows is None or 2 * rows.size > len(run):
            use_t = self._usage(self.demand_t, sim.usage_model.fraction_t(sim.now, run.start, (run.base, run.io_base),
                                                                          run.burst_until))
            table = self._table(use_t, self.slot, c.n, c.cap)
            if table is None:
                out.fill(1.0)
            else:
                table.ravel().take(self.cell, out=out, mode="clip")  # every cell is in range: no check needed
            return out
        out.fill(1.0)
        if rows.size == 0:
            return out
        nodes, cap, slot_of, cell_of = self._hot_numbering(hot)
        ints = self._ints.take(rows)
        start, base, io, burst = run.start.take(rows), run.base.take(rows), run.io_base.take(rows), \
            run.burst_until.take(rows)
        use_t = self._usage(self._demand.take(rows), sim.usage_model.fraction_t(sim.now, start, (base, io), burst))
        table = self._table(use_t, slot_of.take(ints[0]), nodes.size, cap)
        if table is not None:
            out[rows] = table.ravel().take(cell_of.take(ints[1]))
        return out

    def _table(self, use_t: NDArray[np.float64], slot: NDArray[np.int64], n: int, cap: NDArray[np.float64]
               ) -> NDArray[np.float64] | None:
        """The (class, mask, node) rate table of ``n`` nodes from rows' usage and their ``slot`` (node + n·class)."""
        c = self.sim.cluster
        both = np.empty((2 * n, use_t.shape[0]))
        for j in range(use_t.shape[0]):
            both[:, j] = np.bincount(slot, weights=use_t[j], minlength=2 * n)
        return contention_table(both[:n], both[n:], cap, c.cpu, c.mem, self.masks)

    def _hot_numbering(self, hot: NDArray[np.bool_]
                       ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
        """(hot nodes, their capacity, each global slot's hot slot, each global rate cell's hot cell), kept
        until ``hot`` changes."""
        if self._numbering is None or self._numbering[0] != self._hot_version:
            c = self.sim.cluster
            nodes = np.flatnonzero(hot)
            pos = np.zeros(c.n, dtype=np.int64)
            pos[nodes] = np.arange(nodes.size)
            slot_of = np.concatenate([pos, pos + nodes.size])
            cell_of = (np.arange(2 * len(self.masks))[:, None] * nodes.size + pos).ravel()
            self._numbering = (self._hot_version, (nodes, c.cap[nodes], slot_of, cell_of))
        return self._numbering[1]

    # --- nodes that cannot contend -------------------------------------------------------------

    def _row_bound(self, rows: NDArray[np.int64], demand_t: NDArray[np.float64]) -> NDArray[np.float64]:
        """(R, k) the most each row can use until the next monitor tick: its demand × its base (I/O base
        on I/O resources), × 1 if it was bursting at ``bound_at`` (a burst only starts at a tick)."""
        run = self.sim.running
        bursting = run.burst_until.take(rows) > self.bound_at
        fmax = (np.where(bursting, 1.0, run.base.take(rows)), np.where(bursting, 1.0, run.io_base.take(rows)))
        return self._usage(demand_t, list(fmax))

    def _bound_add(self, rows: NDArray[np.int64], demand_t: NDArray[np.float64], sign: float) -> None:
        bound = self.bound
        if bound is None or rows.size == 0:
            return
        self.bound_updates += rows.size
        if rows.size > FEW_ROWS:
            b = self._row_bound(rows, demand_t)
            np.add.at(bound, self.sim.running.node.take(rows), sign * b.T)  # one call: many rows, R columns
            self.hot = None
            return
        # A start or a finish: a row or two, on Python floats (numpy's calls cost more than the arithmetic
        # here). The same IEEE operations in the same order as above: demand × fraction, × sign, added
        # row after row.
        run = self.sim.running
        burst, base, io_base, node = run.burst_until, run.base, run.io_base, run.node  # views, made once
        for i, r in enumerate(rows.tolist()):
            f = (1.0, 1.0) if burst[r] > self.bound_at else (float(base[r]), float(io_base[r]))
            n = int(node[r])
            d, row = demand_t[:, i].tolist(), bound[n].tolist()
            for j, which in enumerate(self.io):
                row[j] += sign * (d[j] * f[which])
            bound[n] = row
            self._touched.add(n)

    def _hot(self) -> NDArray[np.bool_] | None:
        """Nodes that may contend now (None: all of them); the rest have every factor exactly 1.

        A node is cold when, on every resource but memory, the bound of its usage is below
        capacity × (1 − 2e-6): its summed usage (each row at most its bound, and rounding far below the
        margin) then stays under capacity, so ``contention_table`` gives 1 on every resource (cpu too:
        opportunistic use ≤ capacity − regular use) and the node never triggers the any-node check.
        """
        sim = self.sim
        tick = sim.monitor.last_tick
        if self.bound is None or self.bound_at != tick or self.bound_updates > _BOUND_REFRESH:
            run = sim.running
            self.bound_at, self.bound_updates = tick, 0
            b = self._row_bound(np.arange(len(run)), self.demand_t)
            self.bound = np.empty((sim.cluster.n, b.shape[0]))
            for j in range(b.shape[0]):
                self.bound[:, j] = np.bincount(run.node, weights=b[j], minlength=sim.cluster.n)
            self.hot = None
        if self.hot is None:
            cold = np.ones(sim.cluster.n, dtype=bool)
            bound = self.bound[:, self.limited]
            for j in range(bound.shape[1]):
                cold &= bound[:, j] < self.cold_limit[:, j]
            self.hot = ~cold
            self._hot_version += 1
        elif self._touched:  # the same comparisons, on the nodes whose bound moved since
            limits, limited = self._cold_limits, self._limited_cols
            for n in self._touched:
                row = self.bound[n].tolist()
                now_hot = not all(row[j] < limit for j, limit in zip(limited, limits[n], strict=True))
                if now_hot != self.hot[n]:
                    self.hot[n] = now_hot
                    self._hot_version += 1
        self._touched.clear()
        return None if self.hot.all() else self.hot
