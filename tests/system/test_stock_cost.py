"""The cluster benchmark's harvesting-cost numbers (``stock.HarvestCost``), from made-up kubelet records: defined as
the simulator's summary defines them. No cluster needed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.system import stock


def _o(outcome: str, took: float, run_s: float | None, *, opp_s: float = 0.0, was_opp: bool = False,
       promoted: bool = False, opp_at_end: bool = False, work: float | None = None) -> dict[str, Any]:
    return {"started_at": 100.0, "ended_at": 100.0 + took, "outcome": outcome, "run_s": run_s,
            "opportunistic_s": opp_s, "was_opportunistic": was_opp, "promoted_at": 105.0 if promoted else None,
            "opportunistic_at_end": opp_at_end, "work_done": took if work is None else work}


def test_cost_from_the_kubelets_records() -> None:
    outcomes = [
        _o("Succeeded", 40.0, 40),                  # regular, not slowed
        _o("Succeeded", 44.0, 40),                  # regular, 10 % slower
        _o("Succeeded", 39.99, 40),                 # timer noise below its run-seconds: 0, as the simulator clips
        _o("Succeeded", 25.0, 20, opp_s=25.0, was_opp=True, opp_at_end=True),  # opportunistic: no slowdown counted
        _o("Succeeded", 30.0, 30, opp_s=5.0, was_opp=True, promoted=True),     # promoted after 5 s
        _o("Killed", 10.0, 30, opp_s=10.0, was_opp=True, opp_at_end=True, work=6.0),  # evicted: 6 s of work lost
        _o("Succeeded", 3.0, None),                 # no run-seconds: no slowdown
    ]
    cost = stock.HarvestCost.from_outcomes(outcomes)
    assert cost.regular_pods == 3
    assert cost.regular_slowdown_mean == pytest.approx(0.1 / 3)
    assert cost.regular_slowdown_p95 == pytest.approx(0.09)  # linear between order statistics (0, 0, 0.1)
    assert cost.run_s == pytest.approx(40 + 44 + 39.99 + 25 + 30 + 10 + 3)
    assert cost.harvested_s == pytest.approx(40.0)
    assert cost.harvested_fraction == pytest.approx(40.0 / cost.run_s)
    assert (cost.lost_s, cost.lost_fraction) == (6.0, pytest.approx(6.0 / 40.0))
    assert (cost.promotions, cost.evicted, cost.regular_killed) == (1, 1, 0)


def test_a_killed_regular_pod_is_counted_apart_and_nothing_is_zero() -> None:
    cost = stock.HarvestCost.from_outcomes([_o("Killed", 5.0, 40)])
    assert (cost.regular_killed, cost.evicted, cost.lost_s, cost.regular_pods) == (1, 0, 0.0, 0)
    assert (cost.harvested_fraction, cost.lost_fraction, cost.regular_slowdown_mean) == (0.0, 0.0, 0.0)


def test_cost_from_the_simulators_summary() -> None:
    cost = stock.HarvestCost.from_summary({"regular_slowdown_mean": 0.02, "regular_slowdown_p95": 0.07,
                                           "harvested_fraction": 0.25, "wasted_work_s": 12.0, "lost_fraction": 0.03,
                                           "promotions": 4, "evictions": 2})
    assert (cost.regular_slowdown_mean, cost.regular_slowdown_p95, cost.harvested_fraction) == (0.02, 0.07, 0.25)
    assert (cost.lost_s, cost.lost_fraction, cost.promotions, cost.evicted) == (12.0, 0.03, 4, 2)
    assert stock.HarvestCost.from_summary({}).harvested_fraction == 0.0  # an older simulator: zeros


def test_the_cost_table_divides_by_stock_and_by_the_arm_without_harvesting() -> None:
    def measured(makespan: float) -> stock.Measured:
        return stock.Measured(arm="x", jct={"j": makespan}, finish={"j": makespan}, arrival={"j": 0.0},
                              makespan=makespan, cost=stock.HarvestCost(0.01, 0.05, 0.2, 3.0, 0.015, 2, 1))

    def sim(makespan: float, preset: str) -> stock.Measured:
        return stock.Measured(arm=f"sim {preset}", jct={}, finish={}, arrival={}, makespan=makespan,
                              summary={"jct_mean_s": makespan}, cost=stock.HarvestCost.from_summary({}))

    pairs = [stock.Pair("stock", measured(100.0), sim(90.0, "kube-default")),
             stock.Pair("stowage", measured(80.0), sim(72.0, "stowage")),
             stock.Pair("stowage, no harvest", measured(90.0), sim(80.0, "stowage-regular"))]
    rows = stock.cost_rows(pairs)
    assert len(rows) == 6
    assert rows[2].startswith("| stowage, cluster | 80 | 0.80 | 0.89 | 80 | 1.0 % / 5.0 % | 20.0 % |")
    assert rows[3].startswith("| stowage, sim `stowage` | 72 | 0.80 | 0.90 |")
    assert "| 3 (1.5 %) | 2 | 1 |" in rows[2]
    assert stock.cost_rows(pairs[:2])[2].split(" | ")[3] == "–"  # no arm without harvesting: no ratio to it
