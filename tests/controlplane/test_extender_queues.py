"""The extender's Queue informer against a real API server: live weights, and RBAC that does not grant Queues.

The Queue CRD is applied from ``charts/stowage/files/crds`` (idempotent: other folders apply it too). Queue
names are unique per test: Queues are cluster-scoped and the control plane is shared by the session.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client
from stowage.extender.queues import QueueWeights
from stowage.extender.server import ExtenderRuntime
from stowage.operator import crd

from stowage.config import StowageSettings
from stowage.kube.api import KubeClient, load_config
from tests.support.crds import load_crds
from tests.support.kube import wait_until
from tests.support.serving import serving
from tests.support.stack import install_crds

pytestmark = pytest.mark.timeout(180)

WAIT_S = 90.0
"""Bounds how long a broken test waits (the informer's backoff may have grown to several seconds)."""


def _id() -> str:
    return uuid.uuid4().hex[:8]


class Queues:
    """Creates, patches and deletes Queues as the admin; what it created is deleted at the end."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.created: list[str] = []

    def create(self, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": crd.API_VERSION, "kind": crd.QUEUE.kind, "metadata": {"name": name}, "spec": spec}
        self.custom.create_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, body)
        self.created.append(name)

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name)


@pytest.fixture
def queues(control_plane) -> Iterator[Queues]:
    """The Queue CRD Established (from charts/stowage/files/crds), and a :class:`Queues`."""
    api = control_plane.api()
    install_crds(api, [d for d in load_crds() if d["metadata"]["name"] == crd.QUEUE.crd_name])
    made = Queues(api)
    yield made
    for name in made.created:
        with contextlib.suppress(client.ApiException):
            made.delete(name)


def weights_of(weights: QueueWeights, *names: str) -> dict[str, float]:
    current = weights.weights()
    return {n: current[n] for n in names if n in current}


def test_the_extender_follows_queue_weights_on_a_real_api_server(control_plane, queues: Queues) -> None:
    heavy, plain = f"heavy-{_id()}", f"plain-{_id()}"
    queues.create(heavy, {"weight": 2})
    api = KubeClient(load_config(control_plane.kubeconfig))
    runtime = ExtenderRuntime(StowageSettings(), api, prometheus_url=None)
    try:
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, WAIT_S)
            weights = runtime.queue_weights
            wait_until(lambda: weights_of(weights, heavy) == {heavy: 2.0}, WAIT_S)  # from the list
            assert http.get(f"{url}/readyz").json()["queue_weights_error"] is None
            queues.create(plain, {})  # the schema defaults spec.weight to 1
            wait_until(lambda: weights_of(weights, heavy, plain) == {heavy: 2.0, plain: 1.0}, WAIT_S)
            queues.patch(heavy, {"weight": 0.5})
            wait_until(lambda: weights_of(weights, heavy, plain) == {heavy: 0.5, plain: 1.0}, WAIT_S)
            queues.delete(heavy)
            wait_until(lambda: weights_of(weights, heavy, plain) == {plain: 1.0}, WAIT_S)  # deleted: weighs 1
    finally:
        api.close()


@contextlib.contextmanager
def cluster_role(rbac: client.RbacAuthorizationV1Api, name: str, rules: list[dict[str, Any]], namespace: str,
                 account: str) -> Iterator[None]:
    """A ClusterRole with ``rules`` bound to ``namespace/account``; both deleted on exit."""
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    try:
        yield
    finally:
        with contextlib.suppress(client.ApiException):
            rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(client.ApiException):
            rbac.delete_cluster_role(name)


def test_without_rbac_for_queues_the_extender_serves_at_weight_1_and_picks_them_up_once_granted(
        control_plane, queues: Queues, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="stowage.extender.queues")
    caplog.set_level(logging.DEBUG, logger="stowage.kube.informer")  # last: it also sets caplog's handler level
    suffix = _id()
    namespace, account, heavy = f"ext-rbac-{suffix}", "extender", f"heavy-{suffix}"
    control_plane.create_namespace(namespace)
    admin = control_plane.api()
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    token = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    queues.create(heavy, {"weight": 2})
    # What the chart granted before issue #19: Nodes and Pods, not Queues.
    cluster_only = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]}]
    queue_rules = [{"apiGroups": [crd.GROUP], "resources": [crd.QUEUE.plural], "verbs": ["list", "watch"]}]
    api = KubeClient(load_config(control_plane.kubeconfig_for_token(token, name=f"ext-rbac-{suffix}")))
    runtime = ExtenderRuntime(StowageSettings(), api, prometheus_url=None)
    try:
        with cluster_role(rbac, f"ext-cluster-{suffix}", cluster_only, namespace, account), \
                runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, WAIT_S)

            def queue_retries() -> list[logging.LogRecord]:
                return [r for r in caplog.records
                        if r.name == "stowage.kube.informer" and r.getMessage().startswith("informer queues:")]

            wait_until(lambda: len(queue_retries()) >= 2, WAIT_S)
            error = http.get(f"{url}/readyz").json()["queue_weights_error"]
            assert "HTTP 403" in error and "weighs 1" in error
            assert runtime.queue_weights.weights() == {}  # heavy's Queue exists, but cannot be read
            assert {r.levelno for r in queue_retries()} == {logging.DEBUG}
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "Queues" in r.getMessage()]
            assert len(warnings) == 1, [r.getMessage() for r in warnings]
            assert "list and watch on queues.stowage.io" in warnings[0].getMessage()

            with cluster_role(rbac, f"ext-queues-{suffix}", queue_rules, namespace, account):
                wait_until(lambda: weights_of(runtime.queue_weights, heavy) == {heavy: 2.0}, WAIT_S)
                assert http.get(f"{url}/readyz").json()["queue_weights_error"] is None
                assert any("readable again" in r.getMessage() for r in caplog.records)
    finally:
        api.close()
