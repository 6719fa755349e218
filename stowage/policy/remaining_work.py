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

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput

__all__ = ["bottleneck_bonus", "clean_durations", "clean_weight", "combined_score", "critical_rows", "drain_times",
           "remaining_work", "work_penalty", "work_rate"]


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
            Tetris §4.1 uses earlier runs and finished tasks of the same phase);
            +inf (a product of duration and tasks past the largest float) stays
            infinite, so that job orders last under SRTF, never first.
        task_demand: (T, R) each task's demand; negative or NaN → 0.
        task_job: (T,) int index of each task's job; outside ``[0, n_jobs)`` → ignored.
        n_jobs: J.
        mean_capacity: (R,) ``C̄``, mean node capacity per resource. Resources
            with ``C̄_r ≤ 0`` (or NaN) are left out of the sum.

    Returns:
        (J,) float64, in "node-seconds": a task that needs one average node
        on every resource for 10 s adds ``10·R``. Jobs with no remaining task: 0.
        Never NaN; +inf for a job whose work overflows (a task without demand
        adds 0 whatever its duration).
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

    per_task = _times(clean_durations(dur), work_rate(dem, cbar))
    job_int = np.asarray(np.nan_to_num(job.astype(np.float64), nan=-1.0), dtype=np.int64)
    ok = (job_int >= 0) & (job_int < n_jobs)
    return np.bincount(job_int[ok], weights=per_task[ok], minlength=n_jobs).astype(np.float64)


def clean_durations(duration_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Durations as :func:`remaining_work` counts them: NaN and negative → 0, +inf kept.

    +inf is work that overflowed (duration × tasks past the largest float): counted as none, it would order its
    job first under SRTF; kept, it orders it last.
    """
    d = np.asarray(duration_s, dtype=np.float64)
    return np.where(np.isnan(d) | (d < 0), 0.0, d)


def _times(a: ArrayLike, b: ArrayLike) -> NDArray[np.float64]:
    """``a·b`` element-wise for non-negative amounts: ``0·x = 0`` even for ``x = +inf`` (no NaN), and a product
    past the largest float is +inf (no warning)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        product = x * y
    return np.where((x == 0) | (y == 0), 0.0, product)


def work_rate(task_demand: NDArray[np.float64], mean_capacity: NDArray[np.float64]) -> NDArray[np.float64]:
    """(T,) ``Σ_r d_{t,r}/C̄_r``: a task's remaining work per second (demand cleaned, resources with
    ``C̄_r ≤ 0`` or NaN left out), as :func:`remaining_work` multiplies it by the duration."""
    dem = np.maximum(np.nan_to_num(task_demand, nan=0.0, posinf=0.0), 0.0)
    cbar = np.nan_to_num(mean_capacity, nan=0.0)
    return dem @ np.divide(1.0, cbar, out=np.zeros_like(cbar), where=cbar > 0)


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


_FLOAT_MAX = float(np.finfo(np.float64).max)


def clean_weight(m: float) -> float:
    """The remaining-work weight as the score uses it: ``max(float(np.nan_to_num(m, nan=0.0)), 0.0)``, on a plain
    float (nan_to_num's array round trip costs more than a small search): NaN → 0, +inf → the largest float,
    negative → 0."""
    x = float(m)
    return 0.0 if math.isnan(x) else max(min(x, _FLOAT_MAX), 0.0)


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
    weight = clean_weight(m)
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


def drain_times(demand: ArrayLike, tasks: ArrayLike, duration_s: ArrayLike | None, total: ArrayLike) -> NDArray:
    """(R,) ``D_r = Σ_g tasks_g · dur_g · d_{g,r} / total_r``: how long the waiting tasks would keep resource ``r``
    of the whole pool busy (fluid drain time; ``max_r D_r`` bounds the time to finish them from below).

    ``demand`` (G, R) per-task demand (negative or NaN → 0); ``tasks`` (G,) tasks waiting; ``duration_s`` (G,)
    expected task duration, or None (counts only: every task lasts 1); a duration that is NaN, infinite or
    negative counts 0 (an estimate that overflowed says nothing about which resource is the bottleneck);
    ``total`` (R,) the pool's capacity (a resource without any gives 0). Never NaN; +inf where the work
    overflows.
    """
    n = np.maximum(np.nan_to_num(np.asarray(tasks, dtype=np.float64).reshape(-1), nan=0.0), 0.0)
    d = np.maximum(np.nan_to_num(np.asarray(demand, dtype=np.float64), nan=0.0, posinf=0.0), 0.0)
    d = d.reshape(n.shape[0], -1)
    if duration_s is not None:
        dur = np.asarray(duration_s, dtype=np.float64).reshape(-1)
        n = _times(n, np.where(np.isfinite(dur) & (dur > 0), dur, 0.0))
    cap = np.asarray(total, dtype=np.float64).reshape(-1)
    return _times(_times(n[:, None], d).sum(axis=0), np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0))


