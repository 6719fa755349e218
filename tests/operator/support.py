"""The operator on a real control plane, as processes: what the live tests of ``tests/operator`` run.

One :class:`OperatorStack` per test module::

    control plane (session fixture) ── CRDs (charts/stowage/crds + Kopf's peering CRDs), PriorityClass
    fake kubelet: ``nodes`` Ready nodes (cpu 8 / memory 16Gi capacity, 7.5 / 15Gi allocatable), labelled
                  ``stowage-test/operator=<id>``; task pods select that label
    stowage extender (--port 0) ◄── kube-scheduler from manifests/scheduler-config.yaml (urlPrefix patched)
    harvest=True: one ``stowage node-monitor`` per node + a real Prometheus, given to the extender and the
                  operator (opportunistic pods then bind); otherwise no Prometheus: nothing is harvested
    stowage operator (a process: SIGKILL-able), as its own ServiceAccount (bound to cluster-admin), so
                  the test's own pods (the admin's) go through the pod webhook and the operator's do not;
                  webhooks on 127.0.0.1 with a self-signed certificate, configurations written by it

Everything runs on 127.0.0.1, logs under ``<workdir>/logs`` and is stopped by PID. Waits poll a
condition with a generous deadline (a loaded 2-core machine); they are never timing assertions.
Teardown removes the webhook configurations (they fail closed: left behind, they would refuse every
Stowage pod of later tests) and the fake nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml
from kubernetes import client, watch
from stowage.operator import crd

from stowage import labels
from tests.scheduler.stack import MANIFEST, Proc, PrometheusProcess
from tests.support.controlplane import REPO, ControlPlane, SchedulerHandle
from tests.support.fake_kubelet import ANN_RUN_SECONDS, FakeKubelet, NodeSpec
from tests.support.processes import EXTENDER_PORT_LOGGED, NODE_MONITOR_PORT_LOGGED

__all__ = [
    "NODE_LABEL",
    "OPERATOR_METRICS_LOGGED",
    "OperatorStack",
    "PodLedger",
    "job_body",
    "metric",
    "operator_stack",
    "running_operator",
    "strict_drf_config",
    "wait_for",
]

T = TypeVar("T")

STOWAGE = Path(sys.executable).with_name("stowage")
KUBECTL = REPO / ".tools" / "kubectl" / "kubectl"
NODE_LABEL = "stowage-test/operator"
CAPACITY: Mapping[str, str] = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
ALLOCATABLE: Mapping[str, str] = {"cpu": "7500m", "memory": "15Gi", "pods": "110", "ephemeral-storage": "100Gi"}
OPERATOR_NAMESPACE = "stowage-system"
#: ``stowage operator``'s start-up line naming the metrics port it bound (group 1).
OPERATOR_METRICS_LOGGED = r"metrics on http://0\.0\.0\.0:(\d+)/metrics"
OPERATOR_STARTED = "stowage operator started"


#: Kopf's peering CRDs (ClusterKopfPeering, KopfPeering) from their one source, the chart's crds/ folder.
KOPF_PEERING_CRDS = tuple(d for d in yaml.safe_load_all((REPO / "charts" / "stowage" / "crds" / "kopf-peering.yaml")
                                                        .read_text()) if d)


def wait_for(condition: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.5) -> T:
    """Poll ``condition`` until truthy, return it; fail naming ``what`` after ``timeout_s`` (a bound, not a check)."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except (client.ApiException, httpx.HTTPError, OSError) as exc:  # transient while a process restarts
            last_error = exc
        if time.monotonic() > deadline:
            suffix = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{suffix}")
        time.sleep(interval_s)


