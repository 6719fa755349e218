"""One label makes a pod Stowage's, on the whole stack from the chart (issue #20).

A Deployment, a ``batch/v1`` Job and a bare pod, each with one Stowage label and no ``schedulerName``, a pod
of a namespace labelled ``stowage.io/queue``, and ``manifests/examples/one-label.yaml`` as written go through
the chart's pod webhook (its rendered ``matchConditions``), wait at the gate, are released by the dispatcher
and bound by the Stowage scheduler; the opportunistic ones are converted. Labels the webhook cannot honour are
refused with the message a user reads. The README's quickstart pod keeps the demand it states.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from stowage.operator import admission, webhooks

from stowage import labels
from tests.support.controlplane import REPO
from tests.support.fake_kubelet import ANN_RUN_SECONDS
from tests.support.stack import WholeStack, wait_for

pytestmark = pytest.mark.timeout(900)

QUEUE = "one-label"
QUICKSTART = REPO / "manifests" / "examples" / "opportunistic-pod.yaml"
EXAMPLE = REPO / "manifests" / "examples" / "one-label.yaml"
OTHER_SCHEDULER = "elsewhere"


def refusal(call: Callable[[], Any]) -> str:
    """The API server's message for a refused create (fails if it was accepted)."""
    with pytest.raises(client.ApiException) as caught:
        call()
    assert caught.value.status in (400, 422), caught.value
    return str(json.loads(caught.value.body).get("message"))


def refused_dry_run(call: Callable[[], Any]) -> bool:
    """Whether ``call`` (a dry-run create) was refused by admission."""
    try:
        call()
    except client.ApiException as exc:
        return exc.status in (400, 422)
    return False


def template(stack: WholeStack, pod_labels: dict[str, str], run_s: float | None = None,
             **resources: dict[str, str]) -> dict[str, Any]:
    """A pod template with ``pod_labels`` and no ``schedulerName``, on this stack's nodes."""
    annotations = {ANN_RUN_SECONDS: str(run_s)} if run_s is not None else {}
    return {"metadata": {"labels": pod_labels, "annotations": annotations},
            "spec": {"terminationGracePeriodSeconds": 1, "nodeSelector": {stack.node_label: stack.id},
                     "containers": [{"name": "main", "image": "busybox", "resources": resources}]}}


