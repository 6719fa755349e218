"""The opportunistic conversion of a pod (on a copy): the one the webhook applies and the operator applies to an
opportunistic task's pod. Its requests go to an annotation a promotion restores; it requests harvested capacity.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from stowage.operator.validation import NO_DEMAND, parse_checked

from stowage import labels
from stowage.errors import IntentError, InvalidInput
from stowage.kube.records import container_limits, tracked
from stowage.resources import CPU, MEMORY, ResourceVector, format_quantity, parse_quantity, pod_demand

__all__ = ["CONVERTED_CPU_REQUEST", "convert_opportunistic"]


def child_object(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]``, an object: one made when it is absent or null (``setdefault`` would hand back the null)."""
    value = obj.get(key)
    if not isinstance(value, dict):
        value = obj[key] = {}
    return value


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for kind in ("initContainers", "containers") for c in spec.get(kind) or [] if isinstance(c, dict)]


def _limit_bounds(pod: Mapping[str, Any]) -> dict[str, float]:
    """The most the pod can ever use of each resource its limits bound, by resource.

    At any moment it runs its containers and sidecars (restartable init containers) together, or one
    other init container: the bound is the larger of their limits' sum and that init container's limit.
    A resource that one running container leaves unlimited has no bound, and is not in the result.
    """
    spec = pod.get("spec") or {}
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    running = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    running += [c for c in inits if c.get("restartPolicy") == "Always"]

    def limits(container: Mapping[str, Any]) -> ResourceVector:
        return ResourceVector.parse(((container.get("resources") or {}).get("limits")), "resources.limits")

    per = [limits(c) for c in running]
    one_at_a_time = [limits(c) for c in inits if c.get("restartPolicy") != "Always"]
    names = set().union(*per) if per else set()
    return {r: max([sum(lim[r] for lim in per), *(lim[r] for lim in one_at_a_time)])
            for r in names if all(r in lim for lim in per)}


def _converted_requests(pod: Mapping[str, Any]) -> bool:
    """Every container requests at most the conversion's cpu (``1m``) and no memory: a converted pod's (by
    hand, or before), which states its use by its limits only."""
    floor = parse_quantity(CONVERTED_CPU_REQUEST, CPU)
    for container in containers(dict(pod.get("spec") or {})):
        requests = (container.get("resources") or {}).get("requests") or {}
        try:
            if parse_quantity(requests.get(CPU, "0"), CPU) > floor or parse_quantity(requests.get(MEMORY, "0"),
                                                                                      MEMORY) > 0:
                return False
        except InvalidInput:
            return False
    return True


def _demand(pod: Mapping[str, Any]) -> ResourceVector:
    """What an opportunistic pod will use: the demand it states, the rest from its requests or limits.

    The annotation ``stowage.io/demand`` the user wrote is kept as stated; each resource it leaves out
    (or states as 0) comes from the pod's requests (limits where no request), or, when it requests
    nothing, from its limits. That last step covers a pod converted by hand (explicit zero requests): its
    limits are then the only statement of its use, the rule the extender applies to a pod without the
    annotation. A stated amount above what the pod's limits let it use is a contradiction and refused.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    where = f"metadata.annotations[{labels.ANN_DEMAND!r}]"
    raw = annotations.get(labels.ANN_DEMAND)
    stated = (tracked(parse_checked(lambda: labels.parse_demand(raw, where)))
              if labels.ANN_DEMAND in annotations else ResourceVector())
    resources = "spec.containers[*].resources"
    derived = {k: v for k, v in tracked(parse_checked(lambda: pod_demand(pod))).items() if v > 0}
    if not derived or _converted_requests(pod):
        derived = {k: v for k, v in tracked(parse_checked(lambda: container_limits(pod))).items() if v > 0}
    demand = ResourceVector({**derived, **stated.as_dict()})
    if not demand:
        raise IntentError(resources, "no requests and no limits", NO_DEMAND)
    bounds = parse_checked(lambda: _limit_bounds(pod))
    over = [f"{r}: demand {format_quantity(v, r)}, limit {format_quantity(bounds[r], r)}"
            for r, v in sorted(stated.items()) if r in bounds and v > bounds[r]]
    if over:
        raise IntentError(where, annotations[labels.ANN_DEMAND],
                          f"no resource above what the pod's limits let it use ({'; '.join(over)}): a demand "
                          "it can never reach misplaces it; lower the demand or raise the containers' limits")
    return demand


#: The cpu request every container of a converted pod keeps (:func:`convert_opportunistic`).
CONVERTED_CPU_REQUEST = "1m"


def _limited(spec: Mapping[str, Any]) -> bool:
    """Some container limits cpu or memory above zero: the pod is Burstable with zero requests already."""
    for container in containers(dict(spec)):
        limits = (container.get("resources") or {}).get("limits") or {}
        for r in (CPU, MEMORY):
            try:
                if r in limits and parse_quantity(limits[r], r) > 0:
                    return True
            except InvalidInput:
                continue
    return False


def _above(value: Any, resource: str, floor: float = 0.0) -> bool:
    try:
        return value is not None and parse_quantity(value, resource) > floor
    except InvalidInput:
        return False


def _original_requests(spec: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Each container's cpu and memory requests as the API server would store them unconverted: the request,
    else the limit (Kubernetes defaults a missing request to the limit), else none. A request at or below the
    conversion's own (a pod converted by hand: cpu 0 or 1m, memory 0) counts as none, as :func:`_demand` reads
    it. By container name, for ``stowage.io/requests`` (what a promotion restores)."""
    floor = {CPU: parse_quantity(CONVERTED_CPU_REQUEST, CPU), MEMORY: 0.0}
    out: dict[str, dict[str, str]] = {}
    for container in spec.get("containers") or []:
        if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
            continue
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        kept = {}
        for r in (CPU, MEMORY):
            if _above(requests.get(r), r, floor[r]):
                kept[r] = str(requests[r])
            elif _above(limits.get(r), r):
                kept[r] = str(limits[r])
        out[container["name"]] = kept
    return out


