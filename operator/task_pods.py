"""A task's pod as released: the group's template plus what Stowage sets, and what one task asks for. Pure."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from stowage.operator import crd
from stowage.operator.task_names import TaskRef

from stowage import labels
from stowage.errors import InvalidInput
from stowage.resources import ResourceVector, pod_demand, shown

__all__ = ["JOB_API_VERSION", "JOB_KIND", "NODE_HINT_WEIGHT", "expected_duration_s", "group_specs", "job_intent",
           "job_queue", "owner_reference", "prefer_node", "render_pod", "task_demand"]

JOB_KIND = "Job"
JOB_API_VERSION = f"{labels.API_GROUP}/{labels.API_VERSION}"


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """The controller reference a task pod carries: garbage-collected with its Job, found again after a restart."""
    meta = job.get("metadata") or {}
    return {"apiVersion": JOB_API_VERSION, "kind": JOB_KIND, "name": meta.get("name"), "uid": meta.get("uid"),
            "controller": True, "blockOwnerDeletion": True}


def group_specs(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``spec.tasks`` of a Job, each checked for the shape the planner reads (an object with a name, and a template
    whose metadata and spec are objects); raises :class:`InvalidInput` naming the first field that is not.

    The CRD's schema and the validating webhook refuse these shapes; this is for a Job stored without them (an
    older chart, a webhook that was down): it fails alone instead of stopping every pass."""
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidInput("spec", shown(spec), "an object")
    groups = spec.get("tasks") or []
    if not isinstance(groups, list):
        raise InvalidInput("spec.tasks", shown(groups), "a list of task groups")
    for i, group in enumerate(groups):
        if not isinstance(group, Mapping) or not isinstance(group.get("name"), str):
            raise InvalidInput(f"spec.tasks[{i}]", shown(group), "a task group: an object with a string name")
        template = group.get("template") or {}
        if not isinstance(template, Mapping):
            raise InvalidInput(f"spec.tasks[{i}].template", shown(template), "a pod template: an object")
        for part in ("metadata", "spec"):
            if not isinstance(template.get(part) or {}, Mapping):
                raise InvalidInput(f"spec.tasks[{i}].template.{part}", shown(template.get(part)), "an object")
    return groups


def _group_spec(job: Mapping[str, Any], group: str) -> Mapping[str, Any]:
    for spec in group_specs(job):
        if spec.get("name") == group:
            return spec
    raise InvalidInput("spec.tasks[].name", group, "the name of one of the Job's task groups")


def _expected_duration(spec: Mapping[str, Any]) -> str | None:
    value = spec.get("expectedDuration")
    if value is None:
        return None
    text = str(value).strip()
    return text[:-1] if text.endswith("s") else text


def expected_duration_s(spec: Mapping[str, Any]) -> float:
    """A task group's ``expectedDuration`` in seconds, at most ``crd.MAX_EXPECTED_DURATION_S`` (the schema's bound,
    applied again to a Job stored before it: an unbounded hint would overflow remaining work and jump the queue);
    NaN when it is absent or unreadable."""
    text = _expected_duration(spec)
    try:
        seconds = float(text) if text is not None else math.nan
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return min(seconds, float(crd.MAX_EXPECTED_DURATION_S)) if seconds >= 0 else math.nan


def job_queue(job: Mapping[str, Any]) -> str:
    return str((job.get("spec") or {}).get("queue") or "default")


def job_intent(job: Mapping[str, Any]) -> labels.Opportunistic:
    """``spec.opportunistic`` (default ``auto`` for Stowage Jobs, DESIGN.md)."""
    return labels.Opportunistic.parse((job.get("spec") or {}).get("opportunistic", "auto"), "spec.opportunistic")


def render_pod(job: Mapping[str, Any], task: TaskRef, pod_class: labels.PodClass) -> dict[str, Any]:
    """The pod of one task attempt, as released: the group's template plus what Stowage sets.

    Sets the deterministic name, the Job's namespace, the controller owner reference, the system labels
    (``stowage.io/job``, ``stowage.io/queue``, ``stowage.io/task-group``, ``stowage.io/class``) over
    whatever the template says, the user's intent label from ``spec.opportunistic``, the
    ``stowage.io/expected-duration`` annotation from the group's ``expectedDuration`` (unless the
    template sets it), ``schedulerName: stowage-scheduler`` and ``restartPolicy: Never`` (a task's
    retries are Stowage's, counted per attempt; ``OnFailure`` is kept when the template asks for it).
    An opportunistic release is returned unconverted: the caller applies
    ``stowage.operator.admission.convert_opportunistic``, the one conversion the webhook also uses.
    """
    meta = job.get("metadata") or {}
    spec = _group_spec(job, task.group)
    template = copy.deepcopy(spec.get("template") or {})
    t_meta = template.get("metadata") or {}
    pod_labels = {str(k): str(v) for k, v in (t_meta.get("labels") or {}).items()}
    pod_labels.update({
        labels.LABEL_JOB: str(meta.get("name")),
        labels.LABEL_QUEUE: job_queue(job),
        labels.LABEL_TASK_GROUP: task.group,
        labels.LABEL_OPPORTUNISTIC: job_intent(job).value,
        labels.LABEL_CLASS: pod_class.value,
    })
    annotations = {str(k): str(v) for k, v in (t_meta.get("annotations") or {}).items()}
    duration = _expected_duration(spec)
    if duration is not None:
        annotations.setdefault(labels.ANN_EXPECTED_DURATION, duration)
    pod_spec = dict(template.get("spec") or {})
    pod_spec["schedulerName"] = labels.SCHEDULER_NAME
    if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
        pod_spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": task.pod_name(str(meta.get("name"))),
            "namespace": meta.get("namespace"),
            "labels": pod_labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }


#: Weight of the dispatcher's node preference (the API's maximum): kube-scheduler's NodeAffinity score
#: (plugin weight 2) then outweighs its resource scores, so the pod lands where the packing pass put it
#: whenever that node still fits; when it does not, the pod goes elsewhere (a preference, not a rule).
NODE_HINT_WEIGHT = 100


def prefer_node(spec: Mapping[str, Any], node: str) -> dict[str, Any]:
    """``spec`` (a pod spec) with a preferred node affinity for ``node`` added (``matchFields`` on
    ``metadata.name``), on a copy; the template's own affinity terms are kept. Used for the dispatcher's
    ``Release.node_hint`` on the pods it releases."""
    out = copy.deepcopy(dict(spec))
    affinity = out.setdefault("affinity", {}) or {}
    out["affinity"] = affinity
    node_affinity = affinity.setdefault("nodeAffinity", {}) or {}
    affinity["nodeAffinity"] = node_affinity
    preferred = list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred.append({"weight": NODE_HINT_WEIGHT, "preference": {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}})
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return out


def task_demand(job: Mapping[str, Any], group: str) -> ResourceVector:
    """What one task of ``group`` asks for: its template's requests (as kube-scheduler sums them) + bandwidth.

    Raises :class:`InvalidInput` (naming the field) for a bad quantity or annotation.
    """
    spec = _group_spec(job, group)
    template = spec.get("template") or {}
    pod = {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return pod_demand(pod) + labels.bandwidth_demand(annotations, f"spec.tasks[{group}].template.metadata.annotations")
