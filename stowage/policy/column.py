"""One node's alignment column, recomputed after each placement of a packing pass (the pass's hot path).

``alignment.alignment`` validates and cleans its inputs on every call; a pass calls it once per placement
with the same shapes and capacities, so ``ColumnScorer`` cleans those once per pass and each call goes
straight to ``alignment.fits_and_scores`` with the node's available vector.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stowage.policy.alignment import clamp_demand, finite_or_zero, fits_and_scores

__all__ = ["ColumnScorer"]


class ColumnScorer:
    """``alignment.alignment(shapes, cap[n:n+1], avail[n:n+1])[:, 0]`` for fixed ``shapes`` and ``cap``."""

    def __init__(self, shapes: NDArray[np.float64], cap: NDArray[np.float64]) -> None:
        self.d = clamp_demand(np.asarray(shapes, dtype=np.float64))
        self.cap = np.maximum(finite_or_zero(np.asarray(cap, dtype=np.float64)), 0.0)

    def __call__(self, n: int, available: NDArray[np.float64]) -> NDArray[np.float64]:
        """(S,) alignment of every shape on node ``n`` given its available vector (R,)."""
        a = np.asarray(available, dtype=np.float64).reshape(1, -1)
        fits, score = fits_and_scores(self.d, self.cap[n : n + 1], a)
        return np.where(fits[:, 0], score[:, 0], -np.inf)
