"""The fast scheduling passes decide exactly what the straightforward ones decide.

* ``candidates.best_candidate`` (per demand shape, no (groups × nodes) matrix) picks the same
  (row, node) as ``candidates.dense_best_candidate`` (``combined_score`` on the full matrix), on
  random matrices built to produce ties and near-ties (values one ulp apart, equal remaining work,
  boosted rows);
* whole runs of ``tetris`` and ``stowage`` on random small workloads, with every search checked
  against the dense one as it happens;
* ``drf``, ``kube-default`` and ``ubis``, whose passes stop once every demand shape has failed,
  place exactly what a plain one-group-at-a-time pass places (the reference passes below).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stowage.labels import Opportunistic
from stowage.model import JobOrder
from stowage.policy import alignment, candidates, decide, fairness
from stowage.sim import baselines, presets
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.workload import JobSpec, QueueSpec, TaskGroup, Workload
from tests.sim.kit import BURSTY, contended, nodes, rv

# --- one search, fast against dense ----------------------------------------------------------------


@st.composite
def searches(draw: st.DrawFn) -> tuple:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_shapes, n_nodes, n_rows = draw(st.integers(1, 4)), draw(st.integers(1, 7)), draw(st.integers(1, 12))
    base = rng.choice([0.0, 0.25, 0.5, 1.0 / 3.0, 0.7], size=(n_shapes, n_nodes))
    noise = rng.integers(-2, 3, size=base.shape)  # a few ulps either way: near-ties
    score = base.copy()
    for _ in range(2):
        score = np.where(noise > 0, np.nextafter(score, np.inf), np.where(noise < 0, np.nextafter(score, 0), score))
    score[rng.random(score.shape) < draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))] = -np.inf
    shape_of = rng.integers(0, n_shapes, size=n_rows)
    p = rng.choice([0.0, 1.0, 2.5, 1e6, 3.0 + 1e-12, np.nan], size=n_rows)
    boost = rng.choice([0.0, 1e6], size=n_rows, p=[0.7, 0.3])
    rows = rng.random(n_rows) < draw(st.sampled_from([0.5, 1.0]))
    m = draw(st.sampled_from([0.0, 1.0, 0.3, 7.0]))
    return score, shape_of, p, boost, rows, m


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(searches())
def test_the_per_shape_search_picks_what_the_dense_matrix_picks(case: tuple) -> None:
    score, shape_of, p, boost, rows, m = case
    fast = candidates.best_candidate(candidates.ShapeScores(score.copy()), candidates.Rows(shape_of, p, boost),
                                     rows, m)
    dense = candidates.dense_best_candidate(score[shape_of], p, boost, rows, m)
    assert fast == dense


def test_a_winning_row_breaks_rounding_ties_like_the_dense_matrix() -> None:
    # Boosted rows: (a − t) + 1e6 rounds one-ulp differences in a away, so the first node wins.
    a = 0.5
    score = np.array([[np.nextafter(a, 0), a, a]])
    shape_of = np.array([0, 0])
    p = np.array([1.0, 3.0])
    boost = np.array([1e6, 0.0])
    rows = np.array([True, True])
    dense = candidates.dense_best_candidate(score[shape_of], p, boost, rows, 1.0)
    searched = candidates.Rows(shape_of, p, boost)
    assert candidates.best_candidate(candidates.ShapeScores(score.copy()), searched, rows, 1.0) == dense
    assert dense == (0, 0)


# --- whole runs of the packing presets, every search cross-checked -----------------------------------


def _checked_search(calls: list[int]):
    fast = candidates.best_candidate

    def search(shaped, searched, rows, m):
        got = fast(shaped, searched, rows, m)
        shape_of, p, boost = searched.shape_of, searched.p, searched.boost
        assert got == candidates.dense_best_candidate(shaped.score[shape_of], p, boost, rows, m)
        calls.append(1)
        return got

    return search


def _mixed(seed: int) -> Workload:
    """Several queues and shapes, barriers, and jobs that arrive together (batch-like)."""
    rng = np.random.default_rng(seed)
    jobs = []
    for j in range(24):
        cpu, mem = float(rng.choice([1.0, 2.0])), float(rng.choice([1.0, 3.0]))
        first = TaskGroup("map", int(rng.integers(1, 9)), rv(cpu=cpu, memory=mem, disk=float(rng.choice([0, 10]))),
                          float(rng.choice([5.0, 12.5, 30.0])), None)
        second = TaskGroup("reduce", int(rng.integers(1, 4)), rv(cpu=1.0, memory=2.0, network=20.0),
                           float(rng.uniform(3, 20)), None, ("map",))
        opp = (Opportunistic.AUTO, Opportunistic.TRUE, Opportunistic.FALSE)[j % 3]
        jobs.append(JobSpec(f"j{j}", ("a", "b", "c")[j % 3], float(rng.choice([0.0, 0.0, 4.0])), (first, second), opp))
    queues = (QueueSpec("a", 1.0, JobOrder.SRTF, True), QueueSpec("b", 2.0, JobOrder.FSP, True),
              QueueSpec("c", 1.0, JobOrder.FIFO, True))
    return Workload("mixed", nodes(3, cpu=6.0, memory=8.0), queues, tuple(jobs), {"source": "tests"})


@pytest.mark.parametrize("preset", ["tetris", "stowage"])
@pytest.mark.parametrize(("make", "seed"), [pytest.param(contended, 1, id="contended"),
                                            pytest.param(_mixed, 2, id="mixed-2"),
                                            pytest.param(_mixed, 3, id="mixed-3")])
def test_packing_runs_make_every_choice_the_dense_search_makes(monkeypatch, preset: str, make, seed: int) -> None:
    calls: list[int] = []
    monkeypatch.setattr(candidates, "best_candidate", _checked_search(calls))
    sim = Simulation(make(seed), presets.make(preset), SimConfig(usage=BURSTY, check=True), seed)
    sim.run()
    assert calls and sim.status.tasks_done == int(sim.spec.g_tasks.sum())


# --- the kube-like passes against plain reference passes ---------------------------------------------


class _PlainKube(baselines.KubePreset):
    """Reference passes: every group is tried in order, no shape is skipped, nothing stops early."""

    def schedule(self) -> None:
        v = self.view
        spec, status = v.spec, v.status
        ready = np.flatnonzero(status.waiting())
        if ready.size == 0:
            return
        regular = ready[spec.j_opp[spec.g_job[ready]] != decide.INTENT_TRUE] if self.harvesting else ready
        if not v.regular_changed:
            regular = regular[:0]
        fit_res = self.regular_resources()
        free = v.cluster.regular_free()
        if self.order == "drf":
            self._plain_drf(regular, free, fit_res)
        else:
            for g in self._queue_order(regular).tolist():
                while status.g_pending[g] > 0 and self._place_regular(g, free, fit_res):
                    pass
        if self.harvesting:
            self._plain_opportunistic()

    def _plain_drf(self, groups, free, fit_res) -> None:
        spec, status = self.view.spec, self.view.status
        ordered = sorted(groups.tolist(), key=lambda g: (spec.j_arrival[spec.g_job[g]], g))
        by_queue: list[deque[int]] = [deque() for _ in spec.queue_names]
        for g in ordered:
            by_queue[spec.g_queue[g]].append(g)
        total = self.view.cluster.total * fit_res
        while True:
            eligible = np.array([bool(q) for q in by_queue])
            if not eligible.any():
                return
            shares = fairness.dominant_shares(status.queue_alloc[0] * fit_res, total, spec.q_weight)
            q = int(np.flatnonzero(eligible)[np.argmin(shares[eligible])])
            g = by_queue[q][0]
            if status.g_pending[g] == 0 or not self._place_regular(g, free, fit_res):
                by_queue[q].popleft()  # done, or fits nowhere now: it does not block the queue

    def _plain_opportunistic(self) -> None:
        v = self.view
        spec, status = v.spec, v.status
        ready = np.flatnonzero(status.waiting())
        ready = ready[(spec.j_opp[spec.g_job[ready]] != decide.INTENT_FALSE) & spec.q_opp[spec.g_queue[ready]]]
        avail = self._harvestable()
        c = v.cluster
        inv = np.divide(1.0, c.cap, out=np.zeros_like(c.cap), where=c.cap > 0)
        for g in self._queue_order(ready).tolist():
            d = spec.g_demand[g]
            while status.g_pending[g] > 0:
                ok = alignment.feasible(d, avail)
                if not ok.any():
                    break
                n = self._pick(((avail - d) * inv).sum(axis=1), ok)
                v.place(g, n, opp=True)
                avail[n] = np.maximum(avail[n] - d, 0.0)


_KUBE = {"kube-default": ("least", "priority", False), "drf": ("least", "drf", False),
         "ubis": ("least", "priority", True)}


@pytest.mark.parametrize("preset", sorted(_KUBE))
@pytest.mark.parametrize(("make", "seed"), [pytest.param(contended, 4, id="contended"),
                                            pytest.param(_mixed, 5, id="mixed-5")])
def test_kube_passes_that_stop_early_place_what_plain_passes_place(preset: str, make, seed: int) -> None:
    config = SimConfig(usage=BURSTY, check=True, trace=True)
    fast = Simulation(make(seed), presets.make(preset), config, seed)
    fast.run()
    score, order, harvesting = _KUBE[preset]
    plain = Simulation(make(seed), _PlainKube(preset, score, order=order, harvesting=harvesting), config, seed)
    plain.run()
    assert fast.log and fast.log == plain.log
