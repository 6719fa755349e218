"""The allowance ``S`` from what is observed, in the extender: a new pod is assumed at its whole demand only until
its node's sample includes it (``policy.room``), and declared bandwidth is reserved by regular pods only."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from stowage.extender.messages import REASONS
from stowage.extender.snapshot import take

from stowage.config import StowageSettings
from stowage.kube.records import started_at
from stowage.labels import LABEL_JOB, LABEL_TASK_GROUP
from stowage.prom import index_peaks
from stowage.resources import DISK
from tests.extender.conftest import World, WorldFactory
from tests.extender.objects import GI, extender_args, node, opportunistic_pod, regular_pod

# NOW (conftest) is 2024-05-01T10:00:00Z. The new pod was bound 5 s ago, its container started 4 s ago.
BOUND, STARTED = "2024-05-01T09:59:55Z", "2024-05-01T09:59:56Z"
NODES = [node("n1")]  # 16 cores, 16 Gi
SAMPLES = {"n1": {"usage": {"cpu": 2.0, "memory": 4 * GI}}}  # A_opp: 12.4 cores, 10.4 Gi before S


def _new_pod(*, running: bool = True) -> dict[str, Any]:
    """A regular pod of 10 cores / 8 Gi, bound 5 s ago: alone it leaves 2.4 cores / 2.4 Gi harvestable while in S."""
    pod = regular_pod("fresh-0", cpu="10", memory="8Gi", node_name="n1")
    pod["status"]["conditions"][0]["lastTransitionTime"] = BOUND
    pod["status"]["startTime"] = BOUND
    state = {"running": {"startedAt": STARTED}} if running else {"waiting": {"reason": "ContainerCreating"}}
    pod["status"]["containerStatuses"] = [{"name": "main", "ready": running, "restartCount": 0, "state": state}]
    return pod


def _world(make_world: WorldFactory, pod: dict[str, Any], age_s: float, *, timed: bool = True) -> World:
    world = make_world(NODES, pods=[pod])
    world.samples(SAMPLES, age_s=age_s, timed=timed)
    return world


@pytest.mark.parametrize(("age_s", "running", "assumed_cpu"), [
    pytest.param(4.5, True, 10.0, id="sample-taken-before-the-container-started"),
    pytest.param(3.5, True, 10.0, id="sample-inside-its-first-period"),
    pytest.param(3.0, True, 0.0, id="first-sample-that-includes-it-ends-the-allowance"),
    pytest.param(0.5, True, 0.0, id="a-later-sample-includes-it-too"),
    pytest.param(0.5, False, 10.0, id="a-container-not-running-is-in-no-sample"),
])
def test_the_allowance_ends_on_the_first_sample_that_includes_the_pod(
    make_world: WorldFactory, age_s: float, running: bool, assumed_cpu: float
) -> None:
    world = _world(make_world, _new_pod(running=running), age_s)
    snap = take(world.model, world.utilization, world.settings, ["n1"])
    assert snap.assumed[0, 0] == pytest.approx(assumed_cpu)
    opp = world.post("filter", extender_args(opportunistic_pod(cpu="2", memory="3Gi"), NODES, cache=True)).json()
    # 2 cores / 3 Gi fit 12.4 / 10.4 once the pod is in U, not 2.4 / 2.4 while it is assumed
    assert opp["NodeNames"] == ([] if assumed_cpu else ["n1"])


def test_without_sample_times_the_allowance_lasts_the_ramp_up(make_world: WorldFactory) -> None:
    # A feed that does not say when its samples were taken includes no pod: the conservative answer.
    world = _world(make_world, _new_pod(), 0.5, timed=False)
    assert take(world.model, world.utilization, world.settings, ["n1"]).assumed[0, 0] == pytest.approx(10.0)


def test_a_pod_once_in_a_sample_is_not_assumed_again_when_its_object_changes(make_world: WorldFactory) -> None:
    pod = _new_pod()
    world = _world(make_world, pod, 0.5)
    assert take(world.model, world.utilization, world.settings, ["n1"]).assumed[0, 0] == 0.0
    changed = copy.deepcopy(pod)
    changed["metadata"]["labels"]["touched"] = "yes"
    world.model.apply_pod_event("MODIFIED", changed)
    assert take(world.model, world.utilization, world.settings, ["n1"]).assumed[0, 0] == 0.0


def test_a_stale_sample_still_harvests_nothing(make_world: WorldFactory) -> None:
    world = _world(make_world, _new_pod(), 45.0)  # it would include the pod, but it is older than 30 s
    opp = world.post("filter", extender_args(opportunistic_pod(cpu="1", memory="1Gi"), NODES, cache=True)).json()
    assert opp["NodeNames"] == []
    assert opp["FailedNodes"]["n1"] == REASONS["utilization-unavailable"]


def _status(**fields: Any) -> dict[str, Any]:
    return fields


@pytest.mark.parametrize(("status", "expected"), [
    pytest.param(_status(startTime=BOUND, containerStatuses=[{"state": {"running": {"startedAt": STARTED}}}]),
                 1714557596.0, id="running-container"),
    pytest.param(_status(startTime=BOUND, containerStatuses=[
        {"state": {"running": {"startedAt": BOUND}}}, {"state": {"running": {"startedAt": STARTED}}}]),
        1714557596.0, id="the-last-container-to-start"),
    pytest.param(_status(startTime=BOUND, containerStatuses=[
        {"state": {"running": {"startedAt": BOUND}}}, {"state": {"waiting": {}}}]), None, id="one-still-waiting"),
    pytest.param(_status(startTime=BOUND), 1714557595.0, id="no-container-statuses-start-time"),
    pytest.param(_status(), None, id="nothing-known"),
    pytest.param(_status(containerStatuses=[{"state": "garbage"}]), None, id="malformed-state"),
])
def test_when_a_pods_containers_started(status: dict[str, Any], expected: float | None) -> None:
    assert started_at(status) == expected


# --- declared bandwidth: regular pods only ----------------------------------------------------------------

DISK_NODES = [node("d1", disk_bandwidth="200Mi")]
MI = 2**20


def _bandwidth_world(make_world: WorldFactory, disk_used_mi: float) -> World:
    # d1 declares 200Mi/s; a running regular pod declared 100Mi/s of it, a running opportunistic pod 80Mi/s.
    reg = regular_pod("io-reg", cpu="1", node_name="d1", annotations={"stowage.io/disk-bandwidth": "100Mi"})
    opp = opportunistic_pod("io-opp", cpu="1", node_name="d1", annotations={"stowage.io/disk-bandwidth": "80Mi"})
    world = make_world(DISK_NODES, pods=[reg, opp])
    world.samples({"d1": {"usage": {"cpu": 2.0, "memory": 4 * GI, DISK: disk_used_mi * MI}}})
    return world


def test_only_regular_pods_declarations_count_against_a_regular_pod(make_world: WorldFactory) -> None:
    # The new rule: 200 − 100 (regular) = 100Mi/s free for a regular pod; the opportunistic pod's 80Mi/s reserves
    # nothing (under the old rule 20Mi/s were left and this pod was refused).
    world = _bandwidth_world(make_world, 20.0)
    pod = regular_pod("io-1", cpu="1", annotations={"stowage.io/disk-bandwidth": "90Mi"})
    assert world.post("filter", extender_args(pod, DISK_NODES, cache=True)).json()["NodeNames"] == ["d1"]
    over = regular_pod("io-2", cpu="1", annotations={"stowage.io/disk-bandwidth": "110Mi"})
    body = world.post("filter", extender_args(over, DISK_NODES, cache=True)).json()
    assert body["FailedNodes"]["d1"] == REASONS["bandwidth"]


@pytest.mark.parametrize(("disk_used_mi", "passes"), [(20.0, True), (150.0, False)])
def test_an_opportunistic_pods_bandwidth_fits_the_measured_harvested_room(
    make_world: WorldFactory, disk_used_mi: float, passes: bool
) -> None:
    # 150Mi/s declared: more than the declared room (100Mi/s), but measured like cpu and memory: 0.9 × 200 − used.
    world = _bandwidth_world(make_world, disk_used_mi)
    pod = opportunistic_pod("io-3", cpu="1", memory="1Gi", annotations={"stowage.io/disk-bandwidth": "150Mi"})
    body = world.post("filter", extender_args(pod, DISK_NODES, cache=True)).json()
    assert body["NodeNames"] == (["d1"] if passes else [])
    if not passes:
        assert body["FailedNodes"]["d1"] == REASONS["harvest-capacity"]


# --- declared bandwidth by estimated use (policy.use_estimates) -------------------------------------------------

SMALL_DISK = [node("d2", disk_bandwidth="100Mi")]


def _task_pod(name: str, node_name: str | None = None) -> dict[str, Any]:
    """A task pod of group ``read`` of Job ``etl`` declaring 80Mi/s of disk (a Job's task pods are named
    ``<job>-<group>-<index>`` and labelled with both)."""
    pod = regular_pod(name, cpu="1", memory="1Gi", node_name=node_name,
                      annotations={"stowage.io/disk-bandwidth": "80Mi"})
    pod["metadata"]["labels"].update({LABEL_JOB: "etl", LABEL_TASK_GROUP: "read"})
    return pod


@pytest.mark.parametrize(("seen", "passes"), [
    pytest.param({}, False, id="nothing-seen-both-count-as-declared"),
    pytest.param({("batch", "etl-read-0"): {DISK: 20 * MI}}, True, id="the-first-pods-use-seen"),
    pytest.param({("batch", "etl-read-0"): {DISK: 70 * MI}}, False, id="seen-near-its-declaration"),
])
def test_a_regular_pods_disk_is_packed_by_its_groups_estimated_use(
    make_world: WorldFactory, seen: dict[tuple[str, str], dict[str, float]], passes: bool
) -> None:
    # d2 declares 100Mi/s; etl-read-0 runs there declaring 80Mi/s. etl-read-1 declares 80Mi/s too: by declarations it
    # does not fit; once the group was seen using 20Mi/s, each pod of it counts 20 × 1.25 = 25Mi/s (25 + 25 ≤ 100).
    world = make_world(SMALL_DISK, pods=[_task_pod("etl-read-0", "d2")])
    world.samples({"d2": {"usage": {"cpu": 1.0, "memory": GI, DISK: 20 * MI}}})
    world.utilization.replace(dataclasses.replace(world.utilization.current, use_peaks=index_peaks(seen)))
    body = world.post("filter", extender_args(_task_pod("etl-read-1"), SMALL_DISK, cache=True)).json()
    assert body["NodeNames"] == (["d2"] if passes else [])
    if not passes:
        assert body["FailedNodes"]["d2"] == REASONS["bandwidth"]


@pytest.mark.parametrize(("fill", "passes"), [(1.0, False), (1.6, True), (0.5, False)])
def test_the_fill_threshold_is_the_dispatchers(make_world: WorldFactory, fill: float, passes: bool) -> None:
    # Nothing seen: both count 80Mi/s on d2's 100Mi/s; estimates.bandwidth_fill 1.6 lets estimated use fill 160.
    base = StowageSettings()
    settings = dataclasses.replace(base, estimates=dataclasses.replace(base.estimates, bandwidth_fill=fill))
    world = make_world(SMALL_DISK, pods=[_task_pod("etl-read-0", "d2")], settings=settings)
    world.samples({"d2": {"usage": {"cpu": 1.0, "memory": GI, DISK: 20 * MI}}})
    body = world.post("filter", extender_args(_task_pod("etl-read-1"), SMALL_DISK, cache=True)).json()
    assert body["NodeNames"] == (["d2"] if passes else [])
