"""The parsers of API objects are total: whatever a malformed object holds, the only exception is InvalidInput.

Issue #31: values the API server admits (``stowage.io/disk-bandwidth: "1e9999999"``, a 400-digit integer in
``stowage.io/demand``, ``containers: "abc"``) are where a parser that is not total raises
``decimal.InvalidOperation``, ``OverflowError``, ``RecursionError``, ``TypeError`` or ``AttributeError``, and
so stops every cache and pass that calls it. Each case below is one of those.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stowage import labels
from stowage.errors import IntentError, InvalidInput, QuantityError
from stowage.kube.records import container_limits, node_record, pod_record
from stowage.labels import bandwidth_demand, parse_demand, pod_class, pod_intent
from stowage.resources import MAX_QUANTITY, ResourceVector, parse_quantity, pod_demand

BIG = 10**400  # far past float's range
HUGE = 10**5000  # past Python's int-to-string digit limit: even repr() of it raises


# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        pytest.param("1e9999999", "at most 2^63-1", id="huge-exponent"),
        pytest.param("1e99999999999999999999999", "at most 2^63-1", id="exponent-past-decimal-context"),
        pytest.param("1e101", "at most 2^63-1", id="exponent-just-past-the-bound"),
        pytest.param("9" * 30, "at most 2^63-1", id="30-digits"),
        pytest.param("9Ei", "at most 2^63-1", id="above-int64-binary"),
        pytest.param("1" * 5000, "at most 64 characters", id="5000-digits"),
        pytest.param("1e" + "9" * 5000, "at most 64 characters", id="5000-digit-exponent"),
        pytest.param(BIG, "at most 2^63-1", id="int-past-float"),
        pytest.param(-BIG, "at most 2^63-1", id="negative-int-past-float"),
        pytest.param(HUGE, "at most 2^63-1", id="int-past-digit-limit"),
        pytest.param(1e300, "at most 2^63-1", id="float-past-int64"),
        pytest.param("\u0663", "Kubernetes quantity", id="arabic-indic-digit"),
        pytest.param("1\n2", "Kubernetes quantity", id="inner-newline"),
        pytest.param([1], "Kubernetes quantity", id="list"),
        pytest.param({"cpu": 1}, "Kubernetes quantity", id="object"),
        pytest.param([[[[1]]]] * 3, "Kubernetes quantity", id="nested-list"),
    ],
)
def test_malformed_quantities_raise_quantity_error_naming_field_and_bound(value: Any, allowed: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(value, "spec.x")
    assert str(err.value).startswith("spec.x: ") and allowed in str(err.value)
    assert len(str(err.value)) < 400  # a huge value is shown by its start and size, not in full


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("8Ei", MAX_QUANTITY, id="2^63-exactly"),
        pytest.param("9223372036854775807", MAX_QUANTITY, id="int64-max"),
        pytest.param("1e-9999999", 0.0, id="vanishing-exponent"),
        pytest.param("0e9999999", 0.0, id="zero-with-huge-exponent"),
        pytest.param("1e18", 1e18, id="exa"),
    ],
)
def test_quantities_at_the_bounds_parse(text: str, expected: float) -> None:
    assert parse_quantity(text) == expected


@given(st.one_of(  # any text, and text of the quantity grammar with digits and exponents of any size
    st.text(max_size=200),
    st.from_regex(r"[+-]?[0-9]{0,40}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,12}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?",
                  fullmatch=True),
))
def test_parse_quantity_of_any_string_returns_a_bounded_number_or_raises_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text, allow_negative=True)
    except QuantityError:
        return
    assert abs(value) <= MAX_QUANTITY


# --- the demand annotation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param('{"cpu": 1' + "0" * 400 + "}", id="400-digit-integer"),
        pytest.param('{"cpu": 1' + "0" * 5000 + "}", id="integer-past-digit-limit"),
        pytest.param("[" * 100_000, id="100k-brackets"),
        pytest.param("[" * 3000, id="brackets-within-the-size-bound"),
        pytest.param('{"a": ' * 1500 + "1" + "}" * 1500, id="nested-objects"),
        pytest.param('{"cpu": NaN}', id="nan"),
        pytest.param('{"cpu": Infinity}', id="infinity"),
        pytest.param('{"cpu": 1e999}', id="float-overflow"),
        pytest.param('{"cpu": {"a": 1}}', id="object-as-quantity"),
        pytest.param('{"cpu": "1e9999999"}', id="huge-quantity-string"),
        pytest.param("\ud800", id="lone-surrogate"),
        pytest.param(5, id="not-a-string"),
        pytest.param(None, id="none"),
    ],
)
def test_malformed_demand_annotations_raise_intent_error(value: Any) -> None:
    with pytest.raises(IntentError) as err:
        parse_demand(value, "metadata.annotations['stowage.io/demand']")
    assert "stowage.io/demand" in str(err.value)
    assert len(str(err.value)) < 600


#: JSON values of every shape, the dangerous ones included (huge integers; deep nesting is bounded
#: by the strategy; the size bound covers the rest).
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**300, max_value=10**310)
    | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_parse_demand_of_any_json_returns_a_vector_or_raises_intent_error(value: Any) -> None:
    try:
        text = json.dumps(value)
    except ValueError:  # a float past JSON: not an annotation anyone can write
        return
    try:
        demand = parse_demand(text, "d")
    except IntentError:
        return
    assert all(0 <= v <= MAX_QUANTITY for v in demand.values())


@given(st.text(max_size=300))
def test_parse_demand_of_any_string_returns_a_vector_or_raises_intent_error(text: str) -> None:
    with contextlib.suppress(IntentError):
        parse_demand(text, "d")


# --- pod shapes ----------------------------------------------------------------------------------


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"nodeName": "n1", **spec},
            "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        pytest.param(_pod(containers="abc"), "spec.containers", id="containers-a-string"),
        pytest.param(_pod(containers=1.5), "spec.containers", id="containers-a-float"),
        pytest.param(_pod(containers=[1]), "spec.containers[0]", id="container-an-int"),
        pytest.param(_pod(containers=[{"resources": 5}]), "spec.containers[0].resources", id="resources-an-int"),
        pytest.param(_pod(containers=[{"resources": {"requests": 5}}]), "spec.containers[0].resources.requests",
                     id="requests-an-int"),
        pytest.param(_pod(containers=[{"resources": {"limits": ["1"]}}]), "spec.containers[0].resources.limits",
                     id="limits-a-list"),
        pytest.param(_pod(containers=[{"resources": {"requests": {"cpu": "1e9999999"}}}]),
                     "spec.containers[0].resources.requests.cpu", id="request-huge"),
        pytest.param(_pod(containers=[{"resources": {"requests": {"memory": BIG}}}]),
                     "spec.containers[0].resources.requests.memory", id="request-past-float"),
        pytest.param(_pod(initContainers=True), "spec.initContainers", id="init-containers-a-bool"),
        pytest.param(_pod(resources=5), "spec.resources", id="pod-resources-an-int"),
        pytest.param(_pod(overhead="x"), "spec.overhead", id="overhead-a-string"),
        pytest.param({"spec": 5}, "spec", id="spec-an-int"),
        pytest.param({"spec": {}, "status": {"containerStatuses": 5}}, "status.containerStatuses",
                     id="statuses-an-int"),
        pytest.param({"spec": {"containers": [{"name": "a"}]},
                      "status": {"containerStatuses": [{"name": "a", "resources": 7}]}},
                     "status.containerStatuses[0].resources", id="status-resources-an-int"),
    ],
)
def test_pod_demand_of_a_malformed_pod_raises_invalid_input_naming_the_field(pod: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        pod_demand(pod)
    assert err.value.field == field or err.value.field.startswith(field)


def test_pod_demand_skips_statuses_whose_name_matches_no_container() -> None:
    pod = {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"containerStatuses": [{"name": ["a"]}, 3, {"name": "a", "allocatedResources": {"cpu": "2"}}]}}
    assert pod_demand(pod) == ResourceVector({"cpu": 2.0})


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        pytest.param({"metadata": 5}, "metadata", id="metadata-an-int"),
        pytest.param({"metadata": {"labels": 5}}, "metadata.labels", id="labels-an-int"),
        pytest.param({"metadata": {"annotations": [1]}}, "metadata.annotations", id="annotations-a-list"),
        pytest.param({"metadata": {"labels": {labels.LABEL_CLASS: 5}}}, labels.LABEL_CLASS, id="class-an-int"),
        pytest.param({"metadata": {"labels": {labels.LABEL_OPPORTUNISTIC: HUGE}}}, labels.LABEL_OPPORTUNISTIC,
                     id="intent-a-huge-int"),
        pytest.param({"metadata": {"labels": {labels.LABEL_QUEUE: ["q"]}}}, labels.LABEL_QUEUE, id="queue-a-list"),
        pytest.param({"metadata": {"annotations": {labels.ANN_DISK_BANDWIDTH: "1e9999999"}}},
                     labels.ANN_DISK_BANDWIDTH, id="bandwidth-huge"),
        pytest.param({"metadata": {"annotations": {labels.ANN_NETWORK_BANDWIDTH: BIG}}},
                     labels.ANN_NETWORK_BANDWIDTH, id="bandwidth-past-float"),
        pytest.param({"metadata": {"annotations": {labels.ANN_EXPECTED_DURATION: "1e999"}}},
                     labels.ANN_EXPECTED_DURATION, id="duration-infinite"),
        pytest.param({"metadata": {"annotations": {labels.ANN_EXPECTED_DURATION: "1" * 5000}}},
                     labels.ANN_EXPECTED_DURATION, id="duration-5000-digits"),
        pytest.param({"metadata": {"annotations": {labels.ANN_EXPECTED_DURATION: 45}}},
                     labels.ANN_EXPECTED_DURATION, id="duration-not-a-string"),
        pytest.param({"metadata": {"annotations": {labels.ANN_DEMAND: '{"cpu": 1' + "0" * 400 + "}"}}},
                     labels.ANN_DEMAND, id="demand-400-digits"),
        pytest.param({"metadata": {"annotations": {labels.ANN_DEMAND: "[" * 100_000}}},
                     labels.ANN_DEMAND, id="demand-100k-brackets"),
    ],
)
def test_pod_intent_of_a_malformed_pod_raises_intent_error_naming_the_field(pod: dict, field: str) -> None:
    with pytest.raises(IntentError) as err:
        pod_intent(pod)
    assert field in err.value.field


@pytest.mark.parametrize("value", [5, [1], "x"])
def test_bandwidth_and_class_of_non_objects_raise_intent_error(value: Any) -> None:
    with pytest.raises(IntentError):
        bandwidth_demand(value)
    with pytest.raises(IntentError):
        pod_class(value)


@pytest.mark.parametrize(
    "spec",
    [{"containers": "abc"}, {"containers": [1]}, {"containers": [{"resources": 5}]},
     {"containers": [{"resources": {"limits": {"cpu": "1e9999999"}}}]}],
    ids=["string", "int-container", "int-resources", "huge-limit"],
)
def test_container_limits_of_a_malformed_pod_raise_invalid_input(spec: dict) -> None:
    with pytest.raises(InvalidInput):
        container_limits({"spec": spec})


def test_a_bound_pod_with_a_huge_bandwidth_is_recorded_as_regular_with_the_problem() -> None:
    pod = _pod(containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    pod["metadata"]["annotations"] = {labels.ANN_DISK_BANDWIDTH: "1e9999999"}
    pod["metadata"]["labels"] = {labels.LABEL_CLASS: "opportunistic"}
    record = pod_record(pod, 0.0)
    assert record is not None and not record.opportunistic
    assert record.demand == ResourceVector({"cpu": 1.0})
    assert record.problem is not None and labels.ANN_DISK_BANDWIDTH in record.problem


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        pytest.param({"metadata": 5, "spec": {"nodeName": "n1"}}, "metadata", id="metadata-an-int"),
        pytest.param({"spec": 5}, "spec", id="spec-an-int"),
        pytest.param({"spec": {"nodeName": ["n1"]}}, "spec.nodeName", id="node-name-a-list"),
        pytest.param({"spec": {"nodeName": "n1"}, "status": {"conditions": 5}}, "status.conditions",
                     id="conditions-an-int"),
        pytest.param({"metadata": {"labels": 5}, "spec": {"nodeName": "n1"}}, "metadata.labels", id="labels-an-int"),
    ],
)
def test_pod_record_of_an_object_not_shaped_like_a_pod_raises_invalid_input(pod: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        pod_record(pod, 0.0)
    assert err.value.field == field


def test_pod_record_reads_an_unhashable_phase_as_not_terminal() -> None:
    pod = _pod()
    pod["status"]["phase"] = ["Running"]
    assert pod_record(pod, 0.0) is not None


# --- random objects ------------------------------------------------------------------------------


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the well-shaped value, sometimes any JSON in its place."""
    return st.one_of(strategy, strategy, JSON)


