"""Running tasks' usage and progress rates, kept up to date incrementally (the engine's hot path).

After every event the engine needs each running task's usage (``UsageModel.fraction`` × demand)
and, while some node may be over capacity, each task's progress rate under the contention model
(:meth:`stowage.sim.cluster.Cluster.rates`). Recomputing both over every running task at every
event took half of ``ubis``'s time on the FB-2009 day with batch arrivals (kube-like placement
does not see bandwidth, so some node is always over-allocated and rates are always needed). Here:

* a task's usage is recomputed only while it can change: when it starts, during its ramp-up, and
  when a burst starts or ends; after the ramp, outside bursts, it is constant;
* a node's usage sums (regular and opportunistic) are recomputed only when one of its tasks
  started, stopped or changed usage, summing that node's tasks in row order, as the full
  recomputation does, so every sum is bit-identical;
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

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["RateTracker", "node_factors", "task_rates"]

_TOLERANCE = 1e-9  # Cluster.rates: usage above capacity × (1 + this) anywhere means contention


def node_factors(
    reg_use: NDArray[np.float64], opp_use: NDArray[np.float64], cap: NDArray[np.float64], cpu: int, mem: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
    """Per-node slowdown factors (N, R) of regular and opportunistic tasks; None when no node contends.

    The contention model of :meth:`Cluster.rates`, per node: bandwidth and extended resources shared
    in proportion, cpu left to opportunistic tasks after regular ones, memory never a slowdown.
    NaN factors (0/0) read as 1, as there.
    """
    total = reg_use + opp_use
    if not (total > cap * (1 + _TOLERANCE)).any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        shared = np.where(total > cap, cap / total, 1.0)
        f_reg = shared.copy()
        f_opp = shared.copy()
        f_reg[:, cpu] = np.where(reg_use[:, cpu] > cap[:, cpu], cap[:, cpu] / reg_use[:, cpu], 1.0)
        left = np.maximum(cap[:, cpu] - reg_use[:, cpu], 0.0)
        f_opp[:, cpu] = np.where(opp_use[:, cpu] > left,
                                 left / np.where(opp_use[:, cpu] > 0, opp_use[:, cpu], 1), 1.0)
    f_reg[:, mem] = 1.0
    f_opp[:, mem] = 1.0
    # Every denominator above is positive where it is used, so this never fires; it keeps the
    # plain path's nan_to_num exactly, at the price of one check.
    if not (np.isfinite(f_reg).all() and np.isfinite(f_opp).all()):
        f_reg, f_opp = np.nan_to_num(f_reg, nan=1.0), np.nan_to_num(f_opp, nan=1.0)
    return f_reg, f_opp


def task_rates(
    factors: tuple[NDArray[np.float64], NDArray[np.float64]],
    masks: NDArray[np.bool_],
    mask: NDArray[np.int64],
    opp: NDArray[np.bool_],
    node: NDArray[np.int64],
) -> NDArray[np.float64]:
    """Each task's rate: the smallest factor of its node and class over the resources it uses, in [0, 1].

    ``masks`` (M, R) the distinct resource masks, ``mask`` (P,) each task's; one table
    ``[class, mask, node]`` then one gather, instead of an (P, R) gather and minimum.
    """
    table = np.stack([np.stack([np.where(m, f, 1.0).min(axis=1) for m in masks]) for f in factors])
    np.clip(table, 0.0, 1.0, out=table)
    return table[opp.astype(np.int64), mask, node]


def _take(values: NDArray[np.float64], rows: slice | NDArray[np.int64]) -> NDArray[np.float64]:
    """``values[rows]`` for a (P, K) array: ``take`` on axis 0 costs a fraction of fancy indexing there."""
    return values[rows] if isinstance(rows, slice) else values.take(rows, axis=0)


class RateTracker:
    """Usage of every running row and per-node usage sums, updated only where something changed.

    The engine tells it about rows appended (:meth:`appended`) and rows about to be dropped
    (:meth:`keeping`); bursts are noticed by comparing each row's burst state with the last one seen.
    It keeps that state only while rates are needed: while no node can contend (the engine then
    calls :meth:`pause`), usage is computed plainly when asked and nothing is kept, so presets that
    never contend pay no bookkeeping; the next :meth:`rates` starts over from every row.
    """

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        n, r = sim.cluster.n, len(sim.resources)
        self.active = False
        self.use = np.zeros((0, r))
        self.demand = np.zeros((0, r))  # each row's group demand (P, R): no gather per event
        self.base = np.zeros((0, 2))  # each row's [base, io_base] fractions, as UsageModel.fraction takes them
        self.bin = np.zeros(0, dtype=np.int64)  # each row's first bin in node_sums
        self.final = np.zeros(0, dtype=bool)  # past the ramp-up at the last evaluation: constant since
        self.bursting = np.zeros(0, dtype=bool)  # burst state at the last evaluation
        self.evaluated_at = -np.inf
        self.dirty = np.ones(n, dtype=bool)  # nodes whose sums must be recomputed
        self.reg = np.zeros((n, r))
        self.opp = np.zeros((n, r))
        # Rates depend on which resources a task uses: a handful of distinct masks.
        self.masks, mask_of = np.unique(sim.g_uses, axis=0, return_inverse=True)
        self.g_mask = mask_of.reshape(-1).astype(np.int64)

    def _start(self) -> None:
        """Track every running row from now on, each to be evaluated afresh."""
        run = self.sim.running
        p = len(run)
        self.use = np.zeros((p, self.use.shape[1]))
        self.demand = self.sim.g_demand[run.group]
        self.base = np.stack([run.base, run.io_base], axis=1)
        self.final = np.zeros(p, dtype=bool)
        self.bursting = np.zeros(p, dtype=bool)
        self.bin = self._bins(run.node, run.opp)
        self.evaluated_at = -np.inf
        self.dirty[:] = True
        self.active = True

    def pause(self) -> None:
        """No node can contend now: stop keeping state until rates are needed again."""
        if self.active:
            self.active = False
            self.use, self.final, self.bursting = self.use[:0], self.final[:0], self.bursting[:0]
            self.bin, self.demand, self.base = self.bin[:0], self.demand[:0], self.base[:0]

    # --- rows come and go ----------------------------------------------------------------------

    def appended(self, nodes: NDArray[np.int64]) -> None:
        """Called after ``Running.append``: the last ``len(nodes)`` rows are new."""
        if not self.active:
            return
        run, k = self.sim.running, nodes.shape[0]
        self.use = np.concatenate([self.use, np.zeros((k, self.use.shape[1]))])
        self.demand = np.concatenate([self.demand, self.sim.g_demand[run.group[-k:]]])
        self.base = np.concatenate([self.base, np.stack([run.base[-k:], run.io_base[-k:]], axis=1)])
        self.final = np.concatenate([self.final, np.zeros(k, dtype=bool)])
        self.bursting = np.concatenate([self.bursting, np.zeros(k, dtype=bool)])
        self.bin = np.concatenate([self.bin, self._bins(run.node[-k:], run.opp[-k:])])
        self.dirty[nodes] = True

    def keeping(self, mask: NDArray[np.bool_]) -> None:
        """Called before ``Running.keep(mask)``: drop the same rows and mark their nodes."""
        if not self.active:
            return
        self.dirty[self.sim.running.node[~mask]] = True
        # compress: a (P, R) array by a row mask costs a tenth of arr[mask]
        self.use, self.final, self.bursting, self.bin = (
            self.use.compress(mask, axis=0), self.final[mask], self.bursting[mask], self.bin[mask])
        self.demand, self.base = self.demand.compress(mask, axis=0), self.base.compress(mask, axis=0)

    def _bins(self, node: NDArray[np.int64], opp: NDArray[np.bool_]) -> NDArray[np.int64]:
        """Each row's first bin in the (node, class, resource) sums: ``((class · N) + node) · R``."""
        c = self.sim.cluster
        return (node + c.n * opp.astype(np.int64)) * c.r

    # --- usage ---------------------------------------------------------------------------------

    def current_use(self) -> NDArray[np.float64]:
        """(P, R) usage of each running row at ``sim.now`` (a fresh array whenever a value changed)."""
        sim, run = self.sim, self.sim.running
        now = sim.now
        if not self.active:
            both = sim.usage_model.fraction(now, run.start, np.stack([run.base, run.io_base], axis=1),
                                            run.burst_until)
            return sim.g_demand[run.group] * np.where(sim.io_resources, both[:, 1:2], both[:, 0:1])
        burst = run.burst_until > now
        # Time going back (never in the engine) would undo "past the ramp": then redo every row.
        redo = np.ones(len(run), dtype=bool) if now < self.evaluated_at else ~self.final | (burst != self.bursting)
        self.evaluated_at = now
        if not redo.any():
            return self.use
        # Every row (short tasks: all still ramping) is a slice: views, no gathers.
        rows: slice | NDArray[np.int64] = slice(None) if redo.all() else np.flatnonzero(redo)
        model = sim.usage_model
        both = model.fraction(now, run.start[rows], _take(self.base, rows), run.burst_until[rows])
        new = _take(self.demand, rows) * np.where(sim.io_resources, both[:, 1:2], both[:, 0:1])
        # A row redone is ramping or changed burst state: its usage moved (marking a node whose
        # sums did not change only recomputes the same sums).
        self.dirty[run.node[rows]] = True
        if isinstance(rows, slice):
            self.use = new
        else:
            self.use = self.use.copy()  # callers may hold the previous array
            self.use[rows] = new
        self.bursting[rows] = burst[rows]
        # UsageModel.fraction clips (now − start)/ramp_s at 1: from there on the ramp is constant.
        self.final[rows] = (now - run.start[rows]) / model.ramp_s >= 1.0 if model.ramp_s > 0 else True
        return self.use

    def node_sums(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(N, R) usage of regular and of opportunistic rows per node, now (tracking from here on)."""
        if not self.active:
            self._start()
        use = self.current_use()
        if self.dirty.any():
            n, r = self.sim.cluster.n, use.shape[1]
            rows: slice | NDArray[np.int64] = (
                slice(None) if self.dirty.all() else np.flatnonzero(self.dirty[self.sim.running.node]))
            # One bin per (node, class, resource); each bin adds its rows in row order, as
            # Cluster.node_sums does, so the sums are the same to the last bit.
            bins = (self.bin[rows][:, None] + np.arange(r)).ravel()
            both = np.bincount(bins, weights=_take(use, rows).ravel(), minlength=2 * n * r).reshape(2 * n, r)
            if isinstance(rows, slice):
                self.reg, self.opp = both[:n], both[n:]
            else:
                self.reg[self.dirty] = both[:n][self.dirty]
                self.opp[self.dirty] = both[n:][self.dirty]
            self.dirty[:] = False
        return self.reg, self.opp

    # --- rates ---------------------------------------------------------------------------------

    def rates(self) -> NDArray[np.float64]:
        """Progress rate of each running row (fraction of full speed), as :meth:`Cluster.rates` gives it."""
        run, c = self.sim.running, self.sim.cluster
        reg, opp = self.node_sums()
        factors = node_factors(reg, opp, c.cap, c.cpu, c.mem)
        if factors is None:
            return np.ones(len(run))
        return task_rates(factors, self.masks, self.g_mask[run.group], run.opp, run.node)
