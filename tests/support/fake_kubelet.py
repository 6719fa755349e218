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
  Succeeded after the pod's ``fake-kubelet.stowage.io/run-seconds`` annotation (absent: runs forever), or
  to Failed when ``fake-kubelet.stowage.io/exit-code`` is non-zero. Status goes through the ``status``
  subresource as a strategic merge patch, so conditions other writers added (``DisruptionTarget``) stay;
- finishes graceful deletions (an Eviction API eviction, a ``kubectl delete``): containers terminated
  (exit code 143, phase Failed), then a delete with grace period 0 and a uid precondition;
- writes each running pod's usage into a cgroup v2 tree per node, laid out like the kubelet's systemd
  driver (:class:`stowage.node_monitor.synthetic.SyntheticNode`, the same writer the node-monitor tests
  use): ``<cgroup_root>/<node>/kubepods.slice/...``, and ``<cgroup_root>/_proc/<node>/net/dev``
  (``_`` cannot occur in a node name). Usage comes from ``usage_model(node, pod, t)`` every
  ``usage_interval_s``; a pod's cgroup is removed when it stops.

Nothing here runs a node-lifecycle controller: Nodes stay Ready whatever their heartbeat.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import json
import logging
import platform
import secrets
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.synthetic import PodState, SyntheticNode

from stowage.labels import pod_intent
from stowage.resources import CPU, DISK, MEMORY, NETWORK, ResourceVector, format_quantity, parse_quantity, pod_demand

__all__ = [
    "ANN_EXIT_CODE",
    "ANN_RUN_SECONDS",
    "DEFAULT_CAPACITY",
    "FakeKubelet",
    "KubeletCounters",
    "NodeSpec",
    "UsageModel",
    "requests_fraction",
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
        try:
            intent = pod_intent(pod)
            base = intent.demand if intent.is_opportunistic and intent.demand is not None else pod_demand(pod)
            vector = base + intent.bandwidth
        except (ValueError, TypeError, KeyError):  # IntentError / QuantityError: a bad annotation uses nothing extra
            try:
                vector = pod_demand(pod)
            except (ValueError, TypeError, KeyError):
                vector = ResourceVector()
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
        if self.cgroup_root is not None:
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
            return
        phase = status.get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            record.phase = phase
        elif phase == "Running":  # ours from before a relist or a restart of this kubelet: adopt it
            record.phase, record.started, record.ip = "Running", status.get("startTime"), status.get("podIP")
            record.started_at = _parse_time(record.started) or time.time()
            record.container_ids = {c["name"]: c.get("containerID", "") for c in status.get("containerStatuses") or []}
            self._schedule_finish(record)
        else:
            self._schedule_retrying(self.start_delay_s, self._start, record)

    # --- pod phases ---------------------------------------------------------------------------------

    @staticmethod
    def _annotation(record: _Pod, key: str) -> str | None:
        return ((record.obj.get("metadata") or {}).get("annotations") or {}).get(key)

    def _schedule_finish(self, record: _Pod) -> None:
        raw = self._annotation(record, ANN_RUN_SECONDS)
        if raw is None:
            return
        try:
            run_s = max(0.0, float(raw))
        except ValueError:
            log.warning("fake kubelet: %s: %s=%r is not a number; runs forever", record.key, ANN_RUN_SECONDS, raw)
            return
        assert record.started_at is not None
        self._schedule_retrying(max(0.0, record.started_at + run_s - time.time()), self._finish, record)

    def _patch_pod_status(self, record: _Pod, status: Mapping[str, Any]) -> None:
        self._call("PATCH", f"/api/v1/namespaces/{record.namespace}/pods/{record.name}/status",
                   {"metadata": {"uid": record.uid}, "status": status},
                   content_type="application/strategic-merge-patch+json")

    def _container_statuses(self, record: _Pod, state: Mapping[str, Any], ready: bool) -> dict[str, Any]:
        spec = record.obj.get("spec") or {}
        out: dict[str, Any] = {"containerStatuses": []}
        for c in spec.get("containers") or []:
            cid = record.container_ids.setdefault(c["name"], f"containerd://{secrets.token_hex(32)}")
            image = c.get("image", "")
            out["containerStatuses"].append({
                "name": c["name"], "image": image, "imageID": f"{image}@sha256:{'0' * 64}", "containerID": cid,
                "ready": ready, "started": "running" in state, "restartCount": 0, "state": dict(state),
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
        self._schedule_finish(record)

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

    def _finish(self, record: _Pod) -> None:
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
        self._count("succeeded" if code == 0 else "failed")

    def _terminate(self, record: _Pod) -> None:
        """A graceful deletion: kill the containers (exit 143), then finish the deletion with grace 0."""
        with record.lock:
            if record.gone:
                return
            if record.phase == "Running":
                self._patch_pod_status(record, self._terminal_status(record, 143, "Error", "Failed"))
                record.phase = "Failed"
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
            self._stop.wait(max(self.usage_interval_s - elapsed, elapsed))

    def _usage_tick(self, dt: float) -> None:
        now = time.time()
        with self._lock:
            running = {r.uid: r for r in self._pods.values() if r.phase == "Running" and not r.gone}
            overrides = dict(self._overrides)
            trees = dict(self._trees)
        model = self.usage_model
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
            usage = overrides.get(record.key, overrides.get(record.name))
            if usage is None:
                usage = model(record.node, record.obj, now - (record.started_at or now))
            state = tree.pods[uid][1]
            disk = float(usage.get("disk", 0.0)) * step
            updates.setdefault(record.node, {})[uid] = {
                "cpu_usec": state.cpu_usec + int(float(usage.get("cpu", 0.0)) * step * 1e6),
                "memory_current": int(usage.get("memory", 0.0)),
                "rbytes": state.rbytes + int(disk / 2),
                "wbytes": state.wbytes + int(disk - disk / 2),
            }
            net[record.node] = net.get(record.node, 0.0) + float(usage.get("network", 0.0)) * step
        for node, pods in updates.items():
            trees[node].set_pods(pods)
        for node, nbytes in net.items():
            if nbytes > 0:
                trees[node].advance_net("eth0", rx=int(nbytes / 2), tx=int(nbytes - nbytes / 2))