def metric(text: str, name: str, want: Mapping[str, str] | None = None) -> float:
    """Sum of the samples of ``name`` in a /metrics text whose labels include ``want``."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if found:
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found.group(1) or ""))
            if all(have.get(k) == v for k, v in (want or {}).items()):
                total += float(found.group(2))
    return total


def job_body(name: str, groups: list[dict[str, Any]], *, queue: str = "default", opportunistic: str = "false",
             stack_id: str, suspend: bool = False) -> dict[str, Any]:
    """A Stowage Job whose groups are ``{"name", "replicas", "cpu", "memory", "run_s", "dependsOn", ...}``.

    Every task selects the stack's nodes and tells the fake kubelet how long it runs (``run_s``) and,
    with ``exit_code``, how it ends.
    """
    tasks = []
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
                         "spec": {"nodeSelector": {NODE_LABEL: stack_id}, "terminationGracePeriodSeconds": 1,
                                  "containers": [{"name": "main", "image": "busybox", "resources": resources}]}},
        }
        for key in ("dependsOn", "expectedDuration"):
            if key in g:
                task[key] = g[key]
        tasks.append(task)
    return {"apiVersion": crd.API_VERSION, "kind": crd.JOB.kind, "metadata": {"name": name},
            "spec": {"queue": queue, "opportunistic": opportunistic, "suspend": suspend, "tasks": tasks}}


class PodLedger:
    """Every pod of a namespace ever seen, by name → the set of uids (a watch on a thread): duplicates show."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._core = client.CoreV1Api(api)
        self.namespace = namespace
        self.uids: dict[str, set[str]] = {}
        self.last: dict[str, dict[str, Any]] = {}
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
                        self._record(p.metadata.name, p.metadata.uid, p.status.phase)
                    version = listed.metadata.resource_version
                self._watch = watch.Watch()
                for event in self._watch.stream(self._core.list_namespaced_pod, self.namespace,
                                                resource_version=version, timeout_seconds=30):
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    self._record(obj.metadata.name, obj.metadata.uid, obj.status.phase)
                    if self._stop.is_set():
                        break
            except client.ApiException as exc:
                version = None if exc.status == 410 else version
                time.sleep(0.5)
            except Exception:  # a broken stream: list again
                version = None
                time.sleep(0.5)

    def _record(self, name: str, uid: str, phase: str | None) -> None:
        with self._lock:
            self.uids.setdefault(name, set()).add(uid)
            self.last[name] = {"uid": uid, "phase": phase}

    def duplicates(self) -> dict[str, set[str]]:
        with self._lock:
            return {n: set(u) for n, u in self.uids.items() if len(u) > 1}


