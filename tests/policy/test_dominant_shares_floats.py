"""``fairness.dominant_shares`` on plain floats (few queues) gives the numpy formula's values."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.policy import fairness


def _numpy_shares(alloc: np.ndarray, total: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The formula on whole arrays, as dominant_shares computes it for large inputs."""
    with np.errstate(over="ignore"):
        clean = np.maximum(np.nan_to_num(alloc, nan=0.0, posinf=np.finfo(np.float64).max), 0.0)
        frac = np.divide(clean, total, out=np.zeros_like(clean), where=total > 0)
        dom = frac.max(axis=1) if frac.shape[1] else np.zeros(alloc.shape[0])
        out = np.full(alloc.shape[0], np.inf)
        np.divide(dom, weights, out=out, where=np.isfinite(weights) & (weights > 0))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_few_queues_get_the_numpy_formulas_shares(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        q, r = int(rng.integers(0, 6)), int(rng.integers(0, 5))
        values = [0.0, 1.0, 3.3, 1e308, -2.0, np.nan, np.inf, -np.inf, 7e-300, 0.1]
        with np.errstate(over="ignore"):  # 1e308 × 2 → inf, one of the cases
            alloc = rng.choice(values, size=(q, r)) * rng.uniform(0.5, 2, (q, r))
        total = rng.choice([1.0, 100.0, 1e-300, 3.7, 0.3], size=r)
        weights = rng.choice([1.0, 2.0, 0.0, -1.0, np.nan, np.inf, 1e-300, 0.7], size=q)
        with np.errstate(over="ignore"):
            got = fairness.dominant_shares(alloc, total, weights)
        assert np.array_equal(got, _numpy_shares(alloc, total, weights)), (alloc, total, weights)
