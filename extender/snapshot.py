"""One request's view of the cluster: model rows + utilization samples → the two availabilities.

Built once per request from copies, so the decision code never holds a lock.
Availability per class (DESIGN.md "The policy"), by :mod:`stowage.policy.room`'s rules, the
dispatcher's and the simulator's:

- regular: ``A_reg = allocatable − Σ regular requests`` (policy.harvest.regular_available), and on
  disk/network the declared room ``C − Σ regular pods' declared bandwidth`` (policy.room.bandwidth_room:
  opportunistic pods reserve none);
- opportunistic: ``A_opp = T_alloc·C − U − B − S`` (policy.room.harvested_room), where
  ``U`` is NaN (so ``A_opp`` = 0) on every node whose samples are missing or older than
  ``harvest.utilization_stale_after_s`` (policy.room.fresh), ``U`` is without the pods that have
  finished (prom: policy.room.usage_after_departures), and ``S`` counts pods bound or provisionally
  placed within ``harvest.ramp_up_s`` until a sample of their node includes them (the model keeps it
  per node: :meth:`ClusterModel.assumed_for`, given each node's sample time, fetch time − age).

``C`` is the node's ``status.allocatable`` (disk/network from its bandwidth annotations) —
the same basis as the node monitor's contention threshold, which measures the kubepods
cgroup against allocatable (docs/policy.md "Capacity basis"); where the node declares
none, the node monitor's reported capacity stands in.

Most of this changes only when the model or the utilization snapshot does, so
:class:`Snapshots` keeps a :class:`StateTable` of every node's rows, rebuilt when the
model's ``version`` or the utilization snapshot changes, and a request only gathers
its rows from it. ``A_opp`` is computed per table with ``S = 0``; each request then
recomputes, with the policy function, only the rows where its assumed set ``S`` is
non-zero (a few: pods bound or placed in the last ``ramp_up_s`` and not in a sample yet).
Freshness moves with the clock, so the table's fresh mask is recomputed per request and
``U``/``A_opp`` are rebuilt when it changes.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from functools import cached_property

import numpy as np
from stowage.extender.pods import PodRequest

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel, ModelTable
from stowage.kube.records import PodRecord
from stowage.policy import harvest, room, use_estimates
from stowage.prom import Utilization, UtilizationSnapshot, use_key
from stowage.resources import DISK, NETWORK

__all__ = ["ScoringView", "Snapshot", "Snapshots", "StateTable", "take"]


class StateTable:
    """Every node's rows for one model ``version`` and one utilization snapshot (row = model row).

    The last row is the sentinel for names the model does not know: zero, harvest
    disabled, no samples.
    """

    def __init__(self, table: ModelTable, current: UtilizationSnapshot, settings: StowageSettings,
                 bandwidth_pods: Sequence[PodRecord] = ()) -> None:
        self.model = table
        self.current = current
        self.resources = table.resources
        self.stale_after_s = settings.harvest.utilization_stale_after_s
        # ages as of the fetch; a request adds the time since (UtilizationSnapshot.lookup_rows)
        self.samples = current.lookup_rows(table.joined, table.resources, current.fetched_at_s)
        self.t_alloc = settings.harvest.t_alloc.array(table.resources)
        self.capacity = np.where(table.allocatable > 0, table.allocatable, self.samples.capacity)
        self.regular_available = harvest.regular_available(table.allocatable, table.regular_requests)
        # Only regular pods reserve declared bandwidth (policy.room.bandwidth_room); read on disk/network only.
        # Each reserves its task group's estimate (policy.use_estimates), not its declaration.
        self.estimates = settings.estimates
        self.bandwidth = np.array([r in (DISK, NETWORK) for r in table.resources], dtype=bool)
        self.bandwidth_allocated = table.regular_requests
        if current.use_peaks and bandwidth_pods and self.bandwidth.any():
            self.bandwidth_allocated = self._reserved(table, bandwidth_pods)
        # Each model row's latest sample time (Unix seconds; NaN: none): which recent pods it includes.
        sampled = self.samples.sampled_at_s
        self.sampled_at = sampled if sampled is not None else np.full(self.samples.present.shape[0], np.nan)
        self.period_s = settings.contention.sample_interval_s
        self._fresh: np.ndarray | None = None
        self.usage = np.zeros(0)
        self.harvestable_unassumed = np.zeros(0)
        self._lock = threading.Lock()

    def estimated(self, demand: np.ndarray, keys: Sequence[tuple[str, str]]) -> np.ndarray:
        """(K, R) ``demand`` rows with disk and network estimated from the use seen of each row's task group
        (``keys``: ``prom.use_key``), by ``policy.use_estimates``: the dispatcher's rule."""
        peak = np.full(demand.shape, np.nan)
        for k, key in enumerate(keys):
            for r, v in (self.current.use_peak(key) or {}).items():
                if r in self.resources:
                    peak[k, self.resources.index(r)] = v
        ev = use_estimates.UseSeen(declared=demand, peak=peak, history=np.full_like(peak, np.nan))
        return use_estimates.estimate(ev, self.bandwidth, self.estimates).demand

    def _reserved(self, table: ModelTable, pods: Sequence[PodRecord]) -> np.ndarray:
        """``regular_requests`` with each bandwidth pod's declaration replaced by its estimate."""
        rows = np.array([table.index.get(p.node, -1) for p in pods], dtype=np.int64)
        declared = np.array([p.demand.to_array(table.resources) for p in pods]).reshape(len(pods), -1)
        estimated = self.estimated(declared, [use_key(p.namespace, p.name, p.labels) for p in pods])
        lowered = np.zeros_like(table.regular_requests)
        keep = rows >= 0
        np.add.at(lowered, rows[keep], (declared - estimated)[keep])
        return np.maximum(table.regular_requests - lowered, 0.0)

    def fresh_after(self, elapsed_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fresh, U, A_opp with S = 0)`` for all rows, ``elapsed_s`` after the fetch.

        ``U`` and ``A_opp`` are recomputed only when the fresh mask changed since the last call.
        """
        if self.samples.error is not None:
            fresh = np.zeros(self.samples.present.shape[0], dtype=bool)
        else:
            fresh = room.fresh(self.samples.present, self.samples.age_s + elapsed_s, self.stale_after_s)
        with self._lock:
            if self._fresh is None or not np.array_equal(fresh, self._fresh):
                usage = np.where(fresh[:, None], self.samples.usage, np.nan)
                a_opp = room.harvested_room(self.capacity, usage, fresh, self.samples.blocked, np.zeros_like(usage),
                                            self.t_alloc, self.model.harvest_enabled)
                self._fresh, self.usage, self.harvestable_unassumed = fresh, usage, a_opp
            return self._fresh, self.usage, self.harvestable_unassumed


class Snapshot:
    """Arrays (N,R) for the N nodes of a request, in its order; availabilities computed on first use."""

    def __init__(
        self,
        table: StateTable,
        names: Sequence[str],
        rows: np.ndarray,
        positions: np.ndarray,
        assumed: np.ndarray,
        settings: StowageSettings,
        elapsed_s: float,
    ) -> None:
        self.names = names
        self.rows = rows  # (N,) the model row of each node (−1: unknown)
        self.assumed = assumed  # ``S`` (N,R), pods not in a sample yet (policy.room); zero on most nodes
        self.settings = settings
        self.resources = table.resources
        self.stale_after_s = settings.harvest.utilization_stale_after_s
        self.t_alloc = table.t_alloc
        self.samples_error = table.samples.error
        self._table = table
        self._positions = positions  # (N,) rows of ``table`` (its sentinel for unknown names)
        self._elapsed_s = elapsed_s
        self._state = table.fresh_after(elapsed_s)

    def packed_demand(self, pod: PodRequest) -> np.ndarray:
        """(R,) ``pod``'s demand as it is packed: disk and network by its task group's estimated use."""
        demand = pod.demand_array(self.resources)
        if not self._table.current.use_peaks or not demand[self._table.bandwidth].any():
            return demand
        return self._table.estimated(demand[None, :], [pod.use_key])[0]

    def subset(self, positions: np.ndarray, names: Sequence[str]) -> ScoringView:
        """The rows at ``positions``, indexed lazily: prioritize reuses filter's snapshot this way."""
        return ScoringView(self, positions, names)

    @property
    def index_version(self) -> int:
        """The model's node-index version the rows belong to."""
        return self._table.model.index_version

    # Rows are gathered from the table only when a check asks for them.

    @cached_property
    def known(self) -> np.ndarray:
        """(N,) False for names the model does not know."""
        return self.rows >= 0

    @cached_property
    def harvest_enabled(self) -> np.ndarray:
        """(N,) False on nodes labelled ``stowage.io/harvest: "false"`` (and unknown ones)."""
        return self._table.model.harvest_enabled[self._positions]

    @cached_property
    def present(self) -> np.ndarray:
        """(N,) True where Prometheus has usage samples for the node."""
        return self._table.samples.present[self._positions]

    @cached_property
    def age_s(self) -> np.ndarray:
        """(N,) age of the node's oldest usage sample now (inf where absent)."""
        return self._table.samples.age_s[self._positions] + self._elapsed_s

    @cached_property
    def blocked(self) -> np.ndarray:
        """``B`` (N,R): capacity held back after contention."""
        return self._table.samples.blocked[self._positions]

    @cached_property
    def declared_capacity(self) -> np.ndarray:
        """(N,R) what the node declares (Kubernetes capacity, bandwidth annotations); 0 where undeclared."""
        return self._table.model.capacity[self._positions]

    @cached_property
    def fresh(self) -> np.ndarray:
        """(N,) True where the node has utilization samples younger than the staleness limit."""
        return self._state[0][self._positions]

    @cached_property
    def contended(self) -> np.ndarray:
        """(N,R) sustained contention reported by the node monitor, on fresh nodes only."""
        return self._table.samples.contention[self._positions] & self.fresh[:, None]

    @cached_property
    def capacity(self) -> np.ndarray:
        """``C``: the node's allocatable, or the node monitor's capacity where Kubernetes declares none."""
        return self._table.capacity[self._positions]

    @cached_property
    def usage(self) -> np.ndarray:
        """``U`` with NaN on nodes without fresh samples (policy: NaN usage harvests nothing)."""
        return self._state[1][self._positions]

    @cached_property
    def harvestable(self) -> np.ndarray:
        """``A_opp`` (N,R); zero on nodes labelled ``stowage.io/harvest: "false"``.

        The table's ``A_opp`` with ``S = 0``, except on the nodes with recent pods, which
        :func:`policy.room.harvested_room` computes again with their ``S``.
        """
        a_opp = self._state[2][self._positions]
        rows = np.flatnonzero(self.assumed.any(axis=1))
        if rows.size:
            at = self._positions[rows]
            a_opp[rows] = room.harvested_room(
                self._table.capacity[at], self._state[1][at], self._state[0][at], self._table.samples.blocked[at],
                self.assumed[rows], self.t_alloc, self._table.model.harvest_enabled[at],
            )
        return a_opp

    @cached_property
    def regular_available(self) -> np.ndarray:
        """``A_reg`` (N,R)."""
        return self._table.regular_available[self._positions]

    @cached_property
    def bandwidth_allocated(self) -> np.ndarray:
        """(N,R) what the regular pods on the node reserve: their estimated use, at most what they declared (only
        disk/network columns are meaningful); opportunistic pods reserve no declared bandwidth."""
        return self._table.bandwidth_allocated[self._positions]

    @cached_property
    def bandwidth_free(self) -> np.ndarray:
        """(N,R) the room a regular pod's disk and network fit (``policy.room.bandwidth_room``: the declared
        capacity × ``estimates.bandwidth_fill`` less what the regular pods reserve; disk/network columns only)."""
        return room.bandwidth_room(self.declared_capacity, self.bandwidth_allocated,
                                   self.settings.estimates.bandwidth_fill)


