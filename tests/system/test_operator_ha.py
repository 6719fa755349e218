"""Operator HA as the chart deploys it: two peered replicas, each serving the webhooks (pass/fail; the timing is
measured by ``bench_webhook_ha.py``, on demand).

Kopf runs its admission webhook server beside, not under, the peering freeze (``kopf/_core/reactor/running.py``:
the server task gets no ``operator_paused`` toggle, only the watchers do), so the standby replica admits pods
while the other acts. Shown here on the real control plane: a pod sent to the standby alone is converted, and
labelled pods are still admitted and converted after the replica the API server is connected to is SIGKILLed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from stowage.labels import SCHEDULER_NAME
from tests.support.controlplane import ControlPlane
from tests.support.stack import wait_for
from tests.system.operator_ha import OperatorPair, create_pods_while

PAUSED = "pausing the dispatcher"


@pytest.fixture(scope="module")
def pair(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorPair]:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    with OperatorPair(control_plane, tmp_path_factory.mktemp("ha"), release="stowage-ha") as stack:
        yield stack


def _labelled_pod() -> dict:
    return {"metadata": {"name": f"one-label-{uuid.uuid4().hex[:8]}", "labels": {"stowage.io/queue": "default"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def test_the_standby_replica_answers_admission(pair: OperatorPair) -> None:
    assert pair.service is not None
    paused = wait_for(lambda: [i for i, p in enumerate(pair.operators) if PAUSED in p.tail(200_000)],
                      120, "one replica to pause for the other (peering)")
    assert len(paused) == 1, paused
    (standby,) = paused
    pair.service.endpoints = [pair.webhook_ports[standby]]  # the Service's only ready endpoint
    wait_for(lambda: pair.service.ready == [pair.webhook_ports[standby]], 30, "the stand-in to route to the standby")
    try:
        with pair.namespace("standby") as ns:
            pod = client.CoreV1Api(pair.plane.api()).create_namespaced_pod(ns, _labelled_pod())
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        assert pod.spec.scheduling_gates, "the webhook gates a Stowage pod until the dispatcher releases it"
        assert pair.service.opened[pair.webhook_ports[standby]] >= 1
    finally:
        pair.service.endpoints = list(pair.webhook_ports)


def test_pods_are_admitted_after_the_connected_replica_is_killed(pair: OperatorPair) -> None:
    assert pair.service is not None
    with pair.namespace("ha") as ns:
        admissions, killed = create_pods_while(pair, ns, 4.0, lambda: pair.busiest().kill(), 14.0)
    after = [a for a in admissions if a.sent >= killed]
    admitted = [a for a in after if not a.error]
    assert admitted, [a.error for a in after][:5]
    assert {a.scheduler_name for a in admitted} == {SCHEDULER_NAME}
    assert sum(p.running for p in pair.operators) == 1
