"""Pods and Nodes as the API server serialises them, and extender bodies as kube-scheduler's Go code sends them.

The Go extender structs have no json tags: keys are PascalCase, every key is present,
nil pointers are ``null``, and a scheduler-built NodeList is ``{"metadata": {}, "items": [...]}``
(EXTENDER_PROTOCOL.md §1).
"""

from __future__ import annotations

import json
from typing import Any

from stowage.labels import (
    ANN_DATA_NODES,
    ANN_DEMAND,
    ANN_DISK_BANDWIDTH,
    HARVEST_RESOURCE,
    LABEL_CLASS,
    LABEL_HARVEST,
    LABEL_QUEUE,
    OPPORTUNISTIC_PRIORITY_CLASS,
    SCHEDULER_NAME,
)

__all__ = ["extender_args", "node", "opportunistic_pod", "preemption_args", "regular_pod"]

GI = 2**30


def node(
    name: str,
    cpu: str = "16",
    memory: str = "16Gi",
    *,
    harvest: bool = True,
    disk_bandwidth: str | None = None,
    uid: str | None = None,
    allocatable_cpu: str | None = None,
    allocatable_memory: str | None = None,
) -> dict[str, Any]:
    """A Node as ``kubectl get node -o json`` shows it (trimmed of images and daemon endpoints).

    Allocatable equals capacity unless given (real kubelets reserve some: see test_capacity_basis).
    """
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    if not harvest:
        labels[LABEL_HARVEST] = "false"
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    if disk_bandwidth:
        annotations[ANN_DISK_BANDWIDTH] = disk_bandwidth
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"node-uid-{name}",
            "resourceVersion": "4821",
            "creationTimestamp": "2024-05-01T09:00:00Z",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "ephemeral-storage": "102400Mi", "pods": "110"},
            "allocatable": {"cpu": allocatable_cpu or cpu, "memory": allocatable_memory or memory,
                            "ephemeral-storage": "94371840Ki", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": "2024-05-01T10:00:00Z",
                    "lastTransitionTime": "2024-05-01T09:00:30Z",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "172.18.0.2"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.30.0", "osImage": "Debian GNU/Linux 12", "architecture": "amd64"},
        },
    }


def _pod(
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    resources: dict[str, Any],
    *,
    scheduler: str,
    node_name: str | None,
    priority_class: str | None = None,
    priority: int = 0,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "volumes": [
            {
                "name": "kube-api-access-x7k2p",
                "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]},
            }
        ],
        "containers": [
            {
                "name": "main",
                "image": "registry.example/batch/worker:1.4",
                "args": ["--shard", "7"],
                "resources": resources,
                "volumeMounts": [
                    {
                        "name": "kube-api-access-x7k2p",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": scheduler,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": priority,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
        spec["preemptionPolicy"] = "Never"
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if node_name:
        spec["nodeName"] = node_name
        status = {
            "phase": "Running",
            "qosClass": "Burstable",
            "startTime": "2024-05-01T09:30:00Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-05-01T09:30:00Z"},
            ],
        }
    return {
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": "batch",
            "uid": f"uid-{name}",
            "resourceVersion": "51234",
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": status,
    }


def regular_pod(
    name: str = "train-0",
    cpu: str = "4",
    memory: str = "8Gi",
    *,
    queue: str | None = "research",
    scheduler: str = SCHEDULER_NAME,
    node_name: str | None = None,
    annotations: dict[str, str] | None = None,
    data_nodes: str | None = None,
) -> dict[str, Any]:
    labels = {"app": "train", LABEL_CLASS: "regular"}
    if queue:
        labels[LABEL_QUEUE] = queue
    ann = dict(annotations or {})
    if data_nodes:
        ann[ANN_DATA_NODES] = data_nodes
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}
    return _pod(name, labels, ann, resources, scheduler=scheduler, node_name=node_name)


def opportunistic_pod(
    name: str = "etl-0",
    cpu: str = "2",
    memory: str = "3Gi",
    *,
    queue: str | None = "etl",
    node_name: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """As the webhook leaves it: explicit zero requests, limits kept, real demand in an annotation, and the
    routing resource ``stowage.io/harvested: 1`` that sends it to the extender (``managedResources``)."""
    labels = {"app": "etl", LABEL_CLASS: "opportunistic"}
    if queue:
        labels[LABEL_QUEUE] = queue
    ann = {ANN_DEMAND: json.dumps({"cpu": cpu, "memory": memory}), **(annotations or {})}
    resources = {"requests": {"cpu": "0", "memory": "0", HARVEST_RESOURCE: "1"},
                 "limits": {"memory": memory, HARVEST_RESOURCE: "1"}}
    return _pod(
        name,
        labels,
        ann,
        resources,
        scheduler=SCHEDULER_NAME,
        node_name=node_name,
        priority_class=OPPORTUNISTIC_PRIORITY_CLASS,
        priority=-10,
    )


def extender_args(pod: dict[str, Any], nodes: list[dict[str, Any]], *, cache: bool) -> dict[str, Any]:
    """``ExtenderArgs`` as json.Marshal writes it: NodeNames (nodeCacheCapable) or a NodeList, the other null."""
    if cache:
        return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}


def preemption_args(pod: dict[str, Any], victims: dict[str, list[dict[str, Any]]], *, cache: bool) -> dict[str, Any]:
    """``ExtenderPreemptionArgs``: meta victims (UIDs) when nodeCacheCapable, full pods otherwise."""
    if cache:
        meta = {
            n: {"Pods": [{"UID": p["metadata"]["uid"]} for p in pods], "NumPDBViolations": 0}
            for n, pods in victims.items()
        }
        return {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
    full = {n: {"Pods": pods, "NumPDBViolations": 0} for n, pods in victims.items()}
    return {"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}
