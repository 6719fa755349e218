"""Why a task waits: one reason per task group a decision left waiting, with the numbers behind it.

``decide.Decider.decide`` asks ``explain`` (with ``DecideInput.explain``) after its passes, on what they left: each
pool's free room and each queue's allocation. A group waits in the pool it may use (regular, or harvested for
``stowage.io/opportunistic: "true"``), and the first of these that holds names its reason:

1. ``quota``: its next task would take its queue above ``spec.quota`` on some resource (the one most over is
   named, used/limit);
2. ``sample`` (harvested pool only): it fits no node's harvestable room, but some node without a fresh
   utilization sample (older than ``harvest.utilization_stale_after_s``, or none) could take it by capacity;
3. ``share``: its queue holds more than its fair share ``w_q / Σ w`` (of the queues with work in the pool) on
   its dominant resource, while another queue with waiting work is below its own: that one gets the next free
   room (weighted DRF, ``fairness``);
4. ``room``: otherwise: no node has room; the node closest to taking a task (smallest largest shortfall
   ``max_r (d_r − A_r)⁺/C_r``, as the starvation guard picks) is named with what it lacks.

Groups of one (pool, queue, demand) share one answer, so a backlog of 10,000 equal pods costs one message.
Pure and deterministic: arrays in, ``Hold`` records out; the reason names are the ``reason`` label of
``stowage_held_pods`` (contract).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from stowage.policy import alignment, fairness
from stowage.resources import CPU, format_quantity

__all__ = ["QUOTA", "REASONS", "ROOM", "SAMPLE", "SHARE", "Context", "Hold", "PoolLeft", "explain"]

SHARE: Final = "share"
QUOTA: Final = "quota"
ROOM: Final = "room"
SAMPLE: Final = "sample"
REASONS: Final = (SHARE, QUOTA, ROOM, SAMPLE)
"""Every reason, in the order ``stowage_held_pods{reason}`` lists them."""

_LISTED_NODES = 3  # a sample message names this many nodes; the rest are counted
_MI = 2.0**20


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


def explain(waiting: NDArray[np.bool_], pool: NDArray[np.int64], demand: NDArray[np.float64],
            group_queue: NDArray[np.int64], left: Sequence[PoolLeft], ctx: Context) -> dict[int, Hold]:
    """group → ``Hold`` for every ``waiting`` group (module docstring). ``pool``: (G,) 0 regular, 1 harvested;
    ``left[p]``: pool ``p`` after the decision."""
    rows = np.flatnonzero(waiting)
    if rows.size == 0:
        return {}
    keys = np.column_stack([pool[rows], group_queue[rows], demand[rows]])
    unique, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    active = [_active(p, waiting, pool, group_queue, left, len(ctx.queue_name)) for p in (0, 1)]
    answers: list[Hold] = []
    for k in range(unique.shape[0]):
        g = int(rows[first[k]])
        p, q = int(pool[g]), int(group_queue[g])
        answers.append(_one(p, q, demand[g], left[p], active[p], ctx))
    return {int(g): answers[int(k)] for g, k in zip(rows.tolist(), inverse.reshape(-1).tolist(), strict=True)}


def _active(p: int, waiting: NDArray[np.bool_], pool: NDArray[np.int64], group_queue: NDArray[np.int64],
            left: Sequence[PoolLeft], n_queues: int) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """(queues with work in pool ``p``: holding some or waiting, queues waiting in it)."""
    waits = np.zeros(n_queues, dtype=bool)
    waits[group_queue[waiting & (pool == p)]] = True
    return (left[p].queue_alloc > 0).any(axis=1) | waits, waits


def _one(p: int, q: int, need: NDArray[np.float64], state: PoolLeft, active: tuple[NDArray[np.bool_],
         NDArray[np.bool_]], ctx: Context) -> Hold:
    name = ctx.queue_name[q]
    used = state.queue_alloc[q]
    if ctx.queue_quota is not None:
        limit = ctx.queue_quota[q]
        over = used + need > limit * (1 + 1e-9) + 1e-12
        if over.any():
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(over, (used + need) / np.where(limit > 0, limit, np.nan), -np.inf)
            r = int(np.argmax(np.nan_to_num(ratio, nan=np.inf)))
            res = _resource(ctx, r)
            return Hold(QUOTA, f"queue {name!r} is at its {res} quota: {_show(used[r], res)}/"
                               f"{_show(limit[r], res)} in use, a task needs {_show(need[r], res)}")
    if p == 1 and not ctx.queue_opportunistic[q]:
        return Hold(ROOM, f"queue {name!r} takes no opportunistic pods (spec.opportunistic: Deny)")
    fits = alignment.feasible(need, state.available) if state.available.shape[0] else np.zeros(0, dtype=bool)
    if p == 1 and not fits.any() and ctx.sample_age_s is not None:
        age = ctx.sample_age_s
        stale = ~np.isnan(age) & ~(age <= ctx.stale_after_s) & alignment.feasible(need, ctx.capacity)
        if stale.any():
            nodes = np.flatnonzero(stale).tolist()
            listed = ", ".join(f"{ctx.node_key[n]} ({'none' if not np.isfinite(age[n]) else f'{age[n]:.0f} s old'})"
                               for n in nodes[:_LISTED_NODES])
            more = f" and {len(nodes) - _LISTED_NODES} more" if len(nodes) > _LISTED_NODES else ""
            return Hold(SAMPLE, f"no fresh utilization sample from the {len(nodes)} node(s) that could take it: "
                                f"{listed}{more}; harvesting needs one newer than {ctx.stale_after_s:g} s")
    share = _over_share(q, state, active, ctx)
    if share is not None:
        return share
    if fits.any():  # fits, yet not placed: the room is held for a starved group (the starvation guard)
        return Hold(ROOM, "the room that fits it is held for a task group that waited longer (starvation guard)")
    return Hold(ROOM, _no_room(need, state.available, ctx, "harvestable" if p == 1 else "free"))


def _over_share(q: int, state: PoolLeft, active: tuple[NDArray[np.bool_], NDArray[np.bool_]],
                ctx: Context) -> Hold | None:
    """A ``share`` hold when queue ``q`` is above its fair share and a waiting queue is below its own."""
    works, waits = active
    if int(works.sum()) < 2:
        return None
    total = np.asarray(ctx.pool_total, dtype=np.float64)
    plain = fairness.dominant_shares(state.queue_alloc, total, np.ones(len(ctx.queue_name)))
    fair = fairness.fair_share(ctx.queue_weight, works)
    below = waits & (plain < fair - 1e-9)
    below[q] = False
    if not (plain[q] > fair[q] + 1e-9 and below.any()):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(total > 0, state.queue_alloc[q] / total, 0.0)
    res = _resource(ctx, int(np.argmax(per)))
    return Hold(SHARE, f"queue {ctx.queue_name[q]!r} is above its fair share: dominant share {plain[q]:.2f} ({res}), "
                       f"fair share {fair[q]:.2f} of {int(works.sum())} queues with work; a queue below its share "
                       "gets the next free room")


def _no_room(need: NDArray[np.float64], avail: NDArray[np.float64], ctx: Context, kind: str) -> str:
    """What the closest node lacks: ``cpu 1 needed, 500m free on node-a (the closest of 3 nodes)``."""
    if avail.shape[0] == 0:
        return "no node has room: there are no nodes"
    cap = np.where(ctx.capacity > 0, ctx.capacity, 1.0)
    free = np.maximum(np.nan_to_num(avail, nan=0.0), 0.0)
    short = np.maximum(need[None, :] - free, 0.0) / cap
    n = int(np.argmin(short.max(axis=1)))
    lacking = np.flatnonzero(short[n] > 0).tolist() or [int(np.argmax(short[n]))]
    parts = "; ".join(f"{_resource(ctx, r)} {_show(need[r], _resource(ctx, r))} needed, "
                      f"{_show(free[n, r], _resource(ctx, r))} {kind}" for r in lacking)
    return f"no node has room for a task: {parts} on {ctx.node_key[n]} (the closest of {avail.shape[0]} nodes)"


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
