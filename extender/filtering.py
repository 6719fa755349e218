"""Filter: which of the offered nodes may take the pod, and why each other one may not.

Checks, in order; the first that fails names the node's message (reason keys in
``messages.REASONS``):

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

from dataclasses import dataclass, field

import numpy as np
from stowage.extender.messages import human
from stowage.extender.pods import PodRequest
from stowage.extender.snapshot import Snapshot

from stowage.policy import alignment
from stowage.resources import DISK, NETWORK

__all__ = ["FilterOutcome", "filter_nodes"]


@dataclass(slots=True)
class FilterOutcome:
    """Indices of passing nodes (request order) and a message per rejected node."""

    passed: np.ndarray
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)


def _bandwidth_columns(snap: Snapshot) -> list[int]:
    return [snap.resources.index(r) for r in (DISK, NETWORK) if r in snap.resources]


def _harvest_message(snap: Snapshot, i: int, demand: np.ndarray) -> str:
    a_opp = snap.harvestable[i]
    over = np.flatnonzero(demand > a_opp * (1.0 + alignment.FEASIBILITY_RTOL))
    parts = []
    for r in over:
        res = snap.resources[r]
        detail = (
            f"{snap.t_alloc[r]:.2f} × {human(snap.capacity[i, r], res, exact=True)}"
            f" − used {human(snap.usage[i, r], res)} − blocked {human(snap.samples.blocked[i, r], res)}"
        )
        if snap.assumed[i, r] > 0:
            detail += f" − assumed {human(snap.assumed[i, r], res)}"
        parts.append(f"{res} {human(demand[r], res)} > harvestable {human(a_opp[r], res)} ({detail})")
    return "opportunistic: " + "; ".join(parts)


def _utilization_message(snap: Snapshot, i: int) -> str:
    limit = snap.stale_after_s
    if snap.samples.error is not None:
        return f"opportunistic: no harvesting while utilization is unavailable ({snap.samples.error})"
    if not snap.samples.present[i]:
        return (
            "opportunistic: Prometheus has no stowage_node_usage samples for this node "
            "(is the stowage node-monitor running on it?); it harvests nothing"
        )
    return (
        f"opportunistic: utilization samples are {snap.samples.age_s[i]:.0f}s old (limit {limit:.0f}s, "
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
        cap, used = snap.view.capacity[i, r], snap.bandwidth_allocated[i, r]
        if cap > 0 and demand[r] > max(cap - used, 0.0) * (1.0 + alignment.FEASIBILITY_RTOL):
            parts.append(
                f"{res} bandwidth {human(demand[r], res)} > free {human(max(cap - used, 0.0), res)}"
                f" (node declares {human(cap, res, exact=True)}, pods declared {human(used, res)})"
            )
    return "; ".join(parts)


def filter_nodes(pod: PodRequest, snap: Snapshot) -> FilterOutcome:
    """Decide every node of the request; see the module docstring for the checks."""
    n = len(snap.names)
    if not pod.ours:
        return FilterOutcome(passed=np.arange(n))
    demand = pod.demand_array(snap.resources)
    reason = np.full(n, "", dtype=object)

    def mark(mask: np.ndarray, key: str) -> None:
        reason[mask & (reason == "")] = key

    if pod.opportunistic:
        mark(~snap.view.known, "unknown-node")
    mark(snap.contended.any(axis=1), "contention")
    cols = _bandwidth_columns(snap)
    if cols and demand[cols].any():
        cap = snap.view.capacity[:, cols]
        free = np.maximum(cap - snap.bandwidth_allocated[:, cols], 0.0)
        over = (cap > 0) & (demand[cols][None, :] > free * (1.0 + alignment.FEASIBILITY_RTOL))
        mark(over.any(axis=1), "bandwidth")
    if pod.opportunistic:
        mark(~snap.view.harvest_enabled, "harvest-disabled")
        mark(~snap.fresh, "utilization-unavailable")
        check = demand.copy()
        check[cols] = 0.0  # bandwidth was checked against declarations above
        mark(~alignment.feasible(check, snap.harvestable), "harvest-capacity")

    rejected = reason != ""
    out = FilterOutcome(passed=np.flatnonzero(~rejected))
    for i in np.flatnonzero(rejected):
        key = reason[i]
        out.reasons[key] = out.reasons.get(key, 0) + 1
        name = snap.names[i]
        if key == "unknown-node":
            out.failed[name] = "opportunistic: node not in Stowage's cache yet (informers syncing or node just added)"
        elif key == "contention":
            out.failed[name] = _contention_message(snap, i)
        elif key == "bandwidth":
            out.failed[name] = _bandwidth_message(snap, i, demand, cols)
        elif key == "harvest-disabled":
            out.unresolvable[name] = "opportunistic: harvesting disabled on this node (label stowage.io/harvest=false)"
        elif key == "utilization-unavailable":
            out.failed[name] = _utilization_message(snap, i)
        else:
            out.failed[name] = _harvest_message(snap, i, demand)
    return out
