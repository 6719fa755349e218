"""All-or-nothing task groups (gangs): how many of a gang's tasks fit at once, and where the whole gang goes.

A gang is a task group whose first ``k`` tasks start together or not at all (a Stowage Job's
``taskGroups[].minAvailable``, a group of plain pods labelled ``stowage.io/pod-group``; the simulator's workload
``minAvailable``). ``dispatch.pack`` calls ``place`` when it picks a gang's row: the whole gang is placed on the
room the pass has left, or none of it and the row leaves the pass; ``holding`` calls ``fit_count`` for the numbers
of the ``gang`` hold. Pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stowage.policy.alignment import clamp_demand, finite_or_zero
from stowage.policy.tolerances import FEASIBILITY_RTOL

__all__ = ["fit_count", "place", "slots"]

_MAX_SLOTS = 1 << 30  # a task that needs nothing fits any number of times


def slots(demand: NDArray[np.float64], available: NDArray[np.float64]) -> NDArray[np.int64]:
    """(N,) how many tasks of ``demand`` (R,) fit each node's ``available`` (N, R) at once (``alignment.feasible``'s
    tolerance); a NaN demand fits nowhere."""
    d = clamp_demand(np.asarray(demand, dtype=np.float64))
    if np.isnan(d).any():
        return np.zeros(available.shape[0], dtype=np.int64)
    a = np.maximum(finite_or_zero(np.asarray(available, dtype=np.float64)), 0.0) * (1.0 + FEASIBILITY_RTOL)
    need = d > 0
    if not need.any():
        return np.full(available.shape[0], _MAX_SLOTS, dtype=np.int64)
    per = np.floor(a[:, need] / d[need]).min(axis=1)
    return np.minimum(per, _MAX_SLOTS).astype(np.int64)


def fit_count(demand: NDArray[np.float64], available: NDArray[np.float64], k: int) -> int:
    """How many of ``k`` tasks of ``demand`` fit ``available`` at once (at most ``k``)."""
    if available.shape[0] == 0 or k <= 0:
        return 0
    return int(min(k, int(slots(demand, available).sum(dtype=np.int64))))


def place(demand: NDArray[np.float64], available: NDArray[np.float64], score: NDArray[np.float64],
          k: int) -> list[int] | None:
    """The nodes of ``k`` tasks of ``demand`` placed at once, or None when fewer than ``k`` fit.

    Nodes are filled best ``score`` (the pass's alignment of the shape, ``-inf`` where it does not fit) first, each
    with as many tasks as it holds (ties: lowest index): a gang spreads over as few, and as well-aligned, nodes as
    the room allows.
    """
    room = np.where(np.isfinite(score), slots(demand, available), 0)  # -inf: no fit, or a node held for another
    if int(room.sum(dtype=np.int64)) < k:
        return None
    order = np.lexsort((np.arange(room.shape[0]), -np.where(np.isfinite(score), score, -np.inf)))  # best first
    out: list[int] = []
    for n in order.tolist():
        take = int(min(room[n], k - len(out)))
        if take > 0:
            out.extend([n] * take)
        if len(out) >= k:
            break
    return out
