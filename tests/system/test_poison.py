"""One bad object must never stop the scheduler (issue #31), tried as a tenant would on the whole stack.

One test per defect reproduced live (each docstring says the symptom without what it checks), each asserting
what a user must see instead:

- defect 1: malformed Jobs are refused at admission naming the field, or admitted and given a phase with a
  condition naming it; a well-formed Job submitted after them succeeds. One stored past the webhook (as under an
  older chart) fails alone, naming the field.
- defect 2: a running pod of anyone (not Stowage's) with a malformed Stowage annotation: a well-formed Job
  still succeeds, and the extender, restarted with the pod present, gets ready.
- defect 4: a Job deleted and created again under the same name while its old pods are still being collected
  runs its own tasks (pods owned by the new Job's uid).
- defect 5: a pod create answered 403 (a ResourceQuota): the Job says why (condition and Warning Event), and
  a Job of the same queue in another namespace, submitted after it, runs.
- health: the operator's pass metrics and its /readyz.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client
from stowage.operator import crd, runtime, tasks

from stowage import labels
from tests.support.fake_kubelet import ANN_RUN_SECONDS
from tests.support.kube import delete_namespace_and_wait
from tests.support.stack import WholeStack, metric, wait_for
from tests.system.workloads import group, phase_of, tenant_api, true_conditions

pytestmark = pytest.mark.timeout(600)

#: How long a well-formed Job may take to succeed here (a few 2-s tasks on a loaded 2-core machine).
GOOD_JOB_S = 180.0
#: How long an admitted Job may go without a phase.
PHASE_S = 90.0


# --- helpers ---------------------------------------------------------------------------------------


def objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create_job(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return objects(api).create_namespaced_custom_object(crd.GROUP, crd.VERSION, ns, crd.JOB.plural, body)


def message_of(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message"))
    except (TypeError, ValueError):
        return str(exc.body)


def operator_trace(stack: WholeStack, chars: int = 2500) -> str:
    """The end of the operator's log (the traceback of a failing pass, if any), for a failure's message."""
    return stack.operator.tail(chars) if stack.operator is not None else "(no operator)"


def wait_succeeded(stack: WholeStack, ns: str, name: str, timeout_s: float = GOOD_JOB_S) -> dict[str, Any]:
    try:
        return wait_for(lambda: (job := stack.job(ns, name)) and phase_of(job) == "Succeeded" and job, timeout_s,
                        f"Job {ns}/{name} to succeed", interval_s=1.0)
    except AssertionError as exc:
        job = stack.job(ns, name)
        raise AssertionError(f"{exc}; its status: {job.get('status')}\n--- operator log:\n{operator_trace(stack)}"
                             ) from None


@contextlib.contextmanager
def namespace(stack: WholeStack, prefix: str) -> Iterator[str]:
    with stack.namespace(prefix) as ns:
        try:
            yield ns
        finally:  # the next test must not meet this one's Jobs and pods; one stuck terminating fails nothing here
            with contextlib.suppress(TimeoutError):
                delete_namespace_and_wait(stack.core, ns, timeout_s=90.0)


def good_job(stack: WholeStack, name: str = "good", queue: str = "default") -> dict[str, Any]:
    return stack.job_body(name, [group("a", 2, run_s=2), group("b", 1, run_s=1, dependsOn=["a"])], queue=queue)


# --- defect 1: a malformed Job aborts every pass -----------------------------------------------------


def _template(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["tasks"][0]["template"]


def _set_containers(value: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        _template(body)["spec"]["containers"] = value
    return change


def _set_metadata(body: dict[str, Any]) -> None:
    _template(body)["metadata"] = 5


def _huge_disk_bandwidth(body: dict[str, Any]) -> None:
    _template(body)["metadata"]["annotations"][labels.ANN_DISK_BANDWIDTH] = "1e9999999"


#: name → (how the well-formed Job is spoiled, what a refusal or the Job's condition must name)
POISON_JOBS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "containers-ints": (_set_containers([1]), "containers"),
    "containers-string": (_set_containers("abc"), "containers"),
    "resources-int": (_set_containers([{"name": "main", "image": "busybox", "resources": 5}]), "resources"),
    "metadata-int": (_set_metadata, "metadata"),
    "disk-bandwidth": (_huge_disk_bandwidth, labels.ANN_DISK_BANDWIDTH),
}


@pytest.fixture
def tenant_ns(healthy: WholeStack) -> Iterator[tuple[str, client.ApiClient]]:
    with namespace(healthy, "poison") as ns:
        yield ns, tenant_api(healthy, ns)


def test_malformed_jobs_cost_only_themselves(healthy: WholeStack, tenant_ns: tuple[str, client.ApiClient]) -> None:
    """Defect 1. Admitted and planned without isolation, each fails every dispatch pass with a traceback
    (``TypeError``/``AttributeError``/``decimal.InvalidOperation``): no Job gets a phase, the good one never starts."""
    stack = healthy
    ns, tenant = tenant_ns
    outcomes: dict[str, str] = {}
    problems: list[str] = []
    admitted: dict[str, str] = {}  # name → the field its condition must name
    for name, (spoil, field) in POISON_JOBS.items():
        body = stack.job_body(name, [group("a", 1, run_s=1)])
        spoil(body)
        try:
            create_job(tenant, ns, body)
        except client.ApiException as exc:
            message = message_of(exc)
            outcomes[name] = f"refused {exc.status}: {message}"
            if not 400 <= exc.status < 500:
                problems.append(f"{name}: refused with {exc.status}, not a 4xx: {message}")
            elif field not in message:
                problems.append(f"{name}: the refusal does not name {field!r}: {message}")
            continue
        admitted[name] = field
    create_job(tenant, ns, good_job(stack))

    def settled() -> bool:
        jobs = stack.jobs(ns)
        return phase_of(jobs["good"]) in ("Succeeded", "Failed") and all(phase_of(jobs[n]) for n in admitted)

    with contextlib.suppress(AssertionError):
        wait_for(settled, GOOD_JOB_S, "the good Job to finish and every admitted Job to have a phase", interval_s=1.0)
    jobs = stack.jobs(ns)
    for name, field in admitted.items():
        job = jobs[name]
        said = [f"{c.get('type')}/{c.get('reason')}: {c.get('message')}" for c in true_conditions(job)]
        outcomes[name] = f"admitted, phase {phase_of(job)}, conditions {said}"
        if not phase_of(job):
            problems.append(f"{name}: admitted and has no phase after {GOOD_JOB_S:.0f}s")
        elif not any(field in s for s in said):
            problems.append(f"{name}: phase {phase_of(job)} but no condition names {field!r}: {said}")
        if phase_of(job) in ("Running", "Succeeded"):
            problems.append(f"{name}: a malformed Job is {phase_of(job)}")
    if phase_of(jobs["good"]) != "Succeeded":
        problems.append(f"the well-formed Job submitted after them is {phase_of(jobs['good'])!r}, not Succeeded "
                        f"(status {jobs['good'].get('status')})")
    print("\n".join(f"{n}: {o}" for n, o in outcomes.items()))
    assert problems == [], "\n".join(problems) + f"\n--- operator log:\n{operator_trace(stack)}"


@contextlib.contextmanager
def without_job_validation(stack: WholeStack) -> Iterator[None]:
    """The ``validate-job`` webhook taken out of its configuration for the block (a Job stored while an older chart
    ran, or before the webhook existed), put back afterwards."""
    admission = client.AdmissionregistrationV1Api(stack.api)
    (config,) = [c for c in admission.list_validating_webhook_configuration().items
                 if any(w.name.startswith("validate-job.") for w in c.webhooks or [])]
    name, webhooks = config.metadata.name, list(config.webhooks)
    config.webhooks = [w for w in webhooks if not w.name.startswith("validate-job.")]
    admission.replace_validating_webhook_configuration(name, config)  # a list replaced, not merged by name
    try:
        yield
    finally:
        current = admission.read_validating_webhook_configuration(name)
        current.webhooks = webhooks
        admission.replace_validating_webhook_configuration(name, current)


def test_a_malformed_job_stored_past_the_webhook_fails_alone_naming_the_field(
        healthy: WholeStack, tenant_ns: tuple[str, client.ApiClient]) -> None:
    """Defect 1, the object that is stored anyway: the schema admits a Stowage annotation it cannot parse, and only
    the webhook refuses it. Stored without the webhook, the Job fails with a condition naming the annotation, and
    a well-formed Job after it succeeds; without isolation every pass fails on it (``decimal.InvalidOperation``)."""
    stack = healthy
    ns, tenant = tenant_ns
    body = stack.job_body("stored-bad", [group("a", 1, run_s=1)])
    _huge_disk_bandwidth(body)
    def stored() -> bool:
        try:
            create_job(tenant, ns, body)
        except client.ApiException as exc:  # the API server has not seen the configuration change yet
            if exc.status != 422 or "validate-job" not in message_of(exc):
                raise
            return False
        return True

    with without_job_validation(stack):
        wait_for(stored, 30, "the API server storing the Job without validate-job", interval_s=0.5)
    create_job(tenant, ns, good_job(stack))
    wait_succeeded(stack, ns, "good")
    bad = wait_for(lambda: (job := stack.job(ns, "stored-bad")) and phase_of(job) and job, PHASE_S,
                   "the stored malformed Job to get a phase", interval_s=1.0)
    said = " ".join(str(c.get("message")) for c in true_conditions(bad))
    assert phase_of(bad) == "Failed" and labels.ANN_DISK_BANDWIDTH in said, bad.get("status")
    assert not stack.pods(ns, f"{labels.LABEL_JOB}=stored-bad"), "a Job that cannot be planned releases nothing"
    assert metric(stack.operator_metrics(), labels.METRICS.BAD_OBJECTS_TOTAL, {"kind": "job"}) >= 1


# --- defect 2: one pod annotation in any namespace freezes the pod caches ------------------------------


def foreign_pod(stack: WholeStack, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A pod of someone else's (no Stowage label, the default scheduler's), already bound to a node, running."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {ANN_RUN_SECONDS: "3600", **annotations}},
            "spec": {"nodeName": stack.nodes[0], "terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


POISON_ANNOTATIONS = {
    "poison-disk": {labels.ANN_DISK_BANDWIDTH: "1e9999999"},
    "poison-demand": {labels.ANN_DEMAND: '{"cpu": 1' + "0" * 400 + "}"},
}


def test_foreign_pods_with_malformed_annotations_stop_nothing(healthy: WholeStack) -> None:
    """Defect 2. Without isolation each pod's record raises out of the informers' relist (``decimal.InvalidOperation``
    for the bandwidth, ``OverflowError`` for the demand; the informer retries forever), so an extender started
    with the pods present never becomes ready (``waiting_for: [pods]``)."""
    stack = healthy
    with namespace(stack, "foreign") as other, namespace(stack, "p2") as ns:
        for name, annotations in POISON_ANNOTATIONS.items():
            stack.core.create_namespaced_pod(other, foreign_pod(stack, name, annotations))
        wait_for(lambda: {p.status.phase for p in stack.pods(other)} == {"Running"}, 60,
                 "the foreign pods running on their node")
        # Both components started again while the pods exist must sync their caches (bounded waits).
        stack.kill("extender")
        stack.kill("operator")
        try:
            stack.start_extender()
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- extender log:\n{stack.extender.tail(2500)}") from None
        stack.start_operator()
        create_job(tenant_api(stack, ns), ns, good_job(stack))
        wait_succeeded(stack, ns, "good")
        ready = httpx.get(f"{stack.extender_url}/readyz", timeout=10.0)
        assert ready.status_code == 200, (ready.status_code, ready.text)
        for name in POISON_ANNOTATIONS:
            stack.core.delete_namespaced_pod(name, other, grace_period_seconds=0)


# --- defect 4: a Job created again under the same name skips its work --------------------------------


HOLD = "stowage-test/hold"


def pods_of(stack: WholeStack, ns: str, job: str) -> list[client.V1Pod]:
    return stack.pods(ns, f"{labels.LABEL_JOB}={job}")


def test_a_job_created_again_under_the_same_name_runs_its_own_tasks(healthy: WholeStack) -> None:
    """Defect 4. Pods matched to a Job by owner name would make the new Job Succeeded within seconds, counting the
    old Job's pods, with none of its tasks run; they are matched by uid."""
    stack = healthy
    with namespace(stack, "again") as ns:
        tenant = tenant_api(stack, ns)
        body = stack.job_body("etl", [group("a", 2, run_s=1)])
        old_uid = create_job(tenant, ns, body)["metadata"]["uid"]
        wait_succeeded(stack, ns, "etl")
        old = pods_of(stack, ns, "etl")
        assert old and {p.status.phase for p in old} == {"Succeeded"}
        # The old pods linger while being collected (a finalizer holds them, as a slow GC or a controller would).
        for pod in old:
            stack.core.patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"finalizers": [HOLD]}})
        try:
            objects(tenant).delete_namespaced_custom_object(crd.GROUP, crd.VERSION, ns, crd.JOB.plural, "etl")

            def job_gone() -> bool:
                try:
                    stack.job(ns, "etl")
                except client.ApiException as exc:
                    return exc.status == 404
                return False

            wait_for(job_gone, 60, "the old Job deleted")
            wait_for(lambda: all(p.metadata.deletion_timestamp for p in pods_of(stack, ns, "etl")), 60,
                     "the garbage collector to start deleting the old pods")
            new_uid = create_job(tenant, ns, body)["metadata"]["uid"]
            assert new_uid != old_uid
            created = time.monotonic()
            # Give the operator time to plan the new Job while the old pods exist (its phase is set on its first plan).
            with contextlib.suppress(AssertionError):
                wait_for(lambda: phase_of(stack.job(ns, "etl")), 30, "the new Job's first phase")
            first = stack.job(ns, "etl").get("status") or {}
            seen_after_s = time.monotonic() - created
        finally:
            for pod in pods_of(stack, ns, "etl"):
                if HOLD in (pod.metadata.finalizers or []):
                    rest = [f for f in pod.metadata.finalizers if f != HOLD]
                    with contextlib.suppress(client.ApiException):
                        stack.core.patch_namespaced_pod(pod.metadata.name, ns, [
                            {"op": "test", "path": "/metadata/finalizers", "value": pod.metadata.finalizers},
                            {"op": "replace", "path": "/metadata/finalizers", "value": rest}])
        wait_for(lambda: not [p for p in pods_of(stack, ns, "etl") if p.metadata.uid in {q.metadata.uid for q in old}],
                 60, "the old pods collected")
        done = stack.wait_jobs_done(ns, GOOD_JOB_S)["etl"]
        ran: dict[int, list[str]] = {}
        for pod in pods_of(stack, ns, "etl"):
            owners = {r.uid for r in pod.metadata.owner_references or []}
            parsed = tasks.parse_pod_name("etl", "a", pod.metadata.name)
            if new_uid in owners and parsed is not None and pod.status.phase == "Succeeded":
                ran.setdefault(parsed[0], []).append(pod.metadata.name)
        assert phase_of(done) == "Succeeded", done.get("status")
        assert sorted(ran) == [0, 1], (
            f"the re-created Job is {phase_of(done)} but ran tasks {sorted(ran)} of [0, 1] under its own uid; "
            f"{seen_after_s:.1f}s after its creation, with the old pods still there, its status was {first}")


