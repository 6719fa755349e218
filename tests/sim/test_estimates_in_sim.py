"""The simulator's packing presets see what a cluster knows of durations, not the workload's truth.

Without ``--oracle-durations`` the decision gets each group's ``expectedDuration`` (if the workload states one),
its finished tasks' run times, running tasks' elapsed times, earlier runs of the recurring job and the queue's
prior (``stowage.policy.estimates``); with it, the true durations (an upper bound).
"""

from __future__ import annotations

import dataclasses

import pytest

from stowage.policy import estimates
from stowage.sim import presets
from stowage.sim.engine import SimConfig, Simulation
from tests.sim.kit import FLAT, group, job, nodes, workload


def _first_pass(wl, oracle: bool, preset: str = "stowage") -> list[tuple[str, str]]:
    sim = Simulation(wl, presets.make(preset), SimConfig(usage=FLAT, trace=True, max_sim_s=0.0,
                                                         oracle_durations=oracle), 0)
    sim.run()
    assert sim.log is not None
    return [(j, n) for _, j, _, n, _ in sim.log]


def _long_then_short(long_s: float, short_s: float):
    # One node of 4 cores; each job wants all 4: the first pass starts exactly one of them.
    return workload(nodes(1, cpu=4.0, memory=16.0),
                    [job("first", 0.0, group("t", 1, long_s, cpu=4.0)), job("second", 0.0, group("t", 1, short_s,
                                                                                                   cpu=4.0))])


@pytest.mark.parametrize("preset", sorted(presets.PRESETS))
@pytest.mark.parametrize("oracle", [False, True])
def test_a_preset_is_handed_the_true_durations_only_under_the_oracle(preset: str, oracle: bool) -> None:
    """What a preset can read is its ``View``: the submitted work, progress, nodes and running tasks. The engine's
    ``Truth`` is not on it, and its durations are there only as ``oracle_durations`` when asked for."""
    wl = _long_then_short(1000.0, 1.0)
    sim = Simulation(wl, presets.make(preset), SimConfig(usage=FLAT, oracle_durations=oracle), 0)
    view = sim.preset.view
    assert not hasattr(view, "truth") and not hasattr(view.spec, "truth") and not hasattr(view.spec, "g_dur")
    with pytest.raises(AttributeError):
        view.truth = sim.truth  # type: ignore[attr-defined]  # slots: nothing can hang it there later
    if oracle:
        assert view.oracle_durations is not None and view.oracle_durations.tolist() == [1000.0, 1.0]
    else:
        assert view.oracle_durations is None


@pytest.mark.parametrize("preset", ["stowage", "tetris"])
def test_without_the_oracle_the_decision_does_not_depend_on_the_true_durations(preset: str) -> None:
    a = _first_pass(_long_then_short(1000.0, 1.0), oracle=False, preset=preset)
    b = _first_pass(_long_then_short(1.0, 1000.0), oracle=False, preset=preset)
    assert a == b and len(a) == 1


def test_the_oracle_reads_them_and_a_stated_expected_duration_is_a_hint() -> None:
    wl = _long_then_short(1000.0, 1.0)
    assert _first_pass(wl, oracle=True) == [("second", "n0")]  # SRTF on the truth: the short one first
    assert _first_pass(wl, oracle=False) == [("first", "n0")]  # nothing known: equal estimates, arrival order
    hinted = dataclasses.replace(wl, jobs=tuple(
        dataclasses.replace(j, groups=tuple(dataclasses.replace(g, expected_duration_s=g.duration_s)
                                            for g in j.groups)) for j in wl.jobs))
    assert _first_pass(hinted, oracle=False) == [("second", "n0")]


def test_with_no_duration_stated_a_small_job_submitted_after_a_large_one_finishes_first() -> None:
    # The prior orders by size: 1 task against 40 of the same shape; 4 slots, so the small job takes the first
    # slot that frees up instead of waiting behind the 36 big tasks still queued.
    wl = workload(nodes(1, cpu=4.0, memory=16.0),
                  [job("big", 0.0, group("t", 40, 10.0)), job("small", 1.0, group("t", 1, 10.0))])
    sim = Simulation(wl, presets.make("stowage"), SimConfig(usage=FLAT), 0)
    sim.run()
    big, small = (float(sim.status.j_finish[j]) for j in range(2))
    assert small < 25.0 < big


def test_a_recurring_job_learns_from_its_earlier_run() -> None:
    wl = workload(nodes(1, cpu=4.0, memory=16.0),
                  [job("etl-1", 0.0, group("map", 8, 30.0)), job("etl-2", 200.0, group("map", 8, 30.0))])
    sim = Simulation(wl, presets.make("stowage"), SimConfig(usage=FLAT), 0)
    sim.run()
    decider = sim.preset.decider
    assert decider.history.get(estimates.recurring_key("", "etl-2"), "map") == pytest.approx(30.0, rel=0.2)
    first, second = (float(sim.status.j_finish[j] - sim.spec.j_arrival[j]) for j in range(2))
    assert second <= first
