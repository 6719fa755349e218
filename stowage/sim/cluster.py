"""Per-node numpy state and the table of running task instances, with the contention model.

Nodes are rows of (N, R) arrays; running tasks are parallel 1-D arrays kept
compact and in start order (a finished task's row is dropped in place, see
:class:`Block`), so every per-task step is one vectorised numpy call over the
running set.

Contention model (what the simulator charges when a node's real usage exceeds
its capacity; Tetris §5.3.1 notes kube-scheduler does not account disk and
network at all, so those nodes really do get over-allocated):

* **cpu**: the kernel's CPU weights rank regular pods first. Opportunistic pods
  have the minimum weight (DESIGN: cpu request "0"), so they get only what
  regular pods leave: ``f_opp = clip((C − U_reg)/U_opp, 0, 1)``; regular pods
  slow only if they alone exceed the node, ``f_reg = min(1, C/U_reg)``.
* **disk, network** (and extended resources): bandwidth is shared in proportion
  to use, no priority: ``f = min(1, C/(U_reg + U_opp))`` for every task on it.
* A task runs at ``min`` of the factors of the resources it uses.
* **memory** above capacity is not a slowdown: the OOM killer ends
  opportunistic tasks first (``stowage.sim.monitor``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from stowage.resources import CPU, MEMORY

__all__ = ["FEW_ROWS", "Block", "Cluster", "RowObserver", "Running", "block_field"]

_F = np.float64


class RowObserver(Protocol):
    def appended(self, run: Running, lo: int) -> None:
        """Rows ``lo:`` were just appended."""

    def dropping(self, run: Running, gone: NDArray[np.int64]) -> None:
        """Rows ``gone`` (sorted, distinct, row numbers as they are now) are about to be dropped."""


_FIRST_CAPACITY = 1024  # rows; doubled as needed
_FEW_DROPPED = 16  # up to this many rows dropped at once, move the runs of kept rows between them
FEW_ROWS = 4
"""Up to this many rows started or stopped at once, per-row bookkeeping runs on Python numbers: numpy's
per-call cost is more than the arithmetic (the same IEEE operations in the same order, so the same bits)."""


class Block:
    """Parallel per-row arrays of one dtype, one row of ``data`` each, changed in place.

    Rows are the last axis: ``data[:, lo:lo + n]`` is in use and the rest is spare capacity, so
    appending writes after it (compacting or doubling when the end is reached), and dropping a row
    moves the shorter side of the rows in use over it, keeping row order (per-node sums still add in
    start order, bit for bit). A finish drops a row or two out of thousands at every event, mostly
    old rows near the front: a copy of every field per drop cost the simulator more than the rest of
    the bookkeeping. Views handed out are valid until the next append or drop.
    """

    __slots__ = ("_views", "data", "lo", "n")

    def __init__(self, dtype: type | np.dtype, fields: int) -> None:
        self.data = np.zeros((fields, _FIRST_CAPACITY), dtype=dtype)
        self.lo = 0
        self.n = 0
        self._views: tuple[NDArray, list[memoryview]] | None = None

    def _fields(self) -> list[memoryview]:
        """A memoryview of each field of ``data`` (kept while ``data`` is the same buffer). Assigning a
        slice of one to another slice of it is one ``memmove`` of the bytes, overlapping or not: half of
        what numpy's overlapping 1-D assignment costs (it walks a range that moves up backwards)."""
        views = self._views
        if views is None or views[0] is not self.data:
            views = self._views = (self.data, [memoryview(row) for row in self.data])
        return views[1]

    def __getstate__(self) -> tuple[NDArray, int, int]:
        return self.data, self.lo, self.n  # not the memoryviews: they do not pickle, and are rebuilt

    def __setstate__(self, state: tuple[NDArray, int, int]) -> None:
        self.data, self.lo, self.n = state
        self._views = None

    def view(self) -> NDArray:
        return self.data[:, self.lo : self.lo + self.n]

    def take(self, rows: NDArray[np.int64]) -> NDArray:
        """``view()[:, rows]`` as a new array. From the whole buffer (contiguous): ``take`` along the last
        axis of the (non-contiguous) view copies every row in use first."""
        return self.data.take(rows + self.lo if self.lo else rows, axis=1)

    def reserve(self, k: int) -> slice:
        """Room for ``k`` more rows; the slice of ``data`` they go in (the caller writes every field of it,
        after this call: the buffer may be a new one)."""
        lo, n = self.lo, self.n
        cap = self.data.shape[1]
        if lo + n + k > cap:
            size = max(cap, 2 * (n + k))  # at most half full after: compacting stays rare
            if size == cap:
                for row in self.data:
                    row[:n] = row[lo : lo + n]
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
        """Drop rows ``gone`` (sorted, distinct, numbered as in ``view()``), keeping the others in order."""
        d, lo, n = self.data, self.lo, self.n
        if gone.size > _FEW_DROPPED:
            keep = np.ones(n, dtype=bool)
            keep[gone] = False
            m = n - gone.size
            d[:, lo : lo + m] = d[:, lo : lo + n].compress(keep, axis=1)
            self.n = m
            return
        g = gone.tolist()
        if not g:
            return
        # Move the runs of kept rows between the gaps, one field at a time (an overlapping 1-D range moves
        # directly, a 2-D one through numpy's buffer at three times the cost; see _fields): those before
        # the last gap up by as many rows, or those after the first gap down, whichever moves fewer rows.
        fields = self._fields()
        if g[-1] < n - g[0]:
            w = lo + g[-1] + 1  # data index just past the region the kept rows before it fill
            for a, b in zip([-1, *g[:-1]][::-1], g[::-1], strict=True):
                k = b - a - 1  # kept rows a+1 .. b-1
                if k > 0:
                    for row in fields:
                        row[w - k : w] = row[lo + a + 1 : lo + b]
                    w -= k
            self.lo = lo + len(g)
        else:
            w = lo + g[0]
            for a, b in zip(g, [*g[1:], n], strict=True):
                k = b - a - 1  # kept rows a+1 .. b-1
                if k > 0:
                    for row in fields:
                        row[w : w + k] = row[lo + a + 1 : lo + b]
                    w += k
        self.n = n - len(g)


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
        self._i = Block(np.int64, 3)  # group, node, uid
        self._b = Block(np.bool_, 1)  # opp
        self.version = 0
        """Bumped on every change of the rows or their bursts (keys caches of derived arrays)."""
        self.observers: list[RowObserver] = []
        """Told about rows appended and dropped (state kept per row elsewhere, e.g. ``sim.assumed``)."""
        self.next_uid = 0

    start = block_field("_f", 0, "When the row started.")
    work_left = block_field("_f", 1, "Work left, in seconds at full speed.")
    rate = block_field("_f", 2, "Progress rate (fraction of full speed) since the last event.")
    base = block_field("_f", 3, "Usage fraction of cpu and memory after the ramp-up.")
    io_base = block_field("_f", 4, "Usage fraction of disk and network.")
    burst_until = block_field("_f", 5, "End of the row's current burst (−inf: none yet).")
    group = block_field("_i", 0, "The row's task group.")
    node = block_field("_i", 1, "The node it runs on.")
    uid = block_field("_i", 2, "Each row's number, in start order and never reused: names a row across drops.")
    opp = block_field("_b", 0, "Whether it runs opportunistically.")

    def __len__(self) -> int:
        return self._i.n

    def append(
        self,
        group: NDArray[np.int64] | Sequence[int],
        node: NDArray[np.int64] | Sequence[int],
        start: float,
        work: NDArray[np.float64] | Sequence[float],
        base: NDArray[np.float64] | Sequence[float],
        io_base: NDArray[np.float64] | Sequence[float],
        opp: NDArray[np.bool_] | Sequence[bool],
    ) -> None:
        """Rows that start at ``start``, one per element (arrays, or lists for a few rows)."""
        n = len(group)
        lo = len(self)
        s, si, sb = self._f.reserve(n), self._i.reserve(n), self._b.reserve(n)
        f, i, b = self._f.data, self._i.data, self._b.data  # after reserve: it may have grown them
        uid = self.next_uid
        if n <= FEW_ROWS:
            # A start or two: one element per field and row (a slice assignment costs numpy far more).
            for k in range(n):
                c, ci, cb = s.start + k, si.start + k, sb.start + k
                f[0, c], f[1, c], f[2, c], f[3, c], f[4, c], f[5, c] = start, work[k], 1.0, base[k], io_base[k], -np.inf
                i[0, ci], i[1, ci], i[2, ci] = group[k], node[k], uid + k
                b[0, cb] = opp[k]
        else:
            f[0, s], f[1, s], f[2, s], f[3, s], f[4, s], f[5, s] = start, work, 1.0, base, io_base, -np.inf
            i[0, si], i[1, si], i[2, si] = group, node, np.arange(uid, uid + n)
            b[0, sb] = opp
        self.next_uid = uid + n
        self.version += 1
        for obs in self.observers:
            obs.appended(self, lo)

    def drop(self, rows: NDArray[np.int64]) -> None:
        """Drop the given rows (any order); observers are told first, with them sorted."""
        if rows.size <= FEW_ROWS:
            # A finish or two, nearly always sorted already (np.unique's sort costs more than the rest).
            listed = rows.tolist()
            distinct = sorted(set(listed))
            gone = rows if listed == distinct else np.array(distinct, dtype=rows.dtype)
        else:
            gone = np.unique(rows)
        for obs in self.observers:
            obs.dropping(self, gone)
        for block in (self._f, self._i, self._b):
            block.drop(gone)
        self.version += 1


