"""Stowage's admission webhooks served by Kopf and called by the real API server over loopback.

Kopf runs in a thread with the handlers of :func:`stowage.operator.webhooks.register` and a
:class:`~stowage.operator.webhooks.ConfiguringServer` (HTTPS on 127.0.0.1 with the control plane's
loopback certificate), which writes the webhook configurations with ``clientConfig.url``. Everything is then
checked through the API server: refusals carry our messages, pods are stored converted and gated,
and with the webhook down a Stowage pod cannot be created while exempt namespaces and other pods
are unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes import client
from stowage.operator import admission, crd, webhooks

from stowage import labels
from tests.operator.conftest import RawApi
from tests.support.controlplane import ControlPlane, ExternalCluster

PODS = "/api/v1/namespaces/{ns}/pods"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
TEST_QUEUE = "wh-batch"
HUGE = "1e9999999"  # matches the quantity grammar; no float holds it
#: The operator's identity: its pods (a Job's tasks) skip the pod webhook.
OPERATOR_USER = "system:serviceaccount:stowage-system:stowage-operator"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AdmissionOperator:
    """Kopf with Stowage's webhooks on a thread: :meth:`start` waits until the API server calls it."""

    def __init__(self, plane: ControlPlane, kube: RawApi, reads: Any = None) -> None:
        """``reads``: the ``ApiClient`` the webhooks read Queues and namespaces with (default: ``kube``'s)."""
        self.plane, self.kube = plane, kube
        self.reads = reads if reads is not None else kube.api
        # The control plane's own serving certificate (openssl-made, for 127.0.0.1, signed by its CA) serves
        # here too: a loopback HTTPS endpoint the API server verifies with that CA.
        self.ca, self.cert, self.key = plane.ca_file, plane.pki / "apiserver.crt", plane.pki / "apiserver.key"
        self.port = _free_port()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: BaseException | None = None

    def _registry(self) -> kopf.OperatorRegistry:
        registry = kopf.OperatorRegistry()
        webhooks.register(registry, webhooks.kubernetes_queue_lookup(self.reads), trusted_users=[OPERATOR_USER],
                          namespace_queue=webhooks.kubernetes_namespace_queue(self.reads),
                          queue_names=webhooks.kubernetes_queue_names(self.reads),
                          queue_spec=webhooks.kubernetes_queue_spec(self.reads),
                          namespace_labels=webhooks.kubernetes_namespace_labels(self.reads))

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=self.plane.host, ca_path=str(self.plane.ca_file), token=self.plane.token)

        return registry

    def _settings(self) -> kopf.OperatorSettings:
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        server = webhooks.webhook_server(addr="127.0.0.1", port=self.port, host="127.0.0.1", certfile=str(self.cert),
                                         pkeyfile=str(self.key), cafile=str(self.ca))
        webhooks.configure(settings, webhooks.ConfiguringServer(
            server, webhooks.kubernetes_applier(self.kube.api), trusted_users=[OPERATOR_USER]))
        return settings

    def _run(self) -> None:
        try:
            asyncio.run(kopf.operator(registry=self._registry(), settings=self._settings(), standalone=True,
                                      clusterwide=True, stop_flag=self._stop))
        except BaseException as exc:  # reported by start()/stop()
            self.error = exc

    def start(self, timeout_s: float = 120.0) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kopf-admission", daemon=True)
        self._thread.start()
        # Ready when the API server calls our Queue webhook: a dry-run create with a quota key no schema
        # can check comes back refused with our message.
        probe = {"apiVersion": crd.API_VERSION, "kind": "Queue", "metadata": {"name": "probe"},
                 "spec": {"quota": {"no such resource!": "1"}}}
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            assert self._thread.is_alive(), f"Kopf exited: {self.error!r}"
            status, last = self.kube.request("POST", crd.QUEUE.path(), probe, query={"dryRun": "All"})
            if status == 422 and f'"{webhooks.VALIDATE_QUEUE}" denied the request' in str(last):
                return
            time.sleep(0.2)
        raise AssertionError(f"the webhook did not answer within {timeout_s}s; last answer: {last}")

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            assert not self._thread.is_alive(), "Kopf did not stop"
            self._thread = None


