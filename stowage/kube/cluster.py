"""The cluster model: per-node numpy arrays kept up to date by informer events.

Rows are nodes, columns resources (``CORE_RESOURCES`` first, extended resources
appended the first time a node or pod names one). Each pod event adds or subtracts
one pod's contribution to its node's row, so answering a scheduler request is a
dict lookup per node name plus fancy indexing (:meth:`ClusterModel.view`).

Pods bound within ``recent_window_s`` (the harvest ramp-up) are also kept in a
small side table, together with *provisional* placements the extender makes
between its answer and the binding it later sees: both feed the assumed set ``S``
of ``A_opp = T_alloc·C − U − B − S``, each until a sample of its node includes it
(:meth:`ClusterModel.assumed_for` with the nodes' sample times; ``policy.harvest.in_sample``).

One bad object costs only itself: an object that cannot be read at all is left out, one
with an unreadable value is kept with that value as zero (``PodRecord.problem``); either
way it is logged once (not on every relist) and counted (:meth:`ClusterModel.bad_objects`,
``bad_objects_total``: ``stowage_bad_objects_total{kind}``).

Thread-safety: one lock; informer threads write, request handlers read copies.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stowage.errors import InvalidInput
from stowage.kube.recent import RecentSlots
from stowage.kube.records import NodeRecord, PodRecord, node_record, object_name, pod_key, pod_record
from stowage.resources import CORE_RESOURCES, DISK, NETWORK, ResourceVector

__all__ = ["BAD_OBJECT_KINDS", "NODE", "POD", "ClusterModel", "ModelTable", "NodeView"]

log = logging.getLogger(__name__)

#: The kinds of object the model records: label ``kind`` of ``stowage_bad_objects_total``.
POD, NODE = "pod", "node"
BAD_OBJECT_KINDS: tuple[str, ...] = (POD, NODE)

_INITIAL_ROWS = 64


def _guarded(parse: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """``(parse(), None)``, or ``(None, the exception)``: one object's failure must not reach the loop over all."""
    try:
        return parse(), None
    except Exception as exc:  # InvalidInput for a malformed object; anything else is a parsing bug, logged as one
        return None, exc


class _BadObjects:
    """The objects recorded in part or left out, now (kind → key → problem), and how many ever were, per kind.

    An object is logged when it turns bad or its problem changes, and counted when it turns bad: a relist
    that sees it again does neither.
    """

    def __init__(self) -> None:
        self.now: dict[str, dict[str, str]] = {kind: {} for kind in BAD_OBJECT_KINDS}
        self.names: dict[str, dict[str, str]] = {kind: {} for kind in BAD_OBJECT_KINDS}  # key → name, for Events
        self.total: dict[str, int] = dict.fromkeys(BAD_OBJECT_KINDS, 0)

    def note(self, kind: str, key: str, name: str, problem: str | None, error: Exception | None) -> None:
        """Object ``key`` (``name`` in the log) was just recorded with ``problem``, or left out for ``error``."""
        unexpected = error is not None and not isinstance(error, InvalidInput)
        if error is not None:
            problem = f"left out: {error!r}" if unexpected else f"left out: {error}"
        elif problem is not None:
            problem = f"recorded without the values it cannot read: {problem}"
        current = self.now[kind]
        if problem is None:
            self.forget(kind, key)
            return
        if current.get(key) == problem:
            return
        if key not in current:
            self.total[kind] += 1
        current[key] = problem
        self.names[kind][key] = name
        log.warning("%s %s: %s", kind, name, problem, exc_info=error if unexpected else None)

    def keep_only(self, kind: str, keys: set[str]) -> None:
        """After a relist: forget the objects that are gone."""
        current = self.now[kind]
        for key in [k for k in current if k not in keys]:
            self.forget(kind, key)

    def forget(self, kind: str, key: str) -> None:
        self.now[kind].pop(key, None)
        self.names[kind].pop(key, None)


