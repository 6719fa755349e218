"""Sharing between queues and jobs: weighted DRF, the fairness knob, the barrier knob.

- **Weighted DRF** (UBIS §IV-E, Tetris §3.4 and footnote 9): a queue's dominant
  share is ``max_r alloc_r / total_r`` (``dominant_shares``, ``PoolShares``), divided by its weight; the
  queues compete by it through ``queue_tiers`` (below).
- **Two pools** (UBIS §IV-E): call these functions once per pool.
  Regular pool: ``allocated`` = regular requests per queue, ``total`` =
  Σ allocatable over nodes, every queue eligible. Opportunistic pool:
  ``allocated`` = demands of each queue's opportunistic pods, ``total`` =
  Σ harvestable over nodes (``harvest.harvestable``), and only queues whose
  ``spec.opportunistic`` is ``Allow`` eligible (``QueueOpportunistic.ALLOW``);
  a queue that opts out gets nothing there and its share goes to the others.
- **Fairness knob** ``f`` (Tetris §3.4) is applied by ``dispatch.pack``: inside a queue only its first
  ``max(1, ⌈(1−f)·J_q⌉)`` jobs in job order compete for a freed slot, and ``f = 0`` lets every queue
  compete whatever the tiers (most efficient); ``f → 1`` only the first job of each queue (most fair).
- **Fairness over time between queues** (``QueueUsage``, ``queue_tiers``): weights hold on *decayed usage*,
  each queue's dominant share averaged with a half-life ``H`` (``packing.queue_usage_half_life_s``), as Kueue's
  admission fair sharing, Slurm and Volcano's fairshare decay usage. A queue whose projected usage per weight
  (``projected``: half past usage, half what it holds now, so a burst counts at once) is more than
  ``packing.queue_usage_tolerance`` above the lowest backlogged queue's is *ahead* and gets only what the
  others cannot use; the rest compete as equals, and packing and job order (SRTF, FSP) decide between them. A
  backlogged queue holding less than ``packing.queue_share_floor`` (½) of its weighted fair share
  (``fair_levels``) goes before everyone: the short-term floor. ``H = 0`` and tolerance 0 is weighted DRF at
  every slot (only the queues with the lowest weighted dominant share compete).
- **Barrier knob** ``b`` (Tetris §3.5): once a fraction ``b`` of a task group
  has finished and another group waits on it, its remaining tasks go first.

Shapes: Q queues, R resources, J jobs, G task groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput
from stowage.policy.alignment import nan_to_num_if_needed
from stowage.policy.tolerances import EQUALITY_ATOL, EQUALITY_RTOL, ROUNDING_EPS, ZERO_ATOL

__all__ = [
    "AHEAD",
    "EVEN",
    "FLOOR",
    "IDLE",
    "PoolShares",
    "QueueUsage",
    "TierRule",
    "barrier_boost",
    "decayed",
    "dominant_shares",
    "fair_levels",
    "fair_shares",
    "padded",
    "projected",
    "queue_tiers",
    "usage_targets",
]

_FLOAT_MAX: Final = float(np.finfo(np.float64).max)



def _vec(value: ArrayLike, field: str, dtype: type = np.float64) -> NDArray:
    arr = np.asarray(value, dtype=dtype)
    if arr.ndim != 1:
        raise InvalidInput(f"{field}.shape", arr.shape, "must be a 1-D array")
    return arr


def _knob(value: float, nan: float, top: float) -> float:
    """A knob clamped to [0, top], NaN read as ``nan`` (a float's check: nan_to_num costs more than the pass's math)."""
    x = float(value)
    return nan if x != x else min(max(x, 0.0), top)


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
    dom = _dominant(_clean_alloc(alloc), _clean_total(tot))
    good_w = np.isfinite(w) & (w > 0)
    out = np.full(alloc.shape[0], np.inf)
    with np.errstate(over="ignore"):
        np.divide(dom, w, out=out, where=good_w)
    return out


def _clean_alloc(alloc: NDArray[np.float64]) -> NDArray[np.float64]:
    """``dominant_shares``' reading of an allocation: NaN and negative → 0, +inf → the largest float."""
    return np.maximum(nan_to_num_if_needed(alloc, posinf=_FLOAT_MAX), 0.0)


def _clean_total(tot: NDArray[np.float64]) -> NDArray[np.float64]:
    return nan_to_num_if_needed(tot, posinf=_FLOAT_MAX)  # nan_to_num's default for +inf