@pytest.fixture(scope="module")
def operator(control_plane: ControlPlane | ExternalCluster, kube: RawApi,
             stowage_crds: list[dict[str, Any]]) -> Iterator[AdmissionOperator]:
    """Kopf serving the webhooks; afterwards Kopf is stopped and the webhook configurations deleted."""
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("the API server must reach a webhook on this machine's loopback (STOWAGE_TEST_KUBECONFIG is set)")
    kube.apply(f"{PRIORITY_CLASSES}/{labels.OPPORTUNISTIC_PRIORITY_CLASS}", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": labels.OPPORTUNISTIC_PRIORITY_CLASS}, "value": -10, "preemptionPolicy": "Never"})
    for name in (labels.DEFAULT_QUEUE, TEST_QUEUE):
        kube.apply(crd.QUEUE.path(name), {"apiVersion": crd.API_VERSION, "kind": "Queue", "metadata": {"name": name}})
    running = AdmissionOperator(control_plane, kube)
    logging.getLogger("kopf").setLevel(logging.INFO)
    running.start()
    try:
        yield running
    finally:
        with contextlib.suppress(AssertionError):
            running.stop()
        # Fail-closed configurations outlive the operator by design: remove them, or every later
        # stowage-scheduler pod of the session would be refused.
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            kube.request("DELETE", f"{ADMISSION}/{kind}/{webhooks.CONFIGURATION_NAME}")
        kube.request("DELETE", crd.QUEUE.path(TEST_QUEUE))


def _namespace(kube: RawApi, name: str, ns_labels: dict[str, str] | None = None) -> None:
    kube.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": name, "labels": ns_labels or {}}})
    deadline = time.monotonic() + 60.0  # pods are admitted once the default ServiceAccount exists
    while kube.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name}"
        time.sleep(0.1)


@pytest.fixture
def ns(kube: RawApi, operator: AdmissionOperator) -> Iterator[str]:
    name = f"wh-{secrets.token_hex(3)}"
    _namespace(kube, name)
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}")


def _pod(name: str, *, scheduler: str = labels.SCHEDULER_NAME, pod_labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if resources is not None:
        container["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": pod_labels or {}, "annotations": annotations or {}},
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "containers": [container]}}


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


# --- validating ----------------------------------------------------------------------------------


def test_a_queue_with_a_bad_quota_key_is_refused_by_the_webhook(kube: RawApi, operator: AdmissionOperator) -> None:
    body = {"apiVersion": crd.API_VERSION, "kind": "Queue", "metadata": {"name": f"q-{secrets.token_hex(3)}"},
            "spec": {"weight": 2, "quota": {"GPU count": "4", "cpu": "8"}}}
    status, answer = kube.request("POST", crd.QUEUE.path(), body)
    assert status == 422, answer
    assert f'admission webhook "{webhooks.VALIDATE_QUEUE}" denied the request' in answer["message"]
    assert ("spec.quota: resource names such as cpu, memory, nvidia.com/gpu as keys, got 'GPU count'"
            in answer["message"])


def test_a_job_naming_an_unknown_queue_is_refused(kube: RawApi, ns: str) -> None:
    job = {"apiVersion": crd.API_VERSION, "kind": "Job", "metadata": {"name": "j"},
           "spec": {"queue": "nightly", "tasks": [{"name": "a", "template": {"spec": {"containers": []}}}]}}
    status, answer = kube.request("POST", crd.JOB.path(namespace=ns), job)
    assert status == 422, answer
    assert f'admission webhook "{webhooks.VALIDATE_JOB}" denied the request' in answer["message"]
    assert "spec.queue: the name of an existing Queue (kubectl get sq), got 'nightly'" in answer["message"]


def test_a_job_with_a_dependency_cycle_and_a_bad_quantity_is_refused_naming_both(kube: RawApi, ns: str) -> None:
    # A quantity the schema's pattern takes and no float holds: only the webhook can refuse it.
    bad = {"spec": {"containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": HUGE}}}]}}
    job = {"apiVersion": crd.API_VERSION, "kind": "Job", "metadata": {"name": "j"},
           "spec": {"queue": TEST_QUEUE, "tasks": [
               {"name": "a", "dependsOn": ["c"], "template": bad},
               {"name": "b", "dependsOn": ["a"], "template": {}},
               {"name": "c", "dependsOn": ["b"], "template": {}}]}}
    status, answer = kube.request("POST", crd.JOB.path(namespace=ns), job)
    assert status == 422, answer
    assert "spec.tasks[*].dependsOn: dependencies without a cycle" in answer["message"]
    assert "got 'a -> c -> b -> a'" in answer["message"]
    assert "spec.tasks[0].template.spec.containers[0].resources.requests.cpu" in answer["message"]


def _job(template: Any, **task: Any) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": "Job", "metadata": {"name": f"j-{secrets.token_hex(3)}"},
            "spec": {"queue": TEST_QUEUE, "tasks": [{"name": "a", "template": template, **task}]}}


def _containers(containers: Any) -> dict[str, Any]:
    return {"spec": {"containers": containers}}


