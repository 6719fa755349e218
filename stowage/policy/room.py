"""The room a node offers now: one rule for the extender, the dispatcher and the simulator.

Every component that asks "may node ``n`` take this demand now" assembles the same inputs the same way here:

- **fresh samples** (:func:`fresh`): a node's utilization sample counts only while it is younger than
  ``harvest.utilization_stale_after_s``; a missing one (``present`` False, an age of ``inf`` or NaN) never does.
  A node without a fresh sample harvests nothing (DESIGN.md: fail safe).
- **what the samples show** (:func:`usage_after_departures`): ``U`` is the node's usage over a window (a
  maximum over it); a pod that has finished leaves it at once, not when it drops out of the window.
- **what they cannot show yet** (:func:`assumed_usage`): ``S``, the usage of pods too new for their node's
  latest sample (UBIS §IV-B, Koordinator's estimate above reported usage), until a sample includes them
  (:func:`stowage.policy.harvest.in_sample`), ``harvest.ramp_up_s`` at most (Tetris §4.1).
- **harvested room** (:func:`harvested_room`): ``A_opp = T_alloc·C − U − B − S`` (UBIS Alg. 1 l.21, OPERA
  Eq. 4) on nodes with a fresh sample that allow harvesting, 0 elsewhere.
- **declared bandwidth room** (:func:`bandwidth_room`): ``fill · C − Σ regular pods' reserved bandwidth``. Only
  regular pods reserve declared bandwidth; an opportunistic pod's disk and network fit the measured
  harvested room like every other resource.

Shapes: N nodes, R resources, P pods. Units as the caller's (cores, bytes, bytes/s); seconds for times, every
time on one clock (the cluster's: Unix seconds; the simulator's: simulated seconds). Pure: numpy only.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput
from stowage.policy import harvest

__all__ = [
    "assumed_usage",
    "bandwidth_room",
    "fresh",
    "harvested_room",
    "sampled_at",
    "usage_after_departures",
]


def fresh(present: ArrayLike, age_s: ArrayLike, stale_after_s: float) -> NDArray[np.bool_]:
    """(N,) True where the node has a utilization sample no older than ``stale_after_s`` (the staleness rule).

    ``present`` (N,) bool, the node has a sample at all; ``age_s`` (N,) seconds since it was taken (``inf`` or
    NaN: unknown, so not fresh). A sample exactly ``stale_after_s`` old is still fresh.
    """
    have = np.asarray(present, dtype=bool).reshape(-1)
    age = np.asarray(age_s, dtype=np.float64).reshape(-1)
    if age.shape != have.shape:
        raise InvalidInput("age_s.shape", age.shape, f"must be {have.shape} like present")
    with np.errstate(invalid="ignore"):
        return have & (age <= float(stale_after_s))


def sampled_at(now_s: float, age_s: ArrayLike) -> NDArray[np.float64]:
    """(N,) when each node's latest sample was taken, ``now − age``, on ``now_s``'s clock; NaN where unknown."""
    age = np.asarray(age_s, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(age), float(now_s) - age, np.nan)


def usage_after_departures(window: ArrayLike, departed: ArrayLike, latest: ArrayLike) -> NDArray[np.float64]:
    """(N, R) ``U`` without the pods that have finished: ``max(U_window − G, U_latest)``.

    ``U_window`` is the node's usage as the maximum over a window (one 1-second rate is too jumpy to plan on);
    a pod that finished inside the window is still in it. ``G`` is the sum, per node, of those pods' own
    usage over the window (the node monitor's per-pod series). Taking it off can undershoot what the other pods
    peaked at when their peak and the finished pod's fell at different times, so the result never goes below
    ``U_latest``, the node's latest sample, which is what the node uses now.

    Args:
        window: (N, R) the windowed usage; NaN (unknown) stays NaN.
        departed: (N, R) ``G``; NaN or 0 → nothing finished: ``U_window`` as it is.
        latest: (N, R) the latest sample; NaN (unknown) → nothing is taken off (the finished pods stay in ``U``
            until they leave the window, as without this rule).
    """
    win = np.asarray(window, dtype=np.float64)
    gone = np.asarray(departed, dtype=np.float64)
    now = np.asarray(latest, dtype=np.float64)
    for name, arr in (("departed", gone), ("latest", now)):
        if arr.shape != win.shape:
            raise InvalidInput(f"{name}.shape", arr.shape, f"must be {win.shape} like window")
    gone = np.maximum(np.nan_to_num(gone, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    usable = (gone > 0) & np.isfinite(now)
    with np.errstate(invalid="ignore"):
        adjusted = np.maximum(win - gone, np.maximum(now, 0.0))
    return np.where(usable & ~np.isnan(win), adjusted, win)  # an unknown window stays unknown


def assumed_usage(
    demands: ArrayLike,
    bound_at_s: ArrayLike,
    started_at_s: ArrayLike,
    node_index: ArrayLike,
    node_sampled_at_s: ArrayLike,
    now_s: float,
    *,
    ramp_up_s: float,
    period_s: float,
    measured: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """(N, R) ``S``: each bound pod's demand until a sample of its node includes it (``ramp_up_s`` at most).

    :func:`stowage.policy.harvest.in_sample` says which pods the node's latest sample includes (it was taken a
    sampling period or more after the pod's containers started); :func:`stowage.policy.harvest.assumed` counts
    the others at ``max(d − measured, 0)``. N is ``len(node_sampled_at_s)``.

    Args:
        demands: (P, R) each pod's demand.
        bound_at_s: (P,) bind time; NaN: just bound.
        started_at_s: (P,) when its containers started; NaN: not started (never in a sample).
        node_index: (P,) int, its node (out of range: ignored).
        node_sampled_at_s: (N,) when each node's latest sample was taken; NaN: no sample (nothing included).
        now_s: now, on the clock of the times above.
        ramp_up_s: the upper limit (``harvest.ramp_up_s``).
        period_s: the node monitor's sampling period (``contention.sample_interval_s``).
        measured: optional (P, R) each pod's own measured usage (NaN → 0).
    """
    sampled = np.asarray(node_sampled_at_s, dtype=np.float64).reshape(-1)
    seen = harvest.in_sample(started_at_s, node_index, sampled, period_s)
    return harvest.assumed(demands, bound_at_s, node_index, now_s, ramp_up_s, sampled.shape[0],
                           measured=measured, included=seen)


def harvested_room(
    capacity: ArrayLike,
    usage: ArrayLike,
    fresh_mask: ArrayLike,
    blocked: ArrayLike,
    assumed: ArrayLike,
    t_alloc: ArrayLike,
    harvest_enabled: ArrayLike,
) -> NDArray[np.float64]:
    """(N, R) ``A_opp = max(T_alloc·C − U − B − S, 0)`` (UBIS Alg. 1 l.21, OPERA Eq. 4) where it may be had.

    A node without a fresh sample (``fresh_mask`` False: its ``U`` reads as NaN, a full node) and a node that
    does not harvest (``harvest_enabled`` False, label ``stowage.io/harvest: "false"``) offer 0. The arithmetic
    and its clamping are :func:`stowage.policy.harvest.harvestable`'s.

    Args:
        capacity: (N, R) ``C``.
        usage: (N, R) ``U`` (:func:`usage_after_departures`); NaN → that resource harvests nothing.
        fresh_mask: (N,) :func:`fresh`.
        blocked: (N, R) ``B`` (OPERA PRESERVE).
        assumed: (N, R) ``S`` (:func:`assumed_usage`).
        t_alloc: (R,) or (N, R) the over-allocation threshold.
        harvest_enabled: (N,) bool.
    """
    use = np.asarray(usage, dtype=np.float64)
    ok = np.asarray(fresh_mask, dtype=bool).reshape(-1)
    enabled = np.asarray(harvest_enabled, dtype=bool).reshape(-1)
    if use.ndim != 2 or ok.shape != (use.shape[0],) or enabled.shape != (use.shape[0],):
        raise InvalidInput("fresh_mask.shape", (ok.shape, enabled.shape), f"must be ({use.shape[0]},) like usage")
    room = harvest.harvestable(capacity, np.where(ok[:, None], use, np.nan), blocked, assumed, t_alloc)
    room[~(ok & enabled)] = 0.0
    return room


def bandwidth_room(capacity: ArrayLike, regular_declared: ArrayLike, fill: float = 1.0) -> NDArray[np.float64]:
    """(N, R) ``max(fill · C − Σ regular pods' reserved bandwidth, 0)``: the room a regular pod must fit.

    Read on the disk and network columns; each regular pod reserves its group's estimated use
    (``policy.use_estimates``). ``fill`` is ``estimates.bandwidth_fill``: bandwidth is compressible (too much of it
    slows the tasks that share it, it fails none), so estimated use may be packed past the declared capacity
    (> 1) or short of it (< 1). Opportunistic pods reserve no declared bandwidth (their disk and network are
    measured, in ``U``, and they fit :func:`harvested_room`), so their declarations are not in
    ``regular_declared``. NaN capacity → 0; NaN declared → the whole capacity (unknown: nothing free).
    """
    cap = np.asarray(capacity, dtype=np.float64)
    return harvest.regular_available(cap * float(fill) if fill != 1.0 else cap, regular_declared)
