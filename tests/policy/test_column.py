"""ColumnScorer gives alignment.alignment's column (the packing pass relies on it)."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.policy import alignment
from stowage.policy.column import ColumnScorer


def _reference(shapes: np.ndarray, cap: np.ndarray, avail: np.ndarray, n: int) -> np.ndarray:
    return alignment.alignment(shapes, cap[n : n + 1], avail[n : n + 1])[:, 0]


@pytest.mark.parametrize("seed", range(40))
def test_every_column_has_alignments_bits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s, n, r = int(rng.integers(1, 9)), int(rng.integers(1, 12)), int(rng.integers(1, 6))
    shapes = rng.choice([0.0, 0.5, 1.0, 2.0, 1e9, 3.3e-7], size=(s, r)) * rng.uniform(0.5, 2.0, size=(s, r))
    cap = rng.choice([0.0, 1.0, 4.0, 16.0, 2e10], size=(n, r)) * rng.uniform(0.9, 1.1, size=(n, r))
    avail = cap * rng.uniform(-0.2, 1.3, size=(n, r))
    # Degenerate values alignment cleans: NaN / ±inf / negative anywhere, equal-to-capacity demands.
    for arr, values in ((shapes, [np.nan, -1.0]), (cap, [np.nan, np.inf, -3.0]), (avail, [np.nan, np.inf, -np.inf])):
        mask = rng.random(arr.shape) < 0.1
        arr[mask] = rng.choice(values, size=int(mask.sum()))
    shapes[0] = np.where(np.isfinite(cap[0]) & (cap[0] > 0), cap[0], shapes[0])
    scorer = ColumnScorer(shapes, cap)
    for node in range(n):
        got, want = scorer(node, avail[node]), _reference(shapes, cap, avail, node)
        assert got.tobytes() == want.tobytes(), (node, got, want)


def test_a_placement_lowers_exactly_the_reference_column() -> None:
    shapes = np.array([[1.0, 2.0, 0.5, 0.0], [2.0, 4.0, 0.0, 1.0]])
    cap = np.array([[12.0, 32.0, 200.0, 125.0], [12.0, 32.0, 200.0, 125.0]])
    avail = cap.copy()
    scorer = ColumnScorer(shapes, cap)
    for _ in range(8):  # fill node 1 until shape 1 no longer fits
        avail[1] = np.maximum(avail[1] - shapes[1], 0.0)
        assert scorer(1, avail[1]).tobytes() == _reference(shapes, cap, avail, 1).tobytes()
    assert scorer(1, avail[1])[1] == -np.inf