def _requests(cpu: Any) -> dict[str, Any]:
    return _containers([{"name": "m", "image": "x", "resources": {"requests": {"cpu": cpu}}}])




# Each was admitted (or answered 500 with a Python error) and then stopped the operator's every planning pass
# (issue #31). Now each is refused with a 4xx naming the field: by the schema where it can say so, else by
# the webhook. (field, phrase) pairs the message must contain.
MALFORMED_JOBS = [
    *(pytest.param(_job(_containers(bad)), "spec.tasks[0].template.spec.containers", "must be of type array",
                   id=f"containers-{name}")
      for name, bad in (("float", 1.5), ("int", 1), ("bool", True), ("string", "abc"))),
    pytest.param(_job({"spec": {"containers": [], "initContainers": 1.5}}),
                 "spec.tasks[0].template.spec.initContainers", "must be of type array", id="init-containers-float"),
    pytest.param(_job(_containers([1])), "spec.tasks[0].template.spec.containers[0]", "must be of type object",
                 id="container-an-int"),
    pytest.param(_job(_containers([{"name": "m", "resources": 5}])),
                 "spec.tasks[0].template.spec.containers[0].resources", "must be of type object",
                 id="resources-an-int"),
    pytest.param(_job({"metadata": 5, "spec": {"containers": []}}), "spec.tasks[0].template.metadata",
                 "must be of type object", id="metadata-an-int"),
    pytest.param(_job({"metadata": {"annotations": {labels.ANN_DISK_BANDWIDTH: HUGE}}}),
                 f"spec.tasks[0].template.metadata.annotations[{labels.ANN_DISK_BANDWIDTH!r}]", HUGE,
                 id="bandwidth-annotation-overflows"),
    pytest.param(_job({"metadata": {"annotations": {labels.ANN_EXPECTED_DURATION: "1e300"}}}),
                 f"spec.tasks[0].template.metadata.annotations[{labels.ANN_EXPECTED_DURATION!r}]",
                 "a number of seconds from 0 to 2592000", id="duration-annotation-above-30-days"),
    pytest.param(_job(_requests(HUGE)), "spec.tasks[0].template.spec.containers[0].resources.requests.cpu", HUGE,
                 id="request-overflows"),
    pytest.param(_job({"spec": {"containers": [{"name": "m", "resources": {"limits": {"memory": HUGE}}}]}}),
                 "spec.tasks[0].template.spec.containers[0].resources.limits.memory", HUGE, id="limit-overflows"),
    pytest.param(_job(_requests({"amount": 1})), "spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
                 "a Kubernetes quantity", id="request-an-object"),
    pytest.param(_job({}, expectedDuration=1e308), "spec.tasks[0].expectedDuration", "should be less than or equal to",
                 id="duration-jumps-the-srtf-queue"),
]


@pytest.mark.parametrize(("job", "field", "phrase"), MALFORMED_JOBS)
def test_a_malformed_job_is_refused_naming_the_field(kube: RawApi, ns: str, job: dict[str, Any], field: str,
                                                    phrase: str) -> None:
    status, answer = kube.request("POST", crd.JOB.path(namespace=ns), job)
    assert status == 422, answer
    assert field in answer["message"] and phrase in answer["message"], answer["message"]


def test_a_template_nested_deeper_than_the_webhook_reads_is_refused(kube: RawApi, ns: str) -> None:
    # Written as text: no JSON encoder nests this deep. JSON is YAML, which the API server also takes.
    deep = '{"a": ' * 3000 + "{}" + "}" * 3000
    job = json.dumps(_job({"spec": {"containers": [], "x": "DEEP"}})).replace('"DEEP"', deep)
    status, answer = kube.request("POST", crd.JOB.path(namespace=ns), job, content_type="application/yaml")
    assert status == 422, str(answer)[:500]
    assert f'admission webhook "{webhooks.VALIDATE_JOB}" denied the request' in answer["message"]
    assert "nested deeper than Stowage's webhook reads" in answer["message"]


def test_a_queue_whose_quota_overflows_is_refused_by_the_webhook(kube: RawApi, operator: AdmissionOperator) -> None:
    body = {"apiVersion": crd.API_VERSION, "kind": "Queue", "metadata": {"name": f"q-{secrets.token_hex(3)}"},
            "spec": {"quota": {"cpu": HUGE}}}
    status, answer = kube.request("POST", crd.QUEUE.path(), body)
    assert status == 422, answer
    assert f'admission webhook "{webhooks.VALIDATE_QUEUE}" denied the request' in answer["message"]
    assert "spec.quota.cpu" in answer["message"] and HUGE in answer["message"], answer["message"]


