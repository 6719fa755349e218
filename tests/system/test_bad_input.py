"""Bad input at every door of the whole stack (issue #11): each gets a clear error naming the field, and
nothing is lost: good work submitted alongside runs to success, every task exactly once.

Doors: the API server's schema and CEL rules and the operator's validating webhook (Queues, Jobs), the
pod webhooks (plain pods with spoofed or conflicting labels), a Queue deleted while it has work, and a
Job whose group fits no node. The last two are not refusals but states a user must be able to see: the
Job's condition ``Unschedulable`` (reason ``QueueNotFound`` / ``FitsNoNode``) and a Warning Event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from stowage.operator import crd

from stowage import labels
from tests.support.stack import TaskLedger, WholeStack, wait_for
from tests.system.workloads import finished_nothing_lost, group, plain_pod

pytestmark = pytest.mark.timeout(600)


def refusal(call: Callable[[], Any]) -> str:
    """The API server's message for a refused create or update (fails if it was accepted)."""
    with pytest.raises(client.ApiException) as caught:
        call()
    assert caught.value.status in (400, 403, 422), caught.value
    body = json.loads(caught.value.body)
    return str(body.get("message"))


@pytest.fixture
def ns(healthy: WholeStack) -> Iterator[str]:
    with healthy.namespace("bad") as name:
        yield name


def create_queue_body(stack: WholeStack, name: str, spec: dict[str, Any]) -> Callable[[], Any]:
    body = {"apiVersion": crd.API_VERSION, "kind": crd.QUEUE.kind, "metadata": {"name": name}, "spec": spec}
    return lambda: stack.objects.create_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, body)


@pytest.mark.parametrize(("spec", "names"), [
    ({"weight": 0}, ["spec.weight", "greater than 0"]),  # schema
    ({"jobOrder": "LIFO"}, ["spec.jobOrder", "LIFO"]),  # schema enum
    ({"quota": {"GPU count": "1"}}, ["validate-queue.stowage.io", "spec.quota", "GPU count"]),  # webhook
    ({"quota": {"cpu": "lots"}}, ["spec.quota", "lots"]),  # schema pattern or webhook
])
def test_a_malformed_queue_is_refused_naming_the_field(healthy: WholeStack, spec: dict[str, Any],
                                                       names: list[str]) -> None:
    message = refusal(create_queue_body(healthy, "bad-queue", spec))
    assert all(n in message for n in names), message
    with pytest.raises(client.ApiException) as gone:
        healthy.queue("bad-queue")
    assert gone.value.status == 404


def _job(stack: WholeStack, name: str, **change: Any) -> dict[str, Any]:
    body = stack.job_body(name, [group("a", 2, run_s=2), group("b", 1, run_s=2, dependsOn=["a"])])
    for path, value in change.items():
        target = body
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
    return body


BAD_JOBS: list[tuple[dict[str, Any], list[str]]] = [
    ({"spec.tasks.1.name": "a", "spec.tasks.1.dependsOn": []}, ["spec.tasks", "unique", "repeated: a"]),  # CEL
    ({"spec.tasks.0.replicas": 0}, ["spec.tasks[0].replicas"]),  # schema
    ({"spec.opportunistic": "maybe"}, ["spec.opportunistic", "maybe"]),  # schema enum
    ({"spec.queue": "nightly"}, ["validate-job.stowage.io", "spec.queue", "existing Queue", "nightly"]),  # webhook
    ({"spec.tasks.0.dependsOn": ["b"]}, ["dependsOn", "cycle"]),  # webhook: a → b → a
    ({"spec.tasks.0.template.spec.containers.0.resources.requests.cpu": "2 cores"},
     ["spec.tasks[0].template.spec.containers[0].resources.requests.cpu", "2 cores"]),  # webhook
]


def test_malformed_jobs_are_refused_naming_the_field_and_good_work_alongside_is_not_lost(
        healthy: WholeStack, ns: str) -> None:
    stack = healthy
    ledger = TaskLedger(stack.api, ns).start()
    try:
        stack.create_job(ns, _job(stack, "good"))
        messages = []
        for i, (change, names) in enumerate(BAD_JOBS):
            body = _job(stack, f"bad-{i}", **change)
            message = refusal(lambda body=body: stack.create_job(ns, body))
            messages.append(message)
            assert all(n in message for n in names), (change, message)
        print("\n".join(messages))
        assert set(stack.jobs(ns)) == {"good"}, "a refused Job was stored"
        problems = finished_nothing_lost(stack, ns, ledger, timeout_s=240)
    finally:
        ledger.stop()
    assert problems == []
    assert {p["labels"].get(labels.LABEL_JOB) for p in ledger.pods()} == {"good"}


