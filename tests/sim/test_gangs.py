"""Gangs in the simulator: a workload group's ``minAvailable`` runs through the operator's decision
(``DecideInput.gang``): two gangs that each need 60 % of the cluster both finish, one after the other, and no
decision ever leaves a gang half-placed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stowage.errors import WorkloadError
from stowage.resources import ResourceVector
from stowage.sim import presets
from stowage.sim.engine import simulate
from stowage.sim.traces import shapes
from stowage.sim.traces.workload_file import load_workload_file, parse_workload, workload_to_dict

REPO = Path(__file__).resolve().parents[2]


def _doc(min_available: int | None) -> dict[str, Any]:
    group: dict[str, Any] = {"name": "workers", "replicas": 5, "demand": {"cpu": 1, "memory": "1Gi"}, "duration": 30}
    if min_available is not None:
        group["minAvailable"] = min_available
    return {"nodes": [{"name": "n", "count": 2, "cpu": 4, "memory": "16Gi"}],
            "jobs": [{"name": name, "arrival": 0, "opportunistic": "false", "groups": [dict(group)]}
                     for name in ("a", "b")]}


def _run(min_available: int | None) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Each decision's running tasks of the two gangs, and the jobs' completion times."""
    preset = presets.make("stowage")
    seen: list[tuple[int, int]] = []
    schedule = preset.schedule

    def watched() -> None:
        schedule()
        running = preset.view.status.g_running
        seen.append((int(running[0]), int(running[1])))

    preset.schedule = watched  # type: ignore[method-assign]
    result = simulate(parse_workload(_doc(min_available)), preset)
    return seen, result.jct


def test_two_gangs_of_60_percent_finish_one_after_the_other_never_half_placed() -> None:
    seen, jct = _run(5)
    assert np.isfinite(jct).all(), "both gangs finish"
    assert seen and all(r in (0, 5) for pair in seen for r in pair), "a gang runs whole or not at all"
    assert (5, 5) not in seen and any(5 in pair for pair in seen)
    assert sorted(jct.round().tolist()) == [30.0, 60.0], "one after the other"


def test_without_min_available_the_second_job_takes_what_is_left() -> None:
    seen, _ = _run(None)
    assert (5, 3) in seen or (3, 5) in seen, "task by task, the second job starts on the 3 cores left"


def test_min_available_is_read_written_and_checked() -> None:
    workload = parse_workload(_doc(4))
    assert workload.jobs[0].groups[0].min_available == 4
    assert workload_to_dict(workload)["jobs"][0]["groups"][0]["minAvailable"] == 4
    with pytest.raises(WorkloadError) as refused:
        parse_workload(_doc(6))
    assert "jobs[a].groups[workers].minAvailable: a whole number from 1 to replicas (5), got 6" in str(refused.value)


def test_the_gang_job_example_replays() -> None:
    nodes = shapes.uniform_nodes(4, ResourceVector({"cpu": 8, "memory": 32 * 2**30}))  # as its header says
    workload = load_workload_file(REPO / "manifests" / "examples" / "gang-job.yaml", nodes=nodes)
    assert workload.jobs[0].groups[0].min_available == 3
    assert np.isfinite(simulate(workload, "stowage").jct).all()
