"""Every extender, kube and prom module states its purpose and exports exactly what ``__all__`` names."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "stowage.extender.app",
    "stowage.extender.bench",
    "stowage.extender.cli",
    "stowage.extender.filtering",
    "stowage.extender.messages",
    "stowage.extender.metrics",
    "stowage.extender.pods",
    "stowage.extender.preemption",
    "stowage.extender.queues",
    "stowage.extender.scoring",
    "stowage.extender.server",
    "stowage.extender.snapshot",
    "stowage.extender.wire",
    "stowage.kube.api",
    "stowage.kube.cluster",
    "stowage.kube.credentials",
    "stowage.kube.informer",
    "stowage.kube.recent",
    "stowage.kube.records",
    "stowage.prom",
]


@pytest.mark.parametrize("module", MODULES)
def test_module_has_a_docstring_and_a_truthful_all(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__doc__ and mod.__doc__.strip()
    assert [name for name in mod.__all__ if not hasattr(mod, name)] == []