@dataclass(frozen=True, slots=True)
class NodeView:
    """A copy of the model restricted to the nodes of one request, in the request's order.

    Unknown node names have ``known`` False and zero rows.
    """

    names: Sequence[str]
    resources: tuple[str, ...]
    known: np.ndarray  # (N,) bool
    capacity: np.ndarray  # (N,R)
    allocatable: np.ndarray  # (N,R)
    regular_requests: np.ndarray  # (N,R) kube-scheduler's count: regular pods (+ bandwidth), opportunistic requests
    opportunistic_demand: np.ndarray  # (N,R) real demand of opportunistic pods (+ their bandwidth)
    harvest_enabled: np.ndarray  # (N,) bool
    assumed: np.ndarray  # (N,R) the assumed set S: demand of pods placed within recent_window_s
    joined: np.ndarray | None = None  # (N,) row of each node in the index passed as ``join`` (−1: absent)
    rows: np.ndarray | None = None  # (N,) the model's row of each node (−1: unknown); keys adapter caches


@dataclass(frozen=True, slots=True)
class ModelTable:
    """A copy of every node row at one model ``version``, plus a last all-zero row for unknown names.

    Row ``i`` is the model's row ``i`` (``index`` maps names to it); row ``sentinel`` is zero,
    harvest disabled and unjoined, so a request's rows can be gathered without masking.
    """

    version: int
    index_version: int
    index: Mapping[str, int]
    resources: tuple[str, ...]
    capacity: np.ndarray  # (M+1,R)
    allocatable: np.ndarray  # (M+1,R)
    regular_requests: np.ndarray  # (M+1,R)
    opportunistic_demand: np.ndarray  # (M+1,R)
    harvest_enabled: np.ndarray  # (M+1,)
    joined: np.ndarray  # (M+1,) row in the joined index (−1: absent)

    @property
    def sentinel(self) -> int:
        return self.harvest_enabled.shape[0] - 1


