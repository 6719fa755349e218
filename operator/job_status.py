"""The parts of a Job's status around its plan: why groups cannot be dispatched, ``Held``, the estimates. Pure.

:func:`blocked_groups` feeds the plan's ``Unschedulable`` condition; the Job writer adds :func:`held_condition` and
:func:`estimate_status` to the plan's status when it writes it; :func:`condition` is the one way a condition keeps
its ``lastTransitionTime``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stowage.resources import ResourceVector, format_quantity

if TYPE_CHECKING:
    from stowage.operator.plan import GroupPlan

__all__ = ["HELD", "UNSCHEDULABLE", "blocked_groups", "condition", "estimate_status", "held_condition"]

#: Job condition: some unfinished group cannot be dispatched (reasons QueueNotFound, FitsNoNode).
UNSCHEDULABLE = "Unschedulable"


def blocked_groups(queue: str, queue_exists: bool, demands: Mapping[str, ResourceVector | None],
                   node_shapes: Iterable[Mapping[str, float]]) -> dict[str, tuple[str, str]]:
    """group → (reason, message) for the groups of a Job in ``queue`` that cannot be dispatched.

    ``QueueNotFound``: the Queue is gone (deleted while the Job had work): running tasks finish, the others
    wait until a Queue of that name exists again. ``FitsNoNode``: one task asks more of some resource than
    any node's allocatable (``node_shapes``, the distinct allocatables; a resource a node does not list is
    not held against it; no nodes: nothing is judged).
    """
    if not queue_exists:
        why = (f"Queue {queue!r} does not exist (deleted?): running tasks finish; the others wait until it is "
               "created again")
        return {g: ("QueueNotFound", why) for g in demands}
    shapes = list(node_shapes)
    out = {}
    for g, demand in demands.items():
        if demand is None or not shapes:
            continue
        if not any(all(v <= shape[r] for r, v in demand.items() if r in shape) for shape in shapes):
            largest = {r: max(s.get(r, 0.0) for s in shapes) for r in demand}
            over = ", ".join(f"{r} {format_quantity(demand[r], r)} > {format_quantity(largest[r], r)}"
                             for r in sorted(demand) if demand[r] > largest[r])
            out[g] = ("FitsNoNode", f"task group {g!r}: one task asks more than any node's allocatable "
                      f"({over or 'no single node has all of it'}); it can never start: delete the Job and "
                      "submit smaller tasks")
    return out


HELD = "Held"
"""The Job condition saying why the dispatcher holds some of its tasks (``holds.job_held``)."""


def held_condition(held: tuple[str, str] | None, status: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The Job's ``Held`` condition: True with ``held`` (reason, message) while the dispatcher holds some of its
    tasks; False once it holds none, if it was ever written (``status``: the Job's status so far); else None."""
    old = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    if held is not None:
        return condition(HELD, True, held[0], held[1], now, old)
    if not any(c.get("type") == HELD for c in old):
        return None
    return condition(HELD, False, "NotHeld", "the dispatcher holds none of its tasks", now, old)


def condition(type_: str, status: bool, reason: str, message: str, now: str,
               old: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    previous = next((c for c in old if c.get("type") == type_), None)
    value = "True" if status else "False"
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == value else now
    return {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": since}


# --- the dispatcher's estimates in the status ------------------------------------------------------


def _two_digits(seconds: float) -> float:
    """``seconds`` to 2 significant digits (a status that follows a growing estimate changes in ≤ 10 % steps)."""
    return float(f"{seconds:.2g}")


def _estimate_entry(value: Any) -> dict[str, Any] | None:
    """A ``status.estimate.groups.<g>`` entry read back (ours, or a predecessor's); None when unusable."""
    if not isinstance(value, Mapping):
        return None
    seconds, source = value.get("taskSeconds"), value.get("source")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not isinstance(source, str):
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return {"taskSeconds": seconds, "source": source}


def estimate_status(groups: Sequence[GroupPlan], estimates: Mapping[str, tuple[float, str]] | None,
                    old: Any = None) -> dict[str, Any] | None:
    """``status.estimate`` of a Job: the dispatcher's duration estimates and the work they leave.

    ``estimates``: group name → (one task's estimated seconds, source name: ``estimates.SOURCE_NAMES``) from the
    dispatcher's last decision; ``old``: the ``status.estimate`` written before. A group keeps its last estimate
    when the decision no longer holds one (it finished, or the decision has not run yet since a restart), so a
    merge patch never has to delete it. ``taskSeconds`` is rounded to 2 significant digits, so the status
    changes with the estimate, not with every second a running task adds to it::

        {"remainingWorkSeconds": Σ over the groups of (pending + running tasks) × taskSeconds,
         "groups": {<group>: {"taskSeconds": 120.0, "source": "phase"}}}

    None when no group of the Job has an estimate (none written yet, none held).
    """
    names = {g.name for g in groups}
    out: dict[str, dict[str, Any]] = {}
    old_groups = old.get("groups") if isinstance(old, Mapping) else None
    for name, value in (old_groups.items() if isinstance(old_groups, Mapping) else ()):
        entry = _estimate_entry(value)
        if name in names and entry is not None:
            out[name] = entry
    for name, (seconds, source) in (estimates or {}).items():
        if name in names and math.isfinite(seconds) and seconds > 0:
            out[name] = {"taskSeconds": _two_digits(seconds), "source": str(source)}
    if not out:
        return None
    remaining = math.fsum((g.pending + g.running) * out[g.name]["taskSeconds"] for g in groups if g.name in out)
    return {"remainingWorkSeconds": round(remaining, 3), "groups": dict(sorted(out.items()))}