def _dominant(alloc: NDArray[np.float64], tot: NDArray[np.float64], plain: bool = False) -> NDArray[np.float64]:
    """(Q,) unweighted dominant shares of cleaned (Q, R) allocations (a (R,) row: its share); resources with
    ``tot ≤ 0`` add 0.

    ``plain``: every total is ≥ 1 (``_plain``), so no share divides by 0 or overflows: the same quotients without
    the guards, which cost most of a packing pass's per-placement update of one queue's share.
    """
    if plain:
        return (alloc / tot).max(axis=-1)
    with np.errstate(over="ignore"):
        # Dividing directly (not by 1/total) keeps 0/tiny = 0 instead of 0·inf = NaN.
        frac = np.divide(alloc, tot, out=np.zeros_like(alloc), where=tot > 0)
    return frac.max(axis=-1) if frac.shape[-1] else np.zeros(alloc.shape[:-1])


def _plain(tot: NDArray[np.float64]) -> bool:
    """Whether ``_dominant`` may divide by these cleaned totals unguarded: R ≥ 1 and each one ≥ 1."""
    return bool(tot.size) and float(tot.min()) >= 1.0


IDLE: Final = -1
"""``queue_tiers``: not backlogged."""
FLOOR: Final = 0
"""``queue_tiers``: below ``packing.queue_share_floor`` of its fair share; goes first."""
EVEN: Final = 1
"""``queue_tiers``: within ``packing.queue_usage_tolerance`` of its weight on projected usage."""
AHEAD: Final = 2
"""``queue_tiers``: ahead of its weight; gets what the others cannot use."""


def queue_tiers(dominant: ArrayLike, usage: ArrayLike, weights: ArrayLike, backlogged: ArrayLike,
                tolerance: float, floor: float, levels: ArrayLike | None = None) -> NDArray[np.int8]:
    """Which queues compete first for the next slot of a pool: fairness over time (module docstring).

    - ``FLOOR`` (0): backlogged and holding less than ``floor`` × its weighted fair share (``fair_levels``).
    - ``EVEN`` (1): backlogged and not ahead: its projected usage per weight (``projected``) is at most
      ``1 + tolerance`` times the lowest of the backlogged queues'.
    - ``AHEAD`` (2): backlogged and ahead by more; also a queue whose weight is ≤ 0 or NaN, or whose shares are
      NaN (it is served only with what the others cannot use).
    - ``IDLE`` (−1): not backlogged.

    dominant: (Q,) unweighted dominant shares now; usage: (Q,) decayed usage (``QueueUsage.usage_at``);
    weights, backlogged: (Q,). A queue that has used nothing is ahead of nobody; while one such waits, every
    queue that has used something is ahead (as weighted DRF serves a newcomer first). ``levels``:
    ``fair_levels(dominant, weights, backlogged)`` if the caller has it; it depends only on which queues are
    backlogged and on the shares of the others, so a pass placing for backlogged queues computes it once.
    """
    dom, used, w = _vec(dominant, "dominant"), _vec(usage, "usage"), _vec(weights, "weights")
    on = _vec(backlogged, "backlogged", bool)
    if not (used.shape == w.shape == on.shape == dom.shape):
        raise InvalidInput("usage.shape", (used.shape, w.shape, on.shape), f"must be {dom.shape}, one per queue")
    fair = fair_levels(dom, w, on) if levels is None else _vec(levels, "levels")
    if fair.shape != dom.shape:
        raise InvalidInput("levels.shape", fair.shape, f"must be {dom.shape}, one per queue")
    return _tiers(dom, used, w, on, tolerance, floor, fair)


def _tiers(dom: NDArray[np.float64], used: NDArray[np.float64], w: NDArray[np.float64], on: NDArray[np.bool_],
           tolerance: float, floor: float, fair: NDArray[np.float64]) -> NDArray[np.int8]:
    """``queue_tiers`` on checked (Q,) vectors."""
    return TierRule(w, on, tolerance, floor, fair).tiers(dom, used)