QUANTITY = _maybe(st.sampled_from(["1", "500m", "2Gi", "1e9999999", "-1", "1e-9999", "9Ei", "x", ""]) | JSON)
RESOURCES = _maybe(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"]), QUANTITY,
                                   max_size=3))
CONTAINER = _maybe(st.fixed_dictionaries({}, optional={
    "name": _maybe(st.sampled_from(["a", "b"])),
    "resources": _maybe(st.fixed_dictionaries({}, optional={"requests": RESOURCES, "limits": RESOURCES})),
    "restartPolicy": _maybe(st.just("Always")),
}))
STATUS_ENTRY = _maybe(st.fixed_dictionaries({}, optional={
    "name": _maybe(st.sampled_from(["a", "b"])),
    "allocatedResources": RESOURCES,
    "resources": _maybe(st.fixed_dictionaries({}, optional={"requests": RESOURCES})),
}))
LABELS = _maybe(st.dictionaries(
    st.sampled_from([labels.LABEL_CLASS, labels.LABEL_OPPORTUNISTIC, labels.LABEL_QUEUE, labels.LABEL_HARVEST]),
    _maybe(st.sampled_from(["true", "false", "auto", "opportunistic", "regular", "q"])), max_size=4))
ANNOTATIONS = _maybe(st.dictionaries(
    st.sampled_from([labels.ANN_DEMAND, labels.ANN_DISK_BANDWIDTH, labels.ANN_NETWORK_BANDWIDTH,
                     labels.ANN_EXPECTED_DURATION, labels.ANN_DATA_NODES]),
    _maybe(st.sampled_from(['{"cpu": "1"}', '{"cpu": 1' + "0" * 400 + "}", "[" * 5000, "80Mi", "1e9999999",
                            "45s", "1e999", "n1,n2"]) | st.text(max_size=30)),
    max_size=5))
