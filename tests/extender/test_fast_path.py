"""Filter and prioritize answer the same bytes on the ASGI short path as through FastAPI's route.

Two extenders are built from the same cluster; one has the short path switched off
(``app.fast_verbs = {}``), so every request goes through FastAPI's routing and
validation. The same sequence of requests — both cache modes, every pod class,
provisional placements carried from one pod to the next, and bodies that must be
refused — must get the same status, content type and body from both.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.extender.conftest import World, WorldFactory
from tests.extender.objects import GI, extender_args, node, opportunistic_pod, regular_pod

pytestmark = pytest.mark.timeout(60)

NODES = [node("n1"), node("n2"), node("n3", memory="64Gi"), node("n4", harvest=False)]
SAMPLES = {
    "n1": {"usage": {"cpu": 2.0, "memory": 4 * GI}},
    "n2": {"usage": {"cpu": 6.0, "memory": 13.2 * GI}},
    "n3": {"usage": {"cpu": 2.0, "memory": 8 * GI}},
    "n4": {"usage": {"cpu": 1.0, "memory": 1 * GI}, "contention": {"memory": 1}},
}
JSON = {"content-type": "application/json"}


def _pod(make: Any, name: str, **kwargs: Any) -> dict[str, Any]:
    pod = make(**kwargs)
    pod["metadata"]["name"] = name
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def _requests() -> list[tuple[str, bytes, dict[str, str]]]:
    """(verb, raw body, headers) in the order kube-scheduler would send them, then refusals."""
    out: list[tuple[str, bytes, dict[str, str]]] = []
    pods = [
        _pod(opportunistic_pod, "opp-a", memory="6Gi"),
        _pod(opportunistic_pod, "opp-b", memory="6Gi"),  # must see opp-a's provisional slot
        _pod(opportunistic_pod, "opp-huge", memory="60Gi"),
        _pod(regular_pod, "reg-a"),
    ]
    foreign = _pod(regular_pod, "foreign")
    foreign["spec"]["schedulerName"] = "default-scheduler"
    pods.append(foreign)
    for pod in pods:
        for cache in (True, False):
            args = extender_args(copy.deepcopy(pod), NODES, cache=cache)
            out.append(("filter", json.dumps(args).encode(), JSON))
            out.append(("prioritize", json.dumps(args).encode(), JSON))
    good = json.dumps(extender_args(regular_pod(), NODES, cache=True)).encode()
    out += [
        ("filter", good, {"content-type": "application/json; charset=utf-8"}),
        ("prioritize", good, {}),  # no content type: FastAPI's rule (strict or not) decides
        ("filter", good, {"content-type": "Application/JSON"}),
        ("filter", good, {"content-type": "text/plain"}),
        ("filter", good, {"content-type": "application/merge-patch+json"}),
        ("filter", b'{"Pod": ', JSON),
        ("prioritize", b"[]", JSON),
        ("filter", b'{"Nodes": null, "NodeNames": ["n1"]}', JSON),
        ("prioritize", json.dumps({"Pod": regular_pod(), "NodeNames": "n1"}).encode(), JSON),
        ("filter", b'{"Pod": {}, "NodeNames": [NaN]}', JSON),
        ("filter", b'{"Pod": {"spec": {"schedulerName": "x"}}, "Nodes": null, "NodeNames": ["\\ud800"]}', JSON),
        ("filter", b"", JSON),
    ]
    return out


def _answers(world: World) -> list[tuple[int, str, bytes]]:
    out = []
    for verb, body, headers in _requests():
        response = world.http.post(f"{world.url}/{verb}", content=body, headers=headers)
        out.append((response.status_code, response.headers.get("content-type", ""), response.content))
    return out


def test_the_short_path_answers_exactly_what_fastapi_answers(make_world: WorldFactory) -> None:
    short = make_world(NODES, samples=SAMPLES)
    routed = make_world(NODES, samples=SAMPLES)
    routed.app.fast_verbs = {}
    got, want = _answers(short), _answers(routed)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, f"request {i} ({_requests()[i][0]}, {_requests()[i][2]}): {a} != {b}"
    statuses = [status for status, _, _ in got]
    assert statuses.count(200) >= 20 and statuses.count(400) >= 5  # both paths were really exercised


def test_a_refused_body_is_not_counted_as_an_answered_request(make_world: WorldFactory) -> None:
    world = make_world(NODES, samples=SAMPLES)
    assert world.post("filter", extender_args(regular_pod(), NODES, cache=True)).status_code == 200
    refused = world.http.post(f"{world.url}/filter", content=b'{"Pod": ', headers=JSON)
    assert refused.status_code == 400
    metrics = world.http.get(f"{world.url}/metrics").text
    assert 'stowage_extender_request_seconds_count{verb="filter"} 1.0' in metrics


def test_the_short_path_records_request_latency(make_world: WorldFactory) -> None:
    world = make_world(NODES, samples=SAMPLES)
    for verb in ("filter", "prioritize"):
        args = extender_args(regular_pod(), NODES, cache=True)
        assert world.post(verb, args).status_code == 200
    metrics = world.http.get(f"{world.url}/metrics").text
    assert 'stowage_extender_request_seconds_count{verb="filter"} 1.0' in metrics
    assert 'stowage_extender_request_seconds_count{verb="prioritize"} 1.0' in metrics
