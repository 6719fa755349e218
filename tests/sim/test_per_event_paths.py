"""The per-event shortcuts (#12 speed) take each of their paths and give the same runs as the other path.

Each shortcut has a cheap path and a general one chosen by a threshold; forcing the threshold one way
then the other must leave every placement, finish and eviction where it was (the pinned digests of
``test_speed_pins`` cover only the path the default thresholds take on those runs).
"""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim import baselines, rates
from stowage.sim.engine import SimConfig
from stowage.sim.usage import UsageModel
from tests.sim.kit import BURSTY, contended
from tests.sim.test_speed_pins import digest


@pytest.mark.parametrize("preset", ["kube-default", "drf", "ubis"])
def test_a_pass_over_renumbered_shapes_places_as_one_over_the_workloads_shapes(monkeypatch, preset: str) -> None:
    workload, config = contended(seed=5, n_jobs=16), SimConfig(usage=BURSTY, trace=True)
    few = digest(workload, preset, config, 5)
    monkeypatch.setattr(baselines, "_FEW_SHAPES", 0)  # every pass renumbers the shapes present
    assert digest(workload, preset, config, 5) == few


@pytest.mark.parametrize("preset", ["ubis", "stowage"])
def test_the_tracker_gives_the_same_runs_whether_it_redoes_every_row_or_only_those_that_moved(
        monkeypatch, preset: str) -> None:
    workload, config = contended(seed=6, n_jobs=16), SimConfig(usage=BURSTY, trace=True)
    default = digest(workload, preset, config, 6)
    rows: list[tuple[int, int]] = []  # (rows evaluated, rows running) per tracked evaluation
    running = [0]
    current_use, fraction_t = rates.RateTracker.current_use, UsageModel.fraction_t

    def tracked(self: rates.RateTracker) -> np.ndarray:
        running[0] = len(self.sim.running) if self.active else -1
        try:
            return current_use(self)
        finally:
            running[0] = -1  # count only current_use's evaluations (rates() evaluates the hot nodes' rows)

    def counted(self: UsageModel, now_s, started_s, bases, burst_until_s) -> list[np.ndarray]:
        if running[0] >= 0:
            rows.append((started_s.shape[0], running[0]))
        return fraction_t(self, now_s, started_s, bases, burst_until_s)

    monkeypatch.setattr(rates.RateTracker, "current_use", tracked)
    monkeypatch.setattr(UsageModel, "fraction_t", counted)
    monkeypatch.setattr(rates, "_REDO_ALL_FRACTION", 2.0)  # every row only after rows were dropped
    assert digest(workload, preset, config, 6) == default
    assert any(k < p for k, p in rows)  # the partial path ran
    rows.clear()
    monkeypatch.setattr(rates, "_REDO_ALL_FRACTION", 0.0)  # every row, every time
    assert digest(workload, preset, config, 6) == default
    assert rows and all(k == p for k, p in rows)


@pytest.mark.parametrize("seed", range(4))
def test_row_wise_any_and_all_equal_numpys_including_nan(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for width in (1, 2, 3, 4, 5, 8):  # a row read as one integer (1, 2, 4, 8) and column by column
        a = rng.uniform(0, 2, (500, width))
        a[rng.random(a.shape) < 0.05] = np.nan
        b = rng.uniform(0, 2, width)
        both = np.concatenate([a <= b, a > b], axis=1)
        for mask in (a <= b, a > b, a != a[::-1], a < 3, a > 3, both[:, ::2]):  # the last one not contiguous
            np.testing.assert_array_equal(baselines._any_per_row(mask), mask.any(axis=1))
            np.testing.assert_array_equal(baselines._all_per_row(mask), mask.all(axis=1))
    empty = np.zeros((3, 0), dtype=bool)
    np.testing.assert_array_equal(baselines._any_per_row(empty), empty.any(axis=1))
    np.testing.assert_array_equal(baselines._all_per_row(empty), empty.all(axis=1))


def test_resource_major_usage_equals_the_row_major_model() -> None:
    """UsageModel.fraction_t on K rows of P gives fraction's bits on (P, K), bursts and the ramp included."""
    rng = np.random.default_rng(3)
    model = BURSTY
    p = 300
    start = rng.uniform(0, 20, p)
    base = rng.uniform(0.05, 1.0, (p, 2))
    burst = np.where(rng.random(p) < 0.3, rng.uniform(5, 30, p), -np.inf)
    for now in (0.0, 7.5, 12.0, 40.0):
        assert np.stack(model.fraction_t(now, start, tuple(base.T), burst), axis=1).tobytes() == \
            model.fraction(now, start, base, burst).tobytes()


@pytest.mark.parametrize("ramp_start", [0.2, 0.0, 0.37, 0.999, 1.0])
def test_the_ramp_in_place_equals_the_clipped_formula_bit_for_bit(ramp_start: float) -> None:
    """UsageModel._ramp (max, min, ×, + in place) against ramp_start + (1 − ramp_start)·clip((t − s)/r, 0, 1)."""
    from stowage.sim.usage import UsageModel

    rng = np.random.default_rng(5)
    model = UsageModel(ramp_start=ramp_start, ramp_s=7.3)
    started = np.concatenate([rng.uniform(-20, 120, 2000), [100.0, 100.0 - 7.3, np.nan, np.inf, -np.inf, 0.0, -0.0]])
    for now in (0.0, -0.0, 100.0, 55.5, 1e9):
        want = ramp_start + (1.0 - ramp_start) * np.clip((now - started) / 7.3, 0.0, 1.0)
        assert np.asarray(model._ramp(now, started)).tobytes() == want.tobytes()
