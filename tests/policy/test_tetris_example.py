"""Tetris §3.3's worked example, replayed with Stowage's own policy functions.

Two machines of ⟨2 cores, 4 GB⟩. Job A: six tasks of ⟨2 cores, 3 GB⟩. Job B: two
tasks of ⟨1 core, 2 GB⟩. Every task runs for the same time ``t`` (unit: 1 t).

The paper: "Tasks of the first job have higher alignment score. Hence, the above
packing efficiency heuristic schedules all tasks of the first job before the
second job's tasks. Assuming all the tasks have the same duration, it is easy to
see that swapping the order lowers average job completion time." It gives no
numbers; with this greedy scheduler they are:

- alignment alone: A runs in three waves of two (done at 3t), B after (4t):
  average completion (3 + 4)/2 = 3.5 t;
- ``a + ε·p̃`` (m = 1): B's two tasks pack onto one machine at time 0 (done at
  1t), A's six tasks follow (done at 4t): average (1 + 4)/2 = 2.5 t.

Makespan is 4t either way. The scheduler below is written here, in the test, as
Tetris §3.2 describes it: on each machine with free resources, repeatedly pick
the pending task with the highest score until nothing fits. Remaining work
counts tasks not yet started.
"""

from __future__ import annotations

import numpy as np
import pytest

from stowage.config import PackingSettings
from stowage.policy.alignment import alignment
from stowage.policy.remaining_work import combined_score, remaining_work

CAPACITY = np.array([[2.0, 4.0], [2.0, 4.0]])  # cores, GB
DEMAND = np.array([[2.0, 3.0]] * 6 + [[1.0, 2.0]] * 2)
JOB = np.array([0] * 6 + [1] * 2)  # 0 = A, 1 = B
DURATION_T = np.ones(len(JOB))  # every task takes 1 t


def _schedule(m: float | None) -> tuple[dict[int, float], list[tuple[float, int, int]]]:
    """Greedy list scheduler; ``m=None`` scores by alignment alone.

    Returns each job's completion time (in t) and the (start, task, machine) log.
    """
    available = CAPACITY.copy()
    pending = list(range(len(JOB)))
    running: list[tuple[float, int, int]] = []  # (end, task, machine)
    log: list[tuple[float, int, int]] = []
    finished_at: dict[int, float] = {}
    now = 0.0
    for _ in range(100):  # bounded: eight tasks need at most eight events
        for machine in range(len(CAPACITY)):
            while pending:
                cand = np.array(pending)
                score = alignment(DEMAND[cand], CAPACITY[machine : machine + 1], available[machine : machine + 1])
                if m is not None:
                    work = remaining_work(DURATION_T[cand], DEMAND[cand], JOB[cand], 2, CAPACITY.mean(axis=0))
                    score = combined_score(score, work[JOB[cand]], m)
                best = int(np.argmax(score[:, 0]))
                if not np.isfinite(score[best, 0]):
                    break
                task = int(cand[best])
                pending.remove(task)
                available[machine] -= DEMAND[task]
                running.append((now + DURATION_T[task], task, machine))
                log.append((now, task, machine))
        if not running:
            break
        now = min(end for end, _, _ in running)
        for end, task, machine in [r for r in running if r[0] == now]:
            running.remove((end, task, machine))
            available[machine] += DEMAND[task]
            finished_at[int(JOB[task])] = max(finished_at.get(int(JOB[task]), 0.0), end)
    assert not pending and not running, "the example must run to completion"
    return finished_at, log


def test_job_a_tasks_have_the_higher_alignment_score_on_an_empty_machine():
    a = alignment(np.array([[2.0, 3.0], [1.0, 2.0]]), CAPACITY, CAPACITY)
    np.testing.assert_allclose(a, [[1.75, 1.75], [1.0, 1.0]])  # 2/2·1 + 3/4·1 vs 1/2 + 2/4


def test_remaining_work_of_the_two_jobs_before_anything_runs():
    work = remaining_work(DURATION_T, DEMAND, JOB, 2, CAPACITY.mean(axis=0))
    np.testing.assert_allclose(work, [6 * 1.75, 2 * 1.0])  # A: 10.5 t·nodes, B: 2 t·nodes


def test_alignment_alone_runs_job_a_first_and_averages_three_and_a_half_t():
    finished, log = _schedule(m=None)
    assert finished == {0: 3.0, 1: 4.0}
    assert sum(finished.values()) / 2 == 3.5
    first_wave = sorted(task for start, task, _ in log if start == 0.0)
    assert all(JOB[t] == 0 for t in first_wave)


@pytest.mark.parametrize("m", [pytest.param(PackingSettings().remaining_work_weight, id="default-m-1")])
def test_combined_score_runs_the_small_job_first_and_averages_two_and_a_half_t(m):
    finished, log = _schedule(m=m)
    assert finished == {0: 4.0, 1: 1.0}
    assert sum(finished.values()) / 2 == 2.5
    # Both B tasks start at 0 packed onto the first machine; A starts on the other.
    at_zero = sorted((machine, int(JOB[task])) for start, task, machine in log if start == 0.0)
    assert at_zero == [(0, 1), (0, 1), (1, 0)]


def test_combined_score_improves_average_completion_without_hurting_makespan():
    packed, _ = _schedule(m=None)
    combined, _ = _schedule(m=1.0)
    assert sum(combined.values()) < sum(packed.values())
    assert max(combined.values()) == max(packed.values()) == 4.0
