"""A fake kubelet (like kwok) for a real API server: Nodes, Leases, pod phases, kubelet-shaped cgroup trees.

Usage::

    with FakeKubelet(cp.api(), cgroup_root=tmp_path / "cgroup") as kubelet:
        kubelet.add_nodes(3)                                  # fake-node-0..2: Ready, capacity > allocatable
        ... create pods; the scheduler binds them ...         # Pending → Running → Succeeded / Failed
        kubelet.set_usage("my-pod", {"cpu": 2.0, "memory": 3 << 30})
        CgroupReader: kubelet.cgroup_dir("fake-node-0"), kubelet.proc_dir("fake-node-0")

What it does, per node it registered (:meth:`FakeKubelet.add_nodes`):

- creates the Node, then sets ``status`` (capacity, allocatable, a ``Ready`` condition, addresses
  127.0.0.1, nodeInfo) through the ``status`` subresource, and refreshes the conditions' heartbeat;
- creates and renews a ``coordination.k8s.io/v1`` Lease in ``kube-node-lease`` (``renewTime`` sent as raw
  JSON with microseconds: the typed client drops them and the API server then rejects the Lease);
- watches pods bound anywhere (field selector ``spec.nodeName!=``; a selector cannot name a set of nodes)
  and keeps those on its nodes; a ``410 Gone`` or a broken watch leads to a relist, with bounded backoff;
- moves a bound pod Pending → Running after ``start_delay_s`` (podIP ``10.244.x.y`` unique in this
  process, hostIP, Initialized/ContainersReady/Ready conditions, running container statuses), then to
  Succeeded once its work is done, or to Failed when ``fake-kubelet.stowage.io/exit-code`` is non-zero.
  Status goes through the ``status`` subresource as a strategic merge patch, so conditions other writers
  added (``DisruptionTarget``) stay;
- **progress under contention**: a pod's work is its ``fake-kubelet.stowage.io/run-seconds`` annotation at full
  speed (absent: runs forever). Every usage tick (brought forward when a pod starts, ends or changes class) it
  advances by the elapsed time × its rate, and the rate is
  the simulator's contention model (:func:`stowage.sim.cluster.contention_table`, through
  :func:`progress_rates`) on its node given every running pod's usage: cpu goes to regular pods first and
  opportunistic pods (``stowage.io/class: opportunistic``, the minimum ``cpu.weight``) get what is left;
  disk and network are shared in proportion; memory is not a slowdown. Capacity is the node's allocatable
  (bandwidth: the node's ``stowage.io/*-bandwidth`` annotations; none declared, never short). The finish is
  timed from the work left and the rate, so a pod that is never slowed runs exactly its run-seconds.
  ``contention=False`` runs every pod at full speed. What each pod did is kept (:meth:`FakeKubelet.outcomes`);
- **in-place resize, as a v1.30 kubelet with ``InPlacePodVerticalScaling``**: container statuses carry
  ``allocatedResources`` and ``resources``; when a running pod's spec resources differ from what was last
  actuated, :func:`resize_actuation` decides (``Infeasible`` above the node's allocatable, ``Deferred`` while
  the other pods' allocations leave no room, else actuate): ``status.resize`` goes ``InProgress``, then the
  statuses take the spec's resources and ``status.resize`` is cleared. A deferred resize is tried again every
  usage tick;
- finishes graceful deletions (an Eviction API eviction, a ``kubectl delete``): containers terminated
  (exit code 143, phase Failed), then a delete with grace period 0 and a uid precondition;
- writes each running pod's usage into a cgroup v2 tree per node, laid out like the kubelet's systemd
  driver (:class:`stowage.node_monitor.synthetic.SyntheticNode`, the same writer the node-monitor tests
  use): ``<cgroup_root>/<node>/kubepods.slice/...``, and ``<cgroup_root>/_proc/<node>/net/dev``
  (``_`` cannot occur in a node name). A pod that uses network gets, at its first traffic, a process as a running
  pod has: a pid in its container cgroup's ``cgroup.procs`` and ``<cgroup_root>/_proc/<node>/<pid>/net/dev``, its own
  network namespace's counters, which the node monitor reads through its ``--proc-root`` in place of
  ``/proc/<pid>/net/dev`` (a ``hostNetwork: true`` pod's process is in the node's namespace: its traffic shows in
  the node's counters only). Usage comes from ``usage_model(node, pod, t)`` every
  ``usage_interval_s`` (the demand-driven usage, as the simulator's node monitor samples it: not the share
  contention leaves the pod); a pod's cgroup is removed when it stops.

Nothing here runs a node-lifecycle controller: Nodes stay Ready whatever their heartbeat.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import json
import logging
import math
import platform
import secrets
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import urllib3
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from numpy.typing import NDArray
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.synthetic import PodNet, PodState, SyntheticNode

from stowage.labels import PodClass, node_bandwidth, pod_class, pod_intent
from stowage.resources import CPU, DISK, MEMORY, NETWORK, ResourceVector, format_quantity, parse_quantity, pod_demand
from stowage.sim.cluster import contention_table

__all__ = [
    "ANN_EXIT_CODE",
    "ANN_RUN_SECONDS",
    "DEFAULT_CAPACITY",
    "PROGRESS_RESOURCES",
    "FakeKubelet",
    "KubeletCounters",
    "NodeSpec",
    "Resize",
    "UsageModel",
    "actuated_fields",
    "container_resources",
    "is_opportunistic",
    "progress_rates",
    "requests_fraction",
    "resize_actuation",
    "usage_demand",
]

log = logging.getLogger("tests.fake_kubelet")

ANN_RUN_SECONDS = "fake-kubelet.stowage.io/run-seconds"
ANN_EXIT_CODE = "fake-kubelet.stowage.io/exit-code"
DEFAULT_CAPACITY: Mapping[str, str] = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "200Gi"}
LEASE_NAMESPACE = "kube-node-lease"
KUBELET_VERSION = "v1.30.14"

UsageModel = Callable[[str, Mapping[str, Any], float], Mapping[str, float]]
"""``(node name, pod object, seconds since the pod started) → {"cpu": cores, "memory": bytes,
"disk": bytes/s, "network": bytes/s}`` (missing keys: 0)."""

_TRANSIENT = frozenset({0, 429, 500, 502, 503, 504})

#: The shortest time between two usage ticks when pods start and end (each brings the next tick forward).
MIN_TICK_GAP_S = 0.1


# --- specs and models -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    """A node to register. ``allocatable`` ``None``: capacity minus a kubelet-like reserve (cpu 500m, memory 2Gi)."""

    name: str
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    allocatable: Mapping[str, str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()

    def resolved_allocatable(self) -> dict[str, str]:
        if self.allocatable is not None:
            return dict(self.allocatable)
        out = dict(self.capacity)
        for resource, reserve in ((CPU, 0.5), (MEMORY, float(2 << 30))):
            if resource in out:
                total = parse_quantity(out[resource])
                out[resource] = format_quantity(total - min(reserve, total / 10), resource)
        return out


def requests_fraction(fraction: float = 0.5, min_cpu: float = 0.01, min_memory: float = 32 << 20) -> UsageModel:
    """The default usage model: ``fraction`` of what the pod asked for, constant over time.

    An opportunistic pod (``stowage.io/class: opportunistic``) uses ``fraction`` of its
    ``stowage.io/demand`` annotation (its requests are zeroed); disk and network come from the
    ``stowage.io/*-bandwidth`` annotations. A pod asking for nothing still uses ``min_cpu``/``min_memory``.
    """
    cache: dict[str, ResourceVector] = {}

    def demand(pod: Mapping[str, Any]) -> ResourceVector:
        uid = (pod.get("metadata") or {}).get("uid", "")
        if uid in cache:
            return cache[uid]
        vector = usage_demand(pod)
        if len(cache) > 200_000:
            cache.clear()
        cache[uid] = vector
        return vector

    def model(node: str, pod: Mapping[str, Any], t: float) -> Mapping[str, float]:
        d = demand(pod)
        return {
            "cpu": max(min_cpu, fraction * d[CPU]),
            "memory": max(min_memory, fraction * d[MEMORY]),
            "disk": fraction * d[DISK],
            "network": fraction * d[NETWORK],
        }

    return model


def usage_demand(pod: Mapping[str, Any]) -> ResourceVector:
    """What a pod asks for, as its usage and its progress see it: an opportunistic pod's ``stowage.io/demand``
    annotation (its requests are zeroed), else its requests (:func:`stowage.resources.pod_demand`), plus the
    ``stowage.io/*-bandwidth`` annotations. A bad annotation adds nothing."""
    try:
        intent = pod_intent(pod)
        base = intent.demand if intent.is_opportunistic and intent.demand is not None else pod_demand(pod)
        return base + intent.bandwidth
    except (ValueError, TypeError, KeyError):  # IntentError / QuantityError: a bad annotation uses nothing extra
        try:
            return pod_demand(pod)
        except (ValueError, TypeError, KeyError):
            return ResourceVector()


def is_opportunistic(pod: Mapping[str, Any]) -> bool:
    """The class the kernel sees: ``stowage.io/class: opportunistic`` gets the minimum ``cpu.weight`` (a bad
    label: regular, as the node monitor never evicts such a pod)."""
    try:
        return pod_class(((pod.get("metadata") or {}).get("labels")) or {}) is PodClass.OPPORTUNISTIC
    except (ValueError, TypeError):
        return False


# --- progress under contention: the simulator's model ---------------------------------------------------

#: The resources :func:`progress_rates` reads, in its columns' order (usage keys of a :data:`UsageModel`).
PROGRESS_RESOURCES: tuple[str, ...] = (CPU, MEMORY, DISK, NETWORK)


def progress_rates(capacity: NDArray[np.float64], node: NDArray[np.int64], opportunistic: NDArray[np.bool_],
                   usage: NDArray[np.float64], uses: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Each running pod's progress rate (fraction of full speed), by the simulator's contention model.

    ``capacity`` (N, R) per node, columns :data:`PROGRESS_RESOURCES` (``inf``: never short); per pod (P rows):
    ``node`` its row in ``capacity``, ``opportunistic`` its class, ``usage`` (P, R) what it uses now, ``uses``
    (P, R) the resources its demand names (> 0), the simulator's resource mask. The per-node sums go to
    :func:`stowage.sim.cluster.contention_table`, the very function the simulator's engine calls, and each pod
    reads its cell (class, mask, node) as the engine's ``RateTracker`` does.
    """
    node = np.asarray(node, dtype=np.int64)
    p = node.size
    if p == 0:
        return np.ones(0)
    capacity = np.asarray(capacity, dtype=np.float64)
    usage = np.asarray(usage, dtype=np.float64).reshape(p, -1)
    opp = np.asarray(opportunistic, dtype=bool)
    n, r = capacity.shape
    both = np.zeros((2 * n, r))
    slot = node + n * opp.astype(np.int64)
    for j in range(r):
        both[:, j] = np.bincount(slot, weights=usage[:, j], minlength=2 * n)
    masks, mask_of = np.unique(np.asarray(uses, dtype=bool).reshape(p, -1), axis=0, return_inverse=True)
    table = contention_table(both[:n], both[n:], capacity, PROGRESS_RESOURCES.index(CPU),
                             PROGRESS_RESOURCES.index(MEMORY), masks)
    if table is None:
        return np.ones(p)
    return table[opp.astype(np.int64), mask_of.reshape(-1), node]


# --- in-place resize, as a v1.30 kubelet with InPlacePodVerticalScaling -----------------------------------

#: What a container's ``status.resources`` reports (the runtime's actual cpu and memory).
_RUNTIME_RESOURCES = (CPU, MEMORY)


def container_resources(pod: Mapping[str, Any]) -> dict[str, dict[str, dict[str, str]]]:
    """Each container's ``{"requests": …, "limits": …}`` as its spec states them (by container name)."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for c in ((pod.get("spec") or {}).get("containers")) or []:
        res = c.get("resources") or {}
        out[c["name"]] = {k: {r: str(q) for r, q in (res.get(k) or {}).items()} for k in ("requests", "limits")}
    return out


def _amounts(resources: Mapping[str, Mapping[str, Mapping[str, str]]]) -> dict[tuple[str, str, str], float | str]:
    """Every quantity as a number, so that ``1`` and ``1000m`` compare equal (one that does not parse: as written,
    so that it still equals itself)."""
    out: dict[tuple[str, str, str], float | str] = {}
    for name, kinds in resources.items():
        for kind, quantities in kinds.items():
            for r, q in quantities.items():
                try:
                    out[(name, kind, r)] = parse_quantity(q)
                except ValueError:
                    out[(name, kind, r)] = str(q)
    return out


def _requests_total(resources: Mapping[str, Mapping[str, Mapping[str, str]]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for kinds in resources.values():
        for r, q in (kinds.get("requests") or {}).items():
            try:
                total[r] = total.get(r, 0.0) + parse_quantity(q)
            except ValueError:
                continue
    return total


@dataclass(frozen=True)
class Resize:
    """What the kubelet does about a pod whose spec resources differ from what it actuated.

    ``state``: ``"InProgress"`` (actuate now: :meth:`container_fields`, then clear ``status.resize``),
    ``"Deferred"`` (no room on the node now; tried again later) or ``"Infeasible"`` (more than the node's
    allocatable). ``resources``: the spec's, by container.
    """

    state: str
    resources: dict[str, dict[str, dict[str, str]]]
    reason: str = ""

    def container_fields(self, name: str) -> dict[str, Any]:
        """The container status fields a v1.30 kubelet writes once actuated: ``allocatedResources`` (the
        requests) and ``resources`` (the runtime's requests and limits of cpu and memory)."""
        return actuated_fields(self.resources.get(name) or {})


def actuated_fields(resources: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """``allocatedResources`` and ``resources`` of a container status, from one container's actuated resources."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    runtime = {k: {r: q for r, q in v.items() if r in _RUNTIME_RESOURCES} for k, v in (("requests", requests),
                                                                                         ("limits", limits))}
    return {"allocatedResources": dict(requests), "resources": {k: v for k, v in runtime.items() if v}}


def resize_actuation(pod: Mapping[str, Any], actuated: Mapping[str, Mapping[str, Mapping[str, str]]], *,
                     allocatable: Mapping[str, float] | None = None,
                     others: Mapping[str, float] | None = None) -> Resize | None:
    """The kubelet's answer to a running pod's spec resources (``None``: they are what it last ``actuated``).

    As the v1.30 kubelet's ``canResizePod``: the pod's new requests above the node's ``allocatable`` →
    ``Infeasible``; above what the ``others`` (Σ the requests the node's other pods were allocated) leave →
    ``Deferred``; else ``InProgress``: actuate. Without ``allocatable`` every resize is actuated.
    """
    wanted = container_resources(pod)
    if _amounts(wanted) == _amounts(actuated):
        return None
    if allocatable is not None:
        need, used = _requests_total(wanted), dict(others or {})
        for r in (CPU, MEMORY):
            if r in allocatable and need.get(r, 0.0) > allocatable[r] + 1e-9:
                return Resize("Infeasible", wanted, f"{r} {need[r]:g} > allocatable {allocatable[r]:g}")
        for r in (CPU, MEMORY):
            if r in allocatable and need.get(r, 0.0) + used.get(r, 0.0) > allocatable[r] + 1e-9:
                return Resize("Deferred", wanted, f"{r} {need[r]:g} + others {used.get(r, 0.0):g} > "
                                                  f"allocatable {allocatable[r]:g}")
    return Resize("InProgress", wanted)


@dataclass
class KubeletCounters:
    """What the fake kubelet did (monotonic counts)."""

    registered: int = 0  # nodes
    started: int = 0  # pods moved to Running
    succeeded: int = 0
    failed: int = 0  # exit-code annotation non-zero
    killed: int = 0  # terminated because of a graceful deletion (eviction)
    deleted: int = 0  # pods of ours that disappeared from the API (any reason)
    errors: int = 0  # API calls that failed for good
    resized: int = 0  # in-place resizes actuated
    resize_deferred: int = 0  # resizes answered Deferred or Infeasible (each time the answer was written)


# --- small helpers --------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_micro() -> str:
    """A MicroTime with microseconds (the API server rejects a MicroTime without the fraction)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_NODE_SEQ = itertools.count()  # node names unique within this process, whichever kubelet registers them
_IPS = itertools.count(1)
_IPS_LOCK = threading.Lock()


def _next_pod_ip() -> str:
    """``10.244.x.y`` (then 10.245…), unique within this process; never .0 or .255."""
    with _IPS_LOCK:
        i = next(_IPS)
    block, host = divmod(i, 254)
    second, third = divmod(block, 256)
    return f"10.{244 + second}.{third}.{host + 1}"


def _lines(response: Any) -> Iterable[str]:
    """The watch stream's lines; a read timeout (no event for a while) just ends it: watch again."""
    try:
        yield from iter_resp_lines(response)
    except urllib3.exceptions.ReadTimeoutError:
        return
    except urllib3.exceptions.ProtocolError as exc:  # the read timeout, as urllib3 reports it mid-chunk
        if "timed out" not in str(exc):
            raise


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, client.ApiException):
        return exc.status in _TRANSIENT
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


class _Gone(Exception):
    """The watch's resourceVersion expired (410): relist."""


class _NodeTree(SyntheticNode):
    """A :class:`SyntheticNode` that adds, sets and removes many pods with one write of the parents.

    Same files and the same parent bookkeeping as ``add_pod``/``set_pod``/``remove_pod`` (which write
    the kubepods and QoS parents once per pod: too slow for thousands of pods per tick).
    """

    def add_pods(self, pods: Mapping[str, QoS]) -> None:
        """New pod cgroups with zero counters (the parents do not change)."""
        for uid, qos in pods.items():
            if uid in self.pods:
                raise ValueError(f"pod {uid} already exists")
            state = PodState()
            self.pods[uid] = (qos, state)
            self._write(self.pod_rel(uid, qos), state)

    def remove_pods(self, uids: Iterable[str]) -> None:
        """Delete pod cgroups; their cumulative counters stay in the parents, their memory leaves."""
        touched: set[QoS] = set()
        removed = False
        for uid in uids:
            qos, state = self.pods.pop(uid)
            net = self.pod_net.pop(uid, None)
            if net is not None:
                self._stop_process(net)
            for total in (self.kubepods, self.qos_totals.get(qos)):
                if total is not None:
                    total.memory_current -= state.memory_current
                    total.inactive_file -= state.inactive_file
            if qos in self.qos_totals:
                touched.add(qos)
            for d in self.pod_dirs_for(uid, qos):
                shutil.rmtree(d, ignore_errors=True)
            removed = True
        for qos in touched:
            self._write(self.qos_rel(qos), self.qos_totals[qos])
        if removed:
            self._write(self.kubepods_rel, self.kubepods)

    def pod_traffic(self, uid: str, nbytes: int, *, host: bool) -> None:
        """``nbytes`` more through the pod's network namespace (half received, half sent); its process is made at
        its first traffic, in the node's namespace for a host-network pod (``host``: then nothing is its own)."""
        net = self.pod_net.get(uid)
        if net is None:
            net = self.pod_net[uid] = PodNet(None, next(self._netns), host=host)
            self._start_process(uid, net)
        if nbytes > 0 and not net.host:
            self.advance_pod_net(uid, "eth0", rx=nbytes // 2, tx=nbytes - nbytes // 2)

    def set_pods(self, updates: Mapping[str, Mapping[str, int]]) -> None:
        """Set counters (absolute values) of many pods; a pod whose counters did not change is not rewritten."""
        touched: set[QoS] = set()
        changed = False
        for uid, counters in updates.items():
            qos, state = self.pods[uid]
            if all(getattr(state, key) == int(value) for key, value in counters.items()):
                continue
            changed = True
            for key, value in counters.items():
                delta = int(value) - getattr(state, key)
                setattr(state, key, int(value))
                setattr(self.kubepods, key, getattr(self.kubepods, key) + delta)
                if qos in self.qos_totals:
                    total = self.qos_totals[qos]
                    setattr(total, key, getattr(total, key) + delta)
                    touched.add(qos)
            self._write(self.pod_rel(uid, qos), state)
        for qos in touched:
            self._write(self.qos_rel(qos), self.qos_totals[qos])
        if changed:
            self._write(self.kubepods_rel, self.kubepods)


_QOS = {"Guaranteed": QoS.GUARANTEED, "Burstable": QoS.BURSTABLE, "BestEffort": QoS.BESTEFFORT}


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    node: str
    obj: dict[str, Any]
    phase: str = "Pending"  # our view: Pending, Running, Succeeded, Failed
    started_at: float | None = None  # wall clock (epoch s)
    started: str | None = None  # RFC 3339, as written to status.startTime
    ip: str | None = None
    container_ids: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    gone: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Progress (FakeKubelet._progress_lock): work in seconds at full speed, advanced by elapsed × rate.
    run_s: float | None = None  # the work; None: runs forever
    work_left: float = math.inf
    rate: float = 1.0
    progressed_at: float = 0.0  # wall clock up to which work_left is counted
    work_done: float = 0.0  # seconds at full speed
    finish_gen: int = 0  # a scheduled finish whose generation is not this one is stale
    opportunistic: bool = False  # class now (the label), as the kernel's cpu.weight sees it
    was_opportunistic: bool = False
    opportunistic_s: float = 0.0  # wall seconds run as opportunistic (on harvested capacity)
    promoted_at: float | None = None  # class went opportunistic → regular while running
    shape_rv: str | None = None  # resourceVersion ``uses`` was read from
    uses: tuple[bool, ...] = (True, True, False, False)  # the resources its demand names (PROGRESS_RESOURCES)
    # In-place resize: what was last actuated, per container ({"requests": …, "limits": …}).
    actuated: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    resize_state: str | None = None  # status.resize as last written (None: cleared)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def qos(self) -> QoS:
        return _QOS.get((self.obj.get("status") or {}).get("qosClass", ""), QoS.BURSTABLE)


# --- the kubelet ------------------------------------------------------------------------------------


class FakeKubelet:
    """Registers Nodes and plays their kubelet against a real API server, on background threads.

    ``api_client``: an admin ``kubernetes.client.ApiClient`` (shared by the threads; urllib3 pools are
    thread-safe). ``cgroup_root`` ``None``: no cgroup trees (benchmarks of the API path only).
    ``leases=False`` skips Lease creation and renewal. ``workers``: threads making API calls.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        cgroup_root: Path | str | None = None,
        usage_model: UsageModel | None = None,
        *,
        leases: bool = True,
        lease_interval_s: float = 10.0,
        node_status_interval_s: float = 60.0,
        start_delay_s: float = 0.1,
        usage_interval_s: float = 0.5,
        workers: int = 8,
        request_timeout_s: float = 30.0,
        retry_for_s: float = 120.0,
        contention: bool = True,
        history: int = 100_000,
    ) -> None:
        self.api = api_client
        self.cgroup_root = Path(cgroup_root) if cgroup_root is not None else None
        self.usage_model: UsageModel = usage_model or requests_fraction()
        self.leases = leases
        self.lease_interval_s = lease_interval_s
        self.node_status_interval_s = node_status_interval_s
        self.start_delay_s = start_delay_s
        self.usage_interval_s = usage_interval_s
        self.request_timeout_s = request_timeout_s
        self.retry_for_s = retry_for_s
        self.contention = contention
        self.history_size = history
        self.counters = KubeletCounters()
        self._counters_lock = threading.Lock()
        self._nodes: dict[str, NodeSpec] = {}
        self._node_uids: dict[str, str] = {}
        self._trees: dict[str, _NodeTree] = {}
        self._pods: dict[str, _Pod] = {}  # "ns/name" → record
        self._lock = threading.RLock()
        self._overrides: dict[str, Mapping[str, float] | None] = {}
        self._cgroups: dict[str, str] = {}  # uid → node of every pod cgroup written; usage thread only
        self.last_usage_tick_s = 0.0  # how long the last usage tick took (thousands of pods: seconds)
        self._progress_lock = threading.Lock()  # every record's progress fields
        self._poked = threading.Event()  # set: tick early (a pod started, ended or changed class)
        self._history: OrderedDict[str, dict[str, Any]] = OrderedDict()  # uid → outcome; bounded (history)
        self._capacity: dict[str, NDArray[np.float64]] = {}  # node → PROGRESS_RESOURCES capacity
        self._stop = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fake-kubelet")
        self._timer: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._timer_cv = threading.Condition()
        self._watch_response: Any = None
        self._watch_synced = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch_loop, name="fake-kubelet-watch", daemon=True),
            threading.Thread(target=self._timer_loop, name="fake-kubelet-timer", daemon=True),
        ]
        if self.cgroup_root is not None or self.contention:
            self._threads.append(threading.Thread(target=self._usage_loop, name="fake-kubelet-usage", daemon=True))
        self._started = False

    # --- public API ---------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        """Start the watch, timer and usage threads; wait (bounded) for the first pod list."""
        if not self._started:
            self._started = True
            for thread in self._threads:
                thread.start()
            self._watch_synced.wait(self.request_timeout_s)
            self._schedule(self.lease_interval_s, self._renew_all)
            self._schedule(self.node_status_interval_s, self._heartbeat_all)
        return self

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def nodes(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def add_nodes(self, nodes: int | Iterable[NodeSpec | str], prefix: str = "fake-node") -> list[str]:
        """Register nodes (a count, named ``<prefix>-<i>`` unique in this process; names; or :class:`NodeSpec`).

        Returns their names once every Node exists with its status (Ready) and, with ``leases``, its Lease.
        """
        if isinstance(nodes, int):
            specs = [NodeSpec(f"{prefix}-{next(_NODE_SEQ)}") for _ in range(nodes)]
        else:
            specs = [n if isinstance(n, NodeSpec) else NodeSpec(n) for n in nodes]
        with self._lock:
            for spec in specs:
                if self.cgroup_root is not None and spec.name not in self._trees:
                    self._trees[spec.name] = _NodeTree(self.cgroup_dir(spec.name), 2, Driver.SYSTEMD,
                                                       self.proc_dir(spec.name))
                self._nodes[spec.name] = spec
        for future in [self._executor.submit(self._register, spec) for spec in specs]:
            future.result(timeout=self.retry_for_s + self.request_timeout_s)
        if self._started:
            self._adopt({spec.name for spec in specs})
        return [spec.name for spec in specs]

    def _adopt(self, names: set[str]) -> None:
        """Take on pods bound to these nodes before they were ours (the watch skipped their events)."""
        for pod in self._list_bound_pods()[0]:
            if (pod.get("spec") or {}).get("nodeName") in names:
                self._on_pod("ADDED", pod)

    def cgroup_dir(self, node: str) -> Path:
        """The node's cgroup v2 root (give it to a node monitor as ``--cgroup-root``)."""
        if self.cgroup_root is None:
            raise ValueError("this fake kubelet writes no cgroup trees (cgroup_root=None)")
        return self.cgroup_root / node

    def proc_dir(self, node: str) -> Path:
        """The node's ``/proc`` stand-in holding ``net/dev`` (a node monitor's ``--proc-root``)."""
        if self.cgroup_root is None:
            raise ValueError("this fake kubelet writes no cgroup trees (cgroup_root=None)")
        return self.cgroup_root / "_proc" / node

    def tree(self, node: str) -> SyntheticNode:
        """The node's cgroup writer (read its ``pods``, ``kubepods`` counters; do not write from a test)."""
        return self._trees[node]

    def set_usage(self, pod: str, usage: Mapping[str, float] | None) -> None:
        """Fix a pod's usage (``"ns/name"`` or a bare name matching any namespace); ``None`` → the model again."""
        with self._lock:
            if usage is None:
                self._overrides.pop(pod, None)
            else:
                self._overrides[pod] = dict(usage)

    def set_usage_model(self, model: UsageModel) -> None:
        """Replace the usage model for every pod from the next tick on."""
        self.usage_model = model

    def pod_phase(self, namespace: str, name: str) -> str | None:
        """The phase this kubelet last gave the pod (``None``: not one of ours, or gone)."""
        with self._lock:
            record = self._pods.get(f"{namespace}/{name}")
            return record.phase if record is not None else None

    def running_pods(self, node: str | None = None) -> list[str]:
        """``ns/name`` of the pods this kubelet runs now (on ``node``, or on any of its nodes)."""
        with self._lock:
            return [r.key for r in self._pods.values() if r.phase == "Running" and (node is None or r.node == node)]

    def rates(self, node: str | None = None) -> dict[str, float]:
        """``ns/name`` → the progress rate (fraction of full speed) each running pod had at the last usage tick."""
        with self._lock:
            records = [r for r in self._pods.values() if r.phase == "Running" and (node is None or r.node == node)]
        with self._progress_lock:
            return {r.key: r.rate for r in records}

    def outcomes(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """What each pod this kubelet ran did, once it ended (the last ``history`` pods), oldest first: ``name``,
        ``namespace``, ``uid``, ``node``, ``run_s`` (its work at full speed; ``None``: none stated),
        ``started_at`` / ``ended_at`` (wall clock), ``outcome`` (``Succeeded``, ``Failed``, ``Killed``: a graceful
        deletion such as an eviction), ``work_done`` (seconds at full speed), ``opportunistic_s`` (wall seconds run
        as opportunistic, i.e. on harvested capacity), ``was_opportunistic``, ``promoted_at`` (wall clock the class
        went regular while it ran; ``None``: never), ``opportunistic_at_end``."""
        with self._progress_lock:
            return [dict(o) for o in self._history.values() if namespace is None or o["namespace"] == namespace]

    def finish_now(self, namespace: str, prefix: str = "") -> list[str]:
        """End the running pods of ``namespace`` whose names start with ``prefix`` now, as if their run time had
        passed (exit code as annotated): work that holds its nodes until the test lets it go. Returns their names."""
        with self._lock:
            records = [r for r in self._pods.values()
                       if r.namespace == namespace and r.name.startswith(prefix) and r.phase == "Running"]
        for record in records:
            self._submit(self._retrying, self._finish, record)
        return [r.name for r in records]

    def stats(self) -> dict[str, int]:
        with self._counters_lock:
            return dict(vars(self.counters))

    def stop(self, cleanup: bool = False, timeout_s: float = 20.0) -> None:
        """Stop every thread (bounded joins). ``cleanup``: first delete this kubelet's pods, Leases and Nodes."""
        if cleanup:
            with contextlib.suppress(Exception):
                self.remove_nodes()
        self._stop.set()
        self._poked.set()
        with self._timer_cv:
            self._timer_cv.notify_all()
        response = self._watch_response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout_s)
        self._executor.shutdown(wait=True, cancel_futures=True)

    def remove_nodes(self, names: Iterable[str] | None = None) -> None:
        """Delete pods bound to these nodes (grace 0), their Leases and the Nodes; forget them."""
        with self._lock:
            names = list(self._nodes) if names is None else list(names)
            doomed = set(names)
            pods = [r for r in self._pods.values() if r.node in doomed]
        futures: list[Future[Any]] = []
        for record in pods:
            futures.append(self._executor.submit(self._ignore_missing, self._delete_pod, record))
        for name in names:
            if self.leases:
                futures.append(self._executor.submit(
                    self._ignore_missing, self._call, "DELETE",
                    f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"))
            futures.append(self._executor.submit(self._ignore_missing, self._call, "DELETE", f"/api/v1/nodes/{name}"))
        for future in futures:
            future.result(timeout=self.request_timeout_s * 2)
        with self._lock:
            for name in names:
                self._nodes.pop(name, None)
                self._node_uids.pop(name, None)

    def forget_nodes(self, names: Iterable[str]) -> None:
        """Stop playing these nodes' kubelet without deleting anything (a node that died): their pods
        stay as they are in the API, never finish, and their Leases and heartbeats stop."""
        doomed = set(names)
        with self._lock:
            for key in [k for k, r in self._pods.items() if r.node in doomed]:
                self._pods.pop(key).gone = True
            for name in doomed:
                self._nodes.pop(name, None)
                self._node_uids.pop(name, None)

    # --- raw API access -----------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None,
              content_type: str = "application/json", stream: bool = False,
              read_timeout_s: float | None = None) -> Any:
        """One request without the typed models (they drop a MicroTime's fraction and cost CPU)."""
        m, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=list(query.items()) if query else None,
            header_params={"Content-Type": content_type, "Accept": "application/json"}, body=body,
            auth_settings=["BearerToken"])
        timeout = (10.0, read_timeout_s or self.request_timeout_s)
        response = self.api.call_api(m, url, headers, body, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            data = response.read()
            raise client.ApiException(status=response.status, reason=f"{response.reason}: {data[:500]!r}")
        if stream:
            return response.response
        data = response.read()
        return json.loads(data) if data else None

    def _ignore_missing(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                raise
            return None

    def _count(self, name: str, n: int = 1) -> None:
        with self._counters_lock:
            setattr(self.counters, name, getattr(self.counters, name) + n)

    # --- timer ------------------------------------------------------------------------------------

    def _schedule(self, delay_s: float, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        """Run ``fn(*args, **kwargs)`` on the executor in ``delay_s`` seconds."""
        call = functools.partial(fn, *args, **kwargs)
        with self._timer_cv:
            heapq.heappush(self._timer, (time.monotonic() + delay_s, next(self._timer_seq), call))
            self._timer_cv.notify()

    def _submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any] | None:
        """``executor.submit`` that does nothing once stopping (the executor may be shut down)."""
        if self._stop.is_set():
            return None
        try:
            return self._executor.submit(fn, *args, **kwargs)
        except RuntimeError:  # shut down meanwhile
            return None

    def _timer_loop(self) -> None:
        while not self._stop.is_set():
            with self._timer_cv:
                now = time.monotonic()
                due = []
                while self._timer and self._timer[0][0] <= now:
                    due.append(heapq.heappop(self._timer))
                if not due:
                    wait = self._timer[0][0] - now if self._timer else 1.0
                    self._timer_cv.wait(min(max(wait, 0.001), 1.0))
                    continue
            for _, _, call in due:
                self._submit(self._guarded, call)

    def _guarded(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:
            if not self._stop.is_set():
                log.exception("fake kubelet: %s failed", call)
                self._count("errors")

    def _retrying(self, fn: Callable[..., None], record: _Pod | None, *args: Any, first: float | None = None,
                  attempt: int = 0) -> None:
        """Run ``fn(record, *args)``; on a transient error (API server restarting) try again later, bounded."""
        first = time.monotonic() if first is None else first
        try:
            fn(record, *args) if record is not None else fn(*args)
        except Exception as exc:
            if self._stop.is_set():
                return
            if _transient(exc) and time.monotonic() - first < self.retry_for_s:
                delay = min(5.0, 0.2 * 2**attempt)
                log.info("fake kubelet: %s: %s; retrying in %.1fs", fn.__name__, exc, delay)
                self._schedule(delay, self._retrying, fn, record, *args, first=first, attempt=attempt + 1)
                return
            if isinstance(exc, client.ApiException) and exc.status in (404, 409):
                return  # the pod or node went away meanwhile
            log.warning("fake kubelet: %s failed for good: %s", fn.__name__, exc)
            self._count("errors")

    def _schedule_retrying(self, delay_s: float, fn: Callable[..., None], record: _Pod | None, *args: Any) -> None:
        self._schedule(delay_s, self._retrying, fn, record, *args)

    def _blocking_retries(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, retried in this thread while the error is transient (bounded by ``retry_for_s``)."""
        first = time.monotonic()
        for attempt in itertools.count():
            try:
                return fn(*args)
            except Exception as exc:
                if not _transient(exc) or time.monotonic() - first > self.retry_for_s or self._stop.is_set():
                    raise
                time.sleep(min(5.0, 0.2 * 2**attempt))
        return None  # pragma: no cover - the loop only ends by return or raise

    # --- nodes and leases ---------------------------------------------------------------------------

    def _node_conditions(self) -> list[dict[str, Any]]:
        now = _now()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "fake kubelet is posting ready status", "lastHeartbeatTime": now,
                 "lastTransitionTime": now}
        others = [{"type": t, "status": "False", "reason": r, "message": "fake kubelet", "lastHeartbeatTime": now,
                   "lastTransitionTime": now}
                  for t, r in (("MemoryPressure", "KubeletHasSufficientMemory"),
                               ("DiskPressure", "KubeletHasNoDiskPressure"),
                               ("PIDPressure", "KubeletHasSufficientPID"))]
        return [*others, ready]

    def _register(self, spec: NodeSpec) -> None:
        labels = {"kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "type": "fake-kubelet", **spec.labels}
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": spec.name, "labels": labels, "annotations": dict(spec.annotations)},
                "spec": {"taints": [dict(t) for t in spec.taints]} if spec.taints else {}}

        def create() -> dict[str, Any]:
            try:
                return self._call("POST", "/api/v1/nodes", body)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
                return self._call("GET", f"/api/v1/nodes/{spec.name}")

        node = self._blocking_retries(create)
        with self._lock:
            self._node_uids[spec.name] = node["metadata"]["uid"]
        boot = str(uuid.uuid5(uuid.NAMESPACE_DNS, spec.name))
        status = {
            "capacity": dict(spec.capacity),
            "allocatable": spec.resolved_allocatable(),
            "conditions": self._node_conditions(),
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": spec.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": boot.replace("-", ""), "systemUUID": boot, "bootID": boot,
                         "kernelVersion": platform.release(), "osImage": "fake kubelet (Stowage tests)",
                         "containerRuntimeVersion": "fake://1.0", "kubeletVersion": KUBELET_VERSION,
                         "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux", "architecture": "amd64"},
        }
        self._blocking_retries(self._patch_node_status, spec.name, status)
        if self.leases:
            self._blocking_retries(self._renew_lease, spec.name)
        self._count("registered")

    def _patch_node_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                   content_type="application/strategic-merge-patch+json")

    def _renew_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        patch = {"spec": {"holderIdentity": node, "renewTime": _now_micro(), "leaseDurationSeconds": 40}}
        try:
            self._call("PATCH", f"{path}/{node}", patch, content_type="application/merge-patch+json")
            return
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        with self._lock:
            uid = self._node_uids.get(node)
        meta: dict[str, Any] = {"name": node, "namespace": LEASE_NAMESPACE}
        if uid:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]
        self._call("POST", path, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                                  "spec": patch["spec"]})

    def _renew_all(self) -> None:
        if self.leases:
            for node in self.nodes:
                self._submit(self._retrying, self._renew_lease, None, node)
        self._schedule(self.lease_interval_s, self._renew_all)

    def _heartbeat_all(self) -> None:
        for node in self.nodes:
            self._submit(self._retrying, self._patch_node_status, None, node, {"conditions": self._node_conditions()})
        self._schedule(self.node_status_interval_s, self._heartbeat_all)

    # --- the pod watch ------------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        rv: str | None = None
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                    self._watch_synced.set()
                rv = self._watch_once(rv)
                backoff = 0.5
            except _Gone:
                rv = None
            except Exception as exc:
                if self._stop.is_set():
                    return
                if isinstance(exc, client.ApiException) and exc.status == 410:
                    rv = None
                    continue
                # A broken stream (API server restart, read timeout): watch again from the last version seen.
                log.debug("fake kubelet: watch broke: %r; again in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(5.0, backoff * 2)

    def _list_bound_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Every pod bound to some node, and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(100_000):  # pages of 500; bounded
            query: dict[str, Any] = {"fieldSelector": "spec.nodeName!=", "limit": 500}
            if token:
                query["continue"] = token
            page = self._call("GET", "/api/v1/pods", query=query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
        return items, page["metadata"]["resourceVersion"]

    def _relist(self) -> str:
        items, rv = self._list_bound_pods()
        seen = set()
        for pod in items:
            meta = pod["metadata"]
            seen.add(f"{meta['namespace']}/{meta['name']}")
            self._on_pod("ADDED", pod)
        with self._lock:
            vanished = [r for k, r in self._pods.items() if k not in seen]
        for record in vanished:
            self._on_pod("DELETED", record.obj)
        return rv

    def _watch_once(self, rv: str) -> str:
        query = {"watch": "true", "fieldSelector": "spec.nodeName!=", "resourceVersion": rv,
                 "allowWatchBookmarks": "true", "timeoutSeconds": 300}
        response = self._call("GET", "/api/v1/pods", query=query, stream=True, read_timeout_s=10.0)
        self._watch_response = response
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone(obj.get("message"))
                    raise client.ApiException(status=obj.get("code") or 500, reason=obj.get("message"))
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_pod(kind, obj)
        finally:
            self._watch_response = None
            response.release_conn()
        return rv

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        """Update the record from an event (quick: API calls go to the executor)."""
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        key, uid = f"{meta['namespace']}/{meta['name']}", meta.get("uid")
        with self._lock:
            record = self._pods.get(key)
            if kind == "DELETED":
                if record is not None and record.uid == uid:
                    del self._pods[key]
                    record.gone = True
                    self._count("deleted")
                return
            if node not in self._nodes:
                return
            fresh = record is None or record.uid != uid
            if fresh:
                if record is not None:  # a pod of the same name replaced the old one
                    record.gone = True
                    self._count("deleted")
                record = _Pod(meta["namespace"], meta["name"], uid, node, pod)
                self._pods[key] = record
            record.obj = pod
        if meta.get("deletionTimestamp"):
            if not record.deleting:
                record.deleting = True
                self._submit(self._retrying, self._terminate, record)
            return
        if not fresh:
            if record.phase == "Running":
                self._noticed(record)
            return
        phase = status.get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            record.phase = phase
        elif phase == "Running":  # ours from before a relist or a restart of this kubelet: adopt it
            record.phase, record.started, record.ip = "Running", status.get("startTime"), status.get("podIP")
            record.started_at = _parse_time(record.started) or time.time()
            record.container_ids = {c["name"]: c.get("containerID", "") for c in status.get("containerStatuses") or []}
            record.actuated = container_resources(pod)
            now = time.time()
            with self._progress_lock:  # what it did before is unknown: as if at full speed
                self._begin_progress(record, now)
                record.work_left = max(0.0, record.work_left - (now - record.started_at))
                self._reschedule(record, now)
        else:
            self._schedule_retrying(self.start_delay_s, self._start, record)

    # --- pod phases ---------------------------------------------------------------------------------

    @staticmethod
    def _annotation(record: _Pod, key: str) -> str | None:
        return ((record.obj.get("metadata") or {}).get("annotations") or {}).get(key)

    def _run_seconds(self, record: _Pod) -> float | None:
        raw = self._annotation(record, ANN_RUN_SECONDS)
        if raw is None:
            return None
        try:
            run_s = float(raw)
        except ValueError:
            run_s = math.nan
        if not math.isfinite(run_s):
            log.warning("fake kubelet: %s: %s=%r is not a number; runs forever", record.key, ANN_RUN_SECONDS, raw)
            return None
        return max(0.0, run_s)

    # --- progress (callers hold _progress_lock) ----------------------------------------------------

    def _begin_progress(self, record: _Pod, now: float) -> None:
        """Work = the run-seconds, at full speed until the next usage tick says otherwise."""
        record.run_s = self._run_seconds(record)
        record.work_left = math.inf if record.run_s is None else record.run_s
        record.work_done, record.rate, record.progressed_at = 0.0, 1.0, now
        record.opportunistic = record.was_opportunistic = is_opportunistic(record.obj)

    @staticmethod
    def _advance(record: _Pod, now: float) -> None:
        """Count the work done since ``progressed_at`` at the rate in effect since then."""
        elapsed = max(0.0, now - record.progressed_at)
        record.work_left -= elapsed * record.rate
        record.work_done += elapsed * record.rate
        if record.opportunistic:
            record.opportunistic_s += elapsed
        record.progressed_at = max(record.progressed_at, now)

    def _reschedule(self, record: _Pod, now: float) -> None:
        """Time the finish from the work left and the rate; any finish timed before is stale from now on."""
        record.finish_gen += 1
        if record.run_s is None or record.rate <= 0:
            return  # runs forever, or stalled until a tick gives it a rate
        delay = max(0.0, record.work_left) / record.rate - max(0.0, time.time() - now)
        self._schedule_retrying(max(0.0, delay), self._finish, record, record.finish_gen)

    def _ended(self, record: _Pod, outcome: str, now: float) -> None:
        """Keep what the pod did up to ``now`` (bounded history) and stop its progress."""
        with self._progress_lock:
            self._advance(record, now)
            record.finish_gen += 1
            self._history[record.uid] = {
                "namespace": record.namespace, "name": record.name, "uid": record.uid, "node": record.node,
                "run_s": record.run_s, "started_at": record.started_at, "ended_at": now, "outcome": outcome,
                "work_done": record.work_done, "opportunistic_s": record.opportunistic_s,
                "was_opportunistic": record.was_opportunistic, "promoted_at": record.promoted_at,
                "opportunistic_at_end": record.opportunistic,
            }
            while len(self._history) > self.history_size:
                self._history.popitem(last=False)
        self._poke()

    def _noticed(self, record: _Pod) -> None:
        """A running pod changed in the API: a class change takes effect now; a resize is actuated."""
        opp = is_opportunistic(record.obj)
        with self._progress_lock:
            if opp != record.opportunistic and record.phase == "Running":
                now = time.time()
                self._advance(record, now)  # the work so far at the old class's rate
                if record.opportunistic and not opp:
                    record.promoted_at = now
                record.opportunistic = opp
                record.was_opportunistic = record.was_opportunistic or opp
                self._poke()
        if _amounts(container_resources(record.obj)) != _amounts(record.actuated):
            self._submit(self._retrying, self._resize, record)

    def _patch_pod_status(self, record: _Pod, status: Mapping[str, Any]) -> None:
        self._call("PATCH", f"/api/v1/namespaces/{record.namespace}/pods/{record.name}/status",
                   {"metadata": {"uid": record.uid}, "status": status},
                   content_type="application/strategic-merge-patch+json")

    def _container_statuses(self, record: _Pod, state: Mapping[str, Any], ready: bool,
                            actuated: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None) -> dict[str, Any]:
        """Every container's status; with the resources actuated (``record.actuated`` unless given): the API
        server keeps ``allocatedResources`` and ``resources`` only with ``InPlacePodVerticalScaling`` on."""
        spec = record.obj.get("spec") or {}
        actuated = record.actuated if actuated is None else actuated
        out: dict[str, Any] = {"containerStatuses": []}
        for c in spec.get("containers") or []:
            cid = record.container_ids.setdefault(c["name"], f"containerd://{secrets.token_hex(32)}")
            image = c.get("image", "")
            out["containerStatuses"].append({
                "name": c["name"], "image": image, "imageID": f"{image}@sha256:{'0' * 64}", "containerID": cid,
                "ready": ready, "started": "running" in state, "restartCount": 0, "state": dict(state),
                **(actuated_fields(actuated[c["name"]]) if c["name"] in actuated else {}),
            })
        inits = spec.get("initContainers") or []
        if inits:
            out["initContainerStatuses"] = []
            for c in inits:
                image = c.get("image", "")
                cid = record.container_ids.setdefault(f"init:{c['name']}", f"containerd://{secrets.token_hex(32)}")
                sidecar = c.get("restartPolicy") == "Always" and "running" in state
                init_state = dict(state) if sidecar else {"terminated": {
                    "exitCode": 0, "reason": "Completed", "startedAt": record.started, "finishedAt": record.started,
                    "containerID": cid}}
                out["initContainerStatuses"].append({
                    "name": c["name"], "image": image, "imageID": f"{image}@sha256:{'0' * 64}",
                    "containerID": cid, "ready": sidecar, "started": sidecar, "restartCount": 0, "state": init_state,
                })
        return out

    def _start(self, record: _Pod) -> None:
        with record.lock:
            if record.deleting or record.gone or record.phase != "Pending":
                return
            now = _now()
            record.started, record.started_at = now, time.time()
            record.actuated = container_resources(record.obj)
            with self._progress_lock:
                self._begin_progress(record, record.started_at)
            record.ip = record.ip or _next_pod_ip()
            types = ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"]
            have = {c.get("type") for c in (record.obj.get("status") or {}).get("conditions") or []}
            if "PodScheduled" not in have:  # bound by nodeName, not by a scheduler: the kubelet reports it
                types.insert(0, "PodScheduled")
            conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                          for t in types]
            status = {"phase": "Running", "startTime": now, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                      "podIP": record.ip, "podIPs": [{"ip": record.ip}], "conditions": conditions,
                      **self._container_statuses(record, {"running": {"startedAt": now}}, ready=True)}
            self._patch_pod_status(record, status)
            record.phase = "Running"
        self._count("started")
        with self._progress_lock:
            self._reschedule(record, time.time())
        self._poke()

    def _terminal_status(self, record: _Pod, exit_code: int, reason: str, phase: str) -> dict[str, Any]:
        now = _now()
        conditions = [{"type": t, "status": "False", "reason": "PodCompleted", "lastProbeTime": None,
                       "lastTransitionTime": now} for t in ("ContainersReady", "Ready")]
        terminated = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": record.started or now,
                                     "finishedAt": now}}
        status = {"phase": phase, "conditions": conditions, **self._container_statuses(record, terminated, False)}
        for c in status["containerStatuses"]:
            c["state"]["terminated"] = {**c["state"]["terminated"], "containerID": c["containerID"]}
        return status

    def _finish(self, record: _Pod, generation: int | None = None) -> None:
        """The pod's work is done (``generation``: the finish timed then, stale if the rate changed since;
        ``None``: now, whatever is left)."""
        ended = time.time()  # the work is done now; the status patch below takes its time
        with self._progress_lock:
            if generation is not None and generation != record.finish_gen:
                return
        with record.lock:
            if record.deleting or record.gone or record.phase != "Running":
                return
            raw = self._annotation(record, ANN_EXIT_CODE)
            try:
                code = int(raw) if raw is not None else 0
            except ValueError:
                code = 1
            phase = "Succeeded" if code == 0 else "Failed"
            self._patch_pod_status(record, self._terminal_status(record, code, "Completed" if code == 0 else "Error",
                                                                 phase))
            record.phase = phase
            self._ended(record, phase, ended)
        self._count("succeeded" if code == 0 else "failed")

    def _terminate(self, record: _Pod) -> None:
        """A graceful deletion: kill the containers (exit 143), then finish the deletion with grace 0."""
        with record.lock:
            if record.gone:
                return
            if record.phase == "Running":
                killed = time.time()
                self._patch_pod_status(record, self._terminal_status(record, 143, "Error", "Failed"))
                record.phase = "Failed"
                self._ended(record, "Killed", killed)
                self._count("killed")
            self._delete_pod(record)

    def _delete_pod(self, record: _Pod) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": record.uid}}
        try:
            self._call("DELETE", f"/api/v1/namespaces/{record.namespace}/pods/{record.name}", body)
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or a new pod of that name (uid precondition)
                raise

    # --- in-place resize ---------------------------------------------------------------------------

    def _node_allocatable(self, node: str) -> dict[str, float]:
        with self._lock:
            spec = self._nodes.get(node)
        if spec is None:
            return {}
        out = {}
        for r, q in spec.resolved_allocatable().items():
            with contextlib.suppress(ValueError):
                out[r] = parse_quantity(q)
        return out

    def _allocated_to_others(self, record: _Pod) -> dict[str, float]:
        """Σ the requests the node's other pods were allocated (actuated, or their spec before they started)."""
        with self._lock:
            others = [r for r in self._pods.values() if r.node == record.node and r is not record and not r.gone
                      and r.phase in ("Pending", "Running")]
        total: dict[str, float] = {}
        for r in others:
            for k, v in _requests_total(r.actuated or container_resources(r.obj)).items():
                total[k] = total.get(k, 0.0) + v
        return total

    def _resize(self, record: _Pod) -> None:
        """Actuate a running pod's resized spec as a v1.30 kubelet does (:func:`resize_actuation`)."""
        with record.lock:
            if record.deleting or record.gone or record.phase != "Running":
                return
            decision = resize_actuation(record.obj, record.actuated, allocatable=self._node_allocatable(record.node),
                                        others=self._allocated_to_others(record))
            if decision is None:
                return
            if decision.state != "InProgress":
                if record.resize_state != decision.state:
                    log.info("fake kubelet: %s: resize %s: %s", record.key, decision.state, decision.reason)
                    self._patch_pod_status(record, {"resize": decision.state})
                    record.resize_state = decision.state
                    self._count("resize_deferred")
                return
            if record.resize_state != "InProgress":
                self._patch_pod_status(record, {"resize": "InProgress"})
                record.resize_state = "InProgress"
            status = {"resize": None, **self._container_statuses(
                record, {"running": {"startedAt": record.started}}, ready=True, actuated=decision.resources)}
            self._patch_pod_status(record, status)
            record.actuated, record.resize_state = decision.resources, None
        with self._progress_lock:
            record.shape_rv = None  # its demand may name other resources now
        self._count("resized")
        self._poke()

    # --- usage ----------------------------------------------------------------------------------------

    def _usage_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self._usage_tick(began - last)
            except Exception:
                log.exception("fake kubelet: usage tick failed")
                self._count("errors")
            last = began
            self.last_usage_tick_s = elapsed = time.monotonic() - began
            # Falling behind (thousands of pods): write at most half the time, leave the rest to the API calls.
            self._poked.wait(max(self.usage_interval_s - elapsed, elapsed))
            # A pod started, ended or changed class: its node's rates change now, as at the simulator's events; the
            # tick comes early, but never sooner than MIN_TICK_GAP_S (or three times the tick's own length: at most
            # a quarter of the time under churn) after the last began.
            self._poked.clear()
            self._stop.wait(max(max(3 * elapsed, MIN_TICK_GAP_S) - (time.monotonic() - began), 0.0))

    def _poke(self) -> None:
        """Bring the next usage tick forward (rates are recomputed there)."""
        if self.contention:
            self._poked.set()

    def _usage_tick(self, dt: float) -> None:
        now = time.time()
        with self._lock:
            running = {r.uid: r for r in self._pods.values() if r.phase == "Running" and not r.gone}
            overrides = dict(self._overrides)
            trees = dict(self._trees)
        model = self.usage_model
        usages: dict[str, Mapping[str, float]] = {}
        for uid, record in running.items():
            usage = overrides.get(record.key, overrides.get(record.name))
            if usage is None:
                usage = model(record.node, record.obj, now - (record.started_at or now))
            usages[uid] = usage
        if self.cgroup_root is not None:
            self._write_cgroups(running, usages, trees, dt)
        if self.contention:
            self._progress_tick(running, usages, now)
        for record in running.values():
            if record.resize_state == "Deferred":  # the kubelet tries a deferred resize again as pods come and go
                self._submit(self._retrying, self._resize, record)

    def _write_cgroups(self, running: Mapping[str, _Pod], usages: Mapping[str, Mapping[str, float]],
                       trees: Mapping[str, _NodeTree], dt: float) -> None:
        updates: dict[str, dict[str, dict[str, int]]] = {}
        net: dict[str, float] = {}
        stopped: dict[str, list[str]] = {}
        for uid in [u for u in self._cgroups if u not in running]:
            node = self._cgroups.pop(uid)
            if node in trees and uid in trees[node].pods:
                stopped.setdefault(node, []).append(uid)
        for node, uids in stopped.items():
            trees[node].remove_pods(uids)
        new: dict[str, dict[str, QoS]] = {}
        for uid, record in running.items():
            if uid not in self._cgroups and record.node in trees:
                new.setdefault(record.node, {})[uid] = record.qos
                self._cgroups[uid] = record.node
        for node, pods in new.items():
            trees[node].add_pods(pods)
        for uid, record in running.items():
            tree = trees.get(record.node)
            if tree is None:
                continue
            step = 0.0 if uid in new.get(record.node, {}) else max(0.0, dt)
            usage = usages[uid]
            state = tree.pods[uid][1]
            disk = float(usage.get("disk", 0.0)) * step
            updates.setdefault(record.node, {})[uid] = {
                "cpu_usec": state.cpu_usec + int(float(usage.get("cpu", 0.0)) * step * 1e6),
                "memory_current": int(usage.get("memory", 0.0)),
                "rbytes": state.rbytes + int(disk / 2),
                "wbytes": state.wbytes + int(disk - disk / 2),
            }
            net[record.node] = net.get(record.node, 0.0) + float(usage.get("network", 0.0)) * step
            if float(usage.get("network", 0.0)) > 0:
                tree.pod_traffic(uid, int(float(usage["network"]) * step),
                                 host=((record.obj.get("spec") or {}).get("hostNetwork") is True))
        for node, pods in updates.items():
            trees[node].set_pods(pods)
        for node, nbytes in net.items():
            if nbytes > 0:
                trees[node].advance_net("eth0", rx=int(nbytes / 2), tx=int(nbytes - nbytes / 2))

    def _node_capacity(self, node: str) -> NDArray[np.float64]:
        """The node's capacity in :data:`PROGRESS_RESOURCES`: allocatable cpu and memory, the bandwidth its
        annotations declare (none: ``inf``, never short)."""
        cached = self._capacity.get(node)
        if cached is not None:
            return cached
        with self._lock:
            spec = self._nodes.get(node)
        out = np.full(len(PROGRESS_RESOURCES), np.inf)
        if spec is not None:
            allocatable = self._node_allocatable(node)
            bandwidth, _ = node_bandwidth(dict(spec.annotations))
            for j, r in enumerate(PROGRESS_RESOURCES):
                value = allocatable.get(r, math.inf) if r in (CPU, MEMORY) else bandwidth[r]
                out[j] = value if value > 0 else math.inf
            self._capacity[node] = out
        return out

    def _progress_tick(self, running: Mapping[str, _Pod], usages: Mapping[str, Mapping[str, float]],
                       now: float) -> None:
        """Every running pod's rate by the simulator's contention model; work advanced, finishes re-timed."""
        records = list(running.values())
        if not records:
            return
        names = sorted({r.node for r in records})
        row = {n: i for i, n in enumerate(names)}
        for r in records:
            rv = (r.obj.get("metadata") or {}).get("resourceVersion")
            if r.shape_rv is None or r.shape_rv != rv:
                demand = usage_demand(r.obj)
                r.uses, r.shape_rv = tuple(demand[k] > 0 for k in PROGRESS_RESOURCES), rv
        rates = progress_rates(
            np.array([self._node_capacity(n) for n in names]),
            np.array([row[r.node] for r in records], dtype=np.int64),
            np.array([r.opportunistic for r in records], dtype=bool),
            np.array([[float(usages[r.uid].get(k, 0.0)) for k in PROGRESS_RESOURCES] for r in records]),
            np.array([r.uses for r in records], dtype=bool))
        with self._progress_lock:
            for r, rate in zip(records, rates.tolist(), strict=True):
                if r.phase != "Running" or r.gone:
                    continue
                self._advance(r, now)
                if abs(rate - r.rate) > 1e-9:
                    r.rate = rate
                    self._reschedule(r, now)