class Cluster:
    """Node capacity and the regular / opportunistic allocation on each node."""

    def __init__(self, resources: tuple[str, ...], capacity: NDArray[np.float64], harvest: NDArray[np.bool_]):
        self.resources = resources
        self.cap = np.asarray(capacity, dtype=_F)
        self.n, self.r = self.cap.shape
        self.harvest = np.asarray(harvest, dtype=bool)
        self.reg_alloc = np.zeros_like(self.cap)  # Σ requests of regular tasks
        self.opp_alloc = np.zeros_like(self.cap)  # Σ demands of opportunistic tasks
        self.usage = np.zeros_like(self.cap)  # the node monitor's last sample
        self.blocked = np.zeros_like(self.cap)  # OPERA PRESERVE B
        self.total = self.cap.sum(axis=0)
        self.cpu = resources.index(CPU)
        self.mem = resources.index(MEMORY)

    def clamp_allocs(self, nodes: Iterable[int]) -> None:
        """``np.maximum(alloc, 0.0)`` of both allocations on these nodes, in place.

        Read as Python floats first: a row already at or above +0.0 everywhere (the usual case) is what
        the maximum gives back, so numpy is called only for a row with a negative, −0.0 or NaN entry.
        """
        for n in nodes:
            for alloc in (self.reg_alloc, self.opp_alloc):
                row = alloc[n]
                for x in row.tolist():
                    if not (x > 0.0 or (x == 0.0 and math.copysign(1.0, x) > 0.0)):
                        np.maximum(row, 0.0, out=row)
                        break

    def node_sums(self, values: NDArray[np.float64], node: NDArray[np.int64]) -> NDArray[np.float64]:
        """Σ of per-task rows (P, R) per node → (N, R)."""
        out = np.empty((self.n, self.r), dtype=_F)
        for j in range(self.r):
            out[:, j] = np.bincount(node, weights=values[:, j], minlength=self.n)
        return out

    def rates(
        self, use: NDArray[np.float64], node: NDArray[np.int64], opp: NDArray[np.bool_], uses: NDArray[np.bool_]
    ) -> NDArray[np.float64]:
        """Progress rate per running task (fraction of full speed) under the contention model.

        use (P, R) each task's current usage; uses (P, R) whether the task needs
        the resource at all (demand > 0).
        """
        p = use.shape[0]
        if p == 0:
            return np.zeros(0)
        any_opp = bool(opp.any())
        if any_opp:
            reg_use = self.node_sums(np.where(opp[:, None], 0.0, use), node)
            opp_use = self.node_sums(np.where(opp[:, None], use, 0.0), node)
        else:
            reg_use, opp_use = self.node_sums(use, node), np.zeros_like(self.cap)
        cap = self.cap
        total = reg_use + opp_use
        if not (total > cap * (1 + 1e-9)).any():
            return np.ones(p)
        with np.errstate(divide="ignore", invalid="ignore"):
            shared = np.where(total > cap, cap / total, 1.0)
            f_reg = shared.copy()
            f_opp = shared.copy()
            c = self.cpu
            f_reg[:, c] = np.where(reg_use[:, c] > cap[:, c], cap[:, c] / reg_use[:, c], 1.0)
            left = np.maximum(cap[:, c] - reg_use[:, c], 0.0)
            f_opp[:, c] = np.where(opp_use[:, c] > left, left / np.where(opp_use[:, c] > 0, opp_use[:, c], 1), 1.0)
        f_reg[:, self.mem] = 1.0  # memory overload is an OOM kill, not a slowdown
        f_opp[:, self.mem] = 1.0
        factor = np.where(opp[:, None], f_opp[node], f_reg[node])
        factor = np.where(uses, np.nan_to_num(factor, nan=1.0), 1.0)
        return np.clip(factor.min(axis=1), 0.0, 1.0)
