"""The Queue and Job CRDs on a real API server: accepted, defaults applied, bad objects refused by the server
itself (schema and CEL rules, no webhook involved), status subresource, printer columns as ``kubectl get``
reads them (the Table format)."""

from __future__ import annotations

import copy
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stowage.operator import crd, forecasting, holds, queues, tasks
from stowage.operator.metrics import QueueNumbers

from stowage import forecast, labels
from stowage.kube import api
from stowage.policy import estimates
from tests.operator.conftest import RawApi
from tests.operator.support import KUBECTL
from tests.support.controlplane import ControlPlane, ExternalCluster
from tests.support.crds import load_crds

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _schema(definition: dict[str, Any]) -> dict[str, Any]:
    return definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _queue(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": "Queue", "metadata": {"name": name}, "spec": spec or {}}


def _task(name: str, **extra: Any) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    return {"name": name, "template": template, **extra}


def _template_task(**template: Any) -> dict[str, Any]:
    return {"name": "a", "template": template}


def _job(name: str, tasks: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": "Job", "metadata": {"name": name},
            "spec": {"tasks": tasks if tasks is not None else [_task("a")], **spec}}


# --- the YAML and the constants the admission rules use ------------------------------------------


def test_crd_yaml_names_match_the_operator_constants() -> None:
    queue, job = load_crds()
    for definition, kind in ((queue, crd.QUEUE), (job, crd.JOB)):
        spec = definition["spec"]
        assert definition["metadata"]["name"] == kind.crd_name
        assert spec["group"] == crd.GROUP
        assert [v["name"] for v in spec["versions"]] == [crd.VERSION]
        assert spec["names"]["kind"] == kind.kind
        assert spec["names"]["plural"] == kind.plural
        assert spec["names"]["singular"] == kind.singular
        assert spec["names"]["shortNames"] == [kind.short_name]
        assert spec["scope"] == ("Namespaced" if kind.namespaced else "Cluster")
        assert spec["versions"][0]["subresources"] == {"status": {}}


def test_crd_enums_and_defaults_match_the_operator_constants() -> None:
    queue, job = load_crds()
    q = _schema(queue)["properties"]["spec"]["properties"]
    assert q["weight"]["default"] == crd.DEFAULT_WEIGHT and q["weight"]["maximum"] == crd.MAX_WEIGHT
    assert tuple(q["jobOrder"]["enum"]) == crd.JOB_ORDERS and q["jobOrder"]["default"] == crd.DEFAULT_JOB_ORDER
    assert tuple(q["opportunistic"]["enum"]) == crd.QUEUE_OPPORTUNISTIC
    assert q["opportunistic"]["default"] == crd.DEFAULT_QUEUE_OPPORTUNISTIC
    assert tuple(q["state"]["enum"]) == crd.QUEUE_STATES and q["state"]["default"] == crd.STATE_OPEN
    selector = q["namespaceSelector"]["properties"]
    assert selector["matchLabels"]["maxProperties"] == crd.MAX_SELECTOR_LABELS
    assert selector["matchExpressions"]["maxItems"] == crd.MAX_SELECTOR_EXPRESSIONS
    expression = selector["matchExpressions"]["items"]["properties"]
    assert tuple(expression["operator"]["enum"]) == crd.SELECTOR_OPERATORS
    assert expression["values"]["maxItems"] == crd.MAX_SELECTOR_VALUES
    j = _schema(job)["properties"]
    spec = j["spec"]["properties"]
    assert spec["queue"]["default"] == labels.DEFAULT_QUEUE
    assert tuple(spec["opportunistic"]["enum"]) == tuple(labels.Opportunistic)
    assert spec["opportunistic"]["default"] == labels.Opportunistic.AUTO
    assert spec["tasks"]["maxItems"] == crd.MAX_TASKS
    task = spec["tasks"]["items"]["properties"]
    assert task["maxRetries"]["default"] == crd.DEFAULT_MAX_RETRIES
    assert task["maxRetries"]["maximum"] == crd.MAX_RETRIES_LIMIT
    assert task["dependsOn"]["maxItems"] == crd.MAX_TASKS
    assert task["replicas"]["maximum"] == crd.MAX_REPLICAS
    assert task["minAvailable"]["maximum"] == crd.MAX_REPLICAS
    assert task["expectedDuration"]["maximum"] == crd.MAX_EXPECTED_DURATION_S
    assert spec["queue"]["pattern"] == crd.QUEUE_NAME.pattern and spec["queue"]["maxLength"] == crd.QUEUE_NAME_MAX
    assert tuple(j["status"]["properties"]["phase"]["enum"]) == crd.JOB_PHASES


def test_kind_paths_are_the_api_servers() -> None:
    assert crd.QUEUE.path("q") == "/apis/stowage.io/v1alpha1/queues/q"
    assert crd.JOB.path(namespace="ns") == "/apis/stowage.io/v1alpha1/namespaces/ns/jobs"
    assert crd.JOB.path("j", "ns") == "/apis/stowage.io/v1alpha1/namespaces/ns/jobs/j"
    assert crd.JOB.path() == "/apis/stowage.io/v1alpha1/jobs"


# --- on the real API server ----------------------------------------------------------------------


@pytest.fixture
def ns(kube: RawApi, stowage_crds: list[dict[str, Any]]) -> Iterator[str]:
    """A namespace of its own (deleted afterwards, with its Jobs)."""
    name = f"crd-{secrets.token_hex(3)}"
    kube.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def queue_name(kube: RawApi, stowage_crds: list[dict[str, Any]]) -> Iterator[str]:
    """A fresh Queue name; the Queue is deleted afterwards if a test made it."""
    name = f"q-{secrets.token_hex(3)}"
    yield name
    kube.request("DELETE", crd.QUEUE.path(name))


def test_api_server_establishes_both_crds(stowage_crds: list[dict[str, Any]]) -> None:
    for stored in stowage_crds:
        conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert conditions["Established"] == "True"
        assert conditions["NamesAccepted"] == "True"
    assert {s["status"]["acceptedNames"]["shortNames"][0] for s in stowage_crds} == {"sq", "sjob"}


def test_an_empty_queue_gets_every_default(kube: RawApi, queue_name: str) -> None:
    stored = kube.ok("POST", crd.QUEUE.path(), {"apiVersion": crd.API_VERSION, "kind": "Queue",
                                                 "metadata": {"name": queue_name}})
    # No namespaceSelector: every namespace may use it (docs/operator.md "Tenancy").
    assert stored["spec"] == {"weight": 1, "opportunistic": "Allow", "jobOrder": "SRTF", "state": "Open"}


def test_a_queue_keeps_what_it_was_given(kube: RawApi, queue_name: str) -> None:
    spec = {"weight": 2.5, "quota": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": 8}, "opportunistic": "Deny",
            "jobOrder": "FSP", "state": "Draining",
            "namespaceSelector": {"matchLabels": {"team": "a"},
                                  "matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]},
                                                       {"key": "legacy", "operator": "DoesNotExist"}]}}
    assert kube.ok("POST", crd.QUEUE.path(), _queue(queue_name, spec))["spec"] == spec