def test_a_good_job_is_stored_and_its_status_and_metadata_stay_writable(kube: RawApi, ns: str) -> None:
    job = {"apiVersion": crd.API_VERSION, "kind": "Job", "metadata": {"name": "j"},
           "spec": {"queue": TEST_QUEUE, "tasks": [{"name": "a", "template": {}}]}}
    kube.ok("POST", crd.JOB.path(namespace=ns), job)
    kube.ok("PATCH", crd.JOB.path("j", ns), {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}},
            content_type="application/merge-patch+json")
    kube.ok("PATCH", crd.JOB.path("j", ns), {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json")


# --- mutating ------------------------------------------------------------------------------------


def test_an_opportunistic_pod_is_stored_converted_and_gated(kube: RawApi, ns: str) -> None:
    pod = _pod("etl", pod_labels={labels.LABEL_OPPORTUNISTIC: "true", labels.LABEL_QUEUE: TEST_QUEUE},
               resources={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "3Gi"}})
    stored = kube.ok("POST", PODS.format(ns=ns), pod)
    meta, spec = stored["metadata"], stored["spec"]
    assert meta["labels"] == {labels.LABEL_OPPORTUNISTIC: "true", labels.LABEL_QUEUE: TEST_QUEUE,
                              labels.LABEL_CLASS: "opportunistic"}
    assert json.loads(meta["annotations"][labels.ANN_DEMAND]) == {"cpu": "1", "memory": "2Gi"}
    resources = spec["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "0", "memory": "0", labels.HARVEST_RESOURCE: "1"}
    assert resources["limits"] == {"memory": "3Gi", labels.HARVEST_RESOURCE: "1"}
    # The Priority plugin ran again after our patch and filled these in from the class.
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        labels.OPPORTUNISTIC_PRIORITY_CLASS, -10, "Never")
    assert _gates(stored) == [labels.GATE_ADMISSION]
    assert labels.pod_class(meta["labels"]) is labels.PodClass.OPPORTUNISTIC


def test_spoofed_system_labels_and_annotations_are_overwritten(kube: RawApi, ns: str) -> None:
    pod = _pod("sneaky", pod_labels={labels.LABEL_CLASS: "opportunistic", labels.LABEL_JOB: "someone-elses",
                                     labels.LABEL_TASK_GROUP: "train", "app": "mine"},
               annotations={labels.ANN_DEMAND: '{"cpu": "1m"}', "note": "kept"},
               resources={"requests": {"cpu": "500m", labels.HARVEST_RESOURCE: "1"},
                          "limits": {labels.HARVEST_RESOURCE: "1"}})
    stored = kube.ok("POST", PODS.format(ns=ns), pod)
    assert stored["metadata"]["labels"] == {"app": "mine", labels.LABEL_QUEUE: labels.DEFAULT_QUEUE,
                                            labels.LABEL_CLASS: "regular"}
    assert stored["metadata"]["annotations"] == {"note": "kept"}
    assert stored["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m"}}
    assert stored["spec"].get("priorityClassName") is None
    assert _gates(stored) == [labels.GATE_ADMISSION]


