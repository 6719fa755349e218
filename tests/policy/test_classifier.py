"""OPERA §III-B short/long classifier: online naive Bayes, unknown → long, bucket helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stowage.config import ClassifierSettings
from stowage.policy.classifier import (
    DEFAULT_LEVELS,
    ShortLongClassifier,
    app_name,
    bucket_demand,
    bucket_progress,
    task_features,
)

# Synthetic cluster: (framework, app, stage) → median task duration (s). Short below 60 s.
KINDS = {
    ("MapReduce", "wordcount", "map"): 20.0,
    ("MapReduce", "wordcount", "reduce"): 400.0,
    ("MapReduce", "sort", "map"): 35.0,
    ("MapReduce", "sort", "reduce"): 250.0,
    ("Spark", "pagerank", "stage1"): 15.0,
    ("Spark", "pagerank", "stage3"): 300.0,
    ("Spark", "kmeans", "stage1"): 500.0,
}


def synthetic_stream(rng: np.random.Generator, n: int) -> list[tuple[dict[str, str], float]]:
    kinds = list(KINDS)
    out = []
    for _ in range(n):
        f, a, s = kinds[int(rng.integers(len(kinds)))]
        progress = float(rng.uniform())
        demand = {"cpu": float(rng.choice([0.5, 1.0, 2.0])), "memory": float(rng.choice([2**30, 2**31]))}
        duration = KINDS[(f, a, s)] * float(rng.lognormal(0.0, 0.3))
        features = {
            "framework": f,
            "app": a,
            "stage": s,
            "progress": bucket_progress(progress),
            "demand": bucket_demand(demand),
        }
        out.append((features, duration))
    return out


def test_default_threshold_comes_from_settings():
    assert ShortLongClassifier().threshold_s == ClassifierSettings().short_task_threshold_s == 60.0


def test_levels_are_operas_hierarchy():
    assert DEFAULT_LEVELS[0] == ("framework",)
    assert DEFAULT_LEVELS[-1] == ("framework", "app", "stage", "progress", "demand")


def test_learns_short_and_long_tasks_from_a_synthetic_stream():
    rng = np.random.default_rng(7)
    clf = ShortLongClassifier()
    for features, duration in synthetic_stream(rng, 600):
        clf.observe(features, duration)
    test = synthetic_stream(rng, 300)
    truth = np.array([d <= 60.0 for _, d in test])
    predicted = np.array([clf.is_short(f) for f, _ in test])
    accuracy = float((truth == predicted).mean())
    assert accuracy >= 0.9, accuracy
    # Both classes are actually predicted (not a constant classifier).
    assert predicted.any() and not predicted.all()


def test_every_kind_is_classified_by_its_typical_duration_after_training():
    rng = np.random.default_rng(11)
    clf = ShortLongClassifier()
    for features, duration in synthetic_stream(rng, 600):
        clf.observe(features, duration)
    for (f, a, s), median in KINDS.items():
        features = {"framework": f, "app": a, "stage": s, "progress": "50-75%", "demand": "cpu=2^0,memory=2^30"}
        assert clf.is_short(features) == (median <= 60.0), (f, a, s)


def test_a_classifier_that_has_seen_nothing_says_long():
    clf = ShortLongClassifier()
    features = {"framework": "MapReduce", "app": "wordcount", "stage": "map"}
    assert clf.probability_short(features) == 0.0
    assert clf.is_short(features) is False


def test_a_task_with_all_new_features_is_long_even_if_everything_seen_was_short():
    clf = ShortLongClassifier()
    for _ in range(50):
        clf.observe({"framework": "MapReduce", "app": "wordcount", "stage": "map"}, 5.0)
    new = {"framework": "Flink", "app": "wordcount", "stage": "map"}
    assert not clf.has_evidence(new)
    assert clf.is_short(new) is False and clf.probability_short(new) == 0.0


def test_a_new_application_of_a_known_framework_borrows_the_frameworks_evidence():
    clf = ShortLongClassifier()
    for i in range(30):
        clf.observe({"framework": "Spark", "app": f"etl{i % 3}", "stage": "s1"}, 10.0)
        clf.observe({"framework": "MapReduce", "app": "sort", "stage": "reduce"}, 600.0)
    assert clf.is_short({"framework": "Spark", "app": "brand-new", "stage": "s9"})
    assert not clf.is_short({"framework": "MapReduce", "app": "brand-new", "stage": "s9"})


def test_min_evidence_level_can_demand_a_known_application():
    clf = ShortLongClassifier(min_evidence_level=1)
    for _ in range(10):
        clf.observe({"framework": "Spark", "app": "etl", "stage": "s1"}, 10.0)
    assert clf.is_short({"framework": "Spark", "app": "etl", "stage": "s2"})
    assert not clf.is_short({"framework": "Spark", "app": "other", "stage": "s1"})


def test_laplace_smoothing_keeps_one_observation_from_giving_certainty():
    clf = ShortLongClassifier()
    clf.observe({"framework": "Spark"}, 1.0)
    p = clf.probability_short({"framework": "Spark"})
    assert 0.5 < p < 1.0


@pytest.mark.parametrize(
    ("duration", "counted_short"),
    [
        pytest.param(60.0, True, id="exactly-the-threshold-is-short"),
        pytest.param(60.5, False, id="above-the-threshold-is-long"),
        pytest.param(-3.0, True, id="negative-counts-as-zero"),
        pytest.param(math.nan, None, id="nan-is-ignored"),
        pytest.param(math.inf, None, id="infinite-is-ignored"),
    ],
)
def test_observe_labels_finished_tasks_by_the_threshold(duration, counted_short):
    clf = ShortLongClassifier()
    assert clf.observe({"framework": "x"}, duration) is counted_short
    assert clf.n_observed == (0 if counted_short is None else 1)


def test_custom_threshold_changes_the_label():
    clf = ShortLongClassifier(threshold_s=10.0)
    assert clf.observe({"framework": "x"}, 20.0) is False
    assert clf.class_counts == (0, 1)


def test_learning_a_group_at_once_equals_learning_its_tasks_one_at_a_time():
    """``observe_many`` over each kind's tasks gives the counts, and so the probabilities, of ``observe`` per task
    (not the order values were last observed in); durations that teach nothing add no feature value (V_i stays the
    same)."""
    stream = synthetic_stream(np.random.default_rng(11), 300)
    stream += [
        ({"framework": "Spark", "app": "new"}, math.nan),
        ({"framework": "Flink"}, math.inf),
        (stream[0][0], -2.0),
        (stream[1][0], math.nan),
    ]
    one, many = ShortLongClassifier(), ShortLongClassifier()
    kinds: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[float]]] = {}
    for features, duration in stream:
        one.observe(features, duration)
        kinds.setdefault(tuple(sorted(features.items())), (features, []))[1].append(duration)
    counted = [many.observe_many(features, durations) for features, durations in kinds.values()]

    def counts(c: ShortLongClassifier) -> list[list[list]]:
        return [sorted(level) for level in c.state_dict()["counts"]]

    assert counts(many) == counts(one)
    assert tuple(map(sum, zip(*counted, strict=True))) == one.class_counts
    assert many.observe_many({"framework": "Spark"}, []) == (0, 0) and counts(many) == counts(one)
    probes = [features for features, _ in kinds.values()] + [{"framework": "Spark", "app": "new"}, {"framework": "x"}]
    assert [many.probability_short(f) for f in probes] == [one.probability_short(f) for f in probes]


def test_classification_is_deterministic_across_instances():
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    a, b = ShortLongClassifier(), ShortLongClassifier()
    for (fa, da), (fb, db) in zip(synthetic_stream(rng_a, 200), synthetic_stream(rng_b, 200), strict=True):
        a.observe(fa, da)
        b.observe(fb, db)
    probe = {"framework": "Spark", "app": "pagerank", "stage": "stage1", "progress": "0-25%", "demand": "x"}
    assert a.probability_short(probe) == b.probability_short(probe)


@pytest.mark.parametrize(
    ("fraction", "buckets", "expected"),
    [
        pytest.param(0.0, 4, "0-25%", id="start"),
        pytest.param(0.3, 4, "25-50%", id="inside"),
        pytest.param(0.5, 4, "50-75%", id="edge-goes-up"),
        pytest.param(1.0, 4, "75-100%", id="done-is-last-bucket"),
        pytest.param(1.7, 4, "75-100%", id="clamped-above"),
        pytest.param(-1.0, 4, "0-25%", id="clamped-below"),
        pytest.param(math.nan, 4, "unknown", id="nan"),
        pytest.param(0.5, 0, "0-100%", id="at-least-one-bucket"),
    ],
)
def test_bucket_progress(fraction, buckets, expected):
    assert bucket_progress(fraction, buckets=buckets) == expected


@pytest.mark.parametrize(
    ("demand", "kwargs", "expected"),
    [
        pytest.param(3.0, {}, "2^1", id="scalar"),
        pytest.param(4.0, {}, "2^2", id="exact-power"),
        pytest.param(0.5, {}, "2^-1", id="fraction-of-a-core"),
        pytest.param(1000.0, {"base": 10}, "10^3", id="exact-power-of-ten-despite-log-rounding"),
        pytest.param(0.0, {}, "0", id="zero"),
        pytest.param(math.nan, {}, "0", id="nan"),
        pytest.param({"memory": 2.0**30, "cpu": 0.5}, {}, "cpu=2^-1,memory=2^30", id="mapping-sorted-by-name"),
        pytest.param(3.0, {"base": 1.0}, "2^1", id="bad-base-falls-back-to-two"),
    ],
)
def test_bucket_demand(demand, kwargs, expected):
    assert bucket_demand(demand, **kwargs) == expected


@pytest.mark.parametrize(("name", "app"), [("sort-0042", "sort"), ("etl_7", "etl"), ("42", "42"), ("wc", "wc"),
                                           ("ns/sort-0042", "ns/sort"), ("ns/etl", "ns/etl")])
def test_app_name_drops_trailing_numbers(name: str, app: str) -> None:
    assert app_name(name) == app


# demand, mean capacity → the demand bucket
FEATURE_DEMAND_CASES = [
    pytest.param({"cpu": 0.5, "memory": 0.25}, None, "cpu=2^-1,memory=2^-2", id="no-capacity-as-given"),
    pytest.param({"cpu": 2.0, "memory": 2.0**30}, {"cpu": 8.0, "memory": 2.0**32}, "cpu=2^-2,memory=2^-2",
                 id="fractions-of-the-mean-node"),
    pytest.param({"cpu": 2.0, "disk": 3.0}, {"cpu": 8.0, "disk": 0.0}, "cpu=2^-2,disk=2^1",
                 id="no-positive-capacity-as-given"),
    pytest.param({"cpu": 2.0}, {"cpu": 8.0, "memory": 16.0}, "cpu=2^-2", id="only-the-tasks-own-resources"),
    pytest.param({"cpu": 0.0}, {"cpu": 8.0}, "cpu=0", id="zero-demand"),
]


@pytest.mark.parametrize(("demand", "mean", "bucket"), FEATURE_DEMAND_CASES)
def test_task_features_bucket_the_demand_as_fractions_of_the_mean_node(demand, mean, bucket) -> None:
    got = task_features("spark", "ns/sort-7", "map", demand, mean, 0.3)
    assert got == {"framework": "spark", "app": "ns/sort", "stage": "map", "demand": bucket, "progress": "25-50%"}


def test_task_features_without_progress_leave_it_out() -> None:
    assert "progress" not in task_features("q", "j", "g", {"cpu": 1.0})

