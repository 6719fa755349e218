"""``SimConfig.pass_delay_s`` (``--pass-delay``): every preset passes at most once per delay."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from stowage.policy.dispatch import PASS_DELAY_S
from stowage.sim import presets
from stowage.sim.bench import bench_simulator
from stowage.sim.cli import simulate
from stowage.sim.engine import SimConfig, Simulation
from tests.sim.kit import BURSTY, FLAT, contended, group, job, nodes, workload


def _run(name: str, delay: float, seed: int = 3) -> Simulation:
    sim = Simulation(contended(seed=seed, n_jobs=16), presets.make(name), SimConfig(usage=BURSTY, trace=True,
                                                                                  check=True, pass_delay_s=delay), seed)
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


def _pass_times(sim: Simulation) -> np.ndarray:
    return np.unique(np.array([entry[0] for entry in sim.log], dtype=float))


EVERY = ["stowage", "tetris", "kube-default", "drf", "load-aware", "ubis"]


@pytest.mark.parametrize("name", EVERY)
def test_a_preset_places_at_most_once_per_delay_and_loses_nothing(name: str) -> None:
    every_event, paced = _run(name, 0.0), _run(name, 2.0)
    # Without a delay some passes are closer together than 2 s, so the bound below is the delay's doing.
    assert (np.diff(_pass_times(every_event)) < 2.0).any()
    # At most one pass per 2 s: distinct placement times are >= 2 s apart.
    assert np.diff(_pass_times(paced)).min() >= 2.0 - 1e-9
    assert paced.result.summary["lost_tasks"] == 0  # type: ignore[attr-defined]
    assert paced.result.summary["jobs_finished"] == paced.result.summary["jobs"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", EVERY)
def test_a_change_after_a_quiet_spell_is_passed_at_once_and_one_within_the_delay_waits(name: str) -> None:
    # Job a at t=0 (empty cluster: passed at once), job b 1 s later (within the 2 s delay: waits for t=2),
    # job c at t=50 (a quiet spell since the pass at t=2: passed at once); each has room on arrival.
    jobs = [job("a", 0.0, group("m", 2, 30.0)), job("b", 1.0, group("m", 2, 30.0)), job("c", 50.0, group("m", 2, 5.0))]
    sim = Simulation(workload(nodes(2), jobs), presets.make(name), SimConfig(usage=FLAT, trace=True, check=True,
                                                                             pass_delay_s=2.0), 0)
    result = sim.run()
    started = {entry[1]: entry[0] for entry in reversed(sim.log or [])}  # each job's first placement
    assert started == {"a": 0.0, "b": 2.0, "c": 50.0}
    assert result.summary["jobs_finished"] == 3


def test_simulate_models_the_operators_delay_by_default_and_says_so(tmp_path) -> None:
    out = tmp_path / "r.json"
    args = ["--first-jobs", "8", "--policy", "stowage", "--no-plots", "--report", str(tmp_path / "r"), "--json",
            str(out)]
    done = CliRunner().invoke(simulate, args)
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["engine"] == {"pass_delay_s": PASS_DELAY_S, "oracle_durations": False}
    assert PASS_DELAY_S > 0
    done = CliRunner().invoke(simulate, [*args, "--pass-delay", "0", "--force"])
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["engine"] == {"pass_delay_s": 0.0, "oracle_durations": False}


def test_bench_and_simulate_take_the_flag() -> None:
    out = CliRunner().invoke(bench_simulator, ["--workload", "embedded", "--first-jobs", "20", "--policy", "stowage",
                                               "--pass-delay", "0.2"])
    assert out.exit_code == 0, out.output
    assert "stowage" in out.output
    bad = CliRunner().invoke(bench_simulator, ["--pass-delay", "-1"])
    assert bad.exit_code == 2 and "--pass-delay" in bad.output
