"""Multi-resource remaining work of jobs and its combination with alignment (Tetris §3.3).

Tetris extends shortest-remaining-time-first to many resources (§3.3.1): a
job's score is the total normalised resource-time its remaining tasks need::

    p(job) = Σ_{remaining tasks t of job} duration_t · Σ_r d_{t,r} / C̄_r

with ``C̄`` the mean node capacity, so cores and bytes weigh the same. Jobs
with *less* remaining work should go first. §3.3.2 then picks the task with
the highest ``a + ε·p``, ``ε = ā/p̄``; §5.3.3 generalises to ``ε = m·ā/p̄``.
Because a higher combined value must favour *less* work, the term we add is
``p̃ = −p`` (see :func:`combined_score`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput

__all__ = ["combined_score", "remaining_work", "work_penalty"]


def remaining_work(
    task_duration_s: ArrayLike,
    task_demand: ArrayLike,
    task_job: ArrayLike,
    n_jobs: int,
    mean_capacity: ArrayLike,
) -> NDArray[np.float64]:
    """Remaining work per job, Tetris §3.3.1: ``p(j) = Σ_{t∈j} dur_t · Σ_r d_{t,r}/C̄_r``.

    Args:
        task_duration_s: (T,) expected (remaining) duration of each remaining
            task, seconds. NaN or negative → 0 (the caller estimates durations;
            Tetris §4.1 uses earlier runs and finished tasks of the same phase).
        task_demand: (T, R) each task's demand; negative or NaN → 0.
        task_job: (T,) int index of each task's job; outside ``[0, n_jobs)`` → ignored.
        n_jobs: J.
        mean_capacity: (R,) ``C̄``, mean node capacity per resource. Resources
            with ``C̄_r ≤ 0`` (or NaN) are left out of the sum.

    Returns:
        (J,) float64, in "node-seconds": a task that needs one average node
        on every resource for 10 s adds ``10·R``. Jobs with no remaining task: 0.
    """
    dur = np.asarray(task_duration_s, dtype=np.float64).reshape(-1)
    dem = np.asarray(task_demand, dtype=np.float64)
    job = np.asarray(task_job).reshape(-1)
    cbar = np.asarray(mean_capacity, dtype=np.float64).reshape(-1)
    t = dur.shape[0]
    if dem.ndim != 2 or dem.shape[0] != t:
        raise InvalidInput("task_demand.shape", dem.shape, f"must be ({t}, R), one row per task")
    if job.shape != (t,):
        raise InvalidInput("task_job.shape", job.shape, f"must be ({t},), one job index per task")
    if cbar.shape != (dem.shape[1],):
        raise InvalidInput("mean_capacity.shape", cbar.shape, f"must be ({dem.shape[1]},) like a demand row")
    if n_jobs < 0:
        raise InvalidInput("n_jobs", n_jobs, "must be ≥ 0")

    dur = np.maximum(np.nan_to_num(dur, nan=0.0, posinf=0.0), 0.0)
    dem = np.maximum(np.nan_to_num(dem, nan=0.0, posinf=0.0), 0.0)
    cbar = np.nan_to_num(cbar, nan=0.0)
    inv = np.divide(1.0, cbar, out=np.zeros_like(cbar), where=cbar > 0)
    per_task = dur * (dem @ inv)
    job_int = np.asarray(np.nan_to_num(job.astype(np.float64), nan=-1.0), dtype=np.int64)
    ok = (job_int >= 0) & (job_int < n_jobs)
    return np.bincount(job_int[ok], weights=per_task[ok], minlength=n_jobs).astype(np.float64)


def combined_score(align: ArrayLike, job_work: ArrayLike, m: float) -> NDArray[np.float64]:
    """Alignment plus the remaining-work preference, Tetris §3.3.2: ``a + ε·p̃``.

    ``score = a + ε·p̃`` with ``p̃ = −p`` and ``ε = m·ā/p̄``, i.e.
    ``score = a − m·ā·(p/p̄)``, where ``ā`` and ``p̄`` are the means of ``a`` and
    ``p`` over the *feasible* candidates (finite ``a``; one candidate per
    (task, node) pair). Why ``p̃ = −p``: Tetris (§3.3.1) says jobs with *lower*
    remaining work go first, yet picks the *highest* ``a + ε·p`` (§3.3.2); so
    the remaining-work term must fall as work grows. Any constant shift of
    ``p̃`` (e.g. ``p_max − p``) ranks candidates identically; plain negation
    keeps the scale of §5.3.3, where ``m = ε·p̄/ā`` and m ≈ 1 works best. A job
    with average remaining work loses exactly ``m·ā``.

    Args:
        align: (..., N), typically (T, N) from ``alignment.alignment`` or (N,)
            for one pod; ``−inf`` marks infeasible placements and stays ``−inf``.
        job_work: ``p`` of each candidate's job: a scalar, or (T,) lined up with
            ``align``'s leading axis (any shape that broadcasts to
            ``align.shape[:-1]``). Negative → 0; NaN → ``p̄`` (unknown work is
            treated as average: neither favoured nor penalised).
        m: weight of remaining work against alignment, clamped to ``≥ 0``
            (NaN → 0). Default in config ``packing.remaining_work_weight`` = 1.0;
            ``m = 0`` gives pure alignment (best makespan, §5.3).

    Returns:
        Same shape as ``align``. If no candidate is feasible, or ``p̄ = 0``
        (every job has no work left), the alignment is returned unchanged.
    """
    a = np.asarray(align, dtype=np.float64)
    if a.ndim == 0:
        raise InvalidInput("align.shape", a.shape, "must be (N,) or (T, N)")
    p = np.asarray(job_work, dtype=np.float64)
    try:
        p_rows = np.broadcast_to(p, a.shape[:-1]).reshape(-1)
    except ValueError:
        raise InvalidInput(
            "job_work.shape", p.shape, f"must be a scalar or {a.shape[:-1]}, one value per task row"
        ) from None
    feasible = np.isfinite(a)
    if a.shape[-1] == 0:
        return a.copy()
    counts = feasible.reshape(-1, a.shape[-1]).sum(axis=1)
    penalty = work_penalty(a[feasible], p_rows, counts, m).reshape((*a.shape[:-1], 1))
    return np.where(feasible, a - penalty, a)


def work_penalty(feasible_align: ArrayLike, job_work: ArrayLike, counts: ArrayLike, m: float) -> NDArray[np.float64]:
    """The remaining-work term of :func:`combined_score` per task row: ``m·ā·(p/p̄)`` (score = a − this).

    Args:
        feasible_align: every finite alignment of the candidates, row-major (``ā`` is their mean;
            the order fixes the floating-point sum, so callers that skip the full matrix get the
            same bits).
        job_work: (T,) ``p`` per task row. Negative → 0; NaN or ±inf → ``p̄``.
        counts: (T,) feasible placements per row: ``p̄`` is the mean over (row, node) candidates,
            so each known row counts that many times.
        m: as in :func:`combined_score` (clamped to ``≥ 0``, NaN → 0).

    Returns:
        (T,) penalties; all zero when ``m = 0``, nothing is feasible, no row's work is known,
        or ``p̄ = 0``.
    """
    p = np.asarray(job_work, dtype=np.float64).reshape(-1)
    n = np.asarray(counts, dtype=np.int64).reshape(-1)
    out = np.zeros(p.shape)
    weight = max(float(np.nan_to_num(m, nan=0.0)), 0.0)
    if weight == 0.0 or not n.any():
        return out
    p = np.where(np.isnan(p), np.nan, np.maximum(p, 0.0))
    known = np.isfinite(p) & (n > 0)
    if not known.any():
        return out
    a_bar = float(np.asarray(feasible_align, dtype=np.float64).mean())
    p_bar = float(np.repeat(p[known], n[known]).mean())
    if not p_bar > 0:
        return out
    # ε·p̃ = −m·ā·(p/p̄); p/p̄ ≤ number of candidates (p ≥ 0), so it cannot overflow
    # even when p̄ is tiny, as ε = m·ā/p̄ alone could.
    return weight * a_bar * (np.where(known, p, p_bar) / p_bar)  # rows with nothing feasible: unused
