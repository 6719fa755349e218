"""Who may use a Queue and whether it takes work (``stowage.operator.tenancy``), as admission and the dispatcher
apply it: every refusal word for word. The same on the real API server: ``test_tenancy_live.py``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import kopf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stowage.operator import admission, tenancy, validation, webhooks
from stowage.operator.dispatcher import Dispatcher, DispatchView, NodeRecord, PendingGroup, QueueRecord
from stowage.operator.queues import QueueSpec

from stowage import labels
from stowage.config import StowageSettings
from stowage.errors import InvalidInput
from stowage.labels import Opportunistic
from stowage.policy import holding
from stowage.resources import ResourceVector

TEAM_A = {"matchLabels": {"team": "a"}}
QUEUES: dict[str, dict[str, Any]] = {
    "default": {},
    "team-a": {"namespaceSelector": TEAM_A},
    "closed": {"state": "Closed"},
    "draining": {"state": "Draining"},
    "anyone": {"namespaceSelector": {}},
}
NAMESPACES: dict[str, dict[str, str]] = {"ns-a": {"team": "a"}, "ns-b": {"team": "b", labels.LABEL_QUEUE: "team-a"},
                                         "ns-c": {}}
QUEUE_FIELD = "metadata.labels['stowage.io/queue']"
NOT_TEAM_A = ("a Queue that admits namespace {ns!r}: Queue 'team-a' admits only the namespaces whose labels match "
              "team=a (its spec.namespaceSelector); use a queue that admits this namespace, or ask a cluster admin "
              "to label the namespace or change the selector")
CLOSED = ("a Queue that takes new work: Queue 'closed' is Closed (spec.state), so it admits no new pods, Jobs or "
          "workloads and its admitted work goes on; use another queue, or ask a cluster admin to set its "
          "spec.state to Open")


class Reads:
    """The webhook's lookups over dicts, counting the reads (each is an API call in the webhook)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()

    def queue_spec(self, name: str) -> dict[str, Any] | None:
        self.count["queue"] += 1
        return QUEUES.get(name)

    def namespace_labels(self, name: str) -> dict[str, str]:
        self.count["namespace"] += 1
        return NAMESPACES[name]

    def lookups(self) -> dict[str, Any]:
        return {"queue_spec": self.queue_spec, "namespace_labels": self.namespace_labels}


def _pod(ns: str, queue: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": ns}
    if queue is not None:
        meta["labels"] = {labels.LABEL_QUEUE: queue}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "x",
                                                       "resources": {"requests": {"cpu": "1"}}}]}}


def _refusal(pod: dict[str, Any], reads: Reads | None = None) -> str:
    with pytest.raises(InvalidInput) as caught:
        admission.admit_pod(pod, lambda q: False, **(reads or Reads()).lookups())
    return str(caught.value)


# --- selectors -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("selector", "ns_labels", "expected"), [
    (None, {}, True), ({}, {"x": "y"}, True), (TEAM_A, {"team": "a"}, True), (TEAM_A, {"team": "b"}, False),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, {"team": "b"}, True),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {"team": "a"}, False),
    ({"matchExpressions": [{"key": "batch", "operator": "Exists"}]}, {"batch": ""}, True),
    ({"matchExpressions": [{"key": "batch", "operator": "DoesNotExist"}]}, {"batch": ""}, False),
    ({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "env", "operator": "Exists"}]}, {"team": "a"}, False),
])
def test_a_selector_matches_as_the_api_server_reads_label_selectors(selector: Any, ns_labels: dict[str, str],
                                                                     expected: bool) -> None:
    assert tenancy.matches(selector, ns_labels) is expected


def test_a_selector_is_shown_as_kubectl_writes_one() -> None:
    selector = {"matchLabels": {"team": "a"}, "matchExpressions": [
        {"key": "env", "operator": "In", "values": ["dev", "test"]},
        {"key": "old", "operator": "NotIn", "values": ["1"]},
        {"key": "batch", "operator": "Exists"}, {"key": "legacy", "operator": "DoesNotExist"}]}
    assert tenancy.show_selector(selector) == "team=a,env in (dev,test),old notin (1),batch,!legacy"
    assert tenancy.show_selector({}) == "(every namespace)"
    empty = {"matchLabels": None, "matchExpressions": None}  # admitted (absent, as the API server prunes nulls)
    assert validation.validate_queue({"namespaceSelector": empty}) == []
    assert tenancy.show_selector(empty) == "(every namespace)" and tenancy.matches(empty, {})


