"""``summarise()``: two raw samples → usage rates per node and per pod. Pure: no I/O, no clock.

For a cumulative counter ``x`` read at ``t₀`` and ``t₁`` the rate is::

    rate = (x₁ − x₀) / (t₁ − t₀)

    cpu      cores     = Δ usage_usec / 10⁶ / Δt
    disk     bytes/s   = Δ (rbytes + wbytes) / Δt
    network  bytes/s   = Δ (rx + tx bytes of the network namespace: the node's, or the pod's) / Δt
    memory   bytes     = working set of the newer sample (a gauge, no rate needed)

A rate is *unknown* (NaN) rather than invented when there is no previous
sample, the counter is missing in either sample, the counter went backwards
(the cgroup was recreated or the counter reset) or ``Δt ≤ 0``. A first sample
or a reset therefore produces no value, never a spike. A pod's network rate is
also unknown when its namespace changed between the samples (a recreated
sandbox: new counters, even if already above the old ones) and always for a
host-network pod (its namespace is the node's: every such pod would show the
whole node's traffic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from stowage.node_monitor.cgroups import Counters
from stowage.node_monitor.sampling import PodSample, RawSample

from stowage.resources import CORE_RESOURCES, CPU, DISK, MEMORY, NETWORK

__all__ = ["RESOURCES", "Usage", "rate", "summarise"]

RESOURCES: tuple[str, ...] = CORE_RESOURCES
"""The resource axis of every array here: cpu (cores), memory (bytes), disk, network (bytes/s)."""
_CPU, _MEM, _DISK, _NET = (RESOURCES.index(r) for r in (CPU, MEMORY, DISK, NETWORK))


@dataclass(frozen=True, slots=True)
class Usage:
    """Measured usage at ``at_s``; NaN marks a value that is not known yet.

    ``node``: (R,) over :data:`RESOURCES` (the kubepods cgroup, plus node network).
    ``pods``: (P,R), row ``i`` for ``pod_uids[i]``; the network column is the pod's
    own namespace (NaN for host-network pods, see the module docstring).
    """

    at_s: float
    interval_s: float | None
    node: np.ndarray
    pod_uids: tuple[str, ...]
    pod_qos: tuple[str, ...]
    pods: np.ndarray
    layout: str


def rate(before: float | None, after: float | None, dt: float) -> float:
    """``(after − before)/dt``, or NaN when either is unknown, the counter went backwards, or dt ≤ 0."""
    if before is None or after is None or not dt > 0 or after < before:
        return math.nan
    return (after - before) / dt


def _row(prev: Counters | None, cur: Counters | None, dt: float) -> list[float]:
    """[cpu, memory, disk, network] of one cgroup (network is filled in by the caller)."""
    if cur is None:
        return [math.nan] * len(RESOURCES)
    row = [math.nan] * len(RESOURCES)
    mem = cur.memory_bytes
    row[_MEM] = math.nan if mem is None else float(mem)
    if prev is not None:
        row[_CPU] = rate(prev.cpu_usec, cur.cpu_usec, dt) / 1e6
        row[_DISK] = rate(prev.io_bytes, cur.io_bytes, dt)
    return row


def _pod_row(prev: PodSample | None, cur: PodSample, dt: float) -> list[float]:
    row = _row(prev.counters if prev is not None else None, cur.counters, dt)
    if prev is not None and not cur.host_network and cur.netns is not None and cur.netns == prev.netns:
        row[_NET] = rate(prev.net_bytes, cur.net_bytes, dt)
    return row


def summarise(prev: RawSample | None, cur: RawSample) -> Usage:
    """Usage rates between ``prev`` and ``cur`` (see the module docstring for units and edge cases).

    A pod present in ``cur`` but not in ``prev`` (new, or seen for the first
    time) gets its memory but no cpu/disk/network rate yet; a pod present only in
    ``prev`` (gone) is not reported.
    """
    dt = cur.taken_at_s - prev.taken_at_s if prev is not None else math.nan
    node = _row(prev.node if prev is not None else None, cur.node, dt)
    if prev is not None:
        node[_NET] = rate(prev.net_bytes, cur.net_bytes, dt)
    uids = tuple(sorted(cur.pods))
    rows = [_pod_row(prev.pods.get(u) if prev is not None else None, cur.pods[u], dt) for u in uids]
    pods = np.array(rows, dtype=np.float64).reshape(len(uids), len(RESOURCES))
    return Usage(
        at_s=cur.taken_at_s,
        interval_s=dt if math.isfinite(dt) else None,
        node=np.array(node, dtype=np.float64),
        pod_uids=uids,
        pod_qos=tuple(str(cur.pods[u].qos) for u in uids),
        pods=pods,
        layout=cur.layout,
    )
