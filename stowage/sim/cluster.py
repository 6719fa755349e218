"""Per-node numpy state and the table of running task instances, with the contention model.

Nodes are rows of (N, R) arrays; running tasks are parallel 1-D arrays kept compact and in start order (a finished
task's row is dropped in place, see :class:`Block`), so every per-task step is one vectorised numpy call over the
running set.

Contention model (what the simulator charges when a node's real usage exceeds its capacity; Tetris §5.3.1 notes
kube-scheduler does not account disk and network at all, so those nodes really do get over-allocated):

* **cpu**: the kernel's CPU weights rank regular pods first. Opportunistic pods have the minimum weight (DESIGN: cpu
  request "0"), so they get only what regular pods leave: ``f_opp = clip((C − U_reg)/U_opp, 0, 1)``; regular pods
  slow only if they alone exceed the node, ``f_reg = min(1, C/U_reg)``.
* **disk, network** (and extended resources): bandwidth is shared in proportion to use, no priority:
  ``f = min(1, C/(U_reg + U_opp))`` for every task on it. That is fluid sharing: an over-subscribed disk or link
  still delivers its whole capacity. Tetris §2 says over-allocation "can sharply lower throughput" (disk seeks,
  network incast); ``UsageModel.overcommit_loss`` β charges it on disk and network: at ρ = U/C > 1 the resource
  delivers ``C/(1 + β(ρ − 1))`` in all, so ``f = 1/(ρ(1 + β(ρ − 1)))``. The default is 0 (docs/simulator.md,
  "Contention": why, and what β > 0 changes).
* A task runs at ``min`` of the factors of the resources it uses.
* **memory** above capacity is not a slowdown: the OOM killer ends opportunistic tasks first
  (``stowage.sim.monitor``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from stowage.policy import tolerances
from stowage.resources import CPU, MEMORY

__all__ = ["Block", "Cluster", "RowObserver", "Running", "block_field"]

_F = np.float64


class RowObserver(Protocol):
    def appended(self, run: Running, lo: int) -> None:
        """Rows ``lo:`` were just appended."""

    def dropping(self, run: Running, gone: NDArray[np.int64]) -> None:
        """Rows ``gone`` (sorted, distinct, row numbers as they are now) are about to be dropped."""


_FIRST_CAPACITY = 1024  # rows; doubled as needed


class Block:
    """Parallel per-row arrays of one dtype, one row of ``data`` each, changed in place.

    Rows are the last axis: ``data[:, lo:lo + n]`` is in use and the rest is spare capacity, so
    appending writes after it (compacting or doubling when the end is reached), and dropping rows
    moves the shorter side of the rows in use over them, keeping row order (per-node sums still add
    in start order). A finish drops a row or two out of thousands at every event, mostly old rows
    near the front: copying every row per drop cost more than the rest of the bookkeeping.
    Views handed out are valid until the next append or drop.
    """

    __slots__ = ("data", "lo", "n")

    def __init__(self, dtype: type | np.dtype, fields: int) -> None:
        self.data = np.zeros((fields, _FIRST_CAPACITY), dtype=dtype)
        self.lo = 0
        self.n = 0

    def view(self) -> NDArray:
        return self.data[:, self.lo : self.lo + self.n]

    def reserve(self, k: int) -> slice:
        """Room for ``k`` more rows; the slice of ``data`` they go in (the caller writes every field of it,
        after this call: the buffer may be a new one)."""
        lo, n = self.lo, self.n
        cap = self.data.shape[1]
        if lo + n + k > cap:
            size = max(cap, 2 * (n + k))  # at most half full after: compacting stays rare
            if size == cap:
                self.data[:, :n] = self.data[:, lo : lo + n].copy()
            else:
                grown = np.zeros((self.data.shape[0], size), dtype=self.data.dtype)
                grown[:, :n] = self.data[:, lo : lo + n]
                self.data = grown
            self.lo = lo = 0
        self.n = n + k
        return slice(lo + n, lo + n + k)

    def clear(self) -> None:
        self.lo = self.n = 0

    def drop(self, gone: NDArray[np.int64]) -> None:
        """Drop rows ``gone`` (sorted, distinct, numbered as in ``view()``), keeping the others in order.

        The kept rows before the last gone one move up, or those after the first gone one move down,
        whichever side is shorter (``compress`` copies them, so the overlap does not matter)."""
        if gone.size == 0:
            return
        d, lo, n = self.data, self.lo, self.n
        first, last, k = int(gone[0]), int(gone[-1]), gone.size
        if last < n - first:  # rows 0..last hold every gone one: their kept rows end at last
            keep = np.ones(last + 1, dtype=bool)
            keep[gone] = False
            d[:, lo + k : lo + last + 1] = d[:, lo : lo + last + 1].compress(keep, axis=1)
            self.lo = lo + k
        else:
            keep = np.ones(n - first, dtype=bool)
            keep[gone - first] = False
            d[:, lo + first : lo + n - k] = d[:, lo + first : lo + n].compress(keep, axis=1)
        self.n = n - k


def block_field(block: str, row: int, doc: str) -> property:
    """A per-row field as a view of one row of the :class:`Block` in attribute ``block``; assigning copies
    into it (the running table's fields, and state kept beside it such as ``sim.rates``')."""

    def get(self: object) -> NDArray:
        b = getattr(self, block)
        return b.data[row, b.lo : b.lo + b.n]

    def put(self: object, values: NDArray) -> None:
        b = getattr(self, block)
        b.data[row, b.lo : b.lo + b.n] = values

    return property(get, put, doc=doc)


class Running:
    """Running task instances (one row each, in start order), stored in place (:class:`Block`).

    Fields are views: valid until the next ``append`` or ``drop``; assigning one copies into it.
    """

    def __init__(self) -> None:
        self._f = Block(_F, 6)  # start, work_left, rate, base, io_base, burst_until
        self._i = Block(np.int64, 2)  # group, node
        self._b = Block(np.bool_, 2)  # opp, promoted
        self.version = 0
        """Bumped on every change of the rows or their bursts (keys caches of derived arrays)."""
        self.observers: list[RowObserver] = []
        """Told about rows appended and dropped (state kept per row elsewhere: ``rates.RateTracker``)."""

    start = block_field("_f", 0, "When the row started.")
    work_left = block_field("_f", 1, "Work left, in seconds at full speed.")
    rate = block_field("_f", 2, "Progress rate (fraction of full speed) since the last event.")
    base = block_field("_f", 3, "Usage fraction of cpu and memory after the ramp-up.")
    io_base = block_field("_f", 4, "Usage fraction of disk and network.")
    burst_until = block_field("_f", 5, "End of the row's current burst (−inf: none yet).")
    group = block_field("_i", 0, "The row's task group.")
    node = block_field("_i", 1, "The node it runs on.")
    opp = block_field("_b", 0, "Whether it runs opportunistically.")
    promoted = block_field("_b", 1, "Whether it started opportunistic and was promoted to regular in place.")

    def __len__(self) -> int:
        return self._i.n

    def append(
        self,
        group: NDArray[np.int64],
        node: NDArray[np.int64],
        start: float | NDArray[np.float64],
        work: NDArray[np.float64],
        base: NDArray[np.float64],
        io_base: NDArray[np.float64],
        opp: NDArray[np.bool_],
    ) -> None:
        """Rows that start at ``start`` (one time, or one per row), one per element."""
        n = len(group)
        lo = len(self)
        s, si, sb = self._f.reserve(n), self._i.reserve(n), self._b.reserve(n)
        f, i, b = self._f.data, self._i.data, self._b.data  # after reserve: it may have grown them
        f[0, s], f[1, s], f[2, s], f[3, s], f[4, s], f[5, s] = start, work, 1.0, base, io_base, -np.inf
        i[0, si], i[1, si] = group, node
        b[0, sb], b[1, sb] = opp, False
        self.version += 1
        for obs in self.observers:
            obs.appended(self, lo)

    def drop(self, rows: NDArray[np.int64]) -> None:
        """Drop the given rows (any order); observers are told first, with them sorted."""
        gone = np.unique(rows)
        for obs in self.observers:
            obs.dropping(self, gone)
        for block in (self._f, self._i, self._b):
            block.drop(gone)
        self.version += 1


class Cluster:
    """Node capacity and the regular / opportunistic allocation on each node."""

    def __init__(self, resources: tuple[str, ...], capacity: NDArray[np.float64], harvest: NDArray[np.bool_]):
        self.resources, self.cap = resources, np.asarray(capacity, dtype=_F)
        self.n, self.r = self.cap.shape
        self.harvest = np.asarray(harvest, dtype=bool)
        self.reg_alloc = np.zeros_like(self.cap)  # Σ requests of regular tasks
        self.opp_alloc = np.zeros_like(self.cap)  # Σ demands of opportunistic tasks
        self.usage = np.zeros_like(self.cap)  # the node monitor's last sample
        self.blocked = np.zeros_like(self.cap)  # OPERA PRESERVE B
        self.total = self.cap.sum(axis=0)
        self.cpu = resources.index(CPU)
        self.mem = resources.index(MEMORY)

    def regular_free(self) -> NDArray[np.float64]:
        return self.cap - self.reg_alloc

    def node_sums(self, values: NDArray[np.float64], node: NDArray[np.int64]) -> NDArray[np.float64]:
        """Σ of per-task rows (P, R) per node → (N, R)."""
        out = np.empty((self.n, self.r), dtype=_F)
        for j in range(self.r):
            out[:, j] = np.bincount(node, weights=values[:, j], minlength=self.n)
        return out




def contention_table(
    reg_use: NDArray[np.float64], opp_use: NDArray[np.float64], cap: NDArray[np.float64], cpu: int, mem: int,
    masks: NDArray[np.bool_], io: NDArray[np.bool_] | None = None, loss: float = 0.0,
) -> NDArray[np.float64] | None:
    """The contention model (module docstring), per node: (2, M, N) each class's (regular, opportunistic)
    rate on each node for each resource mask (the resources a task uses), in [0, 1]; None when no node's
    usage exceeds its capacity. Bandwidth and extended resources are shared in proportion, cpu is left to
    opportunistic tasks after regular ones, memory is never a slowdown, NaN factors (0/0) read as 1. ``loss``
    (``UsageModel.overcommit_loss``) lowers what an over-subscribed ``io`` resource (disk, network) delivers.
    """
    total = reg_use + opp_use
    if not (total > cap * (1 + tolerances.FEASIBILITY_RTOL)).any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        shared = np.nan_to_num(np.where(total > cap, cap / total, 1.0), nan=1.0)
        if loss > 0 and io is not None:
            rho = np.maximum(total[:, io] / cap[:, io], 1.0)
            shared[:, io] /= np.nan_to_num(1.0 + loss * (rho - 1.0), nan=1.0, posinf=1.0)
        rc, oc, cc = reg_use[:, cpu], opp_use[:, cpu], cap[:, cpu]
        left = np.maximum(cc - rc, 0.0)
        cpu_f = (np.nan_to_num(np.where(rc > cc, cc / rc, 1.0), nan=1.0),
                 np.nan_to_num(np.where(oc > left, left / np.where(oc > 0, oc, 1), 1.0), nan=1.0))
    table = np.ones((2, len(masks), cap.shape[0]))
    for k, m in enumerate(masks.tolist()):
        cols = [r for r, used in enumerate(m) if used and r not in (cpu, mem)]
        s = shared[:, cols].min(axis=1) if cols else np.ones(cap.shape[0])
        for cls in (0, 1):
            table[cls, k] = np.minimum(s, cpu_f[cls]) if m[cpu] else s
    np.clip(table, 0.0, 1.0, out=table)
    return table
