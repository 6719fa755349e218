"""The dispatcher's decayed queue usage (``packing.queue_usage_half_life_s``) as saved state, and back.

Per pool (``regular``, ``opportunistic``), the ``fairness.QueueUsage`` fields listed by queue name::

    {"regular": {"queues": ["a", "b"], "usage": [0.6, 0.4], "dominant": [0.5, 0.5], "at": 1700000000.0}}

The state changes only when a decision changes a pool's shares, so an operator whose cluster is steady has
nothing new to write. Plain JSON: a value that is not a finite number (``at`` before any decision) is written
as ``null`` and read back as NaN; every finite value round-trips bit for bit (Python's ``repr`` of a float is
exact). Pools in ``Pool`` order.

The release before wrote queue *deficits* (state version 3 and 4: ``deficit``, ``dominant``, ``active``,
``at`` per pool). ``from_deficits`` reads them: the last shares become the usage, as if they had held for
ever, which is what the deficits' shares said about the present.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stowage.model import Pool
from stowage.policy import fairness

__all__ = ["Usage", "from_deficits", "from_state", "to_state"]

Usage = dict[Pool, tuple[tuple[str, ...], fairness.QueueUsage]]
"""pool → (the queue names the usage is listed by, the usage)."""


def to_state(usage: Usage) -> dict[str, Any]:
    """JSON-serialisable form of ``usage``, deterministic (pools in ``Pool`` order, queues as listed)."""
    out: dict[str, Any] = {}
    for pool in Pool:
        if pool in usage:
            names, u = usage[pool]
            out[pool.value] = {"queues": list(names), "usage": [_number(x) for x in u.usage],
                               "dominant": [_number(x) for x in u.dominant], "at": _number(u.at)}
    return out


def from_state(state: Any, field: str = "usage") -> Usage:
    """``to_state``'s output back. Raises ``ValueError`` naming the field (``usage.regular.dominant``) if malformed."""
    return {pool: (names, fairness.QueueUsage(values["usage"], values["dominant"], at))
            for pool, (names, values, at) in _pools(state, field, ("usage", "dominant")).items()}


def from_deficits(state: Any) -> Usage:
    """The previous release's queue deficits (state versions 3 and 4) as usage: the shares held since ``at``
    become the usage at ``at``. Raises ``ValueError`` naming the field (``deficits.regular.dominant``)."""
    return {pool: (names, fairness.QueueUsage(values["dominant"], values["dominant"], at))
            for pool, (names, values, at) in _pools(state, "deficits", ("deficit", "dominant")).items()}


def _pools(state: Any, field: str, lists: tuple[str, ...]) -> dict[Pool, tuple[tuple[str, ...], dict, float]]:
    """Per pool: the queue names, the named per-queue lists (NaN → 0: a queue that took no part used nothing)
    and ``at``."""
    if not isinstance(state, Mapping):
        raise ValueError(f"{field}: must be a mapping of pool to usage, got {type(state).__name__}")
    out = {}
    for key, raw in state.items():
        where = f"{field}.{key}"
        if key not in set(Pool):
            raise ValueError(f"{where}: not a pool (one of {', '.join(Pool)})")
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: must be a mapping, got {type(raw).__name__}")
        names = _list(raw, "queues", where, None)
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise ValueError(f"{where}.queues: must be distinct queue names, got {names!r}")
        values = {name: tuple(_share(x, f"{where}.{name}") for x in _list(raw, name, where, len(names)))
                  for name in lists}
        if "at" not in raw:
            raise ValueError(f"{where}.at: missing")
        out[Pool(key)] = (tuple(names), values, _float(raw["at"], f"{where}.at"))
    return out


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _float(x: Any, field: str) -> float:
    if x is None:
        return math.nan
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"{field}: must be a number or null, got {x!r}")
    return float(x)


def _share(x: Any, field: str) -> float:
    value = _float(x, field)
    return 0.0 if math.isnan(value) else value


def _list(raw: Mapping[str, Any], name: str, where: str, length: int | None) -> list[Any]:
    value = raw.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{where}.{name}: must be a list, got {value!r}")
    if length is not None and len(value) != length:
        raise ValueError(f"{where}.{name}: must have one entry per queue ({length}), got {len(value)}")
    return value
