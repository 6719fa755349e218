"""Multi-resource alignment score of a task against nodes (Tetris §3.2).

Tetris places a task on the node whose *available* resources point the same
way as the task's *demand*: the dot product of the two vectors, each divided
by the node's capacity so cores, bytes and bytes/s weigh the same::

    a(t, n) = Σ_r (d_r / C_r) · (A_r / C_r)          if d_r ≤ A_r on every r
    a(t, n) = −inf                                    otherwise (infeasible)

Only feasible placements get a finite score, so picking the highest score can
never over-allocate a node. When the pod names the nodes that hold its input
(annotation ``stowage.io/data-nodes``) and ``n`` is not one of them, the score
is multiplied by ``1 − remote_penalty`` (Tetris §3.2: "imposes a remote
penalty (of, say, 10%)"; default ``PackingSettings.remote_penalty``).

Shapes: R resources (the caller fixes their order), N nodes, T tasks.
Units: whatever the caller uses, as long as demand, capacity and available
agree per resource (Stowage uses cores, bytes, bytes/s).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.config import PackingSettings
from stowage.errors import InvalidInput
from stowage.policy.tolerances import FEASIBILITY_RTOL, ZERO_ATOL

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "alignment",
    "clamp_demand",
    "feasible",
    "feasible_clamped",
    "finite_or_zero",
    "nan_to_num_if_needed",
    "over_quota",
    "shortfall",
    "to_extender_scores",
]

MAX_EXTENDER_PRIORITY = 10
"""kube-scheduler's ``MaxExtenderPriority`` (see EXTENDER_PROTOCOL.md)."""

_DEFAULTS = PackingSettings()


def _as_2d(value: ArrayLike, field: str) -> NDArray[np.float64]:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2:
        raise InvalidInput(field, arr.shape, "must be a 2-D array (rows × resources)")
    return arr


def _demand_2d(demand: ArrayLike) -> tuple[NDArray[np.float64], bool]:
    """Demand as (T, R) and whether the caller passed a single (R,) vector."""
    d = np.asarray(demand, dtype=np.float64)
    if d.ndim not in (1, 2):
        raise InvalidInput("demand", d.shape, "must be (R,) or (T, R)")
    single = d.ndim == 1
    return np.atleast_2d(d), single


def _check_resources(d: NDArray[np.float64], other: NDArray[np.float64], field: str) -> None:
    if d.shape[1] != other.shape[1]:
        raise InvalidInput(
            f"{field}.shape", other.shape, f"must have {d.shape[1]} resource columns like demand"
        )


def nan_to_num_if_needed(x: NDArray[np.float64], nan: float = 0.0, posinf: float = 0.0) -> NDArray[np.float64]:
    """``np.nan_to_num(x, nan=nan, posinf=posinf)``; ``x`` itself when it is all finite (nan_to_num's copies
    cost more than the arithmetic on the small arrays of a pass). −inf becomes the lowest float."""
    return x if np.isfinite(x).all() else np.nan_to_num(x, nan=nan, posinf=posinf)