@pytest.mark.parametrize(("spec", "message"), [
    ({"namespaceSelector": "team=a"}, "spec.namespaceSelector: a label selector: an object with matchLabels (a map) "
                                      "and/or matchExpressions (a list), got 'team=a'"),
    ({"namespaceSelector": {"matchLabel": {}}}, "spec.namespaceSelector.matchLabel: only matchLabels, "
                                                "matchExpressions, got 'matchLabel'"),
    ({"namespaceSelector": {"matchLabels": {"team": "a b"}}},
     "spec.namespaceSelector.matchLabels['team']: a label value: empty, or at most 63 letters, digits, '-', '_', '.' "
     "starting and ending with one, got 'a b'"),
    ({"namespaceSelector": {"matchLabels": {"-team": "a"}}},
     "spec.namespaceSelector.matchLabels: a label key: a name of at most 63 letters, digits, '-', '_', '.' (starting "
     "and ending with a letter or digit), with an optional DNS prefix and '/' (e.g. team, example.com/team), "
     "got '-team'"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Is", "values": ["a"]}]}},
     "spec.namespaceSelector.matchExpressions[0].operator: one of In, NotIn, Exists, DoesNotExist, got 'Is'"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": []}]}},
     "spec.namespaceSelector.matchExpressions[0].values: a list of 1 to 64 label values (operator In), got []"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]}},
     "spec.namespaceSelector.matchExpressions[0].values: no values (operator Exists), got ['a']"),
    ({"namespaceSelector": {"matchExpressions": {"key": "team"}}},
     "spec.namespaceSelector.matchExpressions: a list of at most 32 expressions, got {'key': 'team'}"),
    ({"state": "Paused"}, "spec.state: one of Open, Closed, Draining, got 'Paused'"),
])
def test_a_queue_with_a_bad_selector_or_state_is_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    assert [str(p) for p in validation.validate_queue(spec)] == [message]


