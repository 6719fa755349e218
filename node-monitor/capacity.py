"""Node capacity for contention: the Node's allocatable and bandwidth annotations, or ``--capacity`` flags.

``cpu`` and ``memory`` come from ``status.allocatable`` (what pods may use, the
same quantity the scheduler packs against); ``disk`` and ``network`` bandwidth
from the node annotations ``stowage.io/disk-bandwidth`` and
``stowage.io/network-bandwidth``. A ``--capacity`` value overrides either. A
resource whose capacity is unknown (0) is never in contention: no threshold
can be computed for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from stowage.errors import InvalidInput, QuantityError
from stowage.labels import node_bandwidth
from stowage.resources import CPU, MEMORY, ResourceVector, parse_quantity

__all__ = ["capacity_array", "node_capacity", "parse_capacity"]

_FLAG_ALLOWED = "comma-separated name=quantity pairs such as cpu=4,memory=8Gi,disk=200Mi,network=125Mi"


def parse_capacity(text: str | None, field: str = "--capacity") -> ResourceVector:
    """Parse ``cpu=4,memory=8Gi,disk=200Mi,network=1Gi`` (bandwidths in bytes per second)."""
    if not text or not text.strip():
        return ResourceVector()
    out: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InvalidInput(field, text, _FLAG_ALLOWED)
        if name in out:
            raise InvalidInput(field, text, f"each resource once ({name!r} appears twice)")
        out[name] = parse_quantity(value.strip(), f"{field} {name}")
    return ResourceVector(out)


def node_capacity(node: Mapping[str, Any]) -> ResourceVector:
    """Allocatable cpu/memory of a Node API object plus its declared disk/network bandwidth.

    A malformed quantity is treated as absent (unknown capacity), never as 0 bytes/s.
    """
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    out: dict[str, float] = {}
    for name in (CPU, MEMORY):
        if name in allocatable:
            try:
                out[name] = parse_quantity(allocatable[name], f"status.allocatable.{name}")
            except QuantityError:
                continue
    bandwidth, _ = node_bandwidth((node.get("metadata") or {}).get("annotations"))  # a bad one: unknown, not 0
    return ResourceVector(out) + bandwidth


def capacity_array(resources: tuple[str, ...], *sources: Mapping[str, float]) -> np.ndarray:
    """(R,) capacity along ``resources``; later sources override earlier ones where they name a resource."""
    merged: dict[str, float] = {}
    for source in sources:
        merged.update({k: float(v) for k, v in source.items()})
    return np.array([max(0.0, merged.get(r, 0.0)) for r in resources], dtype=np.float64)
