"""Pod groups (``stowage.io/pod-group``) without a cluster: the dispatcher's one gang per group (``snapshot.pod_gangs``)
and the take-back rules (``pod_groups.verdict``, ``confirmed_short``)."""

from __future__ import annotations

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


def _listed(phase: str, *, gated: bool = False, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    spec = {"schedulingGates": [{"name": labels.GATE_ADMISSION}]} if gated else {}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_a_member_that_succeeded_is_no_shortfall_one_that_failed_or_went_is() -> None:
    assert not pod_groups.confirmed_short([_listed("Running"), _listed("Running"), _listed("Succeeded")], 3)
    assert pod_groups.confirmed_short([_listed("Running"), _listed("Running"), _listed("Failed")], 3)
    assert pod_groups.confirmed_short([_listed("Running"), _listed("Running", deleting=True)], 3)
    assert pod_groups.confirmed_short([_listed("Running"), _listed("Running"), _listed("Pending", gated=True)], 3)
