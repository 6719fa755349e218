"""Two operator replicas behind a stand-in for their webhook Service, and pods created while one is killed.

The model (docs/install.md "High availability"): the chart runs ``operator.replicas`` (2) operators peered as
``operator.peering``, each serving the webhooks; the API server reaches them through the Service
``<release>-operator-webhook``. Here the operators are local processes with the chart's arguments (as
:class:`tests.support.stack.WholeStack` runs one) and :class:`LoopbackService` stands in for the Service: a
TCP proxy on 127.0.0.1 that the chart's webhook configurations point at (TLS passes through: the API server
verifies the operators' own certificate). Like kube-proxy it picks a ready endpoint per *connection*, round
robin, and never retries a connection whose endpoint refused it (the API server sees that as a failed call, and
the webhook's ``failurePolicy: Fail`` refuses the pod). Like the endpoints controller it drops an endpoint whose
readiness check fails and takes it back when it passes: the check is the chart's readiness probe (a TCP connect
to the webhook port) every ``check_s`` (1 s: the kubelet notices a dead container at its next 1-s relist and the
pod turns unready at once, without waiting for the probe's period). What is not modelled: the endpoints
controller's and kube-proxy's propagation (sub-second on a small cluster) and the container's restart.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tests.support.chart_tokens import token_kubeconfig
from tests.support.stack import (
    OPERATOR_METRICS_LOGGED,
    OPERATOR_STARTED,
    STOWAGE,
    WEBHOOKS_SERVED,
    Chart,
    Proc,
    WholeStack,
    _local_args,
    apply,
    wait_for,
    webhook_certificate,
)

__all__ = ["Admission", "LoopbackService", "OperatorPair", "create_pods_while"]


class LoopbackService:
    """A round-robin TCP proxy over the endpoints that pass a TCP readiness check (see the module docstring)."""

    def __init__(self, endpoints: list[int], check_s: float = 1.0) -> None:
        self.endpoints = list(endpoints)
        self.ready: list[int] = list(endpoints)
        self.check_s = check_s
        self.removed_at: dict[int, float] = {}
        #: Connections opened to each endpoint, and those open now (the API server keeps its connection).
        self.opened: dict[int, int] = dict.fromkeys(endpoints, 0)
        self.open: dict[int, int] = dict.fromkeys(endpoints, 0)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._rr = itertools.count()
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True),
                         threading.Thread(target=self._check, daemon=True)]

    def start(self) -> LoopbackService:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _check(self) -> None:
        while not self._stopping.wait(self.check_s):
            ready = []
            for port in self.endpoints:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    ready.append(port)
            for port in set(self.ready) - set(ready):
                self.removed_at[port] = time.monotonic()
            self.ready = ready

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(downstream,), daemon=True).start()

    def _serve(self, downstream: socket.socket) -> None:
        ready = self.ready
        if not ready:
            downstream.close()
            return
        port = ready[next(self._rr) % len(ready)]
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            downstream.close()  # no retry on another endpoint: kube-proxy's DNAT does not retry either
            return
        with self._lock:
            self.opened[port] += 1
            self.open[port] += 1
        back = threading.Thread(target=_pipe, args=(upstream, downstream), daemon=True)
        back.start()
        _pipe(downstream, upstream)
        back.join()
        with self._lock:
            self.open[port] -= 1


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@dataclass
class OperatorPair(WholeStack):
    """The chart's RBAC, CRDs and webhook configurations, and ``replicas`` operators behind a :class:`LoopbackService`.

    No nodes, kubelet, scheduler or Prometheus: admission is all that is measured.
    """

    replicas: int = 2
    operators: list[Proc] = field(default_factory=list)
    webhook_ports: list[int] = field(default_factory=list)
    service: LoopbackService | None = None

    def _start(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.api = self.plane.api()
        self.chart = Chart(self.release, self.release_namespace, self.values)
        self._install_chart()
        self.settings = self.workdir / "settings.yaml"
        self.settings.write_text(self.chart.settings_yaml())
        self.cert, self.key = webhook_certificate(self.workdir / "pki")
        self.kubeconfigs["operator"] = token_kubeconfig(
            self.plane, self.core, self.chart.service_account("operator"), self.release_namespace,
            expiration_s=86400, name=f"{self.release}-operator-{self.id}")
        self.webhook_ports = [self._start_one(i) for i in range(self.replicas)]
        self.service = LoopbackService(self.webhook_ports).start()
        for doc in self.chart.webhook_configurations(f"https://127.0.0.1:{self.service.port}", self.cert.read_bytes()):
            apply(self.api, doc)

    def _start_one(self, index: int) -> int:
        """One operator with the chart's Deployment args (peering included), its webhook on a port of its own."""
        assert self.chart is not None
        args = _local_args(self.chart.args("Deployment", "-operator", "operator"), {
            "--config": str(self.settings), "--prometheus-url": None,
            "--webhook-host": "127.0.0.1", "--webhook-port": "0",
            "--webhook-cert": str(self.cert), "--webhook-key": str(self.key),
            "--metrics-host": "127.0.0.1", "--metrics-port": "0"})
        assert any(a.startswith("--peering=") for a in args), "the chart runs several operators peered"
        proc = Proc(f"operator-{index}", [str(STOWAGE), *args, f"--kubeconfig={self.kubeconfigs['operator']}"],
                    self.workdir / "logs" / f"operator-{index}.log", OPERATOR_METRICS_LOGGED,
                    env={"POD_NAMESPACE": self.release_namespace})
        proc.start(120.0)
        self.operators.append(proc)

        def served() -> int | None:
            if not proc.running:
                raise AssertionError(f"operator {index} exited:\n{proc.tail()}")
            found = re.search(WEBHOOKS_SERVED, proc.tail(200_000))
            return int(found.group(1)) if found and OPERATOR_STARTED in proc.tail(200_000) else None

        return int(wait_for(served, 120.0, f"operator {index}'s start and its webhook server"))

    def busiest(self) -> Proc:
        """The operator holding the API server's open webhook connection(s): killing it is the worst case."""
        assert self.service is not None
        port = max(self.webhook_ports, key=lambda p: (self.service.open[p], self.service.opened[p]))
        return self.operators[self.webhook_ports.index(port)]

    def stop(self) -> None:
        for proc in self.operators:
            proc.stop()
        if self.service is not None:
            self.service.stop()
        self._remove(self.chart.of_kind("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                     if self.chart else [])
        self._remove([d for d in self.applied if d["kind"] in ("ClusterRole", "ClusterRoleBinding")])


@dataclass(frozen=True)
class Admission:
    """One pod create: when it was sent and answered (monotonic s), and the API server's refusal if any."""

    sent: float
    answered: float
    error: str = ""
    scheduler_name: str = ""


def create_pods_while(stack: OperatorPair, namespace: str, action_at_s: float, action: Any, total_s: float,
                      interval_s: float = 0.05) -> tuple[list[Admission], float]:
    """Create labelled pods (``stowage.io/queue: default``, no schedulerName) back to back for ``total_s``; run
    ``action()`` after ``action_at_s``. Returns every create and the monotonic time the action ran."""
    core = client.CoreV1Api(stack.plane.api())
    out: list[Admission] = []
    start = time.monotonic()
    acted = 0.0
    while time.monotonic() - start < total_s:
        if not acted and time.monotonic() - start >= action_at_s:
            action()
            acted = time.monotonic()
        body: dict[str, Any] = {
            "metadata": {"name": f"ha-{uuid.uuid4().hex[:10]}", "labels": {"stowage.io/queue": "default"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        sent = time.monotonic()
        try:
            pod = core.create_namespaced_pod(namespace, body)
            out.append(Admission(sent, time.monotonic(), scheduler_name=pod.spec.scheduler_name))
        except client.ApiException as exc:
            out.append(Admission(sent, time.monotonic(), error=f"{exc.status}: {exc.body}"[:300]))
        time.sleep(interval_s)
    return out, acted


def longest_gap_s(admissions: list[Admission], after: float = 0.0) -> float:
    """The longest time without a successful admission, from ``after`` on (successive answers' distance)."""
    times = [after, *sorted(a.answered for a in admissions if not a.error and a.answered >= after)]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)
