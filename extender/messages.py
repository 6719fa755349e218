"""Filter reasons (a fixed set of short phrases) and the number formatting of the per-pod Event.

The Event's numbers read, e.g.::

    memory 3.0Gi > harvestable 1.2Gi (0.90 × 16Gi − used 13.2Gi − blocked 0)
"""

from __future__ import annotations

import math

import numpy as np

from stowage.resources import CPU, DISK, MEMORY, NETWORK

__all__ = ["REASONS", "human", "human_column", "human_points"]

#: reason key (the ``reason`` label of ``stowage_extender_rejections_total``) → the fixed phrase every node
#: rejected for it gets in ``FailedNodes``. kube-scheduler counts identical phrases in its FailedScheduling
#: event; the numbers behind them go in one Event per pod (``filtering.explain``). Documented in docs/extender.md.
REASONS: dict[str, str] = {
    "unknown-node": "stowage: node not in Stowage's cache yet",
    "contention": "stowage: node in sustained contention",
    "bandwidth": "stowage: not enough declared disk/network bandwidth left",
    "harvest-disabled": "stowage: harvesting disabled on node (stowage.io/harvest=false)",
    "utilization-unavailable": "stowage: no fresh utilization for node (Prometheus or node monitor)",
    "harvest-capacity": "stowage: not enough harvestable capacity",
    "missing-resource": "stowage: pod needs a resource no node offers",
    "invalid-pod": "stowage: invalid Stowage labels or annotations on the pod",
    "internal-error": "stowage: extender error, opportunistic pod held (fail closed)",
}

_BINARY = (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10))
_BYTE_LIKE = frozenset({MEMORY, DISK, NETWORK})
_SUFFIX = {MEMORY: "", DISK: "/s", NETWORK: "/s"}


def human(value: float, resource: str, *, exact: bool = False) -> str:
    """A compact human reading: ``1.5`` cores, ``13.2Gi`` bytes, ``80Mi/s`` bandwidth, ``0`` for zero.

    ``exact``: a whole number of units prints without a decimal (for declared capacities).
    On the filter's hot path: keep it branch-light.
    """
    if value == 0:
        return "0"
    if resource == CPU:
        if not math.isfinite(value):
            return str(value)
        return f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) >= 0.01 else f"{value * 1000:.1f}m"
    if resource not in _BYTE_LIKE or not math.isfinite(value):
        return f"{value:g}"  # extended resources count units
    suffix = _SUFFIX[resource]
    magnitude = abs(value)
    for unit, size in _BINARY:
        if magnitude >= size:
            scaled = value / size
            # Declared sizes read as written (16Gi); measured ones with a decimal (13.2Gi).
            if exact and scaled == int(scaled):
                return f"{int(scaled)}{unit}{suffix}"
            return f"{scaled:.1f}{unit}{suffix}"
    return f"{value:.0f}{suffix}"


_UNIT_SIZES = np.array([size for _, size in _BINARY])
_UNIT_NAMES = [unit for unit, _ in _BINARY]


def human_column(values: np.ndarray, resource: str, *, exact: bool = False) -> list[str]:
    """:func:`human` for a whole column at once: the unit is picked with numpy, one f-string per value."""
    if values.size > 1 and values.min() == values.max():
        # one node type, or all zero (blocked, assumed): format once
        return [human(float(values[0]), resource, exact=exact)] * values.size
    return human_points(values, resource, exact=exact)


def human_points(values: np.ndarray, resource: str, *, exact: bool = False) -> list[str]:
    """:func:`human_column` without the one-repeated-value shortcut: equal values always read alike."""
    if resource == CPU and np.isfinite(values).all():
        # cores with one decimal; declared whole cores without (the filter's hot path: no per-value branching)
        if exact:
            return [str(int(v)) if v == int(v) else f"{v:.1f}" for v in values.tolist()]
        return [f"{v:.1f}" if v else "0" for v in values.tolist()]
    if resource not in _BYTE_LIKE:
        return [human(v, resource, exact=exact) for v in values.tolist()]
    suffix = _SUFFIX[resource]
    magnitude = np.abs(values)
    # index of the largest unit not above the value; len(_BINARY) means "below 1Ki": plain number
    which = np.argmax(magnitude[:, None] >= _UNIT_SIZES[None, :], axis=1)
    which = np.where(magnitude >= _UNIT_SIZES[-1], which, len(_BINARY))
    sizes = np.append(_UNIT_SIZES, 1.0)[which]
    scaled = (values / sizes).tolist()
    names = [*_UNIT_NAMES, ""]
    out = []
    for v, raw, w in zip(scaled, values.tolist(), which.tolist(), strict=True):
        if raw == 0:
            out.append("0")
        elif not math.isfinite(raw):
            out.append(str(raw))
        elif w == len(_BINARY):
            out.append(f"{raw:.0f}{suffix}")
        elif exact and v == int(v):
            out.append(f"{int(v)}{names[w]}{suffix}")
        else:
            out.append(f"{v:.1f}{names[w]}{suffix}")
    return out
