"""Bandwidth estimates (``stowage.policy.use_estimates``): from a pod's samples to what its group reserves."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from stowage.config import EstimateSettings
from stowage.errors import InvalidInput
from stowage.policy import room, use_estimates
from stowage.policy.use_estimates import SOURCE_NAMES, Source, UseSeen, estimate, group_peaks, reserved, sustained_peak

NAN, INF = math.nan, math.inf
MI = float(1 << 20)
S = EstimateSettings()  # bandwidth_margin 1.25, bandwidth_window_s 30
# Resource axis of these tests: cpu, disk, network; disk and network are the bandwidth columns.
BW = np.array([False, True, True])


def one(declared: tuple[float, float, float], peak: tuple[float, float, float] = (NAN, NAN, NAN),
        history: tuple[float, float, float] = (NAN, NAN, NAN),
        settings: EstimateSettings = S) -> tuple[list[float], list[str]]:
    """``estimate`` for one group: (demand, source names)."""
    out = estimate(UseSeen(np.array([declared]), np.array([peak]), np.array([history])), BW, settings)
    return out.demand[0].tolist(), [SOURCE_NAMES[s] for s in out.source[0].tolist()]


def test_source_names_line_up_with_the_source_values() -> None:
    assert [s.name.lower() for s in Source] == list(SOURCE_NAMES)


# (declared cpu, disk, network), the highest sustained use seen, earlier runs → demand, sources
ESTIMATE_CASES = [
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, NAN, NAN), (NAN, NAN, NAN),
                 [2.0, 80 * MI, 40 * MI], ["declared", "declared", "declared"], id="no-data-declared"),
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, 20 * MI, 8 * MI), (NAN, NAN, NAN),
                 [2.0, 25 * MI, 10 * MI], ["declared", "observed", "observed"], id="seen-times-the-margin"),
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, 70 * MI, 40 * MI), (NAN, NAN, NAN),
                 [2.0, 80 * MI, 40 * MI], ["declared", "observed", "observed"], id="never-above-declared"),
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, NAN, NAN), (NAN, 16 * MI, 4 * MI),
                 [2.0, 20 * MI, 5 * MI], ["declared", "history", "history"], id="history-when-nothing-seen"),
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, 40 * MI, NAN), (NAN, 16 * MI, 4 * MI),
                 [2.0, 50 * MI, 5 * MI], ["declared", "observed", "history"], id="seen-beats-history-per-column"),
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, NAN, INF), (NAN, -1.0, NAN),
                 [2.0, 80 * MI, 40 * MI], ["declared", "declared", "declared"], id="nan-inf-negative-no-evidence"),
    pytest.param((2.0, 80 * MI, 40 * MI), (NAN, 0.0, NAN), (NAN, NAN, NAN),
                 [2.0, 0.0, 40 * MI], ["declared", "observed", "declared"], id="seen-using-nothing-reserves-nothing"),
    pytest.param((2.0, 0.0, NAN), (NAN, 20 * MI, 8 * MI), (NAN, NAN, NAN),
                 [2.0, 0.0, 0.0], ["declared", "observed", "observed"], id="nothing-declared-nothing-reserved"),
    pytest.param((2.0, 80 * MI, 40 * MI), (5.0, 1e308, NAN), (NAN, NAN, NAN),
                 [2.0, 80 * MI, 40 * MI], ["declared", "observed", "declared"], id="huge-peak-capped-cpu-untouched"),
]


@pytest.mark.parametrize(("declared", "peak", "history", "demand", "sources"), ESTIMATE_CASES)
def test_estimate(declared: tuple[float, float, float], peak: tuple[float, float, float],
                  history: tuple[float, float, float], demand: list[float], sources: list[str]) -> None:
    got, names = one(declared, peak, history)
    assert got == pytest.approx(demand)
    assert names == sources


def test_the_margin_is_the_setting() -> None:
    doubled = dataclasses.replace(S, bandwidth_margin=2.0)
    got, _ = one((1.0, 80 * MI, 40 * MI), (NAN, 20 * MI, 20 * MI), settings=doubled)
    assert got == pytest.approx([1.0, 40 * MI, 40 * MI])


def test_shapes_must_agree() -> None:
    with pytest.raises(InvalidInput) as e:
        estimate(UseSeen(np.zeros((2, 3)), np.zeros((1, 3)), np.zeros((2, 3))), BW, S)
    assert str(e.value) == "evidence.peak.shape: must be (2, 3), one row per task group, got (1, 3)"
    with pytest.raises(InvalidInput) as e:
        estimate(UseSeen(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3))), [True], S)
    assert str(e.value) == "bandwidth.shape: must be (3,), one per resource, got (1,)"


# One pod's samples (every 5 s) → its sustained peak over 30 s windows
T = np.arange(0.0, 125.0, 5.0)  # 25 samples over 120 s
STEADY = np.full(T.shape, 20 * MI)
BURST = np.where((T >= 60) & (T < 65), 100 * MI, 20 * MI)  # one 5 s sample at the whole declared rate
LONG_BURST = np.where((T >= 60) & (T < 100), 100 * MI, 20 * MI)  # 40 s at 100: longer than the window
PEAK_CASES = [
    pytest.param(T, STEADY, 20 * MI, id="steady"),
    pytest.param(T, BURST, (5 * 20 + 100) / 6 * MI, id="short-burst-averaged-in"),
    pytest.param(T, LONG_BURST, 100 * MI, id="burst-longer-than-the-window-is-the-peak"),
    pytest.param(T, np.where(T == 60, NAN, STEADY), 20 * MI, id="nan-sample-left-out"),
    pytest.param(T[:6], STEADY[:6], NAN, id="shorter-than-a-window-not-seen"),
    pytest.param(np.zeros(0), np.zeros(0), NAN, id="pod-without-samples"),
    pytest.param(T, np.full(T.shape, NAN), NAN, id="only-nan-samples"),
]


@pytest.mark.parametrize(("times", "values", "expected"), PEAK_CASES)
def test_sustained_peak(times: np.ndarray, values: np.ndarray, expected: float) -> None:
    got = sustained_peak(times, values.reshape(-1, 1), 30.0)
    assert got.shape == (1,)
    if math.isnan(expected):
        assert math.isnan(got[0])
    else:
        assert got[0] == pytest.approx(expected)


def test_group_peaks_take_the_highest_seen_pod_and_skip_pods_without_samples() -> None:
    peaks = np.array([[10.0, 1.0], [30.0, NAN], [NAN, NAN], [5.0, 2.0]])
    got = group_peaks([0, 0, 1, 2], peaks, 4)
    assert got[0].tolist() == [30.0, 1.0]
    assert np.isnan(got[1]).all() and np.isnan(got[3]).all()  # pod without samples; a group with no pod
    assert got[2].tolist() == [5.0, 2.0]


def test_one_finished_pod_seen_lowers_the_next_tasks_reservation() -> None:
    """The chain the operator runs: a finished pod's samples → its group's peak → the estimate → the room."""
    declared = np.array([[1.0, 80 * MI, 0.0]])
    peak = group_peaks([0], sustained_peak(T, np.stack([STEADY * 0, STEADY, STEADY * 0], axis=1), 30.0)[None], 1)
    est = estimate(UseSeen(declared, peak, np.full_like(declared, NAN)), BW, S).demand
    assert est[0].tolist() == pytest.approx([1.0, 25 * MI, 0.0])
    # Two running regular pods of the group on a 100 Mi/s node: 50 Mi/s reserved, a third task fits.
    held = reserved([0, 0], [0, 0], est, 1)
    free = room.bandwidth_room(np.array([[4.0, 100 * MI, 0.0]]), held)
    assert free[0, 1] == pytest.approx(50 * MI)
    assert est[0, 1] <= free[0, 1]
    # As declared, the first pod alone leaves too little for a second.
    assert room.bandwidth_room(np.array([[4.0, 100 * MI, 0.0]]), declared)[0, 1] < declared[0, 1]


def test_reserved_sums_per_node_and_skips_rows_out_of_range() -> None:
    est = np.array([[1.0, 2.0], [10.0, 20.0]])
    got = reserved([0, 1, 1, 5, 0], [0, 0, 1, 0, 9], est, 2)
    assert got.tolist() == [[11.0, 22.0], [10.0, 20.0]]
    with pytest.raises(InvalidInput) as e:
        reserved([0], [0, 1], est, 2)
    assert str(e.value) == "pod_node.shape: must be (1,) like pod_group, got (2,)"


def test_module_names_are_exported() -> None:
    assert set(use_estimates.__all__) >= {"estimate", "reserved", "sustained_peak", "group_peaks"}
