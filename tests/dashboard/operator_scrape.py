"""The scrape configuration the Prometheus Operator generates from the chart's PodMonitors and ServiceMonitors.

A model of prometheus-operator's config generator (``pkg/prometheus/promcfg.go``; its golden files
``HonorLabelsOverriding.golden`` for a ServiceMonitor and the PodMonitor case of ``promcfg_test.go``), one job per
monitor endpoint, named ``podMonitor|serviceMonitor/<namespace>/<name>/<i>``, with the relabelings it adds in
its order: keep the endpoint's port name, then the target labels ``node``/``pod`` (endpoint address),
``namespace``, ``service``, ``pod``, ``container``, ``job`` and ``endpoint``, then the endpoint's own
``relabelings``, and ``honor_labels`` from the endpoint's ``honorLabels`` (default false). What it leaves
out: Kubernetes service discovery itself. Each target is a static target on loopback that carries the
``__meta_kubernetes_*`` labels discovery would give the pod or endpoint the chart's workload would run as
(:func:`discovered`), so the operator's relabelings run unchanged in the real Prometheus; the label selector
and the port-name rule are checked against the rendered chart instead of against a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Endpoint", "discovered", "scrape_configs"]

_WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")
_SNAKE = {"sourceLabels": "source_labels", "targetLabel": "target_label"}


@dataclass(frozen=True)
class Endpoint:
    """One monitor endpoint as discovery would find it: the job name and the target's meta labels."""

    job_name: str
    spec: dict[str, Any]
    honor_labels: bool
    meta: dict[str, str]
    container: str
    """The container behind it (the scheduler pod has two): which stand-in exposition it serves."""


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _pod_of(docs: Iterable[Mapping[str, Any]], selector: Mapping[str, str]) -> dict[str, Any]:
    """The (single) workload whose pod template the selector matches."""
    found = [d for d in docs if d.get("kind") in _WORKLOADS
             and _matches({"matchLabels": selector}, d["spec"]["template"]["metadata"].get("labels") or {})]
    assert len(found) == 1, f"{len(found)} workloads match {selector}"
    return found[0]


def _container_with_port(workload: Mapping[str, Any], port: str) -> dict[str, Any]:
    for container in workload["spec"]["template"]["spec"]["containers"]:
        if any(p.get("name") == port for p in container.get("ports") or []):
            return dict(container)
    raise AssertionError(f"{workload['kind']}/{workload['metadata']['name']} has no container port {port!r}")


def discovered(docs: list[dict[str, Any]]) -> list[Endpoint]:
    """Every endpoint of every rendered monitor, with the meta labels of the pod (or Service endpoint) it scrapes."""
    out: list[Endpoint] = []
    for monitor in docs:
        kind = monitor.get("kind")
        if kind not in ("PodMonitor", "ServiceMonitor"):
            continue
        ns, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
        selector = monitor["spec"]["selector"]
        if kind == "PodMonitor":
            workload = _pod_of(docs, selector["matchLabels"])
            endpoints = monitor["spec"]["podMetricsEndpoints"]
        else:
            services = [d for d in docs if d.get("kind") == "Service" and _matches(selector, d["metadata"]["labels"])]
            endpoints = monitor["spec"]["endpoints"]
        for i, endpoint in enumerate(endpoints):
            port = endpoint["port"]
            if kind == "PodMonitor":
                service_meta: dict[str, str] = {"__meta_kubernetes_pod_container_port_name": port}
            else:
                # The operator's ServiceMonitor keeps only endpoints whose Service port has this name.
                (service,) = [s for s in services if any(p["name"] == port for p in s["spec"]["ports"])]
                target_port = next(p["targetPort"] for p in service["spec"]["ports"] if p["name"] == port)
                workload = _pod_of(docs, service["spec"]["selector"])
                _container_with_port(workload, target_port)
                service_meta = {"__meta_kubernetes_endpoint_port_name": port,
                                "__meta_kubernetes_service_name": service["metadata"]["name"]}
            container = _container_with_port(workload, port if kind == "PodMonitor" else target_port)
            pod = f"{workload['metadata']['name']}-5d8f9c-x7k2p"
            meta = {"__meta_kubernetes_namespace": ns, "__meta_kubernetes_pod_name": pod,
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_phase": "Running",
                    "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": pod, **service_meta}
            out.append(Endpoint(f"{kind[0].lower()}{kind[1:]}/{ns}/{name}/{i}", dict(endpoint),
                                bool(endpoint.get("honorLabels", False)), meta, container["name"]))
    return out


def _relabelings(endpoint: Endpoint) -> list[dict[str, Any]]:
    """The relabel_configs prometheus-operator writes for the endpoint, in its order."""
    ns, name = endpoint.job_name.split("/")[1:3]
    port = endpoint.spec["port"]
    rules: list[dict[str, Any]] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    if endpoint.job_name.startswith("podMonitor/"):
        rules += [
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{ns}/{name}"},
        ]
    else:
        address = ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"]
        rules += [
            {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": port},
            {"source_labels": address, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}",
             "target_label": "node"},
            {"source_labels": address, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}",
             "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        ]
    # The endpoint's own relabelings come after the operator's (camelCase keys in the CRD, snake_case here).
    own = [{_SNAKE.get(k, k): v for k, v in rule.items()} for rule in endpoint.spec.get("relabelings") or []]
    return [*rules, {"target_label": "endpoint", "replacement": port}, *own]


def scrape_configs(endpoints: Iterable[Endpoint], address: str, interval: str) -> list[dict[str, Any]]:
    """Prometheus ``scrape_configs``: each endpoint's generated job, its target the stand-in at ``address``.

    Every endpoint is scraped over plain HTTP (the stand-in has no TLS) at ``/<job name><its path>``, so one
    stand-in tells the endpoints apart by path.
    """
    out = []
    for endpoint in endpoints:
        out.append({
            "job_name": endpoint.job_name,
            "honor_labels": endpoint.honor_labels,
            "scrape_interval": interval,
            "metrics_path": f"/{endpoint.job_name}{endpoint.spec.get('path', '/metrics')}",
            "static_configs": [{"targets": [address], "labels": endpoint.meta}],
            "relabel_configs": _relabelings(endpoint),
        })
    return out
