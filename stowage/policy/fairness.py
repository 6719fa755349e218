"""Sharing between queues and jobs: weighted DRF, the fairness knob, the barrier knob.

- **Weighted DRF** (UBIS §IV-E, Tetris §3.4 and footnote 9): a queue's dominant
  share is ``max_r alloc_r / total_r``, divided by its weight; the next slot
  goes to the eligible queue with the lowest one.
- **Two pools** (UBIS §IV-E): call these functions once per pool.
  Regular pool: ``allocated`` = regular requests per queue, ``total`` =
  Σ allocatable over nodes, every queue eligible. Opportunistic pool:
  ``allocated`` = demands of each queue's opportunistic pods, ``total`` =
  Σ harvestable over nodes (``harvest.harvestable``), and only queues whose
  ``spec.opportunistic`` is ``Allow`` eligible (``QueueOpportunistic.ALLOW``);
  a queue that opts out gets nothing there and its share goes to the others.
- **Fairness knob** ``f`` (Tetris §3.4) over **jobs**: only the ⌈(1−f)·|J|⌉ jobs
  furthest below their fair share compete for a freed slot; ``f = 0`` all of
  them (most efficient), ``f → 1`` only the most deprived (most fair).
- **Between queues** (``deprived_queues``): only the most deprived queues
  compete, those whose weighted dominant share is within a slack δ
  (``packing.queue_share_slack``, 1 % of the pool) of the lowest; ``f = 0``
  lifts this too. A count like ⌈(1−f)·Q⌉ is vacuous
  for the few queues a cluster has (⌈0.75·2⌉ = 2 holds nobody back), so
  weighted DRF between queues does not depend on how many there are.
- **Fairness over time** (``QueueDeficits``, ``update_deficits``; ``packing.queue_share_deficit_s`` D): each
  queue's shortfall below its weighted fair share, integrated over time while it has work waiting (a
  deficit counter, as deficit round robin and stride scheduling keep). While no queue is owed more than D
  every queue competes and packing and job order decide; a queue owed more goes first until it is repaid
  below D, so shares deviate for a while but not on average: over a span T the time-averaged shares are
  weighted DRF's within about D/T. D = 0: strict weighted DRF at every slot (``deprived_queues``).
- **Barrier knob** ``b`` (Tetris §3.5): once a fraction ``b`` of a task group
  has finished and another group waits on it, its remaining tasks go first.

Shapes: Q queues, R resources, J jobs, G task groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput
from stowage.policy.alignment import nan_to_num_if_needed

__all__ = [
    "QueueDeficits",
    "after_pass",
    "barrier_boost",
    "deprived_queues",
    "dominant_shares",
    "drf_pick",
    "fair_share",
    "fairness_candidates",
    "padded",
    "update_deficits",
]

# ⌈(1−f)·J⌉ and fraction ≥ b are computed in floats; this absorbs their rounding
# (e.g. (1 − 0.7)·10 = 3.0000000000000004 must give 3 jobs, not 4).
_KNOB_TOL = 1e-9


def _vec(value: ArrayLike, field: str, dtype: type = np.float64) -> NDArray:
    arr = np.asarray(value, dtype=dtype)
    if arr.ndim != 1:
        raise InvalidInput(f"{field}.shape", arr.shape, "must be a 1-D array")
    return arr


def dominant_shares(allocated: ArrayLike, total: ArrayLike, weights: ArrayLike) -> NDArray[np.float64]:
    """Weighted dominant share of each queue: ``s_q = max_r(alloc_{q,r} / total_r) / w_q``.

    Args:
        allocated: (Q, R) what each queue holds in this pool (NaN/negative → 0).
        total: (R,) the pool's size. Resources with ``total_r ≤ 0`` (or NaN) are
            ignored: nobody can hold a share of nothing.
        weights: (Q,) ``spec.weight`` (default 1). A weight ``≤ 0`` or NaN makes
            the share ``+inf``: such a queue is served only when nobody else is.

    Returns:
        (Q,) float64 ≥ 0 (or +inf). A queue holding nothing has share 0.
    """
    alloc = np.asarray(allocated, dtype=np.float64)
    tot = _vec(total, "total")
    w = _vec(weights, "weights")
    if alloc.ndim != 2 or alloc.shape[1] != tot.shape[0]:
        raise InvalidInput("allocated.shape", alloc.shape, f"must be (Q, {tot.shape[0]}) like total")
    if w.shape != (alloc.shape[0],):
        raise InvalidInput("weights.shape", w.shape, f"must be ({alloc.shape[0]},), one per queue")
    tot_list = tot.tolist()
    if alloc.size <= 64 and all(0.0 < t < math.inf for t in tot_list):
        # A pass's few queues, the usual pool: plain floats do the same IEEE operations for a fraction of
        # numpy's per-call overhead (a share of zero may differ in sign only, which no comparison sees).
        top = np.finfo(np.float64).max
        shares = []
        for row, wq in zip(alloc.tolist(), w.tolist(), strict=True):
            fracs = []
            for a, t in zip(row, tot_list, strict=True):
                a = 0.0 if a != a else (top if a == math.inf else a)  # nan_to_num
                fracs.append((a if a >= 0.0 else 0.0) / t)
            dom = max(fracs, default=0.0)
            shares.append(dom / wq if 0.0 < wq < math.inf else math.inf)
        return np.array(shares, dtype=np.float64)
    alloc = np.maximum(nan_to_num_if_needed(alloc, posinf=np.finfo(np.float64).max), 0.0)
    tot = nan_to_num_if_needed(tot, posinf=np.finfo(np.float64).max)  # nan_to_num's default for +inf
    with np.errstate(over="ignore"):
        # (Q, R); ignored resources contribute 0. Dividing directly (not by 1/total)
        # keeps 0/tiny = 0 instead of 0·inf = NaN.
        frac = np.divide(alloc, tot, out=np.zeros_like(alloc), where=tot > 0)
    dom = frac.max(axis=1) if frac.shape[1] else np.zeros(alloc.shape[0])
    good_w = np.isfinite(w) & (w > 0)
    out = np.full(alloc.shape[0], np.inf)
    with np.errstate(over="ignore"):
        np.divide(dom, w, out=out, where=good_w)
    return out


def drf_pick(
    allocated: ArrayLike, total: ArrayLike, weights: ArrayLike, eligible: ArrayLike
) -> int | None:
    """The eligible queue with the lowest weighted dominant share (DRF, UBIS §IV-E).

    ``argmin_{q eligible} dominant_shares(allocated, total, weights)[q]``; ties go
    to the lowest index (stable, so a config's queue order decides); no
    eligible queue → ``None``. eligible: (Q,) bool, e.g. "has a pending task
    that fits somewhere" and, for the opportunistic pool, "queue Allows it".
    """
    shares = dominant_shares(allocated, total, weights)
    ok = _vec(eligible, "eligible", bool)
    if ok.shape != shares.shape:
        raise InvalidInput("eligible.shape", ok.shape, f"must be {shares.shape}, one per queue")
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    # argmin returns the first minimum: ties (and all-+inf) go to the lowest index.
    return int(idx[np.argmin(shares[idx])])


def fair_share(weights: ArrayLike, active: ArrayLike) -> NDArray[np.float64]:
    """Each queue's fair share of a pool: ``w_q / Σ_{active} w`` (0 when inactive).

    weights: (Q,), NaN/negative → 0. active: (Q,) bool (has running or pending
    work; for the opportunistic pool, also Allows it). If the active weights
    sum to 0, every share is 0. Returns (Q,) summing to 1 over active queues.
    """
    w = np.maximum(np.nan_to_num(_vec(weights, "weights"), nan=0.0, posinf=0.0), 0.0)
    act = _vec(active, "active", bool)
    if act.shape != w.shape:
        raise InvalidInput("active.shape", act.shape, f"must be {w.shape}, one per queue")
    w = np.where(act, w, 0.0)
    total = w.sum()
    return w / total if total > 0 else np.zeros_like(w)


def fairness_candidates(share_deficit: ArrayLike, f: float) -> NDArray[np.int64]:
    """Jobs allowed to compete for the next slot: Tetris's fairness knob (§3.4).

    Returns the indices of the ``k = max(1, ⌈(1 − f)·J⌉)`` jobs with the largest
    ``share_deficit`` (fair share − current share), largest first; equal
    deficits keep index order (stable). ``f`` is clamped to ``[0, 1]`` (NaN →
    0). ``f = 0`` → all J jobs; ``f → 1`` → only the most deprived; never empty
    when J > 0. A NaN deficit counts as the least deprived. Default in config
    ``packing.fairness_knob`` = 0.25 (Tetris §5.3).
    """
    deficit = _vec(share_deficit, "share_deficit")
    j = deficit.shape[0]
    if j == 0:
        return np.zeros(0, dtype=np.int64)
    knob = min(max(float(np.nan_to_num(f, nan=0.0)), 0.0), 1.0)
    k = max(1, min(j, math.ceil((1.0 - knob) * j - _KNOB_TOL)))
    key = np.where(np.isnan(deficit), -np.inf, deficit)
    order = np.argsort(-key, kind="stable")
    return order[:k].astype(np.int64)


def deprived_queues(shares: ArrayLike, active: ArrayLike, slack: float) -> NDArray[np.bool_]:
    """Queues that may compete for the next slot: the most deprived by weighted DRF, within ``slack``.

    ``active_q ∧ s_q ≤ min_{active} s + slack`` with ``s = dominant_shares(...)`` (weighted). The queue with
    the lowest share always competes (so never empty when some queue is active); a queue with a weight
    ≤ 0 (share +inf) competes only when every active queue has +inf. ``slack`` < 0 counts as 0; NaN shares
    never compete unless all are NaN. A held-back queue still gets what the deprived ones cannot use: the
    caller widens the set (``active`` minus the queues it tried) when none of their tasks fits.
    shares, active: (Q,) → (Q,) bool.
    """
    s = _vec(shares, "shares")
    act = _vec(active, "active", bool)
    if act.shape != s.shape:
        raise InvalidInput("active.shape", act.shape, f"must be {s.shape}, one per queue")
    if s.shape[0] <= _FEW_QUEUES:  # a pool's few queues: plain floats, the same comparisons (once per placement)
        return _deprived_on_floats(s.tolist(), act.tolist(), float(slack))
    key = np.where(np.isnan(s), np.inf, s)
    if not act.any():
        return act.copy()
    floor = key[act].min()
    with np.errstate(invalid="ignore"):
        near = key <= floor + max(float(np.nan_to_num(slack, nan=0.0)), 0.0)
    return act & (near | (key == floor))


_FEW_QUEUES = 16  # up to this many queues, deprived_queues works on Python floats


def _deprived_on_floats(shares: list[float], active: list[bool], slack: float) -> NDArray[np.bool_]:
    """:func:`deprived_queues` on Python floats: NaN shares as +inf, the slack cleaned as ``np.nan_to_num``
    cleans it (NaN → 0, ±inf → ±the largest float) and clamped at 0, the same sum and comparisons."""
    key = [math.inf if x != x else x for x in shares]
    live = [k for k, on in zip(key, active, strict=True) if on]
    if not live:
        return np.zeros(len(active), dtype=bool)
    floor = min(live)
    top = np.finfo(np.float64).max
    slack = 0.0 if slack != slack else (top if slack == math.inf else (-top if slack == -math.inf else slack))
    limit = floor + max(slack, 0.0)
    return np.array([on and (k <= limit or k == floor) for k, on in zip(key, active, strict=True)], dtype=bool)


@dataclass(frozen=True, slots=True)
class QueueDeficits:
    """Each queue's time-integrated shortfall below its weighted fair share; the caller keeps it between passes.

    One per pool, carried from pass to pass by whoever runs the passes (the simulator's packing preset, the
    operator's dispatcher); ``update_deficits`` makes the next one from the shares a pass left. Empty:
    nothing seen yet. ``deficit`` is in pool-fraction × seconds (0.1 of the pool for 100 s = 10).
    """

    deficit: tuple[float, ...] = ()
    """(Q,) owed (> 0) or ahead (< 0); over the active queues they sum to 0."""
    dominant: tuple[float, ...] = ()
    """(Q,) the unweighted dominant shares that hold since ``at``."""
    active: tuple[bool, ...] = ()
    """(Q,) which queues had work waiting since ``at``."""
    at: float = math.nan
    """When the last update was (NaN: never)."""

    def overdue(self, threshold: float, weights: ArrayLike, now: float) -> NDArray[np.bool_]:
        """(Q,) queues owed more than ``threshold`` (pool-fraction × seconds) by ``now``, the shares of the last
        update held until then: they go first in a pass at ``now``. weights: (Q,) as for ``update_deficits``."""
        w = _vec(weights, "weights")
        return _accrued(self, w, w.shape[0], now) > threshold

    def resumed(self, now: float) -> QueueDeficits:
        """The same deficits with nothing accrued before ``now``: the last update's shares count from ``now``.

        ``update_deficits`` integrates those shares over the whole gap since ``at``, however long; a caller that
        ran no passes for a while (an operator that was down, when nobody could be served) resumes with this,
        so the gap adds nothing to what each queue is owed.
        """
        return replace(self, at=float(now))

    def reordered(self, before: Sequence[str], names: Sequence[str]) -> QueueDeficits:
        """The same state for queues listed as ``names``, kept under ``before``: a queue new to it starts at 0."""
        if tuple(before) == tuple(names):
            return self
        at = {n: i for i, n in enumerate(before)}

        def pick(values: tuple, fill: Any) -> tuple:
            return tuple(values[at[n]] if at.get(n, len(values)) < len(values) else fill for n in names)

        return QueueDeficits(pick(self.deficit, 0.0), pick(self.dominant, math.nan), pick(self.active, False), self.at)


def update_deficits(
    state: QueueDeficits, dominant: ArrayLike, weights: ArrayLike, active: ArrayLike, now: float
) -> QueueDeficits:
    """The state after a pass at ``now``: ``state``'s shares held since ``state.at``; ``dominant`` holds from now.

    Over ``[at, now]`` each queue active then gains ``(w_q·L − dom_q)·Δt``, ``L = Σ dom / Σ w`` over those
    queues (weighted DRF's common level: at it every queue holds ``w_q·L``), so the deficits of the active
    queues sum to 0. A queue without waiting work forfeits what it was owed or ahead (its deficit restarts
    at 0, as a queue that comes back starts with nothing owed). Weights ≤ 0 or NaN and NaN shares take no
    part (deficit 0). dominant (unweighted ``max_r alloc/total``), weights, active: (Q,); the queue count
    may change between passes (a queue first seen starts at 0). The whole gap since ``state.at`` accrues,
    however long (``QueueDeficits.resumed`` skips one); a ``now`` before ``state.at`` accrues nothing.
    """
    dom = _vec(dominant, "dominant")
    w = _vec(weights, "weights")
    act = _vec(active, "active", bool)
    if w.shape != dom.shape or act.shape != dom.shape:
        raise InvalidInput("weights.shape", (w.shape, act.shape), f"must be {dom.shape}, one per queue")
    deficit = _accrued(state, w, dom.shape[0], now)
    keep = act & np.isfinite(dom) & np.isfinite(w) & (w > 0)
    deficit = np.where(keep, deficit, 0.0)
    return QueueDeficits(tuple(deficit.tolist()), tuple(dom.tolist()), tuple(keep.tolist()), float(now))


def after_pass(state: QueueDeficits, allocated: ArrayLike, total: ArrayLike, weights: ArrayLike,
               waiting: ArrayLike, now: float) -> QueueDeficits:
    """``update_deficits`` from what a pass left: allocated (Q, R) per queue, the pool's total (R,), and the
    queue index of every row that still has tasks waiting (those queues are the active ones)."""
    w = _vec(weights, "weights")
    active = np.bincount(np.asarray(waiting, dtype=np.int64).reshape(-1), minlength=w.shape[0])[: w.shape[0]] > 0
    return update_deficits(state, dominant_shares(allocated, total, np.ones(w.shape[0])), w, active, now)


def padded(values: ArrayLike, q: int, fill: float) -> NDArray:
    """``values`` as a (q,) vector: cut after ``q``, or extended with ``fill`` (a per-queue vector kept under fewer
    or more queues). The dtype is ``fill``'s: bool for ``True``/``False`` (values cast to bool), else float64."""
    out = np.full(q, fill, dtype=bool if isinstance(fill, bool) else np.float64)
    v = np.asarray(values, dtype=out.dtype).reshape(-1)[:q]
    out[: v.size] = v
    return out


def _accrued(state: QueueDeficits, w: NDArray[np.float64], q: int, now: float) -> NDArray[np.float64]:
    """(Q,) ``state``'s deficits plus what its shares accrued from ``state.at`` to ``now`` (``update_deficits``)."""

    deficit = padded(state.deficit, q, 0.0)
    before, was = padded(state.dominant, q, math.nan), padded(state.active, q, False)
    takes_part = was & np.isfinite(before) & np.isfinite(w) & (w > 0)
    dt = float(now) - state.at
    if takes_part.any() and dt > 0:  # NaN ``at`` (never updated) compares False
        level = before[takes_part].sum() / w[takes_part].sum()
        deficit[takes_part] += (w[takes_part] * level - before[takes_part]) * dt
    return deficit


def barrier_boost(finished_fraction: ArrayLike, has_waiters: ArrayLike, b: float) -> NDArray[np.bool_]:
    """Task groups whose remaining tasks go first: Tetris's barrier knob (§3.5).

    ``boost_g = has_waiters_g ∧ b ≤ finished_g < 1`` (with a 1e-9 allowance on
    ``b``). A group is boosted once a fraction ``b`` of its tasks finished and
    some other group (a ``dependsOn`` successor, or the end of the job) waits on
    it; a finished group has nothing left to boost. ``b`` is clamped to
    ``[0, 1]``; ``b = 1`` boosts nothing (Tetris: "when b = 1, no tasks are
    preferentially treated"). Default in config ``packing.barrier_knob`` = 0.9.
    NaN fractions are never boosted. finished_fraction, has_waiters: (G,) →
    (G,) bool. Among boosted tasks the caller still picks by alignment.
    """
    frac = _vec(finished_fraction, "finished_fraction")
    wait = _vec(has_waiters, "has_waiters", bool)
    if wait.shape != frac.shape:
        raise InvalidInput("has_waiters.shape", wait.shape, f"must be {frac.shape}, one per group")
    knob = min(max(float(np.nan_to_num(b, nan=1.0)), 0.0), 1.0)
    if knob >= 1.0:
        return np.zeros(frac.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return wait & (frac >= knob - _KNOB_TOL) & (frac < 1.0)
