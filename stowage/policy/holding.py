"""Why a task waits: one reason per task group a decision left waiting, with the numbers behind it.

``decide.Decider.decide`` asks ``explain`` (with ``DecideInput.explain``) after its passes, on what they left: each
pool's free room and each queue's allocation. A group waits in the pool it may use (regular, or harvested for
``stowage.io/opportunistic: "true"``), and the first of these that holds names its reason:

1. ``quota``: its next task would take its queue above ``spec.quota`` on some resource (the one most over is
   named, used/limit);
2. ``sample`` (harvested pool only): it fits no node's harvestable room, but some node without a fresh
   utilization sample (older than ``harvest.utilization_stale_after_s``, or none) could take it by capacity;
3. ``share``: another queue with waiting work comes first (``fairness.queue_tiers``): one below
   ``packing.queue_share_floor`` of its fair share, or, when this queue is ahead of its weight on decayed usage,
   one that is not; that one gets the next free room;
4. ``gang`` (a group whose ``k`` tasks start together or not at all, ``DecideInput.gang``; it waits in the regular
   pool): otherwise: its ``k`` tasks do not fit the free regular room at once; how many of them do is named. A gang
   with fewer than ``k`` tasks waiting (a pod group not all created yet) says so first, whatever else holds;
5. ``room``: otherwise: no node has room; the node closest to taking a task (smallest largest shortfall
   ``max_r (d_r − A_r)⁺/C_r``, as the starvation guard picks) is named with what it lacks.

A gang's quota is checked for its ``k`` tasks together.

And one the decision never sees: ``draining``: the group's queue is Draining (``spec.state``), so the dispatcher
offers it nothing (:func:`draining`; the operator leaves such groups out of the decision).

Groups of one (pool, queue, demand, gang size) share one answer, so a backlog of 10,000 equal pods costs one
message.
Pure and deterministic: arrays in, ``Hold`` records out; the reason names are the ``reason`` label of
``stowage_held_pods`` (contract).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from stowage.policy import alignment, fairness, room
from stowage.policy import gang as gang_rule
from stowage.resources import CPU, format_quantity

__all__ = ["DRAINING", "GANG", "QUOTA", "REASONS", "ROOM", "SAMPLE", "SHARE", "Context", "Hold", "PoolLeft",
           "draining", "explain"]

SHARE: Final = "share"
QUOTA: Final = "quota"
ROOM: Final = "room"
SAMPLE: Final = "sample"
GANG: Final = "gang"
DRAINING: Final = "draining"
REASONS: Final = (SHARE, QUOTA, ROOM, SAMPLE, GANG, DRAINING)
"""Every reason, in the order ``stowage_held_pods{reason}`` lists them."""

_LISTED_NODES = 3  # a sample message names this many nodes; the rest are counted
_MI = 2.0**20
_CHUNK = 1_000_000  # numbers per step of the closest-node search (8 MB)


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a group waits: ``reason`` (one of ``REASONS``) and a sentence with the numbers."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PoolLeft:
    """One pool as a decision left it."""

    available: NDArray[np.float64]
    """(N, R) free room after the decision's placements (bandwidth caps applied)."""
    queue_alloc: NDArray[np.float64]
    """(Q, R) each queue's allocation in the pool, the decision's placements included."""
    usage: NDArray[np.float64] | None = None
    """(Q,) each queue's decayed usage of the pool (``fairness.QueueUsage``); None: no memory (the shares)."""


@dataclass(frozen=True, slots=True)
class Context:
    """What ``explain`` reads besides the groups: N nodes, R resources, Q queues."""

    capacity: NDArray[np.float64]
    pool_total: NDArray[np.float64]
    queue_name: Sequence[str]
    queue_weight: NDArray[np.float64]
    queue_quota: NDArray[np.float64] | None
    queue_opportunistic: NDArray[np.bool_]
    node_key: Sequence[Hashable]
    resources: Sequence[str]
    sample_age_s: NDArray[np.float64] | None
    """(N,) seconds since each node's utilization sample (``inf``: none; NaN: the node does not harvest)."""
    stale_after_s: float
    usage_tolerance: float
    """``packing.queue_usage_tolerance`` (the caller's settings: no default restated here)."""
    share_floor: float
    """``packing.queue_share_floor``."""


def draining(queue: str) -> Hold:
    """Why a group of a Draining queue waits: its queue releases nothing new until it is Open again."""
    return Hold(DRAINING, f"queue {queue!r} is Draining (spec.state): it releases no new work and lets its running "
                          "work finish; this task starts once a cluster admin sets the queue's spec.state to Open")


