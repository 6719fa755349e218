"""How much of its request a simulated task really uses, over its life.

No small public trace has measured per-task usage over time (see the traces README), so the simulator states a model
and prints it in every report:

* **Base fraction** ``u`` per task, drawn once at start from a Beta distribution with mean ``mean_fraction`` (UBIS
  §II: tasks use about half of their peak on average) and ``concentration`` = α + β, clipped to
  ``[min_fraction, 1]``. A task group's explicit ``usage`` replaces the draw.
* **Ramp-up**: for the first ``ramp_s`` seconds a task's usage grows linearly from ``ramp_start·u`` to ``u``
  (containers start small: JVM start, input being opened).
* **Bursts**: every second a running task starts a burst with probability ``burst_rate_per_s``; for ``burst_s``
  seconds it uses its whole request (the peak) on every resource.

* **Bandwidth** (disk, network): the workload readers derive a task's duration as bytes ÷ its declared rate
  (``stowage.sim.traces``), so a task streams at that rate while it runs: its I/O base fraction is ``io_fraction``
  (1.0), not the draw. ``io_fraction = None`` uses the draw for I/O too.

So a task's usage of resource ``r`` at time ``t`` is ``demand_r · f_r(t)`` with ``f_r(t) = 1`` inside a burst, else
``u_r · ramp(t − start)`` (``u_r`` the I/O fraction on disk and network, the drawn fraction elsewhere). Usage never
exceeds the request: the peak is what the request was sized for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stowage.errors import InvalidInput

__all__ = ["UsageModel"]


@dataclass(frozen=True, slots=True)
class UsageModel:
    """Parameters of the usage model (all printed in the report)."""

    mean_fraction: float = 0.5
    """Mean of usage / request (UBIS §II: about half of the peak)."""
    concentration: float = 4.0
    """α + β of the Beta draw: 4 gives Beta(2, 2) at mean 0.5, a broad hump."""
    min_fraction: float = 0.05
    """Floor of the draw: a running task always uses something."""
    ramp_s: float = 10.0
    """Seconds over which usage grows to its base fraction after start."""
    ramp_start: float = 0.2
    """Usage at start, as a fraction of the base fraction."""
    burst_rate_per_s: float = 0.01
    """Chance per second that a task starts a burst to its full request."""
    burst_s: float = 5.0
    """Length of a burst."""
    io_fraction: float | None = 1.0
    """Disk and network use as a fraction of demand (None: the same draw as cpu and memory)."""
    overcommit_loss: float = 0.0
    """Throughput a disk or link loses to over-subscription: asked for ρ > 1 times its capacity it delivers
    ``C / (1 + overcommit_loss·(ρ − 1))`` in all (0: fluid sharing, no loss; see ``stowage.sim.cluster``)."""

    def __post_init__(self) -> None:
        for name in ("mean_fraction", "min_fraction", "ramp_start", "burst_rate_per_s", "io_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:  # io_fraction None: the draw
                raise InvalidInput(f"usage.{name}", value, "a number within [0.0, 1.0]")
        for name in ("concentration", "ramp_s", "burst_s", "overcommit_loss"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise InvalidInput(f"usage.{name}", value, "a number ≥ 0")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def draw_base(self, rng: np.random.Generator, override: NDArray[np.float64]) -> NDArray[np.float64]:
        """Base fraction per task; ``override`` (NaN = draw) replaces the draw where set (no random number is
        used when there are no tasks or the concentration is 0)."""
        n, m = override.shape[0], min(max(self.mean_fraction, 1e-6), 1.0 - 1e-6)
        c = self.concentration
        drawn = rng.beta(m * c, (1.0 - m) * c, size=n) if c > 0 and n else np.full(n, m)
        drawn = np.clip(drawn, self.min_fraction, 1.0)
        return np.where(np.isnan(override), drawn, np.clip(override, 0.0, 1.0))

    def io_base(self, drawn: NDArray[np.float64], override: NDArray[np.float64]) -> NDArray[np.float64]:
        """I/O base fraction per task: the group's explicit usage, else ``io_fraction``, else the draw."""
        io = drawn if self.io_fraction is None else np.full_like(drawn, self.io_fraction)
        return np.where(np.isnan(override), io, np.clip(override, 0.0, 1.0))

    def _ramp(self, now_s: float, started_s: NDArray[np.float64]) -> NDArray[np.float64] | float:
        """The ramp-up factor per task: ``ramp_start`` at its start, linear to 1 at ``ramp_s``."""
        if self.ramp_s <= 0:
            return 1.0
        return self.ramp_start + (1.0 - self.ramp_start) * np.clip((now_s - started_s) / self.ramp_s, 0.0, 1.0)

    def past_ramp(self, now_s: float, started_s: NDArray[np.float64]) -> NDArray[np.bool_] | bool:
        """Tasks whose ramp factor is 1 from now on (``_ramp`` clips its progress at 1)."""
        return (now_s - started_s) / self.ramp_s >= 1.0 if self.ramp_s > 0 else True

    def fraction(
        self,
        now_s: float,
        started_s: NDArray[np.float64],
        base: NDArray[np.float64],
        burst_until_s: NDArray[np.float64],
    ) -> NDArray[np.float64]:
        """``f(t)`` per task: 1 inside a burst, else ``u·ramp(t − start)``; ``base`` (P,) or (P, K)."""
        if base.ndim == 2:
            return np.stack(self.fraction_t(now_s, started_s, tuple(base.T), burst_until_s), axis=1)
        return self.fraction_t(now_s, started_s, (base,), burst_until_s)[0]

    def fraction_t(
        self,
        now_s: float,
        started_s: NDArray[np.float64],
        bases: Sequence[NDArray[np.float64]],
        burst_until_s: NDArray[np.float64],
    ) -> list[NDArray[np.float64]]:
        """:meth:`fraction` for each of ``bases`` ((P,) each), resource-major: rows of P contiguous numbers
        (numpy's loops over a (P, 2) broadcast cost several times the arithmetic; ``sim.rates``)."""
        ramp = self._ramp(now_s, started_s)
        out = [b * ramp for b in bases]
        burst = burst_until_s > now_s
        if burst.any():
            for f in out:
                f[burst] = 1.0
        return out

    def new_bursts(
        self, rng: np.random.Generator, now_s: float, dt_s: float, burst_until_s: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Burst end times after one monitor step of ``dt_s`` (tasks already bursting keep theirs)."""
        n = burst_until_s.shape[0]
        if self.burst_rate_per_s <= 0 or self.burst_s <= 0 or n == 0:
            return burst_until_s
        p = 1.0 - (1.0 - self.burst_rate_per_s) ** max(dt_s, 0.0)
        start = (rng.random(n) < p) & (burst_until_s <= now_s)
        return np.where(start, now_s + self.burst_s, burst_until_s)
