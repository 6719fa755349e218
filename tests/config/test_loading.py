"""Config from YAML, environment and flags, with messages that name every bad key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stowage.config import ContentionPolicy, env_overrides, load_settings
from stowage.errors import ConfigError


def test_yaml_env_and_flags_override_in_that_order(tmp_path: Path) -> None:
    path = tmp_path / "stowage.yaml"
    path.write_text("contention:\n  policy: neutral\n  sustained_count: 5\npacking:\n  fairness_knob: 0.5\n")
    env = {"STOWAGE_CONTENTION__SUSTAINED_COUNT": "4", "STOWAGE_HARVEST__T_ALLOC__CPU": "0.8", "OTHER": "x"}
    s = load_settings(path, overrides={"packing": {"fairness_knob": 0.1}}, environ=env)
    assert s.contention.policy is ContentionPolicy.NEUTRAL
    assert s.contention.sustained_count == 4
    assert s.harvest.t_alloc.cpu == 0.8 and s.harvest.t_alloc.memory == 0.9
    assert s.packing.fairness_knob == 0.1


def test_env_overrides_nest_on_double_underscores() -> None:
    assert env_overrides({"STOWAGE_HARVEST__T_ALLOC__CPU": "0.7", "STOWAGE_X": "1"}) == {
        "harvest": {"t_alloc": {"cpu": "0.7"}}
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"harvest": {"t_alloc": {"cpu": 1.5}}},
            "harvest.t_alloc.cpu: must be within (0.0, 1.0], got 1.5",
            id="threshold-above-one",
        ),
        pytest.param(
            {"harvest": {"t_alloc": {"memory": 0.97}}},
            "harvest.t_alloc.memory: must be below contention.t_preempt.memory (0.95)",
            id="t-alloc-above-t-preempt",
        ),
        pytest.param(
            {"contention": {"t_preempt": {"cpu": 0}}},
            "contention.t_preempt.cpu: must be within (0.0, 1.0], got 0",
            id="zero-threshold",
        ),
        pytest.param(
            {"contention": {"policy": "gentle"}},
            "contention.policy: must be one of aggressive, neutral, preserve, got 'gentle'",
            id="bad-policy",
        ),
        pytest.param(
            {"contention": {"sustained_count": 0}},
            "contention.sustained_count: must be at least 1, got 0",
            id="zero-count",
        ),
        pytest.param(
            {"contention": {"sustained_count": 2.5}},
            "contention.sustained_count: must be a whole number, got 2.5",
            id="fractional-count",
        ),
        pytest.param(
            {"packing": {"fairness_knob": "high"}},
            "packing.fairness_knob: must be a number, got 'high'",
            id="not-a-number",
        ),
        pytest.param({"packing": {"fairnes_knob": 0.2}}, "packing.fairnes_knob: unknown key; known keys:", id="typo"),
        pytest.param({"packing": 3}, "packing: must be a mapping, got 3", id="section-not-mapping"),
        pytest.param(
            {"contention": {"alpha": 0.5}},
            "contention.alpha: must be within [1.0, 16.0], got 0.5",
            id="alpha-below-one",
        ),
        pytest.param(
            {"estimates": {"prior_margin": 0.8}},
            "estimates.prior_margin: must be within [1.0, 100.0], got 0.8",
            id="prior-margin-below-one",
        ),
        pytest.param(
            {"estimates": {"default_prior_s": 0}},
            "estimates.default_prior_s: must be within (0.0, 604800.0], got 0",
            id="zero-default-prior",
        ),
        pytest.param(
            {"estimates": {"bandwidth_fill": 0}},
            "estimates.bandwidth_fill: must be within (0.0, 10.0], got 0",
            id="zero-bandwidth-fill",
        ),
        pytest.param(
            {"estimates": {"history_max_entries": 0}},
            "estimates.history_max_entries: must be a whole number within [1, 1000], got 0",
            id="zero-history-entries",
        ),
    ],
)
def test_bad_values_are_reported_with_path_value_and_allowed_range(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(overrides=overrides, environ={})
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems


def test_queue_usage_settings_from_the_environment_and_their_ranges(tmp_path: Path) -> None:
    env = {"STOWAGE_PACKING__QUEUE_USAGE_HALF_LIFE_S": "60", "STOWAGE_PACKING__QUEUE_USAGE_TOLERANCE": "0.2"}
    packing = load_settings(None, environ=env).packing
    assert (packing.queue_usage_half_life_s, packing.queue_usage_tolerance, packing.queue_share_floor) == (60, 0.2, 0.5)
    with pytest.raises(ConfigError) as err:
        load_settings(None, overrides={"packing": {"queue_share_floor": 1.5, "queue_usage_half_life_s": -1}},
                      environ={})
    assert "packing.queue_share_floor: must be within [0.0, 1.0], got 1.5" in err.value.problems
    assert "packing.queue_usage_half_life_s: must be within [0.0, 2592000.0], got -1.0" in err.value.problems


@pytest.mark.parametrize("key", ["queue_share_slack", "queue_share_deficit_s"])
def test_the_settings_fairness_over_time_replaced_are_refused_naming_what_to_set(tmp_path: Path, key: str) -> None:
    config = tmp_path / "stowage.yaml"
    config.write_text(f"packing:\n  {key}: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config, environ={})
    assert err.value.problems == [
        f"packing.{key}: no longer a setting; queues share over time on decayed usage instead: set "
        "packing.queue_usage_half_life_s (0: shares at every slot) and packing.queue_usage_tolerance "
        "(docs/configuration.md)"]


def test_estimate_settings_from_the_environment() -> None:
    env = {"STOWAGE_ESTIMATES__ELAPSED_MARGIN": "2", "STOWAGE_ESTIMATES__MIN_FINISHED": "3"}
    e = load_settings(None, environ=env).estimates
    assert (e.elapsed_margin, e.min_finished) == (2.0, 3)


def test_every_problem_is_reported_not_just_the_first(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("packing: {fairness_knob: 2, barrier_knob: -1}\ncontention: {sustained_count: 0}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ={})
    assert len(err.value.problems) == 3


def test_unreadable_and_invalid_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(tmp_path / "absent.yaml", environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("packing: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad, environ={})
