"""Bodies the real kube-scheduler v1.30 sent under ``manifests/scheduler-config.yaml``, replayed to the extender.

``tests/extender/golden/<names|nodes>_<verb>.json`` (``{"path", "body"}``) were recorded through the fault
proxy of ``tests/scheduler`` (``python -m tests.scheduler.record_golden tests/extender/golden``) and trimmed to
two nodes: ``names_*`` with ``nodeCacheCapable: true`` (the manifest), ``nodes_*`` with it false. Each is
posted to an in-process extender over real HTTP; the answer must be what EXTENDER_PROTOCOL.md requires, and
the wire models must accept both the request and the answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from stowage.extender import wire

from tests.extender.conftest import World, WorldFactory
from tests.extender.objects import GI, node, regular_pod

pytestmark = pytest.mark.timeout(120)

GOLDEN = Path(__file__).with_name("golden")
FILES = sorted(GOLDEN.glob("*.json"))
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
ARGS_KEYS = {"Pod", "Nodes", "NodeNames"}
PREEMPT_KEYS = {"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def offered(body: dict[str, Any]) -> list[str]:
    """Node names the request offers (NodeNames, Nodes.items, or the victim maps' keys)."""
    if body.get("NodeNames") is not None:
        return list(body["NodeNames"])
    if body.get("Nodes") is not None:
        return [n["metadata"]["name"] for n in body["Nodes"]["items"]]
    return list(body.get("NodeNameToMetaVictims") or body.get("NodeNameToVictims") or {})


def node_objects() -> dict[str, dict[str, Any]]:
    """The real Node objects of the ``nodes_*`` recordings, and a look-alike for any other node named."""
    real: dict[str, dict[str, Any]] = {}
    for path in FILES:
        for item in ((load(path)["body"].get("Nodes") or {}).get("items")) or []:
            real[item["metadata"]["name"]] = item
    for path in FILES:
        for name in offered(load(path)["body"]):
            real.setdefault(name, node(name, cpu="8", memory="16Gi", allocatable_cpu="7500m",
                                       allocatable_memory="15Gi"))
    return real


def victim_pods(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a preempt request names, as the extender's pod watch would have delivered them."""
    pods: list[dict[str, Any]] = []
    for name, victims in (body.get("NodeNameToVictims") or {}).items():
        for pod in (victims or {}).get("Pods") or []:
            pods.append({**pod, "spec": {**pod["spec"], "nodeName": name}})
    for name, victims in (body.get("NodeNameToMetaVictims") or {}).items():
        for i, meta in enumerate((victims or {}).get("Pods") or []):
            # Only UIDs on the wire: the recorded scenario's victims were regular queue-"batch" pods of cpu 7.
            pod = regular_pod(f"low-{name}-{i}", cpu="7", memory="1Gi", queue="batch", node_name=name)
            pod["metadata"]["uid"] = meta["UID"]
            pods.append(pod)
    return pods


@pytest.fixture
def world_for(make_world: WorldFactory) -> Any:
    def build(body: dict[str, Any]) -> World:
        nodes = node_objects()
        samples = {n: {"usage": {"cpu": 0.2, "memory": 0.5 * GI}} for n in nodes}
        return make_world(list(nodes.values()), pods=victim_pods(body), samples=samples)

    return build


def test_the_golden_set_covers_each_verb_in_both_modes() -> None:
    names = {p.stem for p in FILES}
    assert {"names_filter", "names_prioritize", "names_preempt", "nodes_filter", "nodes_prioritize",
            "nodes_preempt"} <= names
    for path in FILES:
        golden = load(path)
        assert set(golden) == {"path", "body"}
        assert golden["path"] == f"/{path.stem.split('_', 1)[1]}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_wire_models_accept_the_golden_request(path: Path) -> None:
    golden = load(path)
    body, verb = golden["body"], golden["path"]
    cache = path.stem.startswith("names_")
    if verb in ("/filter", "/prioritize"):
        assert set(body) == ARGS_KEYS  # every key always present, the unused one null
        args = wire.ExtenderArgs.model_validate(body)
        assert (args.NodeNames is not None) is cache and (args.Nodes is not None) is not cache
        assert args.Pod.metadata is not None and args.Pod.metadata.uid
    else:
        assert set(body) == PREEMPT_KEYS
        args = wire.ExtenderPreemptionArgs.model_validate(body)
        assert (args.NodeNameToMetaVictims is not None) is cache and (args.NodeNameToVictims is not None) is not cache


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_extender_answers_the_golden_request_by_the_protocol(world_for: Any, path: Path) -> None:
    golden = load(path)
    body, verb = golden["body"], golden["path"]
    world = world_for(body)
    names = offered(body)

    response = world.post(verb.lstrip("/"), body)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    if verb == "/filter":
        assert set(answer) == FILTER_KEYS
        wire.ExtenderFilterResult.model_validate(answer)
        assert answer["Error"] == ""
        if body["NodeNames"] is not None:
            assert answer["Nodes"] is None and isinstance(answer["NodeNames"], list)
            passed = answer["NodeNames"]
        else:
            assert answer["NodeNames"] is None and isinstance(answer["Nodes"]["items"], list)
            passed = [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
        failed, unresolvable = answer["FailedNodes"] or {}, answer["FailedAndUnresolvableNodes"] or {}
        assert set(passed) <= set(names) and not set(passed) & set(failed) and not set(failed) & set(unresolvable)
        # An opportunistic pod of cpu 1 / memory 2Gi on idle nodes with fresh samples: every node passes.
        assert sorted(passed) == sorted(names), answer
    elif verb == "/prioritize":
        assert isinstance(answer, list)
        entries = [wire.HostPriority.model_validate(e) for e in answer]
        assert sorted(e.Host for e in entries) == sorted(names)
        assert all(0 <= e.Score <= 10 for e in entries)
    else:
        assert set(answer) == {"NodeNameToMetaVictims"}
        result = wire.ExtenderPreemptionResult.model_validate(answer)
        kept = result.NodeNameToMetaVictims or {}
        requested = {n: {p["metadata"]["uid"] for p in v["Pods"]} for n, v in (body["NodeNameToVictims"] or {}).items()}
        requested |= {n: {p["UID"] for p in v["Pods"]} for n, v in (body["NodeNameToMetaVictims"] or {}).items()}
        for name, victims in kept.items():
            uids = {p.UID for p in victims.Pods or []}
            assert uids and uids <= requested[name]  # never an empty list, only the scheduler's candidates
        # Queue "batch" holds 14 of the 15 cpus: above its fair half, so its victims are acceptable.
        assert set(kept) == set(names), answer
