"""Running tasks' usage and progress rates, kept up to date incrementally (the engine's hot path).

After every event the engine needs each running task's usage (``UsageModel.fraction`` × demand) and, while some node
may be over capacity, each task's progress rate under the contention model
(:func:`stowage.sim.cluster.contention_table`). Kube-like placement does not see bandwidth, so on the FB-2009 day
some node is nearly always over-allocated and rates are needed at most events. Here:

* a task's usage is recomputed only while it can change: when it starts, during its ramp-up, and when a burst starts
  or ends; after the ramp, outside bursts, it is constant;
* each row's bin in the per-node sums and its cell in the (class, resource mask, node) rate table are kept beside
  the running table, so rates are a handful of whole-array calls: per-node sums (``bincount``), the table (N ×
  masks, cheap), and one gather per task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.sim.cluster import Block, Cluster, Running, block_field, contention_table

if TYPE_CHECKING:
    from stowage.sim.tables import Spec
    from stowage.sim.usage import UsageModel

__all__ = ["RateTracker"]


class RateTracker:
    """Usage of every running row, updated only where something changed, and the rates from it.

    It observes the running table (:meth:`appended`, :meth:`dropping`);
    bursts are noticed by comparing each row's burst state with the last one seen.
    It keeps that state only while rates are needed: while no node can contend (the engine then
    calls :meth:`pause`), usage is computed plainly when asked and nothing is kept, so presets that
    never contend pay no bookkeeping; the next :meth:`rates` starts over from every row.

    Per-row numbers are kept resource-major, (R, P): every step is then a handful of numpy calls on
    contiguous rows of P numbers (a (P, R) layout with R = 4 made numpy's broadcasts cost several
    times the arithmetic). :meth:`current_use` hands out the (P, R) view.
    """

    def __init__(self, spec: Spec, cluster: Cluster, running: Running, usage: UsageModel) -> None:
        self.g_demand, self.cluster, self.running, self.usage = spec.g_demand, cluster, running, usage
        r = len(spec.resources)
        self.active = False
        self.use_t: NDArray[np.float64] | None = None  # (R, P); None: rows came or went, evaluate all
        # Per row, in the running table's order and dropped with it (sim.cluster.Block, in place):
        self._demand = Block(np.float64, r)  # each row's group demand (R, P): no gather per event
        self._ints = Block(np.int64, 2)  # slot, cell
        self._flags = Block(np.bool_, 2)  # final, bursting
        self.evaluated_at = -np.inf
        # Which fraction (0 base, 1 I/O) each resource reads.
        self.io: list[int] = spec.io_resources.astype(int).tolist()
        self.io_mask = spec.io_resources
        # Rates depend on which resources a task uses: a handful of distinct masks.
        self.masks, mask_of = np.unique(spec.g_uses, axis=0, return_inverse=True)
        self.g_mask = mask_of.reshape(-1).astype(np.int64)
        running.observers.append(self)

    demand_t = property(lambda self: self._demand.view(), doc="(R, P) each row's group demand.")
    slot = block_field("_ints", 0, "node + N·class: the row's bin in the per-resource sums.")
    cell = block_field("_ints", 1, "The row's flat index in contention_table's (class, mask, node).")
    final = block_field("_flags", 0, "Past the ramp-up at the last evaluation: constant since.")
    bursting = block_field("_flags", 1, "Burst state at the last evaluation.")

    def _fill(self, lo: int) -> None:
        """Demand, sum slot and rate cell of the running rows from ``lo`` on (the blocks hold rows up to ``lo``)."""
        run, n = self.running, self.cluster.n
        k = len(run) - lo
        s, si, sf = self._demand.reserve(k), self._ints.reserve(k), self._flags.reserve(k)
        group, node, opp = run.group[lo:], run.node[lo:], run.opp[lo:].astype(np.int64)
        self._demand.data[:, s] = self.g_demand[group].T
        ints = self._ints.data
        np.add(node, n * opp, out=ints[0, si])
        ints[1, si] = (opp * len(self.masks) + self.g_mask[group]) * n + node
        self._flags.data[:, sf] = False

    def _start(self) -> None:
        """Track every running row from now on, each to be evaluated afresh (the blocks are empty while paused)."""
        self._fill(0)
        self.use_t = None
        self.active = True

    def pause(self) -> None:
        """No node can contend now: stop keeping state until rates are needed again."""
        if self.active:
            self.active = False
            self.use_t = None
            for block in (self._demand, self._ints, self._flags):
                block.clear()

    # --- rows come and go ----------------------------------------------------------------------

    def appended(self, run: Running, lo: int) -> None:
        """``Running`` observer: rows ``lo:`` were just appended."""
        if self.active:
            self._fill(lo)
            self.use_t = None

    def dropping(self, run: Running, gone: NDArray[np.int64]) -> None:
        """``Running`` observer: rows ``gone`` are about to go; drop the same rows."""
        if self.active:
            self.use_t = None
            for block in (self._demand, self._ints, self._flags):
                block.drop(gone)

    # --- usage ---------------------------------------------------------------------------------

    def current_use(self, now: float) -> NDArray[np.float64]:
        """(P, R) usage of each running row at ``now`` (a fresh array whenever a value changed)."""
        run, model = self.running, self.usage
        if not self.active:
            demand_t = self.g_demand[run.group].T
            return self._usage(demand_t, model.fraction_t(now, run.start, (run.base, run.io_base), run.burst_until)).T
        burst = run.burst_until > now
        # Unchanged when no row came or went, every row is past its ramp, and no burst started or ended
        # (time going back, never in the engine, would undo "past the ramp").
        if self.use_t is None or now < self.evaluated_at or not self.final.all() or (burst != self.bursting).any():
            self.use_t = self._usage(self.demand_t, model.fraction_t(now, run.start, (run.base, run.io_base),
                                                                     run.burst_until))
            self.final = model.past_ramp(now, run.start)
            self.bursting = burst
        self.evaluated_at = now
        return self.use_t.T

    def _usage(self, demand_t: NDArray[np.float64], fractions: list[NDArray[np.float64]]) -> NDArray[np.float64]:
        """(R, P) demand × fraction, each resource reading the base or the I/O fraction."""
        out = np.empty(demand_t.shape)
        for j, which in enumerate(self.io):
            np.multiply(demand_t[j], fractions[which], out=out[j])
        return out

    # --- rates ---------------------------------------------------------------------------------

    def rates(self, now: float, out: NDArray[np.float64]) -> NDArray[np.float64]:
        """Progress rate of each running row at ``now`` (fraction of full speed) under the contention model;
        written into ``out`` (the running table's own field: no copy)."""
        c = self.cluster
        if not self.active:
            self._start()
        use_t = self.current_use(now).T
        both = np.empty((2 * c.n, use_t.shape[0]))
        for j in range(use_t.shape[0]):
            both[:, j] = np.bincount(self.slot, weights=use_t[j], minlength=2 * c.n)
        table = contention_table(both[: c.n], both[c.n :], c.cap, c.cpu, c.mem, self.masks,
                                 self.io_mask, self.usage.overcommit_loss)
        if table is None:
            out.fill(1.0)
        else:
            table.ravel().take(self.cell, out=out, mode="clip")  # every cell is in range: no check needed
        return out