METADATA = _maybe(st.fixed_dictionaries({}, optional={
    "name": _maybe(st.sampled_from(["p", "n1"])), "namespace": _maybe(st.just("ns")), "uid": _maybe(st.just("u")),
    "labels": LABELS, "annotations": ANNOTATIONS,
}))
POD = st.fixed_dictionaries({}, optional={
    "metadata": METADATA,
    "spec": _maybe(st.fixed_dictionaries({}, optional={
        "nodeName": _maybe(st.just("n1")),
        "containers": _maybe(st.lists(CONTAINER, max_size=3)),
        "initContainers": _maybe(st.lists(CONTAINER, max_size=2)),
        "overhead": RESOURCES,
        "resources": _maybe(st.fixed_dictionaries({}, optional={"requests": RESOURCES})),
        "schedulerName": _maybe(st.just("stowage-scheduler")),
    })),
    "status": _maybe(st.fixed_dictionaries({}, optional={
        "phase": _maybe(st.sampled_from(["Running", "Succeeded"])),
        "containerStatuses": _maybe(st.lists(STATUS_ENTRY, max_size=2)),
        "initContainerStatuses": _maybe(st.lists(STATUS_ENTRY, max_size=2)),
        "conditions": _maybe(st.lists(_maybe(st.fixed_dictionaries({
            "type": st.just("PodScheduled"), "status": st.just("True"),
            "lastTransitionTime": _maybe(st.just("2024-05-01T10:00:00Z"))})), max_size=2)),
        "startTime": _maybe(st.just("2024-05-01T10:00:00Z")),
        "capacity": RESOURCES,
        "allocatable": RESOURCES,
    })),
})

PARSERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "pod_demand": pod_demand,
    "pod_intent": pod_intent,
    "container_limits": container_limits,
    "pod_record": lambda pod: pod_record(pod, 0.0),
    "node_record": node_record,
}


@pytest.mark.parametrize("parser", PARSERS)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pod=POD)
def test_parsers_of_any_pod_shaped_json_raise_nothing_but_invalid_input(parser: str, pod: dict[str, Any]) -> None:
    try:
        PARSERS[parser](pod)
    except InvalidInput as exc:
        str(exc)  # the message itself can be built (no repr of a huge or deep value)
