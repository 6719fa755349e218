"""How much disk and network one task of a group will use: learned, like durations (Tetris §4.1).

Stowage packs disk and network, which Kubernetes does not know, by what each task declares
(``stowage.io/disk-bandwidth``, ``stowage.io/network-bandwidth``). Declarations are sized for the peak; most
tasks use a fraction of it, so packing by them runs fewer bandwidth-heavy tasks at once than the disks and
links could take. :func:`estimate` gives every task group a per-task bandwidth to pack by and says where it
came from (:class:`Source`). Per group and bandwidth column, the first that applies::

    OBSERVED  the highest sustained use seen among the group's tasks, finished or running, × bandwidth_margin
              (a phase's tasks are statistically alike, Tetris §4.1)
    HISTORY   the same over earlier runs of the recurring job (estimates.RecurringHistory.use: a fraction of the
              declared, :func:`history_use`), × bandwidth_margin
    DECLARED  what the task declares

and never above what it declares: an estimate only lowers what is reserved, so a group that declares no
bandwidth reserves none, as before. Tasks are over- rather than under-estimated (the margin; the declared
value until a task of the group has been seen): too little bandwidth slows the tasks that share it, it does
not fail them (disk and network are shared in proportion), which is why a burst need not be reserved.

*Sustained use* is a task's use averaged over ``estimates.bandwidth_window_s`` (30 s), the highest such
average over its life so far: a burst shorter than the window is averaged in, not taken as the task's
demand. A task that has not run one window, or whose pod has no samples, is not seen (it adds no evidence).

Columns other than the bandwidth ones are returned as declared. NaN, ±inf and negative values are no
evidence wherever they appear; the result is always finite, ``0 ≤ estimate ≤ declared``.

The operator's dispatcher, the extender and the simulator all reserve bandwidth by
:func:`reserved` (running regular pods) and pack each group by :func:`estimate` (pending tasks), so the
declared-bandwidth room of ``policy.room.bandwidth_room`` is the same rule everywhere. Pure: numpy only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.config import EstimateSettings
from stowage.errors import InvalidInput

__all__ = ["SOURCE_NAMES", "Estimates", "Source", "UseSeen", "estimate", "group_peaks", "history_use", "reserved",
           "sustained_peak", "use_fractions"]


class Source(enum.IntEnum):
    """Where a group's bandwidth estimate came from, in the order :func:`estimate` tries them."""

    OBSERVED = 0  # the group's own tasks, finished or running
    HISTORY = 1  # earlier runs of the same recurring job
    DECLARED = 2  # nothing seen: what the task declares


#: ``Source`` values as label values, indexed by the value.
SOURCE_NAMES: tuple[str, ...] = ("observed", "history", "declared")


@dataclass(frozen=True, slots=True)
class UseSeen:
    """What is known of each group's bandwidth use: G groups, R resources (only ``bandwidth`` columns read)."""

    declared: NDArray[np.float64]
    """(G, R) one task's declared demand."""
    peak: NDArray[np.float64]
    """(G, R) the highest sustained use seen among the group's finished and running tasks; NaN: none seen."""
    history: NDArray[np.float64]
    """(G, R) the same over earlier runs of the group's recurring job; NaN: none."""


@dataclass(frozen=True, slots=True)
class Estimates:
    """One per-task demand per group, bandwidth columns estimated, and where each column came from."""

    demand: NDArray[np.float64]
    """(G, R) finite, ``0 ≤ demand ≤ declared`` on the bandwidth columns; declared elsewhere."""
    source: NDArray[np.int8]
    """(G, R) :class:`Source` values (``DECLARED`` on the other columns)."""


def _matrix(values: ArrayLike, name: str, shape: tuple[int, ...] | None) -> NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2 or (shape is not None and arr.shape != shape):
        want = f"{shape}" if shape is not None else "(G, R)"
        raise InvalidInput(f"evidence.{name}.shape", arr.shape, f"must be {want}, one row per task group")
    return arr


