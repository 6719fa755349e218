"""Admission of pods that are Stowage's by one label (pod, pod template, namespace), and their stated demand.

Pure: :func:`admission.admit_pod` on tables, no cluster. The chart's rendered scope is checked against the
operator's (``webhooks.webhook_configurations``); the live behaviour is ``tests/system/test_one_label.py``.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
import yaml
from stowage.operator import admission, webhooks

from stowage import labels
from stowage.errors import IntentError
from tests.chart.render import docs_of_kind, find_helm, render_documents
from tests.support.controlplane import REPO

QUICKSTART = REPO / "manifests" / "examples" / "opportunistic-pod.yaml"
QUEUES = ("batch", "default")
STOWAGE = labels.SCHEDULER_NAME
Q, OPP, IGNORE = labels.LABEL_QUEUE, labels.LABEL_OPPORTUNISTIC, labels.LABEL_WEBHOOK


def exists(name: str) -> bool:
    return name in QUEUES


def _pod(pod_labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
         scheduler: str = "default-scheduler", namespace: str = "plain", **resources: Any) -> dict[str, Any]:
    """A pod as the webhook receives it: the API server already wrote ``default-scheduler`` if it named none."""
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if resources:
        container["resources"] = resources
    meta: dict[str, Any] = {"generateName": "p-", "namespace": namespace, "labels": dict(pod_labels or {})}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "containers": [container]}}


NAMESPACE_QUEUES = {"ml": "batch", "typo": "nightly"}


def _admit(pod: dict[str, Any]) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The pod as stored (None: left as written) and the warnings."""
    decided = admission.admit_pod(pod, exists, namespace_queue=NAMESPACE_QUEUES.get, queue_names=lambda: QUEUES)
    return (jsonpatch.apply_patch(pod, decided.patch) if decided.patch else None), decided.warnings


# --- which pods are Stowage's, in which queue -------------------------------------------------------------


@pytest.mark.parametrize(("pod", "queue", "klass"), [
    pytest.param(_pod({Q: "batch"}), "batch", "regular", id="queue-label-no-scheduler"),
    pytest.param(_pod({OPP: "true"}, limits={"memory": "1Gi"}), "default", "opportunistic", id="opportunistic-true"),
    pytest.param(_pod({OPP: "auto"}, requests={"cpu": "1"}), "default", "regular", id="opportunistic-auto"),
    pytest.param(_pod({OPP: "false", Q: "batch"}), "batch", "regular", id="queue-label-with-the-opt-out"),
    pytest.param(_pod(scheduler=STOWAGE), "default", "regular", id="scheduler-name-alone"),
    pytest.param(_pod(namespace="ml"), "batch", "regular", id="namespace-label"),
    pytest.param(_pod({Q: "default"}, namespace="ml"), "default", "regular", id="pod-label-over-namespace-label"),
    pytest.param(_pod({OPP: "false"}, namespace="ml"), "batch", "regular", id="namespace-label-opt-out-of-harvest"),
    pytest.param(_pod({Q: "batch", IGNORE: "ignore"}), "batch", "regular", id="ignore-label-does-not-undo-a-queue"),
])
def test_one_label_makes_a_pod_stowages(pod: dict[str, Any], queue: str, klass: str) -> None:
    admitted, _ = _admit(pod)
    assert admitted is not None
    assert admitted["spec"]["schedulerName"] == STOWAGE
    assert admitted["metadata"]["labels"][Q] == queue
    assert admitted["metadata"]["labels"][labels.LABEL_CLASS] == klass
    assert admitted["spec"]["schedulingGates"] == [{"name": labels.GATE_ADMISSION}]
    if klass == "opportunistic":
        assert admitted["spec"]["priorityClassName"] == labels.OPPORTUNISTIC_PRIORITY_CLASS
        assert admitted["spec"]["containers"][0]["resources"]["requests"][labels.HARVEST_RESOURCE] == "1"


