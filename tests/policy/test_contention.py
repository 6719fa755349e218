"""Sustained contention, the three OPERA policies, PRESERVE's blocked resources, victim choice."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.config import ContentionPolicy, ContentionSettings
from stowage.errors import InvalidInput
from stowage.policy import contention

RES = ("cpu", "memory")
CAP = np.array([10.0, 100.0])  # 10 cores, 100 (bytes, scaled) of memory
QUIET = np.array([1.0, 10.0])
MEM_HOT = np.array([1.0, 96.0])  # memory above 0.95·100, cpu quiet
CPU_HOT = np.array([9.95, 10.0])  # cpu above 0.99·10, memory quiet
BOTH_HOT = np.array([9.95, 96.0])


def run(samples, policy=ContentionPolicy.PRESERVE, has_opportunistic=True, **overrides):
    """Feed (time, usage) samples; return the (state, decision) after each. These tests are about the policies:
    cpu and memory both act after 3 samples unless an override says otherwise (the per-resource counts have their
    own tests below)."""
    cfg = dataclasses.replace(ContentionSettings(), policy=policy, **{"sustained_count_cpu": 3, **overrides})
    state = contention.ContentionState.initial(len(RES))
    out = []
    for t, usage in samples:
        state, decision = contention.step(state, usage, CAP, t, cfg, RES, has_opportunistic)
        out.append((state, decision))
    return out


def test_initial_state_has_nothing_counted_or_blocked():
    s = contention.ContentionState.initial(3)
    assert s.over_counts.tolist() == [0, 0, 0] and s.blocked.tolist() == [0.0, 0.0, 0.0]
    assert s.block_time_s == 0.0 and s.last_relief_s is None and s.contentions == 0


@pytest.mark.parametrize("policy", list(ContentionPolicy), ids=lambda p: p.value)
def test_no_action_before_count_consecutive_over_samples(policy):
    steps = run([(0, MEM_HOT), (1, MEM_HOT), (2, QUIET), (3, MEM_HOT), (4, MEM_HOT)], policy)
    assert [bool(d.over[1]) for _, d in steps] == [True, True, False, True, True]
    assert [int(s.over_counts[1]) for s, _ in steps] == [1, 2, 0, 1, 2]
    assert not any(d.relieve.any() or d.sustained.any() for _, d in steps)


@pytest.mark.parametrize("policy", list(ContentionPolicy), ids=lambda p: p.value)
def test_every_policy_relieves_sustained_memory_contention_then_restarts_the_count(policy):
    steps = run([(t, MEM_HOT) for t in range(6)], policy)
    assert [bool(d.relieve[1]) for _, d in steps] == [False, False, True, False, False, True]
    assert [int(s.over_counts[1]) for s, _ in steps] == [1, 2, 0, 1, 2, 0]
    assert steps[-1][0].contentions == 2


def test_aggressive_ignores_sustained_cpu_contention():
    steps = run([(t, CPU_HOT) for t in range(6)], ContentionPolicy.AGGRESSIVE)
    assert steps[2][1].sustained.tolist() == [True, False]
    assert not any(d.relieve.any() for _, d in steps)
    # Not acting leaves the count running: the contention is still reported as sustained.
    assert steps[-1][0].over_counts.tolist() == [6, 0] and steps[-1][1].sustained[0]


def test_aggressive_relieves_only_memory_when_both_are_hot():
    steps = run([(t, BOTH_HOT) for t in range(3)], ContentionPolicy.AGGRESSIVE)
    assert steps[-1][1].relieve.tolist() == [False, True]


@pytest.mark.parametrize("policy", [ContentionPolicy.NEUTRAL, ContentionPolicy.PRESERVE], ids=lambda p: p.value)
def test_neutral_and_preserve_act_on_cpu(policy):
    steps = run([(t, CPU_HOT) for t in range(3)], policy)
    assert steps[-1][1].relieve.tolist() == [True, False]


@pytest.mark.parametrize("policy", [ContentionPolicy.AGGRESSIVE, ContentionPolicy.NEUTRAL], ids=lambda p: p.value)
def test_only_preserve_blocks_resources(policy):
    steps = run([(t, BOTH_HOT) for t in range(3)], policy)
    assert steps[-1][1].relieve.any()
    assert steps[-1][0].blocked.tolist() == [0.0, 0.0] and steps[-1][0].block_time_s == 0.0


def test_nothing_is_relieved_on_a_node_without_opportunistic_pods_but_contention_is_reported():
    steps = run([(t, BOTH_HOT) for t in range(4)], ContentionPolicy.NEUTRAL, has_opportunistic=False)
    assert steps[-1][1].sustained.tolist() == [True, True]
    assert not any(d.relieve.any() for _, d in steps)
    assert steps[-1][0].contentions == 0


def test_sustained_count_is_read_from_settings():
    steps = run([(t, MEM_HOT) for t in range(5)], ContentionPolicy.NEUTRAL, sustained_count=5)
    assert [bool(d.relieve[1]) for _, d in steps] == [False, False, False, False, True]


@pytest.mark.parametrize(("resources", "expected"), [
    (("cpu", "memory", "disk", "network", "nvidia.com/gpu"), [6, 3, 3, 3, 3]),
    (("memory",), [3]),
    ((), []),
])
def test_sustained_counts_cpu_waits_longer(resources, expected):
    assert contention.sustained_counts(ContentionSettings(), resources).tolist() == expected


def test_sustained_counts_are_at_least_one():
    cfg = dataclasses.replace(ContentionSettings(), sustained_count=0, sustained_count_cpu=-2)
    assert contention.sustained_counts(cfg, RES).tolist() == [1, 1]


def test_defaults_act_on_memory_after_three_samples_and_on_cpu_after_six():
    cfg = ContentionSettings()
    state, relieved = contention.ContentionState.initial(len(RES)), []
    for t in range(7):
        state, decision = contention.step(state, BOTH_HOT, CAP, float(t), cfg, RES)
        relieved.append(decision.relieve.tolist())
    assert [r[1] for r in relieved] == [False, False, True, False, False, True, False]
    assert [r[0] for r in relieved] == [False] * 5 + [True, False]


def test_a_cpu_burst_shorter_than_the_cpu_count_evicts_nothing():
    cfg = ContentionSettings()  # 6 samples on cpu: a 5-sample burst passes
    state = contention.ContentionState.initial(len(RES))
    for t, usage in enumerate([CPU_HOT] * 5 + [QUIET] + [CPU_HOT] * 5):
        state, decision = contention.step(state, usage, CAP, float(t), cfg, RES)
        assert not decision.relieve.any()
    assert state.contentions == 0


def test_preserve_doubles_blocked_and_block_time_inside_the_window_and_halves_after_quiet_windows():
    # Defaults: α = 2, first block 5% of capacity for 30 s, caps 50% and 600 s.
    hot = [(t, MEM_HOT) for t in range(18)]  # actions at t = 2, 5, 8, 11, 14, 17
    quiet = [(t, QUIET) for t in (100, 617, 618, 700, 918, 919, 1069, 1070, 1145, 1146)]
    steps = run(hot + quiet)
    by_time = {t: (s, d) for (t, _), (s, d) in zip(hot + quiet, steps, strict=True)}

    expected_after_action = {
        2: (5.0, 30.0),  # first contention: 0.05·100, BT0
        5: (10.0, 60.0),  # new contention inside the window: ×α
        8: (20.0, 120.0),
        11: (40.0, 240.0),
        14: (50.0, 480.0),  # 80 capped at 0.5·100
        17: (50.0, 600.0),  # 960 capped at 600 s
    }
    for t, (mem_blocked, bt) in expected_after_action.items():
        state, decision = by_time[t]
        assert decision.relieve.tolist() == [False, True]
        assert state.blocked.tolist() == [0.0, mem_blocked], t
        assert decision.blocked.tolist() == [0.0, mem_blocked], t
        assert state.block_time_s == bt and state.last_relief_s == t

    expected_quiet = {
        100: (50.0, 600.0, 17),  # inside the 600 s window: unchanged
        617: (50.0, 600.0, 17),  # exactly 600 s later is still inside
        618: (25.0, 300.0, 618),  # 601 s quiet: ÷α
        700: (25.0, 300.0, 618),
        918: (25.0, 300.0, 618),
        919: (12.5, 150.0, 919),
        1069: (12.5, 150.0, 919),
        1070: (6.25, 75.0, 1070),
        1145: (6.25, 75.0, 1070),
        1146: (0.0, 0.0, 1146),  # 3.125 < 5: released; nothing blocked, window closed
    }
    for t, (mem_blocked, bt, last) in expected_quiet.items():
        state, decision = by_time[t]
        assert not decision.relieve.any()
        assert state.blocked.tolist() == [0.0, mem_blocked], t
        assert state.block_time_s == bt and state.last_relief_s == last, t
    assert steps[-1][0].contentions == 6


def test_preserve_starts_from_the_initial_block_after_a_block_has_decayed_away():
    steps = run([(0, MEM_HOT), (1, MEM_HOT), (2, MEM_HOT), (40, QUIET), (50, MEM_HOT), (51, MEM_HOT), (52, MEM_HOT)])
    assert steps[3][0].blocked.tolist() == [0.0, 0.0]  # 2.5 < 5 after one halving: released
    assert steps[-1][0].blocked.tolist() == [0.0, 5.0] and steps[-1][0].block_time_s == 30.0


def test_preserve_blocks_a_newly_contended_resource_at_the_initial_fraction_while_doubling_the_others():
    steps = run([(0, MEM_HOT), (1, MEM_HOT), (2, MEM_HOT), (3, BOTH_HOT), (4, BOTH_HOT), (5, BOTH_HOT)])
    state, decision = steps[-1]
    assert decision.relieve.tolist() == [True, True]
    assert state.blocked.tolist() == [0.5, 10.0] and state.block_time_s == 60.0


@pytest.mark.parametrize(
    ("usage", "capacity", "over"),
    [
        pytest.param([np.nan, 96.0], CAP, [False, True], id="nan-usage-is-zero"),
        pytest.param([-5.0, 95.0], CAP, [False, False], id="at-threshold-is-not-over"),
        pytest.param([5.0, 96.0], [0.0, 100.0], [False, True], id="zero-capacity-never-over"),
    ],
)
def test_step_clamps_untrusted_samples(usage, capacity, over):
    state = contention.ContentionState.initial(2)
    _, decision = contention.step(state, usage, capacity, 0.0, ContentionSettings(), RES)
    assert decision.over.tolist() == over


def test_step_rejects_a_sample_of_the_wrong_length_naming_the_field():
    with pytest.raises(InvalidInput, match="usage"):
        contention.step(contention.ContentionState.initial(2), [1.0], CAP, 0.0, ContentionSettings(), RES)


def test_state_arrays_are_read_only():
    state = contention.ContentionState.initial(2)
    with pytest.raises(ValueError):
        state.blocked[0] = 1.0


# --- victims -------------------------------------------------------------------------------------

RELIEVE_MEM = [False, True]


@pytest.mark.parametrize(
    ("pod_usage", "started", "opp", "node", "expected"),
    [
        pytest.param(
            [[1, 10], [1, 10], [1, 10]],
            [1.0, 3.0, 2.0],
            [True, True, True],
            [3, 110],
            [1, 2],
            id="newest-first-until-under",
        ),
        pytest.param(
            [[1, 50], [1, 10]],
            [1.0, 2.0],
            [False, True],
            [3, 110],
            [1],
            id="regular-pods-never-chosen-even-if-not-enough",
        ),
        pytest.param(
            [[1, 0], [1, 5], [1, 5]],
            [9.0, 2.0, 1.0],
            [True, True, True],
            [3, 104],
            [1, 2],
            id="pod-without-usage-on-the-relieved-resource-skipped",
        ),
        pytest.param([[1, 4], [1, 20]], [5.0, 5.0], [True, True], [3, 115], [1], id="tie-on-start-larger-usage-first"),
        pytest.param([[1, 20]], [5.0], [True], [3, 90], [], id="already-under-threshold"),
        pytest.param([[1, 20]], [5.0], [True], [3, 115], [0], id="exactly-reaching-the-threshold-suffices"),
        pytest.param([], [], [], [3, 120], [], id="no-pods"),
    ],
)
def test_choose_victims_table(pod_usage, started, opp, node, expected):
    victims = contention.choose_victims(
        np.array(pod_usage, dtype=float).reshape(-1, 2), started, opp, node, [9.9, 95.0], RELIEVE_MEM, now_s=10.0
    )
    assert victims == expected


def test_choose_victims_is_empty_when_nothing_is_relieved():
    assert contention.choose_victims([[1.0, 50.0]], [0.0], [True], [10.0, 200.0], [9.9, 95.0], [False, False],
                                    now_s=1.0) == []


def test_choose_victims_brings_every_relieved_resource_under_its_threshold():
    # Newest pod frees memory only; cpu needs the older one too.
    pods = [[2.0, 0.0], [0.0, 10.0]]
    victims = contention.choose_victims(pods, [1.0, 2.0], [True, True], [11.0, 100.0], [9.9, 95.0], [True, True],
                                        now_s=3.0)
    assert victims == [1, 0]


@st.composite
def victim_problems(draw):
    n_pods = draw(st.integers(0, 12))
    n_res = draw(st.integers(1, 3))
    usage = draw(hnp.arrays(np.float64, (n_pods, n_res), elements=st.floats(0, 10)))
    started = draw(hnp.arrays(np.float64, (n_pods,), elements=st.floats(0, 100)))
    opp = draw(hnp.arrays(np.bool_, (n_pods,)))
    base = draw(hnp.arrays(np.float64, (n_res,), elements=st.floats(0, 20)))
    threshold = draw(hnp.arrays(np.float64, (n_res,), elements=st.floats(0, 60)))
    relieve = draw(hnp.arrays(np.bool_, (n_res,)))
    node = base + usage.sum(axis=0)
    return usage, started, opp, node, threshold, relieve


@settings(max_examples=300, deadline=None)
@given(victim_problems())
def test_choose_victims_never_picks_a_regular_pod_and_gets_under_whenever_possible(problem):
    usage, started, opp, node, threshold, relieve = problem
    victims = contention.choose_victims(usage, started, opp, node, threshold, relieve, now_s=100.0)
    assert len(set(victims)) == len(victims)
    assert all(opp[v] for v in victims)
    if not relieve.any():
        assert victims == []
        return
    tol = 1e-9 * np.maximum(threshold, 1.0) + 1e-9
    projected = node - usage[victims].sum(axis=0) if victims else node
    best = node - usage[opp].sum(axis=0)
    if (best[relieve] <= threshold[relieve] + tol[relieve]).all():
        assert (projected[relieve] <= threshold[relieve] + tol[relieve]).all()
        # Minimal in its order: without the last victim the node would still be over.
        if victims:
            before = projected + usage[victims[-1]]
            assert (before[relieve] > threshold[relieve] - tol[relieve]).any()
    # Newest first among the chosen.
    assert all(started[a] >= started[b] for a, b in itertools.pairwise(victims))


# --- contention.Nodes: step on many nodes, the quiet ones in bulk (the simulator's monitor) ---------------------


def _same_state(a: contention.ContentionState, b: contention.ContentionState) -> bool:
    return (np.array_equal(a.over_counts, b.over_counts) and np.array_equal(a.blocked, b.blocked)
            and a.block_time_s == b.block_time_s and a.last_relief_s == b.last_relief_s
            and a.contentions == b.contentions)


@pytest.mark.parametrize("policy", list(ContentionPolicy), ids=lambda p: p.value)
@pytest.mark.parametrize("seed", range(12))
def test_nodes_decide_as_step_on_every_node_at_every_sample(policy: ContentionPolicy, seed: int) -> None:
    """Random histories (usage around the thresholds, opportunistic pods coming and going, gaps between samples,
    a zero and a NaN capacity, NaN usage): ``Nodes.step`` leaves every node's state, its blocked amounts and its
    decision where ``step`` on every node at every sample does, and returns every node that acts."""
    rng = np.random.default_rng(seed)
    res = ("cpu", "memory", "disk")
    cfg = dataclasses.replace(ContentionSettings(), policy=policy, sustained_count_cpu=int(rng.integers(1, 4)),
                              sustained_count=int(rng.integers(1, 4)), block_time_initial_s=float(rng.integers(1, 4)),
                              block_time_max_s=8.0)
    n = 6
    cap = np.tile([10.0, 100.0, 50.0], (n, 1))
    cap[1, 2], cap[2, 0] = 0.0, np.nan
    threshold = cfg.t_preempt.array(res) * np.nan_to_num(cap)
    nodes = contention.Nodes(n, cfg, res)
    ref = [contention.ContentionState.initial(len(res)) for _ in range(n)]
    ref_blocked = np.zeros((n, len(res)))
    has_opp = rng.random(n) < 0.5
    now = 0.0
    for _ in range(120):
        now += float(rng.choice([1.0, 1.0, 1.0, 0.5, 5.0]))
        flip = rng.random(n) < 0.1
        has_opp = np.where(flip, ~has_opp, has_opp)
        usage = threshold * rng.uniform(0.8, 1.15, size=threshold.shape)
        usage[rng.random(usage.shape) < 0.02] = np.nan
        got = dict(nodes.step(usage, cap, now, has_opp))
        for k in range(n):
            ref[k], decision = contention.step(ref[k], usage[k], cap[k], now, cfg, res, bool(has_opp[k]))
            assert _same_state(nodes.state(k), ref[k])
            if k in got:
                assert np.array_equal(got[k].relieve, decision.relieve)
                assert np.array_equal(got[k].blocked, decision.blocked)
            else:
                assert not decision.acts and np.array_equal(decision.blocked, ref_blocked[k])
            ref_blocked[k] = decision.blocked
        assert np.array_equal(nodes.blocked, ref_blocked)