def explain(waiting: NDArray[np.bool_], pool: NDArray[np.int64], demand: NDArray[np.float64],
            group_queue: NDArray[np.int64], left: Sequence[PoolLeft], ctx: Context, *,
            gang: NDArray[np.int64] | None = None, count: NDArray[np.int64] | None = None) -> dict[int, Hold]:
    """group → ``Hold`` for every ``waiting`` group (module docstring). ``pool``: (G,) 0 regular, 1 harvested;
    ``left[p]``: pool ``p`` after the decision; ``gang``: (G,) tasks that start together (0: not a gang);
    ``count``: (G,) tasks waiting (a gang with fewer waits for the rest; None: enough)."""
    rows = np.flatnonzero(waiting)
    if rows.size == 0:
        return {}
    k = np.zeros(pool.shape[0], dtype=np.int64) if gang is None else np.maximum(np.asarray(gang, np.int64), 0)
    have = k if count is None else np.minimum(np.asarray(count, np.int64), k)
    keys = np.column_stack([pool[rows], group_queue[rows], k[rows], have[rows], demand[rows]])
    unique, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    pools = [_Pool(p, left[p], waiting & (pool == p), group_queue, demand, ctx) for p in (0, 1)]
    answers = [Hold(GANG, f"all or nothing: only {int(have[g])} of its {int(k[g])} tasks are there to start; it "
                          f"starts once all {int(k[g])} are") if have[g] < k[g]
               else pools[int(pool[g])].hold(int(group_queue[g]), demand[g], int(k[g]))
               for g in rows[first].tolist()] if unique.shape[0] else []
    return {int(g): answers[int(k)] for g, k in zip(rows.tolist(), inverse.reshape(-1).tolist(), strict=True)}


class _Pool:
    """One pool's answers; what depends only on the demand (fits, sample, room) is worked out once per shape."""

    def __init__(self, p: int, state: PoolLeft, waiting: NDArray[np.bool_], group_queue: NDArray[np.int64],
                 demand: NDArray[np.float64], ctx: Context) -> None:
        self.p, self.state, self.ctx = p, state, ctx
        self.waits = np.zeros(len(ctx.queue_name), dtype=bool)
        self.waits[group_queue[waiting]] = True
        self._tiers: NDArray[np.int8] | None = None  # dominant shares, usage, tiers: worked out once at most
        self._dom = self._use = np.zeros(0)
        shapes = np.unique(demand[waiting], axis=0) if waiting.any() else np.zeros((0, demand.shape[1]))
        fits = (alignment.feasible(shapes, state.available).any(axis=1) if state.available.shape[0]
                else np.zeros(shapes.shape[0], dtype=bool))
        self._fits = {row.tobytes(): bool(f) for row, f in zip(shapes, fits.tolist(), strict=True)}
        self._shapes = shapes
        self._by_shape: dict[bytes, Hold | None] = {}  # the sample hold per shape (None: none)
        self._room: dict[bytes, Hold] = {}  # filled for every shape at the first ask (one array operation)
        self._share: dict[int, Hold | None] = {}

    def hold(self, q: int, need: NDArray[np.float64], gang: int = 0) -> Hold:
        ctx, state = self.ctx, self.state
        name = ctx.queue_name[q]
        if ctx.queue_quota is not None:
            used, limit = state.queue_alloc[q], ctx.queue_quota[q]
            need = need * gang if gang > 0 else need  # a gang's tasks come together
            over = alignment.over_quota(used + need, limit)
            if over.any():
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(over, (used + need) / np.where(limit > 0, limit, np.nan), -np.inf)
                r = int(np.argmax(np.nan_to_num(ratio, nan=np.inf)))
                res = _resource(ctx, r)
                what = f"its gang of {gang} tasks needs" if gang > 0 else "a task needs"
                return Hold(QUOTA, f"queue {name!r} is at its {res} quota: {_show(used[r], res)}/"
                                   f"{_show(limit[r], res)} in use, {what} {_show(need[r], res)}")
            need = need / gang if gang > 0 else need
        if self.p == 1 and not ctx.queue_opportunistic[q]:
            return Hold(ROOM, f"queue {name!r} takes no opportunistic pods (spec.opportunistic: Deny)")
        key = need.tobytes()
        fits = self._fits.get(key, False)
        if key not in self._by_shape:
            self._by_shape[key] = self._sample(need) if self.p == 1 and not fits else None
        if self._by_shape[key] is not None:
            return self._by_shape[key]  # type: ignore[return-value]
        if q not in self._share:
            self._share[q] = self._over_share(q)
        share = self._share[q]
        if share is not None:
            return share
        if gang > 0:
            fit = gang_rule.fit_count(need, state.available, gang)
            return Hold(GANG, f"all or nothing: its {gang} tasks start together on regular room or not at all, and "
                              f"{fit} of them fit in the free regular room now")
        if fits:  # fits, yet not placed: the room is held for a starved group (the starvation guard)
            return Hold(ROOM, "the room that fits it is held for a task group that waited longer (starvation guard)")
        if not self._room:
            kind = "harvestable" if self.p else "free"
            self._room = {row.tobytes(): Hold(ROOM, m)
                          for row, m in zip(self._shapes, _no_room(self._shapes, state.available, ctx, kind),
                                            strict=True)}
        return self._room[key]

    def _sample(self, need: NDArray[np.float64]) -> Hold | None:
        """A ``sample`` hold when some node without a fresh sample could take the task by its capacity."""
        ctx = self.ctx
        if ctx.sample_age_s is None:
            return None
        age = ctx.sample_age_s
        stale = ~np.isnan(age) & ~room.fresh(np.ones(age.shape[0], dtype=bool), age, ctx.stale_after_s)  # NaN: off
        if not stale.any():
            return None
        stale[stale] = alignment.feasible(need, ctx.capacity[stale])
        if not stale.any():
            return None
        nodes = np.flatnonzero(stale).tolist()
        listed = ", ".join(f"{ctx.node_key[n]} ({'none' if not np.isfinite(age[n]) else f'{age[n]:.0f} s old'})"
                           for n in nodes[:_LISTED_NODES])
        more = f" and {len(nodes) - _LISTED_NODES} more" if len(nodes) > _LISTED_NODES else ""
        return Hold(SAMPLE, f"no fresh utilization sample from the {len(nodes)} node(s) that could take it: "
                            f"{listed}{more}; harvesting needs one newer than {ctx.stale_after_s:g} s")

    def _over_share(self, q: int) -> Hold | None:
        """A ``share`` hold when another waiting queue comes first by ``fairness.queue_tiers``: one below its
        floor, or, when queue ``q`` is ahead of its weight on decayed usage, one that is not."""
        ctx, waits = self.ctx, self.waits
        if int(waits.sum()) < 2:
            return None
        total, w = np.asarray(ctx.pool_total, dtype=np.float64), ctx.queue_weight
        if self._tiers is None:
            self._dom = fairness.dominant_shares(self.state.queue_alloc, total, np.ones(len(ctx.queue_name)))
            self._use = self._dom if self.state.usage is None else self.state.usage
            self._tiers = fairness.queue_tiers(self._dom, self._use, w, waits, ctx.usage_tolerance, ctx.share_floor)
        dom, tiers = self._dom, self._tiers
        first = np.flatnonzero(waits & (tiers >= 0) & (tiers < tiers[q]))
        if first.size == 0:
            return None
        if tiers[q] == fairness.AHEAD:
            k = fairness.projected(dom, self._use)
            o = int(first[np.argmin(k[first] / w[first])])
            with np.errstate(divide="ignore", invalid="ignore"):
                per = np.where(total > 0, self.state.queue_alloc[q] / total, 0.0)
            res = _resource(ctx, int(np.argmax(per)))
            return Hold(SHARE, f"queue {ctx.queue_name[q]!r} is ahead of its weight: usage {k[q]:.2f} of the pool "
                               f"({res}, now and decayed past) at weight {w[q]:g}, queue {ctx.queue_name[o]!r} "
                               f"{k[o]:.2f} at weight {w[o]:g} (tolerance {ctx.usage_tolerance:.0%}); queues not "
                               "ahead get the next free room")
        o = int(first[0])
        fair = fairness.fair_levels(dom, w, waits)
        return Hold(SHARE, f"queue {ctx.queue_name[o]!r} holds {dom[o]:.2f} of the pool, below "
                           f"{ctx.share_floor:.0%} of its fair share {fair[o]:.2f}: it gets the next free room")


