"""The operator on a real control plane, as processes: what the live tests of ``tests/operator`` run.

One :class:`OperatorStack` per test module::

    control plane (session fixture) ── CRDs (charts/stowage/files/crds + Kopf's peering CRDs), PriorityClass
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
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from tests.support.controlplane import REPO, ControlPlane, SchedulerHandle
from tests.support.fake_kubelet import FakeKubelet, NodeSpec
from tests.support.processes import EXTENDER_PORT_LOGGED, NODE_MONITOR_PORT_LOGGED
from tests.support.stack import (
    ALLOCATABLE,
    CAPACITY,
    OPERATOR_METRICS_LOGGED,
    SCHEDULER_MANIFEST,
    STOWAGE,
    JobApi,
    PodLedger,
    Proc,
    PrometheusProcess,
    StartStop,
    apply,
    extender_argv,
    install_crds,
    metric,
    node_monitor_argv,
    stop_in_order,
    wait_for,
    webhook_certificate,
)
from tests.support.stack import job_body as _job_body

MANIFEST = SCHEDULER_MANIFEST

__all__ = [
    "NODE_LABEL",
    "OPERATOR_METRICS_LOGGED",
    "OperatorStack",
    "PodLedger",
    "job_body",
    "metric",
    "operator_stack",
    "running_operator",
    "wait_for",
]

KUBECTL = REPO / ".tools" / "kubectl" / "kubectl"
NODE_LABEL = "stowage-test/operator"
OPERATOR_NAMESPACE = "stowage-system"
OPERATOR_STARTED = "stowage operator started"


def job_body(name: str, groups: list[dict[str, Any]], *, stack_id: str, **kwargs: Any) -> dict[str, Any]:
    """:func:`tests.support.stack.job_body` with tasks on this package's nodes (``NODE_LABEL``)."""
    return _job_body(name, groups, stack_id=stack_id, node_label=NODE_LABEL, **kwargs)


@dataclass
class OperatorStack(StartStop, JobApi):
    """See the module docstring. ``start()`` brings the cluster side up; ``start_operator()`` the operator."""

    namespace_prefix = "op"

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
        argv = extender_argv(self.plane.kubeconfig, self.prometheus.url if self.prometheus else None)
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
        argv = node_monitor_argv(self.kubelet, node, self.plane.kubeconfig)
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
        stop_in_order(*self.operators)
        self.remove_webhook_configurations()
        stop_in_order(self.scheduler, self.extender, self.prometheus, *self.monitors.values(), self.kubelet)

    def remove_webhook_configurations(self) -> None:
        """The operator's webhook configurations go (they fail closed: left behind they refuse Stowage pods)."""
        if self.api is None:
            return
        admission_api = client.AdmissionregistrationV1Api(self.api)
        with contextlib.suppress(client.ApiException):
            admission_api.delete_mutating_webhook_configuration("stowage.io")
        with contextlib.suppress(client.ApiException):
            admission_api.delete_validating_webhook_configuration("stowage.io")

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


def install(api: client.ApiClient) -> None:
    """Stowage's and Kopf's peering CRDs (charts/stowage/files/crds), Established; the opportunistic PriorityClass."""
    install_crds(api)


def operator_account(plane: ControlPlane, api: client.ApiClient) -> tuple[Path, str]:
    """A ServiceAccount for the operator (cluster-admin here), its token's kubeconfig, and its username."""
    core = client.CoreV1Api(api)
    name = "stowage-operator"
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account(OPERATOR_NAMESPACE, {"metadata": {"name": name}})
    apply(api, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": "stowage-operator-tests"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": OPERATOR_NAMESPACE}]})
    request = core.create_namespaced_service_account_token(
        name, OPERATOR_NAMESPACE, {"spec": {"expirationSeconds": 86400}})
    kubeconfig = plane.kubeconfig_for_token(request.status.token, name="stowage-operator")
    return kubeconfig, f"system:serviceaccount:{OPERATOR_NAMESPACE}:{name}"


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


@contextlib.contextmanager
def running_operator(stack: OperatorStack, **kwargs: Any) -> Iterator[Proc]:
    """An operator process for the duration of the block; stopped by PID, its webhook configurations removed."""
    proc = stack.start_operator(**kwargs)
    try:
        yield proc
    finally:
        proc.stop()
        stack.remove_webhook_configurations()

