"""Eviction victims chosen by the work they would lose (``contention.choose_victims``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stowage.policy import contention

THRESHOLD = [9.9, 95.0]
RELIEVE_MEM = [False, True]


def _newest_prefix(usage, started, opp, node, threshold, relieve):
    """The rule before lost work counted: newest first, the shortest prefix that gets under (or all)."""
    rel = np.asarray(relieve, bool)
    cand = [i for i in np.argsort(-np.asarray(started), kind="stable") if opp[i] and (usage[i][rel] > 0).any()]
    freed = np.zeros(rel.sum())
    need = np.asarray(node)[rel] - np.asarray(threshold)[rel]
    out = []
    for i in cand:
        if (freed >= need - 1e-9).all():
            break
        out.append(int(i))
        freed = freed + usage[i][rel]
    return out


def test_a_new_pod_that_frees_too_little_is_spared_when_an_older_one_suffices():
    # Newest first takes pod 1 (2 of memory) and then pod 0 (20), which alone gets the node under.
    usage = np.array([[1.0, 20.0], [1.0, 2.0]])
    victims = contention.choose_victims(usage, [10.0, 50.0], [True, True], [3.0, 110.0], THRESHOLD, RELIEVE_MEM,
                                        now_s=60.0)
    assert victims == [0]
    assert _newest_prefix(usage, [10.0, 50.0], [True, True], [3.0, 110.0], THRESHOLD, RELIEVE_MEM) == [1, 0]


def test_one_older_pod_instead_of_several_new_ones_when_it_loses_less():
    # Three pods started 10 s ago free 5 each (30 s lost together); one started 20 s ago frees 15 (20 s lost).
    usage = np.array([[0.0, 5.0], [0.0, 5.0], [0.0, 5.0], [0.0, 15.0]])
    started = [90.0, 90.0, 90.0, 80.0]
    lost = [10.0, 10.0, 10.0, 20.0]
    victims = contention.choose_victims(usage, started, [True] * 4, [3.0, 110.0], THRESHOLD, RELIEVE_MEM, lost,
                                        now_s=100.0)
    assert victims == [3]


def test_one_older_pod_instead_of_several_new_ones_by_run_time_alone():
    """What a node knows: start times. Run times count until now, so three pods started 10 s ago lose 30 s
    together and one started 20 s ago loses 20. Counted from the newest start (the old rule) the three lost
    nothing and always won."""
    usage = np.array([[0.0, 5.0], [0.0, 5.0], [0.0, 5.0], [0.0, 15.0]])
    started = [90.0, 90.0, 90.0, 80.0]
    victims = contention.choose_victims(usage, started, [True] * 4, [3.0, 110.0], THRESHOLD, RELIEVE_MEM,
                                        now_s=100.0)
    assert victims == [3]
    # Just started (1 s ago), the three lose 3 s together: newest first wins again.
    assert contention.choose_victims(usage, [99.0, 99.0, 99.0, 80.0], [True] * 4, [3.0, 110.0], THRESHOLD,
                                     RELIEVE_MEM, now_s=100.0) == [0, 1, 2]


def test_progress_not_start_time_decides_when_given():
    # Pod 1 started later but made more progress (pod 0 ran slowed): evicting pod 0 wastes less.
    usage = np.array([[0.0, 20.0], [0.0, 20.0]])
    victims = contention.choose_victims(usage, [10.0, 20.0], [True, True], [3.0, 110.0], THRESHOLD, RELIEVE_MEM,
                                        lost_work=[5.0, 30.0], now_s=40.0)
    assert victims == [0]
    assert contention.choose_victims(usage, [10.0, 20.0], [True, True], [3.0, 110.0], THRESHOLD, RELIEVE_MEM,
                                     now_s=40.0) == [1]


@st.composite
def problems(draw):
    n = draw(st.integers(1, 10))
    usage = draw(hnp.arrays(np.float64, (n, 2), elements=st.floats(0, 10)))
    started = draw(hnp.arrays(np.float64, (n,), elements=st.floats(0, 100)))
    opp = draw(hnp.arrays(np.bool_, (n,)))
    base = draw(hnp.arrays(np.float64, (2,), elements=st.floats(0, 20)))
    threshold = draw(hnp.arrays(np.float64, (2,), elements=st.floats(0, 60)))
    relieve = draw(hnp.arrays(np.bool_, (2,)).filter(lambda r: r.any()))
    return usage, started, opp, base + usage.sum(axis=0), threshold, relieve


@settings(max_examples=300, deadline=None)
@given(problems())
def test_never_loses_more_work_than_newest_first_and_still_gets_under(problem):
    usage, started, opp, node, threshold, relieve = problem
    now = float(started.max()) + 7.0 if started.size else 0.0
    victims = contention.choose_victims(usage, started, opp, node, threshold, relieve, now_s=now)
    reference = _newest_prefix(usage, started, opp, node, threshold, relieve)
    lost = now - started
    assert lost[victims].sum() <= lost[reference].sum() + 1e-9
    tol = 1e-9 * np.maximum(threshold, 1.0) + 1e-9
    if ((node - usage[reference].sum(axis=0))[relieve] <= threshold[relieve] + tol[relieve]).all():
        assert ((node - usage[victims].sum(axis=0))[relieve] <= threshold[relieve] + tol[relieve]).all()
        # Every victim is needed: sparing any one of them leaves the node over.
        for v in victims:
            rest = node - usage[[x for x in victims if x != v]].sum(axis=0)
            assert (rest[relieve] > threshold[relieve] - tol[relieve]).any()
