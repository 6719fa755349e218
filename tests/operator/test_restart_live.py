"""Restart safety on a real control plane: SIGKILL mid-Job duplicates nothing; the classifier keeps what it
learned and the decayed queue usage survive the ConfigMap; with peering only one operator acts. The peering rule itself
is checked first, without a cluster."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from stowage.operator import cli, crd, jobs, runtime

from stowage import labels
from tests.operator.support import OPERATOR_NAMESPACE, OperatorStack, PodLedger, job_body, wait_for
from tests.scheduler.stack import Proc

pytestmark = pytest.mark.timeout(900)

NOW = 1_700_000_000.0


def _peer(priority: int, seen_s_ago: float, lifetime: int = 30) -> dict:
    import datetime as dt

    seen = dt.datetime.fromtimestamp(NOW - seen_s_ago, dt.UTC).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen}


@pytest.mark.parametrize(("peers", "blockers"), [
    pytest.param({}, [], id="alone-acts"),
    pytest.param({"me": _peer(5, 0)}, [], id="own-record-ignored"),
    pytest.param({"old": _peer(4, 1)}, [], id="lower-priority-peer-does-not-block"),
    pytest.param({"new": _peer(6, 1)}, ["new"], id="higher-priority-peer-blocks"),
    pytest.param({"twin": _peer(5, 1)}, ["twin"], id="same-priority-blocks-as-kopf-does"),
    pytest.param({"dead": _peer(9, 31)}, [], id="peer-past-its-lifetime-is-dead"),
])
def test_peering_pauses_exactly_when_kopf_would(peers: dict, blockers: list[str]) -> None:
    assert cli.outranked(peers, "me", 5, NOW) == blockers


def test_a_finished_task_teaches_the_classifier_once_across_restarts() -> None:
    learned = jobs.LearnedTasks(window_s=60)
    assert learned.fresh("u1", 1000.0)
    learned.add("u1", 1000.0)
    learned.add("u2", 1100.0)
    assert not learned.fresh("u1", 1000.0) and not learned.fresh("u2", 1100.0)
    assert learned.until == 1040.0 and not learned.fresh("u0", 1039.0), "older than the window: by time alone"
    again = jobs.LearnedTasks(window_s=60)
    again.load(json.loads(json.dumps(learned.state())))
    assert not again.fresh("u2", 1100.0) and again.fresh("u3", 1100.0), "the state survives a restart"


def test_the_command_line_refuses_contradictions_naming_the_flags() -> None:
    from click.testing import CliRunner

    from stowage.cli import main

    runner = CliRunner()
    for argv, message in ((["--namespace", "a", "--all-namespaces"], "--namespace and --all-namespaces"),
                          (["--webhook-url", "auto"], "--webhook-url/--webhook-service need --webhook-cert"),
                          (["--webhook-service", "nope"], "expected NAMESPACE/NAME")):
        result = runner.invoke(main, ["operator", *argv])
        assert result.exit_code == 2 and message in result.output, result.output
    assert "--peering NAME" in runner.invoke(main, ["operator", "--help"]).output


@pytest.fixture
def ns(operator_stack: OperatorStack) -> Iterator[str]:
    with operator_stack.namespace("restart") as name:
        yield name


def _state(stack: OperatorStack) -> dict:
    cm = stack.core.read_namespaced_config_map(runtime.STATE_CONFIGMAP, OPERATOR_NAMESPACE)
    return json.loads(cm.data[runtime.STATE_KEY])


def test_an_operator_killed_mid_job_and_restarted_duplicates_nothing(operator_stack: OperatorStack, ns: str) -> None:
    stack = operator_stack
    ledger = PodLedger(stack.api, ns).start()
    first = stack.start_operator(webhooks=False)
    second: Proc | None = None
    try:
        # 2-core tasks: nine fit at once on the three nodes, so the 14 of group a run in two waves.
        body = job_body("wave", [{"name": "a", "replicas": 14, "cpu": "2", "run_s": 6},
                                 {"name": "b", "replicas": 3, "cpu": "2", "run_s": 3, "dependsOn": ["a"]}],
                        stack_id=stack.id)
        stack.create_job(ns, body)

        def mid_job() -> bool:
            # The kill must leave work in flight: the first wave's nine pods finish within a fraction of a
            # second of each other, so "some done, some running" there was a race (CI once killed the
            # operator after all nine had finished and before it released the second wave). The second
            # wave's pods, none finished yet, each have seconds to run.
            pods = stack.pods(ns)
            second = [p for p in pods if p.metadata.name.startswith("wave-a-") and int(p.metadata.name[7:]) >= 9]
            done = sum(1 for p in pods if p.status.phase == "Succeeded")
            return done >= 9 and bool(second) and all(p.status.phase != "Succeeded" for p in second)

        wait_for(mid_job, 240, "the job half-way: the first wave done, the second released and running")
        before = {p.metadata.name: p.metadata.uid for p in stack.pods(ns)}
        first.kill()  # SIGKILL: no cleanup, status as half-written as it may be

        def succeeded() -> int:
            return sum(1 for p in stack.pods(ns) if p.status.phase == "Succeeded")

        done_at_kill = succeeded()
        # On a timeout the message says what the pods were doing (it is how the race above was found).
        try:
            wait_for(lambda: succeeded() > done_at_kill, 60, "tasks finishing while no operator runs")
        except AssertionError as exc:
            phases = {p.metadata.name: (p.status.phase, p.spec.node_name) for p in stack.pods(ns)}
            raise AssertionError(f"{exc}; {done_at_kill} succeeded at the kill; pods now: {phases}") from None
        second = stack.start_operator(webhooks=False)
        job = stack.wait_job_phase(ns, "wave", "Succeeded")
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.stop()
        ledger.stop()

    assert ledger.duplicates() == {}, "a task pod was created twice under one name"
    pods = stack.pods(ns)
    names = sorted(p.metadata.name for p in pods)
    expected = sorted([f"wave-a-{i}" for i in range(14)] + [f"wave-b-{i}" for i in range(3)])
    assert names == expected, "every task exactly once: no retry, no eviction, no duplicate"
    assert all(p.status.phase == "Succeeded" for p in pods)
    assert all(before[n] == next(p.metadata.uid for p in pods if p.metadata.name == n) for n in before), \
        "pods made before the kill were adopted, not replaced"
    assert job["status"]["groups"]["a"]["succeeded"] == 14 and job["status"]["groups"]["b"]["succeeded"] == 3


def test_the_classifier_keeps_what_it_learned_across_a_restart(operator_stack: OperatorStack, ns: str,
                                                                 tmp_path: Path) -> None:
    stack = operator_stack
    config = tmp_path / "stowage.yaml"  # a short usage half-life: the decayed queue usage is saved too
    config.write_text("packing:\n  queue_usage_half_life_s: 30\n")
    proc = stack.start_operator(webhooks=False, extra=("--config", str(config)))
    try:
        stack.create_job(ns, job_body("learn", [{"name": "s", "replicas": 3, "run_s": 1}], stack_id=stack.id))
        stack.wait_job_phase(ns, "learn", "Succeeded")
    finally:
        proc.stop()  # SIGTERM: the state is written on the way out
    saved = _state(stack)
    assert saved, "the classifier's state is in the ConfigMap"
    assert saved["version"] == 5 and "default" in saved["usage"]["regular"]["queues"], saved["usage"]
    again = stack.start_operator(webhooks=False, extra=("--config", str(config)))
    try:
        wait_for(lambda: "classifier state loaded" in again.tail(200_000), 60, "the state loaded at start")
    finally:
        again.stop()
    assert _state(stack) == saved, "nothing learned or owed was lost (nothing new ran in between)"


def test_dry_run_decides_but_writes_nothing(operator_stack: OperatorStack, ns: str) -> None:
    stack = operator_stack
    proc = stack.start_operator(webhooks=False, extra=("--dry-run",))
    try:
        stack.create_job(ns, job_body("dry", [{"name": "a", "replicas": 2, "run_s": 1}], stack_id=stack.id))
        wait_for(lambda: "dry run: would create" in proc.tail(200_000), 60, "the dry run's decision in the log")
    finally:
        proc.stop()
    assert stack.pods(ns) == [] and "status" not in stack.job(ns, "dry")


def test_an_operator_of_one_namespace_leaves_the_others_alone(operator_stack: OperatorStack, ns: str) -> None:
    stack = operator_stack
    with stack.namespace("other") as other:
        proc = stack.start_operator(webhooks=False, extra=("--namespace", ns))
        try:
            stack.create_job(other, job_body("theirs", [{"name": "a", "replicas": 1, "run_s": 1}], stack_id=stack.id))
            stack.create_job(ns, job_body("ours", [{"name": "a", "replicas": 2, "run_s": 1}], stack_id=stack.id))
            stack.wait_job_phase(ns, "ours", "Succeeded")
        finally:
            proc.stop()
        assert stack.pods(other) == [] and "status" not in stack.job(other, "theirs")


def test_with_peering_only_the_newest_operator_acts(operator_stack: OperatorStack, ns: str) -> None:
    stack = operator_stack
    older = stack.start_operator(webhooks=False, peering="stowage-test")
    newer: Proc | None = None
    try:
        newer = stack.start_operator(webhooks=False, peering="stowage-test")
        wait_for(lambda: "pausing the dispatcher: outranked by" in older.tail(200_000), 60,
                 "the older operator standing by")
        stack.create_job(ns, job_body("peer", [{"name": "a", "replicas": 3, "run_s": 2}], stack_id=stack.id))
        stack.wait_job_phase(ns, "peer", "Succeeded")
        assert "outranked" not in newer.tail(200_000), "the newest operator acts"
        newer.kill()  # the active one dies without a word: the stand-by takes over once its record expires
        stack.create_job(ns, job_body("after", [{"name": "a", "replicas": 2, "run_s": 2}], stack_id=stack.id))
        stack.wait_job_phase(ns, "after", "Succeeded", timeout_s=180)
        assert re.search(r"acting again", older.tail(200_000)), older.tail(3000)
    finally:
        for proc in (older, newer):
            if proc is not None:
                proc.stop()


def _observed(stack: OperatorStack) -> int:
    """How many finished tasks the classifier saved in the ConfigMap has learned from (0 without one)."""
    try:
        return int(sum(_state(stack)["classifier"]["class_counts"]))
    except client.ApiException as exc:
        if exc.status == 404:
            return 0
        raise


def test_a_standby_never_overwrites_the_leaders_state_and_a_resumed_one_forgets_deleted_jobs(
        operator_stack: OperatorStack, ns: str) -> None:
    """Issue #31, defects 8 and 10, with three peered operators (the newest acts):

    - A standby that never acted stops gracefully: the ConfigMap keeps what the leader learned (it used to write its
      start-time classifier over it on the way out).
    - A Job deleted while an operator stood by (Kopf paused: no DELETED event reached it) is not released again
      when that operator acts again (it used to create the deleted Job's pods on every pass)."""
    stack = operator_stack
    with contextlib.suppress(client.ApiException):
        stack.core.delete_namespaced_config_map(runtime.STATE_CONFIGMAP, OPERATOR_NAMESPACE)
    procs: list[Proc] = []
    try:
        first = stack.start_operator(webhooks=False, peering="stowage-handoff")
        procs.append(first)
        second = stack.start_operator(webhooks=False, peering="stowage-handoff")
        procs.append(second)
        wait_for(lambda: "pausing the dispatcher: outranked by" in first.tail(200_000), 60, "the first standing by")
        stack.create_job(ns, job_body("gone", [{"name": "a", "replicas": 1, "run_s": 900}], stack_id=stack.id))
        stack.create_job(ns, job_body("learn", [{"name": "s", "replicas": 3, "run_s": 1}], stack_id=stack.id))
        stack.wait_job_phase(ns, "learn", "Succeeded")
        wait_for(lambda: stack.pods(ns, f"{labels.LABEL_JOB}=gone"), 60, "the long Job's pod")
        wait_for(lambda: _observed(stack) >= 3, 90, "the leader saving what it learned (every 30 s)")
        third = stack.start_operator(webhooks=False, peering="stowage-handoff")
        procs.append(third)
        wait_for(lambda: "pausing the dispatcher: outranked by" in second.tail(200_000), 60, "the second standing by")

        learned = _observed(stack)
        first.stop()  # SIGTERM: a standby since it started, it never acted
        assert _observed(stack) >= learned, "the standby wrote its start-time state over the leader's"

        stack.objects.delete_namespaced_custom_object(crd.GROUP, crd.VERSION, ns, crd.JOB.plural, "gone")
        wait_for(lambda: not stack.pods(ns, f"{labels.LABEL_JOB}=gone"), 120, "the deleted Job's pods collected")
        third.kill()  # the leader dies: the second acts again once its peering record expires
        wait_for(lambda: re.search(r"acting again", second.tail(200_000)), 120, "the second acting again")
        stack.create_job(ns, job_body("after", [{"name": "a", "replicas": 1, "run_s": 1}], stack_id=stack.id))
        stack.wait_job_phase(ns, "after", "Succeeded", timeout_s=120)
        assert not stack.pods(ns, f"{labels.LABEL_JOB}=gone"), "a Job deleted during the standby was released again"
        assert "released 1 task(s) of " + f"{ns}/gone" not in second.tail(200_000).split("acting again", 1)[-1]
    finally:
        for proc in procs:
            proc.stop()
