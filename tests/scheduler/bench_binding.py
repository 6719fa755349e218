"""Binding throughput of the real kube-scheduler with and without Stowage's extender, and packing quality.

    .venv/bin/python -m tests.scheduler.bench_binding --nodes 500 --pods 5000

One control plane (``KUBEBUILDER_ASSETS`` or ``.envtest/``), ``--nodes`` fake nodes (cpu 32 / memory 128Gi,
allocatable 31.5 / 126Gi; the fake kubelet keeps no leases, sends no heartbeats and never starts the pods,
so the API server only serves the scheduler), one ``stowage extender`` process (no Prometheus: regular
pods need none). Then, in ONE run, for each configuration:

- ``a``: kube-scheduler's stock default profile (renamed ``bench-default``), no extender;
- ``p``: the manifest's profile (NodeResourcesFit MostAllocated) with the ``extenders`` block removed: what
  the manifest costs without any extender, to tell the profile's cost from the extender's;
- ``b``: ``manifests/scheduler-config.yaml`` with the extender: regular pods do not request
  ``stowage.io/harvested``, so ``managedResources`` keeps them off the extender;
- ``c``: the same manifest with ``managedResources`` removed: every pod calls filter and prioritize
  (the earlier design), and the extender's alignment score (weight 3) joins the in-tree scores.

``--pods`` regular pods of two shapes (alternating: cpu-heavy 3 cpu / 3Gi, memory-heavy 750m / 12Gi) are
created while no scheduler serves their ``schedulerName``; then the scheduler starts and a watch records
when each pod is first seen bound. Reported: pods/s from the scheduler's start to the last binding, and
from the first to the last binding (steady state); the ratios to ``a``; extender filter calls per pod;
and the packing the placements left: nodes used, mean dominant-resource utilisation over used nodes, and
how many probe pods of 4 cpu / 16Gi, and (separately) of 16 cpu / 64Gi, still fit in the free room.
``--repeat`` runs the whole sequence again, rotated by one (``apbc``, ``pbca``, ...); ratios are to ``a`` of
the same round.

Every configuration runs with the same kube-scheduler client rate limit (``--client-qps``, default 1000,
burst twice that; ``0`` keeps kube-scheduler's own 50/100, which then caps every configuration near 50 pods/s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from kubernetes import config as kube_config

from stowage.labels import SCHEDULER_NAME
from stowage.resources import parse_quantity
from tests.scheduler.stack import STOWAGE, Proc, extender_metric, manifest, wait_for
from tests.support.controlplane import ControlPlane, find_assets, missing_assets_reason
from tests.support.fake_kubelet import FakeKubelet, NodeSpec
from tests.support.processes import EXTENDER_PORT_LOGGED

__all__ = ["CONFIGS", "Result", "main", "run", "summary", "table"]

CONFIGS: dict[str, str] = {
    "a": "stock default profile, no extender",
    "p": "the manifest's profile (MostAllocated), extenders removed",
    "b": "manifest, extender (managedResources: regular pods skip it)",
    "c": "manifest without managedResources (every pod calls the extender)",
}
NODE_CAPACITY = {"cpu": "32", "memory": "128Gi", "pods": "110"}
NODE_ALLOCATABLE = {"cpu": "31500m", "memory": "126Gi", "pods": "110"}
SHAPES = ({"cpu": "3", "memory": "3Gi"}, {"cpu": "750m", "memory": "12Gi"})
PROBE = {"cpu": 4.0, "memory": 16.0 * 2**30}
BIG_PROBE = {"cpu": 16.0, "memory": 64.0 * 2**30}
BENCH_LABEL = "stowage-bench"


@dataclass
class Result:
    config: str
    round: int
    nodes: int
    pods: int
    bound: int
    start_to_last_s: float
    first_to_last_s: float
    filter_calls: float
    used_nodes: int
    mean_dominant: float
    probes_fit: int
    big_probes_fit: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.start_to_last_s if self.start_to_last_s > 0 else math.nan

    @property
    def steady_pods_per_s(self) -> float:
        return (self.bound - 1) / self.first_to_last_s if self.first_to_last_s > 0 else math.nan


# --- raw API access (the typed models cost more CPU than the scheduler being measured) ------------


def _call(api: client.ApiClient, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None,
          stream: bool = False, timeout_s: float = 60.0) -> Any:
    m, url, headers, body, _ = api.param_serialize(
        method, path, query_params=list(query.items()) if query else None,
        header_params={"Content-Type": "application/json", "Accept": "application/json"}, body=body,
        auth_settings=["BearerToken"])
    response = api.call_api(m, url, headers, body, _request_timeout=(10.0, timeout_s))
    if not 200 <= response.status <= 299:
        raise client.ApiException(status=response.status, reason=f"{response.reason}: {response.read()[:300]!r}")
    if stream:
        return response.response
    data = response.read()
    return json.loads(data) if data else None


def _client(kubeconfig: Path, pool: int = 32) -> client.ApiClient:
    """An admin client whose connection pool holds every worker's connection (creates run in parallel)."""
    configuration = client.Configuration()
    kube_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


