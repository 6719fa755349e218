"""End-game awareness in the packing pass: drain times, the bottleneck bonus and the critical path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stowage.config import PackingSettings, StowageSettings, validate
from stowage.policy import decide, dispatch, remaining_work


def test_drain_times_are_the_waiting_work_over_the_pool_per_resource() -> None:
    # 4 tasks of 10 s × (1 cpu, 2 GiB) and 2 of 30 s × (2 cpu, 0) on a pool of 10 cpu, 20 GiB.
    drain = remaining_work.drain_times([[1.0, 2.0], [2.0, 0.0]], [4, 2], [10.0, 30.0], [10.0, 20.0])
    assert drain == pytest.approx([(40 + 120) / 10, 80 / 20])
    assert remaining_work.drain_times([[1.0, 2.0]], [3], None, [10.0, 0.0]) == pytest.approx([0.3, 0.0])


def test_the_bonus_favours_tasks_heavy_on_the_bottleneck_and_is_off_at_zero() -> None:
    drain = np.array([100.0, 25.0])  # cpu is the bottleneck
    bonus = remaining_work.bottleneck_bonus([[2.0, 1.0], [1.0, 2.0]], drain, [4.0, 4.0], 1.0)
    assert bonus == pytest.approx([2 / 4 + 0.25 * 1 / 4, 1 / 4 + 0.25 * 2 / 4])
    assert bonus[0] > bonus[1]
    assert not remaining_work.bottleneck_bonus([[2.0, 1.0]], drain, [4.0, 4.0], 0.0).any()
    assert not remaining_work.bottleneck_bonus([[2.0, 1.0]], [0.0, 0.0], [4.0, 4.0], 1.0).any()


def test_critical_rows_are_chains_longer_than_the_drain() -> None:
    drain = np.array([100.0, 40.0])
    assert remaining_work.critical_rows([150.0, 99.0, 60.0], drain, 1.0).tolist() == [True, False, False]
    assert remaining_work.critical_rows([150.0, 99.0, 60.0], drain, 0.5).tolist() == [True, True, True]
    assert not remaining_work.critical_rows([150.0], drain, 0.0).any()


def _pass(path: list[float] | None) -> dispatch.PassInput:
    """One queue, four single-group jobs in SRTF order 0..3 on one node with room for one task at a time.

    Job 3 is the largest (ranked last: the fairness knob's job mask leaves it out) but its group is the
    head of a long chain (a 500 s task, then more behind it).
    """
    shapes = np.array([[1.0, 1.0]])
    return dispatch.PassInput(
        capacity=np.array([[1.0, 1.0]]), available=np.array([[1.0, 1.0]]), shapes=shapes,
        group_shape=np.zeros(4, np.int64), group_job=np.arange(4), group_queue=np.zeros(4, np.int64),
        pending=np.array([2, 2, 2, 1]), finished_fraction=np.zeros(4),
        job_work=np.array([1.0, 2.0, 3.0, 50.0]), queue_alloc=np.zeros((1, 2)), pool_total=np.array([1.0, 1.0]),
        queue_weight=np.ones(1), job_rank=lambda jobs: np.asarray(jobs, dtype=np.float64),
        group_duration_s=np.array([10.0, 10.0, 10.0, 500.0]),
        group_path_s=None if path is None else np.asarray(path),
    )


def test_a_critical_group_starts_first_even_when_job_order_would_hold_it_back() -> None:
    knobs = PackingSettings()  # fairness knob 0.25: the last of four jobs is outside ⌈0.75·4⌉ = 3
    path = [10.0, 10.0, 10.0, 1500.0]  # drain: (6·10 + 500)/1 = 560 s per resource; 1500 ≥ 560
    off = dispatch.pack(_pass(path), knobs, limit=1)
    on = dispatch.pack(_pass(path), dataclasses.replace(knobs, critical_path_fraction=1.0), limit=1)
    assert [p.group for p in off.placements] == [0]
    assert [p.group for p in on.placements] == [3]
    # Not critical when its chain is shorter than the drain: job order as before.
    short = dispatch.pack(_pass([10.0, 10.0, 10.0, 500.0]), dataclasses.replace(knobs, critical_path_fraction=1.0),
                          limit=1)
    assert [p.group for p in short.placements] == [0]


def test_without_durations_the_end_game_knobs_change_nothing() -> None:
    knobs = dataclasses.replace(PackingSettings(), critical_path_fraction=1.0, bottleneck_weight=1.0)
    inp = dataclasses.replace(_pass([10.0, 10.0, 10.0, 1500.0]), group_duration_s=None)
    assert [p.group for p in dispatch.pack(inp, knobs, limit=1).placements] == [0]


@pytest.mark.parametrize(("demand", "tasks", "dur", "queue", "expected"), [
    pytest.param([[1.0, 0.0], [1.0, 0.0]], [3, 1], [10.0, 10.0], [0, 1], [0.75, 0.25], id="one-bottleneck"),
    # queue 0's work is on cpu, queue 1's on memory: each needs its own resource's whole drain
    pytest.param([[1.0, 0.0], [0.0, 1.0]], [2, 2], [10.0, 10.0], [0, 1], [1.0, 1.0], id="own-resources"),
    pytest.param([[1.0, 0.0]], [0], [10.0], [0], [0.0, 0.0], id="nothing-waits"),
    pytest.param([[1.0, 0.0], [1.0, 0.0]], [10, 1], [1e308, 10.0], [0, 1], [1.0, 0.0], id="overflow"),
])
def test_queue_budgets_are_the_share_of_the_drain_each_backlog_needs(demand, tasks, dur, queue, expected) -> None:
    budgets = remaining_work.queue_budgets(np.array(demand), tasks, dur, queue, 2, [4.0, 4.0])
    assert budgets == pytest.approx(expected)


def _tiers(queue_alloc: list[list[float]]) -> dispatch.PassInput:
    """Two queues of weight 1, one node with room for one task. Queue 0 (ahead on its share, so in the later
    tier) waits with a 1000 s chain head and a short task; queue 1 with three short tasks."""
    return dispatch.PassInput(
        capacity=np.array([[1.0, 1.0]]), available=np.array([[1.0, 1.0]]), shapes=np.array([[1.0, 1.0]]),
        group_shape=np.zeros(3, np.int64), group_job=np.arange(3), group_queue=np.array([0, 0, 1]),
        pending=np.array([1, 1, 3]), finished_fraction=np.zeros(3), job_work=np.array([1000.0, 1.0, 1.0]),
        queue_alloc=np.array(queue_alloc), pool_total=np.array([4.0, 4.0]), queue_weight=np.ones(2),
        group_duration_s=np.array([1000.0, 10.0, 10.0]), group_path_s=np.array([1000.0, 10.0, 10.0]))


@pytest.mark.parametrize(("held", "budget", "first"), [
    pytest.param(2.0, 1.0, 0, id="below-its-budget-the-chain-crosses"),
    pytest.param(3.9, 1.0, 2, id="past-its-budget-it-keeps-the-tier"),
    pytest.param(2.0, 0.0, 2, id="k0-never-crosses"),
    pytest.param(3.9, 2.0, 0, id="k2-doubles-the-budget"),
])
def test_a_critical_row_crosses_its_queues_tier_within_the_budget(held: float, budget: float, first: int) -> None:
    # Queue 0 holds `held` of 4 (dominant share held/4 against queue 1's 0): queue 1 is first in line. Queue 0's
    # waiting work drains in (1000 + 10)/4 s of all (1000 + 10 + 30)/4 s: budget 0.971·k; the 1000 s chain is
    # critical (1000 ≥ 260 s), the rest not.
    knobs = dataclasses.replace(PackingSettings(), critical_path_fraction=1.0, critical_tier_budget=budget)
    inp = dataclasses.replace(_tiers([[held, held], [0.0, 0.0]]), pending=np.array([1, 1, 3]))
    got = dispatch.pack(inp, knobs, limit=1)
    assert [p.group for p in got.placements] == [first]


@pytest.mark.parametrize(("field", "value"), [("bottleneck_weight", -1.0), ("critical_path_fraction", -0.5),
                                              ("critical_path_fraction", float("nan")),
                                              ("critical_tier_budget", -1.0)])
def test_the_knobs_are_range_checked(field: str, value: float) -> None:
    settings = StowageSettings(packing=dataclasses.replace(PackingSettings(), **{field: value}))
    assert any(p.startswith(f"packing.{field}: must be within") for p in validate(settings))


def test_children_of_reads_the_chains_off_depends_on_within_each_job() -> None:
    # Two jobs with groups of the same names: a dependsOn names a group of its own job only; an unknown name
    # (a finished group, no longer in the view) adds nothing.
    got = decide.children_of(["a", "a", "a", "b", "b"], ["map", "reduce", "final", "map", "reduce"],
                             [(), ("map",), ("reduce", "gone"), (), ("map",)])
    assert got == [[1], [2], [], [4], []]
    assert decide.chains(np.array([10.0, 60.0, 30.0, 5.0, 5.0]), got).tolist() == [100.0, 90.0, 30.0, 10.0, 5.0]