def test_an_auto_pod_stays_regular_with_a_warning(kube: RawApi, ns: str) -> None:
    pod = _pod("auto", pod_labels={labels.LABEL_OPPORTUNISTIC: "auto"}, resources={"requests": {"cpu": "1"}})
    stored = kube.ok("POST", PODS.format(ns=ns), pod)
    assert stored["metadata"]["labels"][labels.LABEL_CLASS] == "regular"
    assert stored["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert _gates(stored) == [labels.GATE_ADMISSION]


@pytest.mark.parametrize(("pod", "field", "phrase"), [
    pytest.param(_pod("empty", pod_labels={labels.LABEL_OPPORTUNISTIC: "true"}), "spec.containers[*].resources",
                 "an opportunistic pod must state what it will use: set resources.requests or resources.limits",
                 id="opportunistic-without-demand"),
    pytest.param(_pod("lost", pod_labels={labels.LABEL_QUEUE: "nightly"}), "metadata.labels['stowage.io/queue']",
                 "kubectl get sq), or create Queue 'nightly' first", id="unknown-queue-label"),
    pytest.param(_pod("typo", pod_labels={labels.LABEL_OPPORTUNISTIC: "yes"}),
                 "metadata.labels['stowage.io/opportunistic']", "one of 'true', 'auto', 'false', got 'yes'",
                 id="malformed-intent"),
])
def test_a_pod_is_refused_saying_what_to_change(kube: RawApi, ns: str, pod: dict[str, Any], field: str,
                                                phrase: str) -> None:
    status, answer = kube.request("POST", PODS.format(ns=ns), pod)
    assert status == 422, answer
    assert f'admission webhook "{webhooks.MUTATE_POD}" denied the request' in answer["message"]
    assert field in answer["message"] and phrase in answer["message"], answer["message"]


@pytest.mark.parametrize(("annotations", "field", "phrase"), [
    pytest.param({labels.ANN_DEMAND: '{"cpu": 1' + "0" * 400 + "}"}, f"metadata.annotations[{labels.ANN_DEMAND!r}]",
                 "cpu", id="demand-a-huge-integer"),
    pytest.param({labels.ANN_DEMAND: "[" * 100_000}, f"metadata.annotations[{labels.ANN_DEMAND!r}]",
                 "characters", id="demand-nested-past-the-recursion-limit"),
    pytest.param({labels.ANN_DEMAND: '{"cpu": "' + HUGE + '"}'}, f"metadata.annotations[{labels.ANN_DEMAND!r}]",
                 HUGE, id="demand-overflows"),
    pytest.param({labels.ANN_NETWORK_BANDWIDTH: HUGE}, f"metadata.annotations[{labels.ANN_NETWORK_BANDWIDTH!r}]",
                 HUGE, id="bandwidth-overflows"),
])
def test_a_pod_with_a_malformed_stowage_annotation_is_refused(kube: RawApi, ns: str, annotations: dict[str, str],
                                                             field: str, phrase: str) -> None:
    pod = _pod("odd", pod_labels={labels.LABEL_OPPORTUNISTIC: "true"}, annotations=annotations,
               resources={"limits": {"cpu": "1", "memory": "1Gi"}})
    status, answer = kube.request("POST", PODS.format(ns=ns), pod)
    assert status == 422, answer
    assert f'admission webhook "{webhooks.MUTATE_POD}" denied the request' in answer["message"]
    assert field in answer["message"] and phrase in answer["message"], answer["message"]


def test_pods_of_other_schedulers_are_not_sent_to_the_webhook(kube: RawApi, ns: str) -> None:
    pod = _pod("plain", scheduler="default-scheduler", pod_labels={labels.LABEL_CLASS: "opportunistic"})
    stored = kube.ok("POST", PODS.format(ns=ns), pod)
    assert stored["metadata"]["labels"] == {labels.LABEL_CLASS: "opportunistic"}  # theirs, untouched
    assert "schedulingGates" not in stored["spec"]


def test_a_batch_job_pod_is_gated_and_classed(kube: RawApi, ns: str) -> None:
    template = _pod("x", pod_labels={labels.LABEL_QUEUE: TEST_QUEUE}, resources={"requests": {"cpu": "100m"}})
    del template["metadata"]["name"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly"},
           "spec": {"template": {"metadata": template["metadata"], "spec": template["spec"]}}}
    kube.ok("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    deadline = time.monotonic() + 60.0
    while True:  # the Job controller creates the pod (as its own service account, through the webhook)
        items = kube.ok("GET", PODS.format(ns=ns), query={"labelSelector": "job-name=nightly"})["items"]
        if items:
            break
        assert time.monotonic() < deadline, "the Job controller created no pod"
        time.sleep(0.2)
    pod = items[0]
    assert pod["metadata"]["labels"][labels.LABEL_QUEUE] == TEST_QUEUE
    assert pod["metadata"]["labels"][labels.LABEL_CLASS] == "regular"
    assert _gates(pod) == [labels.GATE_ADMISSION]


def test_the_operators_own_pods_pass_unchanged(kube: RawApi, ns: str) -> None:
    kube.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}]})
    task = admission.convert_opportunistic(_pod(
        "j-train-0",
        pod_labels={labels.LABEL_JOB: "j", labels.LABEL_TASK_GROUP: "train", labels.LABEL_QUEUE: TEST_QUEUE},
        resources={"requests": {"cpu": "2", "memory": "1Gi"}}))
    deadline = time.monotonic() + 30.0
    while True:  # RBAC caches the new binding within moments
        status, stored = kube.request("POST", PODS.format(ns=ns), task, headers={"Impersonate-User": OPERATOR_USER})
        if status != 403 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 201, stored
    assert stored["metadata"]["labels"] == {labels.LABEL_JOB: "j", labels.LABEL_TASK_GROUP: "train",
                                            labels.LABEL_QUEUE: TEST_QUEUE, labels.LABEL_CLASS: "opportunistic"}
    assert "schedulingGates" not in stored["spec"]  # released already: the operator creates a task when it runs
    spec = stored["spec"]
    assert (spec["priorityClassName"], spec["priority"]) == (labels.OPPORTUNISTIC_PRIORITY_CLASS, -10)


