"""What the packing presets keep across passes equals what a plain pass computes, bit for bit.

* ``packing._JobWork``: the remaining work of every job, summed again only for the jobs whose
  groups changed, against ``remaining_work.remaining_work`` on every group at every pass;
* the job ranks kept per FIFO/SRTF queue: a run gives every placement a run asking
  ``dispatch.job_ranks`` for every queue at every pass gives;
* ``harvest.assumed`` (bincount per resource) against ``np.add.at``, the plain accumulation.
"""

from __future__ import annotations

import numpy as np
import pytest

from stowage.policy import dispatch, harvest, remaining_work
from stowage.sim import packing, presets
from stowage.sim.engine import SimConfig, Simulation
from tests.sim.kit import BURSTY, contended
from tests.sim.test_packing_speedups import _mixed


@pytest.mark.parametrize("preset", ["tetris", "stowage"])
@pytest.mark.parametrize(("make", "seed"), [pytest.param(contended, 1, id="contended"),
                                            pytest.param(_mixed, 2, id="mixed-2")])
def test_kept_remaining_work_has_the_bits_of_a_plain_sum_at_every_pass(monkeypatch, preset: str, make,
                                                                         seed: int) -> None:
    kept = packing.PackingPreset._job_work
    seen: list[int] = []

    def checked(self: packing.PackingPreset, sim: Simulation) -> np.ndarray:
        got = kept(self, sim)
        left = (sim.g_pending + sim.g_running).astype(np.float64)
        plain = remaining_work.remaining_work(sim.g_dur * left, sim.g_demand, sim.g_job, sim.n_jobs, self.mean_cap)
        assert np.array_equal(got.view(np.int64), plain.view(np.int64))
        assert not got.flags.writeable  # shared across a pass's callers: nobody may change it
        seen.append(int(np.count_nonzero(got)))
        return got

    monkeypatch.setattr(packing.PackingPreset, "_job_work", checked)
    sim = Simulation(make(seed), presets.make(preset), SimConfig(usage=BURSTY), seed)
    sim.run()
    assert len(seen) > 10 and sim.tasks_done == int(sim.g_tasks.sum())
    assert max(seen) > min(seen)  # work did change between passes, so the kept path was exercised


class _PlainRanks(packing.PackingPreset):
    """The ranks asked of ``dispatch.job_ranks`` for every queue at every pass (nothing kept)."""

    def _job_rank(self, sim: Simulation, jobs: np.ndarray, work) -> np.ndarray:
        def fsp_order(q: int) -> list[int]:
            self.fsp[q].advance(sim.now)
            return self.fsp[q].order()

        return dispatch.job_ranks(jobs, sim.j_queue, sim.q_order, sim.j_arrival, work(), fsp_order)


@pytest.mark.parametrize("seed", [2, 3, 5])
def test_kept_job_ranks_place_every_task_where_plain_ranks_do(monkeypatch, seed: int) -> None:
    ranked: list[int] = []  # jobs ranked by dispatch.job_ranks, per run
    plain_ranks = dispatch.job_ranks

    def counted(jobs, *rest):
        ranked[-1] += len(jobs)
        return plain_ranks(jobs, *rest)

    monkeypatch.setattr(dispatch, "job_ranks", counted)
    runs = []
    for preset in (presets.make("stowage"), _PlainRanks("stowage", harvesting=True, job_order=True, classifier=True)):
        ranked.append(0)
        sim = Simulation(_mixed(seed), preset, SimConfig(usage=BURSTY, trace=True), seed)
        result = sim.run()
        runs.append((sim.log, result.summary, result.jct.tobytes()))
    assert runs[0][0] and runs[0] == runs[1]
    assert 0 < ranked[0] < ranked[1]  # the kept run ranked fewer jobs: some ranks were kept


def test_the_kept_work_follows_single_group_changes_and_falls_back_on_many() -> None:
    rng = np.random.default_rng(7)
    groups_of_job = [[0, 1, 2], [3], [4, 5]]
    job = np.array([0, 0, 0, 1, 2, 2])
    dur = rng.uniform(1, 30, size=6) / 3.0  # inexact decimals: sums depend on their order
    demand = rng.uniform(0.1, 4, size=(6, 3))
    cap = np.array([8.0, 32.0, 0.0])
    kept = packing._JobWork(dur, demand, job, groups_of_job, cap)
    left = rng.integers(0, 9, size=6).astype(np.float64)
    for step in range(40):
        if step % 10 == 9:
            left = rng.integers(0, 9, size=6).astype(np.float64)  # most groups at once: the plain call
        else:
            left = left.copy()
            left[rng.integers(6)] = float(rng.integers(0, 9))
        plain = remaining_work.remaining_work(dur * left, demand, job, 3, cap)
        assert np.array_equal(kept.current(left).view(np.int64), plain.view(np.int64))


def test_assumed_usage_adds_pods_in_order_like_add_at() -> None:
    rng = np.random.default_rng(3)
    demands = rng.uniform(0, 1, size=(200, 4)) / 7.0
    node = rng.integers(-1, 12, size=200)  # −1: not bound, ignored
    bound = rng.uniform(0, 60, size=200)
    got = harvest.assumed(demands, bound, node, 50.0, 30.0, 10)
    plain = np.zeros((10, 4))
    keep = (50.0 - bound < 30.0) & (node >= 0) & (node < 10)
    np.add.at(plain, node[keep], demands[keep])
    assert np.array_equal(got.view(np.int64), plain.view(np.int64))
    assert got.any()
