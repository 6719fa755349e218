"""One node's alignment column, recomputed after each placement of a packing pass (the pass's hot path).

``alignment.alignment`` validates and cleans its inputs on every call and loops over resources so that a
(tasks × nodes) matrix needs no (tasks × nodes × resources) temporaries; a pass asks it once per placement for
one node, with the same shapes and capacities. ``ColumnScorer`` cleans those once per pass and computes the
node's (shapes × resources) terms in one go: the same operations on the same values, summed in the same order,
so the same bits (``tests/policy/test_column.py``). It is a second form of the alignment formula, kept because
it wins by more than 2×: one column of the FB-2009 day's shapes (2 shapes, 4 resources) takes 16–20 µs against
58–74 µs through ``alignment.fits_and_scores`` (timeit, best of 5, one process), once per placement."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stowage.policy.alignment import clamp_demand, finite_or_zero
from stowage.policy.tolerances import FEASIBILITY_RTOL

__all__ = ["ColumnScorer"]


class ColumnScorer:
    """``alignment.alignment(shapes, cap[n:n+1], avail[n:n+1])[:, 0]`` for fixed ``shapes`` and ``cap``."""

    def __init__(self, shapes: NDArray[np.float64], cap: NDArray[np.float64]) -> None:
        self.d = clamp_demand(np.asarray(shapes, dtype=np.float64))
        self.cap = np.maximum(finite_or_zero(np.asarray(cap, dtype=np.float64)), 0.0)
        # Nodes with some of every resource, where no d/C can overflow: plain division, no error state to set.
        d_max = float(np.nan_to_num(self.d, nan=0.0).max(initial=0.0))
        self._plain = (self.cap > 0).all(axis=1) & (d_max * 1e-300 <= self.cap.min(axis=1, initial=np.inf))

    def __call__(self, n: int, available: NDArray[np.float64]) -> NDArray[np.float64]:
        """(S,) alignment of every shape on node ``n`` given its available vector (R,)."""
        return self.with_fits(n, available)[0]

    def with_fits(self, n: int, available: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """The column and where it is finite (the shapes that fit): what ``ShapeScores.set_column`` takes."""
        c = self.cap[n]
        a = np.minimum(np.maximum(finite_or_zero(np.asarray(available, dtype=np.float64)), 0.0), c)  # np.clip
        fits = (self.d <= a * (1.0 + FEASIBILITY_RTOL)).all(axis=1)
        if self._plain[n]:
            terms = (self.d / c) * (a / c)
        else:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a resource it lacks adds 0
                has = c > 0
                terms = np.divide(self.d, c, out=np.zeros_like(self.d), where=has) * np.divide(
                    a, c, out=np.zeros_like(a), where=has)
        score = np.zeros(self.d.shape[0])
        for r in range(self.d.shape[1]):  # alignment's order: Σ_r from r = 0
            score += terms[:, r]
        return np.where(fits, score, -np.inf), fits
