"""Pods bound (or provisionally placed) within the ramp-up window, kept in numpy slots.

This is the assumed set ``S`` of ``A_opp = T_alloc·C − U − B − S``
(:func:`stowage.policy.harvest.assumed`): every pod placed less than the ramp-up
window ago counts its whole demand on its node until a sample of that node includes
it (:meth:`RecentSlots.drop_included`, ``harvest.in_sample``). Expiring slots at the window
enforces the time rule; what is left is a per-node sum, which the slots keep as a
ledger (``put`` adds, ``remove`` subtracts), so a request reads ``S`` for its
nodes in O(nodes) however many pods a burst has placed. The ledger is rebuilt
with the policy function whenever node rows are re-resolved (tests compare the two
after random histories).

Every change is O(1) Python work (a slot written or freed); expiry is vectorised.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stowage.policy import harvest

__all__ = ["RecentSlots"]

_INITIAL = 64
_HUGE = 1e300  # +inf demand counts as huge but finite, so the ledger can subtract it again


class RecentSlots:
    """Slots of (node, demand row, bind time, provisional) keyed by pod key. Not thread-safe: the model locks."""

    def __init__(self, width: int) -> None:
        self._slot: dict[str, int] = {}
        self._keys: list[str | None] = [None] * _INITIAL
        self._nodes: list[str] = [""] * _INITIAL
        self._free: list[int] = list(range(_INITIAL - 1, -1, -1))
        self.alive = np.zeros(_INITIAL, dtype=bool)
        self.provisional = np.zeros(_INITIAL, dtype=bool)
        self.bound_at_s = np.zeros(_INITIAL)
        self.started_at_s = np.full(_INITIAL, np.nan)  # when its containers started; NaN: not yet
        self.node_row = np.full(_INITIAL, -1, dtype=np.int64)
        self.demand = np.zeros((_INITIAL, width))
        self.rows_version = -1  # the node-index version node_row was resolved against
        # The ledger: per node row, Σ demand of the alive slots on it and how many there are.
        self.row_total = np.zeros((_INITIAL, width))
        self.row_count = np.zeros(_INITIAL, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def slot(self, key: str) -> int | None:
        return self._slot.get(key)

    def is_provisional(self, key: str) -> bool:
        slot = self._slot.get(key)
        return slot is not None and bool(self.provisional[slot])

    def widen(self, width: int) -> None:
        """The resource axis grew: pad the demand columns."""
        if width > self.demand.shape[1]:
            self.demand = np.pad(self.demand, ((0, 0), (0, width - self.demand.shape[1])))
            self.row_total = np.pad(self.row_total, ((0, 0), (0, width - self.row_total.shape[1])))

    def _grow(self) -> None:
        n = self.alive.shape[0]
        self._keys.extend([None] * n)
        self._nodes.extend([""] * n)
        self._free.extend(range(2 * n - 1, n - 1, -1))
        self.alive = np.pad(self.alive, (0, n))
        self.provisional = np.pad(self.provisional, (0, n))
        self.bound_at_s = np.pad(self.bound_at_s, (0, n))
        self.started_at_s = np.pad(self.started_at_s, (0, n), constant_values=np.nan)
        self.node_row = np.pad(self.node_row, (0, n), constant_values=-1)
        self.demand = np.pad(self.demand, ((0, n), (0, 0)))

    def put(
        self,
        key: str,
        node: str,
        node_row: int,
        demand: np.ndarray,
        bound_at_s: float,
        provisional: bool,
        started_at_s: float | None = None,
    ) -> None:
        self.remove(key)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot[key] = slot
        self._keys[slot], self._nodes[slot] = key, node
        self.alive[slot] = True
        self.provisional[slot] = provisional
        self.bound_at_s[slot] = bound_at_s
        self.started_at_s[slot] = np.nan if started_at_s is None else started_at_s
        self.node_row[slot] = node_row
        self.demand[slot] = 0.0
        # Negative or NaN amounts count as 0, as in policy.harvest.assumed.
        self.demand[slot, : demand.shape[0]] = np.maximum(np.nan_to_num(demand, nan=0.0, posinf=_HUGE, neginf=0.0), 0.0)
        self._book(slot, +1)

    def remove(self, key: str) -> bool:
        slot = self._slot.pop(key, None)
        if slot is None:
            return False
        self._book(slot, -1)
        self._keys[slot] = None
        self.alive[slot] = False
        self._free.append(slot)
        return True

    def _book(self, slot: int, sign: int) -> None:
        """Add (+1) or take back (−1) a slot's demand on its node's ledger row."""
        row = int(self.node_row[slot])
        if row < 0:
            return
        if row >= self.row_count.shape[0]:
            grow = max(row + 1, 2 * self.row_count.shape[0]) - self.row_count.shape[0]
            self.row_total = np.pad(self.row_total, ((0, grow), (0, 0)))
            self.row_count = np.pad(self.row_count, (0, grow))
        self.row_count[row] += sign
        if self.row_count[row] <= 0:
            self.row_count[row] = 0
            self.row_total[row] = 0.0  # exactly zero again, whatever float drift the sums left
        else:
            self.row_total[row] += sign * self.demand[slot]
            np.maximum(self.row_total[row], 0.0, out=self.row_total[row])

    def expire(self, now_s: float, window_s: float) -> None:
        """Free every slot bound ``window_s`` or longer ago."""
        old = np.flatnonzero(self.alive & (now_s - self.bound_at_s >= window_s))
        for slot in old.tolist():
            key = self._keys[slot]
            if key is not None:
                self.remove(key)

    def drop_included(self, sampled_at_s: np.ndarray, period_s: float) -> int:
        """Free every slot whose node's latest sample includes it (``harvest.in_sample``); how many were freed.

        ``sampled_at_s`` is indexed by node row (the rows :meth:`resolve_rows` resolved; NaN: no sample). From that
        sample on the pod's usage is in ``U``: it is not assumed again (a later sample includes it too). Call
        after :meth:`resolve_rows`.
        """
        alive = np.flatnonzero(self.alive & ~np.isnan(self.started_at_s))
        if alive.size == 0:
            return 0
        seen = harvest.in_sample(self.started_at_s[alive], self.node_row[alive], sampled_at_s, period_s)
        for slot in alive[seen].tolist():
            key = self._keys[slot]
            if key is not None:
                self.remove(key)
        return int(seen.sum())

    def resolve_rows(self, index: Mapping[str, int], version: int, now_s: float, window_s: float) -> None:
        """Re-resolve node rows after nodes were added or removed (rare: only then), and rebuild the ledger.

        Call right after :meth:`expire` with the same ``now_s`` and ``window_s``.
        """
        if version == self.rows_version:
            return
        alive = np.flatnonzero(self.alive)
        for slot in alive.tolist():
            self.node_row[slot] = index.get(self._nodes[slot], -1)
        self.rows_version = version
        n_rows = max(int(self.node_row[alive].max(initial=-1)) + 1, self.row_count.shape[0])
        self.row_total = harvest.assumed(
            self.demand[alive], self.bound_at_s[alive], self.node_row[alive], now_s, window_s, n_rows
        )
        self.row_count = np.bincount(self.node_row[alive][self.node_row[alive] >= 0], minlength=n_rows)

    def assumed_on(self, rows: np.ndarray, exclude: str | None = None) -> np.ndarray:
        """``S`` (N,R) on the node ``rows`` of a request (−1: unknown → 0), without pod ``exclude``.

        A node named twice gets its ``S`` at both positions. ``exclude`` is a pod being
        filtered again, which must not compete with its own provisional placement.
        """
        n_rows = self.row_count.shape[0]
        safe = (rows >= 0) & (rows < n_rows)
        out = self.row_total[np.where(safe, rows, 0)]
        out[~safe] = 0.0
        slot = self._slot.get(exclude) if exclude is not None else None
        if slot is not None and self.node_row[slot] >= 0:
            row = self.node_row[slot]
            at = rows == row
            # The pod alone on its node leaves exactly 0, as the ledger would after removing it.
            out[at] = 0.0 if self.row_count[row] <= 1 else np.maximum(out[at] - self.demand[slot], 0.0)
        return out
