"""The reported numbers mean what the report says."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim.engine import SimConfig, simulate
from stowage.sim.metrics import slowed_fraction
from tests.sim.kit import FLAT, group, job, nodes, workload

FLAT_CHECKED = SimConfig(usage=FLAT, check=True)


@pytest.mark.parametrize(
    ("jobs", "bound"),
    [
        # Work bound: 8 tasks × 10 s × 1 cpu over 2 nodes × 4 cpus = 10 s.
        pytest.param([job("a", 0, group("g", 8, 10.0))], 10.0, id="work-bound"),
        # Path bound: last arrival 100 + its chain 10 + 20 = 130 s beats the work bound.
        pytest.param([job("a", 0, group("g", 1, 10.0)),
                      job("b", 100, group("m", 1, 10.0), group("r", 1, 20.0, deps=["m"]))], 130.0, id="path-bound"),
        # Memory is the binding resource: 4 tasks × 10 s × 16 GB over 32 GB = 20 s.
        pytest.param([job("a", 0, group("g", 4, 10.0, memory=16.0))], 20.0, id="memory-work-bound"),
    ],
)
def test_fluid_lower_bound_is_the_larger_of_work_and_critical_path(jobs, bound: float) -> None:
    result = simulate(workload(nodes(2), jobs), "kube-default", config=FLAT_CHECKED)
    assert result.summary["makespan_lower_bound_s"] == pytest.approx(bound)
    assert result.summary["makespan_s"] >= bound - 1e-9


def test_makespan_and_jct_are_measured_from_arrivals() -> None:
    wl = workload(nodes(1), [job("a", 5, group("g", 4, 10.0)), job("b", 15, group("g", 2, 10.0))])
    s = simulate(wl, "kube-default", config=FLAT_CHECKED).summary
    # a runs 5–15 on the 4 cpus; b 15–25.
    assert s["makespan_s"] == pytest.approx(20.0)
    assert s["jct_mean_s"] == pytest.approx(10.0)
    assert s["utilization"]["cpu"]["allocated"] == pytest.approx((4 * 10 + 2 * 10) / (4 * 20))
    assert s["utilization"]["cpu"]["used"] == pytest.approx(0.75, abs=0.05)


@pytest.mark.parametrize(
    ("jct", "reference", "expected"),
    [
        pytest.param([10.0, 20.0], [10.0, 20.0], 0.0, id="identical"),
        pytest.param([11.0, 20.0], [10.0, 20.0], 0.0, id="ten-percent-is-not-slowed"),
        pytest.param([11.5, 20.0], [10.0, 20.0], 0.5, id="fifteen-percent-is-slowed"),
        pytest.param([5.0, 50.0], [10.0, 20.0], 0.5, id="faster-jobs-do-not-count"),
        pytest.param([np.nan, 50.0], [10.0, 20.0], 1.0, id="unfinished-jobs-are-left-out"),
    ],
)
def test_slowed_fraction_counts_jobs_more_than_ten_percent_slower(jct, reference, expected: float) -> None:
    assert slowed_fraction(np.array(jct), np.array(reference)) == pytest.approx(expected)
