"""The issue's makespan target on a small, fast workload: ``stowage`` never ends later than ``kube-default``.

A real outcome, not a timing: the Tetris §5.1 mix on 8 nodes (43 jobs, 2,204 tasks over half an hour),
at the usage fractions the target names. The full tables (every bundled workload) are in
docs/results.md, made by ``scripts/makespan_table.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

from stowage.sim.engine import SimConfig, simulate
from stowage.sim.traces.synthetic import TetrisMix, tetris_mix
from stowage.sim.usage import UsageModel


@pytest.fixture(scope="module")
def small_mix():
    return tetris_mix(seed=0, n_nodes=8, duration_s=1800, mix=dataclasses.replace(TetrisMix(), size_scale=0.05))


@pytest.mark.parametrize("mean_fraction", [0.5, 0.7, 0.9])
def test_stowage_makespan_is_at_most_kube_defaults(small_mix, mean_fraction: float) -> None:
    config = SimConfig(usage=UsageModel(mean_fraction=mean_fraction))
    kube = simulate(small_mix, "kube-default", config=config).summary
    stowage = simulate(small_mix, "stowage", config=config).summary
    assert stowage["lost_tasks"] == kube["lost_tasks"] == 0
    assert stowage["makespan_s"] <= kube["makespan_s"], (stowage["makespan_s"], kube["makespan_s"])
    # ... while keeping the mean-JCT gain (the issue asks ≤ 0.5× on the bundled workloads; see the tables).
    # Measured 0.64×, 0.69×, 0.76× at 0.5, 0.7, 0.9 (opportunistic tasks: 6 %, 3 %, 0 % of the work).
    assert stowage["jct_mean_s"] < 0.8 * kube["jct_mean_s"]
