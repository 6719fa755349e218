"""What the sharing, bad-input and scale scenarios submit to the whole stack, and how they count it.

Plain labelled pods (``stowage.io/queue``, ``schedulerName: stowage-scheduler``) and Jobs pinned to the
stack's nodes; :func:`finished_nothing_lost` waits for every Job and plain pod of a namespace and returns
what :class:`tests.support.stack.TaskLedger` found wrong (empty: every task ran to success exactly once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from kubernetes import client
from stowage.operator import crd

from stowage import labels
from tests.support.controlplane import ControlPlane
from tests.support.fake_kubelet import ANN_RUN_SECONDS
from tests.support.prometheus import prometheus_binary
from tests.support.stack import TaskLedger, WholeStack, wait_for

#: The built-in ClusterRole a tenant gets in its namespace (the chart aggregates Stowage's edit role into it).
TENANT_ROLE = "edit"


@contextlib.contextmanager
def wide_stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory, folder: str, *, nodes: int,
               monitored: int) -> Iterator[WholeStack]:
    """The whole stack on ``nodes`` fake nodes, node monitors on the first ``monitored`` (the 200-node runs)."""
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    prometheus_binary()
    with WholeStack(control_plane, tmp_path_factory.mktemp(folder), node_count=nodes,
                    monitored_nodes=monitored) as stack:
        yield stack


def group(name: str, n: int, run_s: float = 5, cpu: str = "1", memory: str = "1Gi", **extra: Any) -> dict[str, Any]:
    """One task group for :meth:`WholeStack.job_body`: ``n`` tasks of ``cpu``/``memory`` running ``run_s``."""
    return {"name": name, "replicas": n, "cpu": cpu, "memory": memory, "run_s": run_s, **extra}


def plain_pod(stack: WholeStack, name: str, *, queue: str | None, run_s: float, cpu: str = "1",
              memory: str = "1Gi", extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A plain pod for Stowage (no Job): the webhook gates it, the dispatcher releases it in its queue's turn."""
    pod_labels = {**({labels.LABEL_QUEUE: queue} if queue else {}), **(extra_labels or {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": pod_labels, "annotations": {ANN_RUN_SECONDS: str(run_s)}},
            "spec": {"schedulerName": labels.SCHEDULER_NAME, "terminationGracePeriodSeconds": 1,
                     "restartPolicy": "Never", "nodeSelector": {stack.node_label: stack.id},
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}


def create_plain_pods(stack: WholeStack, ns: str, names: Iterable[str], **kwargs: Any) -> list[client.V1Pod]:
    return [stack.core.create_namespaced_pod(ns, plain_pod(stack, n, **kwargs)) for n in names]


def plain_pod_problems(ledger: TaskLedger, names: Iterable[str]) -> list[str]:
    """Each plain pod created once and Succeeded (nobody runs a plain pod again: it must not be lost)."""
    names, seen = list(names), ledger.snapshot()
    out = []
    for name in names:
        if name not in seen:
            out.append(f"plain pod {name} never seen")
        elif seen[name]["phase"] != "Succeeded":
            out.append(f"plain pod {name} ended {seen[name]['phase']}")
    twice = ledger.duplicates()
    return out + [f"plain pod {n} created {len(twice[n])} times" for n in names if n in twice]


def plain_pods_done(stack: WholeStack, ns: str, names: Iterable[str], timeout_s: float) -> None:
    wanted = set(names)

    def done() -> bool:
        phases = {p.metadata.name: p.status.phase for p in stack.pods(ns) if p.metadata.name in wanted}
        return len(phases) == len(wanted) and all(ph == "Succeeded" for ph in phases.values())

    wait_for(done, timeout_s, f"the {len(wanted)} plain pods of {ns} to succeed", interval_s=1.0)


def finished_nothing_lost(stack: WholeStack, ns: str, ledger: TaskLedger, *, plain: Iterable[str] = (),
                          timeout_s: float = 300.0, unique_names: bool = True) -> list[str]:
    """Wait for every Job (and the ``plain`` pods) of ``ns`` to finish; the ledger's problems (empty: none).

    ``unique_names=False`` where tasks are evicted: an evicted pod is gone before its task runs again, so the
    new attempt may reuse its name (the operator counts attempts from the pods that exist); tasks are still
    counted per pod object, so one that succeeded twice is a problem either way.
    """
    plain = list(plain)
    jobs = stack.wait_jobs_done(ns, timeout_s)
    if plain:
        plain_pods_done(stack, ns, plain, timeout_s)

    def problems() -> list[str]:
        return ledger.problems(jobs, unique_names=unique_names) + plain_pod_problems(ledger, plain)

    # The ledger's watch may trail the operator's by a moment.
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not problems(), 30, "the ledger to catch up")
    return problems()


def tenant_api(stack: WholeStack, ns: str, user: str | None = None) -> client.ApiClient:
    """An API client acting as a tenant of ``ns``: a user bound to the built-in ``edit`` role there (which the
    chart's end-user roles aggregate into), impersonated by the admin client. Returns once it may create Jobs."""
    user = user or f"tenant-{ns}"
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": f"{user}-edit", "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_ROLE},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    client.RbacAuthorizationV1Api(stack.api).create_namespaced_role_binding(ns, binding)
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "resourceAttributes": {"namespace": ns, "verb": "create",
                                                            "group": crd.GROUP, "resource": crd.JOB.plural}}}
    auth = client.AuthorizationV1Api(stack.api)
    wait_for(lambda: auth.create_subject_access_review(review).status.allowed, 60,
             f"{user} allowed to create Stowage Jobs in {ns} (the edit role aggregated)")
    api = stack.plane.api()
    api.set_default_header("Impersonate-User", user)
    return api


def phase_of(job: dict[str, Any]) -> str | None:
    return (job.get("status") or {}).get("phase")


def true_conditions(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The Job's conditions whose status is ``True``."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return [c for c in conditions if isinstance(c, dict) and c.get("status") == "True"]
