"""Record what the real kube-scheduler sends to Stowage's extender under ``manifests/scheduler-config.yaml``.

    .venv/bin/python -m tests.scheduler.record_golden tests/extender/golden

Starts a control plane (``KUBEBUILDER_ASSETS`` or ``.envtest/``), the whole :class:`tests.scheduler.stack.Stack`
(fake kubelet with three nodes, node monitors, Prometheus, the extender behind the recording proxy,
kube-scheduler from the manifest), then, in each ``nodeCacheCapable`` mode:

- an opportunistic pod (demand cpu 1, memory 2Gi) is scheduled: its ``/filter`` and ``/prioritize`` bodies;
- every node is filled with a low-priority pod and a high-priority pod preempts: the ``/preempt`` body.

Each body is trimmed to two nodes and written as ``OUTDIR/<names|nodes>_<verb>.json`` = ``{"path", "body"}``.
``tests/extender/test_golden.py`` replays them against the extender; the live tests compare top-level keys.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.scheduler.stack import Stack, opportunistic_pod, preemption_scenario, wait_for
from tests.support.controlplane import ControlPlane, find_assets, missing_assets_reason

__all__ = ["main", "record", "trim"]

KEEP_NODES = 2


def trim(body: dict[str, Any], keep: int = KEEP_NODES) -> dict[str, Any]:
    """The body with at most ``keep`` nodes (names, node objects, or victim map entries; sorted by name)."""
    out = copy.deepcopy(body)
    if out.get("NodeNames") is not None:
        out["NodeNames"] = sorted(out["NodeNames"])[:keep]
    if (out.get("Nodes") or {}).get("items") is not None:
        out["Nodes"]["items"] = sorted(out["Nodes"]["items"], key=lambda n: n["metadata"]["name"])[:keep]
    for key in ("NodeNameToVictims", "NodeNameToMetaVictims"):
        if out.get(key) is not None:
            out[key] = {name: out[key][name] for name in sorted(out[key])[:keep]}
    return out


def _first_about(stack: Stack, path: str, pod: str, timeout_s: float = 120.0) -> dict[str, Any]:
    assert stack.proxy is not None

    def found() -> dict[str, Any] | None:
        return next((b for b in stack.proxy.snapshot(path)
                     if ((b.get("Pod") or {}).get("metadata") or {}).get("name") == pod), None)

    return wait_for(found, timeout_s, f"a {path} request about {pod}")


def record(stack: Stack, outdir: Path) -> list[Path]:
    """Run the scenarios in both modes; write and return the golden files."""
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(name: str, path: str, body: dict[str, Any]) -> None:
        target = outdir / f"{name}.json"
        target.write_text(json.dumps({"path": path, "body": trim(body)}, indent=1, sort_keys=True) + "\n")
        written.append(target)

    for node_cache_capable, mode in ((True, "names"), (False, "nodes")):
        stack.use_scheduler(node_cache_capable=node_cache_capable)
        assert stack.proxy is not None
        stack.proxy.clear()
        with stack.namespace("golden") as ns:
            pod = f"golden-opp-{mode}"
            stack.create(ns, opportunistic_pod(pod, cpu="1", memory="2Gi", stack_id=stack.id))
            stack.wait_bound(ns, pod)
            write(f"{mode}_filter", "/filter", _first_about(stack, "/filter", pod))
            write(f"{mode}_prioritize", "/prioritize", _first_about(stack, "/prioritize", pod))
        with stack.namespace("golden") as ns:
            preemption_scenario(stack, ns)
            write(f"{mode}_preempt", "/preempt", _first_about(stack, "/preempt", "vip"))
        stack.wait_for_fresh_utilization(min_memory=10 * 2**30)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scheduler.record_golden", description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=Path, help="where to write <names|nodes>_<verb>.json")
    args = parser.parse_args(argv)
    assets = find_assets()
    if assets is None:
        print(missing_assets_reason(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="stowage-golden-") as tmp, \
            ControlPlane(Path(tmp) / "control-plane", assets) as plane, \
            Stack(plane, Path(tmp) / "stack") as stack:
        for path in record(stack, args.outdir):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
