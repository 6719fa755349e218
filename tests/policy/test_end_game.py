"""End-game awareness in the packing pass: drain times, the bottleneck bonus and the critical path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stowage.config import PackingSettings, StowageSettings, validate
from stowage.policy import dispatch, remaining_work


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


@pytest.mark.parametrize(("field", "value"), [("bottleneck_weight", -1.0), ("critical_path_fraction", -0.5),
                                              ("critical_path_fraction", float("nan"))])
def test_the_knobs_are_range_checked(field: str, value: float) -> None:
    settings = StowageSettings(packing=dataclasses.replace(PackingSettings(), **{field: value}))
    assert any(p.startswith(f"packing.{field}: must be within") for p in validate(settings))
