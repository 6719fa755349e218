"""Per-node filter messages: short, stable phrases with the numbers behind them (they end up in pod events).

Each reason has a stable key (the ``reason`` label of ``stowage_extender_rejections_total``)
and a message a person can act on, e.g.::

    opportunistic: memory 3.0Gi > harvestable 1.2Gi (0.90 × 16Gi − used 13.2Gi − blocked 0)
"""

from __future__ import annotations

import math

from stowage.resources import CPU, DISK, NETWORK

__all__ = ["REASONS", "human"]

#: reason key → what it means (documented in docs/extender.md).
REASONS: dict[str, str] = {
    "unknown-node": "the node is not in Stowage's cache (informers not synced yet, or the node is new)",
    "contention": "the node monitor reports sustained contention on the node",
    "bandwidth": "the pod's declared disk/network bandwidth exceeds what the node has left",
    "harvest-disabled": "the node is labelled stowage.io/harvest=false",
    "utilization-unavailable": "Prometheus is unreachable or has no fresh samples for the node",
    "harvest-capacity": "the opportunistic pod's demand exceeds the node's harvestable capacity",
    "missing-resource": "the pod needs a resource no node offers",
    "invalid-pod": "a Stowage label or annotation on the pod is malformed",
}

_BINARY = (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10))


def human(value: float, resource: str, *, exact: bool = False) -> str:
    """A compact human reading: ``1.5`` cores, ``13.2Gi`` bytes, ``80Mi/s`` bandwidth, ``0`` for zero.

    ``exact``: a whole number of units prints without a decimal (for declared capacities).
    """
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if resource == CPU:
        return f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) >= 0.01 else f"{value * 1000:.1f}m"
    suffix = "/s" if resource in (DISK, NETWORK) else ""
    if "/" in resource or resource not in ("memory", DISK, NETWORK):
        return f"{value:g}"  # extended resources count units
    for unit, size in _BINARY:
        if abs(value) >= size:
            scaled = value / size
            # Declared sizes read as written (16Gi); measured ones with a decimal (13.2Gi).
            return f"{scaled:.0f}{unit}{suffix}" if exact and scaled == int(scaled) else f"{scaled:.1f}{unit}{suffix}"
    return f"{value:.0f}{suffix}"