class TierRule:
    """``queue_tiers`` with its parts that depend only on the weights, the backlogged queues, the knobs and the
    levels made once: a packing pass asks for the tiers at every placement, and those parts stay the same until
    the set of backlogged queues changes. Inputs checked by the caller (``queue_tiers``, ``PoolShares``)."""

    __slots__ = ("_base", "_factor", "_floor_at", "_start", "_w")

    def __init__(self, w: NDArray[np.float64], on: NDArray[np.bool_], tolerance: float, floor: float,
                 fair: NDArray[np.float64]) -> None:
        self._start = np.where(on, np.int8(AHEAD), np.int8(IDLE))
        self._base = on & np.isfinite(w) & (w > 0)  # may be EVEN or FLOOR, given finite shares
        self._w = np.where(self._base, w, 1.0)
        self._factor = 1.0 + _knob(tolerance, 0.0, _FLOAT_MAX)
        self._floor_at = floor * fair - ZERO_ATOL

    def tiers(self, dom: NDArray[np.float64], used: NDArray[np.float64]) -> NDArray[np.int8]:
        """(Q,) tiers for the dominant shares ``dom`` and decayed usage ``used``."""
        out = self._start.copy()
        k = projected(dom, used)
        fine = self._base & np.isfinite(k)
        if not fine.any():
            return out
        per_weight = np.where(fine, k / self._w, np.inf)
        limit = self._factor * per_weight.min()
        out[fine & (per_weight <= limit * (1 + EQUALITY_RTOL) + EQUALITY_ATOL)] = EVEN
        out[fine & (dom < self._floor_at)] = FLOOR
        return out


class PoolShares:
    """The queues' unweighted dominant shares of one pool, kept current while a pass places tasks one at a time.

    ``dominant_shares`` reads the whole (Q, R) allocation; a placement changes one queue's, so this cleans the
    allocation once and recomputes only that queue's share (the same bits). ``tiers`` and ``levels`` are
    ``queue_tiers`` and ``fair_levels`` on these shares, with the inputs checked once, here.
    """

    def __init__(self, allocated: ArrayLike, total: ArrayLike, weights: ArrayLike,
                 usage: ArrayLike | None = None) -> None:
        """``usage``: each queue's decayed usage (``QueueUsage.usage_at``, shorter than Q: the rest 0), or None
        for none (half-life 0: the usage is the dominant share at each placement)."""
        self.weights = _vec(weights, "weights")
        alloc = np.asarray(allocated, dtype=np.float64)
        q = self.weights.shape[0]
        tot = _vec(total, "total")
        if alloc.shape != (q, tot.shape[0]):
            raise InvalidInput("allocated.shape", alloc.shape, f"must be ({q}, {tot.shape[0]}): queues × resources")
        self.alloc, self.total = _clean_alloc(alloc), _clean_total(tot)
        self._plain = _plain(self.total)
        self.dominant = _dominant(self.alloc, self.total, self._plain)
        self.usage = None if usage is None else padded(usage, q, 0.0)

    def add(self, q: int, demand: NDArray[np.float64]) -> None:
        """Queue ``q`` now also holds ``demand`` (R,), finite and ≥ 0."""
        row = self.alloc[q]
        row += demand
        self.dominant[q] = _dominant(row, self.total, self._plain)

    def levels(self, backlogged: NDArray[np.bool_]) -> NDArray[np.float64]:
        """``fair_levels`` of the ``backlogged`` queues (Q,): the same until that set changes, since a pass adds
        only to backlogged queues, and the levels read only the others' shares."""
        return fair_levels(self.dominant, self.weights, backlogged)

    def rule(self, backlogged: NDArray[np.bool_], tolerance: float, floor: float,
             levels: NDArray[np.float64] | None = None) -> TierRule:
        """``queue_tiers``' rule for the ``backlogged`` queues; ``levels``: ``self.levels(backlogged)`` if the
        caller has it."""
        fair = self.levels(backlogged) if levels is None else levels
        return TierRule(self.weights, backlogged, tolerance, floor, fair)

    def tiers(self, rule: TierRule) -> NDArray[np.int8]:
        """``queue_tiers`` now, under ``rule`` (``self.rule``)."""
        return rule.tiers(self.dominant, self.dominant if self.usage is None else self.usage)


def projected(dominant: ArrayLike, usage: ArrayLike) -> NDArray[np.float64]:
    """(Q,) each queue's usage one half-life ahead if its allocation held: ``(usage + dominant) / 2``.

    The current allocation counts as much as the past: a burst placed between two updates of the decayed
    usage (or within one pass) raises a queue's figure at once, so it cannot buy more than its share (the
    role of Kueue's entry penalty). With a half-life of 0 the usage is the dominant share and this is too.
    """
    return (np.asarray(usage, dtype=np.float64) + np.asarray(dominant, dtype=np.float64)) / 2.0


