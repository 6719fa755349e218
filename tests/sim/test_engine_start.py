"""A run that starts mid-flight (``engine.Start``): tasks already running hold their nodes for what their duration
leaves after their elapsed time, tasks already finished count done, and the clock starts where it says."""

from __future__ import annotations

import pytest

from stowage.sim.engine import InvariantViolation, SimConfig, Simulation, Start, StartTask
from stowage.sim.presets import make
from tests.sim.kit import FLAT, group, job, nodes, workload

CONFIG = SimConfig(usage=FLAT, check=True, trace=True)


def run(wl, start: Start, preset: str = "stowage-regular") -> Simulation:
    sim = Simulation(wl, make(preset), CONFIG, 0, start=start)
    sim.run()
    return sim


def finish(sim: Simulation, name: str) -> float:
    return float(sim.status.j_finish[sim.spec.j_name.index(name)])


def test_a_running_task_holds_its_node_for_its_duration_less_its_elapsed_time() -> None:
    # One 4-cpu node, filled by a task of "old" that has run 40 s of its 100 s: "new" starts at 60 s after.
    wl = workload(nodes(1), [job("old", 0.0, group("g", 1, 100.0, cpu=4.0)),
                             job("new", 900.0, group("g", 1, 50.0, cpu=4.0))])
    sim = run(wl, Start(1000.0, running=[StartTask("old", "g", "n0", 40.0)]))
    assert finish(sim, "old") == pytest.approx(1060.0)
    assert [row[:2] for row in sim.log] == [(pytest.approx(1060.0), "new")]  # the running task is no placement
    assert finish(sim, "new") == pytest.approx(1110.0)
    assert sim.status.task_starts == 1


@pytest.mark.parametrize(("elapsed", "floor", "ends"), [(100.0, 5.0, 1005.0), (250.0, 5.0, 1005.0),
                                                          (99.0, 5.0, 1005.0), (90.0, 5.0, 1010.0)])
def test_a_task_past_its_duration_finishes_after_the_floor(elapsed: float, floor: float, ends: float) -> None:
    wl = workload(nodes(1), [job("old", 0.0, group("g", 1, 100.0, cpu=4.0))])
    sim = run(wl, Start(1000.0, running=[StartTask("old", "g", "n0", elapsed)], min_left_s=floor))
    assert finish(sim, "old") == pytest.approx(ends)


def test_finished_tasks_count_done_and_open_the_barrier_behind_them() -> None:
    # map: 3 tasks, 2 finished, 1 running with 10 s left; reduce waits on map, then runs 20 s.
    wl = workload(nodes(2), [job("j", 0.0, group("map", 3, 30.0), group("reduce", 1, 20.0, deps=["map"]))])
    sim = run(wl, Start(500.0, finished={("j", "map"): 2}, running=[StartTask("j", "map", "n1", 20.0)]))
    assert [(round(t), name, g) for t, name, g, _, _ in sim.log] == [(510, "j", "reduce")]
    assert finish(sim, "j") == pytest.approx(530.0)
    # A group wholly finished opens its barrier at once.
    sim = run(wl, Start(500.0, finished={("j", "map"): 3}))
    assert [(round(t), g) for t, _, g, _, _ in sim.log] == [(500, "reduce")]


def test_every_job_that_arrived_by_the_start_is_there_at_once_in_arrival_order() -> None:
    # SRTF with equal work breaks the tie by arrival: the earlier goes first, decided at the start.
    wl = workload(nodes(1), [job("b", 20.0, group("g", 1, 10.0, cpu=4.0)),
                             job("a", 10.0, group("g", 1, 10.0, cpu=4.0))])
    sim = run(wl, Start(100.0))
    assert [(t, name) for t, name, *_ in sim.log] == [(100.0, "a"), (pytest.approx(110.0), "b")]


def test_more_running_than_left_is_refused() -> None:
    wl = workload(nodes(2), [job("j", 0.0, group("map", 1, 30.0), group("reduce", 1, 20.0, deps=["map"]))])
    with pytest.raises(InvariantViolation, match="j/reduce"):
        Simulation(wl, make("stowage-regular"), CONFIG, 0,
                   start=Start(5.0, running=[StartTask("j", "reduce", "n0", 1.0)]))


@pytest.mark.parametrize(("grid", "ends"), [(0.0, 1037.0), (10.0, 1040.0), (30.0, 1050.0), (37.0, 29 * 37.0)])
def test_a_finish_grid_moves_each_finish_to_the_next_grid_point(grid: float, ends: float) -> None:
    """Grid points are multiples of the clock (1000 s is not one of 37 s)."""
    wl = workload(nodes(1), [job("j", 0.0, group("g", 1, 37.0))])
    sim = Simulation(wl, make("stowage-regular"), SimConfig(usage=FLAT, finish_grid_s=grid), 0,
                     start=Start(1000.0))
    sim.advance()
    assert finish(sim, "j") == pytest.approx(ends)