def finite_or_zero(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """NaN and +inf → 0 (capacities and availabilities): :func:`nan_to_num_if_needed` with its defaults."""
    return nan_to_num_if_needed(x)


def _feasible_2d(d: NDArray[np.float64], avail: NDArray[np.float64]) -> NDArray[np.bool_]:
    """(T, N) fit mask for clamped inputs; loops over R so memory stays O(T·N)."""
    limit = avail * (1.0 + FEASIBILITY_RTOL)
    ok = np.ones((d.shape[0], avail.shape[0]), dtype=bool)
    for r in range(d.shape[1]):
        ok &= d[:, r, None] <= limit[None, :, r]
    # A NaN demand is unknown, never "fits": <= with NaN is already False above.
    return ok


def feasible(demand: ArrayLike, available: ArrayLike) -> NDArray[np.bool_]:
    """Whether each task fits each node on every resource.

    ``fits(t, n) = ∀r: d_r ≤ max(A_r, 0)·(1 + FEASIBILITY_RTOL)``.

    demand (R,) → (N,) bool; demand (T, R) → (T, N) bool; available (N, R).
    Negative demands count as 0; a NaN demand never fits; NaN or negative
    availability counts as 0 (so only a zero demand fits there).
    """
    d, single = _demand_2d(demand)
    avail = _as_2d(available, "available")
    _check_resources(d, avail, "available")
    ok = feasible_clamped(clamp_demand(d), avail)
    return ok[0] if single else ok


def clamp_demand(demand: NDArray[np.float64]) -> NDArray[np.float64]:
    """Negative demands → 0, NaN kept (it never fits): :func:`feasible`'s cleaning of a demand."""
    return np.where(np.isnan(demand), np.nan, np.maximum(demand, 0.0))


def feasible_clamped(demand: NDArray[np.float64], available: NDArray[np.float64]) -> NDArray[np.bool_]:
    """:func:`feasible` for demands (T, R) already through :func:`clamp_demand` and checked shapes: the
    same result, without re-validating demands that do not change (the simulator's passes)."""
    return _feasible_2d(demand, np.maximum(finite_or_zero(available), 0.0))


def over_quota(allocation: NDArray[np.float64], quota: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Where an ``allocation`` is above its ``quota`` (same shape, per resource; ``+inf``: unlimited):
    ``¬(x ≤ q·(1 + FEASIBILITY_RTOL) + ZERO_ATOL)``.

    The dispatcher's pass and the hold reasons share it, so a task the pass keeps out for its quota is the one
    named ``quota``. The absolute slack lets a demand of 0 sit in a quota of 0; a NaN on either side is over
    (nothing is placed on a number that cannot be read).
    """
    return ~(allocation <= quota * (1 + FEASIBILITY_RTOL) + ZERO_ATOL)


def shortfall(demand: NDArray[np.float64], free: NDArray[np.float64], capacity: NDArray[np.float64]
              ) -> NDArray[np.float64]:
    """How far each node is from taking one task of each demand row: ``max_r (d_r − A_r)⁺ / C_r``.

    demand (S, R) → (S, N); demand (R,) → (N,); ``free`` ``A`` and ``capacity`` ``C``: (N, R). A resource the node
    has none of (``C_r ≤ 0``) makes it ``+inf`` when the task needs it (no room will come there) and adds 0 when
    not. The starvation guard holds the node with the smallest one; the ``room`` hold names it. Built resource by
    resource, into one (S, N) array.
    """
    single = demand.ndim == 1
    d = demand.reshape(1, -1) if single else demand
    has = capacity > 0
    inv_t = np.ascontiguousarray(np.divide(1.0, capacity, out=np.zeros_like(capacity), where=has).T)
    free_t = np.ascontiguousarray(free.T)
    worst = np.zeros((d.shape[0], free.shape[0]))
    step = np.empty_like(worst)
    for r in range(d.shape[1]):
        np.subtract.outer(d[:, r], free_t[r], out=step)
        step *= inv_t[r]
        np.maximum(worst, step, out=worst)
        none = ~has[:, r]
        if none.any():
            worst[np.ix_(d[:, r] > 0, none)] = np.inf
    return worst[0] if single else worst


def fits_and_scores(d: NDArray[np.float64], cap: NDArray[np.float64], available: NDArray[np.float64]
                    ) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """:func:`alignment`'s (T, N) fit mask and score (0 where it does not fit), for demands already through
    :func:`clamp_demand` and capacities already cleaned (finite, ≥ 0): what a packing pass cleans once."""
    # Nothing is available beyond capacity; a zero-capacity resource has nothing available.
    avail = np.clip(finite_or_zero(available), 0.0, cap)
    # Per resource, (d/C)·(A/C): A/C ∈ [0, 1], and d/C ≤ 1 + tol wherever the task fits,
    # so no term can overflow for a feasible pair even with tiny capacities.
    fits = _feasible_2d(d, avail)
    score = np.zeros(fits.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for r in range(d.shape[1]):
            c = cap[:, r]
            if c.min(initial=1.0) > 0:  # every node has some: plain division (the masked one costs 5× more)
                a_frac, d_frac = avail[:, r] / c, d[:, r, None] / c[None, :]
            else:
                a_frac = np.divide(avail[:, r], c, out=np.zeros_like(c), where=c > 0)
                d_frac = np.divide(d[:, r, None], c[None, :], out=np.zeros(fits.shape), where=c[None, :] > 0)
            score += np.where(fits, d_frac * a_frac[None, :], 0.0)
    return fits, score


def alignment(
    demand: ArrayLike,
    capacity: ArrayLike,
    available: ArrayLike,
    *,
    remote: ArrayLike | None = None,
    remote_penalty: float = _DEFAULTS.remote_penalty,
) -> NDArray[np.float64]:
    """Tetris alignment score of task(s) on every node (§3.2); −inf where it does not fit.

    ``a(t, n) = Σ_r (d_r / C_r)·(A_r / C_r) · (1 − remote_penalty if remote[t, n] else 1)``

    Args:
        demand: (R,) one task, or (T, R) several. Negative → 0; NaN → infeasible.
        capacity: (N, R) node capacity ``C``. NaN or negative → 0.
        available: (N, R) what the task may use on the node ``A`` (regular free
            capacity, or harvestable capacity for an opportunistic pod), clamped
            to ``[0, C]``.
        remote: optional bool mask, (N,) or (T, N): True where the node does not
            hold the task's input data.
        remote_penalty: fraction taken off a remote node's score, clamped to
            ``[0, 1]``. Default ``PackingSettings.remote_penalty`` (0.10).

    Returns:
        (N,) for a single demand, (T, N) otherwise. ``−inf`` where any
        ``d_r > A_r·(1 + FEASIBILITY_RTOL)``. A resource with ``C_r == 0`` adds 0
        to the score and is feasible only for ``d_r == 0``. Scores are in
        ``[0, R]``; a task using a whole empty node on every resource scores R.
    """
    d, single = _demand_2d(demand)
    cap = _as_2d(capacity, "capacity")
    avail = _as_2d(available, "available")
    _check_resources(d, cap, "capacity")
    _check_resources(d, avail, "available")
    if cap.shape[0] != avail.shape[0]:
        raise InvalidInput(
            "available.shape", avail.shape, f"must have {cap.shape[0]} node rows like capacity"
        )

    fits, score = fits_and_scores(clamp_demand(d), np.maximum(finite_or_zero(cap), 0.0), avail)
    if remote is not None:
        mask = np.asarray(remote, dtype=bool)
        if mask.shape not in ((cap.shape[0],), score.shape):
            raise InvalidInput(
                "remote.shape", mask.shape, f"must be ({cap.shape[0]},) or {score.shape} like the scores"
            )
        penalty = min(max(float(np.nan_to_num(remote_penalty, nan=0.0)), 0.0), 1.0)
        score = np.where(np.broadcast_to(mask, score.shape), score * (1.0 - penalty), score)

    score = np.where(fits, score, -np.inf)
    return score[0] if single else score


def to_extender_scores(scores: ArrayLike) -> NDArray[np.int64]:
    """Node scores as kube-scheduler extender priorities, integers in 0..10.

    Non-finite scores (−inf = infeasible, NaN) → 0. Feasible scores are mapped
    linearly from their own range ``[lo, hi]`` onto ``[1, 10]`` and rounded half
    up: ``1 + ⌊9·(s − lo)/(hi − lo) + ½⌋``, so the best node gets 10 and every
    feasible node ranks above every infeasible one. If all feasible scores are
    equal (or there is only one), each gets 10. Monotone: a higher score never
    gets a lower priority. scores (N,) → int64 (N,).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise InvalidInput("scores.shape", s.shape, "must be (N,): one score per node")
    out = np.zeros(s.shape, dtype=np.int64)
    ok = np.isfinite(s)
    if not ok.any():
        return out
    finite = s[ok]
    # Divide by the magnitude first so hi − lo cannot overflow for extreme inputs.
    magnitude = float(np.abs(finite).max())
    if magnitude > 0:
        finite = finite / magnitude
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo
    if not span > 0:
        out[ok] = MAX_EXTENDER_PRIORITY
        return out
    steps = MAX_EXTENDER_PRIORITY - 1
    scaled = np.clip((finite - lo) / span, 0.0, 1.0)
    out[ok] = 1 + np.floor(steps * scaled + 0.5).astype(np.int64)
    return out
