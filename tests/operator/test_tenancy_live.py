"""Tenancy on a real control plane: who may use a Queue (``spec.namespaceSelector``), its states (``spec.state``),
and workloads checked at their pod template. docs/operator.md "Tenancy".

The operator (a process, its webhooks on 127.0.0.1, written by itself) admits the test's pods, Stowage Jobs and
workloads; two namespaces with different ``team`` labels ask for the same Queue. Every refusal is checked word for
word, as the API server passes it on; the pure rules behind them are ``test_tenancy.py``.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from stowage.operator import admission, crd, webhooks

from stowage import labels
from stowage.policy import holding
from tests.operator.conftest import RawApi
from tests.operator.support import NODE_LABEL, OperatorStack, job_body, wait_for
from tests.scheduler.stack import Proc
from tests.support.fake_kubelet import ANN_RUN_SECONDS

pytestmark = pytest.mark.timeout(900)

NAMESPACE_PREFIX = "ten"
QUEUE_FIELD = "metadata.labels['stowage.io/queue']"
EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "queue-with-selector.yaml"


def _pod(name: str, stack: OperatorStack, *, queue: str | None = None, cpu: str = "500m",
         run_s: float = 2.0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {labels.LABEL_QUEUE: queue} if queue else {},
                         "annotations": {ANN_RUN_SECONDS: str(run_s)}},
            "spec": {"nodeSelector": {NODE_LABEL: stack.id}, "terminationGracePeriodSeconds": 1,
                     **({"schedulerName": labels.SCHEDULER_NAME} if queue else {}),
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}


def _template(stack: OperatorStack, queue: str) -> dict[str, Any]:
    pod = _pod("x", stack, queue=queue)
    return {"metadata": {"labels": {"app": "w", **pod["metadata"]["labels"]}}, "spec": pod["spec"]}


def _refusal(call: Callable[[], Any]) -> tuple[int, str]:
    """(status, message) of a create the API server refused; fails when it was stored."""
    with pytest.raises(client.ApiException) as caught:
        call()
    return caught.value.status, json.loads(caught.value.body)["message"]


def _denied(webhook: str, message: str) -> str:
    return f'admission webhook "{webhook}" denied the request: {message}'


def _not_admitted(queue: str, namespace: str, selector: str) -> str:
    return (f"a Queue that admits namespace {namespace!r}: Queue {queue!r} admits only the namespaces whose labels "
            f"match {selector} (its spec.namespaceSelector); use a queue that admits this namespace, or ask a "
            "cluster admin to label the namespace or change the selector")


def _closed(queue: str) -> str:
    return (f"a Queue that takes new work: Queue {queue!r} is Closed (spec.state), so it admits no new pods, Jobs or "
            "workloads and its admitted work goes on; use another queue, or ask a cluster admin to set its spec.state "
            "to Open")


@contextlib.contextmanager
def _namespace(stack: OperatorStack, prefix: str, ns_labels: dict[str, str]) -> Iterator[str]:
    """A namespace ``<NAMESPACE_PREFIX>-<prefix>-<random>`` with ``ns_labels``, deleted on the way out."""
    name = f"{NAMESPACE_PREFIX}-{prefix}-{uuid.uuid4().hex[:6]}"
    stack.plane.create_namespace(name, ns_labels)
    try:
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            stack.core.delete_namespace(name)


@pytest.fixture
def teams(operator_stack: OperatorStack, operator: Proc) -> Iterator[dict[str, str]]:
    """Two namespaces, ``a`` and ``b``, labelled ``team=<their team>``: team name → namespace."""
    stack = operator_stack
    suffix = uuid.uuid4().hex[:6]
    made = {}
    for team in ("a", "b"):
        name = f"{NAMESPACE_PREFIX}-{team}-{suffix}"
        stack.plane.create_namespace(name, {"team": f"{team}-{suffix}"})
        made[team] = name
    try:
        yield made
    finally:
        for name in made.values():
            with contextlib.suppress(client.ApiException):
                stack.core.delete_namespace(name)


def _team(namespace: str) -> str:
    return namespace.split("-", 1)[1]  # ten-a-1f2e3d → a-1f2e3d, the namespace's team label


def _patch_queue(stack: OperatorStack, name: str, spec: dict[str, Any]) -> None:
    stack.objects.patch_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name, {"spec": spec})


def _delete_queue(stack: OperatorStack, name: str) -> None:
    with contextlib.suppress(client.ApiException):
        stack.objects.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name)


def _phase(stack: OperatorStack, ns: str, name: str) -> str:
    return str(stack.core.read_namespaced_pod(name, ns).status.phase)


def _held(stack: OperatorStack, ns: str, name: str) -> tuple[str, str] | None:
    for c in stack.core.read_namespaced_pod(name, ns).status.conditions or []:
        if c.type == labels.CONDITION_HELD and c.status == "True":
            return c.reason, c.message
    return None


# --- who may use a queue ----------------------------------------------------------------------------------------


def test_a_queue_takes_work_only_from_the_namespaces_its_selector_matches(operator_stack: OperatorStack,
                                                                          teams: dict[str, str]) -> None:
    stack, a, b = operator_stack, teams["a"], teams["b"]
    queue = f"ten-{_team(a)}"
    selector = f"team={_team(a)}"
    stack.create_queue(queue, namespaceSelector={"matchLabels": {"team": _team(a)}})
    try:
        # Team b names team a's queue: its pod and its Job are refused, naming queue, namespace and selector.
        status, message = _refusal(lambda: stack.core.create_namespaced_pod(b, _pod("p", stack, queue=queue)))
        assert (status, message) == (422, _denied(webhooks.MUTATE_POD, (
            f"{QUEUE_FIELD}: {_not_admitted(queue, b, selector)}, got {queue!r}")))
        status, message = _refusal(lambda: stack.create_job(b, job_body("j", [{"name": "t"}], stack_id=stack.id,
                                                                         queue=queue)))
        assert (status, message) == (422, _denied(webhooks.VALIDATE_JOB, (
            f"spec.queue: {_not_admitted(queue, b, selector)}, got {queue!r}")))
        # Team a's own pod and Job are admitted, released and run.
        stack.core.create_namespaced_pod(a, _pod("p", stack, queue=queue))
        stack.create_job(a, job_body("j", [{"name": "t", "run_s": 1}], stack_id=stack.id, queue=queue))
        wait_for(lambda: _phase(stack, a, "p") == "Succeeded", 180, "team a's pod run")
        stack.wait_job_phase(a, "j", "Succeeded")
        # A namespace whose default queue (its stowage.io/queue label) does not admit it: its pods say so.
        with _namespace(stack, "c", {labels.LABEL_QUEUE: queue}) as defaulted:
            status, message = _refusal(lambda: stack.core.create_namespaced_pod(defaulted, _pod("p", stack)))
            assert (status, message) == (422, _denied(webhooks.MUTATE_POD_IN_QUEUE_NAMESPACE, (
                f"namespace {defaulted!r}: {QUEUE_FIELD}: {_not_admitted(queue, defaulted, selector)}; it is the "
                f"default queue of the namespace's pods, and must admit the namespace, got {queue!r}")))
    finally:
        _delete_queue(stack, queue)


def test_a_selector_changed_under_running_work_strands_nothing(operator_stack: OperatorStack,
                                                               teams: dict[str, str]) -> None:
    """Admission checks new work only: the running pod and the admitted Job run to their end; new work is refused."""
    stack, a = operator_stack, teams["a"]
    queue = f"ten-s-{_team(a)}"
    stack.create_queue(queue, namespaceSelector={"matchLabels": {"team": _team(a)}})
    try:
        stack.core.create_namespaced_pod(a, _pod("running", stack, queue=queue, run_s=15))
        wait_for(lambda: _phase(stack, a, "running") == "Running", 180, "the pod running")
        stack.create_job(a, job_body("admitted", [{"name": "t", "replicas": 2, "run_s": 10}], stack_id=stack.id,
                                     queue=queue))
        _patch_queue(stack, queue, {"namespaceSelector": {"matchLabels": {"team": "nobody"}}})
        status, message = _refusal(lambda: stack.core.create_namespaced_pod(a, _pod("new", stack, queue=queue)))
        assert (status, message) == (422, _denied(webhooks.MUTATE_POD, (
            f"{QUEUE_FIELD}: {_not_admitted(queue, a, 'team=nobody')}, got {queue!r}")))
        wait_for(lambda: _phase(stack, a, "running") == "Succeeded", 180, "the running pod finished")
        assert stack.wait_job_phase(a, "admitted", "Succeeded")["status"]["tasksSucceeded"] == 2
    finally:
        _delete_queue(stack, queue)


def test_the_example_queue_with_a_selector_admits_its_team_only(operator_stack: OperatorStack, kube: RawApi,
                                                                teams: dict[str, str]) -> None:
    """manifests/examples/queue-with-selector.yaml applied as written (server-side, as kubectl apply)."""
    stack = operator_stack
    (doc,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    name = doc["metadata"]["name"]
    status, stored = kube.request("PATCH", crd.QUEUE.path(name), doc,
                                  query={"fieldManager": "kubectl", "force": "true"},
                                  content_type="application/apply-patch+yaml")
    try:
        assert status in (200, 201), stored
        assert {k: stored["spec"][k] for k in doc["spec"]} == doc["spec"]
        with _namespace(stack, "ml", {"team": "ml"}) as ml:
            assert stack.core.create_namespaced_pod(ml, _pod("p", stack, queue=name)).spec.scheduling_gates
            selector = "team=ml,environment notin (sandbox)"
            status, message = _refusal(lambda: stack.core.create_namespaced_pod(teams["a"], _pod("p", stack,
                                                                                               queue=name)))
            assert (status, message) == (422, _denied(webhooks.MUTATE_POD, (
                f"{QUEUE_FIELD}: {_not_admitted(name, teams['a'], selector)}, got {name!r}")))
    finally:
        _delete_queue(stack, name)


# --- workloads, checked at their template -----------------------------------------------------------------------


def test_workloads_whose_pods_would_be_refused_are_refused_at_creation(operator_stack: OperatorStack,
                                                                       teams: dict[str, str]) -> None:
    stack, a, b = operator_stack, teams["a"], teams["b"]
    apps, batch = client.AppsV1Api(stack.api), client.BatchV1Api(stack.api)
    queue = f"ten-w-{_team(a)}"
    stack.create_queue(queue, namespaceSelector={"matchLabels": {"team": _team(a)}})

    def deployment(name: str, queue: str) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "w"}}, "template": _template(stack, queue)}}

    try:
        # An unknown queue: refused at the Deployment, with the message its pods would get (under spec.template).
        _, pod_message = _refusal(lambda: stack.core.create_namespaced_pod(a, _pod("p", stack, queue="no-such-q")))
        status, message = _refusal(lambda: apps.create_namespaced_deployment(a, deployment("d", "no-such-q")))
        pod_reason = pod_message.removeprefix(_denied(webhooks.MUTATE_POD, ""))
        assert pod_reason.startswith(f"{QUEUE_FIELD}: the name of an existing Queue (")
        assert (status, message) == (422, _denied(webhooks.VALIDATE_WORKLOAD, f"spec.template.{pod_reason}"))
        # A queue that does not admit the namespace: a batch/v1 Job's and a CronJob's templates are refused too.
        refused = f"{QUEUE_FIELD}: {_not_admitted(queue, b, f'team={_team(a)}')}, got {queue!r}"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bj"},
               "spec": {"template": {**_template(stack, queue), "spec": {**_template(stack, queue)["spec"],
                                                                          "restartPolicy": "Never"}}}}
        status, message = _refusal(lambda: batch.create_namespaced_job(b, job))
        assert (status, message) == (422, _denied(webhooks.VALIDATE_WORKLOAD, f"spec.template.{refused}"))
        cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
                "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": job["spec"]}}}
        status, message = _refusal(lambda: batch.create_namespaced_cron_job(b, cron))
        assert (status, message) == (422, _denied(webhooks.VALIDATE_WORKLOAD,
                                                  f"spec.jobTemplate.spec.template.{refused}"))
        # What the queue takes is stored as written (the webhook patches nothing; the pods are gated as ever).
        stored = apps.create_namespaced_deployment(a, deployment("ok", queue))
        assert stored.spec.template.metadata.labels[labels.LABEL_QUEUE] == queue
        assert not stored.spec.template.spec.scheduling_gates
        # A workload that names no Stowage queue in a namespace without a default never reaches the webhook's rules.
        plain = deployment("plain", queue)
        del plain["spec"]["template"]["metadata"]["labels"][labels.LABEL_QUEUE]
        del plain["spec"]["template"]["spec"]["schedulerName"]
        apps.create_namespaced_deployment(b, plain)
    finally:
        _delete_queue(stack, queue)


# --- states ------------------------------------------------------------------------------------------------------


def test_draining_holds_new_work_with_a_reason_closed_refuses_it_and_releases_what_it_admitted(
        operator_stack: OperatorStack, teams: dict[str, str]) -> None:
    stack, a = operator_stack, teams["a"]
    queue = f"ten-d-{_team(a)}"
    stack.create_queue(queue)
    draining = holding.draining(queue)
    try:
        # Running work: one 7-core task per node (7.5 allocatable each), so what comes next waits.
        stack.create_job(a, job_body("long", [{"name": "t", "replicas": len(stack.nodes), "cpu": "7", "run_s": 25}],
                                     stack_id=stack.id, queue=queue))
        wait_for(lambda: (stack.job(a, "long").get("status") or {}).get("phase") == "Running"
                 and len([p for p in stack.pods(a) if p.status.phase == "Running"]) == len(stack.nodes),
                 240, "the long Job running on every node")
        _patch_queue(stack, queue, {"state": crd.STATE_DRAINING})
        assert stack.queue(queue)["spec"]["state"] == crd.STATE_DRAINING
        # Draining admits new work and holds it, saying why: on the pod, and on the Job (kubectl get sjob's HELD).
        stack.core.create_namespaced_pod(a, _pod("new", stack, queue=queue, cpu="1"))
        stack.create_job(a, job_body("newjob", [{"name": "t", "run_s": 1}], stack_id=stack.id, queue=queue))
        wait_for(lambda: _held(stack, a, "new") == ("QueueDraining", draining.message), 180,
                 "the new pod held: draining")

        def job_held() -> dict[str, Any] | None:
            conditions = (stack.job(a, "newjob").get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Held" and c["status"] == "True"
                         and c["reason"] == "QueueDraining"), None)

        held = wait_for(job_held, 180, "the new Job held: draining")
        assert held["message"] == f"1 task(s) held (1 for draining). group 't': {draining.message}"
        # The running Job finishes; with the room back, the new work still waits (a pass saw it and held it).
        stack.wait_job_phase(a, "long", "Succeeded", timeout_s=240)
        wait_for(lambda: all(p.status.phase in ("Succeeded", "Failed") for p in stack.pods(a)
                             if p.metadata.name.startswith("long")), 120, "the long Job's pods done")
        assert _held(stack, a, "new") == ("QueueDraining", draining.message)
        assert not stack.core.read_namespaced_pod("new", a).spec.node_name
        # Closed refuses new work, word for word, at every door.
        _patch_queue(stack, queue, {"state": crd.STATE_CLOSED})
        status, message = _refusal(lambda: stack.core.create_namespaced_pod(a, _pod("late", stack, queue=queue)))
        assert (status, message) == (422, _denied(webhooks.MUTATE_POD, f"{QUEUE_FIELD}: {_closed(queue)}, got "
                                                                       f"{queue!r}"))
        status, message = _refusal(lambda: stack.create_job(a, job_body("late", [{"name": "t"}], stack_id=stack.id,
                                                                         queue=queue)))
        assert (status, message) == (422, _denied(webhooks.VALIDATE_JOB, f"spec.queue: {_closed(queue)}, got "
                                                                          f"{queue!r}"))
        # Closed keeps what it admitted going: the work Draining held is released now, and runs.
        wait_for(lambda: _phase(stack, a, "new") == "Succeeded", 180, "the admitted pod released and run")
        stack.wait_job_phase(a, "newjob", "Succeeded")
        _patch_queue(stack, queue, {"state": crd.STATE_OPEN})
        assert stack.core.create_namespaced_pod(a, _pod("reopened", stack, queue=queue)).spec.scheduling_gates
    finally:
        _delete_queue(stack, queue)


def test_the_queue_table_shows_the_state(operator_stack: OperatorStack, operator: Proc) -> None:
    stack = operator_stack
    queue = f"ten-t-{uuid.uuid4().hex[:6]}"
    stack.create_queue(queue, state=crd.STATE_DRAINING)
    try:
        table = stack.kubectl("get", "sq", queue)
        header, row = table.strip().splitlines()
        assert header.split()[:3] == ["NAME", "WEIGHT", "STATE"]
        assert row.split()[:3] == [queue, "1", "Draining"]
    finally:
        _delete_queue(stack, queue)


def test_admission_modules_agree_on_the_template_paths() -> None:
    assert {plural for _, plural in admission.WORKLOAD_TEMPLATES} == {
        r for rule in webhooks.workload_rules() for r in rule["resources"]}