def _by_weight(w: NDArray[np.float64], among: NDArray[np.bool_], amount: float | NDArray[np.float64],
               weight: float) -> NDArray[np.float64]:
    """``w_q · amount / Σ_among w`` (``weight`` that sum): what the ``among`` queues share, in proportion to their
    weights; 0 for the others, and for every queue when the weights sum to 0."""
    return np.where(among, w * amount / weight, 0.0) if weight > 0 else np.zeros_like(w)


def fair_shares(dominant: ArrayLike, weights: ArrayLike, backlogged: ArrayLike) -> NDArray[np.float64]:
    """(Q,) each queue's weighted fair share of a pool: weighted max-min, the one definition of a fair share.

    The backlogged queues want more; every other queue wants what it holds (``dominant``, unweighted). Filling at a
    common level ``L``, a queue gets ``min(want, w·L)`` and the level solves Σ = 1: a queue that holds little
    leaves the rest to the others, in proportion to their weights. A backlogged queue's share is ``w·L`` (its
    level, ``fair_levels``: the dispatcher's floor, the holds, the published ``fairShare``); another queue's is
    what it holds, up to ``w·L`` (above it, the queue holds more than its share: the extender may preempt it).
    With every queue that holds something backlogged, this is ``w / Σ w`` over the backlogged queues. Weights ≤ 0
    or NaN count as 0.
    """
    dom = nan_to_num_if_needed(_vec(dominant, "dominant"), posinf=1.0)
    w = np.maximum(nan_to_num_if_needed(_vec(weights, "weights")), 0.0)
    on = _vec(backlogged, "backlogged", bool)
    if not (dom.shape == w.shape == on.shape):
        raise InvalidInput("backlogged.shape", (w.shape, on.shape), f"must be {dom.shape}, one per queue")
    on = on & (w > 0)  # not in place: the caller's array
    rest = ~on & (w > 0) & (dom > 0)
    left, weight = 1.0, float(w[on | rest].sum())
    level_set = on | rest  # the queues filled at the level: the backlogged ones and those that want more than it
    for q in np.flatnonzero(rest)[np.argsort(dom[rest] / w[rest], kind="stable")].tolist():
        if weight <= 0 or dom[q] / w[q] > left / weight:
            break
        left, weight = left - float(dom[q]), weight - float(w[q])
        level_set[q] = False
    share = _by_weight(w, level_set, max(left, 0.0), weight)
    return np.where(level_set, share, np.where(rest, dom, 0.0))  # below the level: what it holds


def fair_levels(dominant: ArrayLike, weights: ArrayLike, backlogged: ArrayLike) -> NDArray[np.float64]:
    """(Q,) ``fair_shares`` of the backlogged queues (``w·L``), 0 for the others: what the floor of
    ``queue_tiers`` and the holds read."""
    on = _vec(backlogged, "backlogged", bool)
    return np.where(on, fair_shares(dominant, weights, on), 0.0)


def usage_targets(usage: ArrayLike, weights: ArrayLike, backlogged: ArrayLike) -> NDArray[np.float64]:
    """(Q,) the decayed usage each queue's weight entitles it to: the backlogged queues' usage, split in proportion
    to their weights (as ``fair_shares`` splits a pool), which is what ``queue_tiers`` evens out (usage per weight
    within ``packing.queue_usage_tolerance``); a queue with nothing waiting asks for no more than it has: its own
    usage. Weights ≤ 0 or NaN count as 0."""
    u = np.maximum(nan_to_num_if_needed(_vec(usage, "usage")), 0.0)
    w = np.maximum(nan_to_num_if_needed(_vec(weights, "weights")), 0.0)
    on = _vec(backlogged, "backlogged", bool)
    if not (u.shape == w.shape == on.shape):
        raise InvalidInput("backlogged.shape", (w.shape, on.shape), f"must be {u.shape}, one per queue")
    on = on & (w > 0)
    return np.where(on, _by_weight(w, on, float(u[on].sum()), float(w[on].sum())), u)


