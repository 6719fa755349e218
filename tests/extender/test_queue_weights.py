"""Preempt weighs queues by their Queue objects' ``spec.weight``: the rule, the live weights, the served verb."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from stowage.extender.preemption import over_share_queues
from stowage.extender.queues import NOT_READ, QueueWeights, queue_weight

from stowage.kube.api import ApiError
from stowage.kube.records import PodRecord
from stowage.resources import ResourceVector
from tests.extender.conftest import World, WorldFactory
from tests.extender.objects import node, opportunistic_pod, preemption_args, regular_pod

pytestmark = pytest.mark.timeout(60)

RESOURCES = ("cpu", "memory")
TOTAL = np.array([10.0, 100.0])


def running(name: str, queue: str, cpu: float, *, opportunistic: bool = False) -> PodRecord:
    return PodRecord(key=f"batch/{name}", uid=f"uid-{name}", namespace="batch", name=name, node="n1",
                     opportunistic=opportunistic, queue=queue, demand=ResourceVector({"cpu": cpu, "memory": 1.0}),
                     bound_at_s=0.0, start_time_s=0.0)


def queue(name: str, weight: Any = None) -> dict[str, Any]:
    """A Queue as the API server serves it (the schema defaults ``spec.weight`` to 1; ``None`` leaves it out)."""
    spec = {} if weight is None else {"weight": weight}
    return {"apiVersion": "stowage.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": name, "resourceVersion": "7"}, "spec": spec}


# --- the rule: over_share_queues ---------------------------------------------------------------------

# big holds 6 of 10 cores (60 %), small 1.5 (15 %). The fair share is the dispatcher's weighted max-min
# (``fairness.fair_shares``; issue #34 replaced ``w/Σw``): the preemptor's queue wants more, every other queue what
# it holds, and a queue is over its share when it holds more than the level the preemptor's is filled to.
PODS = [running("big-0", "big", 4.0), running("big-1", "big", 2.0), running("small-0", "small", 1.5),
        running("etl-0", "etl", 3.0, opportunistic=True)]


@pytest.mark.parametrize(
    ("weights", "pending", "over"),
    [
        pytest.param(None, "small", {"big"}, id="no-weights-1-1"),
        pytest.param({"big": 1.0, "small": 1.0}, "small", {"big"}, id="1-1"),  # level 50 %: 60 % is above
        pytest.param({"big": 2.0, "small": 1.0}, "small", set(), id="2-1"),  # big's 2/3: 60 % is below
        pytest.param({"big": 2.0}, "small", set(), id="2-and-missing"),  # a queue without a Queue weighs 1
        pytest.param({"big": 9.0, "small": 1.0}, "small", set(), id="9-1"),  # big below its 90 %, small waits
        pytest.param({"big": 9.0, "small": 1.0}, "big", {"small"}, id="9-1-big-waits"),  # small's 10 %: 15 % above
        pytest.param({"big": 1.0, "small": 1.0, "new": 1.0}, "new", {"big"}, id="small-leaves-its-third"),
        pytest.param(None, None, set(), id="nobody-waits-nobody-over"),
    ],
)
def test_weights_decide_which_queues_are_above_their_fair_share(weights: dict[str, float] | None,
                                                                 pending: str | None, over: set[str]) -> None:
    waiting = {pending} if pending else set()
    assert over_share_queues(PODS, RESOURCES, TOTAL, weights, waiting) == over


def test_a_queue_holding_less_than_its_level_is_protected_where_w_over_sum_w_would_preempt_it() -> None:
    """big holds 40 %, small 5 %, new (the preemptor) nothing, weights 1:1:1. ``w/Σw`` says 1/3 each and big above
    it; max-min lets small keep its 5 % and fills big and new to 47.5 %: big is below its share, the free 55 %
    is new's to take without a preemption."""
    pods = [running("big-0", "big", 4.0), running("small-0", "small", 0.5)]
    assert over_share_queues(pods, RESOURCES, TOTAL, None, {"new"}) == set()


def test_the_preemptors_queue_counts_as_active_with_its_weight() -> None:
    # big alone holds 60 %: with no other queue active its fair share is 100 %.
    alone = [running("big-0", "big", 6.0)]
    assert over_share_queues(alone, RESOURCES, TOTAL, {"big": 2.0}) == set()
    # new (weight 3) preempts: big's fair share drops to 2/5 = 40 % < 60 %.
    assert over_share_queues(alone, RESOURCES, TOTAL, {"big": 2.0, "new": 3.0}, pending={"new"}) == {"big"}
    # with new at weight 1 big's fair share is 2/3 and big is not above it.
    assert over_share_queues(alone, RESOURCES, TOTAL, {"big": 2.0, "new": 1.0}, pending={"new"}) == set()


# --- the live weights: QueueWeights ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_weight", "expected"),
    [(None, 1.0), (2, 2.0), (0.5, 0.5), ("3", 3.0), (0, 1.0), (-2, 1.0), ("heavy", 1.0), (float("nan"), 1.0),
     (float("inf"), 1.0), ([2], 1.0)],
)
def test_a_weight_reads_leniently_as_the_operator_reads_it(spec_weight: Any, expected: float) -> None:
    assert queue_weight(queue("q", spec_weight)) == expected


def test_a_queue_without_spec_weighs_1() -> None:
    assert queue_weight({"metadata": {"name": "q"}}) == 1.0
    assert queue_weight({"metadata": {"name": "q"}, "spec": None}) == 1.0


