"""The whole Stowage stack as real processes on loopback, and the pieces every stack of the tests shares.

Shared pieces (used by :mod:`tests.scheduler.stack` and :mod:`tests.operator.support` too): :class:`Proc`
(one child process, by PID), :class:`PrometheusProcess`, :func:`wait_for`, :func:`metric`, :class:`PodLedger`,
:func:`job_body`, :func:`webhook_certificate`, :func:`install_crds` and the argv of each ``stowage`` command.

:class:`WholeStack` (``tests/system``) runs everything a ``helm install`` runs, from the chart itself::

    control plane (session fixture): etcd, kube-apiserver, kube-controller-manager
    chart (helm template, release ``stowage-e2e`` in ``stowage-e2e``): CRDs, PriorityClass, default Queue,
        every ServiceAccount and its RBAC, the settings; the webhook configurations with clientConfig
        pointed at the operator on 127.0.0.1 and this stack's CA
    kube-scheduler      the chart's KubeSchedulerConfiguration and flags; only urlPrefix → the extender
    stowage extender    the chart's sidecar args (host/port/config made local)       ─┐ each under a token
    stowage node-monitor one per fake node, reading the fake kubelet's cgroup tree   ─┤ of its own chart
    stowage operator    the chart's args, its webhooks on 127.0.0.1                   ─┘ ServiceAccount
    Prometheus          scraping the monitors, the extender and the operator at the chart's interval
    FakeKubelet         the nodes; :class:`LoadModel` makes usage vary as the simulator's usage model

Faults: :meth:`WholeStack.kill` / ``start_*`` by component, ``prometheus.stop()`` / ``.start()``,
:meth:`WholeStack.restart_apiserver`, :meth:`WholeStack.delete_node`. :class:`TaskLedger` counts every task.
Everything logs under ``<workdir>/logs`` and is stopped by PID. Waits poll a condition with a generous
deadline (a loaded 2-core machine): they bound a broken test, they are never timing assertions.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx
import numpy as np
import yaml
from kubernetes import client, watch
from kubernetes.dynamic import DynamicClient
from stowage.operator import crd, tasks

from stowage import labels
from stowage.config import StowageSettings, load_settings
from stowage.sim.usage import UsageModel
from tests.support.chart_tokens import token_kubeconfig
from tests.support.controlplane import FEATURE_GATES, REPO, ControlPlane, SchedulerHandle, _Process
from tests.support.crds import CRD_DIR, load_crds
from tests.support.fake_kubelet import ANN_RUN_SECONDS, FakeKubelet, NodeSpec, requests_fraction
from tests.support.processes import EXTENDER_PORT_LOGGED, NODE_MONITOR_PORT_LOGGED, stop_process, wait_for_logged_port
from tests.support.prometheus import prometheus_binary

__all__ = [
    "ALLOCATABLE",
    "CAPACITY",
    "KOPF_PEERING_CRDS",
    "OPERATOR_METRICS_LOGGED",
    "SCHEDULER_MANIFEST",
    "STOWAGE",
    "JobApi",
    "LoadModel",
    "PodLedger",
    "Proc",
    "PrometheusProcess",
    "StartStop",
    "TaskLedger",
    "WholeStack",
    "extender_argv",
    "install_crds",
    "job_body",
    "metric",
    "node_monitor_argv",
    "stop_in_order",
    "wait_for",
    "webhook_certificate",
]

T = TypeVar("T")

STOWAGE = Path(sys.executable).with_name("stowage")
CHART = REPO / "charts" / "stowage"
#: The plain scheduler configuration (no chart) the scheduler and operator stacks run.
SCHEDULER_MANIFEST = REPO / "manifests" / "scheduler-config.yaml"
CAPACITY: Mapping[str, str] = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
ALLOCATABLE: Mapping[str, str] = {"cpu": "7500m", "memory": "15Gi", "pods": "110", "ephemeral-storage": "100Gi"}
#: ``stowage operator``'s start-up line naming the metrics port it bound (group 1).
OPERATOR_METRICS_LOGGED = r"metrics on http://\S+:(\d+)/metrics"
OPERATOR_STARTED = "stowage operator started"
WEBHOOKS_SERVED = r"webhooks served at https://127\.0\.0\.1:(\d+)"


# --- small helpers ---------------------------------------------------------------------------------


def wait_for(condition: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.25,
             on_wait: Callable[[], None] | None = None, on_wait_every_s: float = 5.0) -> T:
    """Poll ``condition`` until it returns something truthy; return it. Fails with ``what`` after ``timeout_s``.

    ``on_wait`` runs every ``on_wait_every_s`` while waiting (e.g. a cluster event that makes kube-scheduler
    retry unschedulable pods). The deadline bounds a broken test; it is not a timing assertion.
    """
    deadline = time.monotonic() + timeout_s
    next_nudge = time.monotonic() + on_wait_every_s
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except (client.ApiException, httpx.HTTPError, OSError) as exc:  # transient while a process restarts
            last_error = exc
        now = time.monotonic()
        if now > deadline:
            suffix = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{suffix}")
        if on_wait is not None and now >= next_nudge:
            with contextlib.suppress(client.ApiException, OSError):
                on_wait()
            next_nudge = now + on_wait_every_s
        time.sleep(interval_s)


def metric(text: str, name: str, want: Mapping[str, str] | None = None) -> float:
    """The sum of the samples of ``name`` in a /metrics text whose labels include ``want`` (0 when none)."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if found:
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found.group(1) or ""))
            if all(have.get(k) == v for k, v in (want or {}).items()):
                total += float(found.group(2))
    return total


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Proc:
    """One child process that logs the port it bound; started and stopped by PID.

    Started again on a fixed port (a restart keeps its address), it retries while the old listener lingers.
    """

    name: str
    argv: list[str]
    log: Path
    port_pattern: str
    proc: subprocess.Popen | None = None
    port: int = 0
    env: Mapping[str, str] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 90.0) -> int:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        env = {**os.environ, **self.env} if self.env else None
        while True:
            # A fresh log per start: the port line of the previous run must not be read again.
            if self.log.exists():
                self.log.rename(self.log.with_name(f"{self.log.stem}.{time.time_ns()}{self.log.suffix}"))
            with self.log.open("wb") as out:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, close_fds=True,
                                             env=env)
            try:
                self.port = wait_for_logged_port(self.proc, self.log, self.port_pattern,
                                                 max(1.0, deadline - time.monotonic()))
                return self.port
            except RuntimeError:
                self.stop()
                if "address already in use" not in self.tail().lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        return stop_process(self.proc, timeout_s)

    def kill(self) -> int | None:
        """SIGKILL by PID (a crash, not a shutdown)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.kill()
        return self.proc.wait(30)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


class PrometheusProcess:
    """The real Prometheus scraping ``targets`` (job ``stowage-node-monitor``) and any ``jobs`` given later.

    Targets live in file_sd files, so :meth:`set_targets` changes them without a restart. Stops and
    starts again on the same port and data (the components' URL of it stays valid).
    """

    def __init__(self, workdir: Path, targets: list[str], scrape_interval_s: float = 2.0,
                 jobs: Mapping[str, list[str]] | None = None) -> None:
        self.binary = prometheus_binary()
        self.workdir = workdir / "prometheus"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.scrape_interval_s = scrape_interval_s
        interval = f"{max(int(scrape_interval_s * 1000), 100)}ms"
        self.jobs = {"stowage-node-monitor": list(targets), **{k: list(v) for k, v in (jobs or {}).items()}}
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": job, "file_sd_configs": [
                {"files": [str(self._targets_file(job))], "refresh_interval": "1s"}]} for job in self.jobs],
        }
        for job, job_targets in self.jobs.items():
            self.set_targets(job, job_targets)
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = 0
        self.proc: Proc | None = None

    def _targets_file(self, job: str) -> Path:
        return self.workdir / f"targets-{job}.json"

    def set_targets(self, job: str, targets: list[str]) -> None:
        """Replace the job's targets (Prometheus re-reads the file; the job must have been declared)."""
        self.jobs[job] = list(targets)
        tmp = self._targets_file(job).with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": list(targets)}]))
        tmp.replace(self._targets_file(job))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.running

    def start(self, timeout_s: float = 90.0) -> str:
        """Start (port 0 the first time, the same port afterwards, so the components' URL stays valid)."""
        self.proc = Proc("prometheus", [
            self.binary, f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info"], self.workdir / "prometheus.log", r'msg="Listening on" address=127\.0\.0\.1:(\d+)')
        self.port = self.proc.start(timeout_s)
        wait_for(lambda: httpx.get(f"{self.url}/-/ready", timeout=2.0).status_code == 200, timeout_s,
                 "prometheus /-/ready")
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def query(self, promql: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5.0)
        response.raise_for_status()
        return list(response.json()["data"]["result"])


def stop_in_order(*parts: Any) -> None:
    """Stop each part by PID, in the order given (``None`` skipped; one that fails does not keep the next
    running): a :class:`Proc`, SchedulerHandle, :class:`PrometheusProcess`, fault proxy, or a
    :class:`FakeKubelet` (its pods, Leases and Nodes deleted first)."""
    for part in parts:
        if part is None:
            continue
        with contextlib.suppress(Exception):
            if isinstance(part, FakeKubelet):
                part.stop(cleanup=True)
            else:
                part.stop()


# --- argv of the stowage commands --------------------------------------------------------------------


def node_monitor_argv(kubelet: FakeKubelet, node: str, kubeconfig: Path, *, port: int = 0,
                      dry_run: bool = False, extra: list[str] | None = None) -> list[str]:
    """``stowage node-monitor`` for a fake node: its cgroup tree and /proc, metrics on 127.0.0.1:``port``."""
    argv = [str(STOWAGE), "node-monitor", *(extra or []), "--node-name", node, "--kubeconfig", str(kubeconfig),
            "--cgroup-root", str(kubelet.cgroup_dir(node)), "--proc-root", str(kubelet.proc_dir(node)),
            "--port", str(port), "--address", "127.0.0.1"]
    return [*argv, "--dry-run"] if dry_run else argv


def extender_argv(kubeconfig: Path, prometheus_url: str | None, *, port: int = 0, interval_s: float = 1.0,
                  extra: list[str] | None = None) -> list[str]:
    """``stowage extender`` on 127.0.0.1:``port`` (no ``prometheus_url``: nothing is harvested)."""
    argv = [str(STOWAGE), "extender", *(extra or []), "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1",
            "--port", str(port), "--prometheus-interval", f"{interval_s:g}"]
    return [*argv, "--prometheus-url", prometheus_url] if prometheus_url else argv


def _local_args(args: list[str], replace: Mapping[str, str | None]) -> list[str]:
    """The chart's ``--flag=value`` args with ``replace``'s flags set (``None``: dropped), the rest kept."""
    out = [a for a in args if a.split("=", 1)[0] not in replace]
    return out + [f"{k}={v}" for k, v in replace.items() if v is not None]


# --- Jobs and the pod ledger ----------------------------------------------------------------------------


def job_body(name: str, groups: list[dict[str, Any]], *, queue: str = "default", opportunistic: str = "false",
             stack_id: str, suspend: bool = False, node_label: str = "stowage-test/operator") -> dict[str, Any]:
    """A Stowage Job whose groups are ``{"name", "replicas", "cpu", "memory", "run_s", "dependsOn", ...}``.

    Every task selects the stack's nodes (``node_label: stack_id``) and tells the fake kubelet how long it
    runs (``run_s``) and, with ``exit_code``, how it ends.
    """
    task_list = []
    for g in groups:
        annotations = {ANN_RUN_SECONDS: str(g.get("run_s", 5))}
        if "exit_code" in g:
            annotations["fake-kubelet.stowage.io/exit-code"] = str(g["exit_code"])
        resources: dict[str, Any] = {"requests": {"cpu": g.get("cpu", "1"), "memory": g.get("memory", "1Gi")}}
        if g.get("limits"):
            resources["limits"] = g["limits"]
        task: dict[str, Any] = {
            "name": g["name"], "replicas": g.get("replicas", 1), "maxRetries": g.get("maxRetries", 2),
            "template": {"metadata": {"labels": {"app": name}, "annotations": annotations},
                         "spec": {"nodeSelector": {node_label: stack_id}, "terminationGracePeriodSeconds": 1,
                                  "containers": [{"name": "main", "image": "busybox", "resources": resources}]}},
        }
        for key in ("dependsOn", "expectedDuration", "opportunistic", "minAvailable"):
            if key in g:
                task[key] = g[key]
        task_list.append(task)
    return {"apiVersion": crd.API_VERSION, "kind": crd.JOB.kind, "metadata": {"name": name},
            "spec": {"queue": queue, "opportunistic": opportunistic, "suspend": suspend, "tasks": task_list}}


class PodLedger:
    """Every pod of a namespace ever seen, by name → the set of uids (a watch on a thread): duplicates show.

    ``last[name]`` keeps the newest ``uid``, ``phase``, ``node`` and ``labels`` seen under that name;
    ``by_uid[uid]`` the same per pod object (a name used again after its pod was gone has two).
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._core = client.CoreV1Api(api)
        self.namespace = namespace
        self.uids: dict[str, set[str]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self.by_uid: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"ledger-{namespace}", daemon=True)

    def start(self) -> PodLedger:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(10)

    def _run(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self._core.list_namespaced_pod(self.namespace)
                    for p in listed.items:
                        self._record(p)
                    version = listed.metadata.resource_version
                self._watch = watch.Watch()
                for event in self._watch.stream(self._core.list_namespaced_pod, self.namespace,
                                                resource_version=version, timeout_seconds=30):
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    self._record(obj)
                    if self._stop.is_set():
                        break
            except client.ApiException as exc:
                version = None if exc.status == 410 else version
                time.sleep(0.5)
            except Exception:  # a broken stream (an API server restart): list again
                version = None
                time.sleep(0.5)

    def _record(self, pod: client.V1Pod) -> None:
        name, uid = pod.metadata.name, pod.metadata.uid
        with self._lock:
            self.uids.setdefault(name, set()).add(uid)
            seen = {"uid": uid, "name": name, "phase": pod.status.phase if pod.status else None,
                    "node": pod.spec.node_name if pod.spec else None, "labels": dict(pod.metadata.labels or {})}
            self.last[name] = seen
            self.by_uid[uid] = seen

    def duplicates(self) -> dict[str, set[str]]:
        with self._lock:
            return {n: set(u) for n, u in self.uids.items() if len(u) > 1}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """name → the newest pod seen under it."""
        with self._lock:
            return copy.deepcopy(self.last)

    def pods(self) -> list[dict[str, Any]]:
        """Every pod object seen (one entry per uid)."""
        with self._lock:
            return copy.deepcopy(list(self.by_uid.values()))


class TaskLedger(PodLedger):
    """A :class:`PodLedger` that checks whole Jobs: every task ran to success exactly once, none was lost.

    Counted per pod object (uid): a task is *lost* when none of its attempt pods succeeded, *duplicated*
    when two did. ``unique_names``: a pod name created twice is a problem too (two creates of one attempt).
    """

    def succeeded_attempts(self, job: str, group: str) -> dict[int, list[str]]:
        """Task index → the uids of its attempt pods that succeeded."""
        out: dict[int, list[str]] = {}
        for seen in self.pods():
            parsed = tasks.parse_pod_name(job, group, seen["name"])
            if parsed is not None and seen["phase"] == "Succeeded":
                out.setdefault(parsed[0], []).append(seen["uid"])
        return out

    def problems(self, jobs: Mapping[str, Mapping[str, Any]], *, unique_names: bool = True) -> list[str]:
        """``jobs``: name → Job object (as read). Empty when every task of every Job succeeded exactly once."""
        out = [f"pod {n} created {len(u)} times (uids {sorted(u)})" for n, u in self.duplicates().items()
               if unique_names]
        for job_name, job in jobs.items():
            phase = (job.get("status") or {}).get("phase")
            if phase != "Succeeded":
                out.append(f"job {job_name} is {phase}, not Succeeded")
            for group in job["spec"]["tasks"]:
                succeeded = self.succeeded_attempts(job_name, group["name"])
                for index in range(int(group.get("replicas", 1))):
                    done = succeeded.get(index, [])
                    if not done:
                        out.append(f"task {job_name}/{group['name']}/{index} lost: no succeeded attempt")
                    elif len(done) > 1:
                        out.append(f"task {job_name}/{group['name']}/{index} succeeded {len(done)} times: {done}")
        return out

    def counts(self) -> dict[str, int]:
        """Pods seen by last phase (e.g. ``{"Succeeded": 12, "Failed": 1}``)."""
        out: dict[str, int] = {}
        for seen in self.pods():
            out[str(seen["phase"])] = out.get(str(seen["phase"]), 0) + 1
        return out


# --- cluster set-up ----------------------------------------------------------------------------------


#: Kopf's peering CRDs (ClusterKopfPeering, KopfPeering) from their one source, the chart's files/crds/ folder.
KOPF_PEERING_CRDS = tuple(d for d in yaml.safe_load_all((CRD_DIR / "kopf-peering.yaml").read_text()) if d)
FIELD_MANAGER = "stowage-tests"


def apply(api: client.ApiClient, obj: Mapping[str, Any], namespace: str | None = None) -> None:
    """Server-side apply of ``obj`` (created, or made to match), namespaced or not."""
    resource = DynamicClient(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    ns = (obj["metadata"].get("namespace") or namespace) if resource.namespaced else None
    resource.server_side_apply(body=dict(obj), name=obj["metadata"]["name"], namespace=ns,
                               field_manager=FIELD_MANAGER, force_conflicts=True)


def install_crds(api: client.ApiClient, crds: list[dict[str, Any]] | None = None) -> None:
    """``crds`` (default: Stowage's and Kopf's peering CRDs from charts/stowage/files/crds), Established, and the
    opportunistic PriorityClass."""
    if crds is None:
        crds = [*load_crds(), *KOPF_PEERING_CRDS]
    for obj in crds:
        apply(api, obj)
    ext = client.ApiextensionsV1Api(api)

    def established() -> bool:
        for obj in crds:
            conditions = ext.read_custom_resource_definition(obj["metadata"]["name"]).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for(established, 60, "the CRDs Established")
    apply(api, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": labels.OPPORTUNISTIC_PRIORITY_CLASS}, "value": -10,
                "preemptionPolicy": "Never", "globalDefault": False,
                "description": "Stowage opportunistic pods: last to run, first to go"})


def webhook_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA: the API server verifies the webhook with it)."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "webhook.crt", folder / "webhook.key"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "30", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-addext", "basicConstraints=critical,CA:TRUE"],
                       check=True, capture_output=True, timeout=60)
    return cert, key


# --- the load model ------------------------------------------------------------------------------------


class LoadModel:
    """Usage of running pods as the simulator's usage model (:class:`stowage.sim.usage.UsageModel`) draws it.

    Per pod (seeded by ``seed`` and the pod's uid, so a run is reproducible): a base fraction from the
    model's Beta draw, the ramp-up after start, and bursts to the full request at the model's rate.
    Usage = that fraction × the pod's demand (its requests, or an opportunistic pod's demand annotation).
    ``scale`` multiplies every pod's usage on a node (a usage spike: ``spike(node, 1.5)``). ``steady`` pins every
    pod on a node to one fraction (no draw, no ramp, no burst): for a test whose outcome must not hang on the draws.
    """

    def __init__(self, seed: int = 0, usage: UsageModel | None = None, horizon_s: float = 3600.0) -> None:
        self.seed, self.usage, self.horizon_s = seed, usage or UsageModel(), horizon_s
        self._demand = requests_fraction(1.0, min_cpu=0.0, min_memory=0.0)
        self._pods: dict[str, tuple[float, np.ndarray]] = {}  # uid → (base fraction, burst start times)
        self._scale: dict[str, float] = {}
        self._steady: dict[str, float] = {}
        self._lock = threading.Lock()

    def spike(self, node: str, factor: float | None) -> None:
        """Multiply usage on ``node`` by ``factor`` (``None``: back to the model)."""
        with self._lock:
            if factor is None:
                self._scale.pop(node, None)
            else:
                self._scale[node] = factor

    def steady(self, node: str, fraction: float | None) -> None:
        """Every pod on ``node`` uses ``fraction`` of its demand (``None``: back to the model)."""
        with self._lock:
            if fraction is None:
                self._steady.pop(node, None)
            else:
                self._steady[node] = fraction

    def _draws(self, uid: str) -> tuple[float, np.ndarray]:
        with self._lock:
            if uid not in self._pods:
                digest = hashlib.sha256(f"{self.seed}:{uid}".encode()).digest()
                rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
                base = float(self.usage.draw_base(rng, np.array([np.nan]))[0])
                rate = self.usage.burst_rate_per_s
                count = rng.poisson(rate * self.horizon_s) if rate > 0 else 0
                bursts = np.sort(rng.uniform(0.0, self.horizon_s, size=count))
                self._pods[uid] = (base, bursts)
            return self._pods[uid]

    def fraction(self, uid: str, t: float) -> float:
        """The model's ``f(t)`` for this pod, ``t`` seconds after it started."""
        base, bursts = self._draws(uid)
        started = bursts[bursts <= t]
        burst_until = (started[-1] + self.usage.burst_s) if started.size else -1.0
        return float(self.usage.fraction(t, np.array([0.0]), np.array([base]), np.array([burst_until]))[0])

    def __call__(self, node: str, pod: Mapping[str, Any], t: float) -> Mapping[str, float]:
        uid = (pod.get("metadata") or {}).get("uid", "")
        steady = self._steady.get(node)
        f = (self.fraction(uid, t) if steady is None else steady) * self._scale.get(node, 1.0)
        demand = self._demand(node, pod, t)
        return {"cpu": max(0.01, f * demand["cpu"]), "memory": max(float(32 << 20), f * demand["memory"]),
                "disk": f * demand["disk"], "network": f * demand["network"]}


# --- the chart -------------------------------------------------------------------------------------------


def _duration_s(text: str) -> float:
    """A Prometheus/Go duration of the chart (``5s``, ``500ms``, ``1m``) in seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


class Chart:
    """The chart rendered by the real Helm (``helm template``) for one release, and what the stack takes from it."""

    def __init__(self, release: str, namespace: str, values: Mapping[str, Any] | None = None) -> None:
        from tests.chart.render import render_documents  # one Helm runner for the chart tests and this

        self.release, self.namespace = release, namespace
        # The monitoring API is declared so the ServiceMonitors/PodMonitor render: their interval is the one read.
        self.docs = render_documents(dict(values or {}), release=release, namespace=namespace, include_crds=True,
                                     api_versions=("monitoring.coreos.com/v1",))

    def find(self, kind: str, suffix: str = "") -> dict[str, Any]:
        found = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
        if len(found) != 1:
            raise LookupError(f"{len(found)} rendered {kind} named *{suffix}")
        return found[0]

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] in kinds]

    def args(self, kind: str, suffix: str, container: str) -> list[str]:
        workload = self.find(kind, suffix)
        (found,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == container]
        return list(found.get("args") or [])

    def service_account(self, component: str) -> str:
        return self.find("ServiceAccount", f"-{component}")["metadata"]["name"]

    def scrape_interval_s(self) -> float:
        """The node monitors' scrape interval the chart gives Prometheus (its PodMonitor's)."""
        monitor = self.find("PodMonitor", "-node-monitor")
        return _duration_s(monitor["spec"]["podMetricsEndpoints"][0]["interval"])

    def settings_yaml(self) -> str:
        return self.find("ConfigMap", "-settings")["data"]["settings.yaml"]

    def scheduler_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.find("ConfigMap", "-scheduler-config")["data"]["config.yaml"])

    def webhook_configurations(self, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
        """The rendered webhook configurations, each entry's clientConfig sent to ``url`` + its service path."""
        out = []
        for doc in self.of_kind("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            doc = copy.deepcopy(doc)
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
            out.append(doc)
        return out


#: What :class:`WholeStack` applies from the chart (no workloads, Services, monitors or the chart's Secret:
#: the components run here as processes, Prometheus is configured directly, the webhook has its own CA).
APPLIED_KINDS = ("PriorityClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "ConfigMap")


# --- the whole stack ---------------------------------------------------------------------------------------


class StartStop:
    """``start()`` runs ``_start()`` and, if that fails half-way, ``stop()``s what began; a context manager."""

    def _start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class JobApi:
    """Stowage's objects through the admin client ``self.api``; namespaces from ``self.plane`` (a mixin)."""

    api: client.ApiClient | None
    plane: ControlPlane
    namespace_prefix = "t"

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @contextlib.contextmanager
    def namespace(self, prefix: str | None = None) -> Iterator[str]:
        """A fresh namespace (its pods go through the webhook); deleted afterwards (the fake nodes stay)."""
        name = f"{prefix or self.namespace_prefix}-{uuid.uuid4().hex[:6]}"
        self.plane.create_namespace(name)
        try:
            yield name
        finally:
            with contextlib.suppress(client.ApiException):
                self.core.delete_namespace(name)

    def create_queue(self, name: str, weight: float = 1.0, **spec: Any) -> None:
        body = {"apiVersion": crd.API_VERSION, "kind": crd.QUEUE.kind, "metadata": {"name": name},
                "spec": {"weight": weight, **spec}}
        try:
            self.objects.create_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def queue(self, name: str) -> dict[str, Any]:
        return self.objects.get_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name)

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.objects.create_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.JOB.plural,
                                                            dict(body))

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects.get_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.JOB.plural, name)

    def jobs(self, namespace: str) -> dict[str, dict[str, Any]]:
        listed = self.objects.list_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.JOB.plural)
        return {j["metadata"]["name"]: j for j in listed["items"]}

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.objects.patch_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.JOB.plural, name,
                                                    dict(patch))

    def pods(self, namespace: str, selector: str | None = None) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)


