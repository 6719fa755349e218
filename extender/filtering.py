"""Filter: which of the offered nodes may take the pod, and why each other one may not.

Checks, in order; the first that fails names the node's message (reason keys in
``messages.REASONS``):

0. ``missing-resource`` — opportunistic pods only: the pod needs a resource no node in
   the model offers (unresolvable on every node).
1. ``unknown-node`` — opportunistic pods only: a node the model does not know has
   no harvestable capacity we could vouch for. Regular pods pass (fail safe).
2. ``contention`` — every Stowage pod: the node monitor reports sustained contention
   (fresh samples only; without samples we know nothing and block nothing).
3. ``bandwidth`` — regular Stowage pods: declared disk/network bandwidth would exceed the
   node's declared bandwidth × ``estimates.bandwidth_fill`` less what its regular pods reserve
   (``policy.room.bandwidth_room``), each pod
   by its task group's estimated use (``policy.use_estimates``), the pod filtered too.
   Nodes declaring none are not checked. Opportunistic pods reserve no declared bandwidth:
   their disk and network are checked against ``A_opp`` (measured) in check 6, like cpu and memory.
4. ``harvest-disabled`` — opportunistic: node labelled ``stowage.io/harvest: "false"``
   (unresolvable: preemption cannot change a label).
5. ``utilization-unavailable`` — opportunistic: no fresh samples, so ``A_opp`` is 0.
6. ``harvest-capacity`` — opportunistic: ``d_r > A_opp_r`` on some resource, disk and network
   included (``policy.alignment.feasible``); a node with no disk/network capacity at all is not
   checked on it.

Each rejected node gets its reason's fixed phrase (``messages.REASONS``): kube-scheduler groups
identical phrases in its ``FailedScheduling`` event ("0/500 nodes are available: 480 stowage:
not enough harvestable capacity, 20 ..."), so per-node numbers there would make one line per
node. The numbers go into one Event per pod instead, written by :func:`explain` for the few
nodes that came closest. Everything is vectorised over the nodes.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from stowage.extender.messages import REASONS, human, human_column
from stowage.extender.pods import PodRequest
from stowage.extender.snapshot import Snapshot

from stowage.policy import alignment, tolerances
from stowage.resources import DISK, NETWORK

__all__ = ["FilterOutcome", "explain", "filter_nodes", "pick", "rejected_for"]


@dataclass(slots=True)
class FilterOutcome:
    """Indices of passing nodes (request order), a reason phrase per rejected node, and the reason codes."""

    passed: np.ndarray
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    codes: np.ndarray | None = None  # (N,) reason code per node, 0 = passed


# Reason codes in check order (0 = passes); the first failing check names the node's message.
_MISSING, _UNKNOWN, _CONTENTION, _BANDWIDTH, _DISABLED, _NO_UTILIZATION, _CAPACITY = range(1, 8)
_KEYS = {
    _MISSING: "missing-resource",
    _UNKNOWN: "unknown-node",
    _CONTENTION: "contention",
    _BANDWIDTH: "bandwidth",
    _DISABLED: "harvest-disabled",
    _NO_UTILIZATION: "utilization-unavailable",
    _CAPACITY: "harvest-capacity",
}
#: Codes preemption cannot fix: a label, or a resource no node has.
_UNRESOLVABLE = frozenset({_MISSING, _DISABLED})
#: Columns of a harvest detail row: the numbers behind ``A_opp = T_alloc·C − U − B − S``.
AVAILABLE, CAPACITY, USED, BLOCKED, ASSUMED = range(5)


def _harvestable_checked(snap: Snapshot, cols: list[int]) -> np.ndarray:
    """``A_opp`` as an opportunistic pod must fit it: every resource is measured, disk and network included (no
    declared bandwidth is reserved for it); a node with no disk/network capacity (none declared, none reported)
    is not checked on it, as regular pods are not."""
    avail = snap.harvestable
    if cols:
        unknown = ~(snap.capacity[:, cols] > 0)
        if unknown.any():
            avail = avail.copy()
            avail[:, cols] = np.where(unknown, np.inf, avail[:, cols])
    return avail


def _bandwidth_columns(snap: Snapshot) -> list[int]:
    return [snap.resources.index(r) for r in (DISK, NETWORK) if r in snap.resources]


def pick(items: Sequence[str], positions: np.ndarray) -> list[str]:
    """``[items[i] for i in positions]`` without a Python loop per item."""
    if positions.size == 0:
        return []
    if positions.size == 1:
        return [items[int(positions[0])]]
    return list(operator.itemgetter(*positions.tolist())(items))


def rejected_for(outcome: FilterOutcome, names: Sequence[str], reason: str, limit: int) -> list[str]:
    """The first ``limit`` of ``names`` (request order) that ``outcome`` rejected for ``reason`` (a ``REASONS`` key)."""
    if outcome.codes is None or reason not in outcome.reasons:
        return []
    code = next(c for c, key in _KEYS.items() if key == reason)
    return pick(names, np.flatnonzero(outcome.codes == code)[:limit])


def _tails_of_column(values: np.ndarray, res: str, t_alloc: str) -> list[str]:
    """Tails formatted column by column with :func:`human_column` (its whole-column rules apply)."""
    avail = human_column(values[:, AVAILABLE], res)
    cap = human_column(values[:, CAPACITY], res, exact=True)
    used = human_column(values[:, USED], res)
    blocked = human_column(values[:, BLOCKED], res)
    assumed_values = values[:, ASSUMED]
    assumed = human_column(assumed_values, res) if assumed_values.any() else None
    out = []
    for j in range(values.shape[0]):
        text = f"{avail[j]} ({t_alloc}{cap[j]} − used {used[j]} − blocked {blocked[j]}"
        if assumed is not None and assumed[j] != "0":
            text += f" − assumed {assumed[j]}"
        out.append(text + ")")
    return out


def _utilization_message(snap: Snapshot, i: int) -> str:
    limit = snap.stale_after_s
    if snap.samples_error is not None:
        return f"no harvesting while utilization is unavailable ({snap.samples_error})"
    if not snap.present[i]:
        return (
            "Prometheus has no stowage_node_usage samples for this node "
            "(is the stowage node-monitor running on it?); it harvests nothing"
        )
    return (
        f"utilization samples are {snap.age_s[i]:.0f}s old (limit {limit:.0f}s, "
        "harvest.utilization_stale_after_s); the node harvests nothing until the node monitor reports again"
    )


def _contention_message(snap: Snapshot, i: int) -> str:
    res = [snap.resources[r] for r in np.flatnonzero(snap.contended[i])]
    return f"sustained contention on {', '.join(res)}"


def _bandwidth_message(snap: Snapshot, i: int, demand: np.ndarray, cols: list[int]) -> str:
    parts = []
    for r in cols:
        res = snap.resources[r]
        cap, used = float(snap.declared_capacity[i, r]), float(snap.bandwidth_allocated[i, r])
        free = float(snap.bandwidth_free[i, r])
        if cap > 0 and demand[r] > free * (1.0 + tolerances.FEASIBILITY_RTOL):
            parts.append(
                f"{res} bandwidth {human(float(demand[r]), res)} > free {human(free, res)}"
                f" (node declares {human(cap, res, exact=True)}, regular pods reserve {human(used, res)})"
            )
    return "; ".join(parts)


def filter_nodes(pod: PodRequest, snap: Snapshot) -> FilterOutcome:
    """Decide every node of the request; see the module docstring for the checks."""
    n = len(snap.names)
    if not pod.ours:
        return FilterOutcome(passed=np.arange(n))
    demand = snap.packed_demand(pod)
    reason = np.zeros(n, dtype=np.int8)

    def mark(mask: np.ndarray, code: int) -> None:
        reason[mask & (reason == 0)] = code

    missing = pod.missing_resources(snap.resources) if pod.opportunistic else []
    if missing:
        reason[:] = _MISSING  # no node offers it: nothing to harvest anywhere
    if pod.opportunistic:
        mark(~snap.known, _UNKNOWN)
    mark(snap.contended.any(axis=1), _CONTENTION)
    cols = _bandwidth_columns(snap)
    if not pod.opportunistic and cols and demand[cols].any():
        cap = snap.declared_capacity[:, cols]
        free = snap.bandwidth_free[:, cols]
        over = (cap > 0) & (demand[cols][None, :] > free * (1.0 + tolerances.FEASIBILITY_RTOL))
        mark(over.any(axis=1), _BANDWIDTH)
    if pod.opportunistic:
        mark(~snap.harvest_enabled, _DISABLED)
        mark(~snap.fresh, _NO_UTILIZATION)
        mark(~alignment.feasible(demand, _harvestable_checked(snap, cols)), _CAPACITY)

    out = FilterOutcome(passed=np.flatnonzero(reason == 0), codes=reason)
    if out.passed.size == n:
        return out
    names = snap.names
    counts = np.bincount(reason, minlength=len(_KEYS) + 1)
    out.reasons = {_KEYS[code]: int(counts[code]) for code in _KEYS if counts[code]}
    for code in _KEYS:
        if not counts[code]:
            continue
        target = out.unresolvable if code in _UNRESOLVABLE else out.failed
        target.update(dict.fromkeys(pick(names, np.flatnonzero(reason == code)), REASONS[_KEYS[code]]))
    return out


def _closeness(pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
    """How near each row came to fitting: min over needed resources of ``A_opp / d`` (higher is closer)."""
    demand = snap.packed_demand(pod)
    need = demand > 0
    if not need.any():
        return np.zeros(rows.size)
    ratio = _harvestable_checked(snap, _bandwidth_columns(snap))[rows][:, need] / demand[need][None, :]
    return np.nan_to_num(ratio.min(axis=1), nan=-np.inf)


def _harvest_detail(pod: PodRequest, snap: Snapshot, i: int) -> str:
    demand = snap.packed_demand(pod)
    parts = []
    checked = _harvestable_checked(snap, _bandwidth_columns(snap))[i]
    for r in np.flatnonzero(demand > checked * (1.0 + tolerances.FEASIBILITY_RTOL)).tolist():
        res = snap.resources[r]
        values = np.array([[snap.harvestable[i, r], snap.capacity[i, r], snap.usage[i, r], snap.blocked[i, r],
                            snap.assumed[i, r]]])
        (tail,) = _tails_of_column(values, res, f"{snap.t_alloc[r]:.2f} × ")
        parts.append(f"{res} {human(float(demand[r]), res)} > harvestable {tail}")
    return "; ".join(parts)


def explain(pod: PodRequest, snap: Snapshot, outcome: FilterOutcome, best: int = 3) -> str:
    """The numbers behind a filter that placed the pod nowhere, for one Event: what the pod needs, how many
    nodes failed for which reason, and what the ``best`` closest nodes had."""
    codes = outcome.codes if outcome.codes is not None else np.zeros(len(snap.names), dtype=np.int8)
    demand = snap.packed_demand(pod)
    needs = ", ".join(f"{r} {human(float(v), r)}" for r, v in zip(snap.resources, demand, strict=True) if v > 0)
    kind = "harvested capacity" if pod.opportunistic else "its requests"
    counts = ", ".join(f"{count} {key}" for key, count in outcome.reasons.items())
    text = f"needs {needs or 'nothing'} ({kind}); nodes rejected: {counts}."
    rows = np.flatnonzero(codes == _CAPACITY)
    if rows.size:
        closest = rows[np.argsort(-_closeness(pod, snap, rows), kind="stable")[:best]]
        text += " Closest: " + "; ".join(
            f"{snap.names[i]}: {_harvest_detail(pod, snap, int(i))}" for i in closest.tolist()
        ) + "."
    for code, describe in ((_NO_UTILIZATION, _utilization_message), (_CONTENTION, _contention_message)):
        where = np.flatnonzero(codes == code)
        if where.size:
            i = int(where[0])
            text += f" {_KEYS[code]}, e.g. {snap.names[i]}: {describe(snap, i)}."
    where = np.flatnonzero(codes == _BANDWIDTH)
    if where.size:
        i = int(where[0])
        text += f" bandwidth, e.g. {snap.names[i]}: {_bandwidth_message(snap, i, demand, _bandwidth_columns(snap))}."
    if (codes == _MISSING).any():
        text += f" No node offers {', '.join(pod.missing_resources(snap.resources))}."
    return text
