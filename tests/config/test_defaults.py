"""Every promised default (DESIGN.md's defaults table), pinned."""

from __future__ import annotations

from stowage.config import ContentionPolicy, StowageSettings, validate


def test_design_defaults_table() -> None:
    s = StowageSettings()
    assert (s.harvest.t_alloc.cpu, s.harvest.t_alloc.memory) == (0.9, 0.9)
    assert (s.contention.t_preempt.cpu, s.contention.t_preempt.memory) == (0.99, 0.95)
    assert (s.contention.sustained_count, s.contention.sample_interval_s) == (3, 1.0)
    assert (s.contention.policy, s.contention.alpha) == (ContentionPolicy.PRESERVE, 2.0)
    assert (s.packing.fairness_knob, s.packing.barrier_knob, s.packing.remaining_work_weight) == (0.25, 0.9, 1.0)
    assert (s.packing.remote_penalty, s.harvest.ramp_up_s) == (0.10, 30.0)
    assert s.classifier.short_task_threshold_s == 60.0
    assert s.harvest.utilization_stale_after_s == 30.0


def test_estimate_defaults() -> None:
    e = StowageSettings().estimates
    assert (e.default_prior_s, e.prior_margin, e.min_finished, e.elapsed_margin) == (300.0, 1.5, 1, 1.25)
    assert (e.min_duration_s, e.history_weight_cap, e.history_max_entries) == (1.0, 100, 1000)


def test_defaults_are_valid() -> None:
    assert validate(StowageSettings()) == []


def test_per_resource_thresholds_line_up_with_a_resource_axis() -> None:
    s = StowageSettings()
    assert list(s.contention.t_preempt.array(("memory", "cpu", "nvidia.com/gpu"))) == [0.95, 0.99, 0.99]