class ClusterModel:
    """Nodes and pods as numpy rows; fed by :class:`stowage.kube.informer.Informer` callbacks."""

    def __init__(self, *, recent_window_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self.recent_window_s = float(recent_window_s)
        self._resources: list[str] = list(CORE_RESOURCES)
        self._col: dict[str, int] = {r: i for i, r in enumerate(self._resources)}
        self._index: dict[str, int] = {}
        self._free: list[int] = []
        self._rows = 0
        shape = (_INITIAL_ROWS, len(self._resources))
        self._capacity = np.zeros(shape)
        self._allocatable = np.zeros(shape)
        self._regular = np.zeros(shape)
        self._opportunistic = np.zeros(shape)
        self._harvest = np.zeros(_INITIAL_ROWS, dtype=bool)
        self._nodes: dict[str, NodeRecord] = {}
        self._pods: dict[str, PodRecord] = {}
        self._pods_by_node: dict[str, set[str]] = {}
        self._bandwidth_pods: dict[str, PodRecord] = {}  # regular pods declaring disk or network bandwidth
        self._recent = RecentSlots(len(self._resources))
        self._join_cache: tuple[object, int, np.ndarray] | None = None
        self.index_version = 0  # bumped whenever a node row is added or freed
        self.version = 0  # bumped on every node or pod change (not on assume: recent pods are read per request)
        self.nodes_synced = threading.Event()
        self.pods_synced = threading.Event()
        self._bad = _BadObjects()

    # --- shape management ----------------------------------------------------------------------

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(self._resources)

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self._capacity, self._allocatable, self._regular, self._opportunistic

    def _ensure_columns(self, vectors: Iterable[ResourceVector]) -> None:
        new = sorted({name for v in vectors for name in v if name not in self._col})
        if not new:
            return
        for name in new:
            self._col[name] = len(self._resources)
            self._resources.append(name)
        self._recent.widen(len(self._resources))
        self.version += 1
        pad = ((0, 0), (0, len(new)))
        self._capacity, self._allocatable, self._regular, self._opportunistic = (np.pad(a, pad) for a in self._arrays())

    def _row_of(self, vector: ResourceVector) -> np.ndarray:
        row = np.zeros(len(self._resources))
        for name, amount in vector.items():
            row[self._col[name]] = amount
        return row

    def _alloc_row(self, name: str) -> int:
        if self._free:
            row = self._free.pop()
        else:
            row = self._rows
            self._rows += 1
            if row >= self._capacity.shape[0]:
                grow = ((0, self._capacity.shape[0]), (0, 0))
                self._capacity, self._allocatable, self._regular, self._opportunistic = (
                    np.pad(a, grow) for a in self._arrays()
                )
                self._harvest = np.pad(self._harvest, (0, grow[0][1]))
        self._index[name] = row
        self.index_version += 1
        return row

    # --- nodes ---------------------------------------------------------------------------------

    def _put_node(self, record: NodeRecord) -> None:
        self._ensure_columns((record.capacity, record.allocatable))
        row = self._index.get(record.name)
        if row is None:
            row = self._alloc_row(record.name)
            self._regular[row] = 0.0
            self._opportunistic[row] = 0.0
            # Pods may have been seen before their node: add them now.
            for key in self._pods_by_node.get(record.name, ()):
                self._add_pod_to_row(self._pods[key], +1)
        self._nodes[record.name] = record
        self._capacity[row] = self._row_of(record.capacity)
        self._allocatable[row] = self._row_of(record.allocatable)
        self._harvest[row] = record.harvest_enabled

    def _drop_node(self, name: str) -> None:
        row = self._index.pop(name, None)
        self._nodes.pop(name, None)
        if row is None:
            return
        for array in self._arrays():
            array[row] = 0.0
        self._harvest[row] = False
        self._free.append(row)
        self.index_version += 1

    def _note_node(self, name: str, record: NodeRecord | None, error: Exception | None) -> None:
        self._bad.note(NODE, name, name, record.problem if record is not None else None, error)

    def replace_nodes(self, items: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: the model's nodes become exactly these (after a (re)list); unreadable ones are left out."""
        parsed = [(object_name(item), *_guarded(lambda item=item: node_record(item))) for item in items]
        with self._lock:
            keep = {record.name for _, record, _ in parsed if record is not None}
            for name in [n for n in self._index if n not in keep]:
                self._drop_node(name)
            self._bad.keep_only(NODE, {name for name, _, _ in parsed})
            for name, record, error in parsed:
                self._note_node(name, record, error)
                if record is not None:
                    self._put_node(record)
            self.version += 1
        self.nodes_synced.set()

    def apply_node_event(self, event_type: str, node: Mapping[str, Any]) -> None:
        """ADDED / MODIFIED / DELETED from a watch; a node that cannot be read is dropped until it can."""
        name = object_name(node)
        record, error = (None, None) if event_type == "DELETED" else _guarded(lambda: node_record(node))
        with self._lock:
            if event_type == "DELETED":
                self._bad.forget(NODE, name)
            else:
                self._note_node(name, record, error)
            if record is None:
                self._drop_node(name)
            else:
                self._put_node(record)
            self.version += 1

    # --- pods ----------------------------------------------------------------------------------

    def _add_pod_to_row(self, pod: PodRecord, sign: int) -> None:
        row = self._index.get(pod.node)
        if row is None:
            return
        targets = [(self._regular, pod.demand)]
        if pod.opportunistic:  # its demand is harvested; kube-scheduler still counts its requests (1m cpu)
            targets = [(self._opportunistic, pod.demand), (self._regular, pod.requests)]
        for target, vector in targets:
            target[row] += sign * self._row_of(vector)
            if sign < 0:
                np.maximum(target[row], 0.0, out=target[row])  # float drift must never go negative

    def _remove_pod(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is None:
            return
        self._add_pod_to_row(old, -1)
        self._bandwidth_pods.pop(key, None)
        peers = self._pods_by_node.get(old.node)
        if peers is not None:
            peers.discard(key)
            if not peers:
                del self._pods_by_node[old.node]
        if key in self._recent and not self._recent.is_provisional(key):
            self._recent.remove(key)

    def _put_pod(self, pod: Mapping[str, Any], now: float) -> None:
        key = pod_key(pod)
        record, error = _guarded(lambda: pod_record(pod, now))
        self._remove_pod(key)
        self._bad.note(POD, key, object_name(pod), record.problem if record is not None else None, error)
        if record is None:  # occupies no node, or cannot be read: left out
            return
        self._ensure_columns((record.demand, record.requests))
        self._pods[key] = record
        self._pods_by_node.setdefault(record.node, set()).add(key)
        self._add_pod_to_row(record, +1)
        if not record.opportunistic and (record.demand.get(DISK, 0.0) > 0 or record.demand.get(NETWORK, 0.0) > 0):
            self._bandwidth_pods[key] = record
        # A binding replaces any provisional placement; it counts from when it was bound.
        self._recent.remove(key)
        if now - record.bound_at_s < self.recent_window_s:
            self._recent.put(
                key,
                record.node,
                self._index.get(record.node, -1),
                self._row_of(record.demand),
                record.bound_at_s,
                provisional=False,
                started_at_s=record.start_time_s,
            )

    def replace_pods(self, items: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: the model's pods become exactly these."""
        now = self._clock()
        with self._lock:
            items = list(items)
            keep = {pod_key(p) for p in items}
            for key in [k for k in self._pods if k not in keep]:
                self._remove_pod(key)
            self._bad.keep_only(POD, keep)
            for pod in items:
                self._put_pod(pod, now)
            self.version += 1
        self.pods_synced.set()

    def apply_pod_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """ADDED / MODIFIED / DELETED from a watch."""
        now = self._clock()
        with self._lock:
            if event_type == "DELETED":
                key = pod_key(pod)
                self._remove_pod(key)
                self._recent.remove(key)
                self._bad.forget(POD, key)
            else:
                self._put_pod(pod, now)
            self.version += 1

    def assume(self, key: str, node: str, demand: ResourceVector) -> None:
        """Count ``demand`` on ``node`` now, before the binding is seen (replaced when it is).

        The extender calls this for the node it expects an opportunistic pod to land on,
        so a second pod right behind it cannot take the same harvestable slot.
        """
        with self._lock:
            if key in self._pods:
                return  # already bound: the informer's record is authoritative
            self._ensure_columns((demand,))
            self._recent.put(
                key, node, self._index.get(node, -1), self._row_of(demand), self._clock(), provisional=True
            )

    def pod(self, key: str) -> PodRecord | None:
        with self._lock:
            return self._pods.get(key)

    def pods(self) -> list[PodRecord]:
        with self._lock:
            return list(self._pods.values())

    def bandwidth_pods(self) -> list[PodRecord]:
        """The bound regular pods that declare disk or network bandwidth (what ``policy.use_estimates`` re-estimates:
        usually few, so a reader need not walk every pod)."""
        with self._lock:
            return list(self._bandwidth_pods.values())

    def node(self, name: str) -> NodeRecord | None:
        with self._lock:
            return self._nodes.get(name)

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._index)

    def now(self) -> float:
        """The model's clock (Unix seconds), the one binding times are measured on."""
        return self._clock()

    def bad_objects(self) -> dict[str, dict[str, str]]:
        """The objects the model holds in part or leaves out now: kind (``POD``, ``NODE``) → key → problem."""
        with self._lock:
            return {kind: dict(found) for kind, found in self._bad.now.items()}

    def bad_pods(self) -> list[tuple[str, str, str]]:
        """The pods the model holds in part or leaves out now: (key, ``namespace/name``, problem) each; the key is
        the uid (``records.pod_key``)."""
        with self._lock:
            return [(key, self._bad.names[POD].get(key, ""), problem) for key, problem in self._bad.now[POD].items()]

    @property
    def bad_objects_total(self) -> dict[str, int]:
        """How many objects turned bad since start, per kind (each once, however often it is relisted)."""
        with self._lock:
            return dict(self._bad.total)

    @property
    def synced(self) -> bool:
        return self.nodes_synced.is_set() and self.pods_synced.is_set()

    # --- reading -------------------------------------------------------------------------------

    def _assumed_for(
        self, rows: np.ndarray, exclude: str | None, sampled: tuple[int, np.ndarray] | None = None,
        period_s: float = 1.0,
    ) -> np.ndarray:
        """``S`` (N,R) on the model ``rows`` of a request (−1: unknown), from the recent pods' ledger."""
        recent = self._recent
        now = self._clock()
        recent.expire(now, self.recent_window_s)
        recent.resolve_rows(self._index, self.index_version, now, self.recent_window_s)
        if sampled is not None and sampled[0] == self.index_version:  # rows of another index: drop nothing
            recent.drop_included(sampled[1], period_s)
        return recent.assumed_on(rows, exclude)[:, : len(self._resources)]

    def _joined(self, rows: np.ndarray, known: np.ndarray, join: tuple[object, Mapping[str, int]]) -> np.ndarray:
        """Rows of another name index (e.g. a utilization snapshot) for ``rows``, via a cached translation."""
        owner, index = join
        cached = self._join_cache
        if cached is None or cached[0] is not owner or cached[1] != self.index_version:
            table = np.full(max(self._rows, 1), -1, dtype=np.int64)
            for name, row in self._index.items():
                table[row] = index.get(name, -1)
            self._join_cache = cached = (owner, self.index_version, table)
        return np.where(known, cached[2][np.where(known, rows, 0)], -1)

    def table(self, join: tuple[object, Mapping[str, int]]) -> ModelTable:
        """Every row (copies) at the current ``version``, joined to another name index (see :meth:`view`)."""
        with self._lock:
            m = self._rows

            def copy(a: np.ndarray) -> np.ndarray:
                out = np.zeros((m + 1, *a.shape[1:]), dtype=a.dtype)
                out[:m] = a[:m]
                return out

            everything = np.arange(m, dtype=np.int64)
            joined = np.full(m + 1, -1, dtype=np.int64)
            joined[:m] = self._joined(everything, np.ones(m, dtype=bool), join)
            return ModelTable(
                version=self.version,
                index_version=self.index_version,
                index=dict(self._index),
                resources=tuple(self._resources),
                capacity=copy(self._capacity),
                allocatable=copy(self._allocatable),
                regular_requests=copy(self._regular),
                opportunistic_demand=copy(self._opportunistic),
                harvest_enabled=copy(self._harvest),
                joined=joined,
            )

    def assumed_for(
        self,
        rows: np.ndarray,
        *,
        exclude_pod: str | None = None,
        sampled: tuple[int, np.ndarray] | None = None,
        period_s: float = 1.0,
    ) -> np.ndarray:
        """The assumed set ``S`` (N,R) on the model ``rows`` of a request (−1: unknown → 0), in request order.

        ``S`` is the demand of pods bound or provisionally placed less than ``recent_window_s``
        ago (:func:`stowage.policy.harvest.assumed`); ``exclude_pod`` is left out. ``sampled`` =
        ``(index_version, sampled_at_s)`` gives each model row's latest sample time (Unix seconds, NaN: none), at
        that node-index version: a pod whose containers started a sampling period (``period_s``) or more before
        its node's sample is in ``U`` and leaves ``S`` for good (:func:`stowage.policy.harvest.in_sample`).
        """
        with self._lock:
            return self._assumed_for(rows, exclude_pod, sampled, period_s)

    def view(
        self,
        names: Sequence[str],
        *,
        exclude_pod: str | None = None,
        join: tuple[object, Mapping[str, int]] | None = None,
    ) -> NodeView:
        """The rows of ``names`` (copies), in that order; ``exclude_pod`` is left out of ``assumed``.

        ``join=(owner, {name: row})`` also returns each node's row in that other index
        (``NodeView.joined``); the translation is cached per ``owner`` object and node set.
        """
        with self._lock:
            index = self._index
            rows = np.fromiter(map(index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
            known = rows >= 0
            safe = np.where(known, rows, 0)

            def take(a: np.ndarray) -> np.ndarray:
                out = a[safe]
                out[~known] = 0
                return out

            return NodeView(
                names=names,
                resources=tuple(self._resources),
                known=known,
                capacity=take(self._capacity),
                allocatable=take(self._allocatable),
                regular_requests=take(self._regular),
                opportunistic_demand=take(self._opportunistic),
                harvest_enabled=take(self._harvest),
                assumed=self._assumed_for(rows, exclude_pod),
                joined=None if join is None else self._joined(rows, known, join),
                rows=rows,
            )

    def totals(self) -> tuple[tuple[str, ...], np.ndarray]:
        """Cluster-wide allocatable per resource, for fair shares."""
        with self._lock:
            rows = np.fromiter(self._index.values(), dtype=np.int64, count=len(self._index))
            return tuple(self._resources), self._allocatable[rows].sum(axis=0)