@pytest.mark.parametrize("state", ["Open", "Closed", "Draining"])
def test_every_state_and_a_selector_are_accepted(state: str) -> None:
    assert validation.validate_queue({"state": state, "namespaceSelector": {
        "matchLabels": {"example.com/team": "a"},
        "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}}) == []


# --- pods -----------------------------------------------------------------------------------------------------


def test_a_pod_of_a_namespace_the_queue_does_not_admit_is_refused_naming_queue_namespace_and_selector() -> None:
    assert _refusal(_pod("ns-c", "team-a")) == f"{QUEUE_FIELD}: {NOT_TEAM_A.format(ns='ns-c')}, got 'team-a'"


def test_a_pod_of_an_admitted_namespace_enters_the_queue_at_one_read_each() -> None:
    reads = Reads()
    admitted = admission.admit_pod(_pod("ns-a", "team-a"), lambda q: False, **reads.lookups())
    assert {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": labels.GATE_ADMISSION}]} in admitted.patch
    assert reads.count == Counter({"queue": 1, "namespace": 1})


def test_a_queue_without_a_selector_admits_every_namespace_and_needs_no_namespace_read() -> None:
    for queue in ("default", "anyone"):
        reads = Reads()
        assert admission.admit_pod(_pod("ns-c", queue), lambda q: False, **reads.lookups()).patch
        assert reads.count["namespace"] == (1 if queue == "anyone" else 0)  # {} is a selector: read, matched


def test_a_namespace_whose_default_queue_does_not_admit_it_says_so() -> None:
    # ns-b is labelled stowage.io/queue=team-a, but team-a admits team=a only.
    assert _refusal(_pod("ns-b")) == (
        f"namespace 'ns-b': {QUEUE_FIELD}: {NOT_TEAM_A.format(ns='ns-b')}; it is the default queue of the namespace's "
        "pods, and must admit the namespace, got 'team-a'")
    reads = Reads()
    assert admission.admit_pod(_pod("ns-b", "default"), lambda q: False, **reads.lookups()).patch  # its own label
    assert reads.count == Counter({"queue": 1})


def test_a_closed_queue_refuses_new_pods() -> None:
    assert _refusal(_pod("ns-a", "closed")) == f"{QUEUE_FIELD}: {CLOSED}, got 'closed'"


def test_a_draining_queue_admits_new_pods() -> None:
    assert admission.admit_pod(_pod("ns-a", "draining"), lambda q: False, **Reads().lookups()).patch


def test_an_unknown_queue_is_refused_as_before() -> None:
    assert _refusal(_pod("ns-a", "nope")).startswith(f"{QUEUE_FIELD}: the name of an existing Queue")


def test_a_namespace_that_cannot_be_read_admits_nothing_into_a_queue_with_a_selector() -> None:
    """Fails closed: the read's failure reaches the webhook, which refuses with 503 ("not checked ... try again")."""
    def unreadable(name: str) -> dict[str, str]:
        raise webhooks.ApiUnreadable(f"the API server answered 403 Forbidden reading namespace {name!r}")

    with pytest.raises(webhooks.ApiUnreadable):
        admission.admit_pod(_pod("ns-a", "team-a"), lambda q: False, queue_spec=Reads().queue_spec,
                            namespace_labels=unreadable)
    with pytest.raises(kopf.AdmissionError) as caught:
        webhooks._answering("Pod", lambda **_: admission.admit_pod(
            _pod("ns-a", "team-a"), lambda q: False, queue_spec=Reads().queue_spec, namespace_labels=unreadable))()
    assert caught.value.code == 503
    assert str(caught.value) == ("Pod not checked: the API server answered 403 Forbidden reading namespace 'ns-a'; "
                                 "nothing was changed, try again")


# --- Stowage Jobs ---------------------------------------------------------------------------------------------


def _job(queue: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    return {"queue": queue, "tasks": [{"name": "a", "template": template}]}


def _job_problems(queue: str, namespace: str, old: dict[str, Any] | None = None) -> list[str]:
    reads = Reads()
    return [str(p) for p in validation.validate_job(_job(queue), lambda q: False, old, namespace=namespace,
                                                    **reads.lookups())]


def test_a_job_is_refused_by_a_queue_that_does_not_admit_its_namespace_or_is_closed() -> None:
    assert _job_problems("team-a", "ns-c") == [f"spec.queue: {NOT_TEAM_A.format(ns='ns-c')}, got 'team-a'"]
    assert _job_problems("closed", "ns-a") == [f"spec.queue: {CLOSED}, got 'closed'"]
    assert _job_problems("team-a", "ns-a") == []
    assert _job_problems("draining", "ns-c") == []


def test_an_admitted_job_is_never_refused_later_by_its_queue() -> None:
    # An update (a label, suspend) of a Job whose queue closed or stopped admitting its namespace passes.
    assert _job_problems("closed", "ns-c", old={**_job("closed"), "suspend": True}) == []


# --- workload templates ---------------------------------------------------------------------------------------


def _deployment(queue: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns-a"},
            "spec": {"template": {"metadata": {"labels": {"app": "d", labels.LABEL_QUEUE: queue}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def test_a_workload_template_naming_an_unknown_or_closed_queue_is_refused_with_the_pods_message() -> None:
    for queue in ("nope", "closed"):
        with pytest.raises(InvalidInput) as pod:
            admission.admit_pod(_pod("ns-a", queue), lambda q: False, **Reads().lookups())
        with pytest.raises(InvalidInput) as workload:
            admission.admit_workload(_deployment(queue), ("spec", "template"), lambda q: False, namespace="ns-a",
                                     **Reads().lookups())
        assert str(workload.value) == f"spec.template.{pod.value}"


def test_a_cronjobs_template_is_read_under_its_job_template() -> None:
    cron = {"spec": {"jobTemplate": {"spec": {"template": _deployment("team-a")["spec"]["template"]}}}}
    with pytest.raises(InvalidInput) as caught:
        admission.admit_workload(cron, admission.WORKLOAD_TEMPLATES[("batch", "cronjobs")], lambda q: False,
                                 namespace="ns-c", **Reads().lookups())
    assert str(caught.value) == (f"spec.jobTemplate.spec.template.{QUEUE_FIELD}: {NOT_TEAM_A.format(ns='ns-c')}, "
                                 "got 'team-a'")


def test_an_admitted_workload_is_not_patched_and_a_plain_one_is_left_alone() -> None:
    assert admission.admit_workload(_deployment("team-a"), ("spec", "template"), lambda q: False, namespace="ns-a",
                                    **Reads().lookups()) == ()
    plain = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    assert admission.admit_workload(plain, ("spec", "template"), lambda q: False, namespace="ns-c",
                                    **Reads().lookups()) == ()


# --- the dispatcher: Draining holds, and says why ------------------------------------------------------------


def _group(key: str, queue: str) -> PendingGroup:
    return PendingGroup(key=key, queue=queue, demand=ResourceVector({"cpu": 1.0, "memory": 2.0**30}), releasable=2,
                        job=key, group="main", intent=Opportunistic.FALSE, arrival_s=0.0, expected_duration_s=60.0,
                        remaining_tasks=2)


def test_a_draining_queue_releases_nothing_and_its_groups_are_held_with_reason_draining() -> None:
    view = DispatchView([NodeRecord("n1", ResourceVector({"cpu": 8.0, "memory": 32 * 2.0**30}), True, None)], [],
                        [QueueRecord("open"), QueueRecord("drained", draining=True)],
                        [_group("o", "open"), _group("d", "drained")])
    dispatcher = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    assert Counter({r.group_key: r.count for r in dispatcher.decide(view)}) == Counter({"o": 2})
    assert dispatcher.holds["d"] == holding.Hold(holding.DRAINING, (
        "queue 'drained' is Draining (spec.state): it releases no new work and lets its running work finish; this "
        "task starts once a cluster admin sets the queue's spec.state to Open"))
    assert "o" not in dispatcher.holds
    assert holding.DRAINING in holding.REASONS


# --- any JSON: problems naming the field, and what is admitted never stops a pass ----------------------------

_WORDS = st.sampled_from(["team", "a", "", "a b", "-x", "example.com/team", "x" * 64, "In", "NotIn", "Exists",
                          "DoesNotExist", "Gt", "Open", "Closed", "Draining", "open"])
_SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | _WORDS | st.text(max_size=6)
_KEY = st.sampled_from(["matchLabels", "matchExpressions", "key", "operator", "values", "team"]) | _WORDS
_ANY = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEY, inner, max_size=4),
                    max_leaves=20)
_EXPRESSION = st.fixed_dictionaries({}, optional={"key": _ANY | _WORDS, "operator": _ANY | _WORDS,
                                                  "values": _ANY | st.lists(_WORDS, max_size=3)})
_SELECTOR = _ANY | st.fixed_dictionaries({}, optional={
    "matchLabels": _ANY | st.dictionaries(_WORDS, _WORDS | _ANY, max_size=3),
    "matchExpressions": _ANY | st.lists(_EXPRESSION, max_size=3)})
_QUEUE_SPEC = st.fixed_dictionaries({}, optional={"state": _ANY | _WORDS, "namespaceSelector": _SELECTOR})
_LABELS = st.dictionaries(_WORDS, _WORDS, max_size=3)
_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(spec=_QUEUE_SPEC, ns_labels=_LABELS)
def test_any_selector_or_state_is_refused_naming_its_field_or_admitted_and_read_without_fail(
        spec: dict[str, Any], ns_labels: dict[str, str]) -> None:
    problems = validation.validate_queue(spec)
    for p in problems:
        assert isinstance(p, InvalidInput) and p.field.startswith(("spec.state", "spec.namespaceSelector")), p
    if problems:
        return
    # Admitted: every reader of it answers, for any namespace (admission, the dispatcher's QueueSpec, a pass).
    assert tenancy.queue_state(spec) in ("Open", "Closed", "Draining")
    assert isinstance(tenancy.matches(spec.get("namespaceSelector"), ns_labels), bool)
    assert tenancy.show_selector(spec.get("namespaceSelector"))
    problem = tenancy.admission_problem("spec.queue", "q", spec, "ns", ns_labels)
    assert problem is None or str(problem).startswith("spec.queue: a Queue that ")
    queue = QueueSpec("q", spec)
    view = DispatchView([NodeRecord("n1", ResourceVector({"cpu": 8.0, "memory": 32 * 2.0**30}), True, None)], [],
                        [QueueRecord("q", draining=queue.state == "Draining")], [_group("g", "q")])
    released = Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view)
    assert sum(r.count for r in released) == (0 if queue.state == "Draining" else 2)


@_FUZZ
@given(queue=_QUEUE_SPEC, ns_labels=_LABELS, template=_ANY, queue_label=_WORDS)
def test_admission_over_any_queue_and_template_refuses_only_with_a_named_field(
        queue: dict[str, Any], ns_labels: dict[str, str], template: Any, queue_label: str) -> None:
    lookups = {"queue_spec": lambda name: queue if name in ("q", "default") else None,
               "namespace_labels": lambda name: ns_labels}
    if validation.validate_queue(queue):
        return  # never stored: the webhook refuses it
    pod = _pod("ns", "q")
    try:
        admission.admit_pod(pod, lambda q: False, **lookups)
    except InvalidInput as exc:
        assert exc.field == QUEUE_FIELD and str(exc)
    workload = {"spec": {"template": template if queue_label == "" else
                         {"metadata": {"labels": {labels.LABEL_QUEUE: queue_label}}, "spec": template}}}
    try:
        admission.admit_workload(workload, ("spec", "template"), lambda q: False, namespace="ns", **lookups)
    except InvalidInput as exc:
        assert exc.field.startswith("spec.template") and str(exc)