class ScoringView:
    """What prioritize needs of a :class:`Snapshot`, for a subset of its nodes; rows taken on first use."""

    def __init__(self, parent: Snapshot, positions: np.ndarray, names: Sequence[str]) -> None:
        self._parent = parent
        self._positions = positions
        self.names = names
        self.resources = parent.resources
        self.settings = parent.settings

    @cached_property
    def rows(self) -> np.ndarray:
        return self._parent.rows[self._positions]

    def packed_demand(self, pod: PodRequest) -> np.ndarray:
        return self._parent.packed_demand(pod)

    @property
    def index_version(self) -> int:
        return self._parent.index_version

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

    @cached_property
    def bandwidth_free(self) -> np.ndarray:
        return self._parent.bandwidth_free[self._positions]


class Snapshots:
    """Request snapshots over one model and utilization feed, sharing a :class:`StateTable` between requests.

    The table is rebuilt when the model's ``version`` or the utilization snapshot object
    changes; the rows of a request's name list are remembered for the next equal list
    (kube-scheduler sends the same node names pod after pod).
    """

    def __init__(self, model: ClusterModel, utilization: Utilization, settings: StowageSettings) -> None:
        self.model = model
        self.utilization = utilization
        self.settings = settings
        self._table: StateTable | None = None
        self._names: tuple[int, Sequence[str], np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    def table(self) -> StateTable:
        """The current table, rebuilt if the model or the utilization snapshot moved on."""
        current = self.utilization.current
        with self._lock:
            table = self._table
            if table is None or table.current is not current or table.model.version != self.model.version:
                table = self._table = StateTable(self.model.table((current, current.index)), current, self.settings,
                                                 self.model.bandwidth_pods() if current.use_peaks else ())
            return table

    def _rows(self, table: StateTable, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(model rows with −1 for unknown names, table rows with the sentinel for them)."""
        cached = self._names
        version = table.model.index_version
        if cached is not None and cached[0] == version and (cached[1] is names or cached[1] == names):
            return cached[2], cached[3]
        index = table.model.index
        rows = np.fromiter(map(index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
        positions = np.where(rows >= 0, rows, table.model.sentinel)
        self._names = (version, list(names), rows, positions)
        return rows, positions

    def take(self, names: Sequence[str], *, exclude_pod: str | None = None) -> Snapshot:
        """Copy what the request needs out of the table, the recent pods and the clock."""
        table = self.table()
        rows, positions = self._rows(table, names)
        # Columns are only ever appended, so a resource named since the table was built is sliced off.
        assumed = self.model.assumed_for(
            rows, exclude_pod=exclude_pod, sampled=(table.model.index_version, table.sampled_at),
            period_s=table.period_s,
        )[:, : len(table.resources)]
        elapsed = max(0.0, self.utilization.clock() - table.current.fetched_at_s)
        return Snapshot(table, names, rows, positions, assumed, self.settings, elapsed)


def take(
    model: ClusterModel,
    utilization: Utilization,
    settings: StowageSettings,
    names: Sequence[str],
    *,
    exclude_pod: str | None = None,
) -> Snapshot:
    """One snapshot without a shared table (built for this call): for occasional readers."""
    return Snapshots(model, utilization, settings).take(names, exclude_pod=exclude_pod)
