"""Presets in worker processes give the serial run's report, byte for byte, in the order asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from stowage.cli import main
from stowage.errors import StowageError
from stowage.sim import compare, sizing
from stowage.sim.engine import SimConfig
from stowage.sim.traces.workload_file import workload_to_dict
from tests.sim import kit
from tests.sim.kit import contended


def write_contended(tmp_path: Path) -> Path:
    path = tmp_path / "contended.yaml"
    path.write_text(yaml.safe_dump(workload_to_dict(contended(seed=1, n_jobs=12))))
    return path


def test_parallel_and_serial_reports_are_identical_byte_for_byte(tmp_path: Path) -> None:
    workload = write_contended(tmp_path)
    texts = []
    for jobs in ("1", "3"):
        out = tmp_path / f"jobs-{jobs}.json"
        result = CliRunner().invoke(main, ["simulate", "--workload", str(workload), "--jobs", jobs, "--seed", "5",
                                           "--json", str(out), "--report", str(tmp_path / jobs), "--no-plots"])
        assert result.exit_code == 0, result.output
        assert ("serially" if jobs == "1" else "in 3 processes") in result.stderr
        texts.append(out.read_bytes())
    assert texts[0] == texts[1]


def test_results_follow_the_order_asked_not_the_order_finished() -> None:
    workload = contended(seed=3, n_jobs=6)
    # stowage is the slowest preset and is asked first; drf (a reference) last.
    runs = compare.run_all(workload, ["stowage", "kube-default", "binpack"], config=SimConfig(), seed=2, processes=2)
    assert list(runs.results) == ["stowage", "kube-default", "binpack", "drf"]
    serial = compare.run_all(workload, ["stowage", "kube-default", "binpack"], config=SimConfig(), seed=2)
    assert list(serial.results) == list(runs.results)
    for name, result in serial.results.items():
        assert runs.results[name].summary == result.summary, name
        assert runs.results[name].jct.tobytes() == result.jct.tobytes(), name


def test_the_process_count_defaults_to_the_cores_and_never_exceeds_the_runs() -> None:
    big = contended(seed=0, n_jobs=30)
    plan = sizing.plan_runs(big, ["kube-default", "stowage"], processes=64)
    assert plan.processes == 3  # two asked + drf
    assert sizing.plan_runs(big, ["kube-default"], processes=1).processes == 1
    tiny = contended(seed=0, n_jobs=2)
    assert sizing.plan_runs(tiny, ["kube-default", "stowage"]).processes == 1  # a process costs more than it saves


def test_a_workload_error_in_a_worker_reaches_the_caller_with_its_message() -> None:
    too_big = kit.workload(kit.nodes(2), [kit.job("j", 0.0, kit.group("g", 3, 10.0, cpu=64.0))])
    with pytest.raises(StowageError, match=r"jobs\[j\]\.groups\[g\]\.demand: exceeds every node on \['cpu'\]"):
        compare.run_all(too_big, ["kube-default", "stowage"], processes=2)
