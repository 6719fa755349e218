"""One rule decides a pod's class, and the extender, the cluster model and the node monitor agree on it.

Each row is a pod as the API server would hold it. For every row the three readers must give the same
answer: the extender harvests for it (or refuses it), the cluster model counts it as opportunistic, and
the node monitor may evict it, all together or none of them.
"""

from __future__ import annotations

import pytest
from stowage.extender.pods import parse_pod
from stowage.node_monitor.pods import pod_info

from stowage import labels
from stowage.errors import IntentError
from stowage.kube.records import pod_record
from stowage.labels import LABEL_CLASS, LABEL_OPPORTUNISTIC, PodClass, pod_class


def _pod(pod_labels: dict[str, str], requests: dict | None = None, limits: dict | None = None,
         annotations: dict | None = None) -> dict:
    resources: dict = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": pod_labels,
                     "annotations": annotations or {}},
        "spec": {"schedulerName": labels.SCHEDULER_NAME, "nodeName": "n1",
                 "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:10Z"},
    }


CONVERTED = {"cpu": "0", "memory": "0"}
DEMAND = {labels.ANN_DEMAND: '{"cpu": "1", "memory": "1Gi"}'}


def _extender_view(pod: dict) -> str:
    try:
        return "opportunistic" if parse_pod(pod).opportunistic else "regular"
    except IntentError:
        return "refused"


@pytest.mark.parametrize(
    ("pod", "extender", "opportunistic"),
    [
        pytest.param(_pod({LABEL_CLASS: "opportunistic"}, CONVERTED, annotations=DEMAND), "opportunistic", True,
                     id="converted-opportunistic"),
        pytest.param(_pod({LABEL_CLASS: "regular"}, {"cpu": "1"}), "regular", False, id="regular"),
        pytest.param(_pod({}, {"cpu": "1"}), "regular", False, id="plain"),
        # Intent without conversion: real requests, so it runs (and is protected) as regular everywhere.
        pytest.param(_pod({LABEL_OPPORTUNISTIC: "true"}, {"cpu": "1"}), "regular", False,
                     id="intent-true-not-converted"),
        # Contradiction: was placed as opportunistic by the extender but protected by the monitor.
        pytest.param(_pod({LABEL_CLASS: "opportunistic", LABEL_OPPORTUNISTIC: "false"}, CONVERTED, annotations=DEMAND),
                     "refused", False, id="class-opportunistic-with-opt-out"),
        pytest.param(_pod({LABEL_CLASS: "premium"}, {"cpu": "1"}), "refused", False, id="malformed-class"),
    ],
)
def test_every_reader_gives_a_pod_the_same_class(pod: dict, extender: str, opportunistic: bool) -> None:
    assert _extender_view(pod) == extender
    record = pod_record(pod, seen_at_s=0.0)
    assert record is not None and record.opportunistic is opportunistic
    info = pod_info(pod)
    assert info is not None and info.opportunistic is opportunistic


def test_the_contradiction_names_both_labels() -> None:
    with pytest.raises(IntentError) as caught:
        pod_class({LABEL_CLASS: "opportunistic", LABEL_OPPORTUNISTIC: "false"})
    assert LABEL_OPPORTUNISTIC in caught.value.field and LABEL_CLASS in str(caught.value)


def test_opt_out_on_a_regular_pod_is_no_contradiction() -> None:
    assert pod_class({LABEL_CLASS: "regular", LABEL_OPPORTUNISTIC: "false"}) is PodClass.REGULAR


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(_pod({LABEL_CLASS: "opportunistic"}, CONVERTED), id="zero-requests-no-limits-no-annotation"),
        pytest.param(_pod({LABEL_CLASS: "opportunistic"}), id="no-resources-at-all"),
        pytest.param(_pod({LABEL_CLASS: "opportunistic"}, CONVERTED, annotations={labels.ANN_DEMAND: "{}"}),
                     id="empty-demand-annotation"),
    ],
)
def test_an_opportunistic_pod_with_no_demand_is_refused_with_what_to_set(pod: dict) -> None:
    with pytest.raises(IntentError) as caught:
        parse_pod(pod)
    text = str(caught.value)
    assert labels.ANN_DEMAND in text and "resources.requests" in text and "limits" in text


def test_limits_are_an_opportunistic_pods_demand_when_the_annotation_is_missing() -> None:
    pod = _pod({LABEL_CLASS: "opportunistic"}, CONVERTED, limits={"cpu": "2", "memory": "1Gi"})
    assert parse_pod(pod).demand["cpu"] == 2.0


def test_the_routing_resource_is_not_demand() -> None:
    pod = _pod({LABEL_CLASS: "opportunistic"}, {**CONVERTED, labels.HARVEST_RESOURCE: "1"},
               limits={labels.HARVEST_RESOURCE: "1"}, annotations=DEMAND)
    parsed = parse_pod(pod)
    assert labels.HARVEST_RESOURCE not in parsed.demand and parsed.demand["cpu"] == 1.0
    record = pod_record(pod, seen_at_s=0.0)
    assert record is not None and labels.HARVEST_RESOURCE not in record.demand


def test_the_example_opportunistic_pod_is_what_every_reader_calls_opportunistic() -> None:
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "opportunistic-pod.yaml"
    pod = next(doc for doc in yaml.safe_load_all(path.read_text()) if doc["kind"] == "Pod")
    parsed = parse_pod(pod)
    assert parsed.ours and parsed.opportunistic and parsed.demand["memory"] == 2 * 2**30
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests[labels.HARVEST_RESOURCE] == "1" and requests["cpu"] == "0"
    assert pod["spec"]["priorityClassName"] == labels.OPPORTUNISTIC_PRIORITY_CLASS
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    bound["metadata"] = {**pod["metadata"], "uid": "u1"}
    assert pod_info(bound).opportunistic and pod_record(bound, 0.0).opportunistic