def test_pods_with_spoofed_or_conflicting_labels(healthy: WholeStack, ns: str) -> None:
    stack = healthy
    # Spoofed system labels and the demand annotation: removed at admission; the pod runs as what it is.
    spoof = plain_pod(stack, "spoof", queue=None, run_s=2, extra_labels={
        labels.LABEL_CLASS: "opportunistic", labels.LABEL_JOB: "ghost", labels.LABEL_TASK_GROUP: "x"})
    spoof["metadata"]["annotations"][labels.ANN_DEMAND] = json.dumps({"cpu": "100m"})
    created = stack.core.create_namespaced_pod(ns, spoof)
    assert created.metadata.labels[labels.LABEL_CLASS] == "regular"
    assert created.metadata.labels[labels.LABEL_QUEUE] == labels.DEFAULT_QUEUE
    assert labels.LABEL_JOB not in created.metadata.labels and labels.LABEL_TASK_GROUP not in created.metadata.labels
    assert labels.ANN_DEMAND not in (created.metadata.annotations or {})
    assert created.spec.containers[0].resources.requests["cpu"] == "1"

    refused = {
        "intent": (plain_pod(stack, "maybe", queue=None, run_s=2, extra_labels={labels.LABEL_OPPORTUNISTIC: "maybe"}),
                   [f"metadata.labels['{labels.LABEL_OPPORTUNISTIC}']", "maybe"]),
        "queue": (plain_pod(stack, "noqueue", queue="nightly", run_s=2),
                  [f"metadata.labels['{labels.LABEL_QUEUE}']", "existing Queue", "nightly"]),
    }
    bare = plain_pod(stack, "bare", queue=None, run_s=2, extra_labels={labels.LABEL_OPPORTUNISTIC: "true"})
    bare["spec"]["containers"][0]["resources"] = {}
    refused["no demand"] = (bare, ["spec.containers[*].resources", "opportunistic pod must state"])
    for what, (body, names) in refused.items():
        message = refusal(lambda body=body: stack.core.create_namespaced_pod(ns, body))
        assert all(n in message for n in names), (what, message)
    assert {p.metadata.name for p in stack.pods(ns)} == {"spoof"}
    wait_for(lambda: stack.core.read_namespaced_pod("spoof", ns).status.phase == "Succeeded", 180,
             "the de-spoofed pod to be released and run")


def test_a_pod_update_that_spoofs_its_class_is_refused_in_a_chart_install(healthy: WholeStack, ns: str) -> None:
    """The chart's validate-pod-update.stowage.io: a user relabelling a pod's class is refused naming the key."""
    stack = healthy
    stack.core.create_namespaced_pod(ns, plain_pod(stack, "later", queue=None, run_s=30))
    message = refusal(lambda: stack.core.patch_namespaced_pod(
        "later", ns, {"metadata": {"labels": {labels.LABEL_CLASS: "opportunistic"}}}))
    assert "validate-pod-update.stowage.io" in message and f"metadata.labels['{labels.LABEL_CLASS}']" in message
    pod = stack.core.read_namespaced_pod("later", ns)
    assert pod.metadata.labels[labels.LABEL_CLASS] == "regular"
    # Any other label change goes through (the webhook is not even called for it).
    stack.core.patch_namespaced_pod("later", ns, {"metadata": {"labels": {"team": "blue"}}})


def unschedulable(stack: WholeStack, ns: str, job: str) -> dict[str, Any] | None:
    conditions = (stack.job(ns, job).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Unschedulable" and c["status"] == "True"), None)


def warning_events(stack: WholeStack, ns: str, job: str) -> dict[str, str]:
    events = stack.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={job}").items
    return {e.reason: e.message for e in events if e.type == "Warning"}


def test_a_queue_deleted_while_it_has_work(healthy: WholeStack, ns: str) -> None:
    """Running tasks finish; tasks not started wait, and the Job says why; the Queue back, the Job completes."""
    stack = healthy
    stack.create_queue("doomed", weight=1)
    ledger = TaskLedger(stack.api, ns).start()
    try:
        stack.create_job(ns, stack.job_body("work", [group("t", 30, run_s=15)], queue="doomed"))
        wait_for(lambda: len([p for p in stack.pods(ns) if p.status.phase == "Running"]) >= 10, 180,
                 "the Job's first tasks running")
        stack.objects.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, "doomed")
        condition = wait_for(lambda: unschedulable(stack, ns, "work"), 120, "the Job to say its Queue is gone")
        assert condition["reason"] == "QueueNotFound" and "doomed" in condition["message"], condition
        assert "QueueNotFound" in warning_events(stack, ns, "work")
        # What ran finishes; nothing new starts while the Queue is missing.
        wait_for(lambda: not [p for p in stack.pods(ns) if p.status.phase in ("Running", "Pending")], 180,
                 "the running tasks to finish")
        status = stack.job(ns, "work")["status"]
        assert status["phase"] == "Running" and 0 < status["tasksSucceeded"] < 30, status
        created = len(stack.pods(ns))
        stack.create_queue("doomed", weight=1)
        problems = finished_nothing_lost(stack, ns, ledger, timeout_s=300)
        assert len(stack.pods(ns)) > created
    finally:
        ledger.stop()
        stack.objects.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, "doomed")
    assert problems == []
    assert unschedulable(stack, ns, "work") is None


def test_a_job_whose_group_fits_no_node_says_so(healthy: WholeStack, ns: str) -> None:
    stack = healthy
    stack.create_job(ns, stack.job_body("huge", [group("small", 1, run_s=2), group("big", 2, cpu="64")]))
    condition = wait_for(lambda: unschedulable(stack, ns, "huge"), 120, "the Job to say its group fits no node")
    assert condition["reason"] == "FitsNoNode", condition
    assert "'big'" in condition["message"] and "cpu" in condition["message"], condition
    assert "FitsNoNode" in warning_events(stack, ns, "huge")
    wait_for(lambda: ((stack.job(ns, "huge").get("status") or {}).get("groups") or {}).get("small", {})
             .get("succeeded") == 1, 180, "the group that fits to run")
    assert not [p for p in stack.pods(ns) if (p.metadata.labels or {}).get(labels.LABEL_TASK_GROUP) == "big"]
