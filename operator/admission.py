"""Stowage's admission rules as pure functions: no Kopf, no I/O (``webhooks`` is the glue).

==============================================  ==========================================================
``validate_queue(spec)``                        every problem of a Queue spec (``InvalidInput`` each)
``validate_job(spec, queue_exists, old_spec)``  every problem of a Job spec: unknown queue, a cycle in
                                                ``dependsOn``, bad quantities in a task's template, ...
``admit_pod(pod, queue_exists, ...)``           the JSON patch (RFC 6902) and warnings that admit a pod
                                                Stowage's by scheduler name or one label (pod or
                                                namespace); raises ``InvalidInput`` to refuse it
``stowage_pod_condition()``                     CEL: the pods that name Stowage (the webhook's scope)
``admit_workload(obj, path, queue_exists, ...)`` a workload's pod template checked as ``admit_pod`` checks a
                                                pod (refused with the pod's message, under the template)
``stowage_template_condition()``                CEL: the workloads whose pod template names Stowage
``convert_opportunistic(pod)``                  the opportunistic conversion, on a copy (the operator
                                                also calls it when it creates an opportunistic task)
``review_pod_update(old, new)``                 every Stowage-owned key a pod UPDATE changes (refused
                                                unless Stowage's own service accounts make it)
==============================================  ==========================================================

The Queue and Job rules live in :mod:`stowage.operator.validation` and the conversion in
:mod:`stowage.operator.conversion`; both are re-exported here, so the webhooks import one module.

Each problem names the field, the value and what is allowed (``stowage.errors.InvalidInput``). The
API server's schema and CEL rules (``charts/stowage/files/crds/``) run before a validating webhook and
catch most of the same mistakes; these rules repeat them so each stands alone, and add what a
schema cannot see: other objects (does the Queue exist?), cycles, quantities past what a number holds, the
Stowage annotations in a pod template.

Total over any JSON: the functions return problems (``admit_pod`` raises ``InvalidInput``) and raise
nothing else, whatever shapes they are given, and a Job ``validate_job`` admits can be planned by the
operator (its own steps run on each task here). Values in messages are shortened (``resources.shown``).

``queue_exists`` is a predicate ``name -> bool`` the caller supplies (an API read in the webhook,
a dict in tests); ``queue_spec`` and ``namespace_labels`` (optional) give the Queue's spec and the namespace's
labels, which :mod:`stowage.operator.tenancy` judges (``spec.namespaceSelector``, ``spec.state``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from stowage.operator import crd, tenancy
from stowage.operator.conversion import (
    CONVERTED_CPU_REQUEST,
    child_object,
    convert_opportunistic,
    strip_harvest_resource,
)
from stowage.operator.validation import (
    DEFAULT_SCHEDULER,
    QUEUE_ALLOWED,
    JSONPatch,
    NamespaceLabels,
    NamespaceQueue,
    QueueExists,
    QueueNames,
    QueueSpecOf,
    annotations_problem,
    metadata_problems,
    pod_spec_problems,
    validate_job,
    validate_queue,
)

from stowage import labels
from stowage.errors import IntentError, InvalidInput
from stowage.resources import shown

# The Queue and Job rules and the conversion stay importable from here (validation.py, conversion.py hold them).
__all__ = [
    "CONVERTED_CPU_REQUEST",
    "DEFAULT_SCHEDULER",
    "PROTECTED_ANNOTATIONS",
    "PROTECTED_LABELS",
    "WORKLOAD_TEMPLATES",
    "JSONPatch",
    "NamespaceLabels",
    "NamespaceQueue",
    "PodAdmission",
    "QueueExists",
    "QueueNames",
    "QueueSpecOf",
    "admit_pod",
    "admit_workload",
    "convert_opportunistic",
    "json_patch",
    "mutate_pod",
    "pod_update_condition",
    "review_pod_update",
    "stowage_pod_condition",
    "stowage_template_condition",
    "validate_job",
    "validate_queue",
]

# --- Pods ----------------------------------------------------------------------------------------


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(old: Any, new: Any, path: str = "") -> JSONPatch:
    """RFC 6902 operations turning ``old`` into ``new``.

    Objects are compared key by key, lists of equal length item by item; anything else that differs
    is replaced whole (a list that grew or shrank, a changed scalar).
    """
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        ops: JSONPatch = [{"op": "remove", "path": f"{path}/{_escape(k)}"} for k in old if k not in new]
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
            else:
                ops += json_patch(old[key], value, f"{path}/{_escape(key)}")
        return ops
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [op for i, (a, b) in enumerate(zip(old, new, strict=True)) for op in json_patch(a, b, f"{path}/{i}")]
    if type(old) is not type(new) or old != new:
        return [{"op": "replace", "path": path, "value": new}]
    return []


def _admitted(pod: Mapping[str, Any], queue: str, intent: labels.Opportunistic, warnings: list[str]) -> dict[str, Any]:
    """The pod as Stowage admits it into ``queue``: scheduler name, system labels, class, gate."""
    out = copy.deepcopy(dict(pod))
    meta = child_object(out, "metadata")
    # System labels are the webhook's to set: whatever the user wrote goes.
    pod_labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in labels.SYSTEM_LABELS}
    pod_labels[labels.LABEL_QUEUE] = queue
    meta["labels"] = pod_labels
    annotations = dict(meta.get("annotations") or {})
    if labels.ANN_REQUESTS in annotations:  # only the conversion writes it (a promotion restores it)
        warnings.append(f"annotation {labels.ANN_REQUESTS} removed: only Stowage sets it, when it converts a pod")
        del annotations[labels.ANN_REQUESTS]
        meta["annotations"] = annotations
    spec = child_object(out, "spec")
    spec["schedulerName"] = labels.SCHEDULER_NAME
    strip_harvest_resource(spec)
    if intent is labels.Opportunistic.TRUE:
        return _gate(convert_opportunistic(out))
    if labels.ANN_DEMAND in annotations:
        # Only an opportunistic pod's demand differs from its requests; a regular pod's is its requests.
        warnings.append(f"annotation {labels.ANN_DEMAND} removed: this pod runs regular (without "
                        f"{labels.LABEL_OPPORTUNISTIC}: \"true\"), so its requests are its demand")
        del annotations[labels.ANN_DEMAND]
        meta["annotations"] = annotations
    pod_labels[labels.LABEL_CLASS] = labels.PodClass.REGULAR.value
    return _gate(out)


def _gate(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with the admission gate appended (once, after the user's own gates)."""
    if not _gated(pod):
        spec = child_object(pod, "spec")
        spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": labels.GATE_ADMISSION}]
    return pod