def _no_room(needs: NDArray[np.float64], avail: NDArray[np.float64], ctx: Context, kind: str) -> list[str]:
    """Per demand row, what the closest node lacks: ``cpu 1 needed, 500m free on node-a (the closest of 3 nodes)``."""
    if avail.shape[0] == 0:
        return ["no node has room: there are no nodes"] * needs.shape[0]
    free = np.maximum(np.nan_to_num(avail, nan=0.0), 0.0)
    out = []
    step = max(1, _CHUNK // max(avail.shape[0], 1))  # (shapes, N) at most _CHUNK numbers at a time
    for lo in range(0, needs.shape[0], step):
        chunk = needs[lo:lo + step]
        closest = np.argmin(alignment.shortfall(chunk, free, ctx.capacity), axis=1)
        for need, n in zip(chunk, closest.tolist(), strict=True):
            row = np.maximum(need - free[n], 0.0)
            lacking = np.flatnonzero(row > 0).tolist() or [int(np.argmax(row))]
            parts = "; ".join(f"{_resource(ctx, r)} {_show(need[r], _resource(ctx, r))} needed, "
                              f"{_show(free[n, r], _resource(ctx, r))} {kind}" for r in lacking)
            out.append(f"no node has room for a task: {parts} on {ctx.node_key[n]} (the closest of "
                       f"{avail.shape[0]} nodes)")
    return out


def _resource(ctx: Context, r: int) -> str:
    return ctx.resources[r] if r < len(ctx.resources) else f"resource {r}"


def _show(value: float, resource: str) -> str:
    """A quantity as Kubernetes writes it, rounded to what a person reads: millicores, MiB for large byte counts."""
    if not np.isfinite(value):
        return "unlimited" if value > 0 else "0"
    if resource == CPU:
        return format_quantity(round(value * 1000) / 1000, CPU)
    if abs(value) >= _MI:
        return format_quantity(round(value / _MI) * _MI, resource)
    return format_quantity(float(round(value)), resource) if value == round(value) else f"{value:g}"
