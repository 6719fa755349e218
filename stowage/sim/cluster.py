"""Per-node numpy state and the table of running task instances, with the contention model.

Nodes are rows of (N, R) arrays; running tasks are parallel 1-D arrays kept
compact (a finished task's row is dropped), so every per-task step is one
vectorised numpy call over the running set.

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

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from stowage.resources import CPU, MEMORY

__all__ = ["Cluster", "RowObserver", "Running", "kept", "kept_parts"]

_F = np.float64


class RowObserver(Protocol):
    def appended(self, run: Running, lo: int) -> None:
        """Rows ``lo:`` were just appended."""

    def dropping(self, run: Running, mask: NDArray[np.bool_]) -> None:
        """The rows outside ``mask`` are about to be dropped (row numbers as they are now)."""


@dataclass
class Running:
    """Running task instances (one row each)."""

    group: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    node: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    start: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, _F))
    work_left: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, _F))
    rate: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, _F))
    base: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, _F))
    io_base: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, _F))
    burst_until: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, _F))
    opp: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))
    uid: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """Each row's number, in start order and never reused: names a row across compactions."""
    version: int = 0
    """Bumped on every change of the rows or their bursts (keys caches of derived arrays)."""
    observers: list[RowObserver] = field(default_factory=list)
    """Told about rows appended and dropped (state kept per row elsewhere, e.g. ``sim.assumed``)."""
    next_uid: int = 0

    _FIELDS = ("group", "node", "start", "work_left", "rate", "base", "io_base", "burst_until", "opp", "uid")

    def __len__(self) -> int:
        return int(self.group.shape[0])

    def append(
        self,
        group: NDArray[np.int64],
        node: NDArray[np.int64],
        start: float,
        work: NDArray[np.float64],
        base: NDArray[np.float64],
        io_base: NDArray[np.float64],
        opp: NDArray[np.bool_],
    ) -> None:
        n = group.shape[0]
        self.group = np.concatenate([self.group, group])
        self.node = np.concatenate([self.node, node])
        self.start = np.concatenate([self.start, np.full(n, start)])
        self.work_left = np.concatenate([self.work_left, work])
        self.rate = np.concatenate([self.rate, np.ones(n)])
        self.base = np.concatenate([self.base, base])
        self.io_base = np.concatenate([self.io_base, io_base])
        self.burst_until = np.concatenate([self.burst_until, np.full(n, -np.inf)])
        self.opp = np.concatenate([self.opp, opp])
        self.uid = np.concatenate([self.uid, np.arange(self.next_uid, self.next_uid + n, dtype=np.int64)])
        self.next_uid += n
        self.version += 1
        for obs in self.observers:
            obs.appended(self, len(self) - n)

    def keep(self, mask: NDArray[np.bool_]) -> None:
        for obs in self.observers:
            obs.dropping(self, mask)
        parts = kept_parts(mask)
        for name in self._FIELDS:
            setattr(self, name, kept(getattr(self, name), mask, parts))
        self.version += 1


_FEW_DROPPED = 16  # up to this many rows dropped at once, copy the runs of kept rows between them


def kept_parts(mask: NDArray[np.bool_]) -> list[slice] | None:
    """The runs of kept rows as slices when few rows go, else None (then a boolean index serves).

    A finish drops a row or two out of thousands: copying the two or three runs around them costs
    about half of a boolean index, and a tenth of one along the last axis of a 2-D array.
    """
    gone = np.flatnonzero(~mask)
    if gone.size > _FEW_DROPPED:
        return None
    parts, lo = [], 0
    for i in gone.tolist():
        if i > lo:
            parts.append(slice(lo, i))
        lo = i + 1
    if lo < mask.shape[0]:
        parts.append(slice(lo, mask.shape[0]))
    return parts


def kept(arr: NDArray, mask: NDArray[np.bool_], parts: list[slice] | None) -> NDArray:
    """``arr[..., mask]`` (rows along the last axis) as a new array; ``parts`` from :func:`kept_parts`."""
    if parts is None:
        return arr.compress(mask, axis=-1)
    if len(parts) == 1:
        return arr[..., parts[0]].copy()
    return np.concatenate([arr[..., s] for s in parts] or [arr[..., :0]], axis=-1)


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