def convert_opportunistic(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod, converted to run on harvested capacity (a deep copy; ``pod`` is not changed).

    Exactly as docs/operator.md says: every container's (and init container's) cpu and memory requests
    become an explicit ``"0"`` (an absent key would be defaulted to the limit), or cpu ``"1m"`` in a pod
    that limits neither cpu nor memory anywhere (below), limits stay; annotation ``stowage.io/requests``
    keeps each container's cpu and memory requests from before (:func:`_original_requests`), which a
    promotion restores in place (``stowage.operator.promotion``);
    the first container requests and is limited to ``stowage.io/harvested: "1"`` (routes the pod
    through the extender's harvest check); annotation ``stowage.io/demand`` holds the demand the pod
    states, completed from its original requests (limits where no request), as JSON quantities
    (:func:`_demand`); ``priorityClassName:
    stowage-opportunistic`` with ``priority`` and ``preemptionPolicy`` removed (the Priority
    admission plugin fills them in again from the class, and refuses values that disagree with it);
    label ``stowage.io/class: opportunistic``.

    Why ``1m`` there: a pod's QoS class can never change, and a BestEffort pod (no cpu or memory request or
    limit above zero in any container) cannot gain requests by an in-place resize (KEP-1287). A pod with a
    limit stays Burstable at zero requests; one with only requests would turn BestEffort at ``"0"`` and could
    never be promoted, so its cpu requests become ``1m``: every converted pod is Burstable. The kernel sees no
    difference: the kubelet gives a cpu request of 0 or 1m the same cpu weight (it clamps shares to their
    minimum, 2). kube-scheduler does: it counts one millicore per container, so such a pod does not fit a node
    whose cpu requests are already at exactly 100 % of its allocatable (``1m`` only where needed keeps that
    to the pods without limits).
    The extended resource ``stowage.io/harvested: 1`` stays for the pod's life: extended resources cannot be
    resized in place.

    Raises :class:`IntentError` when the pod states no demand and has no requests and no limits (it
    would fit anywhere), or states a demand above its limits.
    """
    out = copy.deepcopy(dict(pod))
    demand = _demand(out)
    meta = child_object(out, "metadata")
    child_object(meta, "labels")[labels.LABEL_CLASS] = labels.PodClass.OPPORTUNISTIC.value
    annotations = child_object(meta, "annotations")
    annotations[labels.ANN_DEMAND] = json.dumps(demand.as_quantities())
    spec = child_object(out, "spec")
    annotations[labels.ANN_REQUESTS] = json.dumps(_original_requests(spec), sort_keys=True)
    cpu = "0" if _limited(spec) else CONVERTED_CPU_REQUEST
    for container in containers(spec):
        requests = child_object(child_object(container, "resources"), "requests")
        requests[CPU] = cpu
        requests[MEMORY] = "0"
    first = (spec.get("containers") or [None])[0]
    if isinstance(first, dict):
        resources = child_object(first, "resources")
        child_object(resources, "requests")[labels.HARVEST_RESOURCE] = "1"
        child_object(resources, "limits")[labels.HARVEST_RESOURCE] = "1"
    spec["priorityClassName"] = labels.OPPORTUNISTIC_PRIORITY_CLASS
    spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
    return out


def strip_harvest_resource(spec: dict[str, Any]) -> None:
    """Only a converted pod requests ``stowage.io/harvested``; a user's own request of it goes."""
    for container in containers(spec):
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            if isinstance(resources.get(part), dict):
                resources[part].pop(labels.HARVEST_RESOURCE, None)
