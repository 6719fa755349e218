"""The float tolerances of the policy core, the simulator and the adapters: one name per meaning.

Every comparison of computed floats against a limit or a threshold allows for rounding; each allowance is
named here once, and every comparison uses the name. Changing a value moves decisions (the simulator's speed
pins hold these values).
"""

from __future__ import annotations

from typing import Final

__all__ = ["EQUALITY_ATOL", "EQUALITY_RTOL", "FEASIBILITY_RTOL", "MIN_DIVISOR", "ROUNDING_EPS", "ZERO_ATOL"]

FEASIBILITY_RTOL: Final = 1e-9
"""Relative slack of "within a limit": ``x ≤ limit·(1 + FEASIBILITY_RTOL)`` counts as within (a demand in free
room or capacity, an allocation in a quota, usage in capacity). Absorbs float noise from sums of quantities
(e.g. 0.1 + 0.2 cores) without admitting any real over-allocation."""

ZERO_ATOL: Final = 1e-12
"""Absolute slack added to a relative one where the reference may be 0: an amount this small is nothing (a
demand of 0 within a quota of 0, remaining work of a job counted as done, a fraction just below a floor)."""

ROUNDING_EPS: Final = 1e-9
"""Rounding of a value computed in floats and compared with an exact threshold: a knob's ``fraction ≥ b``, a
log bucket of an exact power, a contention threshold, a metric's floor or slowdown bound. Relative where the
caller scales it (``ROUNDING_EPS · max(|x|, 1)``), else absolute on values near 1."""

EQUALITY_RTOL: Final = 1e-12
"""Relative tolerance for two results of one formula on nearly the same inputs taken as equal (a queue's usage
per weight against the lowest, a fluid job's finish inside a step)."""

EQUALITY_ATOL: Final = 1e-15
"""Absolute companion of ``EQUALITY_RTOL`` for values that may be 0."""

MIN_DIVISOR: Final = 1e-9
"""Smallest denominator of a reported rate or ratio (``max(x, MIN_DIVISOR)``): an empty span or a zero
measurement gives a large number, not a division by zero."""
