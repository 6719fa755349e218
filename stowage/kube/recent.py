"""Pods bound (or provisionally placed) within the ramp-up window, kept in numpy slots.

Every change is O(1) Python work (a slot written or freed); reading them for a
request, and expiring old ones, is vectorised. This is the raw material of the
assumed set ``S`` (policy.harvest.assumed).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["RecentSlots"]

_INITIAL = 64


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
        self.node_row = np.full(_INITIAL, -1, dtype=np.int64)
        self.demand = np.zeros((_INITIAL, width))
        self.rows_version = -1  # the node-index version node_row was resolved against

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

    def _grow(self) -> None:
        n = self.alive.shape[0]
        self._keys.extend([None] * n)
        self._nodes.extend([""] * n)
        self._free.extend(range(2 * n - 1, n - 1, -1))
        self.alive = np.pad(self.alive, (0, n))
        self.provisional = np.pad(self.provisional, (0, n))
        self.bound_at_s = np.pad(self.bound_at_s, (0, n))
        self.node_row = np.pad(self.node_row, (0, n), constant_values=-1)
        self.demand = np.pad(self.demand, ((0, n), (0, 0)))

    def put(self, key: str, node: str, node_row: int, demand: np.ndarray, bound_at_s: float, provisional: bool) -> None:
        self.remove(key)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot[key] = slot
        self._keys[slot], self._nodes[slot] = key, node
        self.alive[slot] = True
        self.provisional[slot] = provisional
        self.bound_at_s[slot] = bound_at_s
        self.node_row[slot] = node_row
        self.demand[slot] = 0.0
        self.demand[slot, : demand.shape[0]] = demand

    def remove(self, key: str) -> bool:
        slot = self._slot.pop(key, None)
        if slot is None:
            return False
        self._keys[slot] = None
        self.alive[slot] = False
        self._free.append(slot)
        return True

    def expire(self, now_s: float, window_s: float) -> None:
        """Free every slot bound ``window_s`` or longer ago."""
        old = np.flatnonzero(self.alive & (now_s - self.bound_at_s >= window_s))
        for slot in old.tolist():
            key = self._keys[slot]
            if key is not None:
                self.remove(key)

    def resolve_rows(self, index: Mapping[str, int], version: int) -> None:
        """Re-resolve node rows after nodes were added or removed (rare: only then)."""
        if version == self.rows_version:
            return
        for slot in np.flatnonzero(self.alive).tolist():
            self.node_row[slot] = index.get(self._nodes[slot], -1)
        self.rows_version = version
