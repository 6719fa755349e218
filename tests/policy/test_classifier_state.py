"""``ShortLongClassifier.state_dict`` / ``from_state``: a restored classifier answers exactly as the original."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.policy.classifier import MAX_VALUES, ShortLongClassifier

_VALUES = st.sampled_from(["a", "b", "c"])
_TASK = st.fixed_dictionaries({"framework": _VALUES, "app": _VALUES, "stage": _VALUES, "progress": _VALUES,
                               "demand": _VALUES})


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_TASK, st.sampled_from([0.0, 30.0, 60.0, 61.0, 600.0, float("nan")])), max_size=40),
       st.lists(_TASK, min_size=1, max_size=10), st.integers(0, 3), st.sampled_from([2, 5, MAX_VALUES]))
def test_a_restored_classifier_predicts_exactly_as_the_original(observed, probes, min_level, max_values) -> None:
    """Also once values were forgotten (a small ``max_values``): the restored one forgets the same ones next."""
    original = ShortLongClassifier(60.0, min_evidence_level=min_level, max_values=max_values)
    for features, duration in observed:
        original.observe(features, duration)
    state = json.loads(json.dumps(original.state_dict(), sort_keys=True))  # what the operator's ConfigMap holds
    restored = ShortLongClassifier.from_state(state, max_values=max_values)
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


def _apps(c: ShortLongClassifier) -> list[str]:
    """The (framework, app) level's apps, least recently observed first."""
    return [row[1] for row in c.state_dict()["counts"][1]]


def test_each_level_keeps_at_most_max_values_forgetting_the_least_recently_observed() -> None:
    c = ShortLongClassifier(60.0, max_values=3, min_evidence_level=1)
    for app, duration in [("a", 5.0), ("b", 500.0), ("c", 5.0), ("a", 5.0), ("d", 5.0)]:
        c.observe({"framework": "q", "app": app}, duration)
    assert _apps(c) == ["c", "a", "d"]  # b was observed least recently; a again after c
    state = c.state_dict()
    assert state["forgotten"] == [[0, 0], [0, 1], [0, 1], [0, 1]]  # b's one long task, at every level but q's
    assert c.class_counts == (4, 1), "the tasks of a forgotten value still count in the class totals"
    assert all(len(level) <= 3 for level in state["counts"])
    b = {"framework": "q", "app": "b"}
    assert not c.has_evidence(b) and c.probability_short(b) == 0  # forgotten: unknown again (min_evidence_level 1)
    assert c.is_short({"framework": "q", "app": "a"})
    # Asking is not observing: c stays the least recently observed and goes next.
    c.probability_short({"framework": "q", "app": "c"})
    c.observe({"framework": "q", "app": "e"}, 5.0)
    assert _apps(c) == ["a", "d", "e"]
    assert ShortLongClassifier.from_state(json.loads(json.dumps(c.state_dict()))).state_dict() == c.state_dict()


def test_learning_many_groups_at_once_forgets_as_learning_them_one_by_one() -> None:
    many, one = ShortLongClassifier(max_values=2), ShortLongClassifier(max_values=2)
    for app in "abcab":
        many.observe_many({"framework": "q", "app": app}, [5.0, 90.0])
        for d in (5.0, 90.0):
            one.observe({"framework": "q", "app": app}, d)
    assert many.state_dict() == one.state_dict()
    assert _apps(many) == ["a", "b"] and many.state_dict()["forgotten"][1] == [3, 3]  # a, b, c forgotten once


def test_a_state_saved_before_the_bound_loads_and_is_cut_to_the_bound() -> None:
    """Today's ConfigMaps hold rows sorted and no forgotten counts: they load as if observed in sorted order, and
    past ``max_values`` the first are forgotten with their counts kept consistent."""
    c = ShortLongClassifier(60.0)
    for i in range(12):
        c.observe({"framework": "q", "app": f"app-{i:02d}", "stage": "map"}, 5.0 if i % 3 else 600.0)
    old = c.state_dict()
    del old["forgotten"]
    old["counts"] = [sorted(level, key=lambda row: row[:-2]) for level in old["counts"]]
    same = ShortLongClassifier.from_state(old)
    probes = [{"framework": "q", "app": f"app-{i:02d}", "stage": "map"} for i in range(14)]
    assert [same.probability_short(f) for f in probes] == [c.probability_short(f) for f in probes]
    cut = ShortLongClassifier.from_state(old, max_values=4)
    assert _apps(cut) == ["app-08", "app-09", "app-10", "app-11"]
    assert cut.class_counts == c.class_counts == (8, 4)
    assert cut.state_dict()["forgotten"] == [[0, 0], [5, 3], [5, 3], [5, 3]]
    assert ShortLongClassifier.from_state(cut.state_dict(), max_values=4).state_dict() == cut.state_dict()


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
    pytest.param(lambda s: s["forgotten"][0].__setitem__(1, -1), "forgotten: negative", id="negative-forgotten"),
    pytest.param(lambda s: s["forgotten"][0].__setitem__(1, 1), "do not add up", id="forgotten-totals"),
    pytest.param(lambda s: s["forgotten"].pop(), "forgotten: must hold", id="forgotten-levels"),
    pytest.param(lambda s: s["forgotten"][0].append(0), "forgotten: must hold", id="forgotten-row"),
])
def test_malformed_state_is_refused_with_the_field(change, message) -> None:
    state = _state()
    change(state)
    with pytest.raises(ValueError, match=message):
        ShortLongClassifier.from_state(state)