# --- defect 5: a pod create refused with 403 is retried silently, and its queue starves ----------------


def test_a_pod_create_refused_403_says_why_and_the_queue_moves_on(healthy: WholeStack) -> None:
    """Defect 5. Retried every pass with no condition and no Event, the Job would keep the head of its queue and the
    Job behind it in another namespace would never start."""
    stack = healthy
    queue = "q403"
    stack.create_queue(queue, weight=1, jobOrder="FIFO")
    try:
        with namespace(stack, "quota") as blocked_ns, namespace(stack, "after") as ns:
            stack.core.create_namespaced_resource_quota(blocked_ns, {
                "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
                "spec": {"hard": {"pods": "0"}}})
            wait_for(lambda: (stack.core.read_namespaced_resource_quota("no-pods", blocked_ns).status.hard or {}),
                     30, "the quota's status (the quota controller enforces it)")
            create_job(tenant_api(stack, blocked_ns), blocked_ns,
                       stack.job_body("blocked", [group("a", 3, run_s=1)], queue=queue))
            # The blocked Job heads the queue: the operator has tried to create its pods before the next arrives.
            wait_for(lambda: phase_of(stack.job(blocked_ns, "blocked")), PHASE_S, "the blocked Job's first phase")
            time.sleep(3)
            create_job(tenant_api(stack, ns), ns, good_job(stack, "after", queue=queue))

            def says_why() -> list[str]:
                said = [f"{c.get('type')}/{c.get('reason')}: {c.get('message')}"
                        for c in true_conditions(stack.job(blocked_ns, "blocked"))]
                return [s for s in said if "quota" in s.lower() or "forbidden" in s.lower()]

            def warnings() -> list[str]:
                events = stack.core.list_namespaced_event(blocked_ns, field_selector="involvedObject.name=blocked")
                return [f"{e.reason}: {e.message}" for e in events.items if e.type == "Warning"
                        and ("quota" in (e.message or "").lower() or "forbidden" in (e.message or "").lower())]

            def settled() -> bool:
                return bool(says_why() and warnings() and phase_of(stack.job(ns, "after")) == "Succeeded")

            with contextlib.suppress(AssertionError):
                wait_for(settled, GOOD_JOB_S, "the blocked Job to say why and the Job behind it to succeed",
                         interval_s=1.0)
            problems = []
            if not says_why():
                status = stack.job(blocked_ns, "blocked").get("status")
                problems.append(f"no condition on the blocked Job says why: {status}")
            if not warnings():
                problems.append("no Warning Event on the blocked Job says why")
            after = stack.job(ns, "after")
            if phase_of(after) != "Succeeded":
                problems.append(f"the Job behind it in another namespace is {phase_of(after)!r}, not Succeeded "
                                f"(status {after.get('status')})")
            print("condition:", says_why(), "\nwarnings:", warnings())
            assert problems == [], "\n".join(problems) + f"\n--- operator log:\n{operator_trace(stack, 1200)}"
            assert not stack.pods(blocked_ns)
    finally:
        with contextlib.suppress(client.ApiException):
            stack.objects.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, queue)