def bare_pod(stack: WholeStack, name: str, pod_labels: dict[str, str], run_s: float | None = 2,
             **resources: dict[str, str]) -> dict[str, Any]:
    body = template(stack, pod_labels, run_s, **(resources or {"requests": {"cpu": "250m", "memory": "256Mi"}}))
    body["metadata"]["name"] = name
    body["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "v1", "kind": "Pod", **body}


def scheduled_by(stack: WholeStack, ns: str) -> dict[str, str]:
    """Pod name → the scheduler that bound it, from the ``Scheduled`` Events of the namespace."""
    events = stack.core.list_namespaced_event(ns, field_selector="reason=Scheduled").items
    return {e.involved_object.name: e.reporting_component or e.source.component for e in events}


@pytest.fixture(scope="module")
def queue(system: WholeStack) -> str:
    system.create_queue(QUEUE)
    return QUEUE


@pytest.fixture
def ns(healthy: WholeStack, queue: str) -> Iterator[str]:
    with healthy.namespace("one") as name:
        yield name


def test_the_stack_registers_the_charts_pod_webhook_scope(healthy: WholeStack) -> None:
    assert healthy.chart is not None
    (rendered,) = healthy.chart.of_kind("MutatingWebhookConfiguration")
    stored = client.AdmissionregistrationV1Api(healthy.api).read_mutating_webhook_configuration(
        rendered["metadata"]["name"])
    hooks = {h.name: h for h in stored.webhooks}
    assert list(hooks) == [webhooks.MUTATE_POD, webhooks.MUTATE_POD_IN_QUEUE_NAMESPACE]
    first = {c.name: c.expression for c in hooks[webhooks.MUTATE_POD].match_conditions}
    assert first["stowage-pods"] == admission.stowage_pod_condition()
    second = hooks[webhooks.MUTATE_POD_IN_QUEUE_NAMESPACE]
    assert {c.name: c.expression for c in second.match_conditions}["not-a-stowage-pod"] == \
        f"!({admission.stowage_pod_condition()})"
    assert {"key": labels.LABEL_QUEUE, "operator": "Exists", "values": None} in [
        e.to_dict() for e in second.namespace_selector.match_expressions]
    exempt = next(e for e in second.namespace_selector.match_expressions if e.key == "kubernetes.io/metadata.name")
    assert {"kube-system", healthy.release_namespace} <= set(exempt.values)


def test_a_deployment_a_batch_job_and_a_bare_pod_run_through_stowage_by_one_label(healthy: WholeStack,
                                                                                    ns: str) -> None:
    stack = healthy
    web = template(stack, {"app": "web", labels.LABEL_QUEUE: QUEUE}, requests={"cpu": "250m", "memory": "256Mi"})
    client.AppsV1Api(stack.api).create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": web}})
    etl = template(stack, {labels.LABEL_OPPORTUNISTIC: "true"}, run_s=3, limits={"cpu": "500m", "memory": "512Mi"})
    etl["spec"]["restartPolicy"] = "Never"
    client.BatchV1Api(stack.api).create_namespaced_job(ns, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl"},
        "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0, "template": etl}})
    stack.core.create_namespaced_pod(ns, bare_pod(stack, "bare", {labels.LABEL_QUEUE: labels.DEFAULT_QUEUE}))

    def settled() -> bool:
        pods = {p.metadata.name: p for p in stack.pods(ns)}
        web_running = [p for p in pods.values()
                       if p.metadata.labels.get("app") == "web" and p.status.phase == "Running"]
        job = client.BatchV1Api(stack.api).read_namespaced_job("etl", ns)
        return (len(web_running) == 2 and (job.status.succeeded or 0) == 2
                and pods.get("bare") is not None and pods["bare"].status.phase == "Succeeded")

    wait_for(settled, 300, "2 web replicas running, the etl Job's 2 pods succeeded and the bare pod succeeded",
             interval_s=1.0)
    pods = stack.pods(ns)
    assert len(pods) == 5
    binders = wait_for(lambda: found if len(found := scheduled_by(stack, ns)) >= 5 else None, 60,
                       "a Scheduled Event for every pod")
    for pod in pods:
        name, pod_labels = pod.metadata.name, pod.metadata.labels
        assert pod.spec.scheduler_name == labels.SCHEDULER_NAME, name
        assert binders[name] == labels.SCHEDULER_NAME, name
        assert pod.spec.node_name in stack.nodes, name
        assert labels.GATE_ADMISSION not in [g.name for g in pod.spec.scheduling_gates or []], name
        if pod_labels.get("app") == "web":
            assert (pod_labels[labels.LABEL_QUEUE], pod_labels[labels.LABEL_CLASS]) == (QUEUE, "regular")
            assert pod.spec.containers[0].resources.requests == {"cpu": "250m", "memory": "256Mi"}
        elif name == "bare":
            assert (pod_labels[labels.LABEL_QUEUE], pod_labels[labels.LABEL_CLASS]) == ("default", "regular")
        else:  # the Job's: converted to run on harvested capacity (and promoted in place if it ran in regular room)
            assert pod_labels["job-name"] == "etl"
            assert pod.spec.priority_class_name == labels.OPPORTUNISTIC_PRIORITY_CLASS and pod.spec.priority == -10
            assert json.loads(pod.metadata.annotations[labels.ANN_DEMAND]) == {"cpu": "500m", "memory": "512Mi"}
            requests = pod.spec.containers[0].resources.requests
            if pod_labels[labels.LABEL_CLASS] == "regular":  # regular room held it: promoted (docs/operator.md)
                # requests = its limits would make it Guaranteed (the QoS class is immutable): 1m below on cpu
                assert requests == {"cpu": "499m", "memory": "512Mi", labels.HARVEST_RESOURCE: "1"}, name
            else:
                assert requests == {"cpu": "0", "memory": "0", labels.HARVEST_RESOURCE: "1"}, name
            assert pod_labels[labels.LABEL_QUEUE] == "default"


def test_a_namespace_label_makes_its_pods_stowages_and_another_scheduler_is_warned(healthy: WholeStack,
                                                                                   ns: str) -> None:
    stack = healthy
    stack.core.patch_namespace(ns, {"metadata": {"labels": {labels.LABEL_QUEUE: QUEUE}}})
    stack.core.create_namespaced_pod(ns, bare_pod(stack, "plain", {"app": "report"}))
    other = bare_pod(stack, "theirs", {"app": "report"})
    other["spec"]["schedulerName"] = OTHER_SCHEDULER
    _, status, headers = stack.core.create_namespaced_pod_with_http_info(ns, other)
    assert status == 201
    assert (f'namespace {ns!r} is labelled {labels.LABEL_QUEUE}={QUEUE}, so its pods run through Stowage; this pod '
            f"names spec.schedulerName {OTHER_SCHEDULER!r} and stays with that scheduler") in headers.get("Warning", "")

    pinned = bare_pod(stack, "pinned", {"app": "report"})
    pinned["spec"]["nodeName"] = stack.nodes[0]
    _, status, headers = stack.core.create_namespaced_pod_with_http_info(ns, pinned)
    assert status == 201
    assert f"spec.nodeName {stack.nodes[0]!r} binds this pod without any scheduler" in headers.get("Warning", "")

    wait_for(lambda: stack.core.read_namespaced_pod("plain", ns).status.phase == "Succeeded", 180,
             "the namespace's pod to be released, bound and run")
    plain = stack.core.read_namespaced_pod("plain", ns)
    assert plain.spec.scheduler_name == labels.SCHEDULER_NAME
    assert (plain.metadata.labels[labels.LABEL_QUEUE], plain.metadata.labels[labels.LABEL_CLASS]) == (QUEUE, "regular")
    assert scheduled_by(stack, ns)["plain"] == labels.SCHEDULER_NAME
    theirs = stack.core.read_namespaced_pod("theirs", ns)
    assert theirs.spec.scheduler_name == OTHER_SCHEDULER and not theirs.spec.scheduling_gates
    assert labels.LABEL_QUEUE not in theirs.metadata.labels and theirs.spec.node_name is None
    assert not stack.core.read_namespaced_pod("pinned", ns).spec.scheduling_gates


def test_labels_that_cannot_be_honoured_are_refused_saying_what_to_change(healthy: WholeStack, ns: str) -> None:
    stack = healthy
    create = stack.core.create_namespaced_pod
    unknown = refusal(lambda: create(ns, bare_pod(stack, "lost", {labels.LABEL_QUEUE: "nightly"})))
    assert (f'admission webhook "{webhooks.MUTATE_POD}" denied the request: '
            "metadata.labels['stowage.io/queue']: the name of an existing Queue (") in unknown
    # The known queues are listed (the module's and whatever else this control plane holds), then how to add one.
    known = re.search(r"existing Queue \((.*); kubectl get sq\), or create Queue 'nightly' first", unknown)
    assert known and {"default", QUEUE} <= set(known.group(1).split(", ")), unknown
    assert unknown.endswith("got 'nightly'")

    theirs = bare_pod(stack, "theirs", {labels.LABEL_QUEUE: QUEUE})
    theirs["spec"]["schedulerName"] = OTHER_SCHEDULER
    both = refusal(lambda: create(ns, theirs))
    assert ("metadata.labels['stowage.io/queue']: no Stowage label on a pod of another scheduler (spec.schedulerName "
            f"{OTHER_SCHEDULER!r}): remove spec.schedulerName (or set it to 'stowage-scheduler')") in both

    greedy = bare_pod(stack, "greedy", {labels.LABEL_OPPORTUNISTIC: "true"}, limits={"memory": "2Gi"})
    greedy["metadata"]["annotations"][labels.ANN_DEMAND] = json.dumps({"cpu": "1", "memory": "4Gi"})
    contradiction = refusal(lambda: create(ns, greedy))
    assert ("metadata.annotations['stowage.io/demand']: no resource above what the pod's limits let it use "
            "(memory: demand 4Gi, limit 2Gi)") in contradiction

    bad = refusal(lambda: create(ns, bare_pod(stack, "maybe", {labels.LABEL_OPPORTUNISTIC: "maybe"})))
    assert "metadata.labels['stowage.io/opportunistic']: one of 'true', 'auto', 'false', got 'maybe'" in bad

    # A controller whose pods would be refused is refused itself, at its creation, with the pod's message under
    # spec.template (the chart's workload webhook; not a ReplicaSet's FailedCreate Event later).
    typo = template(stack, {"app": "typo", labels.LABEL_QUEUE: "nightly"}, requests={"cpu": "100m"})
    pod_message = refusal(lambda: create(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "typo", "labels": typo["metadata"]["labels"]}, "spec": typo["spec"]}))
    deployment = refusal(lambda: client.AppsV1Api(stack.api).create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "typo"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "typo"}}, "template": typo}}))
    reason = pod_message.split(" denied the request: ", 1)[1]
    assert reason.startswith("metadata.labels['stowage.io/queue']: the name of an existing Queue (")
    assert deployment == f'admission webhook "{webhooks.VALIDATE_WORKLOAD}" denied the request: spec.template.{reason}'

    stack.core.patch_namespace(ns, {"metadata": {"labels": {labels.LABEL_QUEUE: "nightly"}}})
    # The API server matches a webhook's namespaceSelector against its own cache of namespaces, which sees the
    # new label a moment later; a dry run (no pod is stored) shows when it has.
    defaulted = bare_pod(stack, "defaulted", {})
    wait_for(lambda: refused_dry_run(lambda: create(ns, defaulted, dry_run="All")), 30,
             "the API server to match the namespace's new label")
    namespaced = refusal(lambda: create(ns, defaulted))
    assert (f"namespace {ns!r}: metadata.labels['stowage.io/queue']: the name of an existing Queue (") in namespaced
    assert "it is the default queue of the namespace's pods, got 'nightly'" in namespaced
    assert {p.metadata.name for p in stack.pods(ns)} == set()
    for message in (unknown, both, contradiction, bad, namespaced):
        print(message)  # shown with -s: the messages a user reads


