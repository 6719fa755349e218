"""``ShortLongClassifier.state_dict`` / ``from_state``: a restored classifier answers exactly as the original."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.policy.classifier import ShortLongClassifier

_VALUES = st.sampled_from(["a", "b", "c"])
_TASK = st.fixed_dictionaries({"framework": _VALUES, "app": _VALUES, "stage": _VALUES, "progress": _VALUES,
                               "demand": _VALUES})


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_TASK, st.sampled_from([0.0, 30.0, 60.0, 61.0, 600.0, float("nan")])), max_size=40),
       st.lists(_TASK, min_size=1, max_size=10), st.integers(0, 3))
def test_a_restored_classifier_predicts_exactly_as_the_original(observed, probes, min_level) -> None:
    original = ShortLongClassifier(60.0, min_evidence_level=min_level)
    for features, duration in observed:
        original.observe(features, duration)
    state = json.loads(json.dumps(original.state_dict()))  # what the operator's ConfigMap holds
    restored = ShortLongClassifier.from_state(state)
    assert restored.state_dict() == original.state_dict()
    assert restored.class_counts == original.class_counts
    for features in probes + [f for f, _ in observed]:
        assert restored.probability_short(features) == original.probability_short(features)
    # It keeps learning from where it was.
    restored.observe(probes[0], 5.0)
    original.observe(probes[0], 5.0)
    assert restored.state_dict() == original.state_dict()


def test_state_size_grows_with_distinct_features_not_tasks() -> None:
    c = ShortLongClassifier()
    for _ in range(10_000):
        c.observe({"framework": "q", "app": "sort"}, 5.0)
    state = c.state_dict()
    assert state["class_counts"] == [10_000, 0]
    assert [len(level) for level in state["counts"]] == [1, 1, 1, 1]


def _state() -> dict:
    c = ShortLongClassifier()
    c.observe({"framework": "q"}, 5.0)
    return c.state_dict()


@pytest.mark.parametrize(("change", "message"), [
    pytest.param(lambda s: s.update(version=9), "version", id="version"),
    pytest.param(lambda s: s["counts"][0].append(["x", 1]), "must hold 1 values and two counts", id="short-row"),
    pytest.param(lambda s: s["counts"][0][0].__setitem__(-1, -1), "negative count", id="negative"),
    pytest.param(lambda s: s.update(class_counts=[5, 0]), "do not add up", id="totals"),
    pytest.param(lambda s: s["counts"].pop(), "levels", id="levels"),
])
def test_malformed_state_is_refused_with_the_field(change, message) -> None:
    state = _state()
    change(state)
    with pytest.raises(ValueError, match=message):
        ShortLongClassifier.from_state(state)
