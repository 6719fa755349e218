"""Tenants: the stated, skewed assignment of jobs to queues that no public trace records.

The traces (SWIM, openb) and the Tetris mix carry no tenant or queue, so every reader
that needs one uses this model (the traces' README: "What no small
public trace has"):

=============  ======  ===========  =========  ================
queue          weight  job share    job order  opportunistic
=============  ======  ===========  =========  ================
``prod``       4       0.48 (1/1)   SRTF       Allow
``analytics``  2       0.24 (1/2)   SRTF       Allow
``research``   1       0.16 (1/3)   SRTF       Allow
``adhoc``      1       0.12 (1/4)   SRTF       Allow
=============  ======  ===========  =========  ================

Job shares are Zipf with exponent 1 over four tenants (``(1/k) / H_4``), so one tenant
submits half the jobs and the smallest an eighth; weights are not proportional to shares,
so weighted DRF has real work to do (``research`` submits more than its weight).
Every queue accepts harvested capacity: whether a job runs opportunistically is then the
job's intent (``true|auto|false``) and the scheduler's decision, not an artefact of the
tenant model.

Assignment is an independent draw per job from a generator seeded by ``(seed, 7, stream)``, in
job order: deterministic per seed, and prefix-stable (the first ``k`` jobs of a trace get
the same queues whether or not the rest of the trace is read, so ``hours=2`` agrees with
the full day on those jobs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stowage.model import JobOrder
from stowage.sim.workload import QueueSpec

__all__ = ["TENANTS", "Tenant", "assign_queues", "tenant_model", "tenant_queues"]

#: Stream id mixed into the seed so queue draws never share a stream with a reader's other draws.
_STREAM = 7


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    weight: float
    share: float  # expected fraction of jobs


def _zipf_shares(n: int, exponent: float = 1.0) -> list[float]:
    raw = [1.0 / (k**exponent) for k in range(1, n + 1)]
    total = sum(raw)
    return [r / total for r in raw]


_NAMES_WEIGHTS = (("prod", 4.0), ("analytics", 2.0), ("research", 1.0), ("adhoc", 1.0))
TENANTS: tuple[Tenant, ...] = tuple(
    Tenant(name, weight, share)
    for (name, weight), share in zip(_NAMES_WEIGHTS, _zipf_shares(len(_NAMES_WEIGHTS)), strict=True)
)


def tenant_queues() -> tuple[QueueSpec, ...]:
    """The tenants as queues: stated weights, SRTF inside each queue, harvesting allowed."""
    return tuple(QueueSpec(t.name, t.weight, JobOrder.SRTF, True) for t in TENANTS)


def assign_queues(n_jobs: int, seed: int, stream: int = 0) -> list[str]:
    """Queue name for each of ``n_jobs`` jobs, in job order; deterministic and prefix-stable per seed.

    ``stream`` separates readers (SWIM 0, Tetris mix 1, openb 2), so two readers combined in one
    workload do not hand out the same queue sequence.
    """
    if n_jobs <= 0:
        return []
    rng = np.random.default_rng((seed, _STREAM, stream))
    cumulative = np.cumsum([t.share for t in TENANTS])
    cumulative[-1] = 1.0  # guard against rounding leaving a gap at the top
    draws = rng.random(n_jobs)
    indices = np.searchsorted(cumulative, draws, side="right")
    return [TENANTS[i].name for i in indices]


def tenant_model() -> dict[str, object]:
    """The tenant model as printed in a report."""
    return {
        "assignment": "independent draw per job, Zipf(s=1) shares, seeded by (seed, 7, reader stream)",
        "queues": [
            {"name": t.name, "weight": t.weight, "share": round(t.share, 4), "jobOrder": "SRTF",
             "opportunistic": "Allow"}
            for t in TENANTS
        ],
    }
