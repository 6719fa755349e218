"""Trace readers and the tenant model: hand-checked outputs on small inputs, the full-trace counts the
docs promise, determinism per seed, and the CLI's workload resolution."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.errors import InvalidInput, WorkloadError
from stowage.labels import Opportunistic
from stowage.resources import ResourceVector
from stowage.sim import traces
from stowage.sim.traces import embedded_default, resolve_workload, shapes, tenants
from stowage.sim.traces.openb import read_openb, spread_nodes
from stowage.sim.traces.swim import read_swim
from stowage.sim.traces.synthetic import JobClass, TetrisMix, resource_work, tetris_mix
from stowage.sim.workload import NodeSpec, Workload

GI, MI = 2**30, 2**20
SHARED_TRACES = Path(__file__).parents[2].parent / "shared" / "traces"
FB_DAY = SHARED_TRACES / "FB-2009_samples_24_times_1hr_0.tsv"
OPENB_PODS = SHARED_TRACES / "openb_pod_list_default.csv"
OPENB_NODES = SHARED_TRACES / "openb_node_list_all_node.csv"


def assert_well_formed(workload: Workload) -> None:
    """Invariants every reader must keep: the engine relies on them."""
    names = [j.name for j in workload.jobs]
    assert len(names) == len(set(names))
    assert len({n.name for n in workload.nodes}) == len(workload.nodes)
    queues = {q.name for q in workload.queues}
    for job in workload.jobs:
        assert job.queue in queues
        assert job.arrival_s >= 0
        seen: set[str] = set()
        for group in job.groups:
            assert group.tasks >= 1 and group.duration_s > 0
            assert set(group.depends_on) <= seen  # barriers point backwards: no cycles
            assert any(group.demand.fits_in(n.capacity) for n in workload.nodes), (job.name, group.name)
            seen.add(group.name)


# --- tenants ------------------------------------------------------------------------------------


def test_tenant_shares_are_zipf_over_four_queues_with_stated_weights() -> None:
    assert [(t.name, t.weight) for t in tenants.TENANTS] == [
        ("prod", 4.0), ("analytics", 2.0), ("research", 1.0), ("adhoc", 1.0)]
    assert [round(t.share, 4) for t in tenants.TENANTS] == [0.48, 0.24, 0.16, 0.12]


def test_assigned_queues_follow_the_stated_shares() -> None:
    counts = Counter(tenants.assign_queues(40_000, seed=1))
    for tenant in tenants.TENANTS:
        assert abs(counts[tenant.name] / 40_000 - tenant.share) < 0.01


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), k=st.integers(0, 300), seed=st.integers(0, 2**32 - 1), stream=st.integers(0, 2))
def test_queue_assignment_is_deterministic_and_prefix_stable(n: int, k: int, seed: int, stream: int) -> None:
    full = tenants.assign_queues(n, seed, stream)
    assert full == tenants.assign_queues(n, seed, stream)
    assert tenants.assign_queues(min(k, n), seed, stream) == full[: min(k, n)]


def test_different_seeds_and_streams_give_different_assignments() -> None:
    base = tenants.assign_queues(200, seed=0)
    assert base != tenants.assign_queues(200, seed=1)
    assert base != tenants.assign_queues(200, seed=0, stream=1)


# --- synthetic (Tetris §5.1) ----------------------------------------------------------------------

FIXED = TetrisMix(classes=(JobClass("fixed", 30, 30, 0.5),), job_factor_sigma=0.0)


def test_a_fixed_size_mix_has_the_hand_computed_stages() -> None:
    workload = tetris_mix(seed=2, n_nodes=4, load=0.5, duration_s=600, mix=FIXED)
    for job in workload.jobs:
        maps, reduces = job.groups
        # 30 tasks at selectivity 0.5: maps = round(30 / 1.5) = 20, reduces = 10, behind a barrier.
        assert (maps.name, maps.tasks, maps.depends_on) == ("map", 20, ())
        assert (reduces.name, reduces.tasks, reduces.depends_on) == ("reduce", 10, ("map",))
        for group in job.groups:
            high_cpu = group.demand["cpu"] == 2
            rate = 20 * MI if high_cpu else 100 * MI
            assert group.demand["cpu"] in (0.5, 2)
            assert group.demand["memory"] in (2 * GI, 8 * GI)
            assert group.demand["disk"] == rate
            # 4 GiB per task at 20 MiB/s (high-cpu) or 100 MiB/s (low-cpu): 204.8 s or 40.96 s.
            assert group.duration_s == pytest.approx(204.8 if high_cpu else 40.96)
        assert maps.demand["network"] == pytest.approx(0.25 * maps.demand["disk"])
        assert reduces.demand["network"] == reduces.demand["disk"]


def test_load_is_the_offered_load_of_the_busiest_resource() -> None:
    n_nodes, duration = 20, 1800.0
    for load in (0.5, 1.0, 2.0):
        workload = tetris_mix(seed=5, n_nodes=n_nodes, load=load, duration_s=duration, mix=FIXED)
        capacity = workload.nodes[0].capacity
        per_job = [Counter() for _ in workload.jobs]
        for counter, job in zip(per_job, workload.jobs, strict=True):
            for group in job.groups:
                counter.update(resource_work(group, capacity))
        total = sum(per_job, Counter())
        target = load * n_nodes * duration
        # Jobs are drawn until the busiest resource reaches the target: one job's overshoot at most.
        busiest = max(total.values())
        assert target <= busiest < target + max(max(c.values()) for c in per_job)
        assert workload.model["offered_load_per_resource"] == {
            r: round(w / (n_nodes * duration), 3) for r, w in total.items()}


def test_arrivals_are_spread_over_the_window_in_order() -> None:
    workload = tetris_mix(seed=0, n_nodes=30, duration_s=3600, mix=FIXED)
    arrivals = [j.arrival_s for j in workload.jobs]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] >= 0 and arrivals[-1] <= 3600
    assert arrivals[-1] - arrivals[0] > 0.8 * 3600  # uniform, not bunched


def test_the_default_mix_follows_the_paper() -> None:
    workload = tetris_mix(seed=0)
    assert len(workload.nodes) == 250
    assert workload.nodes[0].capacity == shapes.TETRIS_DEPLOYMENT
    assert workload.nodes[0].capacity["cpu"] == 32 and workload.nodes[0].capacity["memory"] == 96 * GI
    big = [j.task_count >= 800 for j in workload.jobs]
    assert all(100 <= j.task_count <= 2500 for j in workload.jobs)
    assert any(big) and not all(big)  # both "1000s" and "100s" jobs occur
    assert {"load", "duration_s", "n_nodes", "mix", "tenants", "jobs_per_class"} <= set(workload.model)
    assert sum(workload.model["jobs_per_class"].values()) == len(workload.jobs)
    assert workload.model["tasks"] == workload.task_count
    assert_well_formed(workload)


def test_the_mix_is_deterministic_per_seed() -> None:
    assert tetris_mix(seed=9, n_nodes=10).jobs == tetris_mix(seed=9, n_nodes=10).jobs
    assert tetris_mix(seed=9, n_nodes=10).jobs != tetris_mix(seed=10, n_nodes=10).jobs


def test_a_node_shape_without_bandwidths_drops_them_and_caps_demands() -> None:
    small = ResourceVector({"cpu": 2, "memory": 4 * GI})
    workload = tetris_mix(seed=1, n_nodes=3, load=0.3, duration_s=600, node_capacity=small, mix=FIXED)
    for job in workload.jobs:
        for group in job.groups:
            assert set(group.demand) <= {"cpu", "memory"}
            assert group.demand.fits_in(small)
    assert_well_formed(workload)


@pytest.mark.parametrize("load", [0, -1, math.inf], ids=["zero", "negative", "infinite"])
def test_a_bad_load_is_rejected_naming_it(load: float) -> None:
    with pytest.raises(InvalidInput, match=r"^load: "):
        tetris_mix(load=load)


# --- SWIM ---------------------------------------------------------------------------------------

SWIM_ROWS = [
    # id, submit, gap, input, shuffle, output
    ("job0", 0, 0, 100 * MI, 0, 5000),  # map-only, 2 maps
    ("job1", 10, 10, 0, 0, 0),  # nothing at all: still 1 map
    ("job2", 20, 10, 64 * MI, int(1.5 * GI), int(0.5 * GI)),  # 1 map, 2 reduces
    ("job3", 4000, 3980, 10 * MI, 10, 0),  # a tiny shuffle still gets 1 reduce
]


def write_swim(tmp_path: Path, rows: list[tuple] = SWIM_ROWS) -> Path:
    path = tmp_path / "tiny.tsv"
    path.write_text("".join("\t".join(str(f) for f in row) + "\n" for row in rows))
    return path


def test_swim_rows_become_the_hand_computed_tasks(tmp_path: Path) -> None:
    workload = read_swim(write_swim(tmp_path), n_nodes=600, seed=0)
    jobs = {j.name: j for j in workload.jobs}
    assert list(jobs) == ["fb-job0", "fb-job1", "fb-job2", "fb-job3"]
    # job0: ceil(100/64) = 2 maps of 50 MiB at 10 MiB/s after a 5 s start: 10 s; map-only.
    (m0,) = jobs["fb-job0"].groups
    assert (m0.tasks, m0.duration_s) == (2, pytest.approx(10.0))
    (m1,) = jobs["fb-job1"].groups
    assert (m1.tasks, m1.duration_s) == (1, pytest.approx(5.0))
    # job2: 1 map of 64 MiB: 5 + 6.4 s; reduces = round(2 GiB / 1 GiB) = 2 of 1 GiB at 16 MiB/s: 5 + 64 s.
    m2, r2 = jobs["fb-job2"].groups
    assert (m2.tasks, m2.duration_s) == (1, pytest.approx(11.4))
    assert (r2.tasks, r2.duration_s, r2.depends_on) == (2, pytest.approx(69.0), ("map",))
    m3, r3 = jobs["fb-job3"].groups
    assert (m3.tasks, r3.tasks) == (1, 1)
    assert m0.demand == ResourceVector({"cpu": 1, "memory": 2 * GI, "disk": 10 * MI, "network": 2.5 * MI})
    assert r2.demand == ResourceVector({"cpu": 1, "memory": 4 * GI, "disk": 16 * MI, "network": 16 * MI})
    assert [j.arrival_s for j in workload.jobs] == [0, 10, 20, 4000]
    assert workload.model["tasks"] == {"map": 5, "reduce": 3, "total": 8}
    assert workload.nodes[0].capacity == shapes.FB_2009_PROFILE and len(workload.nodes) == 600
    assert_well_formed(workload)


def test_swim_scales_bytes_by_node_count_and_takes_the_first_hours(tmp_path: Path) -> None:
    workload = read_swim(write_swim(tmp_path), n_nodes=300, seed=0, hours=1)
    assert [j.name for j in workload.jobs] == ["fb-job0", "fb-job1", "fb-job2"]  # job3 arrives at 4000 s
    (m0,) = workload.jobs[0].groups
    # 50 MiB after halving: 1 map, 5 + 5 s.
    assert (m0.tasks, m0.duration_s) == (1, pytest.approx(10.0))
    assert len(workload.nodes) == 300


def test_swim_on_a_shape_without_bandwidths_drops_them_and_caps_memory(tmp_path: Path) -> None:
    shape = ResourceVector({"cpu": 8, "memory": 3 * GI})
    workload = read_swim(write_swim(tmp_path), n_nodes=600, node_capacity=shape)
    m2, r2 = workload.jobs[2].groups
    assert m2.demand == ResourceVector({"cpu": 1, "memory": 2 * GI})
    assert r2.demand == ResourceVector({"cpu": 1, "memory": 3 * GI})  # 4 GiB capped at the node's 3
    assert_well_formed(workload)


def test_swim_queue_assignment_is_deterministic_per_seed(tmp_path: Path) -> None:
    rows = [(f"job{i}", i, 1, MI, 0, 0) for i in range(60)]
    path = write_swim(tmp_path, rows)
    first = [j.queue for j in read_swim(path, n_nodes=10, seed=4).jobs]
    assert first == [j.queue for j in read_swim(path, n_nodes=10, seed=4).jobs]
    assert first == tenants.assign_queues(60, seed=4)
    assert first != [j.queue for j in read_swim(path, n_nodes=10, seed=5).jobs]


def test_malformed_swim_lines_are_all_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("job0\t0\t0\t1\t0\t0\njob1\t1\t1\tmany\t0\t0\njob2\t2\n")
    with pytest.raises(WorkloadError) as caught:
        read_swim(path)
    assert [re.sub(r"^.*bad\.tsv", "bad.tsv", p) for p in caught.value.problems] == [
        "bad.tsv:2: fields 2-6 must be numbers, got ['1', '1', 'many', '0', '0']",
        "bad.tsv:3: expected 6 tab-separated fields, got 2",
    ]


def test_the_bundled_fb_2009_day_comes_to_about_430k_tasks_at_600_nodes() -> None:
    with traces.bundled_swim_path() as path:
        workload = read_swim(path, n_nodes=600, seed=0)
    assert len(workload.jobs) == 5894
    assert workload.model["tasks"] == {"map": 406_005, "reduce": 22_819, "total": 428_824}
    assert abs(workload.task_count - 430_000) / 430_000 < 0.01
    assert workload.model["map_only_jobs"] == 4448


@pytest.mark.skipif(not FB_DAY.is_file(), reason=f"shared trace {FB_DAY} not present")
def test_the_shared_fb_2009_day_matches_the_bundled_copy() -> None:
    workload = read_swim(FB_DAY, n_nodes=600, seed=0)
    assert workload.task_count == 428_824


# --- openb --------------------------------------------------------------------------------------

PODS_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
PODS = [
    "p-ls,4000,8192,1,1000,,LS,Running,1000,3000,1500",  # regular, runs 1500 s
    "p-be,2000,4096,0,0,,BE,Failed,1100,1200,1100",  # opportunistic, runs 100 s
    "p-burst,500,1024,0,0,,Burstable,Succeeded,1200,1250,1210",  # opportunistic, 40 s
    "p-guar,8000,16384,2,1000,,Guaranteed,Running,1300,2300,1300",  # regular, 1000 s
    "p-pending,1000,1024,0,0,,LS,Pending,1400,2000,",  # never scheduled
    "p-bad,lots,1024,0,0,,BE,Running,1500,2000,1500",  # bad row
    "p-instant,1000,1024,0,0,,BE,Failed,1600,1600,1600",  # no run time
]
NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn-a,32000,131072,4,V100\nn-b,96000,393216,0,\n"


def write_openb(tmp_path: Path) -> tuple[Path, Path]:
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    pods.write_text("\n".join([PODS_HEADER, *PODS]) + "\n")
    nodes.write_text(NODES_CSV)
    return pods, nodes


def test_openb_pods_become_one_task_jobs_with_qos_intent(tmp_path: Path) -> None:
    pods, nodes = write_openb(tmp_path)
    workload = read_openb(pods, nodes, time_compression=10, seed=0)
    jobs = {j.name: j for j in workload.jobs}
    assert list(jobs) == ["p-ls", "p-be", "p-burst", "p-guar"]
    assert {n: j.opportunistic for n, j in jobs.items()} == {
        "p-ls": Opportunistic.FALSE, "p-be": Opportunistic.TRUE,
        "p-burst": Opportunistic.TRUE, "p-guar": Opportunistic.FALSE}
    # arrival (creation − 1000) / 10; run (deletion − scheduled) / 10, at least 1 s.
    assert [j.arrival_s for j in workload.jobs] == [0, 10, 20, 30]
    assert [j.groups[0].duration_s for j in workload.jobs] == [150, 10, 4, 100]
    assert all(j.task_count == 1 for j in workload.jobs)
    assert jobs["p-guar"].groups[0].demand == ResourceVector({"cpu": 8, "memory": 16 * GI, shapes.GPU: 2})
    assert workload.model["skipped"] == {"never_scheduled": 1, "bad_row": 1, "no_run_time": 1}
    assert workload.model["regular_ls_guaranteed"] == 2 and workload.model["opportunistic_be_burstable"] == 2
    assert [(n.name, n.capacity) for n in workload.nodes] == [
        ("n-a", ResourceVector({"cpu": 32, "memory": 128 * GI, shapes.GPU: 4})),
        ("n-b", ResourceVector({"cpu": 96, "memory": 384 * GI})),
    ]
    assert_well_formed(workload)


def test_openb_durations_can_include_the_original_wait_and_are_floored(tmp_path: Path) -> None:
    pods, _ = write_openb(tmp_path)
    workload = read_openb(pods, time_compression=100, duration_from="creation", min_duration_s=1.5)
    # (3000 − 1000)/100 = 20; (1200 − 1100)/100 = 1 → 1.5; (1250 − 1200)/100 → 1.5; 10.
    assert [j.groups[0].duration_s for j in workload.jobs] == [20, 1.5, 1.5, 10]
    assert len(workload.nodes) == 16 and workload.nodes[0].capacity == shapes.OPENB_G2


def test_openb_skips_and_counts_pods_no_node_can_hold(tmp_path: Path) -> None:
    pods, _ = write_openb(tmp_path)
    small = ResourceVector({"cpu": 4, "memory": 8 * GI, shapes.GPU: 1})
    workload = read_openb(pods, n_nodes=2, node_capacity=small)
    # p-guar wants 8 cores and 2 GPUs: no node can ever hold it.
    assert [j.name for j in workload.jobs] == ["p-ls", "p-be", "p-burst"]
    assert workload.model["skipped"]["fits_no_node"] == 1
    assert_well_formed(workload)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        pytest.param(2, ["a", "c"], id="fewer-nodes-spread-evenly"),
        pytest.param(4, ["a", "b", "c", "d"], id="all-nodes"),
        pytest.param(6, ["a", "b", "c", "d", "a-2", "b-2"], id="more-nodes-repeat-the-list"),
    ],
)
def test_a_node_count_spreads_over_the_node_list(n: int, expected: list[str]) -> None:
    nodes = tuple(NodeSpec(name, ResourceVector({"cpu": i + 1, "memory": GI})) for i, name in enumerate("abcd"))
    chosen = spread_nodes(nodes, n)
    assert [c.name for c in chosen] == expected
    assert [c.capacity["cpu"] for c in chosen] == [{"a": 1, "b": 2, "c": 3, "d": 4}[e[0]] for e in expected]


def test_openb_without_the_needed_columns_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu\nx,1\n")
    with pytest.raises(WorkloadError, match="missing column"):
        read_openb(path)


@pytest.mark.skipif(not OPENB_PODS.is_file(), reason=f"shared trace {OPENB_PODS} not present")
def test_the_openb_trace_splits_into_regular_and_opportunistic_pods() -> None:
    workload = read_openb(OPENB_PODS, OPENB_NODES, seed=0)
    model = workload.model
    assert model["pods_read"] == 8152 and model["skipped"] == {"never_scheduled": 897}
    assert model["qos"] == {"LS": 4193, "BE": 2957, "Burstable": 98, "Guaranteed": 7}
    assert (model["regular_ls_guaranteed"], model["opportunistic_be_burstable"]) == (4200, 3055)
    assert Counter(j.opportunistic for j in workload.jobs) == {Opportunistic.FALSE: 4200, Opportunistic.TRUE: 3055}
    assert len(workload.nodes) == 1523


# --- resolve_workload and the embedded default ----------------------------------------------------


def test_the_embedded_default_is_small_busy_and_bundled() -> None:
    workload = embedded_default(seed=0)
    assert len(workload.nodes) == 50 and workload.nodes[0].capacity == shapes.FB_2009_PROFILE
    assert 8_000 <= workload.task_count <= 12_000
    parts = Counter(j.name.split("-")[0] for j in workload.jobs)
    assert parts["fb"] == 239 and parts["tetris"] > 50
    arrivals = [j.arrival_s for j in workload.jobs]
    assert arrivals == sorted(arrivals) and arrivals[-1] < 7200
    assert workload.model["synthetic"]["load"] == 0.9
    assert max(workload.model["synthetic"]["offered_load_per_resource"].values()) >= 0.9
    assert embedded_default(seed=0).jobs == workload.jobs
    assert embedded_default(seed=1).jobs != workload.jobs
    assert_well_formed(workload)


def test_the_package_never_reads_the_shared_traces_at_run_time() -> None:
    package = Path(traces.__file__).parents[2]
    for source in package.rglob("*.py"):
        assert "shared/traces" not in source.read_text(encoding="utf-8"), source


EXAMPLE_FILE = """\
nodes: [{name: big, count: 2, cpu: 2, memory: 4Gi}]
jobs: [{name: j, groups: [{name: g, replicas: 1, demand: {cpu: 1}, duration: 5}]}]
"""


@pytest.mark.parametrize(
    ("spec", "nodes", "shape", "expect_nodes", "expect_cpu"),
    [
        pytest.param("", None, None, 50, 12, id="empty-is-the-embedded-default"),
        pytest.param("embedded", 20, None, 20, 12, id="embedded-rebuilt-for-20-nodes"),
        pytest.param("synthetic", 8, "cpu=16,memory=64Gi,disk=200M,network=125M", 8, 16, id="synthetic-with-shape"),
        pytest.param("swim", 12, None, 12, 12, id="bundled-swim"),
        pytest.param("FILE", None, None, 2, 2, id="workload-file-as-is"),
        pytest.param("FILE", 5, None, 5, 2, id="workload-file-more-nodes-of-its-shape"),
        pytest.param("FILE", None, "cpu=4,memory=8Gi", 2, 4, id="workload-file-new-shape"),
        pytest.param("openb", None, None, 2, 32, id="openb-with-node-list"),
        pytest.param("openb", 1, None, 1, 32, id="openb-one-node-spread-over-the-list"),
    ],
)
def test_resolve_workload_reads_each_spec(
    tmp_path: Path, spec: str, nodes: int | None, shape: str | None, expect_nodes: int, expect_cpu: float
) -> None:
    if spec == "FILE":
        spec = str(tmp_path / "w.yaml")
        Path(spec).write_text(EXAMPLE_FILE)
    elif spec == "openb":
        pods, node_list = write_openb(tmp_path)
        spec = f"openb:{pods},{node_list}"
    workload = resolve_workload(spec, nodes=nodes, node_shape=shape, seed=0)
    assert len(workload.nodes) == expect_nodes
    assert workload.nodes[0].capacity["cpu"] == expect_cpu
    assert workload.jobs


def test_resolve_workload_reads_a_swim_path(tmp_path: Path) -> None:
    # A file not named like SWIM's own does not say its source cluster: --source-nodes does.
    workload = resolve_workload(f"swim:{write_swim(tmp_path)}", nodes=600, node_shape=None, seed=0, source_nodes=600)
    assert workload.task_count == 8


@pytest.mark.parametrize(
    ("spec", "nodes", "shape", "pattern"),
    [
        pytest.param("bogus", None, None, r"^--workload: embedded \(default\), synthetic", id="unknown-spec"),
        pytest.param("swim:/no/such.tsv", None, None, r"^--workload: swim:PATH .* that exists", id="missing-swim"),
        pytest.param("swim:", None, None, r"^--workload: swim:PATH .* after the colon", id="swim-without-path"),
        pytest.param("openb:/no/pods.csv", None, None, r"^--workload: openb:PODS", id="missing-openb"),
        pytest.param("synthetic", 0, None, r"^--nodes: a positive number of nodes, got 0", id="zero-nodes"),
        pytest.param("synthetic", None, "cpu=abc,memory=1Gi", r"^--node-shape cpu: a Kubernetes quantity",
                     id="bad-shape-quantity"),
        pytest.param("synthetic", None, "cpu=4", r"^--node-shape: a positive memory", id="shape-without-memory"),
        pytest.param("synthetic", None, "cpu=4,memory=1Gi,gpu=1", r"^--node-shape gpu: cpu, memory, disk",
                     id="shape-unknown-resource"),
        pytest.param("synthetic", None, "cpu4", r"^--node-shape: comma-separated name=quantity",
                     id="shape-without-equals"),
    ],
)
def test_resolve_workload_rejects_bad_options_naming_them(
    spec: str, nodes: int | None, shape: str | None, pattern: str
) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        resolve_workload(spec, nodes=nodes, node_shape=shape, seed=0)


def test_a_node_shape_accepts_extended_resources() -> None:
    shape = shapes.parse_node_shape("cpu=8,memory=32Gi,nvidia.com/gpu=2")
    assert shape == ResourceVector({"cpu": 8, "memory": 32 * GI, "nvidia.com/gpu": 2})


def test_every_reader_states_its_model_as_json(tmp_path: Path) -> None:
    pods, node_list = write_openb(tmp_path)
    file = tmp_path / "w.yaml"
    file.write_text(EXAMPLE_FILE)
    for spec in ("embedded", "synthetic", "swim", f"openb:{pods},{node_list}", str(file)):
        workload = resolve_workload(spec, nodes=4, node_shape=None, seed=0)
        text = json.dumps(dict(workload.model))
        assert "source" in json.loads(text), spec
