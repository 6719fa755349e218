"""Each baseline matches its definition on tiny hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.model import JobOrder
from stowage.policy import alignment
from stowage.sim import baselines, presets, scoring
from stowage.sim.engine import SimConfig, Simulation, simulate
from stowage.sim.workload import QueueSpec
from tests.sim.kit import FLAT, group, job, nodes, workload

GI = 1024.0**3
TRACE = SimConfig(usage=FLAT, check=True, trace=True)


def placements(wl, preset: str, seed: int = 0) -> list[tuple[float, str, str, str, bool]]:
    sim = Simulation(wl, presets.make(preset), TRACE, seed)
    sim.run()
    assert sim.log is not None
    return sim.log


def node_of(log, job_name: str) -> str:
    return next(n for _, j, _, n, _ in log if j == job_name)


# --- the kube-scheduler Score plugins, numbers worked by hand --------------------------------------

CAP = np.array([[4.0, 16 * GI]] * 2)


@pytest.mark.parametrize(
    ("requested", "pod", "least", "most"),
    [
        # (4000−2000)·100/4000 = 50 on cpu, (16−8)·100/16 = 50 on memory.
        pytest.param([1.0, 4 * GI], [1.0, 4 * GI], 50, 50, id="half-full-after-the-pod"),
        pytest.param([3.0, 12 * GI], [1.0, 4 * GI], 0, 100, id="full-after-the-pod"),
        # A pod asking nothing counts as 100 millicores and 200 MiB (upstream's non-zero defaults):
        # cpu (4000−100)·100/4000 = 97, memory (16Gi − 200Mi)·100/16Gi = 98 → (97 + 98)/2 = 97.
        pytest.param([0.0, 0.0], [0.0, 0.0], 97, 1, id="empty-pod-gets-non-zero-defaults"),
        # cpu 4.5 > 4: least 0, most counts 4 → 100; memory 200Mi default: least 98, most 1.
        pytest.param([3.5, 0.0], [1.0, 0.0], 49, 50, id="over-capacity-scores-zero-least-and-full-most"),
    ],
)
def test_fit_strategies_score_as_upstream(requested, pod, least: int, most: int) -> None:
    req, cap, p = (scoring.to_units(np.array(x)) for x in ([requested] * 2, CAP, pod))
    assert scoring.plugin_scores(req, cap, p, "least")[0].tolist() == [least, least]
    assert scoring.plugin_scores(req, cap, p, "most")[0].tolist() == [most, most]


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        pytest.param([1.0, 4 * GI], 100, id="cpu-and-memory-equal-fractions"),
        # fractions (1.0, 0.25): std = 0.375 → ⌊62.5⌋ = 62.
        pytest.param([3.0, 0.0], 62, id="cpu-heavy-node-is-unbalanced"),
        pytest.param([4.0, 0.0], 62, id="fractions-capped-at-one"),
    ],
)
def test_balanced_allocation_prefers_equal_fractions(requested, expected: int) -> None:
    req, cap, pod = (scoring.to_units(np.array(x)) for x in ([requested], CAP[:1], [1.0, 4 * GI]))
    for strategy in ("least", "most"):
        assert scoring.plugin_scores(req, cap, pod, strategy)[1].tolist() == [expected]


@pytest.mark.parametrize(
    ("measured", "missing", "pod", "expected"),
    [
        # 100·(2 + 1.5·1)/10 = 35 % ≤ 40: round(60·35/40 + 40) = round(92.5) = 93 (half away from zero).
        pytest.param(2.0, 0.0, 1.0, 93, id="below-target-rises-towards-it"),
        pytest.param(2.5, 0.0, 1.0, 100, id="exactly-at-target-scores-100"),
        # 100·(2 + 3 + 1.5)/10 = 65 %: round(40·35/60) = 23.
        pytest.param(2.0, 3.0, 1.0, 23, id="recent-pods-count-as-missing-usage"),
        pytest.param(9.0, 0.0, 1.0, 0, id="over-100-percent-scores-minimum"),
        # No request: the default 1 core, not multiplied. 100·(2 + 1)/10 = 30 % → round(85) = 85.
        pytest.param(2.0, 0.0, 0.0, 85, id="best-effort-pod-counts-one-core"),
    ],
)
def test_target_load_packing_scores_as_trimaran(measured: float, missing: float, pod: float, expected: int) -> None:
    score = scoring.target_load_packing(np.array([measured]), np.array([missing]), np.array([10.0]), pod)
    assert score.tolist() == [expected]


# --- the presets in the simulator ----------------------------------------------------------------

TWO_NODES = nodes(2, cpu=4.0, memory=16.0)
FIRST_THEN_SECOND = [job("first", 0, group("g", 1, 100.0, cpu=2.0, memory=4.0)),
                     job("second", 1, group("g", 1, 100.0, cpu=1.0, memory=2.0))]


def test_kube_default_spreads_to_the_emptier_node() -> None:
    log = placements(workload(TWO_NODES, FIRST_THEN_SECOND), "kube-default")
    assert node_of(log, "first") != node_of(log, "second")


def test_binpack_stacks_onto_the_fuller_node() -> None:
    log = placements(workload(TWO_NODES, FIRST_THEN_SECOND), "binpack")
    assert node_of(log, "first") == node_of(log, "second")


def _load_aware_sim() -> tuple[Simulation, baselines.KubePreset]:
    # node n0 runs a 2-core task at full use; n1 a 1-core task using 20 %.
    wl = workload(nodes(2, cpu=10.0, memory=64.0), [
        job("busy", 0, group("g", 1, 1000.0, cpu=2.0, usage=1.0)),
        job("idle", 0, group("g", 1, 1000.0, cpu=1.0, usage=0.2)),
        job("new", 0, group("g", 2, 10.0, cpu=1.0)),
    ])
    preset = presets.make("load-aware")
    sim = Simulation(wl, preset, SimConfig(usage=FLAT), 0)
    for j, g in enumerate(sim.spec.j_groups[:3]):
        sim._open(g[0]) if j < 2 else None
    sim.place(0, 0, opp=False)
    sim.place(1, 1, opp=False)
    sim._flush()
    sim.now = 100.0  # both bound long ago: only measured usage counts for them
    assert isinstance(preset, baselines.KubePreset)
    return sim, preset


def test_load_aware_scores_measured_cpu_not_requests() -> None:
    sim, preset = _load_aware_sim()
    scores = preset._scores(2)
    # n0: 100·(2 + 1.5)/10 = 35 % → 93; n1: 100·(0.2 + 1.5)/10 = 17 % → round(65.5) = 66.
    assert scores.tolist() == [93, 66]
    # LeastAllocated (requests) would have picked n1, the node with fewer requests.
    least, _ = scoring.plugin_scores(*(scoring.to_units(x[..., :2]) for x in (sim.cluster.reg_alloc, sim.cluster.cap,
                                                                             sim.spec.g_demand[2])), "least")
    assert int(np.argmax(least)) == 1


def test_load_aware_counts_a_just_bound_pod_at_one_and_a_half_times_its_request() -> None:
    sim, preset = _load_aware_sim()
    preset._scores(2)  # takes the load watcher's sample at t = 100
    sim._open(2)
    free = sim.cluster.regular_free()
    assert preset._place_regular(2, free, preset.regular_resources())
    assert sim.log is None
    # The new pod went to n0 (93 > 66); n0 now also carries 1.5 cores not yet in the sample:
    # 100·(2 + 1.5 + 1.5)/10 = 50 % > 40 → round(40·50/60) = 33.
    assert preset._scores(2).tolist() == [33, 66]


def test_drf_alternates_between_queues_where_fifo_serves_the_first_job() -> None:
    wl = workload(nodes(1, cpu=2.0, memory=16.0), [
        job("a1", 0, group("g", 3, 10.0), queue="a"),
        job("b1", 0, group("g", 3, 10.0), queue="b"),
    ], queues=[QueueSpec("a"), QueueSpec("b")])
    fifo = simulate(wl, "kube-default", config=SimConfig(usage=FLAT, check=True))
    drf = simulate(wl, "drf", config=SimConfig(usage=FLAT, check=True))
    assert fifo.jct.tolist() == pytest.approx([20.0, 30.0])
    assert drf.jct.tolist() == pytest.approx([30.0, 30.0])


def test_drf_serves_the_queue_with_the_lowest_weighted_dominant_share() -> None:
    # Weight 2 for b: b holds two slots for each one of a.
    wl = workload(nodes(1, cpu=3.0, memory=16.0), [
        job("a1", 0, group("g", 3, 10.0), queue="a"),
        job("b1", 0, group("g", 6, 10.0), queue="b"),
    ], queues=[QueueSpec("a", 1.0), QueueSpec("b", 2.0)])
    log = placements(wl, "drf")
    first_round = [j for t, j, *_ in log if t == 0.0]
    assert sorted(first_round) == ["a1", "b1", "b1"]


def test_tetris_puts_a_task_on_the_node_its_demand_aligns_with() -> None:
    wl = workload(nodes(2, cpu=8.0, memory=8.0), [
        job("memory-heavy", 0, group("g", 1, 1000.0, cpu=1.0, memory=6.0)),
        job("cpu-heavy", 0, group("g", 1, 1000.0, cpu=6.0, memory=1.0)),
        job("new", 1, group("g", 1, 10.0, cpu=2.0, memory=0.5)),
    ])
    log = placements(wl, "tetris")
    mem_node = node_of(log, "memory-heavy")
    assert node_of(log, "cpu-heavy") != mem_node
    # Free: memory-heavy node (7 cpu, 2 mem), cpu-heavy node (2 cpu, 7 mem). The cpu-bound task
    # aligns with the first: 2/8·7/8 + 0.5/8·2/8 = 0.234 against 2/8·2/8 + 0.5/8·7/8 = 0.117.
    assert node_of(log, "new") == mem_node
    scores = alignment.alignment([2.0, 0.5], [[8, 8], [8, 8]], [[7, 2], [2, 7]])
    assert scores.tolist() == pytest.approx([0.234375, 0.1171875])


def test_tetris_runs_the_job_with_less_remaining_work_first() -> None:
    wl = workload(nodes(1, cpu=1.0, memory=16.0), [
        job("big", 0, group("g", 10, 10.0)),
        job("small", 0, group("g", 1, 10.0)),
    ])
    fifo = simulate(wl, "kube-default", config=SimConfig(usage=FLAT, check=True))
    tetris = simulate(wl, "tetris", config=SimConfig(usage=FLAT, check=True))
    assert fifo.jct.tolist() == pytest.approx([100.0, 110.0])
    assert tetris.jct.tolist() == pytest.approx([110.0, 10.0])


def test_kube_scheduler_does_not_let_a_pod_that_fits_nowhere_block_the_queue() -> None:
    wl = workload(nodes(1, cpu=4.0, memory=16.0), [
        job("running", 0, group("g", 1, 100.0, cpu=3.0)),
        job("too-big", 1, group("g", 1, 10.0, cpu=2.0)),
        job("small", 2, group("g", 1, 10.0, cpu=1.0)),
    ])
    result = simulate(wl, "kube-default", config=SimConfig(usage=FLAT, check=True))
    assert result.jct[2] == pytest.approx(10.0)
    assert result.jct[1] == pytest.approx(109.0)


@pytest.mark.parametrize(
    ("order", "short_jct"),
    [
        # FIFO: with f = 0.25 only the first ⌈0.75·4⌉ = 3 jobs by arrival compete, so the short
        # job waits until the first long job has started all its tasks (t = 50).
        pytest.param(JobOrder.FIFO, 59.0, id="fifo-keeps-the-short-job-waiting"),
        # FSP: under processor sharing the short job would finish first: it competes at once.
        pytest.param(JobOrder.FSP, 19.0, id="fsp-lets-the-short-job-overtake"),
        pytest.param(JobOrder.SRTF, 19.0, id="srtf-lets-the-short-job-overtake"),
    ],
)
def test_stowage_serves_jobs_of_a_queue_in_its_job_order(order: JobOrder, short_jct: float) -> None:
    wl = workload(nodes(1, cpu=1.0, memory=16.0), [
        job("long1", 0.0, group("g", 5, 10.0)),
        job("long2", 0.1, group("g", 5, 10.0)),
        job("long3", 0.2, group("g", 5, 10.0)),
        job("short", 1.0, group("g", 1, 10.0)),
    ], queues=[QueueSpec("default", 1.0, order, False)])
    result = simulate(wl, "stowage", config=SimConfig(usage=FLAT, check=True))
    assert result.jct[3] == pytest.approx(short_jct)


def test_unknown_preset_names_the_choices() -> None:
    with pytest.raises(ValueError, match="kube-default"):
        presets.make("fair")


def test_stowage_gives_a_true_task_regular_room_first_and_promotes_it_when_room_frees() -> None:
    # UBIS Alg. 1: regular room first, whatever the intent ("first"); "second" finds none (the node's 2 cpus
    # are requested) and runs on harvested room (the running task uses half of its request); when "first"
    # finishes at 20 s, regular room frees on the node and "second" is promoted in place (§IV-D).
    from stowage.labels import Opportunistic

    wl = workload(nodes(1, cpu=2.0, memory=16.0), [
        job("first", 0, group("g", 1, 20.0, cpu=2.0, usage=0.5), opportunistic=Opportunistic.TRUE),
        job("second", 1, group("g", 1, 60.0, cpu=0.5, usage=0.5), opportunistic=Opportunistic.TRUE),
    ])
    log = placements(wl, "stowage")
    assert [(j, opp) for _, j, _, _, opp in log] == [("first", False), ("second", True)]
    result = simulate(wl, "stowage", config=SimConfig(usage=FLAT, check=True))
    assert result.summary["promotions"] == 1
    assert result.summary["evictions"] == 0
    assert 0.0 < result.summary["harvested_fraction"] < 1.0