def test_the_configurations_fail_closed_and_exempt_system_namespaces(kube: RawApi, operator: AdmissionOperator) -> None:
    mutating = kube.ok("GET", f"{ADMISSION}/mutatingwebhookconfigurations/{webhooks.CONFIGURATION_NAME}")
    hooks = mutating["webhooks"]  # the pods that name Stowage, then those of queue-labelled namespaces
    assert [h["name"] for h in hooks] == [webhooks.MUTATE_POD, webhooks.MUTATE_POD_IN_QUEUE_NAMESPACE]
    for hook in hooks:
        assert hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{operator.port}/{webhooks.MUTATE_POD}"
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in (
            hook["namespaceSelector"]["matchExpressions"])
    validating = kube.ok("GET", f"{ADMISSION}/validatingwebhookconfigurations/{webhooks.CONFIGURATION_NAME}")
    assert [(h["name"], h["failurePolicy"]) for h in validating["webhooks"]] == [
        (webhooks.VALIDATE_QUEUE, "Fail"), (webhooks.VALIDATE_JOB, "Fail"), (webhooks.VALIDATE_POD_UPDATE, "Fail"),
        (webhooks.VALIDATE_WORKLOAD, "Fail"), (webhooks.VALIDATE_WORKLOAD_IN_QUEUE_NAMESPACE, "Fail")]


# --- pod UPDATE: what admission decided stays decided ---------------------------------------------

MERGE = "application/merge-patch+json"


def _admitted_pod(kube: RawApi, ns: str, name: str) -> str:
    """An opportunistic pod admitted by the webhook (converted, gated); returns its path."""
    kube.ok("POST", PODS.format(ns=ns), _pod(name, pod_labels={labels.LABEL_OPPORTUNISTIC: "true"},
                                             resources={"requests": {"cpu": "1", "memory": "1Gi"}}))
    return f"{PODS.format(ns=ns)}/{name}"


@pytest.mark.parametrize(("patch", "key"), [
    pytest.param({"metadata": {"labels": {labels.LABEL_CLASS: "regular"}}},
                 f"metadata.labels[{labels.LABEL_CLASS!r}]", id="class"),
    pytest.param({"metadata": {"labels": {labels.LABEL_OPPORTUNISTIC: "false"}}},
                 f"metadata.labels[{labels.LABEL_OPPORTUNISTIC!r}]", id="intent"),
    pytest.param({"metadata": {"labels": {labels.LABEL_QUEUE: TEST_QUEUE}}},  # admitted to "default"
                 f"metadata.labels[{labels.LABEL_QUEUE!r}]", id="queue"),
    pytest.param({"metadata": {"labels": {labels.LABEL_JOB: "someone-elses"}}},
                 f"metadata.labels[{labels.LABEL_JOB!r}]", id="job-added"),
    pytest.param({"metadata": {"annotations": {labels.ANN_DEMAND: None}}},
                 f"metadata.annotations[{labels.ANN_DEMAND!r}]", id="demand-removed"),
    pytest.param({"spec": {"schedulingGates": []}},
                 f"spec.schedulingGates[{labels.GATE_ADMISSION!r}]", id="gate-removed"),
])
def test_a_user_cannot_change_what_admission_decided(kube: RawApi, ns: str, patch: dict[str, Any], key: str) -> None:
    path = _admitted_pod(kube, ns, "spoof")
    before = kube.ok("GET", path)
    status, answer = kube.request("PATCH", path, patch, content_type=MERGE)
    assert status == 422, answer
    assert f'admission webhook "{webhooks.VALIDATE_POD_UPDATE}" denied the request' in answer["message"]
    assert key in answer["message"] and "only Stowage's own service accounts may" in answer["message"]
    after = kube.ok("GET", path)
    assert (after["metadata"]["labels"], after["metadata"]["annotations"], _gates(after)) == (
        before["metadata"]["labels"], before["metadata"]["annotations"], _gates(before))


def test_a_user_may_change_other_labels_and_stowage_may_release(kube: RawApi, ns: str) -> None:
    path = _admitted_pod(kube, ns, "mine")
    stored = kube.ok("PATCH", path, {"metadata": {"labels": {"team": "search"}, "annotations": {"note": "x"}}},
                     content_type=MERGE)
    assert stored["metadata"]["labels"]["team"] == "search"
    # The operator (a trusted service account) removes the gate when it releases the pod.
    kube.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}]})
    deadline = time.monotonic() + 30.0
    while True:  # RBAC caches the new binding within moments
        status, answer = kube.request("PATCH", path, {"spec": {"schedulingGates": []}}, content_type=MERGE,
                                      headers={"Impersonate-User": OPERATOR_USER})
        if status != 403 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200, answer
    assert _gates(answer) == []