def _list_pods(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        query: dict[str, Any] = {"limit": 1000}
        if token:
            query["continue"] = token
        page = _call(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


class BindWatch:
    """Watches a namespace's pods; records when each is first seen with ``spec.nodeName`` (monotonic)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        first = _call(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": 1})
        self._rv = first["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._loop, name="bind-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                response = _call(self.api, "GET", f"/api/v1/namespaces/{self.namespace}/pods", stream=True,
                                 query={"watch": "true", "resourceVersion": self._rv, "timeoutSeconds": 600,
                                        "allowWatchBookmarks": "true"}, timeout_s=30.0)
                self._response = response
                buffer = b""
                for chunk in response.stream(65536, decode_content=True):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        self._event(json.loads(line))
                    if self._stop.is_set():
                        return
            except Exception:
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        self._rv = meta.get("resourceVersion") or self._rv
        if event.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
            now = time.monotonic()
            with self._lock:
                self.bound.setdefault(meta["name"], now)

    def count(self) -> int:
        with self._lock:
            return len(self.bound)

    def times(self) -> list[float]:
        with self._lock:
            return sorted(self.bound.values())

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # the stream may be closed already
                response.shutdown()
        self._thread.join(10.0)


# --- the benchmark ----------------------------------------------------------------------------------


def _pod(name: str, i: int, scheduler_name: str, bench_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "nodeSelector": {BENCH_LABEL: bench_id},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": dict(SHAPES[i % 2])}}],
        },
    }


def _scheduler_config(config: str, extender_url: str, client_qps: int) -> dict[str, Any]:
    if config == "a":
        out: dict[str, Any] = {"profiles": [{"schedulerName": "bench-default"}]}
    else:
        out = manifest(managed_resources=(config == "b"))
        for extender in out.get("extenders") or []:
            extender["urlPrefix"] = extender_url
        if config == "p":
            out.pop("extenders", None)
    if client_qps > 0:
        out["clientConnection"] = {**(out.get("clientConnection") or {}), "qps": client_qps,
                                   "burst": 2 * client_qps}
    return out


def packing(pods: list[dict[str, Any]], nodes: list[str]) -> tuple[int, float, int, int]:
    """(nodes used, mean dominant-resource utilisation over used nodes, probe pods of 4 cpu / 16Gi and of
    16 cpu / 64Gi that still fit in the free room, each count on its own)."""
    alloc_cpu, alloc_mem = parse_quantity(NODE_ALLOCATABLE["cpu"]), parse_quantity(NODE_ALLOCATABLE["memory"])
    used: dict[str, list[float]] = {n: [0.0, 0.0] for n in nodes}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in used:
            continue
        for c in pod["spec"]["containers"]:
            requests = (c.get("resources") or {}).get("requests") or {}
            used[node][0] += parse_quantity(requests.get("cpu", "0"))
            used[node][1] += parse_quantity(requests.get("memory", "0"))
    busy = [u for u in used.values() if u[0] > 0 or u[1] > 0]
    dominant = [max(c / alloc_cpu, m / alloc_mem) for c, m in busy]

    def fit(probe: Mapping[str, float]) -> int:
        return sum(int(min((alloc_cpu - c) // probe["cpu"], (alloc_mem - m) // probe["memory"]))
                   for c, m in used.values())

    return len(busy), (sum(dominant) / len(dominant) if dominant else 0.0), fit(PROBE), fit(BIG_PROBE)


def _create_pods(api: client.ApiClient, namespace: str, pods: list[dict[str, Any]], workers: int = 12) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"

    def create(pod: dict[str, Any]) -> None:
        for attempt in range(20):
            try:
                _call(api, "POST", path, pod)
                return
            except client.ApiException as exc:
                if exc.status == 409:
                    return
                if exc.status not in (429, 500, 503, 504) or attempt == 19:
                    raise
                time.sleep(0.2 * (attempt + 1))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, pods))


def _delete_all(api: client.ApiClient, namespace: str, timeout_s: float) -> None:
    _call(api, "DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
    wait_for(lambda: not _call(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": 1})["items"],
             timeout_s, f"pods of {namespace} deleted")


def run(plane: ControlPlane, workdir: Path, nodes: int, pods: int, configs: str = "apbc", client_qps: int = 1000,
        timeout_s: float | None = None, log: Any = None, repeat: int = 1) -> list[Result]:
    """Run every configuration in ``configs`` on ``plane`` (``repeat`` rounds); one :class:`Result` each."""
    say = log or (lambda *_: None)
    timeout_s = timeout_s or max(300.0, pods / 5.0)
    bench_id = uuid.uuid4().hex[:8]
    api = _client(plane.kubeconfig)
    kubelet = FakeKubelet(plane.api(), None, leases=False, node_status_interval_s=86400.0, start_delay_s=86400.0,
                          workers=16).start()
    extender: Proc | None = None
    results: list[Result] = []
    try:
        specs = [NodeSpec(f"bench-{bench_id}-{i}", capacity=dict(NODE_CAPACITY), allocatable=dict(NODE_ALLOCATABLE),
                          labels={BENCH_LABEL: bench_id}) for i in range(nodes)]
        names = kubelet.add_nodes(specs)
        say(f"{len(names)} nodes registered")
        extender = Proc("extender", [str(STOWAGE), "extender", "--kubeconfig", str(plane.kubeconfig), "--host",
                                     "127.0.0.1", "--port", "0"],
                        workdir / "logs" / f"bench-extender-{bench_id}.log", EXTENDER_PORT_LOGGED)
        extender.start()
        url = f"http://127.0.0.1:{extender.port}"
        wait_for(lambda: httpx.get(f"{url}/readyz", timeout=5.0).status_code == 200, 300, "the extender's /readyz")

        def filters() -> float:
            return extender_metric(httpx.get(f"{url}/metrics", timeout=30.0).text,
                                   "stowage_extender_request_seconds_count", {"verb": "filter"})

        # Each round starts one configuration later (a p b c, then p b c a, ...): no configuration always
        # runs first or last, after the same predecessor's deletions.
        order = [(r, configs[(r + i) % len(configs)]) for r in range(repeat) for i in range(len(configs))]
        for round_, config in order:
            namespace = f"bench-{config}{round_}-{bench_id}"
            plane.create_namespace(namespace)
            scheduler_name = "bench-default" if config == "a" else SCHEDULER_NAME
            _create_pods(api, namespace, [_pod(f"p-{i}", i, scheduler_name, bench_id) for i in range(pods)])
            say(f"{config}: {pods} pods created")
            watch = BindWatch(api, namespace)
            before = filters()
            started = time.monotonic()
            handle = plane.start_scheduler(_scheduler_config(config, url, client_qps),
                                           name=f"bench-{config}-{bench_id}")
            try:
                wait_for(lambda w=watch: w.count() >= pods, timeout_s, f"{pods} pods bound ({config})", interval_s=0.2)
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {watch.count()} bound; scheduler log:\n{handle.logs_tail(20)}") from None
            finally:
                handle.stop()
                watch.stop()
            times = watch.times()
            placed = _list_pods(api, namespace)
            used, dominant, probes, big = packing(placed, names)
            results.append(Result(config, round_, nodes, pods, len(times), times[-1] - started, times[-1] - times[0],
                                  (filters() - before) / pods, used, dominant, probes, big))
            say(table(results, header=False).splitlines()[-1])
            _delete_all(api, namespace, timeout_s)
            client.CoreV1Api(api).delete_namespace(namespace)
    finally:
        if extender is not None:
            extender.stop()
        kubelet.stop(cleanup=True)
        api.close()
    return results


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base > 0 and math.isfinite(base) else "-"


def table(results: list[Result], header: bool = True) -> str:
    lines = []
    if header:
        lines.append(f"{'round':<5} {'config':<6} {'nodes':>5} {'pods':>5} {'start→all s':>11} {'pods/s':>7} {'×a':>5} "
                     f"{'steady pods/s':>13} {'×a':>5} {'filter/pod':>10} {'used nodes':>10} {'dominant':>8} "
                     f"{'4c/16Gi fit':>11} {'16c/64Gi fit':>12}")
    for r in results:
        base = next((b for b in results if b.config == "a" and b.round == r.round), None)
        ratio = _ratio(r.pods_per_s, base.pods_per_s if base else math.nan)
        steady = _ratio(r.steady_pods_per_s, base.steady_pods_per_s if base else math.nan)
        lines.append(f"{r.round:<5} {r.config:<6} {r.nodes:>5} {r.pods:>5} {r.start_to_last_s:>11.1f} "
                     f"{r.pods_per_s:>7.1f} {ratio:>5} {r.steady_pods_per_s:>13.1f} {steady:>5} "
                     f"{r.filter_calls:>10.2f} {r.used_nodes:>10} {r.mean_dominant:>8.1%} {r.probes_fit:>11} "
                     f"{r.big_probes_fit:>12}")
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    """Median over rounds of each configuration's pods/s and of its ratio to ``a`` in the same round."""
    lines = [f"{'config':<6} {'rounds':>6} {'median pods/s':>13} {'median ×a':>9} {'range ×a':>11}"]
    for config in dict.fromkeys(r.config for r in results):
        rows = [r for r in results if r.config == config]
        ratios = []
        for r in rows:
            base = next((b for b in results if b.config == "a" and b.round == r.round), None)
            if base is not None:
                ratios.append(r.pods_per_s / base.pods_per_s)
        rate = statistics.median(r.pods_per_s for r in rows)
        span = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "-"
        median = f"{statistics.median(ratios):.2f}" if ratios else "-"
        lines.append(f"{config:<6} {len(rows):>6} {rate:>13.1f} {median:>9} {span:>11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scheduler.bench_binding",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--configs", default="apbc", help="which configurations, in order (default apbc)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole sequence")
    parser.add_argument("--client-qps", type=int, default=1000,
                        help="kube-scheduler clientConnection.qps (burst 2x) in every configuration; 0: its default")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    assets = find_assets()
    if assets is None:
        print(missing_assets_reason(), file=sys.stderr)
        return 2

    def say(line: str) -> None:
        print(line, flush=True)

    for key, text in CONFIGS.items():
        if key in args.configs:
            say(f"  {key}: {text}")
    with tempfile.TemporaryDirectory(prefix="stowage-bench-binding-") as tmp, \
            ControlPlane(Path(tmp) / "control-plane", assets, controller_manager=False) as plane:
        results = run(plane, Path(tmp), args.nodes, args.pods, args.configs, args.client_qps, log=say,
                      repeat=args.repeat)
    say("")
    say(table(results))
    if args.repeat > 1:
        say("")
        say(summary(results))
    if args.json:
        args.json.write_text(json.dumps([{**vars(r), "pods_per_s": r.pods_per_s,
                                          "steady_pods_per_s": r.steady_pods_per_s} for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