# --- health: a pass that fails is visible --------------------------------------------------------------

# What a user scrapes and probes (issue #31, "Health you can see"), written out rather than taken from
# labels.METRICS, so that renaming one is a visible change here too (the lead's names, as in operator/metrics.py).
PASS_ERRORS = "stowage_pass_errors_total"  # counter, label ``stage``
LAST_PASS_AGE = "stowage_last_pass_age_seconds"  # gauge: seconds since the last complete pass
READYZ = "/readyz"  # on the operator's metrics port: 200 when synced and a pass completed lately, else 503


def test_the_operator_exports_its_pass_health_and_readiness(healthy: WholeStack) -> None:
    """A healthy operator: the pass-error counter is declared, the last complete pass is recent and stays so,
    and /readyz on the metrics port answers 200."""
    stack = healthy
    assert stack.operator is not None
    base = f"http://127.0.0.1:{stack.operator.port}"
    text = stack.operator_metrics()
    assert f"# TYPE {PASS_ERRORS} counter" in text, f"{PASS_ERRORS} not exported"
    assert f"# TYPE {LAST_PASS_AGE} gauge" in text, f"{LAST_PASS_AGE} not exported"
    fresh = runtime.PASS_STALE_AFTER_S  # the operator's own limit (readiness): not a timing of this machine
    ages = []
    for _ in range(3):  # passes keep completing: the age stays within the limit, not only once
        ages.append(metric(stack.operator_metrics(), LAST_PASS_AGE))
        time.sleep(2)
    assert all(0 <= a < fresh for a in ages), (ages, fresh)
    errors_before = metric(text, PASS_ERRORS)
    ready = httpx.get(f"{base}{READYZ}", timeout=10.0)
    assert ready.status_code == 200, (ready.status_code, ready.text)
    assert metric(stack.operator_metrics(), PASS_ERRORS) == errors_before, "a healthy stack counted pass errors"