# --- the API unreadable: a refusal within the API server's wait, never a hang ---------------------


def test_every_unexpected_failure_of_a_handler_is_a_refusal_with_a_message() -> None:
    def broken(**_: Any) -> None:
        raise TypeError("'float' object is not iterable")

    def unreadable(**_: Any) -> None:
        raise webhooks.ApiUnreadable("the API server did not answer reading Queue 'q' within 1.5 s (ReadTimeoutError)")

    with pytest.raises(kopf.AdmissionError) as caught:
        webhooks._answering("Job", broken)()
    assert caught.value.code == 422
    assert "Job not admitted" in str(caught.value) and "TypeError: 'float' object is not iterable" in str(caught.value)
    with pytest.raises(kopf.AdmissionError) as caught:
        webhooks._answering("Job", unreadable)()
    assert caught.value.code == 503 and "try again" in str(caught.value)


@contextlib.contextmanager
def _black_hole() -> Iterator[str]:
    """An HTTP endpoint that accepts connections (in the kernel's backlog) and never answers: a dead API server
    behind a live socket, or a keep-alive connection that died quietly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_lookup_of_an_unanswering_api_gives_up_within_its_timeout() -> None:
    with _black_hole() as url:
        reads = client.ApiClient(client.Configuration(host=url))
        lookups = (functools.partial(webhooks.kubernetes_queue_lookup(reads), "default"),
                   webhooks.kubernetes_queue_names(reads),
                   functools.partial(webhooks.kubernetes_namespace_queue(reads), "default"),
                   functools.partial(webhooks.kubernetes_queue_spec(reads), "default"),
                   functools.partial(webhooks.kubernetes_namespace_labels(reads), "default"))
        for lookup in lookups:
            began = time.monotonic()
            with pytest.raises(webhooks.ApiUnreadable, match="did not answer"):
                lookup()
            # One retry at most: well inside the API server's wait for the webhook.
            assert time.monotonic() - began < 2 * webhooks.READ_TIMEOUT_S + 1.0


def test_with_the_api_unreadable_a_job_is_refused_with_503_and_no_thread_waits(
        control_plane: ControlPlane | ExternalCluster, kube: RawApi, operator: AdmissionOperator, ns: str) -> None:
    assert isinstance(control_plane, ControlPlane)
    operator.stop()
    try:
        with _black_hole() as url:
            blind = AdmissionOperator(control_plane, kube, reads=client.ApiClient(client.Configuration(host=url)))
            blind.start()
            try:
                began = time.monotonic()
                status, answer = kube.request("POST", crd.JOB.path(namespace=ns), _job({}))
                took = time.monotonic() - began
            finally:
                blind.stop()
    finally:
        operator.start()
    assert status == 503, answer
    assert f'admission webhook "{webhooks.VALIDATE_JOB}" denied the request' in answer["message"]
    assert f"did not answer reading Queue {TEST_QUEUE!r}" in answer["message"] and "try again" in answer["message"]
    assert took < webhooks.TIMEOUT_S, took


# --- the webhook down (keep last: it stops the module's operator, then starts it again) ----------


def test_with_the_webhook_down_stowage_pods_are_refused_and_exempt_namespaces_are_not(
        kube: RawApi, operator: AdmissionOperator, ns: str) -> None:
    ignored = f"wh-ignored-{secrets.token_hex(3)}"
    _namespace(kube, ignored, {labels.LABEL_WEBHOOK: labels.WEBHOOK_IGNORE})
    created: list[str] = []
    _admitted_pod(kube, ns, "admitted-before")
    operator.stop()
    try:
        # The configurations stay behind (fail closed): the API server cannot reach the webhook.
        status, answer = kube.request("POST", PODS.format(ns=ns), _pod(
            "unconverted", pod_labels={labels.LABEL_OPPORTUNISTIC: "true"}, resources={"limits": {"memory": "1Gi"}}))
        assert status >= 500, answer
        assert f'failed calling webhook "{webhooks.MUTATE_POD}"' in answer["message"]
        status, answer = kube.request("POST", crd.QUEUE.path(), {"apiVersion": crd.API_VERSION, "kind": "Queue",
                                                                  "metadata": {"name": "while-down"}})
        assert status >= 500 and f'failed calling webhook "{webhooks.VALIDATE_QUEUE}"' in answer["message"], answer
        # A pod admitted before: a spoof of its class fails closed; its own labels still change (the API
        # server's matchConditions keep such updates off the webhook).
        status, answer = kube.request("PATCH", f"{PODS.format(ns=ns)}/admitted-before",
                                      {"metadata": {"labels": {labels.LABEL_CLASS: "regular"}}}, content_type=MERGE)
        assert status >= 500 and f'failed calling webhook "{webhooks.VALIDATE_POD_UPDATE}"' in answer["message"], (
            answer)
        kube.ok("PATCH", f"{PODS.format(ns=ns)}/admitted-before", {"metadata": {"labels": {"team": "x"}}},
                content_type=MERGE)

        # Everything outside the pod webhook's scope is created as usual.
        for namespace, pod in ((ns, _pod("other-scheduler", scheduler="default-scheduler")),
                               (ignored, _pod("exempt-by-label")),
                               ("kube-system", _pod(f"exempt-system-{secrets.token_hex(3)}"))):
            stored = kube.ok("POST", PODS.format(ns=namespace), pod)
            created.append(f"{PODS.format(ns=namespace)}/{stored['metadata']['name']}")
            assert "schedulingGates" not in stored["spec"]  # not seen by the webhook
    finally:
        for path in created:
            kube.request("DELETE", path)
        kube.request("DELETE", f"/api/v1/namespaces/{ignored}")
        operator.start()
    stored = kube.ok("POST", PODS.format(ns=ns), _pod("after", resources={"requests": {"cpu": "1"}}))
    assert _gates(stored) == [labels.GATE_ADMISSION]


# --- the examples users start from ----------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
#: Not an API object: a kube-scheduler configuration (tests/chart/test_scheduler_config.py starts one from it).
NOT_API_OBJECTS = {"existing-scheduler.yaml"}
#: queue.yaml first: job.yaml names its Queue.
EXAMPLE_FILES = sorted((p.name for p in EXAMPLES.glob("*.yaml") if p.name not in NOT_API_OBJECTS),
                       key=lambda name: (name != "queue.yaml", name))


def _object_path(doc: dict[str, Any], ns: str) -> str:
    name = doc["metadata"]["name"]
    paths = {
        (crd.API_VERSION, "Queue"): crd.QUEUE.path(name),
        (crd.API_VERSION, "Job"): crd.JOB.path(name, ns),
        ("v1", "Pod"): f"{PODS.format(ns=ns)}/{name}",
        ("apps/v1", "Deployment"): f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
        ("batch/v1", "Job"): f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
        ("scheduling.k8s.io/v1", "PriorityClass"): f"{PRIORITY_CLASSES}/{name}",
    }
    return paths[(doc["apiVersion"], doc["kind"])]


def test_every_example_manifest_is_accepted_by_the_api_server_and_the_webhooks(kube: RawApi, ns: str) -> None:
    """Each document of manifests/examples/*.yaml applied as `kubectl apply` would (server-side apply): the CRD
    schemas, their CEL rules and Stowage's webhooks (the Job's queue must exist) all accept it."""
    assert {"queue.yaml", "queue-with-selector.yaml", "job.yaml", "one-label.yaml",
            "opportunistic-pod.yaml"} <= set(EXAMPLE_FILES)
    created_queues = []
    try:
        for name in EXAMPLE_FILES:
            for doc in (d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d):
                path = _object_path(doc, ns)
                status, answer = kube.request("PATCH", path, doc, query={"fieldManager": "kubectl", "force": "true"},
                                              content_type="application/apply-patch+yaml")
                assert status in (200, 201), f"{name}: {doc['kind']} {doc['metadata']['name']}: {status} {answer}"
                if doc["kind"] == "Queue":
                    created_queues.append(path)
                if doc["apiVersion"] == crd.API_VERSION:  # kept as written (defaults added, nothing dropped)
                    stored = answer["spec"]
                    assert {k: stored[k] for k in doc["spec"] if k != "tasks"} == {
                        k: v for k, v in doc["spec"].items() if k != "tasks"}
                    for written, kept in zip(doc["spec"].get("tasks", []), stored.get("tasks", []), strict=True):
                        assert {k: kept[k] for k in written} == written
        job = kube.ok("GET", crd.JOB.path("wordcount", ns))
        assert [t["replicas"] for t in job["spec"]["tasks"]] == [8, 2]
        pod = kube.ok("GET", f"{PODS.format(ns=ns)}/report")  # one-label.yaml's bare pod: gated by the webhook
        assert pod["spec"]["schedulerName"] == labels.SCHEDULER_NAME
        assert labels.GATE_ADMISSION in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    finally:
        for path in created_queues:
            kube.request("DELETE", path)