@pytest.mark.parametrize(("pod", "warned"), [
    pytest.param(_pod(), None, id="no-label-no-scheduler"),
    pytest.param(_pod({OPP: "false"}), None, id="only-the-opt-out"),
    pytest.param(_pod({OPP: "False"}), None, id="only-the-opt-out-any-case"),
    pytest.param(_pod(scheduler="volcano"), None, id="another-scheduler"),
    pytest.param(_pod({OPP: "false"}, scheduler="volcano"), None, id="another-scheduler-with-the-opt-out"),
    pytest.param(_pod({IGNORE: "ignore"}, namespace="ml"), None, id="opted-out-of-the-namespace-default"),
    pytest.param({**_pod({Q: "batch"}), "spec": {**_pod()["spec"], "nodeName": "n1"}},
                 "spec.nodeName 'n1' binds this pod without any scheduler: Stowage does not gate, queue or convert "
                 "it; remove spec.nodeName (use a nodeSelector) to run it through Stowage", id="bound-at-creation"),
    pytest.param(_pod(scheduler="volcano", namespace="ml"),
                 "namespace 'ml' is labelled stowage.io/queue=batch, so its pods run through Stowage; this pod names "
                 "spec.schedulerName 'volcano' and stays with that scheduler, outside every Stowage queue",
                 id="another-scheduler-in-a-queue-namespace-is-warned"),
])
def test_pods_that_do_not_ask_for_stowage_stay_as_written(pod: dict[str, Any], warned: str | None) -> None:
    admitted, warnings = _admit(pod)
    assert admitted is None
    assert warnings == ((warned,) if warned else ())


@pytest.mark.parametrize(("pod", "field", "value", "phrases"), [
    pytest.param(_pod({Q: "nightly"}), "metadata.labels['stowage.io/queue']", "nightly",
                 ["the name of an existing Queue (batch, default; kubectl get sq), or create Queue 'nightly' first"],
                 id="unknown-queue-lists-the-known-ones"),
    pytest.param(_pod(namespace="typo"), "namespace 'typo': metadata.labels['stowage.io/queue']", "nightly",
                 ["create Queue 'nightly' first", "the default queue of the namespace's pods"],
                 id="unknown-namespace-queue"),
    pytest.param(_pod({Q: "batch"}, scheduler="volcano"), "metadata.labels['stowage.io/queue']", "batch",
                 ["no Stowage label on a pod of another scheduler (spec.schedulerName 'volcano')",
                  "remove spec.schedulerName (or set it to 'stowage-scheduler')"],
                 id="another-scheduler-and-a-queue-label"),
    pytest.param(_pod({OPP: "true"}, scheduler="volcano"), "metadata.labels['stowage.io/opportunistic']", "true",
                 ["no Stowage label on a pod of another scheduler"], id="another-scheduler-and-opportunistic"),
    pytest.param(_pod({OPP: "yes"}), "metadata.labels['stowage.io/opportunistic']", "yes",
                 ["one of 'true', 'auto', 'false'"], id="bad-opportunistic-value"),
    pytest.param(_pod({OPP: "yes"}, scheduler="volcano"), "metadata.labels['stowage.io/opportunistic']", "yes",
                 ["one of 'true', 'auto', 'false'"], id="bad-opportunistic-value-on-another-schedulers-pod"),
])
def test_a_label_that_cannot_be_honoured_is_refused(pod: dict[str, Any], field: str, value: str,
                                                    phrases: list[str]) -> None:
    with pytest.raises(IntentError) as caught:
        _admit(pod)
    assert (caught.value.field, caught.value.value) == (field, value)
    for phrase in phrases:
        assert phrase in caught.value.allowed


def test_a_stowage_pod_outside_the_operators_namespaces_is_refused_and_others_pass() -> None:
    # Gated where no dispatcher looks, it would wait for ever; a pod that is not Stowage's is none of its business.
    def admit(pod: dict[str, Any]) -> admission.PodAdmission:
        return admission.admit_pod(pod, exists, watched_namespaces={"batch-a", "batch-b"})

    with pytest.raises(IntentError) as caught:
        admit(_pod({Q: "batch"}, namespace="web"))
    assert (caught.value.field, caught.value.value) == ("metadata.namespace", "web")
    assert caught.value.allowed.startswith("one of the namespaces the Stowage operator watches (batch-a, batch-b)")
    assert admit(_pod({Q: "batch"}, namespace="batch-a")).patch
    assert admit(_pod(namespace="web")).patch == []


