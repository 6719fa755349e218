"""The bandwidth estimator's HISTORY row (``policy.use_estimates``, ``estimates.RecurringHistory.observe_use``):
what earlier runs of a recurring job used, from their finished pods' samples to the next run's estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stowage.config import EstimateSettings
from stowage.policy import use_estimates
from stowage.policy.estimates import RecurringHistory
from stowage.policy.use_estimates import SOURCE_NAMES, UseSeen, estimate, history_use, sustained_peak, use_fractions

NAN = math.nan
MI = float(1 << 20)
S = EstimateSettings()  # bandwidth_margin 1.25, bandwidth_window_s 30, history_weight_cap 100
RESOURCES = ("cpu", "disk", "network")
BW = np.array([False, True, True])
DECLARED = np.array([2.0, 80 * MI, 40 * MI])
T = np.arange(0.0, 65.0, 5.0)  # a pod sampled every 5 s for 60 s


def steady(disk: float, network: float) -> np.ndarray:
    return np.tile([NAN, disk, network], (T.size, 1))


def burst() -> np.ndarray:
    v = steady(10 * MI, 4 * MI)
    v[6, 1] = 80 * MI  # one 5 s sample at the whole declaration
    return v


def no_samples() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0), np.zeros((0, 3))


def nan_samples() -> np.ndarray:
    return np.full((T.size, 3), NAN)


def next_run(earlier: list[tuple[np.ndarray, np.ndarray]], peak_now: tuple[float, float, float] = (NAN, NAN, NAN),
             declared_now: np.ndarray = DECLARED) -> tuple[list[float], list[str]]:
    """Earlier run: each finished pod's samples → ``observe_use``; then this run's estimate for the group."""
    history = RecurringHistory(S)
    for times, values in earlier:
        used = sustained_peak(times, values, S.bandwidth_window_s)
        history.observe_use("ns/nightly", "map", use_fractions(used, DECLARED, RESOURCES, BW))
    recalled = history_use(declared_now[None, :], [history.use("ns/nightly", "map")], RESOURCES)
    out = estimate(UseSeen(declared_now[None, :], np.array([peak_now]), recalled), BW, S)
    return out.demand[0].tolist(), [SOURCE_NAMES[s] for s in out.source[0].tolist()]


# earlier run's finished pods (times, samples), this run's own peak, declared now → demand, sources
CASES = [
    pytest.param([], (NAN, NAN, NAN), DECLARED, [2.0, 80 * MI, 40 * MI], ["declared"] * 3, id="no-data"),
    pytest.param([(T, steady(20 * MI, 8 * MI))], (NAN, NAN, NAN), DECLARED,
                 [2.0, 25 * MI, 10 * MI], ["declared", "history", "history"], id="one-finished-task"),
    # the 30 s window around the burst holds 5 samples at 10 Mi/s and one at 80: (5·10 + 80)/6
    pytest.param([(T, burst())], (NAN, NAN, NAN), DECLARED,
                 [2.0, 1.25 * (5 * 10 + 80) / 6 * MI, 5 * MI], ["declared", "history", "history"], id="burst-averaged"),
    pytest.param([(T, nan_samples())], (NAN, NAN, NAN), DECLARED,
                 [2.0, 80 * MI, 40 * MI], ["declared"] * 3, id="nan-samples-no-evidence"),
    pytest.param([no_samples()], (NAN, NAN, NAN), DECLARED,
                 [2.0, 80 * MI, 40 * MI], ["declared"] * 3, id="pod-without-samples"),
    pytest.param([(T[:4], steady(20 * MI, 8 * MI)[:4])], (NAN, NAN, NAN), DECLARED,
                 [2.0, 80 * MI, 40 * MI], ["declared"] * 3, id="shorter-than-a-window-not-seen"),
    # disk rises to the second task's 40 at once; network falls from 8 halfway to 4 (count 2): 6
    pytest.param([(T, steady(20 * MI, 8 * MI)), (T, steady(40 * MI, 4 * MI))], (NAN, NAN, NAN), DECLARED,
                 [2.0, 50 * MI, 7.5 * MI], ["declared", "history", "history"], id="rise-at-once-fall-by-count"),
    pytest.param([(T, steady(20 * MI, 8 * MI))], (NAN, 32 * MI, NAN), DECLARED,
                 [2.0, 40 * MI, 10 * MI], ["declared", "observed", "history"], id="history-present-seen-wins"),
    # a fraction of what is declared: a run that declares half uses half of it
    pytest.param([(T, steady(20 * MI, 8 * MI))], (NAN, NAN, NAN), np.array([2.0, 40 * MI, 20 * MI]),
                 [2.0, 12.5 * MI, 5 * MI], ["declared", "history", "history"], id="declared-changed-fraction-kept"),
]


@pytest.mark.parametrize(("earlier", "peak_now", "declared_now", "demand", "sources"), CASES)
def test_history_row(earlier: list[tuple[np.ndarray, np.ndarray]], peak_now: tuple[float, float, float],
                     declared_now: np.ndarray, demand: list[float], sources: list[str]) -> None:
    got, names = next_run(earlier, peak_now, declared_now)
    assert got == pytest.approx(demand)
    assert names == sources


def test_use_fractions_skip_what_is_not_declared_or_not_seen() -> None:
    used = np.array([1.0, 20 * MI, NAN])
    assert use_fractions(used, DECLARED, RESOURCES, BW) == {"disk": 0.25}
    assert use_fractions(used, np.array([2.0, 0.0, 40 * MI]), RESOURCES, BW) == {}
    assert use_fractions(np.array([1.0, -1.0, 0.0]), DECLARED, RESOURCES, BW) == {"network": 0.0}


def test_a_higher_use_replaces_at_once_a_lower_one_moves_by_the_capped_count() -> None:
    h = RecurringHistory(EstimateSettings(history_weight_cap=4))
    h.observe_use("k", "g", {"disk": 0.5})
    h.observe_use("k", "g", {"disk": 0.1})  # count 2: 0.5 + (0.1 − 0.5)/2
    assert h.use("k", "g") == pytest.approx({"disk": 0.3})
    h.observe_use("k", "g", {"disk": 0.9, "network": NAN})
    assert h.use("k", "g") == pytest.approx({"disk": 0.9})
    for _ in range(10):  # the count stays at the cap: each lighter run moves it by a quarter
        h.observe_use("k", "g", {"disk": 0.1})
    assert h.use("k", "g")["disk"] == pytest.approx(0.1 + 0.8 * 0.75 ** 10)
    assert h.use("k", "other") == {} and h.use("x", "g") == {}


def test_use_is_bounded_and_saved_with_the_durations() -> None:
    h = RecurringHistory(EstimateSettings(history_max_entries=2))
    for key in ("a", "b", "c"):
        h.observe_use(key, "g", {"disk": 0.5})
    h.observe("a", "g", 12.0)
    assert h.use("a", "g") == {}, "the least recently updated is dropped"
    state = h.state_dict()
    assert state["use"] == [["b", "g", 1, {"disk": 0.5}], ["c", "g", 1, {"disk": 0.5}]]
    back = RecurringHistory.from_state(state, EstimateSettings())
    assert back.state_dict() == state and back.get("a", "g") == 12.0
    older = {"version": 1, "entries": state["entries"]}  # saved before use was kept
    assert RecurringHistory.from_state(older, EstimateSettings()).use("b", "g") == {}


@pytest.mark.parametrize("row", [["k", "g", 1, {"disk": -0.1}], ["k", "g", 0, {"disk": 0.1}], ["k", "g", 1],
                                 ["k", "g", 1, [0.1]]])
def test_malformed_use_rows_are_refused(row: list[object]) -> None:
    with pytest.raises(ValueError):
        RecurringHistory.from_state({"version": 1, "entries": [], "use": [row]}, S)


def test_module_names_are_exported() -> None:
    assert {"history_use", "use_fractions"} <= set(use_estimates.__all__)
