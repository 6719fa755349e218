"""Pod intent, task groups, node bandwidth and Queue weights: labels, annotations and fields parsed in one place,
with errors that name the key and the value."""

from __future__ import annotations

from typing import Any

import pytest

from stowage import labels
from stowage.errors import IntentError
from stowage.labels import (
    Opportunistic,
    PodClass,
    harvest_enabled,
    node_bandwidth,
    pod_intent,
    queue_weight,
    task_group,
)

GI = 2**30


def _pod(labels_: dict | None = None, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "p", "labels": labels_ or {}, "annotations": annotations or {}}, "spec": {}}


def test_every_key_lives_under_the_stowage_domain() -> None:
    keys = [v for k, v in vars(labels).items() if k.startswith(("LABEL_", "ANN_"))]
    assert len(keys) >= 11
    assert all(k.startswith("stowage.io/") for k in keys)
    assert len(set(keys) - {labels.ANN_DISK_BANDWIDTH, labels.ANN_NETWORK_BANDWIDTH}) == len(keys) - 2


def test_metric_names_are_the_design_contract() -> None:
    names = {v for k, v in vars(labels.METRICS).items() if k.isupper()}
    assert {
        "stowage_node_usage",
        "stowage_node_capacity",
        "stowage_node_contention",
        "stowage_node_blocked",
        "stowage_pod_usage",
        "stowage_evictions_total",
        "stowage_extender_request_seconds",
        "stowage_extender_rejections_total",
        "stowage_node_harvestable",
        "stowage_queue_dominant_share",
        "stowage_queue_fair_share",
        "stowage_queue_allocated",
        "stowage_queue_pending_tasks",
        "stowage_job_completion_seconds",
        "stowage_dispatch_total",
        "stowage_estimate_ratio",
    } <= names


def test_plain_pod_without_label_is_opted_out() -> None:
    intent = pod_intent(_pod())
    assert intent.opportunistic is Opportunistic.FALSE
    assert intent.pod_class is PodClass.REGULAR and intent.demand is None and not intent.is_opportunistic


def test_job_pods_default_to_auto() -> None:
    assert pod_intent(_pod(), default=Opportunistic.AUTO).opportunistic is Opportunistic.AUTO


def test_a_fully_annotated_opportunistic_pod_parses() -> None:
    intent = pod_intent(
        _pod(
            {labels.LABEL_OPPORTUNISTIC: "True", labels.LABEL_CLASS: "opportunistic", labels.LABEL_QUEUE: "research"},
            {
                labels.ANN_DEMAND: '{"cpu": "2", "memory": "4Gi"}',
                labels.ANN_DISK_BANDWIDTH: "80Mi",
                labels.ANN_NETWORK_BANDWIDTH: "10M",
                labels.ANN_EXPECTED_DURATION: "45s",
                labels.ANN_DATA_NODES: "n1, n2,,",
            },
        )
    )
    assert intent.opportunistic is Opportunistic.TRUE
    assert intent.pod_class is PodClass.OPPORTUNISTIC and intent.is_opportunistic
    assert intent.demand == {"cpu": 2.0, "memory": 4 * GI}
    assert intent.bandwidth == {"disk": 80 * 2**20, "network": 10e6}
    assert intent.expected_duration_s == 45.0
    assert intent.data_nodes == frozenset({"n1", "n2"})
    assert intent.queue == "research"


@pytest.mark.parametrize(
    ("labels_", "annotations", "where"),
    [
        pytest.param({labels.LABEL_OPPORTUNISTIC: "maybe"}, {}, labels.LABEL_OPPORTUNISTIC, id="bad-intent"),
        pytest.param({labels.LABEL_CLASS: "premium"}, {}, labels.LABEL_CLASS, id="bad-class"),
        pytest.param({}, {labels.ANN_DEMAND: "cpu=2"}, labels.ANN_DEMAND, id="demand-not-json"),
        pytest.param({}, {labels.ANN_DEMAND: '["2"]'}, labels.ANN_DEMAND, id="demand-not-object"),
        pytest.param({}, {labels.ANN_DEMAND: '{"cpu": "lots"}'}, labels.ANN_DEMAND, id="demand-bad-quantity"),
        pytest.param({}, {labels.ANN_DISK_BANDWIDTH: "fast"}, labels.ANN_DISK_BANDWIDTH, id="bad-bandwidth"),
        pytest.param({}, {labels.ANN_EXPECTED_DURATION: "soon"}, labels.ANN_EXPECTED_DURATION, id="bad-duration"),
        pytest.param({}, {labels.ANN_EXPECTED_DURATION: "-5"}, labels.ANN_EXPECTED_DURATION, id="negative-duration"),
    ],
)
def test_malformed_values_raise_naming_the_key_and_the_value(labels_: dict, annotations: dict, where: str) -> None:
    with pytest.raises(IntentError) as err:
        pod_intent(_pod(labels_, annotations))
    assert where in str(err.value)
    bad = next(iter({**labels_, **annotations}.values()))
    shown = "'lots'" if "lots" in bad else repr(bad)  # a bad quantity inside the JSON is named alone
    assert str(err.value).endswith(f"got {shown}")