def test_list_and_events_keep_the_weights() -> None:
    weights = QueueWeights()
    assert weights.weights() == {} and weights.error == NOT_READ
    weights.replace([queue("big", 2), queue("small"), {"metadata": {}}])
    assert weights.weights() == {"big": 2.0, "small": 1.0} and weights.error is None
    before = weights.weights()
    weights.apply("MODIFIED", queue("big", 4))
    weights.apply("ADDED", queue("new", 0.5))
    assert weights.weights() == {"big": 4.0, "small": 1.0, "new": 0.5}
    assert before == {"big": 2.0, "small": 1.0}  # a reader's mapping never changes under it
    weights.apply("DELETED", queue("big", 4))
    weights.apply("DELETED", queue("never-seen"))
    assert weights.weights() == {"small": 1.0, "new": 0.5}  # a deleted Queue's queue weighs 1 again
    weights.replace([queue("small", 3)])  # a relist: exactly what exists now
    assert weights.weights() == {"small": 3.0}


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refused_list_drops_every_weight_to_1_and_warns_once(status: int, caplog: pytest.LogCaptureFixture) -> None:
    weights = QueueWeights()
    weights.replace([queue("big", 2)])
    caplog.set_level(logging.INFO, logger="stowage.extender.queues")
    refused = ApiError(status, "Forbidden", 'queues.stowage.io is forbidden: cannot list resource "queues"')
    for _ in range(5):
        assert weights.failed(refused) is True  # reported: the informer logs its retries at DEBUG
    assert weights.weights() == {}
    assert weights.error is not None and f"HTTP {status}" in weights.error and "weighs 1" in weights.error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "list and watch on queues.stowage.io" in warnings[0].getMessage()
    weights.replace([queue("big", 2)])
    assert weights.weights() == {"big": 2.0} and weights.error is None
    assert any(r.levelno == logging.INFO and "readable again" in r.getMessage() for r in caplog.records)
    weights.failed(refused)  # a new run of failures warns again
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_a_transient_failure_keeps_the_last_weights(caplog: pytest.LogCaptureFixture) -> None:
    weights = QueueWeights()
    weights.replace([queue("big", 2)])
    weights.failed(ApiError(503, "ServiceUnavailable", "the API server is restarting"))
    weights.failed(ConnectionResetError("connection reset"))
    assert weights.weights() == {"big": 2.0}
    assert weights.error is not None and "keeps the last weights read (1 queues)" in weights.error
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


# --- the served verb: /preempt ---------------------------------------------------------------------------

NODES = [node("n1"), node("n2"), node("n3"), node("n4")]
ETL = opportunistic_pod("etl-run-0", node_name="n1")
HOG = regular_pod("hog-0", cpu="10", memory="10Gi", queue="hog", node_name="n2")
FAIR = regular_pod("fair-0", cpu="1", memory="1Gi", queue="research", node_name="n3")
# hog holds 40 of 64 cores (62.5 %), research 1: hog is above a fair share of 1/2 (weights 1:1), not of 2/3 (2:1).
RUNNING = [ETL, HOG, FAIR, *(regular_pod(f"hog-{i}", cpu="10", memory="10Gi", queue="hog", node_name=f"n{i}")
                             for i in (1, 3, 4))]


def kept(world: World, cache: bool) -> dict[str, list[str]]:
    args = preemption_args(regular_pod("new-0", queue="research"), {"n1": [ETL], "n2": [HOG], "n3": [FAIR]},
                           cache=cache)
    response = world.post("preempt", args)
    assert response.status_code == 200
    return {n: [p["UID"] for p in v["Pods"]] for n, v in response.json()["NodeNameToMetaVictims"].items()}


@pytest.mark.parametrize("cache", [True, False], ids=["meta-victims", "full-victims"])
def test_a_queue_weight_changes_the_victims_preempt_accepts(make_world: WorldFactory, cache: bool) -> None:
    weights = QueueWeights()
    world = make_world(NODES, pods=RUNNING, queue_weights=weights)
    weights.replace([])
    assert kept(world, cache) == {"n1": ["uid-etl-run-0"], "n2": ["uid-hog-0"]}  # hog weighs 1: above its share
    weights.apply("ADDED", queue("hog", 2))
    assert kept(world, cache) == {"n1": ["uid-etl-run-0"]}  # hog weighs 2: 62.5 % < 2/3, its pod is protected
    weights.apply("MODIFIED", queue("research", 2))
    assert kept(world, cache) == {"n1": ["uid-etl-run-0"], "n2": ["uid-hog-0"]}  # 2:2, fair share 1/2 again
    weights.apply("DELETED", queue("research", 2))
    assert kept(world, cache) == {"n1": ["uid-etl-run-0"]}
    weights.apply("DELETED", queue("hog", 2))
    assert kept(world, cache) == {"n1": ["uid-etl-run-0"], "n2": ["uid-hog-0"]}  # deleted: weight 1


def test_readyz_reports_queue_weights_that_cannot_be_read_and_stays_ready(make_world: WorldFactory) -> None:
    weights = QueueWeights()
    world = make_world(NODES, pods=RUNNING, queue_weights=weights)
    ready = world.http.get(f"{world.url}/readyz")
    assert ready.status_code == 200 and ready.json()["queue_weights_error"] == NOT_READ
    weights.replace([queue("hog", 2)])
    assert world.http.get(f"{world.url}/readyz").json()["queue_weights_error"] is None
    weights.failed(ApiError(403, "Forbidden", "cannot list resource queues"))
    ready = world.http.get(f"{world.url}/readyz")
    assert ready.status_code == 200
    assert "HTTP 403 Forbidden" in ready.json()["queue_weights_error"]
    assert kept(world, True) == {"n1": ["uid-etl-run-0"], "n2": ["uid-hog-0"]}  # unreadable: hog weighs 1
