"""The certified search's scalar shortcuts give nan_to_num's values, sign included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stowage.policy.remaining_work import clean_weight


@pytest.mark.parametrize("m", [0.0, -0.0, 1.0, -3.0, math.nan, math.inf, -math.inf, 1e308, 5e-324,
                               np.float64(2.5), np.float32(0.1), np.nan])
def test_the_weight_is_nan_to_num_clamped_at_zero(m: float) -> None:
    want = max(float(np.nan_to_num(m, nan=0.0)), 0.0)
    got = clean_weight(m)
    assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


@pytest.mark.parametrize("seed", range(5))
def test_a_few_shapes_running_sums_on_floats_equal_the_numpy_update(seed: int) -> None:
    """_Summaries.update_few (a small matrix's column changes, Python floats) against update, bit for bit:
    sums, error bounds, the stale rows summed again and exact_only; a NaN asks for a rebuild."""
    from stowage.policy.candidates import _Summaries

    rng = np.random.default_rng(seed)
    score = np.where(rng.random((3, 40)) < 0.3, -np.inf, rng.uniform(0, 2, (3, 40)))
    few, plain = _Summaries(score.copy()), _Summaries(score.copy())
    a, b = score.copy(), score.copy()
    for step in range(300):
        n = int(rng.integers(40))
        column = np.where(rng.random(3) < 0.3, -np.inf, rng.uniform(0, 2, 3) * rng.choice([1.0, 1e-9, 1e9], 3))
        if step == 150:
            column[0] = -0.5  # outside the certified search's assumptions: exact_only from now on
        old_a, old_b = a[:, n].copy(), b[:, n].copy()
        a[:, n], b[:, n] = column, column
        assert few.update_few(a, old_a.tolist(), column.tolist())
        plain.update(b, old_b, column, np.isfinite(old_b), np.isfinite(column))
        assert few.sums.tobytes() == plain.sums.tobytes() and few.error.tobytes() == plain.error.tobytes()
        assert few.exact_only == plain.exact_only
    assert few.exact_only
    assert not few.update_few(a, a[:, 0].tolist(), [np.nan, 1.0, 1.0])
