"""``stowage bench extender``: filter + prioritize latency over real HTTP, against a bare orjson round trip.

For each cluster size N the benchmark builds a cluster model (N nodes, a few bound
pods each, utilization samples for every node), serves the real app with uvicorn
in a child process (pinned to one CPU when the machine has several), and sends
what kube-scheduler sends with ``nodeCacheCapable: true``: an opportunistic pod
with every node name to ``/filter``, then the survivors to ``/prioritize``. Each
request uses a new pod, so the assumed set ``S`` grows as it would in a burst.

Reported per N: p50/p99 of filter, prioritize and their sum, pods/s through both
(one client, sequential), and the ratio of the HTTP p50 to a bare orjson round trip
(dumps+loads of the same request and response bodies) measured in the same run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import click
import httpx
import numpy as np
import orjson
from stowage.extender.server import listen_socket

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel
from stowage.labels import ANN_DEMAND, LABEL_CLASS, LABEL_QUEUE, OPPORTUNISTIC_PRIORITY_CLASS, SCHEDULER_NAME
from stowage.policy import tolerances
from stowage.prom import Utilization, UtilizationSnapshot

__all__ = ["BenchResult", "bench_extender", "build_cluster", "opportunistic_pod", "run_requests"]

GI = 2**30


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "allocatable": {"cpu": "31500m", "memory": "126Gi", "pods": "110"},
        },
    }


def _bound_pod(name: str, node: str, cpu: float, memory: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}", "labels": {LABEL_QUEUE: "research"}},
        "spec": {
            "nodeName": node,
            "schedulerName": SCHEDULER_NAME,
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": f"{cpu:.1f}", "memory": f"{memory:.0f}"}}}
            ],
        },
        "status": {"phase": "Running", "startTime": "2024-05-01T09:30:00Z"},
    }


def opportunistic_pod(i: int) -> dict[str, Any]:
    """A realistic opportunistic pod as the API server serialises it after Stowage's webhook."""
    return {
        "metadata": {
            "name": f"etl-{i}",
            "generateName": "etl-",
            "namespace": "batch",
            "uid": f"b3c1-{i:08d}",
            "resourceVersion": "51234",
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "etl", LABEL_CLASS: "opportunistic", LABEL_QUEUE: "etl", "stowage.io/job": "etl-7"},
            "annotations": {ANN_DEMAND: json.dumps({"cpu": "2", "memory": "4Gi"})},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/batch/etl:2.1",
                    "args": ["--input", "s3://bucket/part-00017"],
                    "resources": {"requests": {"cpu": "0", "memory": "0"}, "limits": {"memory": "4Gi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": SCHEDULER_NAME,
            "priorityClassName": OPPORTUNISTIC_PRIORITY_CLASS,
            "priority": -10,
            "preemptionPolicy": "Never",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def build_cluster(n_nodes: int, pods_per_node: int, seed: int) -> tuple[ClusterModel, Utilization, list[str]]:
    """N nodes with bound regular pods and utilization samples between 20% and 95%."""
    rng = np.random.default_rng(seed)
    names = [f"node-{i:05d}" for i in range(n_nodes)]
    model = ClusterModel()
    model.replace_nodes(_node(n) for n in names)
    pods = [
        _bound_pod(f"p-{i}-{k}", n, rng.uniform(0.5, 6), rng.uniform(1, 24) * GI)
        for i, n in enumerate(names)
        for k in range(pods_per_node)
    ]
    model.replace_pods(pods)
    frac = rng.uniform(0.2, 0.95, size=(n_nodes, 2))
    samples = {
        n: {"usage": {"cpu": 32 * frac[i, 0], "memory": 128 * GI * frac[i, 1]}, "contention": {"memory": 0}}
        for i, n in enumerate(names)
    }
    utilization = Utilization(None)
    utilization.replace(UtilizationSnapshot.from_nodes(samples, age_s=1.0, fetched_at_s=utilization.clock()))
    return model, utilization, names


def _serve(sock: socket.socket, model: ClusterModel, utilization: Utilization, cpu: int | None) -> None:
    import uvicorn
    from stowage.extender.app import create_app

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    config = uvicorn.Config(
        create_app(StowageSettings(), model, utilization), log_level="warning", access_log=False, lifespan="off"
    )
    uvicorn.Server(config).run(sockets=[sock])


@dataclass(frozen=True, slots=True)
class BenchResult:
    nodes: int
    names_per_request: int
    requests: int
    filter_p50_ms: float
    filter_p99_ms: float
    prioritize_p50_ms: float
    prioritize_p99_ms: float
    both_p50_ms: float
    both_p99_ms: float
    pods_per_s: float
    orjson_p50_ms: float
    ratio_to_orjson: float
    passed_nodes_median: float
    server_cpu_ms_per_pod: float
    pods_per_cpu_second: float


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run_requests(
    url: str, names: list[str], n_requests: int, first_pod: int = 0, sample: int | None = None
) -> dict[str, Any]:
    """Filter then prioritize ``n_requests`` new pods; per-request seconds and the last bodies.

    ``sample``: send only this many node names per pod (a rotating window), as kube-scheduler
    does when ``percentageOfNodesToScore`` stops its search early; None sends every node.
    """
    filt, prio, base, passed = [], [], [], []
    window = len(names) if sample is None else max(1, min(sample, len(names)))
    # Go's net/http (kube-scheduler) sets TCP_NODELAY; without it headers and body wait on delayed ACKs.
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    with httpx.Client(timeout=30.0, transport=transport) as http:
        for i in range(first_pod, first_pod + n_requests):
            pod = opportunistic_pod(i)
            start_at = (i * window) % len(names)
            offered = names if window == len(names) else (names + names)[start_at : start_at + window]
            args = {"Pod": pod, "Nodes": None, "NodeNames": offered}
            raw = orjson.dumps(args)
            t_f, r_f = _timed(lambda raw=raw: http.post(f"{url}/filter", content=raw, headers=_JSON))
            body = r_f.json()
            survivors = body["NodeNames"]
            raw_p = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": survivors})
            t_p, r_p = _timed(lambda raw_p=raw_p: http.post(f"{url}/prioritize", content=raw_p, headers=_JSON))
            if r_f.status_code != 200 or r_p.status_code != 200:
                raise click.ClickException(f"extender answered {r_f.status_code}/{r_p.status_code}")
            # The bare cost of moving the same bytes through a JSON codec, for the ratio.
            start = time.perf_counter()
            orjson.loads(raw)
            orjson.loads(orjson.dumps(body))
            orjson.loads(raw_p)
            orjson.loads(orjson.dumps(r_p.json()))
            base.append(time.perf_counter() - start)
            filt.append(t_f)
            prio.append(t_p)
            passed.append(len(survivors))
    return {"filter": np.array(filt), "prioritize": np.array(prio), "orjson": np.array(base), "passed": passed}


_JSON = {"content-type": "application/json"}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux ``/proc``): what the server spent, whatever the load."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_once(
    n_nodes: int, n_requests: int, pods_per_node: int, seed: int, cpu: int | None, sample: int | None = None
) -> BenchResult:
    model, utilization, names = build_cluster(n_nodes, pods_per_node, seed)
    sock = listen_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(sock, model, utilization, cpu), daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or not proc.is_alive():
                raise click.ClickException("benchmark server did not start")
            time.sleep(0.05)
        run_requests(url, names, min(20, n_requests), first_pod=10**6, sample=sample)  # warm-up
        cpu_before = _cpu_seconds(proc.pid)
        out = run_requests(url, names, n_requests, sample=sample)
        server_cpu_s = _cpu_seconds(proc.pid) - cpu_before
    finally:
        proc.terminate()
        proc.join(10)
        sock.close()
    both = out["filter"] + out["prioritize"]
    ms = 1000.0
    return BenchResult(
        nodes=n_nodes,
        names_per_request=n_nodes if sample is None else min(sample, n_nodes),
        requests=n_requests,
        filter_p50_ms=float(np.percentile(out["filter"], 50) * ms),
        filter_p99_ms=float(np.percentile(out["filter"], 99) * ms),
        prioritize_p50_ms=float(np.percentile(out["prioritize"], 50) * ms),
        prioritize_p99_ms=float(np.percentile(out["prioritize"], 99) * ms),
        both_p50_ms=float(np.percentile(both, 50) * ms),
        both_p99_ms=float(np.percentile(both, 99) * ms),
        pods_per_s=float(len(both) / both.sum()),
        orjson_p50_ms=float(np.percentile(out["orjson"], 50) * ms),
        ratio_to_orjson=float(np.percentile(both, 50) / max(np.percentile(out["orjson"], 50), tolerances.MIN_DIVISOR)),
        passed_nodes_median=float(np.median(out["passed"])),
        server_cpu_ms_per_pod=server_cpu_s / n_requests * ms,
        pods_per_cpu_second=n_requests / max(server_cpu_s, tolerances.MIN_DIVISOR),
    )


@click.command("extender", context_settings={"show_default": True})
@click.option("--nodes", default="500,5000", help="Cluster sizes to measure, comma-separated.")
@click.option("--requests", "n_requests", type=click.IntRange(min=1), default=300, help="Pods per cluster size.")
@click.option("--pods-per-node", type=click.IntRange(min=0), default=4, help="Bound regular pods per node.")
@click.option("--seed", type=int, default=7, help="Seed of the synthetic utilization.")
@click.option(
    "--cpu",
    type=int,
    default=None,
    help="Pin the server to this CPU (default: the last CPU when there are several, so it runs on one core).",
)
@click.option(
    "--names",
    "sample",
    type=click.IntRange(min=1),
    default=None,
    help="Node names per request (a rotating sample, as percentageOfNodesToScore yields). Default: every node.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def bench_extender(
    nodes: str, n_requests: int, pods_per_node: int, seed: int, cpu: int | None, sample: int | None, as_json: bool
) -> None:
    """Latency of filter + prioritize over real HTTP with N nodes in the cluster model (nodeCacheCapable).

    Targets: p99 ≤ 10 ms for filter+prioritize at 5,000 nodes; ≥ 500 pods/s at 500 nodes on one core.
    """
    try:
        sizes = [int(x) for x in nodes.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"must be a comma list of node counts such as 500,5000, got {nodes!r}") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"must name at least one positive node count, got {nodes!r}")
    if cpu is None and hasattr(os, "sched_getaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        cpu = allowed[-1] if len(allowed) > 1 else None
    results = [bench_once(n, n_requests, pods_per_node, seed, cpu, sample) for n in sizes]
    if as_json:
        click.echo(json.dumps([asdict(r) for r in results], indent=2))
        return
    click.echo(f"server pinned to CPU {cpu}" if cpu is not None else "server not pinned")
    header = (
        f"{'nodes':>6} {'names':>6} {'filter p50/p99 ms':>18} {'prioritize p50/p99':>19} {'both p50/p99 ms':>16}"
        f" {'pods/s':>7} {'orjson p50 ms':>13} {'× orjson':>8} {'passed':>6} {'cpu ms/pod':>10} {'pods/cpu-s':>10}"
    )
    click.echo(header)
    for r in results:
        click.echo(
            f"{r.nodes:>6} {r.names_per_request:>6} {r.filter_p50_ms:>8.2f}/{r.filter_p99_ms:<9.2f}"
            f" {r.prioritize_p50_ms:>8.2f}/"
            f"{r.prioritize_p99_ms:<10.2f} {r.both_p50_ms:>7.2f}/{r.both_p99_ms:<8.2f} {r.pods_per_s:>7.0f}"
            f" {r.orjson_p50_ms:>13.3f} {r.ratio_to_orjson:>8.1f} {r.passed_nodes_median:>6.0f}"
            f" {r.server_cpu_ms_per_pod:>10.2f} {r.pods_per_cpu_second:>10.0f}"
        )
