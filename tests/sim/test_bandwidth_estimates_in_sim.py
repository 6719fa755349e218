"""The simulator packs disk and network by what the monitor has shown of a group's tasks (``policy.use_estimates``).

One node of 100 B/s of disk; a Job of two tasks that each declare 80 (``FLAT`` usage: no ramp-up, no bursts). By
declarations one runs at a time. A task is seen once it has run one ``estimates.bandwidth_window_s`` window (30 s):
then its group is packed by its sustained use × ``estimates.bandwidth_margin`` (1.25), at most its declaration.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stowage.config import StowageSettings
from stowage.sim import presets
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.workload import Workload
from tests.sim.kit import FLAT, group, job, nodes, workload


def _starts(usage: float, preset: str = "stowage-regular") -> list[float]:
    wl = workload(nodes(1, cpu=8.0), [job("etl", 0.0, group("read", 2, 200.0, usage=usage, disk=80.0))])
    sim = Simulation(wl, presets.make(preset), SimConfig(usage=FLAT, trace=True), 0)
    sim.run()
    assert sim.log is not None
    return [t for t, *_ in sim.log]


@pytest.mark.parametrize("preset", ["stowage-regular", "tetris"])
def test_the_second_task_starts_once_the_first_ones_use_is_seen(preset: str) -> None:
    # 20 used of 80 declared: 25 a task once seen; 25 + 25 ≤ 100. Not before the first has run a window.
    first, second = _starts(0.25, preset)
    assert first == 0.0
    assert 30.0 <= second < 200.0


def test_a_task_that_uses_what_it_declares_is_packed_as_declared() -> None:
    # 80 used of 80: the estimate is the declaration (never above it); the second waits for the first to finish.
    assert _starts(1.0) == [0.0, pytest.approx(200.0)]


def test_sustained_use_is_what_a_task_used_never_before_a_window() -> None:
    # The pass due when the first task is first seen (30 s) finds its use; a longer window has not run yet.
    wl = workload(nodes(1, cpu=8.0), [job("etl", 0.0, group("read", 2, 200.0, usage=0.25, disk=80.0))])
    sim = Simulation(wl, presets.make("stowage-regular"), SimConfig(usage=FLAT, max_sim_s=40.0), 0)
    sim.run()
    view = sim.preset.view
    disk = view.spec.resources.index("disk")
    first = int(np.argmin(view.running.start))
    assert view.sustained_use(30.0)[first, disk] == pytest.approx(20.0)
    assert np.isnan(view.sustained_use(view.now + 1.0)[first]).all()


def _log(wl: Workload, settings: StowageSettings | None = None) -> list[tuple[float, str]]:
    config = SimConfig(usage=FLAT, trace=True, settings=settings or StowageSettings())
    sim = Simulation(wl, presets.make("stowage-regular"), config, 0)
    sim.run()
    assert sim.log is not None
    return [(t, str(rest)) for t, *rest in sim.log]


def test_a_recurring_jobs_next_run_is_packed_by_what_the_last_one_used() -> None:
    # etl-1 and etl-2 are runs of one recurring job ("etl"): the second run's tasks start together, at once,
    # by the first run's use (20 of 80: 25 each), not one at a time until their own use is seen.
    wl = workload(nodes(1, cpu=8.0), [job("etl-1", 0.0, group("read", 2, 200.0, usage=0.25, disk=80.0)),
                                      job("etl-2", 500.0, group("read", 2, 200.0, usage=0.25, disk=80.0))])
    starts = [t for t, _ in _log(wl)]
    assert starts[:1] == [0.0] and 30.0 <= starts[1] < 200.0
    assert starts[2:] == [500.0, 500.0]


@pytest.mark.parametrize(("fill", "second"), [(1.0, 200.0), (2.0, 0.0)])
def test_the_fill_threshold_packs_estimated_use_past_the_declared_fit(fill: float, second: float) -> None:
    # Two tasks that use all of their 80 on a disk of 100: by 1.0 one at a time; by 2.0 both (160 ≤ 200).
    base = StowageSettings()
    settings = dataclasses.replace(base, estimates=dataclasses.replace(base.estimates, bandwidth_fill=fill))
    wl = workload(nodes(1, cpu=8.0), [job("etl", 0.0, group("read", 2, 200.0, usage=1.0, disk=80.0))])
    assert [t for t, _ in _log(wl, settings)] == [0.0, pytest.approx(second)]
