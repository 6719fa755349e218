"""Pod groups (``stowage.io/pod-group``) without a cluster: the dispatcher's one gang per group (``snapshot.pod_gangs``)
and the take-back rules (``pod_groups.verdict``, ``listed``)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from stowage.operator import pod_groups
from stowage.operator.dispatch_records import PendingGroup
from stowage.operator.snapshot import pod_gangs

from stowage import labels
from stowage.kube.records import PodRecord
from stowage.resources import ResourceVector


def _member(name: str, cpu: float, memory: float = 1.0) -> PendingGroup:
    return PendingGroup(key=f"ns/{name}", queue="q", demand=ResourceVector({"cpu": cpu, "memory": memory}),
                        releasable=1, namespace="ns", group=name, arrival_s=float(name[-1]), remaining_tasks=1)


def test_a_whole_pod_group_is_one_gang_at_its_members_largest_demand() -> None:
    (g,) = pod_gangs({("ns", "mpi"): [_member("p2", 1, 4), _member("p1", 2, 1), _member("p3", 1)]}, {("ns", "mpi"): 3})
    assert g.key == f"ns/{labels.POD_GROUP_KEY}mpi" and g.group == "mpi"
    assert (g.releasable, g.gang, g.remaining_tasks) == (3, 3, 3)
    assert g.demand == ResourceVector({"cpu": 2, "memory": 4}) and g.arrival_s == 1.0


def test_a_pod_group_short_of_members_waits_for_them() -> None:
    (g,) = pod_gangs({("ns", "mpi"): [_member("p1", 1), _member("p2", 1)]}, {("ns", "mpi"): 3})
    assert (g.releasable, g.gang) == (2, 3)  # fewer waiting than the gang: the decision holds it (holding)


def _bound(name: str, *, started: bool = True, bound_at: float = 100.0) -> PodRecord:
    return PodRecord(key=f"ns/{name}", uid=name, namespace="ns", name=name, node="n", opportunistic=False,
                     queue="q", demand=ResourceVector({"cpu": 1}), bound_at_s=bound_at,
                     start_time_s=bound_at + 1 if started else None)


def test_the_verdicts() -> None:
    live = [_bound("a"), _bound("b"), _bound("c")]
    assert pod_groups.verdict(live, 0, 3, 1000.0, 300.0) == "ok"
    assert pod_groups.verdict(live[:2], 0, 3, 1000.0, 300.0) == "short"
    assert pod_groups.verdict(live[:2], 1, 3, 1000.0, 300.0) == "ok"  # the third is released, binding
    assert pod_groups.verdict([], 0, 3, 1000.0, 300.0) == "ok"  # nothing holds room
    slow = [_bound("a"), _bound("b"), _bound("c", started=False, bound_at=600.0)]
    assert pod_groups.verdict(slow, 0, 3, 800.0, 300.0) == "ok"
    assert pod_groups.verdict(slow, 0, 3, 901.0, 300.0) == "late"
    assert pod_groups.verdict(live[:2], 1, 3, 1000.0, 300.0, released_at=800.0) == "ok"
    assert pod_groups.verdict(live[:2], 1, 3, 1101.0, 300.0, released_at=800.0) == "late"  # never bound


def _listed(phase: str, *, gated: bool = False, deleting: bool = False, node: str | None = "n") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    spec: dict[str, Any] = {"schedulingGates": [{"name": labels.GATE_ADMISSION}]} if gated else {}
    if node is not None and not gated:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_a_member_that_succeeded_is_no_shortfall_one_that_failed_or_went_is() -> None:
    assert pod_groups.listed([_listed("Running"), _listed("Running"), _listed("Succeeded")], 3) == "whole"
    assert pod_groups.listed([_listed("Running"), _listed("Running"), _listed("Failed")], 3) == "short"
    assert pod_groups.listed([_listed("Running"), _listed("Running", deleting=True)], 3) == "short"
    assert pod_groups.listed([_listed("Running"), _listed("Running"), _listed("Pending", gated=True)], 3) == "short"
    assert pod_groups.listed([_listed("Running"), _listed("Running"), _listed("Pending", node=None)], 3) == "unbound"


class _Client:
    """What ``PodGroups`` asks of the API server: a list, deletes, Events."""

    def __init__(self, listed: list[dict[str, Any]]) -> None:
        self.listed, self.deleted, self.events, self.lists = listed, [], [], 0

    def list(self, path: str, params: Any = None) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return self.listed, "1"

    def delete(self, path: str) -> None:
        self.deleted.append(path.rsplit("/", 1)[-1])

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self.events.append(event)


def _grouped(name: str, **kwargs: Any) -> PodRecord:
    pod = _bound(name, **kwargs)
    return dataclasses.replace(pod, labels={labels.LABEL_POD_GROUP: "mpi", labels.LABEL_POD_GROUP_COUNT: "3"})


def _shell(pods: list[PodRecord], listed: list[dict[str, Any]]) -> tuple[pod_groups.PodGroups, _Client]:
    client = _Client(listed)
    cache = SimpleNamespace(cluster=SimpleNamespace(pods=lambda: pods), released_plain=dict)
    return pod_groups.PodGroups(client, cache, 300.0, dry_run=False), client  # type: ignore[arg-type]


def test_a_group_that_lost_a_member_is_taken_back_one_whose_member_succeeded_is_not() -> None:
    two = [_grouped("a"), _grouped("b")]
    shell, client = _shell(two, [_listed("Running"), _listed("Running"), _listed("Failed")])
    client.listed[0]["metadata"].update(name="a", uid="a")
    client.listed[1]["metadata"].update(name="b", uid="b")
    assert shell.take_back(1000.0) == 2 and sorted(client.deleted) == ["a", "b"]
    assert [e["reason"] for e in client.events] == ["GangTakenBack"] * 2
    assert shell.take_back(1001.0) == 0, "pods taken back are not counted again while they terminate"
    done, client = _shell(two, [_listed("Running"), _listed("Running"), _listed("Succeeded")])
    assert done.take_back(1000.0) == 0 and done.take_back(1001.0) == 0
    assert client.lists == 1, "a group seen whole is not listed again while its live pods stay the same"


def test_a_group_not_up_within_the_timeout_is_taken_back() -> None:
    slow = [_grouped("a"), _grouped("b"), _grouped("c", started=False, bound_at=600.0)]
    shell, client = _shell(slow, [])
    assert shell.take_back(850.0) == 0
    assert shell.take_back(901.0) == 3 and sorted(client.deleted) == ["a", "b", "c"]
    assert "not all of its pods were running 300 s after they were bound" in client.events[0]["message"]
