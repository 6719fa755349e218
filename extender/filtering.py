"""Filter: which of the offered nodes may take the pod, and why each other one may not.

Checks, in order; the first that fails names the node's message (reason keys in
``messages.REASONS``):

0. ``missing-resource`` — opportunistic pods only: the pod needs a resource no node in
   the model offers (unresolvable on every node).
1. ``unknown-node`` — opportunistic pods only: a node the model does not know has
   no harvestable capacity we could vouch for. Regular pods pass (fail safe).
2. ``contention`` — every Stowage pod: the node monitor reports sustained contention
   (fresh samples only; without samples we know nothing and block nothing).
3. ``bandwidth`` — every Stowage pod: declared disk/network bandwidth would exceed the
   node's declared bandwidth less what its pods declared. Nodes declaring none are
   not checked.
4. ``harvest-disabled`` — opportunistic: node labelled ``stowage.io/harvest: "false"``
   (unresolvable: preemption cannot change a label).
5. ``utilization-unavailable`` — opportunistic: no fresh samples, so ``A_opp`` is 0.
6. ``harvest-capacity`` — opportunistic: ``d_r > A_opp_r`` on some resource
   (``policy.alignment.feasible``).

Everything is vectorised over the nodes; strings are built only for rejected nodes.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from stowage.extender.messages import human, human_column, pointwise
from stowage.extender.pods import PodRequest
from stowage.extender.snapshot import Snapshot
from stowage.extender.tails import ASSUMED, AVAILABLE, BLOCKED, CAPACITY, USED, HarvestTails

from stowage.policy import alignment
from stowage.resources import DISK, NETWORK

__all__ = ["FilterOutcome", "filter_nodes", "pick"]


@dataclass(slots=True)
class FilterOutcome:
    """Indices of passing nodes (request order) and a message per rejected node."""

    passed: np.ndarray
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)


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
_KEY_BITS = 40  # over-patterns up to 40 resources fit a message key beside the heads id
_UNKNOWN_MESSAGE = "opportunistic: node not in Stowage's cache yet (informers syncing or node just added)"
_DISABLED_MESSAGE = "opportunistic: harvesting disabled on this node (label stowage.io/harvest=false)"


def _bandwidth_columns(snap: Snapshot) -> list[int]:
    return [snap.resources.index(r) for r in (DISK, NETWORK) if r in snap.resources]


def _harvest_messages(snap: Snapshot, rows: np.ndarray, demand: np.ndarray, tails: HarvestTails | None) -> list[str]:
    """One message per row in ``rows``, formatted a column at a time (this is the filter's hot path).

    With ``tails``, each (node, resource) tail is reused while the node's numbers are
    unchanged, and a node's whole message while its tails and the pod's heads are; the
    text is the same either way (tests compare the paths).
    """
    a_opp = snap.harvestable[rows]
    over = demand[None, :] > a_opp * (1.0 + alignment.FEASIBILITY_RTOL)
    over_any = np.flatnonzero(over.any(axis=0)).tolist()
    if len(over_any) > _KEY_BITS:  # more resources than bits of a message key: never in practice
        tails = None
    heads = [f"{snap.resources[r]} {human(float(demand[r]), snap.resources[r])} > harvestable " for r in over_any]
    all_hit = np.ones(rows.size, dtype=bool)
    cacheable = tails is not None
    columns: list[tuple[np.ndarray, str, np.ndarray]] = []  # per over resource: rows over, head, tails
    for r, head in zip(over_any, heads, strict=True):
        res = snap.resources[r]
        which = np.flatnonzero(over[:, r])
        sub = rows[which]
        t_alloc = f"{snap.t_alloc[r]:.2f} × "
        values = np.stack(
            (a_opp[which, r], snap.capacity[sub, r], snap.usage[sub, r], snap.blocked[sub, r], snap.assumed[sub, r]), 1
        )
        if tails is not None and _pointwise(values, res):
            hit, tail = tails.lookup(res, snap.rows[sub], values, t_alloc)
            all_hit[which[~hit]] = False
        else:
            tail = np.array(_tails_of_column(values, res, t_alloc), dtype=object)
            cacheable = False
        columns.append((which, head, tail))
    model_rows = snap.rows[rows]
    messages = np.empty(rows.size, dtype=object)
    bits = 1 << np.arange(len(over_any), dtype=np.int64)
    pattern = over[:, over_any] @ bits if len(over_any) <= _KEY_BITS else None
    build = np.ones(rows.size, dtype=bool)
    key = None
    if tails is not None and pattern is not None:
        if cacheable:
            key = pattern + (tails.heads_id(tuple(heads)) << len(over_any))
            reusable, stored = tails.messages(model_rows, key, all_hit)
            messages[reusable] = stored[reusable]
            build = ~reusable
        else:
            tails.forget_messages(model_rows)  # some tails may have moved on without their message
    if not build.any():
        return messages.tolist()
    # where each row sits in each resource's column (−1: not over on it)
    slots = []
    for which, _, _ in columns:
        slot = np.full(rows.size, -1, dtype=np.int64)
        slot[which] = np.arange(which.size)
        slots.append(slot)
    if pattern is None:
        for k in np.flatnonzero(build).tolist():
            parts = [head + tail[slot[k]] for (_, head, tail), slot in zip(columns, slots, strict=True) if slot[k] >= 0]
            messages[k] = "opportunistic: " + "; ".join(parts)
        return messages.tolist()
    # Rows grouped by which resources are over; each group's messages are joined without a Python loop per row.
    for code in np.unique(pattern[build]).tolist():
        group = np.flatnonzero((pattern == code) & build)
        texts = [
            list(map(head.__add__, tail[slot[group]].tolist()))
            for bit, ((_, head, tail), slot) in enumerate(zip(columns, slots, strict=True))
            if code >> bit & 1
        ]
        if not texts:
            messages[group] = "opportunistic: "
            continue
        joined = texts[0] if len(texts) == 1 else list(map("; ".join, zip(*texts, strict=True)))
        messages[group] = list(map("opportunistic: ".__add__, joined))
    if key is not None:
        built = np.flatnonzero(build)
        tails.store_messages(model_rows[built], key[built], messages[built].tolist())
    return messages.tolist()


def pick(items: Sequence[str], positions: np.ndarray) -> list[str]:
    """``[items[i] for i in positions]`` without a Python loop per item."""
    if positions.size == 0:
        return []
    if positions.size == 1:
        return [items[int(positions[0])]]
    return list(operator.itemgetter(*positions.tolist())(items))


def _pointwise(values: np.ndarray, res: str) -> bool:
    """Whether every number of the (k,5) column block formats on its own (see ``messages.pointwise``)."""
    return all(pointwise(values[:, c], res, exact=c == CAPACITY) for c in range(values.shape[1]))


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
        return f"opportunistic: no harvesting while utilization is unavailable ({snap.samples_error})"
    if not snap.present[i]:
        return (
            "opportunistic: Prometheus has no stowage_node_usage samples for this node "
            "(is the stowage node-monitor running on it?); it harvests nothing"
        )
    return (
        f"opportunistic: utilization samples are {snap.age_s[i]:.0f}s old (limit {limit:.0f}s, "
        "harvest.utilization_stale_after_s); the node harvests nothing until the node monitor reports again"
    )


def _contention_message(snap: Snapshot, i: int) -> str:
    res = [snap.resources[r] for r in np.flatnonzero(snap.contended[i])]
    return (
        f"node in sustained contention on {', '.join(res)}; Stowage keeps new pods off it until the "
        "node monitor reports it clear"
    )


def _bandwidth_message(snap: Snapshot, i: int, demand: np.ndarray, cols: list[int]) -> str:
    parts = []
    for r in cols:
        res = snap.resources[r]
        cap, used = float(snap.declared_capacity[i, r]), float(snap.bandwidth_allocated[i, r])
        if cap > 0 and demand[r] > max(cap - used, 0.0) * (1.0 + alignment.FEASIBILITY_RTOL):
            parts.append(
                f"{res} bandwidth {human(float(demand[r]), res)} > free {human(max(cap - used, 0.0), res)}"
                f" (node declares {human(cap, res, exact=True)}, pods declared {human(used, res)})"
            )
    return "; ".join(parts)


def filter_nodes(pod: PodRequest, snap: Snapshot, tails: HarvestTails | None = None) -> FilterOutcome:
    """Decide every node of the request; see the module docstring for the checks.

    ``tails``: the extender's message cache (None formats every message afresh; same text).
    """
    n = len(snap.names)
    if not pod.ours:
        return FilterOutcome(passed=np.arange(n))
    demand = pod.demand_array(snap.resources)
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
    if cols and demand[cols].any():
        cap = snap.declared_capacity[:, cols]
        free = np.maximum(cap - snap.bandwidth_allocated[:, cols], 0.0)
        over = (cap > 0) & (demand[cols][None, :] > free * (1.0 + alignment.FEASIBILITY_RTOL))
        mark(over.any(axis=1), _BANDWIDTH)
    if pod.opportunistic:
        mark(~snap.harvest_enabled, _DISABLED)
        mark(~snap.fresh, _NO_UTILIZATION)
        check = demand.copy()
        check[cols] = 0.0  # bandwidth was checked against declarations above
        mark(~alignment.feasible(check, snap.harvestable), _CAPACITY)

    out = FilterOutcome(passed=np.flatnonzero(reason == 0))
    if out.passed.size == n:
        return out
    names = snap.names
    counts = np.bincount(reason, minlength=len(_KEYS) + 1)
    out.reasons = {_KEYS[code]: int(counts[code]) for code in _KEYS if counts[code]}
    capacity_rows = np.flatnonzero(reason == _CAPACITY)
    if capacity_rows.size:
        out.failed.update(
            zip(pick(names, capacity_rows), _harvest_messages(snap, capacity_rows, demand, tails), strict=True)
        )
    for i in np.flatnonzero((reason != 0) & (reason != _CAPACITY)).tolist():
        code, name = reason[i], names[i]
        if code == _MISSING:
            out.unresolvable[name] = (
                f"opportunistic: no node in Stowage's cache offers {', '.join(missing)}; nothing of it to harvest"
            )
        elif code == _UNKNOWN:
            out.failed[name] = _UNKNOWN_MESSAGE
        elif code == _CONTENTION:
            out.failed[name] = _contention_message(snap, i)
        elif code == _BANDWIDTH:
            out.failed[name] = _bandwidth_message(snap, i, demand, cols)
        elif code == _DISABLED:
            out.unresolvable[name] = _DISABLED_MESSAGE
        else:
            out.failed[name] = _utilization_message(snap, i)
    return out