@dataclass
class WholeStack(StartStop, JobApi):
    """See the module docstring. ``start()`` brings everything up; ``stop()`` takes it down by PID."""

    namespace_prefix = "sys"

    plane: ControlPlane
    workdir: Path
    node_count: int = 3
    #: Nodes that get a node monitor (the first ones; None: all). The 200-node runs monitor a few: a monitor
    #: per node would be 200 Python processes on a 2-core machine; the others run regular work only.
    monitored_nodes: int | None = None
    seed: int = 0
    release: str = "stowage-e2e"
    values: Mapping[str, Any] = field(default_factory=dict)
    node_label: str = "stowage-test/system"
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    chart: Chart | None = None
    api: client.ApiClient | None = None
    load: LoadModel | None = None
    kubelet: FakeKubelet | None = None
    nodes: list[str] = field(default_factory=list)
    monitors: dict[str, Proc] = field(default_factory=dict)
    prometheus: PrometheusProcess | None = None
    extender: Proc | None = None
    scheduler: SchedulerHandle | None = None
    operator: Proc | None = None
    kubeconfigs: dict[str, Path] = field(default_factory=dict)
    webhook_port: int = 0
    applied: list[dict[str, Any]] = field(default_factory=list)
    _added: int = 0

    @property
    def release_namespace(self) -> str:
        """The release namespace (the components' ServiceAccounts and the operator's state live there)."""
        return self.release

    # --- lifecycle -------------------------------------------------------------------------------

    def _start(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.api = self.plane.api()
        values = {"scheduler.leaderElection.resourceName": f"{self.release}-scheduler", **self.values}
        self.chart = Chart(self.release, self.release_namespace, values)
        self._install_chart()
        self.settings = self.workdir / "settings.yaml"
        self.settings.write_text(self.chart.settings_yaml())
        self.cert, self.key = webhook_certificate(self.workdir / "pki")
        for component in ("scheduler", "node-monitor", "operator"):
            self.kubeconfigs[component] = token_kubeconfig(self.plane, self.core, self.chart.service_account(component),
                                                           self.release_namespace, expiration_s=86400,
                                                           name=f"{self.release}-{component}-{self.id}")
        self.load = LoadModel(self.seed)
        self.kubelet = FakeKubelet(self.plane.api(), self.workdir / "cgroup", self.load).start()
        for _ in range(self.node_count):
            self.add_node(monitor=False)
        for node in self.nodes[:self.monitored_nodes]:
            self.start_monitor(node)
        self.prometheus = PrometheusProcess(self.workdir, self._monitor_targets(), self.chart.scrape_interval_s(),
                                            jobs={"stowage-extender": [], "stowage-operator": []})
        self.prometheus.start()
        self.start_extender()
        self.start_scheduler()
        self.start_operator()
        self.wait_for_harvest()

    def _install_chart(self) -> None:
        assert self.chart is not None and self.api is not None
        install_crds(self.api, self.chart.of_kind("CustomResourceDefinition"))
        self.plane.create_namespace(self.release_namespace)
        for doc in self.chart.of_kind(*APPLIED_KINDS):
            apply(self.api, doc, self.release_namespace)
            self.applied.append(doc)
        for doc in self.chart.of_kind("Queue"):
            apply(self.api, doc)

    def stop(self) -> None:
        """Everything this stack started, by PID, in reverse order; its webhook configurations and RBAC go."""
        if self.operator is not None:
            self.operator.stop()
        self._remove(self.chart.of_kind("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                     if self.chart else [])
        stop_in_order(self.scheduler, self.extender, self.prometheus, *self.monitors.values(), self.kubelet)
        # Cluster-scoped grants go too (a later module's `helm install` adopts nothing it did not create).
        self._remove([d for d in self.applied if d["kind"] in ("ClusterRole", "ClusterRoleBinding")])

    def _remove(self, docs: list[dict[str, Any]]) -> None:
        if self.api is None:
            return
        dynamic = DynamicClient(self.api)
        for doc in docs:
            with contextlib.suppress(Exception):
                resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                resource.delete(name=doc["metadata"]["name"],
                                namespace=doc["metadata"].get("namespace") if resource.namespaced else None)

    # --- components ------------------------------------------------------------------------------

    def add_node(self, monitor: bool = True) -> str:
        """One more fake node (cpu 8 / memory 16Gi), with its node monitor scraped by Prometheus."""
        assert self.kubelet is not None
        self._added += 1
        spec = NodeSpec(f"sys-{self.id}-{self._added - 1}", capacity=dict(CAPACITY), allocatable=dict(ALLOCATABLE),
                        labels={self.node_label: self.id})
        (node,) = self.kubelet.add_nodes([spec])
        self.nodes.append(node)
        if monitor:
            self.start_monitor(node)
        return node

    def _monitor_targets(self) -> list[str]:
        return [f"127.0.0.1:{m.port}" for m in self.monitors.values() if m.port]

    def start_monitor(self, node: str) -> Proc:
        """The node's monitor with the chart's args (again on its old port after a kill)."""
        assert self.kubelet is not None and self.chart is not None
        args = _local_args(self.chart.args("DaemonSet", "-node-monitor", "node-monitor")[1:],
                           {"--cgroup-root": None, "--proc-root": None, "--port": None, "--config": str(self.settings)})
        old = self.monitors.get(node)
        argv = node_monitor_argv(self.kubelet, node, self.kubeconfigs["node-monitor"],
                                 port=old.port if old else 0, extra=args)
        monitor = Proc(f"node-monitor-{node}", argv, self.workdir / "logs" / f"node-monitor-{node}.log",
                       NODE_MONITOR_PORT_LOGGED)
        monitor.start()
        self.monitors[node] = monitor
        if self.prometheus is not None:
            self.prometheus.set_targets("stowage-node-monitor", self._monitor_targets())
        return monitor

    def start_extender(self) -> Proc:
        """The extender with the chart's sidecar args (again on its old port: kube-scheduler's urlPrefix holds)."""
        assert self.chart is not None and self.prometheus is not None
        chart_args = self.chart.args("Deployment", "-scheduler", "extender")[1:]
        interval = next(a.split("=", 1)[1] for a in chart_args if a.startswith("--prometheus-interval="))
        args = _local_args(chart_args, {"--host": None, "--port": None, "--prometheus-url": None,
                                        "--prometheus-interval": None, "--config": str(self.settings)})
        argv = extender_argv(self.kubeconfigs["scheduler"], self.prometheus.url, interval_s=float(interval),
                             port=self.extender.port if self.extender else 0, extra=args)
        self.extender = Proc("extender", argv, self.workdir / "logs" / "extender.log", EXTENDER_PORT_LOGGED)
        self.extender.start()
        wait_for(lambda: httpx.get(f"{self.extender_url}/readyz", timeout=5.0).status_code == 200, 120,
                 "the extender's /readyz (node and pod caches synced)")
        self.prometheus.set_targets("stowage-extender", [f"127.0.0.1:{self.extender.port}"])
        return self.extender

    @property
    def extender_url(self) -> str:
        assert self.extender is not None
        return f"http://127.0.0.1:{self.extender.port}"

    def start_scheduler(self) -> SchedulerHandle:
        """kube-scheduler from the chart's config and flags, under the scheduler's token, leading its own lease."""
        assert self.chart is not None
        if self.scheduler is not None:
            return self.scheduler.start()
        kubeconfig = self.kubeconfigs["scheduler"]
        config = self.chart.scheduler_config()
        config["clientConnection"] = {**(config.get("clientConnection") or {}), "kubeconfig": str(kubeconfig)}
        for entry in config.get("extenders") or []:
            entry["urlPrefix"] = self.extender_url
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        chart_flags = self.chart.args("Deployment", "-scheduler", "kube-scheduler")
        flags = [a for a in chart_flags if not a.startswith("--config")]
        argv = [str(self.plane.assets / "kube-scheduler"), f"--config={path}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", "--secure-port=0", *flags, f"--feature-gates={FEATURE_GATES}"]
        name = f"kube-scheduler-{self.release}"
        process = _Process(name, lambda: argv, self.workdir / "logs" / f"{name}.log")
        self.scheduler = SchedulerHandle(name, path, process, self.plane).start(120.0)
        lease = f"{config['leaderElection']['resourceNamespace']}/{config['leaderElection']['resourceName']}"
        wait_for(lambda: f"successfully acquired lease {lease}" in process.log.read_text(errors="replace")
                 or process.check_alive(), 120, f"kube-scheduler to lead on {lease}")
        return self.scheduler

    def start_operator(self, timeout_s: float = 120.0) -> Proc:
        """The operator with the chart's args, its webhooks on 127.0.0.1 (again on the same ports after a kill)."""
        assert self.chart is not None and self.prometheus is not None
        old = self.operator
        args = _local_args(self.chart.args("Deployment", "-operator", "operator"), {
            "--config": str(self.settings), "--prometheus-url": self.prometheus.url,
            "--webhook-host": "127.0.0.1", "--webhook-port": str(self.webhook_port),
            "--webhook-cert": str(self.cert), "--webhook-key": str(self.key),
            "--metrics-host": "127.0.0.1", "--metrics-port": str(old.port if old else 0)})
        argv = [str(STOWAGE), *args, f"--kubeconfig={self.kubeconfigs['operator']}"]
        proc = Proc("operator", argv, self.workdir / "logs" / "operator.log", OPERATOR_METRICS_LOGGED,
                    env={"POD_NAMESPACE": self.release_namespace})
        proc.start(timeout_s)
        self.operator = proc

        def served() -> int | None:
            if not proc.running:
                raise AssertionError(f"the operator exited:\n{proc.tail()}")
            found = re.search(WEBHOOKS_SERVED, proc.tail(200_000))
            return int(found.group(1)) if found and OPERATOR_STARTED in proc.tail(200_000) else None

        self.webhook_port = wait_for(served, timeout_s, "the operator's start and its webhook server")
        assert self.chart is not None
        for doc in self.chart.webhook_configurations(f"https://127.0.0.1:{self.webhook_port}", self.cert.read_bytes()):
            apply(self.api, doc)
        self.prometheus.set_targets("stowage-operator", [f"127.0.0.1:{proc.port}"])
        return proc

    def kill(self, component: str) -> None:
        """SIGKILL one component by PID: ``operator``, ``extender``, ``scheduler`` or ``node-monitor/<node>``."""
        if component == "operator":
            assert self.operator is not None
            self.operator.kill()
        elif component == "extender":
            assert self.extender is not None
            self.extender.kill()
        elif component == "scheduler":
            assert self.scheduler is not None and self.scheduler.pid is not None
            os.kill(self.scheduler.pid, signal.SIGKILL)
            self.scheduler.stop()
        elif component.startswith("node-monitor/"):
            self.monitors[component.split("/", 1)[1]].kill()
        else:
            raise ValueError(f"unknown component {component!r}")

    def heal(self, timeout_s: float = 180.0) -> None:
        """Start whatever is not running (Prometheus, monitors, extender, scheduler, operator); wait for harvest."""
        assert self.prometheus is not None and self.scheduler is not None
        if not self.prometheus.running:
            self.prometheus.start()
        while len(self.nodes) < self.node_count:  # a test deleted one
            self.add_node()
        for node, monitor in list(self.monitors.items()):
            if not monitor.running:
                self.start_monitor(node)
        if self.extender is None or not self.extender.running:
            self.start_extender()
        if not self.scheduler.running:
            self.start_scheduler()
        if self.operator is None or not self.operator.running:
            self.start_operator()
        self.wait_for_harvest(timeout_s)

    def restart_apiserver(self) -> None:
        """kube-apiserver stopped and started on the same port and etcd (every component must resume its watches)."""
        self.plane.restart_apiserver()

    def delete_node(self, node: str) -> None:
        """A node dies and is deleted (``kubectl delete node``): its kubelet and monitor stop, its pods stay behind
        on a Node that no longer exists, for kube-controller-manager's pod garbage collector."""
        assert self.kubelet is not None and self.prometheus is not None
        self.kubelet.forget_nodes([node])
        self.monitors.pop(node).stop()
        self.prometheus.set_targets("stowage-node-monitor", self._monitor_targets())
        self.core.delete_node(node)
        self.nodes.remove(node)

    # --- observations ----------------------------------------------------------------------------

    def settings_loaded(self) -> StowageSettings:
        """The settings every component runs with (the chart's ConfigMap over the defaults)."""
        return load_settings(self.settings, environ={})

    def extender_metrics(self) -> str:
        return httpx.get(f"{self.extender_url}/metrics", timeout=10.0).text

    def harvestable(self, node: str, resource: str = "memory") -> float:
        """What the extender's /metrics says ``node`` can harvest now (0 once its utilization is stale)."""
        return metric(self.extender_metrics(), labels.METRICS.NODE_HARVESTABLE, {"node": node, "resource": resource})

    def wait_for_harvest(self, timeout_s: float = 180.0, nodes: list[str] | None = None) -> None:
        """Until the extender reports harvestable memory on every node (fresh samples through Prometheus)."""
        nodes = nodes or list(self.monitors)
        wait_for(lambda: all(self.harvestable(n) > 2**30 for n in nodes), timeout_s,
                 "harvestable memory on every node (node monitors → Prometheus → extender)")

    def operator_metrics(self) -> str:
        assert self.operator is not None
        return httpx.get(f"http://127.0.0.1:{self.operator.port}/metrics", timeout=10.0).text

    def logs(self) -> str:
        procs = [p for p in (self.operator, self.extender) if p is not None]
        return "\n".join(f"--- {p.name} (pid {p.pid})\n{p.tail(4000)}" for p in procs)

    def forbidden(self) -> dict[str, list[str]]:
        """Lines of every component's logs (this run's and earlier runs') that show a 403: a missing chart grant."""
        out: dict[str, list[str]] = {}
        for log in sorted((self.workdir / "logs").glob("*.log")):
            lines = [line for line in log.read_text(errors="replace").splitlines()
                     if "forbidden" in line.lower() or " 403" in line]
            if lines:
                out[log.name] = lines[:5]
        return out

    # --- the API (and :class:`JobApi`'s) ------------------------------------------------------------------

    def job_body(self, name: str, groups: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """:func:`job_body` with tasks pinned to this stack's nodes."""
        return job_body(name, groups, stack_id=self.id, node_label=self.node_label, **kwargs)

    def wait_jobs_done(self, namespace: str, timeout_s: float = 300.0) -> dict[str, dict[str, Any]]:
        """Until every Job of the namespace is Succeeded or Failed; returns them."""
        def done() -> dict[str, dict[str, Any]] | None:
            jobs = self.jobs(namespace)
            finished = all((j.get("status") or {}).get("phase") in ("Succeeded", "Failed") for j in jobs.values())
            return jobs if jobs and finished else None

        try:
            return wait_for(done, timeout_s, f"every Job of {namespace} finished", interval_s=1.0)
        except AssertionError as exc:
            phases = {n: (j.get("status") or {}).get("phase") for n, j in self.jobs(namespace).items()}
            raise AssertionError(f"{exc}; phases: {phases}\n{self.logs()}") from None

    def opportunistic_bound(self, namespace: str) -> dict[str, str]:
        """Opportunistic pods of the namespace that have a node: name → node."""
        selector = f"{labels.LABEL_CLASS}=opportunistic"
        return {p.metadata.name: p.spec.node_name for p in self.pods(namespace, selector) if p.spec.node_name}
