"""What ``Decider.observe_finished`` learns from a group's finished tasks at once equals learning them one at a time."""

from __future__ import annotations

import math

import numpy as np

from stowage.config import StowageSettings
from stowage.policy.decide import Decider

FEATURES = {"framework": "batch", "app": "etl", "stage": "map", "progress": "0-25%", "demand": "cpu=2^-3"}


def _learned(d: Decider) -> tuple[dict, dict, dict]:
    assert d.classifier is not None
    return d.classifier.state_dict(), d.priors.state_dict(), d.history.state_dict()


def test_a_groups_durations_at_once_teach_what_its_tasks_one_at_a_time_do() -> None:
    """Same classifier counts and probabilities, same priors and history: their running means see the durations
    in the same order, so the floats are equal, not merely close."""
    rng = np.random.default_rng(5)
    batches = []
    for i in range(40):
        durations = rng.lognormal(3.0, 1.5, size=int(rng.integers(1, 12))).tolist()
        if i % 7 == 0:
            durations[0] = math.nan  # teaches nothing, in either form
        batches.append(({**FEATURES, "stage": f"s{i % 3}"}, f"q{i % 2}", f"job{i % 5}", f"g{i % 3}", durations))
    one, many = Decider(StowageSettings()), Decider(StowageSettings())
    for features, queue, key, group, durations in batches:
        for duration in durations:
            one.observe_finished(features, (duration,), queue=queue, group=group, recurring_key=key)
        many.observe_finished(features, durations, queue=queue, group=group, recurring_key=key)
    assert _learned(many) == _learned(one)  # the history's entries in the same order: same recency
    assert many.classifier is not None and one.classifier is not None
    probes = [features for features, *_ in batches] + [{**FEATURES, "app": "unseen"}]
    assert [many.classifier.probability_short(f) for f in probes] == [
        one.classifier.probability_short(f) for f in probes
    ]
    assert many.priors.priors(["q0", "q1", "q2"]).tolist() == one.priors.priors(["q0", "q1", "q2"]).tolist()


def test_without_a_key_or_a_decision_nothing_is_held() -> None:
    d = Decider(StowageSettings())
    assert d.observe_finished(FEATURES, [10.0, 20.0], queue="q") is None
    assert d.observe_finished(FEATURES, [10.0], queue="q", group_key="g") is None
    assert d.observe_finished(None, [], queue="q") is None and d.priors.state_dict()["queues"]["q"][0] == 3