@pytest.mark.parametrize(
    ("node_labels", "enabled"),
    [
        ({}, True),
        ({labels.LABEL_HARVEST: "false"}, False),
        ({labels.LABEL_HARVEST: "FALSE"}, False),
        ({labels.LABEL_HARVEST: "true"}, True),
    ],
    ids=["unlabelled", "false", "false-uppercase", "true"],
)
def test_nodes_harvest_unless_labelled_false(node_labels: dict, enabled: bool) -> None:
    assert harvest_enabled(node_labels) is enabled


@pytest.mark.parametrize(
    ("pod", "group"),
    [
        pytest.param({"metadata": {"labels": {labels.LABEL_TASK_GROUP: "map"}}}, "map", id="labelled"),
        pytest.param({"metadata": {"labels": {}}}, "", id="no-label"),
        pytest.param({"metadata": {"labels": {labels.LABEL_TASK_GROUP: None}}}, "", id="null-label"),
        pytest.param({"metadata": {"labels": {labels.LABEL_TASK_GROUP: 7}}}, "", id="not-a-string"),
        pytest.param({"metadata": {"labels": None}}, "", id="null-labels"),
        pytest.param({"metadata": None}, "", id="null-metadata"),
        pytest.param({}, "", id="no-metadata"),
    ],
)
def test_task_group_reads_one_missing_value(pod: dict, group: str) -> None:
    assert task_group(pod) == group


MI = 2**20


@pytest.mark.parametrize(
    ("annotations", "capacity", "bad"),
    [
        pytest.param({labels.ANN_DISK_BANDWIDTH: "80Mi", labels.ANN_NETWORK_BANDWIDTH: "1Gi"},
                     {"disk": 80 * MI, "network": GI}, [], id="both"),
        pytest.param({labels.ANN_NETWORK_BANDWIDTH: "1Gi"}, {"network": GI}, [], id="one"),
        pytest.param({}, {}, [], id="none-declared"),
        pytest.param(None, {}, [], id="no-annotations"),
        pytest.param({labels.ANN_DISK_BANDWIDTH: "fast", labels.ANN_NETWORK_BANDWIDTH: "1Gi"}, {"network": GI},
                     [labels.ANN_DISK_BANDWIDTH], id="a-bad-one-does-not-hide-a-good-one"),
        pytest.param({labels.ANN_DISK_BANDWIDTH: "-1"}, {}, [labels.ANN_DISK_BANDWIDTH], id="negative-is-unknown"),
        pytest.param(["not", "a", "map"], {}, ["metadata.annotations"], id="not-an-object"),
    ],
)
def test_node_bandwidth_reads_each_annotation_on_its_own(annotations: Any, capacity: dict, bad: list[str]) -> None:
    got, problems = node_bandwidth(annotations)
    assert dict(got) == capacity
    assert len(problems) == len(bad)
    assert all(key in problem for key, problem in zip(bad, problems, strict=True))


@pytest.mark.parametrize(
    ("spec", "weight"),
    [
        pytest.param({"weight": 2}, 2.0, id="number"),
        pytest.param({"weight": 0.5}, 0.5, id="fraction"),
        pytest.param({"weight": "3"}, 3.0, id="numeric-string"),
        pytest.param({}, 1.0, id="missing"),
        pytest.param(None, 1.0, id="no-spec"),
        pytest.param({"weight": 0}, 1.0, id="zero"),
        pytest.param({"weight": -2}, 1.0, id="negative"),
        pytest.param({"weight": float("inf")}, 1.0, id="inf"),
        pytest.param({"weight": "inf"}, 1.0, id="inf-string"),
        pytest.param({"weight": float("nan")}, 1.0, id="nan"),
        pytest.param({"weight": 10**400}, 1.0, id="past-the-largest-float"),
        pytest.param({"weight": "heavy"}, 1.0, id="not-a-number"),
        pytest.param({"weight": [2]}, 1.0, id="a-list"),
    ],
)
def test_a_queue_weight_is_finite_and_positive_else_1(spec: Any, weight: float) -> None:
    assert queue_weight(spec) == weight