def decayed(usage: ArrayLike, dominant: ArrayLike, elapsed_s: float, half_life_s: float) -> NDArray[np.float64]:
    """(Q,) decayed usage ``elapsed_s`` later, the dominant shares held meanwhile: ``u·a + d·(1 − a)``.

    ``a = 2^(−Δt / H)``: the exponential moving average of a queue's dominant share with half-life ``H``
    (``packing.queue_usage_half_life_s``; Kueue's admission fair sharing and Slurm's fair-share factor decay
    usage the same way). ``H ≤ 0``: the usage is the dominant share (no memory).
    """
    u, d = np.asarray(usage, dtype=np.float64), np.asarray(dominant, dtype=np.float64)
    if half_life_s <= 0:
        return d.copy()
    a = 2.0 ** (-max(float(elapsed_s), 0.0) / half_life_s)
    return u * a + d * (1.0 - a)


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """Each queue's decayed usage of one pool; the caller keeps it between passes.

    One per pool, carried by whoever runs the passes (the simulator's packing preset, the operator's
    dispatcher). It changes only when a pass changes the shares (``recorded``): between changes the usage
    follows from these fields alone, so a caller that saves it has nothing to write while nothing changes.
    Empty: nothing seen yet.
    """

    usage: tuple[float, ...] = ()
    """(Q,) decayed usage at ``at``: the moving average of the dominant share, a fraction of the pool."""
    dominant: tuple[float, ...] = ()
    """(Q,) the unweighted dominant shares that hold since ``at``."""
    at: float = math.nan
    """When the shares last changed (NaN: never)."""

    def usage_at(self, now: float, half_life_s: float, q: int | None = None) -> NDArray[np.float64]:
        """(Q,) the decayed usage at ``now``, the shares since ``at`` held until then (0 for a queue not seen)."""
        q = len(self.usage) if q is None else q
        if math.isnan(self.at):
            return np.zeros(q)
        out = decayed(padded(self.usage, q, 0.0), padded(self.dominant, q, 0.0), float(now) - self.at, half_life_s)
        return np.nan_to_num(out, nan=0.0)

    def recorded(self, dominant: ArrayLike, now: float, half_life_s: float) -> QueueUsage:
        """The state after a pass at ``now`` that left ``dominant`` (Q,): itself when the shares did not change."""
        dom = tuple(float(x) for x in np.nan_to_num(_vec(dominant, "dominant"), nan=0.0).tolist())
        if dom == self.dominant and not math.isnan(self.at):
            return self
        usage = self.usage_at(now, half_life_s, len(dom)) if not math.isnan(self.at) else np.asarray(dom)
        return QueueUsage(tuple(usage.tolist()), dom, float(now))

    def reordered(self, before: Sequence[str], names: Sequence[str]) -> QueueUsage:
        """The same state for queues listed as ``names``, kept under ``before``: a queue new to it starts at 0."""
        if tuple(before) == tuple(names):
            return self
        at = {n: i for i, n in enumerate(before)}

        def pick(values: tuple) -> tuple:
            return tuple(values[at[n]] if at.get(n, len(values)) < len(values) else 0.0 for n in names)

        return QueueUsage(pick(self.usage), pick(self.dominant), self.at)


def padded(values: ArrayLike, q: int, fill: float) -> NDArray:
    """``values`` as a (q,) vector: cut after ``q``, or extended with ``fill`` (a per-queue vector kept under fewer
    or more queues). The dtype is ``fill``'s: bool for ``True``/``False`` (values cast to bool), else float64."""
    out = np.full(q, fill, dtype=bool if isinstance(fill, bool) else np.float64)
    v = np.asarray(values, dtype=out.dtype).reshape(-1)[:q]
    out[: v.size] = v
    return out


def barrier_boost(finished_fraction: ArrayLike, has_waiters: ArrayLike, b: float) -> NDArray[np.bool_]:
    """Task groups whose remaining tasks go first: Tetris's barrier knob (§3.5).

    ``boost_g = has_waiters_g ∧ b ≤ finished_g < 1`` (with a ``tolerances.ROUNDING_EPS``
    allowance on ``b``: the fraction is computed in floats). A group is boosted once a
    fraction ``b`` of its tasks finished and some other group (a ``dependsOn`` successor,
    or the end of the job) waits on it; a finished group has nothing left to boost. ``b`` is clamped to
    ``[0, 1]``; ``b = 1`` boosts nothing (Tetris: "when b = 1, no tasks are
    preferentially treated"). Default in config ``packing.barrier_knob`` = 0.9.
    NaN fractions are never boosted. finished_fraction, has_waiters: (G,) →
    (G,) bool. Among boosted tasks the caller still picks by alignment.
    """
    frac = _vec(finished_fraction, "finished_fraction")
    wait = _vec(has_waiters, "has_waiters", bool)
    if wait.shape != frac.shape:
        raise InvalidInput("has_waiters.shape", wait.shape, f"must be {frac.shape}, one per group")
    knob = _knob(b, 1.0, 1.0)
    if knob >= 1.0:
        return np.zeros(frac.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return wait & (frac >= knob - ROUNDING_EPS) & (frac < 1.0)