def test_the_quickstart_pod_keeps_its_stated_cpu_demand(healthy: WholeStack, ns: str) -> None:
    stack = healthy
    (pod,) = [d for d in yaml.safe_load_all(QUICKSTART.read_text()) if d["kind"] == "Pod"]
    stated = json.loads(pod["metadata"]["annotations"][labels.ANN_DEMAND])
    stored = stack.core.create_namespaced_pod(ns, pod)
    assert json.loads(stored.metadata.annotations[labels.ANN_DEMAND]) == stated == {"cpu": "1", "memory": "2Gi"}
    assert stored.metadata.labels[labels.LABEL_CLASS] == "opportunistic"
    name = pod["metadata"]["name"]
    wait_for(lambda: stack.core.read_namespaced_pod(name, ns).spec.node_name, 180,
             "the quickstart pod to be released and bound on harvested capacity")
    assert scheduled_by(stack, ns)[name] == labels.SCHEDULER_NAME


def test_the_one_label_example_runs_through_stowage(healthy: WholeStack, ns: str) -> None:
    stack = healthy
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        utils.create_from_dict(stack.api, doc, namespace=ns)

    def bound() -> list[client.V1Pod] | None:
        pods = stack.pods(ns)
        # 2 workers, the Job's 2 parallel pods, the report
        return pods if len(pods) == 5 and all(p.spec.node_name for p in pods) else None

    pods = wait_for(bound, 240, "every pod of the example bound")
    by = scheduled_by(stack, ns)
    for pod in pods:
        assert pod.spec.scheduler_name == labels.SCHEDULER_NAME and by[pod.metadata.name] == labels.SCHEDULER_NAME
        assert pod.metadata.labels[labels.LABEL_QUEUE] == labels.DEFAULT_QUEUE
    # Converted at admission (priority class and demand stay; the class label turns regular once promoted in place).
    converted = [p for p in pods if p.spec.priority_class_name == labels.OPPORTUNISTIC_PRIORITY_CLASS]
    assert sorted(p.metadata.labels["job-name"] for p in converted) == ["etl-harvest", "etl-harvest"]
    for pod in converted:
        assert json.loads(pod.metadata.annotations[labels.ANN_DEMAND]) == {"cpu": "500m", "memory": "1Gi"}
