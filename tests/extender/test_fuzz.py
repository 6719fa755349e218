"""Fuzzing: schemathesis against the served OpenAPI document, and hypothesis on raw bodies.

Whatever arrives, the extender answers within the timeout, never with a 5xx; a body
it cannot use gets a 400 whose ``error`` says what is wrong; a body it can use gets an
answer that parses as kube-scheduler's wire type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from stowage.extender import wire
from stowage.extender.app import create_app

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel
from stowage.prom import Utilization, UtilizationSnapshot
from tests.extender.objects import GI, node, opportunistic_pod, regular_pod
from tests.support.serving import serving

pytestmark = pytest.mark.timeout(180)

NODES = [node("n1"), node("n2", harvest=False), node("n3", disk_bandwidth="100Mi")]
RESPONSE_TYPES: dict[str, TypeAdapter[Any]] = {
    "/filter": TypeAdapter(wire.ExtenderFilterResult),
    "/prioritize": TypeAdapter(list[wire.HostPriority]),
    "/preempt": TypeAdapter(wire.ExtenderPreemptionResult),
}


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    model = ClusterModel()
    model.replace_nodes(NODES)
    model.replace_pods([opportunistic_pod("etl-run", node_name="n1"), regular_pod("reg-run", node_name="n3")])
    utilization = Utilization(
        None,
        initial=UtilizationSnapshot.from_nodes(
            {"n1": {"usage": {"cpu": 2.0, "memory": 4 * GI}}, "n3": {"usage": {"cpu": 1.0}, "contention": {"cpu": 1}}},
            fetched_at_s=Utilization(None).clock(),
        ),
    )
    with serving(create_app(StowageSettings(), model, utilization)) as url:
        yield url


@pytest.fixture(scope="module")
def api_schema(served: str) -> Any:
    return schemathesis.openapi.from_url(f"{served}/openapi.json")


def check(path: str, status: int, body: Any) -> None:
    assert status < 500, f"{path} answered {status}: {body!r}"
    if status == 400:
        assert isinstance(body, dict) and body.get("error"), body
    elif status == 200 and path in RESPONSE_TYPES:
        RESPONSE_TYPES[path].validate_python(body)


POSITIVE, NEGATIVE = schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE
# Negative cases need something to break: the GET endpoints take no input.
OPERATIONS = [
    (path, "POST", mode) for path in ("/filter", "/prioritize", "/preempt") for mode in (POSITIVE, NEGATIVE)
] + [("/readyz", "GET", POSITIVE), ("/healthz", "GET", POSITIVE)]


# schemathesis' own pytest plugin (from_fixture) does not run under this pytest; its Hypothesis
# strategies per operation do, which is all the plugin would do for us.
@pytest.mark.parametrize(("path", "method", "mode"), OPERATIONS, ids=[f"{m} {p} {g.value}" for p, m, g in OPERATIONS])
def test_schemathesis_finds_no_server_error_and_no_malformed_answer(
    api_schema: Any, served: str, path: str, method: str, mode: Any
) -> None:
    strategy = api_schema[path][method].as_strategy(generation_mode=mode)

    @given(case=strategy)
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        response = case.call(base_url=served, timeout=10)
        try:
            body = response.json()
        except ValueError:
            body = response.text
        check(path, response.status_code, body)

    run()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
pod_keys = st.sampled_from(["Pod", "Nodes", "NodeNames", "NodeNameToMetaVictims", "NodeNameToVictims", "junk"])
protocol_like = st.dictionaries(pod_keys, json_values, max_size=4)


def mutated_pods() -> st.SearchStrategy[dict[str, Any]]:
    """Realistic pods with one annotation, label or quantity replaced by arbitrary text."""
    base = st.sampled_from([opportunistic_pod(), regular_pod(), regular_pod(annotations={"x": "y"})])
    where = st.sampled_from(
        [
            ("metadata", "annotations", "stowage.io/demand"),
            ("metadata", "annotations", "stowage.io/disk-bandwidth"),
            ("metadata", "annotations", "stowage.io/data-nodes"),
            ("metadata", "labels", "stowage.io/class"),
            ("metadata", "labels", "stowage.io/opportunistic"),
        ]
    )

    def apply(pod: dict[str, Any], path: tuple[str, str, str], value: str) -> dict[str, Any]:
        pod = json.loads(json.dumps(pod))
        pod[path[0]][path[1]][path[2]] = value
        return pod

    return st.builds(apply, base, where, st.text(max_size=30))


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as client:
        yield client


@given(verb=st.sampled_from(["/filter", "/prioritize", "/preempt"]), body=st.binary(max_size=200))
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_raw_bytes_get_400_or_an_answer_never_5xx(served: str, http: httpx.Client, verb: str, body: bytes) -> None:
    response = http.post(f"{served}{verb}", content=body, headers={"content-type": "application/json"})
    check(verb, response.status_code, response.json())


@given(verb=st.sampled_from(["/filter", "/prioritize", "/preempt"]), body=protocol_like)
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_protocol_shaped_json_gets_400_or_an_answer(served: str, http: httpx.Client, verb: str, body: Any) -> None:
    response = http.post(f"{served}{verb}", json=body)
    check(verb, response.status_code, response.json())


@given(pod=mutated_pods(), verb=st.sampled_from(["/filter", "/prioritize", "/preempt"]))
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_malformed_annotations_never_crash_a_verb(
    served: str, http: httpx.Client, pod: dict[str, Any], verb: str
) -> None:
    body: dict[str, Any] = {"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n2", "n3", "ghost"]}
    if verb == "/preempt":
        body = {
            "Pod": pod,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-etl-run"}]}},
        }
    response = http.post(f"{served}{verb}", json=body)
    assert response.status_code == 200
    check(verb, 200, response.json())
    if verb == "/filter":
        answer = response.json()
        assert answer["Error"] == ""
        decided = set(answer["NodeNames"]) | set(answer["FailedNodes"]) | set(answer["FailedAndUnresolvableNodes"])
        assert decided == {"n1", "n2", "n3", "ghost"}
