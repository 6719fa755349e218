"""The workload file contract: the documented example loads to the expected Workload, every bad case is
rejected with an exact message, and any Workload round-trips through the file form."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.errors import WorkloadError
from stowage.labels import Opportunistic
from stowage.model import JobOrder
from stowage.resources import ResourceVector
from stowage.sim.traces import shapes
from stowage.sim.traces.synthetic import JobClass, TetrisMix, tetris_mix
from stowage.sim.traces.workload_file import (
    DEFAULT_QUEUE,
    load_workload_file,
    parse_workload,
    workload_to_dict,
)
from stowage.sim.workload import JobSpec, NodeSpec, QueueSpec, TaskGroup, Workload

GI, MI = 2**30, 2**20

EXAMPLE = """\
nodes:                     # count expands to <name>-1..K
  - {name: big, count: 2, cpu: 2, memory: 4Gi, disk: 200Mi, network: 125Mi}
queues:
  - {name: research, weight: 2, jobOrder: SRTF, opportunistic: Allow}
jobs:
  - name: etl-1
    queue: research
    arrival: 0             # seconds
    opportunistic: auto    # true | auto | false
    groups:
      - name: map
        replicas: 6
        demand: {cpu: 2, memory: 3Gi, disk: 50Mi}
        duration: 10       # seconds when it runs alone at full speed
        usage: 1.0         # optional fraction of demand really used; default: the usage model
      - {name: reduce, replicas: 2, demand: {cpu: 1, memory: 2Gi}, duration: 20, dependsOn: [map]}
