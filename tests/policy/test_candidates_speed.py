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