def _seen(values: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Finite and not negative: a task that used nothing is evidence too (it used 0)."""
    return np.isfinite(values) & (values >= 0.0)


def estimate(ev: UseSeen, bandwidth: ArrayLike, settings: EstimateSettings) -> Estimates:
    """Per group, one task's demand with its bandwidth columns estimated (module docstring).

    Args:
        ev: (G, R) arrays; NaN, ±inf and negative values are no evidence.
        bandwidth: (R,) bool, the disk and network columns.
        settings: ``bandwidth_margin``.

    Raises:
        InvalidInput: the arrays do not all have the same (G, R) shape, or ``bandwidth`` is not (R,).
    """
    declared = _matrix(ev.declared, "declared", None)
    peak, history = _matrix(ev.peak, "peak", declared.shape), _matrix(ev.history, "history", declared.shape)
    bw = np.asarray(bandwidth, dtype=bool).reshape(-1)
    if bw.shape != (declared.shape[1],):
        raise InvalidInput("bandwidth.shape", bw.shape, f"must be ({declared.shape[1]},), one per resource")
    # A declaration that is not a finite amount ≥ 0 reserves nothing, as the room's arithmetic treats it.
    ceiling = np.where(np.isfinite(declared) & (declared > 0.0), declared, 0.0)
    observed, recalled = _seen(peak), ~_seen(peak) & _seen(history)
    with np.errstate(over="ignore", invalid="ignore"):  # a huge peak × margin is capped by the ceiling below
        learned = np.where(observed, peak, np.where(recalled, history, ceiling)) * np.where(
            observed | recalled, settings.bandwidth_margin, 1.0)
    learned = np.minimum(np.nan_to_num(learned, nan=0.0, posinf=np.inf), ceiling)
    source = np.full(declared.shape, Source.DECLARED, dtype=np.int8)
    source[recalled & bw] = Source.HISTORY
    source[observed & bw] = Source.OBSERVED
    return Estimates(demand=np.where(bw[None, :], learned, declared), source=source)


def sustained_peak(times_s: ArrayLike, values: ArrayLike, window_s: float) -> NDArray[np.float64]:
    """(R,) one pod's sustained use: the highest mean of its samples over any ``window_s`` ending at a sample.

    ``times_s`` (K,) increasing sample times, ``values`` (K, R) the rates sampled then (the node monitor's
    ``stowage_pod_usage``); a NaN or negative sample is left out of its window. Until the samples span one
    window (first to last < ``window_s``) the pod is not seen: NaN. A pod without samples: NaN. The same
    quantity as ``max_over_time(avg_over_time(stowage_pod_usage[W])[…])`` in PromQL.
    """
    t = np.asarray(times_s, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64)
    v = v.reshape(t.shape[0], -1) if v.size or t.size else np.zeros((0, v.shape[-1] if v.ndim == 2 else 0))
    out = np.full(v.shape[1], np.nan)
    if t.size == 0 or not t[-1] - t[0] >= window_s:
        return out
    ok = np.isfinite(v) & (v >= 0.0)
    csum = np.vstack([np.zeros(v.shape[1]), np.cumsum(np.where(ok, v, 0.0), axis=0)])
    ccount = np.vstack([np.zeros(v.shape[1]), np.cumsum(ok, axis=0)])
    ends = np.flatnonzero(t - t[0] >= window_s)  # windows (t_end − W, t_end] that lie inside the samples
    starts = np.searchsorted(t, t[ends] - window_s, side="right")
    total, count = csum[ends + 1] - csum[starts], ccount[ends + 1] - ccount[starts]
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(count > 0, total / count, np.nan)
    seen = np.isfinite(means).any(axis=0)
    out[seen] = np.nanmax(means[:, seen], axis=0)
    return out


def group_peaks(pod_group: ArrayLike, pod_peak: ArrayLike, n_groups: int) -> NDArray[np.float64]:
    """(G, R) each group's :attr:`UseSeen.peak`: the highest sustained use among its pods (finished or running).

    ``pod_group`` (P,) int, each pod's group (out of range: left out); ``pod_peak`` (P, R) each pod's
    :func:`sustained_peak` (NaN: not seen, left out). A group none of whose pods was seen: NaN.
    """
    groups = np.asarray(pod_group, dtype=np.int64).reshape(-1)
    peak = np.asarray(pod_peak, dtype=np.float64).reshape(groups.shape[0], -1)
    out = np.full((n_groups, peak.shape[1]), -np.inf)
    keep = (groups >= 0) & (groups < n_groups)
    np.maximum.at(out, groups[keep], np.where(_seen(peak[keep]), peak[keep], -np.inf))
    return np.where(np.isfinite(out), out, np.nan)


def reserved(pod_group: ArrayLike, pod_node: ArrayLike, estimates: ArrayLike, n_nodes: int) -> NDArray[np.float64]:
    """(N, R) Σ per node of the running regular pods' estimates: what they reserve of the declared bandwidth.

    Each pod reserves its group's estimate (``estimate(...).demand[group]``), not its declaration; the caller
    reads the bandwidth columns (``policy.room.bandwidth_room(capacity, reserved)``) and keeps the others.

    Args:
        pod_group: (P,) int, each pod's row of ``estimates`` (out of range: the pod is left out).
        pod_node: (P,) int, its node (out of range: left out).
        estimates: (G, R).
        n_nodes: N.
    """
    est = np.asarray(estimates, dtype=np.float64)
    groups = np.asarray(pod_group, dtype=np.int64).reshape(-1)
    nodes = np.asarray(pod_node, dtype=np.int64).reshape(-1)
    if groups.shape != nodes.shape:
        raise InvalidInput("pod_node.shape", nodes.shape, f"must be {groups.shape} like pod_group")
    out = np.zeros((n_nodes, est.shape[1] if est.ndim == 2 else 0))
    keep = (groups >= 0) & (groups < est.shape[0]) & (nodes >= 0) & (nodes < n_nodes)
    np.add.at(out, nodes[keep], est[groups[keep]])
    return out


def use_fractions(used: ArrayLike, declared: ArrayLike, resources: Sequence[str],
                  bandwidth: ArrayLike) -> dict[str, float]:
    """What ``estimates.RecurringHistory.observe_use`` learns of one finished task: resource → its sustained use
    (``used`` (R,), :func:`sustained_peak`) ÷ what it declares (``declared`` (R,)), on the ``bandwidth`` columns
    it declares (finite, > 0) and was seen on (finite, ≥ 0); {} when none."""
    u = np.asarray(used, dtype=np.float64).reshape(-1)
    d = np.asarray(declared, dtype=np.float64).reshape(-1)
    bw = np.asarray(bandwidth, dtype=bool).reshape(-1)
    keep = bw & _seen(u) & np.isfinite(d) & (d > 0.0)
    return {resources[r]: float(u[r] / d[r]) for r in np.flatnonzero(keep).tolist()}


def history_use(declared: ArrayLike, fractions: Sequence[Mapping[str, float]],
                resources: Sequence[str]) -> NDArray[np.float64]:
    """(G, R) each group's :attr:`UseSeen.history`: ``fractions[g]`` (``estimates.RecurringHistory.use``: resource
    → its use over earlier runs ÷ the declared) × what one task of the group declares now; NaN where none is kept."""
    d = np.asarray(declared, dtype=np.float64)
    out = np.full(d.shape, np.nan)
    col = {r: j for j, r in enumerate(resources)}
    for g, kept in enumerate(fractions):
        for r, f in kept.items():
            if r in col:
                out[g, col[r]] = f * d[g, col[r]]
    return out