def bottleneck_bonus(demand: ArrayLike, drain: ArrayLike, mean_capacity: ArrayLike, beta: float) -> NDArray:
    """Score bonus of each waiting task group for the bottleneck it uses: ``β·Σ_r (d_r/C̄_r)·D_r/max D``.

    ``D`` is :func:`drain_times` of the waiting work; ``D_r/max D`` is 1 on the bottleneck. The bonus is the
    alignment of a task with that profile, on alignment's scale (fractions of a mean node). Why: Tetris weighs
    every resource alike and SRTF runs small jobs first, so work heavy on the scarcest resource can wait
    while that resource idles, and the run ends in a tail only it can drain (Graphene, OSDI'16: start the
    hard-to-pack work early). With the bonus such tasks start whenever the bottleneck has room; which node
    they go to is still alignment's choice.

    ``demand`` (G, R) per-task demand (negative or NaN → 0); ``drain`` (R,); ``mean_capacity`` (R,) ``C̄``;
    ``beta`` (``packing.bottleneck_weight``) ≤ 0 or NaN: no bonus. Returns (G,) bonuses ≥ 0, all zero
    when nothing waits.
    """
    d = np.maximum(np.nan_to_num(np.asarray(demand, dtype=np.float64), nan=0.0, posinf=0.0), 0.0)
    d = d.reshape(d.shape[0], -1) if d.ndim else d.reshape(1, -1)
    out = np.zeros(d.shape[0])
    dr = np.asarray(drain, dtype=np.float64).reshape(-1)
    b = float(np.nan_to_num(beta, nan=0.0))
    top = float(dr.max()) if dr.size else 0.0
    if b <= 0.0 or not top > 0.0:
        return out
    cbar = np.asarray(mean_capacity, dtype=np.float64).reshape(-1)
    frac = d * np.divide(1.0, cbar, out=np.zeros_like(cbar), where=cbar > 0)
    # Work that overflowed drains never: the resources it holds are the bottleneck, the rest count nothing.
    share = np.isinf(dr).astype(np.float64) if math.isinf(top) else dr / top
    return b * (frac @ share)


def critical_rows(path_s: ArrayLike, drain: ArrayLike, fraction: float) -> NDArray[np.bool_]:
    """Waiting task groups whose job would end the run if started late: ``path ≥ c·max_r D_r``.

    ``path_s`` (G,): a task's duration plus the longest chain of group durations behind it in its job
    (what must still run, one after another, once it starts); ``drain`` (R,) :func:`drain_times` of the
    waiting work; ``fraction`` ``c`` (``packing.critical_path_fraction``, 0 = off). A group whose chain is
    longer than ``c`` × the time the whole pool needs to drain what waits is on the run's critical path
    (Graphene, OSDI'16: long work must start early): it goes first, whatever remaining-work order says.
    Returns (G,) bool; all False when ``c ≤ 0`` or nothing waits. A path that is NaN or infinite (an estimate
    that overflowed) is never critical: it would go first on a number that means nothing.
    """
    p = np.asarray(path_s, dtype=np.float64).reshape(-1)
    dr = np.asarray(drain, dtype=np.float64).reshape(-1)
    c = float(np.nan_to_num(fraction, nan=0.0))
    top = float(dr.max()) if dr.size else 0.0
    if c <= 0.0 or not top > 0.0:
        return np.zeros(p.shape[0], dtype=bool)
    return np.isfinite(p) & (p >= c * top)


def queue_budgets(demand: ArrayLike, tasks: ArrayLike, duration_s: ArrayLike, queue: ArrayLike, n_queues: int,
                  total: ArrayLike) -> NDArray[np.float64]:
    """(Q,) the dominant share each queue's waiting work needs for it to drain when all waiting work drains:
    ``max_r D_{q,r} / max_r D_r``, ``D`` the :func:`drain_times` of the queue's and of all waiting groups.

    The budget within which the head of a long chain may cross its queue's fairness tier
    (``packing.critical_path_fraction``): a queue that holds most of the waiting work but little weight would
    otherwise run its long chains only once the others have drained, and end the run a chain later (Graphene,
    OSDI'16). A queue holding its budget already runs its backlog at the pace the run's end needs. ``demand``
    (G, R), ``tasks`` (G,), ``duration_s`` (G,) as :func:`drain_times`; ``queue`` (G,) each group's queue in
    ``0..n_queues-1``. All zero when nothing waits; where the work overflows (an infinite drain), the queues
    that hold it get 1, the others 0.
    """
    d = np.asarray(demand, dtype=np.float64)
    q = np.asarray(queue, dtype=np.int64).reshape(-1)
    out = np.zeros(n_queues)
    top = float(drain_times(d, tasks, duration_s, total).max(initial=0.0))
    if not top > 0.0:
        return out
    n = np.asarray(tasks, dtype=np.float64).reshape(-1)
    dur = np.asarray(duration_s, dtype=np.float64).reshape(-1)
    for k in np.unique(q).tolist():
        mine = q == k
        own = float(drain_times(d[mine], n[mine], dur[mine], total).max(initial=0.0))
        out[k] = float(math.isinf(own)) if math.isinf(top) else min(own / top, 1.0)
    return out
