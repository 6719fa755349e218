"""Duration estimates (Tetris §4.1): hint, phase, history, prior, the elapsed lower bound; the learned state."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.config import EstimateSettings
from stowage.errors import InvalidInput
from stowage.labels import LABEL_RECURRING
from stowage.policy.estimates import (
    MAX_KEYS,
    SOURCE_NAMES,
    DurationPriors,
    Evidence,
    RecurringHistory,
    Source,
    estimate,
    recurring_key,
)

NAN, INF = math.nan, math.inf
S = EstimateSettings()


def estimate_one(
    *,
    hint_s: float = math.nan,
    finished: int = 0,
    finished_mean_s: float = math.nan,
    elapsed_s: float = 0.0,
    history_s: float = math.nan,
    prior_s: float,
    settings: EstimateSettings,
) -> tuple[float, Source]:
    """``estimate`` for one group: ``(duration_s, source)``, for tables of cases."""
    ev = Evidence(
        hint_s=np.array([hint_s], dtype=np.float64),
        finished=np.array([finished], dtype=np.int64),
        finished_mean_s=np.array([finished_mean_s], dtype=np.float64),
        elapsed_s=np.array([elapsed_s], dtype=np.float64),
        history_s=np.array([history_s], dtype=np.float64),
        prior_s=np.array([prior_s], dtype=np.float64),
    )
    out = estimate(ev, settings)
    return float(out.duration_s[0]), Source(int(out.source[0]))


def test_source_names_line_up_with_the_source_values() -> None:
    assert [SOURCE_NAMES[s] for s in Source] == ["hint", "phase", "elapsed", "history", "prior"]
    assert [s.name.lower() for s in Source] == list(SOURCE_NAMES)


@pytest.mark.parametrize(
    ("evidence", "duration", "source"),
    [
        pytest.param({"hint_s": 45.0, "prior_s": 120.0}, 45.0, Source.HINT, id="hint"),
        pytest.param({"finished": 3, "finished_mean_s": 20.0, "prior_s": 120.0}, 20.0, Source.PHASE, id="phase"),
        pytest.param({"history_s": 70.0, "prior_s": 120.0}, 70.0, Source.HISTORY, id="history"),
        pytest.param({"prior_s": 120.0}, 120.0, Source.PRIOR, id="prior"),
        pytest.param({"prior_s": NAN}, 300.0, Source.PRIOR, id="nothing-known-default-prior"),
        pytest.param({"hint_s": 45.0, "finished": 3, "finished_mean_s": 20.0, "history_s": 70.0, "prior_s": 120.0},
                     45.0, Source.HINT, id="hint-beats-phase-history-prior"),
        pytest.param({"finished": 3, "finished_mean_s": 20.0, "history_s": 70.0, "prior_s": 120.0},
                     20.0, Source.PHASE, id="phase-beats-history-prior"),
        pytest.param({"history_s": 70.0, "prior_s": 10.0}, 70.0, Source.HISTORY, id="history-beats-a-smaller-prior"),
        pytest.param({"finished": 0, "finished_mean_s": 20.0, "prior_s": 120.0}, 120.0, Source.PRIOR,
                     id="mean-of-no-finished-task-ignored"),
        pytest.param({"hint_s": 10.0, "elapsed_s": 40.0, "prior_s": 120.0}, 50.0, Source.ELAPSED,
                     id="elapsed-raises-hint"),
        pytest.param({"finished": 2, "finished_mean_s": 20.0, "elapsed_s": 30.0, "prior_s": 120.0}, 37.5,
                     Source.ELAPSED, id="elapsed-raises-phase"),
        pytest.param({"history_s": 70.0, "elapsed_s": 80.0, "prior_s": 120.0}, 100.0, Source.ELAPSED,
                     id="elapsed-raises-history"),
        pytest.param({"prior_s": 120.0, "elapsed_s": 200.0}, 250.0, Source.ELAPSED, id="elapsed-raises-prior"),
        pytest.param({"prior_s": NAN, "elapsed_s": 400.0}, 500.0, Source.ELAPSED, id="elapsed-raises-default-prior"),
        pytest.param({"hint_s": 45.0, "elapsed_s": 30.0, "prior_s": 120.0}, 45.0, Source.HINT,
                     id="elapsed-below-estimate-keeps-it"),
        pytest.param({"hint_s": 45.0, "elapsed_s": 45.0, "prior_s": 120.0}, 45.0, Source.HINT,
                     id="elapsed-equal-to-estimate-keeps-it"),
        pytest.param({"hint_s": 0.25, "prior_s": 120.0}, 1.0, Source.HINT, id="tiny-hint-clamped-to-min"),
        pytest.param({"hint_s": 0.25, "elapsed_s": 0.5, "prior_s": 120.0}, 1.0, Source.ELAPSED,
                     id="tiny-elapsed-clamped-to-min"),
        pytest.param({"prior_s": 0.001}, 1.0, Source.PRIOR, id="tiny-prior-clamped-to-min"),
        pytest.param({"elapsed_s": 1e308, "prior_s": 120.0}, 1.25e308, Source.ELAPSED, id="huge-elapsed-stays-finite"),
    ],
)
def test_each_source_and_its_precedence(evidence: dict, duration: float, source: Source) -> None:
    assert estimate_one(**evidence, settings=S) == (duration, source)


def test_a_huge_elapsed_times_the_margin_is_capped_finite() -> None:
    got, source = estimate_one(elapsed_s=1.7e308, prior_s=120.0, settings=S)  # × 1.25 would overflow to inf
    assert (got, source) == (np.finfo(np.float64).max, Source.ELAPSED)


@pytest.mark.parametrize(
    ("knobs", "evidence", "duration", "source"),
    [
        pytest.param({"min_finished": 3}, {"finished": 2, "finished_mean_s": 20.0, "history_s": 70.0, "prior_s": 5.0},
                     70.0, Source.HISTORY, id="too-few-finished-for-the-phase"),
        pytest.param({"min_finished": 3}, {"finished": 3, "finished_mean_s": 20.0, "history_s": 70.0, "prior_s": 5.0},
                     20.0, Source.PHASE, id="enough-finished-for-the-phase"),
        pytest.param({"elapsed_margin": 2.0}, {"hint_s": 10.0, "elapsed_s": 40.0, "prior_s": 5.0}, 80.0,
                     Source.ELAPSED, id="elapsed-margin"),
        pytest.param({"elapsed_margin": 1.0}, {"hint_s": 10.0, "elapsed_s": 40.0, "prior_s": 5.0}, 40.0,
                     Source.ELAPSED, id="elapsed-margin-one-is-elapsed"),
        pytest.param({"min_duration_s": 30.0}, {"hint_s": 10.0, "prior_s": 5.0}, 30.0, Source.HINT, id="min-duration"),
        pytest.param({"default_prior_s": 42.0}, {"prior_s": -1.0}, 42.0, Source.PRIOR, id="default-prior"),
    ],
)
def test_settings_move_the_estimate(knobs: dict, evidence: dict, duration: float, source: Source) -> None:
    assert estimate_one(**evidence, settings=EstimateSettings(**knobs)) == (duration, source)


BAD = [NAN, INF, -INF, 0.0, -5.0]
#: field made bad → (the evidence around it, what the estimate falls back to)
FALLBACK = {
    "hint_s": ({"finished": 2, "finished_mean_s": 20.0, "prior_s": 120.0}, (20.0, Source.PHASE)),
    "finished_mean_s": ({"finished": 2, "history_s": 70.0, "prior_s": 120.0}, (70.0, Source.HISTORY)),
    "history_s": ({"prior_s": 120.0}, (120.0, Source.PRIOR)),
    "prior_s": ({}, (300.0, Source.PRIOR)),
    "elapsed_s": ({"prior_s": 120.0}, (120.0, Source.PRIOR)),
}


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf", "zero", "negative"])
@pytest.mark.parametrize("field", list(FALLBACK))
def test_a_bad_value_in_any_field_counts_as_absent(field: str, bad: float) -> None:
    around, expected = FALLBACK[field]
    assert estimate_one(**{"prior_s": NAN, **around, field: bad}, settings=S) == expected


@pytest.mark.parametrize("finished", [0, -3], ids=["zero", "negative"])
def test_no_finished_tasks_means_no_phase_mean(finished: int) -> None:
    assert estimate_one(finished=finished, finished_mean_s=20.0, prior_s=120.0, settings=S) == (120.0, Source.PRIOR)


def test_every_field_bad_at_once_gives_the_default_prior() -> None:
    ev = Evidence(*(np.array(BAD) for _ in range(6)))
    out = estimate(ev, S)
    assert out.duration_s.tolist() == [300.0] * 5
    assert out.source.tolist() == [Source.PRIOR] * 5
    assert out.source.dtype == np.int8


def _evidence(rows: list[tuple]) -> Evidence:
    """Rows of (hint, finished, finished mean, elapsed, history, prior) as the (G,) columns."""

    def col(i: int, dtype: type) -> np.ndarray:
        return np.array([row[i] for row in rows], dtype=dtype)

    return Evidence(hint_s=col(0, np.float64), finished=col(1, np.int64), finished_mean_s=col(2, np.float64),
                    elapsed_s=col(3, np.float64), history_s=col(4, np.float64), prior_s=col(5, np.float64))


def test_rows_are_estimated_independently() -> None:
    out = estimate(_evidence([(45.0, 0, NAN, 0.0, NAN, 120.0), (NAN, 3, 20.0, 30.0, NAN, 120.0),
                              (NAN, 0, NAN, NAN, 70.0, 120.0), (NAN, 0, NAN, 0.0, NAN, NAN)]), S)
    assert out.duration_s.tolist() == [45.0, 37.5, 70.0, 300.0]
    assert out.source.tolist() == [Source.HINT, Source.ELAPSED, Source.HISTORY, Source.PRIOR]


def test_no_rows_give_empty_estimates() -> None:
    out = estimate(_evidence([]), S)
    assert out.duration_s.shape == (0,) and out.source.shape == (0,)


def test_fields_of_different_lengths_are_refused_naming_the_field() -> None:
    ev = dataclasses.replace(_evidence([(NAN, 0, NAN, 0.0, NAN, 120.0)] * 3), history_s=np.zeros(2))
    with pytest.raises(InvalidInput, match=r"evidence\.history_s\.shape: must be \(3,\)"):
        estimate(ev, S)


_VALUE = st.one_of(st.sampled_from([NAN, INF, -INF, 0.0, -1.0, 0.5, 1.0, 30.0, 300.0, 1e308]),
                   st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
_ROW = st.tuples(_VALUE, st.integers(-1, 5), _VALUE, _VALUE, _VALUE, _VALUE)
_SETTINGS = st.builds(EstimateSettings, min_finished=st.integers(1, 4),
                      elapsed_margin=st.sampled_from([1.0, 1.25, 3.0]),
                      min_duration_s=st.sampled_from([0.5, 1.0, 60.0]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_ROW, max_size=30), _SETTINGS)
def test_the_vectorised_rule_is_the_scalar_rule_row_by_row(rows: list[tuple], knobs: EstimateSettings) -> None:
    out = estimate(_evidence(rows), knobs)
    assert out.duration_s.shape == out.source.shape == (len(rows),)
    for i, (hint, finished, mean, elapsed, history, prior) in enumerate(rows):
        one = estimate_one(hint_s=hint, finished=finished, finished_mean_s=mean, elapsed_s=elapsed,
                           history_s=history, prior_s=prior, settings=knobs)
        assert (float(out.duration_s[i]), Source(int(out.source[i]))) == one
        # Never NaN, never below the floor, and never below a valid elapsed.
        assert math.isfinite(one[0]) and one[0] >= knobs.min_duration_s
        if math.isfinite(elapsed) and elapsed > 0:
            assert one[0] >= elapsed
        if math.isfinite(hint) and hint > 0 and one[1] is not Source.ELAPSED:
            assert one[0] == max(hint, knobs.min_duration_s)


# --- DurationPriors -----------------------------------------------------------------------------


def test_priors_are_learned_per_queue_with_the_margin() -> None:
    priors = DurationPriors(S)
    assert priors.prior("batch") == 300.0
    for d in (10.0, 20.0, 30.0):
        priors.observe("batch", d)
    priors.observe("ml", 1000.0)
    assert priors.prior("batch") == 30.0  # mean 20 × 1.5
    assert priors.prior("ml") == 1500.0
    assert priors.prior("other") == 300.0
    assert priors.priors(["ml", "batch", "other", "batch"]).tolist() == [1500.0, 30.0, 300.0, 30.0]
    assert priors.priors([]).shape == (0,)
    assert (priors.learned_mean("batch"), priors.learned_mean("other")) == (20.0, None)  # the forecast's: no margin


@pytest.mark.parametrize("bad", [NAN, INF, -INF, -1.0], ids=["nan", "inf", "-inf", "negative"])
def test_priors_ignore_unusable_durations(bad: float) -> None:
    priors = DurationPriors(S)
    priors.observe("q", bad)
    assert priors.prior("q") == 300.0
    priors.observe("q", 40.0)
    priors.observe("q", bad)
    assert priors.prior("q") == 60.0


def test_a_queue_of_instant_tasks_still_has_a_positive_prior() -> None:
    priors = DurationPriors(EstimateSettings(min_duration_s=2.0))
    priors.observe("q", 0.0)
    assert priors.prior("q") == 2.0


def test_priors_survive_a_restart() -> None:
    priors = DurationPriors(S)
    for q, d in [("a", 10.0), ("b", 7.25), ("a", 13.0), ("c", 0.1)]:
        priors.observe(q, d)
    state = json.loads(json.dumps(priors.state_dict()))  # what the operator saves
    restored = DurationPriors.from_state(state, S)
    assert restored.state_dict() == priors.state_dict()
    assert restored.priors(["a", "b", "c", "d"]).tolist() == priors.priors(["a", "b", "c", "d"]).tolist()
    assert restored.prior("a") == 17.25
    restored.observe("a", 100.0)
    priors.observe("a", 100.0)
    assert restored.prior("a") == priors.prior("a") == 61.5  # mean 41 × 1.5: the count came back too
    # The margin is applied when asked: a changed setting applies to restored state.
    assert DurationPriors.from_state(state, EstimateSettings(prior_margin=2.0)).prior("a") == 23.0


def test_priors_keep_at_most_max_keys_queues_forgetting_the_least_recently_observed() -> None:
    priors = DurationPriors(S)
    for i in range(MAX_KEYS):
        priors.observe(f"q{i}", 10.0)
    priors.observe("q0", 20.0)  # q0 is now newer than q1
    priors.observe("new", 40.0)
    assert len(priors) == MAX_KEYS
    assert priors.prior("q1") == S.default_prior_s, "forgotten: the default prior again"
    assert (priors.prior("q0"), priors.prior("q2"), priors.prior("new")) == (22.5, 15.0, 60.0)
    assert priors.state_dict()["recent"][:2] == ["q2", "q3"] and priors.state_dict()["recent"][-2:] == ["q0", "new"]


def test_priors_recency_survives_the_operators_sorted_json() -> None:
    """The operator saves with ``sort_keys``, which loses a mapping's order: ``recent`` keeps it, so the restored
    priors forget the same queue next."""
    priors = DurationPriors(S)
    for q in (f"q{i:04d}" for i in range(MAX_KEYS - 1, -1, -1)):  # observed in reverse of sorted order
        priors.observe(q, 10.0)
    restored = DurationPriors.from_state(json.loads(json.dumps(priors.state_dict(), sort_keys=True)), S)
    assert restored.state_dict() == priors.state_dict()
    for x in (priors, restored):
        x.observe("new", 5.0)
    assert restored.state_dict() == priors.state_dict()
    assert restored.prior(f"q{MAX_KEYS - 1:04d}") == S.default_prior_s and restored.prior("q0000") == 15.0


def test_priors_saved_before_the_bound_load_in_sorted_order() -> None:
    old = {"version": 1, "queues": {f"q{i:04d}": [1, 10.0] for i in range(MAX_KEYS + 2)}}  # no "recent"
    priors = DurationPriors.from_state(old, S)
    assert len(priors) == MAX_KEYS
    assert priors.prior("q0000") == priors.prior("q0001") == S.default_prior_s  # the first two, cut to the bound
    assert priors.prior("q0002") == priors.prior(f"q{MAX_KEYS + 1:04d}") == 15.0


@pytest.mark.parametrize(
    ("state", "error"),
    [
        pytest.param({"version": 1, "queues": {"a": [1, 2.0]}, "recent": ["b"]}, ValueError, id="recent-unknown"),
        pytest.param({"version": 1, "queues": {"a": [1, 2.0]}, "recent": ["a", "a"]}, ValueError, id="recent-twice"),
        pytest.param({"version": 1, "queues": {"a": [1, 2.0]}, "recent": "a"}, ValueError, id="recent-a-string"),
        pytest.param({"version": 2, "queues": {}}, ValueError, id="version"),
        pytest.param({"queues": {}}, KeyError, id="no-version"),
        pytest.param({"version": 1}, KeyError, id="no-queues"),
        pytest.param({"version": 1, "queues": [["a", 1, 2.0]]}, TypeError, id="queues-not-a-mapping"),
        pytest.param({"version": 1, "queues": {"a": [0, 2.0]}}, ValueError, id="zero-count"),
        pytest.param({"version": 1, "queues": {"a": [1.5, 2.0]}}, TypeError, id="fractional-count"),
        pytest.param({"version": 1, "queues": {"a": [1, -2.0]}}, ValueError, id="negative-mean"),
        pytest.param({"version": 1, "queues": {"a": [1, "NaN"]}}, ValueError, id="nan-mean"),
        pytest.param({"version": 1, "queues": {"a": [1]}}, ValueError, id="short-row"),
        pytest.param({"version": 1, "queues": {"a": [1, None]}}, TypeError, id="null-mean"),
    ],
)
def test_malformed_priors_state_is_refused(state: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        DurationPriors.from_state(state, S)


# --- RecurringHistory ---------------------------------------------------------------------------


def test_history_is_per_key_and_group() -> None:
    h = RecurringHistory(S)
    h.observe("ns/etl", "map", 10.0)
    h.observe("ns/etl", "map", 20.0)
    h.observe("ns/etl", "reduce", 50.0)
    h.observe("ns/other", "map", 99.0)
    assert (h.get("ns/etl", "map"), h.get("ns/etl", "reduce"), h.get("ns/other", "map")) == (15.0, 50.0, 99.0)
    assert math.isnan(h.get("ns/etl", "sort")) and math.isnan(h.get("ns/new", "map"))
    for bad in (NAN, INF, -1.0):
        h.observe("ns/etl", "map", bad)
    assert h.get("ns/etl", "map") == 15.0 and len(h) == 3


def test_the_count_cap_lets_a_newer_run_move_the_mean() -> None:
    capped, uncapped = RecurringHistory(EstimateSettings(history_weight_cap=3)), RecurringHistory(S)
    for h in (capped, uncapped):
        for d in (10.0, 10.0, 10.0, 10.0, 10.0, 100.0):
            h.observe("k", "g", d)
    assert capped.get("k", "g") == 40.0  # 10 + (100 − 10)/3
    assert uncapped.get("k", "g") == 25.0  # (5·10 + 100)/6
    assert capped.state_dict()["entries"] == [["k", "g", 3, 40.0]]


def test_history_keeps_at_most_max_entries_dropping_the_least_recently_updated() -> None:
    h = RecurringHistory(EstimateSettings(history_max_entries=2))
    h.observe("a", "g", 1.0)
    h.observe("b", "g", 2.0)
    h.observe("a", "g", 3.0)  # a is now newer than b
    h.observe("c", "g", 4.0)
    assert len(h) == 2
    assert math.isnan(h.get("b", "g"))
    assert (h.get("a", "g"), h.get("c", "g")) == (2.0, 4.0)
    h.get("a", "g")  # reading is not updating
    h.observe("d", "g", 5.0)
    assert math.isnan(h.get("a", "g")) and h.get("c", "g") == 4.0


def test_history_survives_a_restart() -> None:
    h = RecurringHistory(EstimateSettings(history_weight_cap=4))
    for key, group, d in [("ns/etl", "map", 10.0), ("ns/etl", "map", 14.0), ("ns/ml", "train", 3600.0),
                          ("ns/etl", "reduce", 61.5)]:
        h.observe(key, group, d)
    state = json.loads(json.dumps(h.state_dict()))
    restored = RecurringHistory.from_state(state, EstimateSettings(history_weight_cap=4))
    assert restored.state_dict() == h.state_dict()
    assert restored.get("ns/etl", "map") == 12.0
    for x in (restored, h):
        x.observe("ns/etl", "map", 36.0)
    assert restored.get("ns/etl", "map") == h.get("ns/etl", "map") == 20.0  # count 2 came back: (2·12 + 36)/3
    # Tighter settings after the restart: counts capped, the least recently updated dropped.
    tight = RecurringHistory.from_state(state, EstimateSettings(history_weight_cap=1, history_max_entries=2))
    assert tight.state_dict()["entries"] == [["ns/ml", "train", 1, 3600.0], ["ns/etl", "reduce", 1, 61.5]]


def test_history_keeps_at_most_max_keys_whatever_the_setting() -> None:
    """``history_max_entries`` may lower the bound, not raise it: the history is saved in one ConfigMap."""
    h = RecurringHistory(EstimateSettings(history_max_entries=10 * MAX_KEYS))
    for i in range(MAX_KEYS + 5):
        h.observe(f"ns/job-{i}", "map", 10.0)
    assert len(h) == MAX_KEYS
    assert math.isnan(h.get("ns/job-4", "map")) and h.get("ns/job-5", "map") == 10.0
    restored = RecurringHistory.from_state(h.state_dict(), EstimateSettings(history_max_entries=10 * MAX_KEYS))
    assert restored.state_dict() == h.state_dict()


@pytest.mark.parametrize(
    ("state", "error"),
    [
        pytest.param({"version": 0, "entries": []}, ValueError, id="version"),
        pytest.param({"version": 1}, KeyError, id="no-entries"),
        pytest.param({"version": 1, "entries": [["k", "g", 1]]}, ValueError, id="short-row"),
        pytest.param({"version": 1, "entries": ["k/g/1/2.0"]}, ValueError, id="row-a-string"),
        pytest.param({"version": 1, "entries": [["k", 3, 1, 2.0]]}, TypeError, id="group-not-a-string"),
        pytest.param({"version": 1, "entries": [["k", "g", 0, 2.0]]}, ValueError, id="zero-count"),
        pytest.param({"version": 1, "entries": [["k", "g", "1", 2.0]]}, TypeError, id="count-a-string"),
        pytest.param({"version": 1, "entries": [["k", "g", 1, "inf"]]}, ValueError, id="infinite-mean"),
        pytest.param({"version": 1, "entries": [["k", "g", 1, 2.0], ["k", "g", 2, 3.0]]}, ValueError,
                     id="duplicate"),
        pytest.param({"version": 1, "entries": 5}, TypeError, id="entries-not-a-list"),
    ],
)
def test_malformed_history_state_is_refused(state: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        RecurringHistory.from_state(state, S)


# --- recurring_key ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "labels", "generate_name", "key"),
    [
        pytest.param("nightly-etl-42", None, None, "ns/nightly-etl", id="run-number-suffix"),
        pytest.param("etl-20261127", None, None, "ns/etl", id="date-suffix"),
        pytest.param("etl-1-2", None, None, "ns/etl-1", id="one-suffix-only"),
        pytest.param("etl", None, None, "ns/etl", id="no-suffix"),
        pytest.param("etl-v2", None, None, "ns/etl-v2", id="suffix-not-digits"),
        pytest.param("42", None, None, "ns/42", id="digits-only"),
        pytest.param("etl-", None, None, "ns/etl-", id="dash-without-digits"),
        pytest.param("etl-x7k2p", None, "etl-", "ns/etl", id="generate-name"),
        pytest.param("etl-x7k2p", None, "etl", "ns/etl", id="generate-name-without-dash"),
        pytest.param("etl-42", None, "-", "ns/etl", id="generate-name-only-dash-is-unset"),
        pytest.param("etl-42", {LABEL_RECURRING: "etl-daily"}, "etl-", "ns/etl-daily", id="label-wins"),
        pytest.param("etl-42", {LABEL_RECURRING: "  "}, None, "ns/etl", id="blank-label-is-unset"),
        pytest.param("etl-42", {"app": "etl-daily"}, None, "ns/etl", id="other-labels-ignored"),
    ],
)
def test_recurring_key(name: str, labels: dict | None, generate_name: str | None, key: str) -> None:
    assert recurring_key("ns", name, labels, generate_name) == key


def test_recurring_keys_are_per_namespace() -> None:
    assert recurring_key("a", "etl-1") != recurring_key("b", "etl-1")
