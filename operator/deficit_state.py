"""The dispatcher's queue deficits (``packing.queue_share_deficit_s``) as saved state, and back.

Per pool (``regular``, ``opportunistic``), the ``fairness.QueueDeficits`` fields listed by queue name::

    {"regular": {"queues": ["a", "b"], "deficit": [1.5, -1.5], "dominant": [0.0, 1.0],
                 "active": [true, true], "at": 1700000000.0}}

Plain JSON: a value that is not a finite number (``dominant`` of a queue that took no part, ``at`` before any
update; ±inf only from an overflow) is written as ``null`` and read back as NaN, so every finite value
round-trips bit for bit (Python's ``repr`` of a float is exact) and a strict JSON reader can read the ConfigMap.
Pools in ``Pool`` order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stowage.model import Pool
from stowage.policy import fairness

__all__ = ["Deficits", "from_state", "to_state"]

Deficits = dict[Pool, tuple[tuple[str, ...], fairness.QueueDeficits]]
"""pool → (the queue names the deficits are listed by, the deficits)."""


def to_state(deficits: Deficits) -> dict[str, Any]:
    """JSON-serialisable form of ``deficits``, deterministic (pools in ``Pool`` order, queues as listed)."""
    out: dict[str, Any] = {}
    for pool in Pool:
        if pool in deficits:
            names, d = deficits[pool]
            out[pool.value] = {"queues": list(names), "deficit": [_number(x) for x in d.deficit],
                               "dominant": [_number(x) for x in d.dominant], "active": list(d.active),
                               "at": _number(d.at)}
    return out


def from_state(state: Any) -> Deficits:
    """``to_state``'s output back. Raises ``ValueError`` naming the field (``deficits.regular.active``) if malformed."""
    if not isinstance(state, Mapping):
        raise ValueError(f"deficits: must be a mapping of pool to deficits, got {type(state).__name__}")
    out: Deficits = {}
    for key, raw in state.items():
        where = f"deficits.{key}"
        if key not in set(Pool):
            raise ValueError(f"{where}: not a pool (one of {', '.join(Pool)})")
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: must be a mapping, got {type(raw).__name__}")
        names = _list(raw, "queues", where, None)
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise ValueError(f"{where}.queues: must be distinct queue names, got {names!r}")
        q = len(names)
        deficit = tuple(_float(x, f"{where}.deficit") for x in _list(raw, "deficit", where, q))
        dominant = tuple(_float(x, f"{where}.dominant") for x in _list(raw, "dominant", where, q))
        active = _list(raw, "active", where, q)
        if not all(isinstance(x, bool) for x in active):
            raise ValueError(f"{where}.active: must be true/false per queue, got {active!r}")
        if "at" not in raw:
            raise ValueError(f"{where}.at: missing")
        at = _float(raw["at"], f"{where}.at")
        out[Pool(key)] = (tuple(names), fairness.QueueDeficits(deficit, dominant, tuple(active), at))
    return out


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _float(x: Any, field: str) -> float:
    if x is None:
        return math.nan
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"{field}: must be a number or null, got {x!r}")
    return float(x)


def _list(raw: Mapping[str, Any], name: str, where: str, length: int | None) -> list[Any]:
    value = raw.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{where}.{name}: must be a list, got {value!r}")
    if length is not None and len(value) != length:
        raise ValueError(f"{where}.{name}: must have one entry per queue ({length}), got {len(value)}")
    return value
