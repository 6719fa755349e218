"""Memoised tails of the ``harvest-capacity`` message, per (node row, resource).

A rejection reads ``memory 3.0Gi > harvestable 1.2Gi (0.90 × 16Gi − used 13.2Gi − blocked 0)``.
Only the head (``memory 3.0Gi > harvestable ``) depends on the pod; the tail depends on
the node's numbers ``(A_opp, C, U, B, S)`` alone. Formatting thousands of tails per
request was half of the filter's CPU, yet between utilization refreshes almost every
node's numbers stay the same: only the node a pod was just assumed on, or whose pods
changed, moves.

So each tail is stored with the five numbers it shows, and reused only while the
node's current numbers are *equal* to them (compared for every rejected node, every
request, vectorised). The key is the content itself, so no event can be missed: a
pod event, an assumption, a Prometheus refresh or an expired ramp-up shows in the
very next request's message. Rows are the cluster model's row numbers; a row
reused by another node simply misses until its numbers match.
"""

from __future__ import annotations

import threading

import numpy as np
from stowage.extender.messages import human_points

__all__ = ["ASSUMED", "AVAILABLE", "BLOCKED", "CAPACITY", "USED", "HarvestTails", "tail_texts"]

#: Columns of the ``values`` array: the numbers a tail shows, in this order.
AVAILABLE, CAPACITY, USED, BLOCKED, ASSUMED = range(5)
_WIDTH = 5
_HEADS_LIMIT = 4096


def tail_texts(values: np.ndarray, resource: str, t_alloc: str) -> list[str]:
    """Tails for the rows of ``values`` (k,5), each formatted on its own (:func:`human_points`)."""
    avail = human_points(values[:, AVAILABLE], resource)
    cap = human_points(values[:, CAPACITY], resource, exact=True)
    used = human_points(values[:, USED], resource)
    blocked = human_points(values[:, BLOCKED], resource)
    assumed = human_points(values[:, ASSUMED], resource)
    return [
        f"{a} ({t_alloc}{c} − used {u} − blocked {b}" + (f" − assumed {s})" if s != "0" else ")")
        for a, c, u, b, s in zip(avail, cap, used, blocked, assumed, strict=True)
    ]


class _Column:
    """One resource's tails by model row, with the numbers each was formatted from."""

    def __init__(self, t_alloc: str) -> None:
        self.t_alloc = t_alloc
        self.valid = np.zeros(0, dtype=bool)
        self.keys = np.zeros((0, _WIDTH))
        self.texts = np.empty(0, dtype=object)

    def grow(self, size: int) -> None:
        if size <= self.valid.shape[0]:
            return
        size = max(size, 2 * self.valid.shape[0], 64)
        extra = size - self.valid.shape[0]
        self.valid = np.pad(self.valid, (0, extra))
        self.keys = np.pad(self.keys, ((0, extra), (0, 0)))
        self.texts = np.concatenate([self.texts, np.full(extra, "", dtype=object)])


class HarvestTails:
    """The cache of tails and of whole messages; one per extender. Thread-safe (one lock; vectorised work)."""

    def __init__(self) -> None:
        self._columns: dict[str, _Column] = {}
        self._lock = threading.Lock()
        self._heads: dict[tuple[str, ...], int] = {}
        self._next_heads = 0
        self._message_key = np.zeros(0, dtype=np.int64)  # heads id × 2^R + over-pattern; −1: none
        self._message_text = np.empty(0, dtype=object)
        self.hits = 0
        self.misses = 0

    def lookup(
        self, resource: str, rows: np.ndarray, values: np.ndarray, t_alloc: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(hit (k,), tails (k,) object)`` of model ``rows`` showing ``values`` (k,5).

        Formats only the rows whose numbers changed (``hit`` False there). The caller
        guarantees the column is pointwise (``messages.pointwise``): then a tail is a
        function of its row's numbers alone, and equal numbers give the same text.
        """
        with self._lock:
            column = self._columns.get(resource)
            if column is None or column.t_alloc != t_alloc:
                column = self._columns[resource] = _Column(t_alloc)
            column.grow(int(rows.max()) + 1 if rows.size else 0)
            stored = column.keys[rows]
            same = (stored == values) | (np.isnan(stored) & np.isnan(values))
            hit = column.valid[rows] & same.all(axis=1)
            miss = np.flatnonzero(~hit)
            if miss.size:
                miss_rows = rows[miss]
                column.texts[miss_rows] = tail_texts(values[miss], resource, t_alloc)
                column.keys[miss_rows] = values[miss]
                column.valid[miss_rows] = True
            self.hits += int(rows.size - miss.size)
            self.misses += int(miss.size)
            return hit, column.texts[rows]

    # --- whole messages ---------------------------------------------------------------------------
    # A row's last message is kept with the key it was built for: which heads (the pod's demand on
    # the resources over anywhere in the request) and which of those are over on the row. It is
    # reused only when that key matches and every tail of the row hit, i.e. the same heads joined
    # to the same tails: the same text.

    def heads_id(self, heads: tuple[str, ...]) -> int:
        """A small int naming this tuple of heads (the pod-dependent part of the messages)."""
        with self._lock:
            found = self._heads.get(heads)
            if found is None:
                if len(self._heads) >= _HEADS_LIMIT:  # demand shapes seen: bounded; forget and start over
                    self._heads.clear()
                    self._message_key[:] = -1
                found = self._heads[heads] = self._next_heads
                self._next_heads += 1
            return found

    def messages(self, rows: np.ndarray, key: np.ndarray, all_hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(reusable (k,), stored messages (k,) object)`` for model ``rows`` with message ``key`` (k,)."""
        with self._lock:
            self._grow_messages(int(rows.max()) + 1 if rows.size else 0)
            reusable = all_hit & (self._message_key[rows] == key)
            return reusable, self._message_text[rows]

    def store_messages(self, rows: np.ndarray, key: np.ndarray, texts: list[str]) -> None:
        """Remember ``texts`` for ``rows``; ``key`` −1 forgets them (built without the cache)."""
        with self._lock:
            self._grow_messages(int(rows.max()) + 1 if rows.size else 0)
            self._message_text[rows] = texts
            self._message_key[rows] = key

    def forget_messages(self, rows: np.ndarray) -> None:
        """Rows whose tails may have changed without their message being stored."""
        with self._lock:
            self._grow_messages(int(rows.max()) + 1 if rows.size else 0)
            self._message_key[rows] = -1

    def _grow_messages(self, size: int) -> None:
        if size <= self._message_key.shape[0]:
            return
        size = max(size, 2 * self._message_key.shape[0], 64)
        extra = size - self._message_key.shape[0]
        self._message_key = np.concatenate([self._message_key, np.full(extra, -1, dtype=np.int64)])
        self._message_text = np.concatenate([self._message_text, np.full(extra, "", dtype=object)])