@dataclass
class OperatorStack:
    """See the module docstring. ``start()`` brings the cluster side up; ``start_operator()`` the operator."""

    plane: ControlPlane
    workdir: Path
    nodes_count: int = 3
    harvest: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    api: client.ApiClient | None = None
    kubelet: FakeKubelet | None = None
    nodes: list[str] = field(default_factory=list)
    monitors: dict[str, Proc] = field(default_factory=dict)
    prometheus: PrometheusProcess | None = None
    extender: Proc | None = None
    scheduler: SchedulerHandle | None = None
    operators: list[Proc] = field(default_factory=list)
    operator_kubeconfig: Path | None = None
    operator_user: str = ""
    cert: Path | None = None
    key: Path | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> OperatorStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.api = self.plane.api()
        install(self.api)
        self.plane.create_namespace(OPERATOR_NAMESPACE)
        self.operator_kubeconfig, self.operator_user = operator_account(self.plane, self.api)
        self.cert, self.key = webhook_certificate(self.workdir / "pki")
        self.kubelet = FakeKubelet(self.plane.api(), self.workdir / "cgroup").start()
        specs = [NodeSpec(f"op-{self.id}-{i}", capacity=dict(CAPACITY), allocatable=dict(ALLOCATABLE),
                          labels={NODE_LABEL: self.id}) for i in range(self.nodes_count)]
        self.nodes = self.kubelet.add_nodes(specs)
        if self.harvest:
            for node in self.nodes:
                self._start_monitor(node)
            self.prometheus = PrometheusProcess(self.workdir, [f"127.0.0.1:{m.port}" for m in self.monitors.values()],
                                                scrape_interval_s=2.0)
            self.prometheus.start()
        argv = [str(STOWAGE), "extender", "--kubeconfig", str(self.plane.kubeconfig), "--host", "127.0.0.1",
                "--port", "0", "--prometheus-interval", "1"]
        if self.prometheus is not None:
            argv += ["--prometheus-url", self.prometheus.url]
        self.extender = Proc("extender", argv, self.workdir / "logs" / "extender.log", EXTENDER_PORT_LOGGED)
        self.extender.start()
        url = f"http://127.0.0.1:{self.extender.port}"
        wait_for(lambda: httpx.get(f"{url}/readyz", timeout=5.0).status_code == 200, 120, "the extender's /readyz")
        config = self.plane.scheduler_config(yaml.safe_load(MANIFEST.read_text()), url)
        self.scheduler = self.plane.start_scheduler(config, name=f"stowage-scheduler-op-{self.id}")
        if self.harvest:
            self.wait_for_harvest()

    def _start_monitor(self, node: str) -> None:
        assert self.kubelet is not None
        argv = [str(STOWAGE), "node-monitor", "--node-name", node, "--kubeconfig", str(self.plane.kubeconfig),
                "--cgroup-root", str(self.kubelet.cgroup_dir(node)), "--proc-root", str(self.kubelet.proc_dir(node)),
                "--port", "0", "--address", "127.0.0.1"]
        monitor = Proc(f"node-monitor-{node}", argv, self.workdir / "logs" / f"node-monitor-{node}.log",
                       NODE_MONITOR_PORT_LOGGED)
        monitor.start()
        self.monitors[node] = monitor

    def wait_for_harvest(self, timeout_s: float = 180.0) -> None:
        """Until the extender reports harvestable memory on every node (fresh samples through Prometheus)."""
        assert self.extender is not None
        url = f"http://127.0.0.1:{self.extender.port}/metrics"

        def ready() -> bool:
            text = httpx.get(url, timeout=10.0).text
            return all(metric(text, "stowage_node_harvestable", {"node": n, "resource": "memory"}) > 2**30
                       for n in self.nodes)

        wait_for(ready, timeout_s, "harvestable memory on every node (node monitors → Prometheus → extender)")

    def stop(self) -> None:
        """Everything this stack started, by PID, in reverse order; the webhook configurations are removed."""
        for proc in self.operators:
            proc.stop()
        self.remove_webhook_configurations()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.extender is not None:
            self.extender.stop()
        if self.prometheus is not None:
            self.prometheus.stop()
        for monitor in self.monitors.values():
            monitor.stop()
        if self.kubelet is not None:
            with contextlib.suppress(Exception):
                self.kubelet.stop(cleanup=True)

    def remove_webhook_configurations(self) -> None:
        """The operator's webhook configurations go (they fail closed: left behind they refuse Stowage pods)."""
        if self.api is None:
            return
        admission_api = client.AdmissionregistrationV1Api(self.api)
        with contextlib.suppress(client.ApiException):
            admission_api.delete_mutating_webhook_configuration("stowage.io")
        with contextlib.suppress(client.ApiException):
            admission_api.delete_validating_webhook_configuration("stowage.io")

    def __enter__(self) -> OperatorStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the operator ----------------------------------------------------------------------------

    def operator_argv(self, *, webhooks: bool = True, peering: str | None = None,
                      extra: tuple[str, ...] = ()) -> list[str]:
        assert self.operator_kubeconfig is not None
        argv = [str(STOWAGE), "operator", "--kubeconfig", str(self.operator_kubeconfig), "--metrics-port", "0"]
        if self.prometheus is not None:
            argv += ["--prometheus-url", self.prometheus.url]
        if webhooks:
            argv += ["--webhook-host", "127.0.0.1", "--webhook-port", "0", "--webhook-cert", str(self.cert),
                     "--webhook-key", str(self.key), "--webhook-url", "auto"]
        if peering:
            argv += ["--peering", peering]
        return argv + list(extra)

    def start_operator(self, *, webhooks: bool = True, peering: str | None = None, extra: tuple[str, ...] = (),
                       timeout_s: float = 120.0) -> Proc:
        """Start ``stowage operator`` and wait until it has started (and served its webhooks, when on)."""
        n = len(self.operators)
        proc = Proc(f"operator-{n}", self.operator_argv(webhooks=webhooks, peering=peering, extra=extra),
                    self.workdir / "logs" / f"operator-{n}.log", OPERATOR_METRICS_LOGGED)
        env_before = os.environ.get("POD_NAMESPACE")
        os.environ["POD_NAMESPACE"] = OPERATOR_NAMESPACE
        try:
            proc.start(timeout_s)
        finally:
            if env_before is None:
                os.environ.pop("POD_NAMESPACE", None)
            else:
                os.environ["POD_NAMESPACE"] = env_before
        self.operators.append(proc)
        wait_for(lambda: OPERATOR_STARTED in proc.tail(200_000) or _died(proc), timeout_s, "the operator's start")
        _check_alive(proc)
        if webhooks:
            wait_for(lambda: "webhooks served at" in proc.tail(200_000) or _died(proc), timeout_s,
                     "the operator's webhook server")
            _check_alive(proc)
            self.wait_for_webhooks(timeout_s)
        return proc

    def wait_for_webhooks(self, timeout_s: float = 120.0) -> None:
        """Until the API server has the mutating configuration (written by the operator)."""
        admission_api = client.AdmissionregistrationV1Api(self.api)
        wait_for(lambda: admission_api.read_mutating_webhook_configuration("stowage.io"), timeout_s,
                 "the operator's MutatingWebhookConfiguration")

    def operator_metrics(self, proc: Proc | None = None) -> str:
        proc = proc or self.operators[-1]
        return httpx.get(f"http://127.0.0.1:{proc.port}/metrics", timeout=10.0).text

    # --- the API ---------------------------------------------------------------------------------

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @contextlib.contextmanager
    def namespace(self, prefix: str = "op") -> Iterator[str]:
        """A fresh namespace; its pods are deleted afterwards (the fake nodes stay for the next test)."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
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

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.objects.patch_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.JOB.plural, name,
                                                    dict(patch))

    def wait_job_phase(self, namespace: str, name: str, phases: tuple[str, ...] | str,
                       timeout_s: float = 240.0) -> dict[str, Any]:
        phases = (phases,) if isinstance(phases, str) else phases

        def reached() -> dict[str, Any] | None:
            job = self.job(namespace, name)
            return job if (job.get("status") or {}).get("phase") in phases else None

        try:
            return wait_for(reached, timeout_s, f"job {namespace}/{name} in phase {phases}")
        except AssertionError as exc:
            status = (self.job(namespace, name).get("status") or {})
            logs = "\n".join(f"--- {p.name}\n{p.tail(3000)}" for p in self.operators[-1:])
            raise AssertionError(f"{exc}; status: {json.dumps(status)}\n{logs}") from None

    def pods(self, namespace: str, selector: str | None = None) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def kubectl(self, *args: str) -> str:
        """``kubectl`` (the real binary from .tools, if present) against this control plane; its stdout."""
        if not KUBECTL.exists():
            raise FileNotFoundError(f"{KUBECTL} missing (bash scripts/setup.sh unpacks it)")
        done = subprocess.run([str(KUBECTL), f"--kubeconfig={self.plane.kubeconfig}", *args], capture_output=True,
                              text=True, timeout=60, check=True)
        return done.stdout

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid})\n{p.tail(4000)}" for p in self.operators)


def _died(proc: Proc) -> bool:
    return proc.proc is not None and proc.proc.poll() is not None


def _check_alive(proc: Proc) -> None:
    if _died(proc):
        raise RuntimeError(f"{proc.name} exited with {proc.proc.returncode if proc.proc else '?'}:\n{proc.tail()}")


# --- cluster set-up ----------------------------------------------------------------------------------


_PATHS = {
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


def _apply(api: client.ApiClient, obj: Mapping[str, Any]) -> None:
    """Server-side apply of a cluster-scoped ``obj`` (created, or made to match)."""
    from tests.operator.conftest import RawApi  # the package's raw client (imported late: conftest imports us)

    RawApi(api).apply(f"{_PATHS[obj['kind']]}/{obj['metadata']['name']}", obj)


def install(api: client.ApiClient) -> None:
    """Stowage's CRDs (from charts/stowage/crds), Kopf's peering CRDs and the opportunistic PriorityClass."""
    crds = [*crd.load_crds(), *KOPF_PEERING_CRDS]
    for obj in crds:
        _apply(api, obj)
    ext = client.ApiextensionsV1Api(api)

    def established() -> bool:
        for obj in crds:
            conditions = ext.read_custom_resource_definition(obj["metadata"]["name"]).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for(established, 60, "the CRDs Established")
    _apply(api, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": labels.OPPORTUNISTIC_PRIORITY_CLASS}, "value": -10,
                 "preemptionPolicy": "Never", "globalDefault": False,
                 "description": "Stowage opportunistic pods: last to run, first to go"})


def operator_account(plane: ControlPlane, api: client.ApiClient) -> tuple[Path, str]:
    """A ServiceAccount for the operator (cluster-admin here), its token's kubeconfig, and its username."""
    core = client.CoreV1Api(api)
    name = "stowage-operator"
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account(OPERATOR_NAMESPACE, {"metadata": {"name": name}})
    _apply(api, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": "stowage-operator-tests"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": OPERATOR_NAMESPACE}]})
    request = core.create_namespaced_service_account_token(
        name, OPERATOR_NAMESPACE, {"spec": {"expirationSeconds": 86400}})
    kubeconfig = plane.kubeconfig_for_token(request.status.token, name="stowage-operator")
    return kubeconfig, f"system:serviceaccount:{OPERATOR_NAMESPACE}:{name}"


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


