"""A Job's tasks in one import: names, pods, outcomes, the plan and its status parts (re-exported, one role each).

| module | role |
|---|---|
| :mod:`~stowage.operator.task_names` | pod names and index sets |
| :mod:`~stowage.operator.task_pods` | a task's pod as released, and its demand |
| :mod:`~stowage.operator.outcomes` | what an attempt pod says about its task; the Job's phases |
| :mod:`~stowage.operator.plan` | the Job's plan (:func:`plan_job`) |
| :mod:`~stowage.operator.job_status` | ``Unschedulable``, ``Held`` and the estimates in the status |
"""

from __future__ import annotations

from stowage.operator.job_status import (
    HELD,
    UNSCHEDULABLE,
    blocked_groups,
    condition,
    estimate_status,
    held_condition,
)
from stowage.operator.outcomes import EVICTION_REASONS, Outcome, Phase, is_bound, is_opportunistic, pod_outcome
from stowage.operator.plan import GroupPlan, JobPlan, attempt_recorded, job_progress, plan_job
from stowage.operator.task_names import TaskRef, format_indexes, parse_indexes, parse_pod_name, pod_name
from stowage.operator.task_pods import (
    JOB_API_VERSION,
    JOB_KIND,
    NODE_HINT_WEIGHT,
    expected_duration_s,
    group_specs,
    job_intent,
    job_queue,
    owner_reference,
    prefer_node,
    render_pod,
    task_demand,
)

__all__ = [
    "EVICTION_REASONS", "HELD", "JOB_API_VERSION", "JOB_KIND", "NODE_HINT_WEIGHT", "UNSCHEDULABLE", "GroupPlan",
    "JobPlan", "Outcome", "Phase", "TaskRef", "attempt_recorded", "blocked_groups", "condition", "estimate_status",
    "expected_duration_s", "format_indexes", "group_specs", "held_condition", "is_bound", "is_opportunistic",
    "job_intent", "job_progress", "job_queue", "owner_reference", "parse_indexes", "parse_pod_name", "plan_job",
    "pod_name", "pod_outcome", "prefer_node", "render_pod", "task_demand",
]
