"""Fairness over time (``packing.queue_share_deficit_s``, a deficit counter) on the simulator: 2:1 weights.

Three nodes of 7 cores, 21 one-core slots. Queue ``a`` (weight 2) holds one job of 300 one-minute tasks; queue
``b`` (weight 1) 400 one-task jobs of 20 s (both × 6 for the hour). Both always have work waiting over the
measured span. Without the between-queue rule the remaining-work score hands every slot to ``b``'s tiny jobs;
weighted DRF gives a → 14 cores, b → 7. Measured: the mean dominant share of each queue over the first 600 s
(or hour), sampled each second. A deficit threshold D lets the time-averaged shares drift by about D / span:
measured a/b over 600 s: D = 1 to 10 → 2.00, 30 → 1.51, 100 → 1.00; over an hour: 10 → 2.00, 30 → 1.95,
100 → 1.77, 300 → 1.40.
"""

from __future__ import annotations

import dataclasses

import pytest

from stowage.config import StowageSettings
from stowage.model import JobOrder
from stowage.sim.engine import SimConfig, simulate
from stowage.sim.workload import QueueSpec
from tests.sim.kit import FLAT, group, job, nodes, workload

SPAN_S = 600.0


def _ratio(deficit_s: float, slack: float = 0.01, span_s: float = SPAN_S, guard: bool = False) -> float:
    scale = span_s / SPAN_S
    jobs = [job("a", 0.0, group("t", round(300 * scale), 60.0), queue="a")]
    jobs += [job(f"b{i}", 0.0, group("t", 1, 20.0), queue="b") for i in range(round(400 * scale))]
    queues = (QueueSpec("a", 2.0, JobOrder.SRTF, False), QueueSpec("b", 1.0, JobOrder.SRTF, False))
    w = workload(nodes(3, cpu=7.0, memory=100.0), jobs, queues)
    base = StowageSettings()
    # The starvation guard is off: the deficit counter alone is measured (see the last test for both).
    settings = dataclasses.replace(base, packing=dataclasses.replace(
        base.packing, queue_share_deficit_s=deficit_s, queue_share_slack=slack,
        starvation_skip_limit=base.packing.starvation_skip_limit if guard else 0))
    result = simulate(w, "stowage", config=SimConfig(settings=settings, usage=FLAT, sample_s=1.0))
    t, shares = result.series["t"], result.series["shares"]
    span = t < span_s
    a, b = shares[span].mean(axis=0)
    return float(a / b) if b > 0 else float("inf")


def test_strict_weighted_drf_gives_2_to_1() -> None:
    assert _ratio(0.0) == pytest.approx(2.0, rel=0.05)


def test_without_the_queue_rule_the_small_jobs_take_the_cluster() -> None:
    # The workload is one where the rule matters: with a slack as large as the pool, b takes far more than 1/3.
    assert _ratio(0.0, slack=1.0) < 1.0


@pytest.mark.parametrize("deficit_s", [1.0, 10.0])
def test_a_deficit_counter_keeps_2_to_1_within_15_percent_over_ten_minutes(deficit_s: float) -> None:
    # D = 10: a queue may be owed 10 pool-seconds, 1/60 of the pool over the 600 s measured.
    assert _ratio(deficit_s) == pytest.approx(2.0, rel=0.15)


def test_a_larger_deficit_keeps_2_to_1_within_15_percent_over_an_hour() -> None:
    # D = 100 pool-seconds is 1/36 of the pool over an hour; over ten minutes it lets b keep the cluster (below).
    assert _ratio(100.0, span_s=3600.0) == pytest.approx(2.0, rel=0.15)


def test_a_deficit_as_large_as_the_span_gives_the_shares_away() -> None:
    # D = 100 pool-seconds over 600 s: b's small jobs keep most of the cluster for the measured span.
    assert _ratio(100.0) < 1.5


def test_the_starvation_guard_undoes_a_large_deficit_for_a_queue_of_many_tiny_jobs() -> None:
    """Measured, not wanted: with D = 100 and the guard on (the operator's default, which the simulator's
    ``stowage`` preset now runs too), b's one-task jobs, held back by the deficits, count as passed over, become
    starved after ``starvation_skip_limit`` passes and then bypass the queue rule: over an hour b gets more
    than a despite weights 2:1 (measured 0.57). Strict weighted DRF (D = 0) keeps 2:1 with the guard on."""
    assert _ratio(100.0, span_s=3600.0, guard=True) < 1.0
    assert _ratio(0.0, guard=True) == pytest.approx(2.0, rel=0.05)