def test_a_job_gets_every_default(kube: RawApi, ns: str) -> None:
    stored = kube.ok("POST", crd.JOB.path(namespace=ns), _job("j"))
    spec = stored["spec"]
    assert (spec["queue"], spec["opportunistic"], spec["suspend"]) == ("default", "auto", False)
    assert spec["tasks"][0]["replicas"] == 1
    assert spec["tasks"][0]["maxRetries"] == 3
    assert spec["tasks"][0]["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"  # kept as written


def test_a_job_with_a_barrier_is_accepted(kube: RawApi, ns: str) -> None:
    tasks = [_task("prepare", replicas=2, expectedDuration=30.5),
             _task("train", replicas=8, dependsOn=["prepare"], maxRetries=0),
             _task("report", dependsOn=["prepare", "train"])]
    stored = kube.ok("POST", crd.JOB.path(namespace=ns), _job("pipeline", tasks, queue="batch", opportunistic="true"))
    assert [t["name"] for t in stored["spec"]["tasks"]] == ["prepare", "train", "report"]
    assert stored["spec"]["tasks"][2]["dependsOn"] == ["prepare", "train"]


# Each case: the object, then (field, phrase) pairs the server's own message must contain.
QUEUE_REJECTIONS = [
    pytest.param({"weight": 0}, [("spec.weight", "should be greater than 0")], id="weight-zero"),
    pytest.param({"weight": -1}, [("spec.weight", "should be greater than 0")], id="weight-negative"),
    pytest.param({"jobOrder": "LIFO"}, [("spec.jobOrder", 'Unsupported value: "LIFO"')], id="job-order-enum"),
    pytest.param({"opportunistic": "Maybe"}, [("spec.opportunistic", 'supported values: "Allow", "Deny"')],
                 id="opportunistic-enum"),
    pytest.param({"quota": {"memory": "lots"}}, [("spec.quota.memory", "should match")], id="quota-not-a-quantity"),
    pytest.param({"quota": {"cpu": "-2"}}, [("spec.quota.cpu", "should match")], id="quota-negative-string"),
    pytest.param({"quota": {"cpu": -2}}, [("spec.quota.cpu", "greater than or equal to 0")], id="quota-negative-int"),
    pytest.param({"weight": "heavy"}, [("spec.weight", "must be of type number")], id="weight-not-a-number"),
]


@pytest.mark.parametrize(("spec", "expected"), QUEUE_REJECTIONS)
def test_the_api_server_refuses_a_bad_queue(kube: RawApi, queue_name: str, spec: dict[str, Any],
                                            expected: list[tuple[str, str]]) -> None:
    status, answer = kube.request("POST", crd.QUEUE.path(), _queue(queue_name, spec))
    assert status == 422, answer
    for field, phrase in expected:
        assert field in answer["message"] and phrase in answer["message"], answer["message"]


JOB_REJECTIONS = [
    pytest.param(_job("j", [_task("a"), _task("b", dependsOn=["a", "ghost"])]),
                 [("spec.tasks", "task b: every dependsOn entry must name a task of this Job")],
                 id="unknown-depends-on"),
    pytest.param(_job("j", [_task("a"), _task("a")]),
                 [("spec.tasks", "task names must be unique within a Job; repeated: a")], id="duplicate-task-names"),
    pytest.param(_job("j", [_task("a", dependsOn=["a"])]),
                 [("spec.tasks[0].dependsOn", "task a cannot depend on itself")], id="depends-on-itself"),
    pytest.param(_job("j", [_task("a", dependsOn=["b", "b"]), _task("b")]),
                 [("spec.tasks[0].dependsOn[1]", "Duplicate value")], id="depends-on-twice"),
    pytest.param(_job("j", []), [("spec.tasks", "should have at least 1 items")], id="no-tasks"),
    pytest.param(_job("j", opportunistic="maybe"), [("spec.opportunistic", 'Unsupported value: "maybe"')],
                 id="opportunistic-enum"),
    pytest.param(_job("j", opportunistic=True), [("spec.opportunistic", "must be of type string")],
                 id="opportunistic-unquoted"),
    pytest.param(_job("j", [_task("a", replicas=0)]), [("spec.tasks[0].replicas", "greater than or equal to 1")],
                 id="replicas-zero"),
    pytest.param(_job("j", [_task("a", maxRetries=101)]), [("spec.tasks[0].maxRetries", "less than or equal to 100")],
                 id="max-retries-above-100"),
    pytest.param(_job("j", [_task("a", expectedDuration=-1)]),
                 [("spec.tasks[0].expectedDuration", "greater than or equal to 0")], id="negative-duration"),
    pytest.param(_job("j", [_task("Not_A_Label")]), [("spec.tasks[0].name", "should match")],
                 id="name-not-a-dns-label"),
    pytest.param(_job("j", [{"name": "a"}]), [("spec.tasks[0].template", "Required value")], id="template-missing"),
    pytest.param({"apiVersion": crd.API_VERSION, "kind": "Job", "metadata": {"name": "j"}},
                 [("spec", "Required value")], id="spec-missing"),
    pytest.param(_job("j", [_task("a", expectedDuration=crd.MAX_EXPECTED_DURATION_S + 1)]),
                 [("spec.tasks[0].expectedDuration", "less than or equal to 2592000")], id="duration-above-30-days"),
    pytest.param(_job("j", [_task("a", replicas=crd.MAX_REPLICAS + 1)]),
                 [("spec.tasks[0].replicas", "less than or equal to 100000")], id="replicas-above-the-maximum"),
    pytest.param(_job("j", [_task("a", replicas=2, minAvailable=3)]),
                 [("spec.tasks[0].minAvailable", "task a: minAvailable must be at most replicas")],
                 id="gang-above-replicas"),
    pytest.param(_job("j", [_task("a", minAvailable=0)]),
                 [("spec.tasks[0].minAvailable", "greater than or equal to 1")], id="gang-zero"),
    # Each of these, stored, would stop every later planning pass of an operator that does not isolate it (#31).
    *(pytest.param(_job("j", [_template_task(spec={"containers": bad})]),
                   [("spec.tasks[0].template.spec.containers", "must be of type array")], id=f"containers-{name}")
      for name, bad in (("float", 1.5), ("int", 1), ("bool", True), ("string", "abc"))),
    pytest.param(_job("j", [_template_task(spec={"initContainers": 1.5, "containers": []})]),
                 [("spec.tasks[0].template.spec.initContainers", "must be of type array")], id="init-containers-float"),
    pytest.param(_job("j", [_template_task(spec={"containers": [1]})]),
                 [("spec.tasks[0].template.spec.containers[0]", "must be of type object")], id="container-an-int"),
    pytest.param(_job("j", [_template_task(spec={"containers": [{"name": "m", "resources": 5}]})]),
                 [("spec.tasks[0].template.spec.containers[0].resources", "must be of type object")],
                 id="resources-an-int"),
    pytest.param(_job("j", [_template_task(spec={"containers": [{"name": "m", "resources": {"requests": ["cpu"]}}]})]),
                 [("spec.tasks[0].template.spec.containers[0].resources.requests", "must be of type object")],
                 id="requests-a-list"),
    pytest.param(_job("j", [_template_task(spec={"containers": [
        {"name": "m", "resources": {"limits": {"memory": "lots"}}}]})]),
                 [("spec.tasks[0].template.spec.containers[0].resources.limits.memory", "should match")],
                 id="limit-not-a-quantity"),
    pytest.param(_job("j", [_template_task(metadata=5)]),
                 [("spec.tasks[0].template.metadata", "must be of type object")], id="metadata-an-int"),
    pytest.param(_job("j", [_template_task(metadata={"annotations": {labels.ANN_DISK_BANDWIDTH: 80}})]),
                 [(f"spec.tasks[0].template.metadata.annotations.{labels.ANN_DISK_BANDWIDTH}",
                   "must be of type string")], id="annotation-not-a-string"),
]


@pytest.mark.parametrize(("job", "expected"), JOB_REJECTIONS)
def test_the_api_server_refuses_a_bad_job(kube: RawApi, ns: str, job: dict[str, Any],
                                          expected: list[tuple[str, str]]) -> None:
    status, answer = kube.request("POST", crd.JOB.path(namespace=ns), job)
    assert status == 422, answer
    for field, phrase in expected:
        assert field in answer["message"] and phrase in answer["message"], answer["message"]


def test_a_template_keeps_every_quantity_form_a_pod_takes(kube: RawApi, ns: str) -> None:
    # Quantities as strings, integers and plain decimals (YAML's cpu: 0.5), in containers, init containers, pod-level
    # resources and overhead; fields the schema does not name are kept (preserved), not pruned.
    resources = {"requests": {"cpu": 0.5, "memory": "1Gi", "nvidia.com/gpu": 1}, "limits": {"memory": "1.5e9"},
                 "claims": [{"name": "gpu"}]}
    template = {"metadata": {"labels": {"app": "x"}, "annotations": {labels.ANN_DISK_BANDWIDTH: "80Mi"}},
                "spec": {"containers": [{"name": "m", "image": "busybox", "resources": resources}],
                         "initContainers": [{"name": "i", "image": "busybox", "resources": {"limits": {"cpu": 2}}}],
                         "resources": {"requests": {"cpu": "1"}}, "overhead": {"cpu": "100m"},
                         "restartPolicy": "Never"}}
    stored = kube.ok("POST", crd.JOB.path(namespace=ns), _job("j", [{"name": "a", "template": template}]))
    assert stored["spec"]["tasks"][0]["template"] == template


def test_a_jobs_queue_cannot_change(kube: RawApi, ns: str) -> None:
    kube.ok("POST", crd.JOB.path(namespace=ns), _job("j", queue="batch"))
    status, answer = kube.request("PATCH", crd.JOB.path("j", ns), {"spec": {"queue": "other"}},
                                  content_type="application/merge-patch+json")
    assert status == 422, answer
    assert "spec.queue" in answer["message"] and "spec.queue is immutable" in answer["message"]


@pytest.mark.parametrize("change", [
    pytest.param([{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 5}], id="replicas"),
    pytest.param([{"op": "replace", "path": "/spec/tasks/0/template/spec/containers/0/image", "value": "x"}],
                 id="template-inside-preserved-fields"),
    pytest.param([{"op": "add", "path": "/spec/tasks/-", "value": _task("b")}], id="a-new-group"),
])
def test_a_jobs_tasks_cannot_change(kube: RawApi, ns: str, change: list[dict[str, Any]]) -> None:
    kube.ok("POST", crd.JOB.path(namespace=ns), _job("j"))
    status, answer = kube.request("PATCH", crd.JOB.path("j", ns), change, content_type="application/json-patch+json")
    assert status == 422, answer
    assert "spec.tasks is immutable" in answer["message"]


def test_a_job_may_be_suspended_and_resumed(kube: RawApi, ns: str) -> None:
    kube.ok("POST", crd.JOB.path(namespace=ns), _job("j"))
    for value in (True, False):
        stored = kube.ok("PATCH", crd.JOB.path("j", ns), {"spec": {"suspend": value}},
                         content_type="application/merge-patch+json")
        assert stored["spec"]["suspend"] is value


def test_status_is_written_only_through_its_subresource(kube: RawApi, ns: str) -> None:
    kube.ok("POST", crd.JOB.path(namespace=ns), {**_job("j"), "status": {"phase": "Succeeded"}})
    assert "status" not in kube.ok("GET", crd.JOB.path("j", ns))  # a create ignores status
    status, answer = kube.request("PATCH", crd.JOB.path("j", ns) + "/status", {"status": {"phase": "Done"}},
                                  content_type="application/merge-patch+json")
    assert status == 422 and 'phase: Unsupported value: "Done"' in answer["message"], answer
    written = kube.ok("PATCH", crd.JOB.path("j", ns) + "/status",
                      {"status": {"phase": "Running", "groups": {"a": {"pending": 0, "running": 1}},
                                  "unknownField": 1}},
                      content_type="application/merge-patch+json")
    assert written["status"] == {"phase": "Running", "groups": {"a": {"pending": 0, "running": 1}}}  # pruned


def test_the_estimate_status_is_kept_as_the_operator_writes_it_and_a_bad_source_refused(kube: RawApi,
                                                                                       ns: str) -> None:
    kube.ok("POST", crd.JOB.path(namespace=ns), _job("j", [_task("map"), _task("reduce")]))
    estimate = {"remainingWorkSeconds": 246.5, "groups": {"map": {"taskSeconds": 120.0, "source": "elapsed"},
                                                          "reduce": {"taskSeconds": 6.5, "source": "prior"}}}
    written = kube.ok("PATCH", crd.JOB.path("j", ns) + "/status",
                      {"status": {"phase": "Running", "estimate": estimate}},
                      content_type="application/merge-patch+json")
    assert written["status"]["estimate"] == estimate
    for bad, field in (({"groups": {"map": {"taskSeconds": 1, "source": "oracle"}}}, "source"),
                       ({"remainingWorkSeconds": -1}, "remainingWorkSeconds")):
        status, answer = kube.request("PATCH", crd.JOB.path("j", ns) + "/status", {"status": {"estimate": bad}},
                                      content_type="application/merge-patch+json")
        assert status == 422 and field in answer["message"], answer


def test_the_estimate_sources_are_the_estimators() -> None:
    (_, job) = load_crds()
    estimate = _schema(job)["properties"]["status"]["properties"]["estimate"]["properties"]
    source = estimate["groups"]["additionalProperties"]["properties"]["source"]
    assert tuple(source["enum"]) == estimates.SOURCE_NAMES


# --- printer columns -----------------------------------------------------------------------------


def _table(kube: RawApi, path: str) -> tuple[list[str], dict[str, list[Any]]]:
    table = kube.ok("GET", path, accept=TABLE)
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    return names, {row["object"]["metadata"]["name"]: row["cells"] for row in table["rows"]}


def test_job_printer_columns_show_queue_phase_done_and_opportunistic_running(kube: RawApi, ns: str) -> None:
    kube.ok("POST", crd.JOB.path(namespace=ns), _job("etl", [_task("a", replicas=10)], queue="batch"))
    kube.ok("POST", crd.JOB.path(namespace=ns), _job("fresh"))
    kube.ok("PATCH", crd.JOB.path("etl", ns) + "/status",
            {"status": {"phase": "Running", "tasksTotal": 10, "tasksSucceeded": 3, "progress": "3/10",
                        "opportunisticRunning": 2, "remainingWork": 12.5,
                        "estimate": {"remainingWorkSeconds": 840.0,
                                     "groups": {"a": {"taskSeconds": 120.0, "source": "phase"}}}}},
            content_type="application/merge-patch+json")
    names, rows = _table(kube, crd.JOB.path(namespace=ns))
    assert names == ["Name", "Queue", "Phase", "Done", "Opp Running", "Est. Remaining", "Held", "Position", "ETA",
                     "Age", "Overall", "Finish ETA", "Opportunistic", "Suspended", "Remaining"]
    assert rows["etl"][:9] == ["etl", "batch", "Running", "3/10", 2, 840, None, None, None]
    assert rows["etl"][12:] == ["auto", False, 12.5]
    assert rows["fresh"][:9] == ["fresh", "default", None, None, None, None, None, None, None]  # nothing written yet


def test_job_printer_column_held_shows_why_the_dispatcher_holds_it(kube: RawApi, ns: str) -> None:
    """`kubectl get sjob` shows the Held condition's reason, as the operator writes it (tasks.held_condition)."""
    for name in ("waiting", "released", "other"):
        kube.ok("POST", crd.JOB.path(namespace=ns), _job(name))
    now = "2026-01-01T00:00:00Z"
    held = tasks.held_condition(("WaitingForShare", "3 task(s) held (3 for share). group 'a': ..."), {}, now)
    released = tasks.held_condition(None, {"conditions": [held]}, now)
    other = {"type": tasks.UNSCHEDULABLE, "status": "True", "reason": "FitsNoNode", "message": "too big",
             "lastTransitionTime": now}
    for name, conditions in (("waiting", [held]), ("released", [released]), ("other", [other])):
        kube.ok("PATCH", crd.JOB.path(name, ns) + "/status", {"status": {"phase": "Pending", "conditions": conditions}},
                content_type="application/merge-patch+json")
    names, rows = _table(kube, crd.JOB.path(namespace=ns))
    column = names.index("Held")
    assert rows["waiting"][column] == "WaitingForShare"
    assert rows["released"][column] == "NotHeld"
    assert rows["other"][column] is None  # another condition's reason never shows under Held


def test_job_printer_columns_position_and_eta_show_the_forecast_as_the_operator_writes_it(kube: RawApi,
                                                                                          ns: str) -> None:
    """`kubectl get sjob` shows POSITION and ETA from status.forecast (``forecasting.forecast_status``), and the
    schema keeps every key of it; a Job that started shows neither."""
    for name in ("waiting", "running"):
        kube.ok("POST", crd.JOB.path(namespace=ns), _job(name))
    now = 1_800_000_000.0
    waiting = forecasting.forecast_status(
        forecast.JobForecast(f"{ns}/waiting", "default", "job", True, 2, 5, now + 600, now + 900, {"a": 300.0},
                             {"a": "prior"}), None, now)
    running = forecasting.forecast_status(
        forecast.JobForecast(f"{ns}/running", "default", "job", False, None, None, now - 60, now + 240,
                             {"a": 300.0}, {"a": "phase"}), None, now)
    for name, body in (("waiting", waiting), ("running", running)):
        written = kube.ok("PATCH", crd.JOB.path(name, ns) + "/status", {"status": {"forecast": body}},
                          content_type="application/merge-patch+json")
        assert written["status"]["forecast"] == {k: v for k, v in body.items() if v is not None}
    names, rows = _table(kube, crd.JOB.path(namespace=ns))
    at = {n: names.index(n) for n in ("Position", "ETA", "Overall", "Finish ETA")}
    assert [rows["waiting"][at[n]] for n in at] == [2, "2027-01-15T08:10:00Z", 5, "2027-01-15T08:15:00Z"]
    assert [rows["running"][at[n]] for n in at] == [None, None, None, "2027-01-15T08:04:00Z"]


def test_queue_status_keeps_the_gated_pods_forecast(kube: RawApi, queue_name: str) -> None:
    kube.ok("POST", crd.QUEUE.path(), _queue(queue_name))
    now = 1_800_000_000.0
    entry = forecasting.pod_entry(forecast.JobForecast("ns/p", queue_name, "pods", True, 1, 3, now, now + 60,
                                                       {"p": 60.0}, {"p": "hint"}))
    written = kube.ok("PATCH", crd.QUEUE.path(queue_name) + "/status", {"status": {"pendingPods": [entry]}},
                      content_type="application/merge-patch+json")
    assert written["status"]["pendingPods"] == [entry]


def test_queue_printer_columns_show_weight_and_shares_side_by_side(kube: RawApi, queue_name: str) -> None:
    kube.ok("POST", crd.QUEUE.path(), _queue(queue_name, {"weight": 2}))
    kube.ok("PATCH", crd.QUEUE.path(queue_name) + "/status",
            {"status": {"dominantShare": {"regular": 0.4, "opportunistic": 0.1}, "fairShare": 0.5,
                        "usage": {"regular": 0.45, "opportunistic": 0.0}, "usageTarget": {"regular": 0.5},
                        "pendingTasks": 7, "runningTasks": 4,
                        "allocated": {"regular": {"cpu": "16", "memory": "64Gi"}}}},
            content_type="application/merge-patch+json")
    names, rows = _table(kube, crd.QUEUE.path())
    assert names == ["Name", "Weight", "State", "Dominant Share", "Fair Share", "Usage", "Target", "Pending", "Running",
                     "Age", "Opp Share", "Order", "Opportunistic"]
    row = rows[queue_name]
    assert row[:9] == [queue_name, 2, "Open", 0.4, 0.5, 0.45, 0.5, 7, 4]  # the state defaulted by the schema
    assert row[10:] == [0.1, "SRTF", "Allow"]


class _MergePatches:
    """The one call ``QueueBook.write_statuses`` makes, as ``stowage.kube.api.KubeClient.patch`` makes it."""

    def __init__(self, kube: RawApi) -> None:
        self.kube = kube

    def patch(self, path: str, body: Any) -> Any:
        return self.kube.ok("PATCH", path, body, content_type=api.MERGE_PATCH)


def _numbers(name: str, allocated: dict[str, dict[str, float]], running: int) -> QueueNumbers:
    return QueueNumbers(name=name, dominant_share={}, fair_share=0.5, allocated=allocated, pending_tasks=0,
                        running_tasks=running)


def test_queue_status_drops_a_resource_once_no_running_task_holds_it(kube: RawApi, queue_name: str) -> None:
    """The operator's status writes are merge patches: a resource that left ``allocated`` must go from the
    stored status too (a stale ``cpu: 6`` beside ``runningTasks: 0`` was read as an allocation)."""
    kube.ok("POST", crd.QUEUE.path(), _queue(queue_name))
    book = queues.QueueBook(_MergePatches(kube))  # type: ignore[arg-type]
    book.upsert(kube.ok("GET", crd.QUEUE.path(queue_name)))
    assert book.write_statuses([_numbers(queue_name, {"regular": {"cpu": 6.0}, "opportunistic": {"cpu": 2.0}}, 8)])
    book.upsert(kube.ok("GET", crd.QUEUE.path(queue_name)))  # as Kopf's event brings it
    assert book.write_statuses([_numbers(queue_name, {"opportunistic": {"cpu": 1.0}}, 1)])
    status = kube.ok("GET", crd.QUEUE.path(queue_name))["status"]
    assert status["allocated"] == {"regular": {}, "opportunistic": {"cpu": "1"}}
    assert status["runningTasks"] == 1
    assert book.write_statuses([_numbers(queue_name, {}, 0)])  # the cache not updated since: the last write counts
    assert kube.ok("GET", crd.QUEUE.path(queue_name))["status"]["allocated"] == {"regular": {}, "opportunistic": {}}


def test_short_names_reach_the_same_resources(kube: RawApi, stowage_crds: list[dict[str, Any]]) -> None:
    resources = kube.ok("GET", f"/apis/{crd.API_VERSION}")["resources"]
    short = {r["name"]: r.get("shortNames") for r in resources if "/" not in r["name"]}
    assert short == {"queues": ["sq"], "jobs": ["sjob"]}
    categories = {r["name"]: r.get("categories") for r in resources if "/" not in r["name"]}
    assert categories == {"queues": ["stowage"], "jobs": ["stowage"]}


def test_crds_reapply_unchanged(kube: RawApi, stowage_crds: list[dict[str, Any]]) -> None:
    # The chart upgrades by applying the same files again: that must be a no-op, not a conflict.
    for definition in load_crds():
        name = definition["metadata"]["name"]
        before = kube.ok("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        after = kube.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", copy.deepcopy(definition))
        assert after["metadata"]["generation"] == before["metadata"]["generation"]


def _documented_custom_columns_line() -> list[str]:
    """The `kubectl get pods -o custom-columns=…` line docs/operator.md gives for gated plain pods, as argv."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    (line,) = re.findall(r"^\$ (kubectl get pods .*custom-columns=.*)$", text, re.MULTILINE)
    return shlex.split(line)[1:]


def test_the_documented_custom_columns_line_shows_why_a_gated_pod_waits(
        kube: RawApi, ns: str, control_plane: ControlPlane | ExternalCluster) -> None:
    """A gated plain pod shows only `SchedulingGated` in `kubectl get pods`; the documented line shows its queue
    and its `stowage.io/Held` condition's reason and message (as operator/holds.py writes them)."""
    if not KUBECTL.exists():
        pytest.skip(f"{KUBECTL} missing (bash scripts/setup.sh unpacks it)")
    held = {"p-held": ("WaitingForQuota", "queue 'default' is at its cpu quota: 4/4 in use, a task needs 1"),
            "p-released": (holds.RELEASED, "released by the dispatcher")}
    for name in (*held, "p-plain"):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {labels.LABEL_QUEUE: "gold"}},
               "spec": {"schedulerName": labels.SCHEDULER_NAME, "schedulingGates": [{"name": labels.GATE_ADMISSION}],
                        "containers": [{"name": "main", "image": "busybox:1.36"}]}}
        kube.ok("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        if name in held:
            reason, message = held[name]
            condition = {"type": labels.CONDITION_HELD, "status": "True" if name == "p-held" else "False",
                         "reason": reason, "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            kube.ok("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {"conditions": [condition]}},
                    content_type=holds.STRATEGIC_MERGE)
    argv = _documented_custom_columns_line()
    argv[argv.index("-n") + 1] = ns
    done = subprocess.run([str(KUBECTL), f"--kubeconfig={control_plane.kubeconfig}", *argv], capture_output=True,
                          text=True, timeout=60, check=True)
    rows = [line.split(None, 3) for line in done.stdout.splitlines()]
    assert rows[0] == ["NAME", "QUEUE", "HELD", "WHY"]
    assert {r[0]: r[1:] for r in rows[1:]} == {
        "p-held": ["gold", "WaitingForQuota", held["p-held"][1]],
        "p-plain": ["gold", "<none>", "<none>"],
        "p-released": ["gold", holds.RELEASED, held["p-released"][1]]}
    plain = subprocess.run([str(KUBECTL), f"--kubeconfig={control_plane.kubeconfig}", "get", "pods", "-n", ns],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert all("SchedulingGated" in line for line in plain.splitlines()[1:]), plain  # the word the docs explain