# --- fixtures (registered in tests/operator/conftest.py) ---------------------------------------------


@pytest.fixture(scope="package")
def operator_stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorStack]:
    """One :class:`OperatorStack` for the live modules of this package; each module starts its own operator.

    With Prometheus installed the stack harvests (node monitors + Prometheus), so opportunistic pods bind;
    without it, tests that need harvesting skip.
    """
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control of kube-scheduler (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    harvest = prometheus_available()
    with OperatorStack(control_plane, tmp_path_factory.mktemp("operator-stack"), harvest=harvest) as stack:
        yield stack


def prometheus_available() -> bool:
    return bool(os.environ.get("PROMETHEUS") or shutil.which("prometheus") or os.path.exists("/usr/bin/prometheus"))


def strict_drf_config(stack: OperatorStack) -> tuple[str, str]:
    """``--config`` with ``packing.fairness_knob: 0.5``: with two queues only the one furthest below its share
    competes for a slot (the default 0.25 lets ⌈0.75·2⌉ = 2, i.e. both, compete and the packing score decides)."""
    path = stack.workdir / "strict-drf.yaml"
    path.write_text("packing:\n  fairness_knob: 0.5\n")
    return "--config", str(path)


@contextlib.contextmanager
def running_operator(stack: OperatorStack, **kwargs: Any) -> Iterator[Proc]:
    """An operator process for the duration of the block; stopped by PID, its webhook configurations removed."""
    proc = stack.start_operator(**kwargs)
    try:
        yield proc
    finally:
        proc.stop()
        stack.remove_webhook_configurations()
