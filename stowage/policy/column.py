"""One node's alignment column, recomputed after each placement of a packing pass (the pass's hot path).

``alignment.alignment(shapes, cap[n:n+1], avail[n:n+1])`` validates and cleans its inputs on every call;
a pass calls it once per placement with the same shapes and capacities, so the cleaning of those is done
once per pass here (``ColumnScorer``) and each call cleans only the node's available vector. The
floating-point operations are alignment's own, in the same order, so every score has the same bits
(``tests/policy/test_column.py`` compares them on random and degenerate inputs).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from stowage.policy.alignment import FEASIBILITY_RTOL, finite_or_zero

_FLOAT_PATH_MAX = 64  # shapes × resources up to which the float path is the cheaper one

__all__ = ["ColumnScorer"]


class ColumnScorer:
    """``alignment.alignment(shapes, cap[n:n+1], avail[n:n+1])[:, 0]`` for fixed ``shapes`` and ``cap``."""

    def __init__(self, shapes: NDArray[np.float64], cap: NDArray[np.float64]) -> None:
        d = np.asarray(shapes, dtype=np.float64)
        # alignment's cleaning: demand < 0 → 0 (NaN kept: never fits); capacity NaN/+inf → 0, < 0 → 0.
        self.d = np.where(np.isnan(d), np.nan, np.maximum(d, 0.0))
        self.cap = np.maximum(finite_or_zero(np.asarray(cap, dtype=np.float64)), 0.0)
        self.positive = self.cap > 0
        self.r = self.d.shape[1]
        # Few shapes (a simulator pass has two or three): plain floats, the same IEEE operations in the
        # same order, cost a fraction of numpy's per-call overhead.
        self._floats = self.d.size <= _FLOAT_PATH_MAX
        if self._floats:
            self._d_rows = self.d.tolist()
            self._tol = 1.0 + FEASIBILITY_RTOL

    def __call__(self, n: int, available: NDArray[np.float64]) -> NDArray[np.float64]:
        """(S,) alignment of every shape on node ``n`` given its available vector (R,)."""
        if self._floats:
            return self._on_floats(n, available)
        c = self.cap[n]
        a = np.asarray(available, dtype=np.float64)
        if not np.isfinite(a).all():  # nan_to_num(nan=0, posinf=0); −inf becomes the lowest float, then 0
            a = np.where(np.isnan(a) | (a == np.inf), 0.0, a)
        a = np.clip(a, 0.0, c)
        fits = (self.d <= a * (1.0 + FEASIBILITY_RTOL)).all(axis=1)
        positive = self.positive[n]
        score = np.zeros(self.d.shape[0])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for r in range(self.r):
                if not positive[r]:
                    continue  # alignment adds where(fits, 0·0, 0) = +0: no change to any sum
                a_frac = a[r] / c[r]
                score += np.where(fits, (self.d[:, r] / c[r]) * a_frac, 0.0)
        return np.where(fits, score, -np.inf)

    def _on_floats(self, n: int, available: NDArray[np.float64]) -> NDArray[np.float64]:
        """``__call__`` on Python floats: clip, fit test and the sum over resources as numpy does them."""
        cap = self.cap[n].tolist()
        a = []
        for x, c in zip(np.asarray(available, dtype=np.float64).tolist(), cap, strict=True):
            if x != x or x == math.inf:  # nan_to_num(nan=0, posinf=0); −inf is clipped to 0 below
                x = 0.0
            a.append(min(max(x, 0.0), c))  # np.clip(a, 0, c)
        limit = [x * self._tol for x in a]
        out = []
        for d in self._d_rows:
            if not all(dr <= lr for dr, lr in zip(d, limit, strict=True)):
                out.append(-math.inf)
                continue
            score = 0.0
            for dr, ar, c in zip(d, a, cap, strict=True):
                if c > 0:
                    score += (dr / c) * (ar / c)
            out.append(score)
        return np.array(out, dtype=np.float64)
