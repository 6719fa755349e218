"""A Job's tasks without a cluster: names, rendering, each task's state, the Job's plan (stowage.operator.tasks)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from stowage.operator import tasks
from stowage.operator.tasks import Outcome, Phase, TaskRef

from stowage import labels
from stowage.errors import InvalidInput

NOW = "2025-01-01T00:00:10Z"


def job(*groups: dict[str, Any], name: str = "train", suspend: bool = False, status: dict | None = None,
        opportunistic: str = "auto") -> dict[str, Any]:
    return {
        "apiVersion": "stowage.io/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": "job-uid", "generation": 1,
                     "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"queue": "research", "opportunistic": opportunistic, "suspend": suspend, "tasks": list(groups)},
        "status": status or {},
    }


def group(name: str, replicas: int = 2, depends_on: tuple[str, ...] = (), max_retries: int = 1,
          cpu: str = "1", duration: float | None = 30) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name, "replicas": replicas, "maxRetries": max_retries, "dependsOn": list(depends_on),
        "template": {"metadata": {"labels": {"app": "trainer", labels.LABEL_CLASS: "spoofed"}},
                     "spec": {"restartPolicy": "Always",
                              "containers": [{"name": "c", "image": "busybox",
                                              "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}},
    }
    if duration is not None:
        out["expectedDuration"] = duration
    return out


def pod(job_name: str, group_name: str, index: int, attempt: int = 0, phase: str = "Running",
        disruption: str | None = None, deleting: bool = False, opportunistic: bool = False,
        node: str | None = "n1") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": tasks.pod_name(job_name, group_name, index, attempt), "namespace": "ns",
        "uid": f"uid-{group_name}-{index}-{attempt}", "creationTimestamp": "2025-01-01T00:00:05Z",
        "labels": {labels.LABEL_JOB: job_name, labels.LABEL_TASK_GROUP: group_name,
                   labels.LABEL_CLASS: "opportunistic" if opportunistic else "regular"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:09Z"
    conditions = []
    if disruption:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase, "conditions": conditions}}


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "attempt", "name"), [
    pytest.param(0, 0, "train-map-0", id="first-attempt-has-no-suffix"),
    pytest.param(7, 2, "train-map-7-r2", id="later-attempts-get-r-n"),
])
def test_pod_names_are_deterministic_and_parse_back(index: int, attempt: int, name: str) -> None:
    assert tasks.pod_name("train", "map", index, attempt) == name
    assert tasks.parse_pod_name("train", "map", name) == (index, attempt)


@pytest.mark.parametrize("name", ["train-reduce-0", "train-map-x", "train-map-1-r", "other-map-0", "train-map-1-r2x"])
def test_names_of_other_tasks_do_not_parse(name: str) -> None:
    assert tasks.parse_pod_name("train", "map", name) is None


def test_indexes_round_trip_as_ranges() -> None:
    assert tasks.format_indexes([5, 0, 1, 2, 3, 7, 8]) == "0-3,5,7-8"
    assert tasks.parse_indexes("0-3,5,7-8") == {0, 1, 2, 3, 5, 7, 8}
    assert tasks.parse_indexes("garbage,,2") == {2}


# --- rendering -----------------------------------------------------------------------------------


def test_rendered_pod_carries_owner_labels_scheduler_and_never_restarts() -> None:
    j = job(group("map"))
    p = tasks.render_pod(j, TaskRef("map", 1, 2), labels.PodClass.REGULAR)
    meta = p["metadata"]
    assert meta["name"] == "train-map-1-r2" and meta["namespace"] == "ns"
    assert meta["ownerReferences"] == [{"apiVersion": "stowage.io/v1alpha1", "kind": "Job", "name": "train",
                                        "uid": "job-uid", "controller": True, "blockOwnerDeletion": True}]
    assert meta["labels"] == {"app": "trainer", labels.LABEL_JOB: "train", labels.LABEL_QUEUE: "research",
                              labels.LABEL_TASK_GROUP: "map", labels.LABEL_OPPORTUNISTIC: "auto",
                              labels.LABEL_CLASS: "regular"}
    assert meta["annotations"] == {labels.ANN_EXPECTED_DURATION: "30"}
    assert p["spec"]["schedulerName"] == labels.SCHEDULER_NAME
    assert p["spec"]["restartPolicy"] == "Never"
    assert j["spec"]["tasks"][0]["template"]["spec"]["restartPolicy"] == "Always", "the Job's spec is not modified"


def test_task_demand_is_the_templates_requests() -> None:
    assert tasks.task_demand(job(group("map", cpu="1500m")), "map").as_dict() == {"cpu": 1.5, "memory": 2**30}


def test_unknown_group_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput, match=r"spec.tasks\[\].name"):
        tasks.render_pod(job(group("map")), TaskRef("nope", 0), labels.PodClass.REGULAR)


# --- outcomes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "deleted", "outcome"), [
    pytest.param({"phase": "Running"}, False, Outcome.ACTIVE, id="running-is-active"),
    pytest.param({"phase": "Pending", "node": None}, False, Outcome.ACTIVE, id="unbound-is-active"),
    pytest.param({"phase": "Succeeded"}, False, Outcome.SUCCEEDED, id="succeeded"),
    pytest.param({"phase": "Succeeded", "deleting": True}, True, Outcome.SUCCEEDED, id="succeeded-then-deleted"),
    pytest.param({"phase": "Failed"}, False, Outcome.FAILED, id="failed-spends-a-retry"),
    pytest.param({"phase": "Failed", "disruption": "EvictionByEvictionAPI"}, False, Outcome.EVICTED,
                 id="evicted-by-node-monitor"),
    pytest.param({"phase": "Running", "disruption": "PreemptionByScheduler"}, False, Outcome.EVICTED,
                 id="preempted-by-extender"),
    pytest.param({"phase": "Running", "deleting": True, "opportunistic": True}, False, Outcome.EVICTED,
                 id="opportunistic-deleted"),
    pytest.param({"phase": "Running", "opportunistic": True}, True, Outcome.EVICTED, id="opportunistic-gone"),
    pytest.param({"phase": "Running", "deleting": True}, False, Outcome.LOST, id="regular-deleted-is-lost"),
    pytest.param({"phase": "Failed", "disruption": "TerminationByKubelet"}, False, Outcome.LOST,
                 id="kubelet-pressure-is-lost-not-failed"),
])
def test_pod_outcome(kwargs: dict[str, Any], deleted: bool, outcome: Outcome) -> None:
    assert tasks.pod_outcome(pod("train", "map", 0, **kwargs), deleted=deleted) is outcome


# --- plans ---------------------------------------------------------------------------------------


def test_new_job_releases_the_first_group_only_behind_a_barrier() -> None:
    plan = tasks.plan_job(job(group("map", 3), group("reduce", 1, depends_on=("map",))), [], now=NOW)
    assert plan.phase is Phase.PENDING
    assert plan.releasable == [TaskRef("map", 0), TaskRef("map", 1), TaskRef("map", 2)]
    reduce = plan.groups[1]
    assert reduce.waiting_on == ("map",) and reduce.pending == 1
    assert plan.status["groups"]["map"] == {"pending": 3, "running": 0, "succeeded": 0, "failed": 0, "evicted": 0,
                                            "completedIndexes": "", "startedIndexes": "", "attempts": {}}
    assert plan.status["progress"] == "0/4" and "startTime" not in plan.status


def test_barrier_opens_once_every_dependency_succeeded() -> None:
    j = job(group("map", 2), group("reduce", 1, depends_on=("map",)))
    half = tasks.plan_job(j, [pod("train", "map", 0, phase="Succeeded"), pod("train", "map", 1)], now=NOW)
    assert half.releasable == [] and half.phase is Phase.RUNNING
    assert half.groups[0].running == 1 and half.groups[0].succeeded == 1
    done = tasks.plan_job(j, [pod("train", "map", 0, phase="Succeeded"), pod("train", "map", 1, phase="Succeeded")],
                          now=NOW)
    assert done.releasable == [TaskRef("reduce", 0)]
    assert [p["metadata"]["name"] for p in done.finished] == ["train-map-0", "train-map-1"]


def test_in_flight_names_count_as_active_so_nothing_is_released_twice() -> None:
    plan = tasks.plan_job(job(group("map", 2)), [], now=NOW, in_flight={"train-map-0"})
    assert plan.releasable == [TaskRef("map", 1)]
    assert plan.phase is Phase.RUNNING


def test_a_failure_is_retried_as_the_next_attempt_until_max_retries() -> None:
    j = job(group("map", 1, max_retries=1))
    first = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed")], now=NOW)
    assert first.releasable == [TaskRef("map", 0, 1)]
    assert ("Warning", "TaskFailed") in [(t, r) for t, r, _ in first.events]
    out = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed"), pod("train", "map", 0, 1, phase="Failed")],
                         now=NOW)
    assert out.phase is Phase.FAILED and out.releasable == []
    assert out.status["conditions"][0]["type"] == "Failed"
    assert "failed more than maxRetries (1) times" in out.status["conditions"][0]["message"]
    assert out.status["completionTime"] == NOW


def test_an_eviction_requeues_without_spending_a_retry() -> None:
    j = job(group("map", 1, max_retries=0))
    plan = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed", disruption="EvictionByEvictionAPI",
                                  deleting=True, opportunistic=True)], now=NOW, new_evictions={"map": 1})
    assert plan.phase is Phase.RUNNING
    assert plan.releasable == [TaskRef("map", 0, 1)], "the old pod still exists: the next attempt gets a new name"
    assert plan.status["groups"]["map"]["evicted"] == 1 and plan.status["groups"]["map"]["failed"] == 0
    assert [r for _, r, _ in plan.events] == ["TaskEvicted"]
    gone = tasks.plan_job({**j, "status": plan.status}, [], now=NOW)
    assert gone.releasable == [TaskRef("map", 0, 1)], "once it is gone its name is still not reused"
    assert gone.status["groups"]["map"]["evicted"] == 1, "the count is kept in the status"


def test_a_failed_attempt_whose_pod_is_deleted_still_counts_toward_max_retries() -> None:
    j = job(group("map", 1, max_retries=1))
    first = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed")], now=NOW)
    assert first.status["groups"]["map"]["attempts"] == {"0": {"next": 1, "failed": [0]}}
    # The failed pod is deleted by hand; the retry fails too: two failures > maxRetries 1.
    out = tasks.plan_job({**j, "status": first.status}, [pod("train", "map", 0, 1, phase="Failed")], now=NOW)
    assert out.phase is Phase.FAILED and out.releasable == []
    assert out.status["groups"]["map"]["failed"] == 2
    assert out.status["groups"]["map"]["attempts"] == {"0": {"next": 2, "failed": [0, 1]}}


def test_a_failure_seen_both_in_the_status_and_in_its_pod_counts_once() -> None:
    j = job(group("map", 1, max_retries=1))
    first = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed")], now=NOW)
    again = tasks.plan_job({**j, "status": first.status}, [pod("train", "map", 0, phase="Failed")], now=NOW)
    assert again.releasable == [TaskRef("map", 0, 1)] and again.status["groups"]["map"]["failed"] == 1


@pytest.mark.parametrize("lost", [
    pytest.param({"phase": "Running"}, id="running-pod-deleted-by-hand"),
    pytest.param({"phase": "Failed", "disruption": "DeletionByPodGC", "deleting": True}, id="lost-with-its-node"),
    pytest.param({"phase": "Failed", "disruption": "EvictionByEvictionAPI", "opportunistic": True},
                 id="evicted-by-stowage"),
])
def test_a_task_whose_pod_is_gone_gets_a_fresh_name_and_spends_no_retry(lost: dict[str, Any]) -> None:
    j = job(group("map", 1, max_retries=0))
    names: list[str] = []
    status: dict[str, Any] = {}
    for attempt in range(3):  # each attempt is lost, then its pod disappears from the API
        seen = tasks.plan_job({**j, "status": status}, [pod("train", "map", 0, attempt, **lost)], now=NOW)
        gone = tasks.plan_job({**j, "status": seen.status}, [], now=NOW)
        assert gone.phase is Phase.RUNNING and gone.status["groups"]["map"]["failed"] == 0
        (task,) = gone.releasable
        names.append(task.pod_name("train"))
        status = gone.status
    assert names == ["train-map-0-r1", "train-map-0-r2", "train-map-0-r3"], "a name is never used twice"


def test_a_name_released_in_flight_is_remembered_even_if_its_pod_is_never_seen() -> None:
    j = job(group("map", 2))
    flying = tasks.plan_job(j, [], now=NOW, in_flight={"train-map-0"})
    assert flying.status["groups"]["map"]["startedIndexes"] == "0"
    after = tasks.plan_job({**j, "status": flying.status}, [], now=NOW)
    assert after.releasable == [TaskRef("map", 0, 1), TaskRef("map", 1, 0)]


def test_a_succeeded_task_keeps_its_failures_and_leaves_the_started_set() -> None:
    j = job(group("map", 2, max_retries=2))
    first = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed"), pod("train", "map", 1)], now=NOW)
    assert first.status["groups"]["map"]["startedIndexes"] == "0-1"
    done = tasks.plan_job({**j, "status": first.status}, [pod("train", "map", 0, 1, phase="Succeeded")], now=NOW)
    groups = done.status["groups"]["map"]
    assert (groups["startedIndexes"], groups["attempts"], groups["failed"]) == ("1", {"0": {"failed": [0]}}, 1)
    assert done.releasable == [TaskRef("map", 1, 1)], "task 1's running pod is gone: a fresh name"


def test_unreadable_attempt_records_are_skipped() -> None:
    j = job(group("map", 2))
    status = {"groups": {"map": {"attempts": {"x": {"next": 3}, "0": {"next": "bad"}, "7": {"next": 9},
                                              "1": {"next": 2, "failed": [0]}}}}}
    plan = tasks.plan_job({**j, "status": status}, [], now=NOW)
    assert plan.releasable == [TaskRef("map", 0, 0), TaskRef("map", 1, 2)]


def test_a_bound_pod_not_running_yet_is_pending_but_not_waiting_for_the_dispatcher() -> None:
    """Queue status pendingTasks counts ``unreleased``: a bound pod the kubelet has not started is released."""
    plan = tasks.plan_job(job(group("map", 3)), [pod("train", "map", 0, phase="Pending"),
                                                 pod("train", "map", 1, phase="Pending", node=None)], now=NOW)
    (g,) = plan.groups
    assert (g.pending, g.unbound, g.unreleased) == (3, 1, 1)


def test_a_succeeded_index_stays_done_when_its_pod_is_deleted() -> None:
    j = job(group("map", 2))
    plan = tasks.plan_job(j, [pod("train", "map", 0, phase="Succeeded")], now=NOW)
    again = tasks.plan_job({**j, "status": plan.status}, [], now=NOW)
    assert again.releasable == [TaskRef("map", 1)]
    assert again.finished == (), "the classifier learns from each success once"


def test_all_tasks_succeeded_completes_the_job_once() -> None:
    j = job(group("map", 1), group("reduce", 1, depends_on=("map",)))
    pods = [pod("train", "map", 0, phase="Succeeded"), pod("train", "reduce", 0, phase="Succeeded")]
    plan = tasks.plan_job(j, pods, now=NOW)
    assert plan.phase is Phase.SUCCEEDED and plan.terminal
    assert plan.status["progress"] == "2/2" and plan.status["completionTime"] == NOW
    assert plan.status["startTime"] == "2025-01-01T00:00:05Z", "the first pod's creation when none was recorded"
    assert [r for _, r, _ in plan.events] == ["Completed"]
    again = tasks.plan_job({**j, "status": plan.status}, pods, now="2025-01-01T00:01:00Z")
    assert again.events == () and again.status["completionTime"] == NOW


def test_suspend_stops_releasing_while_running_tasks_finish() -> None:
    j = job(group("map", 3), suspend=True)
    plan = tasks.plan_job(j, [pod("train", "map", 0)], now=NOW)
    assert plan.phase is Phase.SUSPENDED and plan.releasable == []
    assert plan.groups[0].running == 1 and plan.groups[0].pending == 2
    assert ("Normal", "Suspended") in [(t, r) for t, r, _ in plan.events]
    resumed = copy.deepcopy(j)
    resumed["spec"]["suspend"] = False
    resumed["status"] = plan.status
    out = tasks.plan_job(resumed, [pod("train", "map", 0)], now=NOW)
    assert out.phase is Phase.RUNNING and out.releasable == [TaskRef("map", 1), TaskRef("map", 2)]
    assert [r for _, r, _ in out.events] == ["Resumed"]


def test_a_failed_job_deletes_its_active_pods() -> None:
    j = job(group("map", 2, max_retries=0))
    plan = tasks.plan_job(j, [pod("train", "map", 0, phase="Failed"), pod("train", "map", 1)], now=NOW)
    assert plan.phase is Phase.FAILED and plan.delete == ("train-map-1",)


def test_opportunistic_running_and_remaining_work_are_reported() -> None:
    j = job(group("map", 4, cpu="2", duration=10))
    plan = tasks.plan_job(j, [pod("train", "map", 0, opportunistic=True), pod("train", "map", 1, phase="Succeeded")],
                          now=NOW, mean_capacity={"cpu": 4.0, "memory": 4 * 2**30})
    assert plan.status["opportunisticRunning"] == 1
    # three unfinished tasks x 10 s x (2/4 cpu + 1/4 memory)
    assert plan.status["remainingWork"] == pytest.approx(3 * 10 * 0.75)


def test_pods_of_other_jobs_and_groups_are_ignored() -> None:
    stray = pod("train", "map", 0)
    stray["metadata"]["name"] = "train-map-zero"
    other = pod("other", "map", 0)
    plan = tasks.plan_job(job(group("map", 1)), [stray, other], now=NOW)
    assert plan.releasable == [TaskRef("map", 0)]


def test_prefer_node_adds_a_preference_and_keeps_the_templates_affinity() -> None:
    own = {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}
    spec = {"containers": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": required,
        "preferredDuringSchedulingIgnoredDuringExecution": [own]}}}
    before = copy.deepcopy(spec)
    out = tasks.prefer_node(spec, "node-7")
    assert spec == before  # a copy
    node_affinity = out["affinity"]["nodeAffinity"]
    assert node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] == required
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [own, {
        "weight": tasks.NODE_HINT_WEIGHT,
        "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}}]
    assert tasks.prefer_node({"containers": []}, "n")["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]["matchFields"][0]["values"] == ["n"]
