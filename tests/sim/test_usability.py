"""Usability: SWIM traces of other clusters and slices of them, reference runs said, readable plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stowage.cli import main
from stowage.errors import InvalidInput
from stowage.sim.engine import SimConfig, simulate
from stowage.sim.traces import resolve_workload
from stowage.sim.traces.swim import source_nodes_of
from tests.sim.kit import contended

MI, GI = 2**20, 2**30
ROWS = [
    # id, submit, gap, input, shuffle, output
    ("a", 0, 0, 640 * MI, 0, 0),
    ("b", 1800, 1800, 64 * MI, GI, 0),
    ("c", 4000, 2200, 64 * MI, 0, 0),
    ("d", 9000, 5000, 64 * MI, 0, 0),
]


def write_swim(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("".join("\t".join(str(f) for f in row) + "\n" for row in ROWS))
    return path


@pytest.mark.parametrize(
    ("name", "nodes"),
    [
        pytest.param("FB-2009_samples_24_times_1hr_0.tsv", 600, id="fb-2009"),
        pytest.param("FB-2010_samples_24_times_1hr_0.tsv", 3000, id="fb-2010"),
        pytest.param("fb-2010_withInputPaths_0.tsv", 3000, id="any-case"),
        pytest.param("mytrace.tsv", None, id="unknown"),
    ],
)
def test_the_source_cluster_is_read_from_swims_file_names(name: str, nodes: int | None) -> None:
    assert source_nodes_of(name) == nodes


def test_a_swim_trace_of_another_cluster_scales_by_its_source_size(tmp_path: Path) -> None:
    path = write_swim(tmp_path, "FB-2010_samples_24_times_1hr_0.tsv")
    # 640 MiB on 3,000 machines replayed on 300: 64 MiB, one map.
    scaled = resolve_workload(f"swim:{path}", nodes=300, node_shape=None, seed=0)
    assert scaled.jobs[0].groups[0].tasks == 1
    assert scaled.model["source_nodes"] == 3000 and scaled.model["byte_scale"].endswith("= 0.1")
    # The simulated cluster defaults to the source's size: bytes as recorded, ten maps.
    full = resolve_workload(f"swim:{path}", nodes=None, node_shape=None, seed=0)
    assert len(full.nodes) == 3000 and full.jobs[0].groups[0].tasks == 10
    # --source-nodes overrides the name.
    told = resolve_workload(f"swim:{path}", nodes=600, node_shape=None, seed=0, source_nodes=600)
    assert told.jobs[0].groups[0].tasks == 10


def test_a_swim_file_that_does_not_name_its_cluster_needs_source_nodes(tmp_path: Path) -> None:
    path = write_swim(tmp_path, "mine.tsv")
    with pytest.raises(InvalidInput, match=r"^--source-nodes: the number of machines mine.tsv was recorded on"):
        resolve_workload(f"swim:{path}", nodes=None, node_shape=None, seed=0)
    result = CliRunner().invoke(main, ["simulate", "--workload", f"swim:{path}", "--no-plots",
                                       "--report", str(tmp_path / "r")])
    assert result.exit_code == 1 and "--source-nodes" in result.output and "FB-2010: 3,000" in result.output


def test_source_nodes_is_refused_for_other_workloads() -> None:
    with pytest.raises(InvalidInput, match=r"^--source-nodes: only with --workload swim"):
        resolve_workload("synthetic", nodes=4, node_shape=None, seed=0, source_nodes=600)


@pytest.mark.parametrize(
    ("args", "jobs"),
    [
        pytest.param(["--first-jobs", "2"], ["fb-a", "fb-b"], id="first-jobs"),
        pytest.param(["--hours", "0.5-2"], ["fb-b", "fb-c"], id="hours"),
        pytest.param(["--hours", "1-3", "--first-jobs", "1"], ["fb-c"], id="hours-then-first-jobs"),
    ],
)
def test_a_slice_replays_only_those_jobs(tmp_path: Path, args: list[str], jobs: list[str]) -> None:
    path = write_swim(tmp_path, "mine.tsv")
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["simulate", "--workload", f"swim:{path}", "--source-nodes", "600",
                                       "--nodes", "4", "--policy", "kube-default", *args, "--no-plots",
                                       "--json", str(out), "--report", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["workload"]["jobs"] == len(jobs)
    assert doc["workload"]["model"]["slice"].endswith(f"{len(jobs)} of 4 jobs")


def test_a_slice_keeps_each_jobs_queue(tmp_path: Path) -> None:
    path = write_swim(tmp_path, "FB-2009_x.tsv")
    full = resolve_workload(f"swim:{path}", nodes=4, node_shape=None, seed=3)
    part = full.sliced(hours=(1.0, 3.0))
    assert [(j.name, j.queue) for j in part.jobs] == [(j.name, j.queue) for j in full.jobs[2:]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--hours", "3-1"], "--hours: A-B with 0 <= A < B", id="reversed"),
        pytest.param(["--hours", "two"], "--hours: A-B, hours of the trace's clock", id="not-numbers"),
        pytest.param(["--hours", "5-6"], "a window holding at least one arrival", id="empty"),
        pytest.param(["--first-jobs", "0"], "Invalid value for '--first-jobs'", id="no-jobs"),
    ],
)
def test_bad_slices_are_refused_naming_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    path = write_swim(tmp_path, "FB-2009_x.tsv")
    result = CliRunner().invoke(main, ["simulate", "--workload", f"swim:{path}", "--nodes", "4", *args,
                                       "--no-plots", "--report", str(tmp_path / "r")])
    assert result.exit_code != 0
    assert message in result.output


def test_reference_runs_nobody_asked_for_are_said_and_shown(tmp_path: Path) -> None:
    path = write_swim(tmp_path, "FB-2009_x.tsv")
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["simulate", "--workload", f"swim:{path}", "--nodes", "4", "--policy",
                                       "stowage", "--no-plots", "--json", str(out), "--report", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "also running kube-default and drf as reference" in result.stderr
    table = result.stdout.splitlines()
    assert [line.split("  ")[0] for line in table[2:]] == ["stowage", "kube-default (ref)", "drf (ref)"]
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == ["stowage"] and list(doc["reference_runs"]) == ["kube-default", "drf"]


def test_no_reference_rows_when_every_reference_was_asked_for(tmp_path: Path) -> None:
    path = write_swim(tmp_path, "FB-2009_x.tsv")
    result = CliRunner().invoke(main, ["simulate", "--workload", f"swim:{path}", "--nodes", "4", "--policy", "drf",
                                       "--policy", "kube-default", "--no-plots", "--report", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "(ref)" not in result.output and "also running" not in result.output


# --- plots ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    pytest.importorskip("matplotlib")
    wl = contended(seed=0, n_jobs=10)
    return {name: simulate(wl, name, config=SimConfig(), seed=0) for name in ("kube-default", "ubis", "stowage")}


def test_utilization_panels_share_one_time_axis(results) -> None:
    from stowage.sim.plots import utilization_figure

    fig = utilization_figure(results)
    panels = [ax for ax in fig.axes if ax.lines]
    assert len(panels) == 3
    assert len({ax.get_xlim() for ax in panels}) == 1
    longest = max(float(r.series["t"].max()) for r in results.values()) / 3600.0
    assert panels[0].get_xlim()[1] == pytest.approx(longest)


def test_coinciding_curves_stay_visible(results) -> None:
    from stowage.sim.plots import jct_figure, utilization_figure

    (ax,) = jct_figure(results).axes
    styles = {(line.get_linestyle(), line.get_marker()) for line in ax.lines}
    assert len(styles) == len(results)  # every policy drawn differently
    panel = next(ax for ax in utilization_figure(results).axes if ax.lines)
    assert len({(line.get_linestyle(), line.get_color()) for line in panel.lines}) == 4


def test_queue_shares_label_says_harvesting_counts_opportunistic_demand(results) -> None:
    from stowage.sim.plots import queue_shares_figure

    fig = queue_shares_figure(results)
    assert "harvesting" in fig.get_supylabel()
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["kube-default", "ubis (regular + opportunistic)", "stowage (regular + opportunistic)"]
    plain = queue_shares_figure({"kube-default": results["kube-default"]})
    assert "harvesting" not in plain.get_supylabel()


def test_what_a_reader_skipped_is_said(tmp_path: Path) -> None:
    from tests.sim.test_workloads import write_openb

    pods, node_list = write_openb(tmp_path)
    result = CliRunner().invoke(main, ["simulate", "--workload", f"openb:{pods},{node_list}", "--policy",
                                       "kube-default", "--no-plots", "--report", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "note: the reader skipped 3 entries (never_scheduled 1, bad_row 1, no_run_time 1)" in result.stderr