#: What admission decided on a pod, kept for its life: the system labels, the intent (``class: opportunistic``
#: with ``opportunistic: "false"`` would make the node monitor protect a converted pod), the demand annotation and
#: the requests a promotion restores.
PROTECTED_LABELS: tuple[str, ...] = (*labels.SYSTEM_LABELS, labels.LABEL_OPPORTUNISTIC)
PROTECTED_ANNOTATIONS: tuple[str, ...] = (labels.ANN_DEMAND, labels.ANN_REQUESTS)
_UPDATE_ALLOWED = "set by Stowage at admission; only Stowage's own service accounts may change it"


def _gated(pod: Mapping[str, Any] | None) -> bool:
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION for g in gates)


def review_pod_update(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[InvalidInput]:
    """Every Stowage-owned key a pod UPDATE changes, one ``InvalidInput`` naming each (``[]``: allowed).

    Owned: ``PROTECTED_LABELS``, ``PROTECTED_ANNOTATIONS`` (added, changed or removed) and the scheduling
    gate ``stowage.io/admission`` (removed: the pod would skip the dispatcher's fair order). The webhook
    calls this only for users other than Stowage's service accounts, which release pods and set classes.
    """
    problems: list[InvalidInput] = []
    for part, keys in (("labels", PROTECTED_LABELS), ("annotations", PROTECTED_ANNOTATIONS)):
        before = ((old or {}).get("metadata") or {}).get(part) or {}
        after = ((new or {}).get("metadata") or {}).get(part) or {}
        for key in keys:
            if before.get(key) != after.get(key):
                problems.append(InvalidInput(f"metadata.{part}[{key!r}]", after.get(key, "(removed)"), _UPDATE_ALLOWED))
    if _gated(old) and not _gated(new):
        problems.append(InvalidInput(f"spec.schedulingGates[{labels.GATE_ADMISSION!r}]", "(removed)",
                                     "only Stowage's own service accounts may remove it (the dispatcher does, "
                                     "releasing the pod in fair order)"))
    return problems


def _cel_changed(part: str, key: str) -> str:
    """CEL: ``metadata.<part>[key]`` was added, removed or changed (absent differs from "")."""
    new, old = (f"(has({o}.metadata.{part}) && '{key}' in {o}.metadata.{part})" for o in ("object", "oldObject"))
    return f"({new} != {old} || ({new} && object.metadata.{part}['{key}'] != oldObject.metadata.{part}['{key}']))"


def pod_update_condition() -> str:
    """CEL for the webhook's ``matchConditions``: true iff the UPDATE changes what ``review_pod_update`` guards.

    The API server evaluates it, so every other pod update (the kubelet's, a controller's, a user's own
    labels) never waits on the webhook, which fails closed.
    """
    changes = [_cel_changed(part, k)
               for part, keys in (("labels", PROTECTED_LABELS), ("annotations", PROTECTED_ANNOTATIONS)) for k in keys]

    def gated(obj: str) -> str:
        return (f"(has({obj}.spec.schedulingGates) && "
                f"{obj}.spec.schedulingGates.exists(g, g.name == '{labels.GATE_ADMISSION}'))")

    changes.append(f"({gated('oldObject')} && !{gated('object')})")
    return " || ".join(changes)


@dataclass(frozen=True, slots=True)
class PodAdmission:
    """What admission decided on a pod CREATE: the JSON patch (``[]``: the pod stays as written) and warnings."""

    patch: JSONPatch
    warnings: tuple[str, ...] = ()


def _no_namespace_queue(namespace: str) -> str | None:
    return None


_K = TypeVar("_K")
_V = TypeVar("_V")


def _once(read: Callable[[_K], _V]) -> Callable[[_K], _V]:
    """``read`` remembered for one admission: a pod's Queue and namespace cost one API read each."""
    seen: dict[_K, _V] = {}

    def remembered(key: _K) -> _V:
        if key not in seen:
            seen[key] = read(key)
        return seen[key]

    return remembered


def _selector_labels(spec: Mapping[str, Any] | None, namespace_labels: NamespaceLabels | None,
                     namespace: str) -> Mapping[str, str] | None:
    """The namespace's labels when the Queue has a selector to match (None: not read, or no way to read them)."""
    if not spec or spec.get("namespaceSelector") is None or namespace_labels is None or not namespace:
        return None
    return namespace_labels(namespace)


def stowage_pod_condition() -> str:
    """CEL for the pod webhook's ``matchConditions``: true iff the pod names Stowage itself.

    By its scheduler name, a queue label, or an opportunistic label other than the opt-out ``"false"``
    (a malformed value too: it must be refused, not ignored). Pods of a namespace labelled
    ``stowage.io/queue`` reach the webhook through a second entry (a ``namespaceSelector``).
    """
    opp = labels.LABEL_OPPORTUNISTIC
    return (f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{labels.SCHEDULER_NAME}') || "
            f"(has(object.metadata.labels) && ('{labels.LABEL_QUEUE}' in object.metadata.labels || "
            f"('{opp}' in object.metadata.labels && object.metadata.labels['{opp}'] != "
            f"'{labels.Opportunistic.FALSE.value}')))")


def _names_stowage(obj: str, guard: str) -> str:
    """CEL: the pod (template) ``obj`` names Stowage, each field guarded by ``has`` (``guard``: its parents')."""
    opp = labels.LABEL_OPPORTUNISTIC
    return (f"({guard}has({obj}.spec) && has({obj}.spec.schedulerName) && "
            f"{obj}.spec.schedulerName == '{labels.SCHEDULER_NAME}') || "
            f"({guard}has({obj}.metadata) && has({obj}.metadata.labels) && "
            f"('{labels.LABEL_QUEUE}' in {obj}.metadata.labels || ('{opp}' in {obj}.metadata.labels && "
            f"{obj}.metadata.labels['{opp}'] != '{labels.Opportunistic.FALSE.value}')))")


def stowage_template_condition() -> str:
    """CEL for the workload webhook's ``matchConditions``: true iff the object's pod template names Stowage, as
    :func:`stowage_pod_condition` reads a pod (``spec.template``, a CronJob's ``spec.jobTemplate.spec.template``).

    Every field is guarded by ``has``: a condition that fails to evaluate would refuse the object (the webhook
    fails closed), and a workload of another kind may lack any of them."""
    cron = "has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) && " \
           "has(object.spec.jobTemplate.spec.template) && "
    return (f"(has(object.spec) && has(object.spec.template) && "
            f"({_names_stowage('object.spec.template', '')})) || "
            f"(has(object.spec) && ({_names_stowage('object.spec.jobTemplate.spec.template', cron)}))")


def _queue_allowed(queue: str, queue_names: QueueNames | None) -> str:
    known = "" if queue_names is None else (", ".join(sorted(queue_names())) or "none yet") + "; "
    return (f"the name of an existing Queue ({known}kubectl get sq), or create Queue {queue!r} first "
            "(cluster-scoped, kind Queue, apiVersion stowage.io/v1alpha1: docs/operator.md)")


def admit_pod(pod: Mapping[str, Any], queue_exists: QueueExists, *,
              namespace_queue: NamespaceQueue = _no_namespace_queue,
              queue_names: QueueNames | None = None, watched_namespaces: Collection[str] = (),
              queue_spec: QueueSpecOf | None = None, namespace_labels: NamespaceLabels | None = None) -> PodAdmission:
    """Admit a pod created by a user: make it Stowage's if it asks to be, refuse what cannot be honoured.

    With ``queue_spec`` (a Queue's spec, None: no such Queue; it then answers ``queue_exists`` too) the pod's queue
    must take new work from its namespace (``tenancy.admission_problem``: not Closed, its ``namespaceSelector``
    matching ``namespace_labels``); ``namespace_labels`` also gives the namespace's default queue. Each is read at
    most once per pod, the namespace only when needed (its default queue, or a selector to match).

    A pod is Stowage's when it names the scheduler ``stowage-scheduler``, carries ``stowage.io/queue``
    or ``stowage.io/opportunistic: "true"|"auto"`` (on the pod or its controller's template), or lives in
    a namespace labelled ``stowage.io/queue`` (``namespace_queue(name)`` reads that label; a pod labelled
    ``stowage.io/webhook: ignore`` opts out of it). Such a pod gets ``schedulerName: stowage-scheduler``;
    the system labels (``stowage.io/class``, ``stowage.io/job``, ``stowage.io/task-group``) a user set go;
    ``stowage.io/queue`` is its own label, else its namespace's, else ``default``; ``stowage.io/opportunistic:
    "true"`` gets the opportunistic conversion (:func:`convert_opportunistic`, which keeps a stated
    ``stowage.io/demand``), anything else stays regular with ``stowage.io/class: regular`` (a stated demand
    is removed, with a warning); the scheduling gate ``stowage.io/admission`` is added, and the dispatcher
    releases the pod in fair order. Any other pod is left as it is (``patch == []``).

    A pod whose ``spec.schedulerName`` names another scheduler keeps it: with a Stowage label it is
    refused (the two contradict each other), in a queue-labelled namespace it gets a warning. The API
    server writes ``default-scheduler`` into a pod that names none before any webhook runs, so that name
    counts as none. A pod created with ``spec.nodeName`` is bound already: left as it is, with a warning.

    Raises :class:`InvalidInput` naming the field to refuse the pod: a malformed ``stowage.io/opportunistic``,
    a queue (the pod's, its namespace's, or ``default``) that does not exist (``queue_names()`` lists the
    ones that do), a Stowage label on a pod of another scheduler, a Stowage pod outside ``watched_namespaces``
    (the operator's ``--namespace``; empty: all), an opportunistic pod with no demand, a stated demand above
    the pod's limits, pod-group labels (``stowage.io/pod-group``, ``stowage.io/pod-group-total-count``)
    that are malformed or come one without the other, or on an opportunistic (``"true"``) pod.
    """
    if not isinstance(pod, Mapping):
        raise IntentError("(the pod)", shown(pod), "a pod: an object with metadata and spec")
    if queue_spec is not None:
        queue_spec = _once(queue_spec)
        queue_exists = lambda name: queue_spec(name) is not None  # noqa: E731 (one read answers both)
    if namespace_labels is not None:
        namespace_labels = _once(namespace_labels)
        namespace_queue = lambda name: namespace_labels(name).get(labels.LABEL_QUEUE)  # noqa: E731
    # The API server hands a webhook only well-formed pods; checked here too, the rules below stand alone.
    shapes = [*metadata_problems(pod.get("metadata"), "metadata"), *pod_spec_problems(pod.get("spec"), "spec")]
    if shapes:
        raise IntentError(shapes[0].field, shapes[0].value, shapes[0].allowed)
    meta = pod.get("metadata") or {}
    pod_labels = meta.get("labels") or {}
    where = "metadata.labels"
    raw_intent = pod_labels.get(labels.LABEL_OPPORTUNISTIC)
    # Without the label a plain pod opts out of harvesting (DESIGN.md).
    intent = (labels.Opportunistic.parse(raw_intent, f"{where}[{labels.LABEL_OPPORTUNISTIC!r}]")
              if raw_intent is not None else labels.Opportunistic.FALSE)
    own_queue = pod_labels.get(labels.LABEL_QUEUE)
    # A label asks for Stowage: a queue, or the wish for harvested capacity ("false" is the opt-out).
    asks = own_queue is not None or intent is not labels.Opportunistic.FALSE
    opted_out = pod_labels.get(labels.LABEL_WEBHOOK) == labels.WEBHOOK_IGNORE
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    ns_queue = namespace_queue(namespace) if own_queue is None and namespace and not opted_out else None
    scheduler = (pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER

    if scheduler not in (DEFAULT_SCHEDULER, labels.SCHEDULER_NAME):
        if asks:
            key = labels.LABEL_QUEUE if own_queue is not None else labels.LABEL_OPPORTUNISTIC
            raise IntentError(f"{where}[{key!r}]", pod_labels[key],
                              f"no Stowage label on a pod of another scheduler (spec.schedulerName {scheduler!r}): "
                              f"remove spec.schedulerName (or set it to {labels.SCHEDULER_NAME!r}) to run the pod "
                              "through Stowage, or remove the label to leave it to that scheduler")
        if ns_queue is None:
            return PodAdmission([])
        return PodAdmission([], (f"namespace {namespace!r} is labelled {labels.LABEL_QUEUE}={ns_queue}, so its "
                                 "pods run through Stowage; this pod names spec.schedulerName "
                                 f"{scheduler!r} and stays with that scheduler, outside every Stowage queue",))
    if scheduler != labels.SCHEDULER_NAME and not asks and ns_queue is None:
        return PodAdmission([])  # kube-scheduler's pod: nothing asks for Stowage
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        # Bound at creation: no scheduler ever sees it, and the API server refuses a gate on it.
        return PodAdmission([], (f"spec.nodeName {node!r} binds this pod without any scheduler: Stowage does not "
                                 "gate, queue or convert it; remove spec.nodeName (use a nodeSelector) to run it "
                                 "through Stowage",))

    if watched_namespaces and namespace not in watched_namespaces:
        # Gated where no dispatcher looks, the pod would wait for ever.
        watched = ", ".join(sorted(watched_namespaces))
        raise IntentError("metadata.namespace", namespace,
                          f"one of the namespaces the Stowage operator watches ({watched}): "
                          "nowhere else is a Stowage pod released from its admission gate; create it in one of them, "
                          "or add this namespace to the operator's --namespace (chart: operator.namespaces)")
    # A typo in a queue name must not land the pod in another queue: refused, naming where it came from.
    if own_queue is not None:
        if not (crd.is_queue_name(own_queue) and queue_exists(own_queue)):
            raise IntentError(f"{where}[{labels.LABEL_QUEUE!r}]", own_queue, _queue_allowed(own_queue, queue_names))
        queue, field, whence = own_queue, f"{where}[{labels.LABEL_QUEUE!r}]", ""
    elif ns_queue is not None:
        if not (crd.is_queue_name(ns_queue) and queue_exists(ns_queue)):
            raise IntentError(f"namespace {namespace!r}: {where}[{labels.LABEL_QUEUE!r}]", ns_queue,
                              f"{_queue_allowed(ns_queue, queue_names)}; it is the default queue of the "
                              "namespace's pods")
        queue, field = ns_queue, f"namespace {namespace!r}: {where}[{labels.LABEL_QUEUE!r}]"
        whence = "; it is the default queue of the namespace's pods, and must admit the namespace"
    else:
        if not queue_exists(labels.DEFAULT_QUEUE):
            raise IntentError(f"{where}[{labels.LABEL_QUEUE!r}]", "(absent)",
                              f"{QUEUE_ALLOWED}; without the label the pod goes to queue "
                              f"{labels.DEFAULT_QUEUE!r}, which does not exist")
        queue, field = labels.DEFAULT_QUEUE, f"{where}[{labels.LABEL_QUEUE!r}]"
        whence = f"; without the label the pod goes to queue {labels.DEFAULT_QUEUE!r}"
    if queue_spec is not None:
        problem = tenancy.admission_problem(field, queue, queue_spec(queue) or {}, namespace,
                                            _selector_labels(queue_spec(queue), namespace_labels, namespace))
        if problem is not None:
            raise IntentError(problem.field, problem.value, problem.allowed + whence)

    # What stays of the Stowage annotations must parse: the operator and the extender read them on every pass.
    kept = {k: v for k, v in (meta.get("annotations") or {}).items()
            if k != labels.ANN_DEMAND or intent is labels.Opportunistic.TRUE}
    if (problem := annotations_problem(kept, "metadata.annotations")) is not None:
        raise IntentError(problem.field, problem.value, problem.allowed)
    if labels.pod_group(pod_labels, crd.MAX_REPLICAS, where) is not None and intent is labels.Opportunistic.TRUE:
        raise IntentError(f"{where}[{labels.LABEL_OPPORTUNISTIC!r}]", raw_intent,
                          f"'false' or 'auto' on a pod of a group ({labels.LABEL_POD_GROUP}): a group starts whole "
                          "on regular room, never on harvested room")
    warnings: list[str] = []
    if opted_out and (asks or scheduler == labels.SCHEDULER_NAME):
        warnings.append(f"{labels.LABEL_WEBHOOK}={labels.WEBHOOK_IGNORE} on a pod only keeps it out of its "
                        "namespace's default queue; this pod names Stowage itself and runs through it")
    if intent is labels.Opportunistic.AUTO:
        warnings.append(f"{labels.LABEL_OPPORTUNISTIC}=auto on a plain pod runs it regular (its requests "
                        "cannot change after creation); use \"true\" to run it on harvested capacity")
    admitted = _admitted(pod, queue, intent, warnings)
    return PodAdmission(json_patch(pod, admitted), tuple(warnings))


def mutate_pod(pod: Mapping[str, Any], queue_exists: QueueExists) -> JSONPatch:
    """The JSON patch of :func:`admit_pod` for a pod outside any queue-labelled namespace."""
    return admit_pod(pod, queue_exists).patch


# --- workloads: the pod template of a Deployment, a batch/v1 Job, ... ----------------------------------------

#: (API group, resource) → where the pod template sits in the object. Its pods are admitted as any pod, so a
#: template whose pods would be refused is refused at the workload, with the pod's message.
WORKLOAD_TEMPLATES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "replicasets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}


def _template_field(path: tuple[str, ...], field: str) -> str:
    """A pod's field as the workload names it (``metadata.labels[...]`` → ``spec.template.metadata.labels[...]``);
    fields of the namespace or of the request stay as they are."""
    pod_fields = ("metadata.labels", "metadata.annotations", "spec")
    return f"{'.'.join(path)}.{field}" if field.startswith(pod_fields) else field


def admit_workload(obj: Mapping[str, Any], path: tuple[str, ...], queue_exists: QueueExists, *,
                   namespace: str, **lookups: Any) -> tuple[str, ...]:
    """Check a workload's pod template (at ``path`` in ``obj``) as :func:`admit_pod` checks a pod of ``namespace``
    (``lookups``: its keywords); returns its warnings, raises :class:`InvalidInput` naming the template's field.

    Nothing is patched: the workload's pods come through the pod webhook, which makes them Stowage's."""
    template: Any = obj
    for key in path:
        template = template.get(key) if isinstance(template, Mapping) else None
    if template is None:
        return ()
    where = ".".join(path)
    if not isinstance(template, Mapping):
        raise IntentError(where, shown(template), "a pod template (metadata and spec)")
    meta = template.get("metadata")
    pod = {"metadata": {**(meta if isinstance(meta, Mapping) else {}), "namespace": namespace},
           "spec": template.get("spec") if template.get("spec") is not None else {}}
    if meta is not None and not isinstance(meta, Mapping):
        raise IntentError(f"{where}.metadata", shown(meta), "an object (labels, annotations)")
    try:
        return admit_pod(pod, queue_exists, **lookups).warnings
    except InvalidInput as exc:
        raise IntentError(_template_field(path, exc.field), exc.value, exc.allowed) from None