@pytest.mark.parametrize(("pod", "phrase"), [
    pytest.param(_pod({OPP: "auto"}), "stowage.io/opportunistic=auto on a plain pod runs it regular", id="auto"),
    pytest.param(_pod({Q: "batch", IGNORE: "ignore"}), "stowage.io/webhook=ignore on a pod only keeps it out of its "
                 "namespace's default queue", id="ignore-label-on-a-pod-that-names-stowage"),
    pytest.param(_pod({Q: "batch"}, {labels.ANN_DEMAND: '{"cpu": "1"}'}),
                 "annotation stowage.io/demand removed: this pod runs regular", id="demand-on-a-regular-pod"),
])
def test_what_admission_does_not_honour_is_warned(pod: dict[str, Any], phrase: str) -> None:
    admitted, warnings = _admit(pod)
    assert admitted is not None
    assert any(phrase in w for w in warnings), warnings


def test_a_pod_that_names_the_stowage_scheduler_keeps_it() -> None:
    pod = _pod({Q: "batch"}, scheduler=STOWAGE)
    assert admission.mutate_pod(pod, exists) == admission.admit_pod(pod, exists).patch
    assert {"op": "replace", "path": "/spec/schedulerName", "value": STOWAGE} not in admission.mutate_pod(pod, exists)


# --- a stated demand is kept --------------------------------------------------------------------------------


def _demand(pod: dict[str, Any]) -> dict[str, str]:
    admitted, _ = _admit(pod)
    assert admitted is not None
    return json.loads(admitted["metadata"]["annotations"][labels.ANN_DEMAND])


def _stating(demand: dict[str, str], **resources: Any) -> dict[str, Any]:
    return _pod({OPP: "true"}, {labels.ANN_DEMAND: json.dumps(demand)}, **resources)


@pytest.mark.parametrize(("pod", "demand"), [
    pytest.param(_stating({"cpu": "1", "memory": "2Gi"}, limits={"memory": "2Gi"}), {"cpu": "1", "memory": "2Gi"},
                 id="kept-whole"),
    pytest.param(_stating({"cpu": "500m"}, limits={"cpu": "2", "memory": "2Gi"}), {"cpu": "500m", "memory": "2Gi"},
                 id="limits-fill-what-it-leaves-out"),
    pytest.param(_stating({"cpu": "3"}, requests={"cpu": "1", "memory": "1Gi"}), {"cpu": "3", "memory": "1Gi"},
                 id="requests-fill-and-are-no-bound"),
    pytest.param(_stating({"cpu": "0", "memory": "1Gi"}, limits={"cpu": "2", "memory": "2Gi"}),
                 {"cpu": "2", "memory": "1Gi"}, id="a-stated-zero-is-filled"),
    pytest.param(_stating({"cpu": "2", "memory": "1Gi"}), {"cpu": "2", "memory": "1Gi"}, id="no-requests-no-limits"),
    pytest.param(_pod({OPP: "true"}, requests={"cpu": "1"}, limits={"memory": "2Gi"}), {"cpu": "1", "memory": "2Gi"},
                 id="none-stated-requests-then-limits"),
])
def test_a_stated_demand_is_kept_and_the_pod_fills_what_it_leaves_out(pod: dict[str, Any],
                                                                      demand: dict[str, str]) -> None:
    assert _demand(pod) == demand


def test_a_demand_within_an_init_containers_limit_is_no_contradiction() -> None:
    pod = _stating({"memory": "3Gi"}, limits={"memory": "2Gi"})
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox", "resources": {"limits": {"memory": "4Gi"}}}]
    assert _demand(pod) == {"memory": "3Gi"}
    pod["spec"]["containers"].append({"name": "unlimited", "image": "busybox"})
    assert _demand({**pod, "metadata": {**pod["metadata"], "annotations": {labels.ANN_DEMAND: '{"memory": "9Gi"}'}}}) \
        == {"memory": "9Gi"}  # one container without a memory limit: the pod's memory is unbounded


