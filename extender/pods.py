"""The pod being scheduled, as the extender needs it: ours or not, class, demand, data nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from stowage import labels
from stowage.errors import IntentError
from stowage.kube.records import container_limits, pod_key, tracked
from stowage.prom import use_key
from stowage.resources import ResourceVector, pod_demand

__all__ = ["PodRequest", "parse_pod"]


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A parsed pod. ``demand`` is its requests (regular) or real demand (opportunistic), plus bandwidth."""

    key: str
    name: str
    ours: bool
    opportunistic: bool
    demand: ResourceVector
    bandwidth: ResourceVector
    data_nodes: frozenset[str]
    queue: str | None
    use_key: tuple[str, str] = ("", "")
    """Its task group's key in the use seen by Prometheus (``prom.use_key``): disk and network are packed by it."""

    def demand_array(self, resources: tuple[str, ...]) -> np.ndarray:
        return self.demand.to_array(resources)

    def missing_resources(self, resources: tuple[str, ...]) -> list[str]:
        """Resources the pod needs that no node in the model offers."""
        return sorted(r for r, v in self.demand.items() if v > 0 and r not in resources)


def parse_pod(pod: Mapping[str, Any]) -> PodRequest:
    """Raises :class:`stowage.errors.InvalidInput` naming the bad label/annotation/quantity.

    Only pods with ``spec.schedulerName: stowage-scheduler`` are parsed in full; for
    the others nothing beyond the name is read, so they can never be rejected.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    name = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    if spec.get("schedulerName") != labels.SCHEDULER_NAME:
        return PodRequest(pod_key(pod), name, False, False, ResourceVector(), ResourceVector(), frozenset(), None)
    intent = labels.pod_intent(pod)
    requests = tracked(pod_demand(pod))
    demand = requests
    if intent.is_opportunistic:
        # the webhook's annotation; without it, the limits (its requests are explicit zeros)
        demand = tracked(intent.demand) if intent.demand is not None else requests.max(tracked(container_limits(pod)))
        if not any(v > 0 for v in demand.values()):
            # Zero demand fits every node's harvestable capacity, however full: refuse to guess.
            raise IntentError(
                f"metadata.annotations[{labels.ANN_DEMAND!r}]",
                "(absent)" if intent.demand is None else dict(intent.demand.items()),
                "an opportunistic pod must state what it will use: set resources.requests or "
                "resources.limits (cpu, memory) on its containers, or the stowage.io/demand annotation, "
                'e.g. {"cpu": "1", "memory": "2Gi"}',
            )
    return PodRequest(
        key=pod_key(pod),
        name=name,
        ours=True,
        opportunistic=intent.is_opportunistic,
        demand=demand + intent.bandwidth,
        bandwidth=intent.bandwidth,
        data_nodes=intent.data_nodes,
        queue=intent.queue,
        use_key=use_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""), meta.get("labels") or {}),
    )
