"""Every simulator module imports on its own (a fresh interpreter each), and the preset names match the factories."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stowage.sim import presets


@pytest.mark.parametrize("module", ["stowage.sim.packing", "stowage.sim.baselines", "stowage.sim.presets",
                                    "stowage.sim.engine", "stowage.sim.cli"])
def test_a_simulator_module_imports_first(module: str) -> None:
    # Importing ``packing`` or ``baselines`` before ``presets`` once failed with a circular import.
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_preset_names_are_the_factories_in_report_order() -> None:
    assert tuple(presets._factories()) == presets.PRESETS
    assert {presets.make(name).name for name in presets.PRESETS} == set(presets.PRESETS)
