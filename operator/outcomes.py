"""What one attempt pod says about its task (:func:`pod_outcome`), and the Job's phases. Pure.

| latest attempt pod | state of the task |
|---|---|
| any attempt ``Succeeded`` (or its index in ``completedIndexes``) | succeeded |
| exists, not terminal, not being deleted | active (``Pending`` → released, ``Running`` → running) |
| ``Failed``, no ``DisruptionTarget`` | failed attempt: re-queued while failures ≤ ``maxRetries``, else failed |
| ``DisruptionTarget``, or deleted (being deleted) before it finished | evicted or lost: re-queued, no retry spent |
| none | pending |

An eviction *by Stowage* is one whose ``DisruptionTarget`` reason is ``EvictionByEvictionAPI`` (the node
monitor) or ``PreemptionByScheduler`` (the extender's preempt verb), or the deletion of an opportunistic
pod; it is counted in ``evicted``. Any other disappearance of an unfinished pod (a user's delete, a
kubelet's node-pressure eviction) re-queues the task the same way but is not counted: it was not the
task's fault either.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from stowage import labels
from stowage.errors import InvalidInput

__all__ = ["EVICTION_REASONS", "Outcome", "Phase", "is_bound", "is_opportunistic", "pod_outcome"]

#: ``DisruptionTarget`` reasons that mean Stowage took the pod away (node monitor / extender preempt).
EVICTION_REASONS = frozenset({"EvictionByEvictionAPI", "PreemptionByScheduler"})


class Phase(enum.StrEnum):
    """``status.phase`` of a Job (DESIGN.md)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Outcome(enum.StrEnum):
    """What one attempt pod says about its task."""

    ACTIVE = "active"  # exists, not finished, not being deleted
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the task's own failure: spends a retry
    EVICTED = "evicted"  # taken away by Stowage: re-queued, no retry spent, counted
    LOST = "lost"  # otherwise disrupted or deleted before it finished: re-queued, no retry spent


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)]


def _disruption(pod: Mapping[str, Any]) -> str | None:
    """The reason of a true ``DisruptionTarget`` condition, None without one."""
    for cond in _conditions(pod):
        if cond.get("type") == "DisruptionTarget" and str(cond.get("status")) == "True":
            return str(cond.get("reason") or "")
    return None


def is_opportunistic(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is of class opportunistic (a label that does not parse: not)."""
    try:
        return labels.pod_class((pod.get("metadata") or {}).get("labels") or {}) is labels.PodClass.OPPORTUNISTIC
    except InvalidInput:
        return False


def pod_outcome(pod: Mapping[str, Any], deleted: bool = False) -> Outcome:
    """What ``pod`` (an attempt) says about its task; ``deleted``: the pod is gone (its last known state)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return Outcome.SUCCEEDED
    reason = _disruption(pod)
    gone = deleted or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    if reason is not None or gone:
        stowage_did_it = reason in EVICTION_REASONS or (gone and is_opportunistic(pod))
        return Outcome.EVICTED if stowage_did_it else Outcome.LOST
    if phase == "Failed":
        return Outcome.FAILED
    return Outcome.ACTIVE


def is_bound(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is on a node."""
    return bool((pod.get("spec") or {}).get("nodeName"))
