"""One request's view of the cluster: model rows + utilization samples → the two availabilities.

Built once per request from copies, so the decision code never holds a lock.
Availability per class (DESIGN.md "The policy"):

- regular: ``A_reg = allocatable − Σ regular requests`` (policy.harvest.regular_available);
- opportunistic: ``A_opp = T_alloc·C − U − B − S`` (policy.harvest.harvestable), where
  ``U`` is NaN (so ``A_opp`` = 0) on every node whose samples are missing or older than
  ``harvest.utilization_stale_after_s``, and ``S`` (policy.harvest.assumed) counts pods
  bound or provisionally placed within ``harvest.ramp_up_s``.

``C`` is the node's Kubernetes capacity (disk/network from its bandwidth annotations);
where the node declares none, the node monitor's measured capacity stands in.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel, NodeView
from stowage.policy import harvest
from stowage.prom import NodeSamples, Utilization

__all__ = ["ScoringView", "Snapshot", "take"]


class Snapshot:
    """Arrays (N,R) for the N nodes of a request, in its order; availabilities computed on first use."""

    def __init__(self, view: NodeView, samples: NodeSamples, settings: StowageSettings, now_s: float) -> None:
        self.view = view
        self.samples = samples
        self.settings = settings
        self.now_s = now_s
        self.names = view.names
        self.resources = view.resources
        self.stale_after_s = settings.harvest.utilization_stale_after_s

    def subset(self, positions: np.ndarray, names: Sequence[str]) -> ScoringView:
        """The rows at ``positions``, indexed lazily: prioritize reuses filter's snapshot this way."""
        return ScoringView(self, positions, names)

    @cached_property
    def declared_capacity(self) -> np.ndarray:
        """(N,R) what the node declares (Kubernetes capacity, bandwidth annotations); 0 where undeclared."""
        return self.view.capacity

    @cached_property
    def fresh(self) -> np.ndarray:
        """(N,) True where the node has utilization samples younger than the staleness limit."""
        if self.samples.error is not None:
            return np.zeros(len(self.names), dtype=bool)
        return self.samples.present & (self.samples.age_s <= self.stale_after_s)

    @cached_property
    def contended(self) -> np.ndarray:
        """(N,R) sustained contention reported by the node monitor, on fresh nodes only."""
        return self.samples.contention & self.fresh[:, None]

    @cached_property
    def capacity(self) -> np.ndarray:
        """``C``: Kubernetes capacity, or measured capacity where Kubernetes declares none."""
        return np.where(self.view.capacity > 0, self.view.capacity, self.samples.capacity)

    @cached_property
    def t_alloc(self) -> np.ndarray:
        return self.settings.harvest.t_alloc.array(self.resources)

    @cached_property
    def usage(self) -> np.ndarray:
        """``U`` with NaN on nodes without fresh samples (policy: NaN usage harvests nothing)."""
        return np.where(self.fresh[:, None], self.samples.usage, np.nan)

    @cached_property
    def assumed(self) -> np.ndarray:
        recent = self.view.recent
        return harvest.assumed(
            recent.demands,
            recent.bound_at_s,
            recent.node_index,
            self.now_s,
            self.settings.harvest.ramp_up_s,
            len(self.names),
        )

    @cached_property
    def harvestable(self) -> np.ndarray:
        """``A_opp`` (N,R); zero on nodes labelled ``stowage.io/harvest: "false"``."""
        a_opp = harvest.harvestable(self.capacity, self.usage, self.samples.blocked, self.assumed, self.t_alloc)
        a_opp[~self.view.harvest_enabled] = 0.0
        return a_opp

    @cached_property
    def regular_available(self) -> np.ndarray:
        """``A_reg`` (N,R)."""
        return harvest.regular_available(self.view.allocatable, self.view.regular_requests)

    @cached_property
    def bandwidth_allocated(self) -> np.ndarray:
        """(N,R) what all pods on the node declared (only disk/network columns are meaningful)."""
        return self.view.regular_requests + self.view.opportunistic_demand


class ScoringView:
    """What prioritize needs of a :class:`Snapshot`, for a subset of its nodes; rows taken on first use."""

    def __init__(self, parent: Snapshot, positions: np.ndarray, names: Sequence[str]) -> None:
        self._parent = parent
        self._positions = positions
        self.names = names
        self.resources = parent.resources
        self.settings = parent.settings

    @cached_property
    def capacity(self) -> np.ndarray:
        return self._parent.capacity[self._positions]

    @cached_property
    def declared_capacity(self) -> np.ndarray:
        return self._parent.declared_capacity[self._positions]

    @cached_property
    def harvestable(self) -> np.ndarray:
        return self._parent.harvestable[self._positions]

    @cached_property
    def regular_available(self) -> np.ndarray:
        return self._parent.regular_available[self._positions]

    @cached_property
    def bandwidth_allocated(self) -> np.ndarray:
        return self._parent.bandwidth_allocated[self._positions]


def take(
    model: ClusterModel,
    utilization: Utilization,
    settings: StowageSettings,
    names: Sequence[str],
    *,
    exclude_pod: str | None = None,
) -> Snapshot:
    """Copy what the request needs out of the model and the latest utilization snapshot."""
    current = utilization.current
    view = model.view(names, exclude_pod=exclude_pod, join=(current, current.index))
    assert view.joined is not None
    samples = current.lookup_rows(view.joined, view.resources, utilization.clock())
    return Snapshot(view, samples, settings, model.now())