"""

BIG = ResourceVector({"cpu": 2, "memory": 4 * GI, "disk": 200 * MI, "network": 125 * MI})
EXPECTED_NODES = (NodeSpec("big-1", BIG), NodeSpec("big-2", BIG))
EXPECTED_QUEUES = (QueueSpec("research", 2.0, JobOrder.SRTF, True),)
EXPECTED_JOBS = (
    JobSpec(
        "etl-1", "research", 0.0,
        (
            TaskGroup("map", 6, ResourceVector({"cpu": 2, "memory": 3 * GI, "disk": 50 * MI}), 10.0, 1.0),
            TaskGroup("reduce", 2, ResourceVector({"cpu": 1, "memory": 2 * GI}), 20.0, None, ("map",)),
        ),
        Opportunistic.AUTO,
    ),
)


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE)


def test_the_documented_example_loads_to_the_expected_workload(tmp_path: Path) -> None:
    path = tmp_path / "etl.yaml"
    path.write_text(EXAMPLE)
    workload = load_workload_file(path)
    assert workload.name == "etl"
    assert workload.nodes == EXPECTED_NODES
    assert workload.queues == EXPECTED_QUEUES
    assert workload.jobs == EXPECTED_JOBS
    assert workload.task_count == 8


def test_the_same_example_as_json_loads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "etl.json"
    path.write_text(json.dumps(example()))
    workload = load_workload_file(path)
    assert (workload.nodes, workload.queues, workload.jobs) == (EXPECTED_NODES, EXPECTED_QUEUES, EXPECTED_JOBS)


def test_a_node_with_count_one_keeps_its_name_and_extended_resources_are_accepted() -> None:
    doc = example()
    doc["nodes"] = [{"name": "gpu-box", "cpu": 8, "memory": "32Gi", "nvidia.com/gpu": 2}]
    doc["jobs"][0]["groups"][0]["demand"] = {"cpu": 2, "memory": "3Gi", "nvidia.com/gpu": 1}
    workload = parse_workload(doc)
    assert [n.name for n in workload.nodes] == ["gpu-box"]
    assert workload.nodes[0].capacity["nvidia.com/gpu"] == 2
    assert workload.jobs[0].groups[0].demand["nvidia.com/gpu"] == 1


def test_absent_queues_give_one_default_queue_and_jobs_default_to_it() -> None:
    doc = example()
    del doc["queues"]
    del doc["jobs"][0]["queue"]
    workload = parse_workload(doc)
    assert workload.queues == (DEFAULT_QUEUE,)
    assert workload.queues[0] == QueueSpec("default", 1.0, JobOrder.SRTF, True)
    assert workload.jobs[0].queue == "default"


def test_optional_fields_take_their_defaults() -> None:
    doc = example()
    job = doc["jobs"][0]
    del job["arrival"], job["opportunistic"]
    job["priority"] = 5
    doc["nodes"][0]["harvest"] = False
    workload = parse_workload(doc)
    assert workload.jobs[0].arrival_s == 0.0
    assert workload.jobs[0].opportunistic is Opportunistic.AUTO
    assert workload.jobs[0].priority == 5
    assert all(not n.harvest for n in workload.nodes)


def _set(path: str, value: Any) -> Any:
    """A mutation of the example: set (or with value DELETE, remove) the dotted path."""

    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is DELETE:
            del target[int(last) if last.isdigit() else last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return mutate


DELETE = object()


def _both(*mutations: Any) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        for m in mutations:
            m(doc)

    return mutate


REJECTED = [
    pytest.param(_set("name", "x"), ["name: unknown key; allowed: nodes, queues, jobs"], id="unknown-top-level-key"),
    pytest.param(_set("jobs", DELETE), ["jobs: required field missing"], id="missing-jobs"),
    pytest.param(_set("nodes", []), ["nodes: a non-empty list of nodes, got []"], id="empty-node-list"),
    pytest.param(
        _set("jobs.0.arival", 3),
        ["jobs[etl-1].arival: unknown key; allowed: name, queue, arrival, opportunistic, priority, groups"],
        id="unknown-job-key",
    ),
    pytest.param(
        _set("jobs.0.groups.0.durations", 3),
        ["jobs[etl-1].groups[map].durations: unknown key; allowed: name, replicas, demand, duration, usage, dependsOn, "
         "expectedDuration, minAvailable"],
        id="unknown-group-key",
    ),
    pytest.param(
        _set("nodes.0.gpu", 1),
        ["nodes[big].gpu: unknown key; allowed: name, count, harvest, cpu, memory, disk, network "
         "or an extended resource such as nvidia.com/gpu"],
        id="unknown-node-key",
    ),
    pytest.param(_set("jobs.0.groups.0.duration", DELETE),
                 ["jobs[etl-1].groups[map].duration: required field missing"], id="missing-group-duration"),
    pytest.param(_set("jobs.0.name", DELETE), ["jobs[0].name: required field missing"], id="missing-job-name"),
    pytest.param(_set("nodes.0.memory", DELETE), ["nodes[big].memory: required field missing"],
                 id="missing-node-memory"),
    pytest.param(
        _set("nodes.0.memory", "4Gb"),
        ["nodes[big].memory: a Kubernetes quantity such as 500m, 2, 1.5Gi, 128Mi, 1e3 "
         "(suffixes n u m k M G T P E, Ki..Ei), got '4Gb'"],
        id="bad-node-quantity",
    ),
    pytest.param(
        _set("jobs.0.groups.1.demand.memory", "-2Gi"),
        ["jobs[etl-1].groups[reduce].demand.memory: a non-negative quantity, got '-2Gi'"],
        id="negative-demand",
    ),
    pytest.param(
        _set("jobs.0.groups.1.demand.gpu", 1),
        ["jobs[etl-1].groups[reduce].demand.gpu: unknown resource; allowed: cpu, memory, disk, network "
         "or an extended resource such as nvidia.com/gpu"],
        id="unknown-demand-resource",
    ),
    pytest.param(
        _set("jobs.0.groups.1.dependsOn", ["mapp"]),
        ["jobs[etl-1].groups[reduce].dependsOn: unknown group 'mapp'; known: map"],
        id="unknown-dependency",
    ),
    pytest.param(
        _set("jobs.0.groups.0.dependsOn", ["reduce"]),
        ["jobs[etl-1].groups[map].dependsOn: cycle map -> reduce -> map"],
        id="dependency-cycle",
    ),
    pytest.param(
        _set("jobs.0.groups.0.dependsOn", ["map"]),
        ["jobs[etl-1].groups[map].dependsOn: cycle map -> map"],
        id="group-depends-on-itself",
    ),
    pytest.param(
        _set("jobs.0.groups.1.name", "map"),
        ["jobs[etl-1].groups[1].name: duplicate group name 'map' (also jobs[etl-1].groups[0])"],
        id="duplicate-group-name",
    ),
    pytest.param(
        lambda doc: doc["jobs"].append(copy.deepcopy(doc["jobs"][0])),
        ["jobs[1].name: duplicate job name 'etl-1' (also jobs[0])"],
        id="duplicate-job-name",
    ),
    pytest.param(
        lambda doc: doc["queues"].append({"name": "research"}),
        ["queues[1].name: duplicate queue name 'research' (also queues[0])"],
        id="duplicate-queue-name",
    ),
    pytest.param(
        lambda doc: doc["nodes"].append({"name": "big-1", "cpu": 1, "memory": "1Gi"}),
        ["nodes[big-1]: node name 'big-1' occurs 2 times after expanding count "
         "(count K names nodes <name>-1..<name>-K)"],
        id="node-names-collide-after-expansion",
    ),
    pytest.param(_set("nodes.0.count", 0), ["nodes[big].count: a positive whole number, got 0"], id="zero-count"),
    pytest.param(_set("jobs.0.groups.0.replicas", 0),
                 ["jobs[etl-1].groups[map].replicas: a positive whole number, got 0"], id="zero-replicas"),
    pytest.param(_set("jobs.0.groups.0.replicas", 1.5),
                 ["jobs[etl-1].groups[map].replicas: a positive whole number, got 1.5"], id="fractional-replicas"),
    pytest.param(_set("jobs.0.groups.1.duration", -5),
                 ["jobs[etl-1].groups[reduce].duration: a positive number of seconds, got -5"],
                 id="negative-duration"),
    pytest.param(_set("jobs.0.groups.1.duration", 0),
                 ["jobs[etl-1].groups[reduce].duration: a positive number of seconds, got 0"], id="zero-duration"),
    pytest.param(_set("jobs.0.groups.0.usage", 1.5),
                 ["jobs[etl-1].groups[map].usage: a fraction in (0, 1], got 1.5"], id="usage-above-one"),
    pytest.param(_set("jobs.0.arrival", -1), ["jobs[etl-1].arrival: a number of seconds >= 0, got -1"],
                 id="negative-arrival"),
    pytest.param(_set("jobs.0.queue", "reserch"), ["jobs[etl-1].queue: unknown queue 'reserch'; known: research"],
                 id="unknown-queue"),
    pytest.param(_set("jobs.0.queue", DELETE),
                 ["jobs[etl-1].queue: required field missing; known queues: research"],
                 id="missing-queue-when-queues-are-declared"),
    pytest.param(_set("queues", DELETE), ["jobs[etl-1].queue: unknown queue 'research'; known: default"],
                 id="queue-named-but-only-the-default-exists"),
    pytest.param(_set("jobs.0.opportunistic", "maybe"),
                 ["jobs[etl-1].opportunistic: one of 'true', 'auto', 'false', got 'maybe'"],
                 id="bad-opportunistic"),
    pytest.param(_set("queues.0.jobOrder", "LIFO"),
                 ["queues[research].jobOrder: one of FIFO, SRTF, FSP, got 'LIFO'"], id="bad-job-order"),
    pytest.param(_set("queues.0.opportunistic", "allow"),
                 ["queues[research].opportunistic: one of Allow, Deny, got 'allow'"], id="bad-queue-opportunistic"),
    pytest.param(_set("queues.0.weight", 0), ["queues[research].weight: a positive number, got 0"], id="zero-weight"),
    pytest.param(
        _set("jobs.0.groups.0.demand.cpu", 3),
        ["jobs[etl-1].groups[map].demand.cpu: more than any node has (largest: 2), got 3"],
        id="demand-larger-than-every-node",
    ),
    pytest.param(
        lambda doc: doc["nodes"][0].update({"nvidia.com/gpu": 0.5}),
        ["nodes[big].nvidia.com/gpu: extended resources are whole numbers, got 0.5"],
        id="fractional-extended-resource",
    ),
    pytest.param(
        _set("jobs.0.name", "etl 1"),
        ["jobs[0].name: a name of letters, digits, '-', '_' or '.' (starting and ending alphanumeric), got 'etl 1'"],
        id="job-name-with-a-space",
    ),
    pytest.param(
        _both(_set("jobs.0.groups.1.dependsOn", ["mapp"]), _set("nodes.0.count", -1),
              _set("jobs.0.groups.0.replicas", 0), _set("extra", True)),
        ["extra: unknown key; allowed: nodes, queues, jobs",
         "nodes[big].count: a positive whole number, got -1",
         "jobs[etl-1].groups[map].replicas: a positive whole number, got 0",
         "jobs[etl-1].groups[reduce].dependsOn: unknown group 'mapp'; known: map"],
        id="every-problem-is-listed-at-once",
    ),
]


@pytest.mark.parametrize(("mutate", "problems"), REJECTED)
def test_a_bad_workload_is_rejected_with_exact_messages(mutate: Any, problems: list[str]) -> None:
    doc = example()
    mutate(doc)
    with pytest.raises(WorkloadError) as caught:
        parse_workload(doc)
    assert caught.value.problems == problems


@pytest.mark.parametrize(
    ("text", "suffix", "fragment"),
    [
        pytest.param("nodes: [", ".yaml", "not valid YAML", id="broken-yaml"),
        pytest.param("{", ".json", "not valid JSON", id="broken-json"),
        pytest.param("- 1\n- 2\n", ".yaml", "(top level): a mapping of keys to values", id="top-level-is-a-list"),
    ],
)
def test_an_unreadable_file_is_rejected_naming_the_file(tmp_path: Path, text: str, suffix: str, fragment: str) -> None:
    path = tmp_path / f"w{suffix}"
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(path)
    assert fragment in str(caught.value)


def test_a_missing_file_is_a_workload_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"nope\.yaml: cannot read"):
        load_workload_file(tmp_path / "nope.yaml")


def test_the_example_round_trips_through_the_file_form(tmp_path: Path) -> None:
    first = parse_workload(example())
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump(workload_to_dict(first)))
    again = load_workload_file(path)
    assert (again.nodes, again.queues, again.jobs) == (first.nodes, first.queues, first.jobs)


def test_a_synthetic_mix_round_trips_through_the_file_form(tmp_path: Path) -> None:
    mix = TetrisMix(classes=(JobClass("tiny", 4, 12, 0.5),))
    workload = tetris_mix(seed=3, n_nodes=4, load=0.5, duration_s=600, node_capacity=shapes.FB_2009_PROFILE, mix=mix)
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(workload_to_dict(workload)))
    again = load_workload_file(path)
    assert (again.nodes, again.queues, again.jobs) == (workload.nodes, workload.queues, workload.jobs)


_names = st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    node_names = draw(st.lists(_names, min_size=1, max_size=3, unique=True))
    capacity = ResourceVector({
        "cpu": draw(st.integers(1, 64_000)) / 1000,
        "memory": draw(st.integers(1, 2**40)),
        "network": draw(st.integers(0, 2**34)),
        "nvidia.com/gpu": draw(st.integers(0, 8)),
    })
    nodes = tuple(NodeSpec(n, capacity, draw(st.booleans())) for n in node_names)
    queues = tuple(
        QueueSpec(q, draw(st.floats(0.01, 100)), draw(st.sampled_from(JobOrder)), draw(st.booleans()))
        for q in draw(st.lists(_names, min_size=1, max_size=3, unique=True))
    )
    jobs = []
    for name in draw(st.lists(_names, min_size=1, max_size=4, unique=True)):
        groups = []
        for i in range(draw(st.integers(1, 3))):
            demand = ResourceVector({
                "cpu": draw(st.integers(1, int(capacity["cpu"] * 1000))) / 1000,
                "memory": draw(st.integers(0, int(capacity["memory"]))),
            })
            groups.append(TaskGroup(
                f"g{i}", draw(st.integers(1, 1000)), demand, draw(st.floats(0.001, 1e6)),
                draw(st.none() | st.floats(0.01, 1.0)), (f"g{i - 1}",) if i and draw(st.booleans()) else (),
            ))
        jobs.append(JobSpec(name, draw(st.sampled_from([q.name for q in queues])), draw(st.floats(0, 1e6)),
                            tuple(groups), draw(st.sampled_from(Opportunistic)), draw(st.integers(-100, 100))))
    return Workload("w", nodes, queues, tuple(jobs))


@settings(max_examples=60, deadline=None)
@given(workload=workloads())
def test_any_workload_round_trips_through_the_file_form(workload: Workload) -> None:
    text = yaml.safe_dump(workload_to_dict(workload))
    again = parse_workload(yaml.safe_load(text))
    assert (again.nodes, again.queues, again.jobs) == (workload.nodes, workload.queues, workload.jobs)


def test_a_node_count_above_the_limit_is_refused_before_any_node_is_built(tmp_path: Path) -> None:
    """Ten million nodes in one entry: refused naming --max-nodes, with no node object made (memory stays small)."""
    import tracemalloc

    from stowage.sim.traces import resolve_workload

    doc = {"nodes": [{"name": "n", "count": 10_000_000, "cpu": 4, "memory": "8Gi"}],
           "jobs": [{"name": "j", "arrival": 0, "groups": [{"name": "g", "replicas": 1, "duration": 10,
                                                          "demand": {"cpu": 1, "memory": "1Gi"}}]}]}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(doc))
    tracemalloc.start()
    try:
        with pytest.raises(WorkloadError) as refused:
            resolve_workload(str(path), nodes=None, node_shape=None, seed=0, max_nodes=20_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "10,000,000 nodes is above the limit of 20,000 (--max-nodes raises it" in str(refused.value)
    assert peak < 50 * 2**20, f"{peak / 2**20:.0f} MiB traced: nodes were built before the check"
    # Under the limit the same file loads (a smaller count), and --nodes is checked before it is used.
    doc["nodes"][0]["count"] = 3
    path.write_text(yaml.safe_dump(doc))
    assert len(resolve_workload(str(path), nodes=None, node_shape=None, seed=0, max_nodes=3).nodes) == 3
    with pytest.raises(Exception, match="--max-nodes raises it"):
        resolve_workload("synthetic", nodes=10_000_000, node_shape=None, seed=0, max_nodes=20_000)


# --- one word, one meaning; Stowage manifests; files that are not there ---------------------------------------

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"


def test_the_old_spelling_tasks_is_refused_saying_what_it_became() -> None:
    doc = example()
    group = doc["jobs"][0]["groups"][0]
    group["tasks"] = group.pop("replicas")
    with pytest.raises(WorkloadError) as caught:
        parse_workload(doc)
    assert caught.value.problems == [
        "jobs[etl-1].groups[map].tasks: renamed `replicas` (the number of tasks in the group, as a Stowage Job's "
        "spec.tasks[].replicas; `tasks` is a Job's list of task groups)"]


def test_a_yaml_error_names_the_file_not_a_string(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("nodes: [\n  - a: b\n")
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(path)
    assert f'in "{path}", line 2' in str(caught.value)
    assert "<unicode string>" not in str(caught.value)


def _examples_file(tmp_path: Path) -> Path:
    """queue.yaml and job.yaml of manifests/examples/ in one multi-document file, as `cat` would join them."""
    path = tmp_path / "both.yaml"
    path.write_text((EXAMPLES / "queue.yaml").read_text() + "---\n" + (EXAMPLES / "job.yaml").read_text())
    return path


def test_the_example_job_and_queues_replay_as_their_manifests_say(tmp_path: Path) -> None:
    nodes = shapes.uniform_nodes(2, ResourceVector({"cpu": 4, "memory": 8 * GI}))
    workload = load_workload_file(_examples_file(tmp_path), nodes=nodes)
    assert workload.nodes == nodes
    assert [(q.name, q.weight, q.job_order) for q in workload.queues] == [
        ("research", 2.0, JobOrder.SRTF), ("batch", 1.0, JobOrder.FIFO)]
    (job,) = workload.jobs
    assert (job.name, job.queue, job.opportunistic, job.arrival_s) == ("wordcount", "research", Opportunistic.AUTO, 0.0)
    map_, reduce = job.groups
    assert (map_.name, map_.tasks, map_.duration_s, map_.expected_duration_s) == ("map", 8, 40.0, 40.0)
    assert map_.demand == ResourceVector({"cpu": 0.5, "memory": 256 * MI})
    assert (reduce.name, reduce.tasks, reduce.depends_on) == ("reduce", 2, ("map",))
    assert reduce.demand == ResourceVector({"cpu": 1, "memory": 512 * MI})


def test_a_job_manifest_alone_runs_in_a_default_queue_on_the_nodes_given(tmp_path: Path) -> None:
    nodes = shapes.uniform_nodes(1, ResourceVector({"cpu": 2, "memory": 4 * GI}))
    workload = load_workload_file(EXAMPLES / "job.yaml", nodes=nodes)
    assert [(q.name, q.weight) for q in workload.queues] == [("research", 1.0)]  # named by the Job, defaults
    with pytest.raises(WorkloadError, match="name no nodes: give --nodes N and --node-shape"):
        load_workload_file(EXAMPLES / "job.yaml")


def test_plain_pods_and_their_controllers_are_refused_naming_each_document() -> None:
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(EXAMPLES / "one-label.yaml")
    problems = caught.value.problems
    assert [p.split(": ", 2)[1] for p in problems] == [
        "documents[0] (apps/v1 Deployment batch-workers)", "documents[1] (batch/v1 Job etl-harvest)",
        "documents[2] (v1 Pod report)"]
    assert all("reads Stowage Jobs and Queues (stowage.io/v1alpha1)" in p for p in problems)


def test_a_job_manifest_without_expected_duration_says_the_simulator_needs_it(tmp_path: Path) -> None:
    job = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    del job["spec"]["tasks"][1]["expectedDuration"]
    path = tmp_path / "j.yaml"
    path.write_text(yaml.safe_dump(job))
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(path, nodes=shapes.uniform_nodes(1, ResourceVector({"cpu": 2, "memory": 4 * GI})))
    assert caught.value.problems == [
        f"{path}: documents[0] (stowage.io/v1alpha1 Job wordcount).spec.tasks[reduce].expectedDuration: required by "
        "the simulator: one task's run time in seconds (in the cluster only a hint; here also the truth the replay "
        "runs)"]


def test_a_workload_that_is_no_file_says_no_such_file() -> None:
    from stowage.sim.traces import resolve_workload

    for spec in ("/nonexistent", "./missing.yaml", "missing.yaml"):
        with pytest.raises(WorkloadError) as caught:
            resolve_workload(spec, nodes=None, node_shape=None, seed=0)
        assert caught.value.problems == [f"{spec}: no such file"]
        assert "embedded (default)" not in str(caught.value)  # not the list of specs