@pytest.mark.parametrize(("pod", "over"), [
    pytest.param(_stating({"cpu": "1", "memory": "3Gi"}, limits={"memory": "2Gi"}), "memory: demand 3Gi, limit 2Gi",
                 id="memory-above-the-limit"),
    pytest.param(_stating({"cpu": "4", "memory": "3Gi"}, limits={"cpu": "2", "memory": "2Gi"}),
                 "cpu: demand 4, limit 2; memory: demand 3Gi, limit 2Gi", id="every-resource-named"),
])
def test_a_demand_above_the_limits_is_refused_naming_both_values(pod: dict[str, Any], over: str) -> None:
    with pytest.raises(IntentError) as caught:
        _admit(pod)
    assert caught.value.field == "metadata.annotations['stowage.io/demand']"
    assert caught.value.value == pod["metadata"]["annotations"][labels.ANN_DEMAND]
    assert f"no resource above what the pod's limits let it use ({over})" in caught.value.allowed


def test_a_malformed_demand_on_an_opportunistic_pod_is_refused() -> None:
    with pytest.raises(IntentError) as caught:
        _admit(_pod({OPP: "true"}, {labels.ANN_DEMAND: "cpu=1"}, limits={"cpu": "1"}))
    assert caught.value.field == "metadata.annotations['stowage.io/demand']"


def test_the_quickstart_pod_keeps_its_stated_cpu_demand() -> None:
    (pod,) = [d for d in yaml.safe_load_all(QUICKSTART.read_text()) if d["kind"] == "Pod"]
    assert _demand(pod) == {"cpu": "1", "memory": "2Gi"}


def test_a_converted_pod_admitted_again_keeps_its_demand() -> None:
    # The demand the first pass wrote is a stated demand to a second: the requests it zeroed are never read.
    once, _ = _admit(_pod({OPP: "true"}, requests={"cpu": "1", "memory": "1Gi"}))
    assert once is not None
    twice, _ = _admit({**once, "metadata": {**once["metadata"], "labels": {OPP: "true"}}})
    assert twice is not None
    # Its demand is kept; stowage.io/requests is the system's record of requests before the first conversion,
    # never taken from the pod (a user's copy is removed), so a promotion restores the stated demand instead.
    assert twice["metadata"]["annotations"][labels.ANN_DEMAND] == once["metadata"]["annotations"][labels.ANN_DEMAND]
    assert json.loads(twice["metadata"]["annotations"][labels.ANN_REQUESTS]) == {"main": {}}


# --- the scope: the chart renders what the operator would write ---------------------------------------------


def _scope(hook: dict[str, Any]) -> tuple[Any, ...]:
    conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    conditions.pop("not-the-operator", None)
    conditions.pop("not-from-the-operator", None)
    namespaces = [e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] != "kubernetes.io/metadata.name"]
    return hook["name"], conditions, namespaces, hook.get("objectSelector"), hook["reinvocationPolicy"]


@pytest.mark.skipif(find_helm() is None, reason="helm not found: run `bash scripts/setup.sh --test`")
def test_the_charts_pod_webhook_has_the_operators_scope() -> None:
    (rendered,) = docs_of_kind(render_documents(), "MutatingWebhookConfiguration")
    written = webhooks.webhook_configurations({"url": "https://127.0.0.1:9443"})[1]
    assert [_scope(h) for h in rendered["webhooks"]] == [_scope(h) for h in written["webhooks"]]
    assert {c["expression"] for c in rendered["webhooks"][0]["matchConditions"]} >= {
        admission.stowage_pod_condition()}
    for hook in rendered["webhooks"]:
        names = next(e for e in hook["namespaceSelector"]["matchExpressions"]
                     if e["key"] == "kubernetes.io/metadata.name")
        assert {"kube-system", "stowage-system"} <= set(names["values"])
