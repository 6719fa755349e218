"""Whether two versions of the simulator give the same results, bit for bit (for speed work).

Writes, per run, the full summary, every job's JCT and every placement (time, job, group, node, class),
floats as ``float.hex`` so that equal means floating-point equal, not close. Run it with one version's
interpreter to ``--out``, with the other's to ``--against`` the first file: it exits 1 naming every run
whose record differs, and the first key that does.

    /tmp/base/.venv/bin/python scripts/same_results.py --out /tmp/before.json
    .venv/bin/python scripts/same_results.py --against /tmp/before.json

Runs: ``random_mix(seed)`` for ``--seeds`` seeds under ``--policy`` presets (default ``stowage`` and
``kube-default``), and the FB-2009 batch day's first ``--fb-seconds`` simulated seconds on 600 nodes
(``stowage bench simulator --arrivals batch --max-sim-time``; 0 skips it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from stowage.sim.traces import resolve_workload
from stowage.sim.traces.random_mix import random_mix
from stowage.sim.workload import Workload


def _exact(value: Any) -> Any:
    """``value`` with every float as its hex (NaN and infinities included), containers recursed."""
    if isinstance(value, float):
        return value.hex() if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _exact(value.tolist())
    return value


def record(workload: Workload, preset: str, config: SimConfig, seed: int) -> dict[str, Any]:
    sim = Simulation(workload, make(preset), config, seed)
    result = sim.run()
    return {"summary": _exact(result.summary), "jct": _exact(result.jct), "log": _exact(sim.log)}


def runs(seeds: int, presets: list[str], fb_seconds: float) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for seed in range(seeds):
        workload = random_mix(seed)
        for preset in presets:
            out[f"random:{seed}/{preset}"] = record(workload, preset, SimConfig(trace=True), seed)
            print(f"random:{seed}/{preset}", file=sys.stderr, flush=True)
    if fb_seconds > 0:
        fb = resolve_workload("swim", nodes=None, node_shape=None, seed=0).with_batch_arrivals()
        for preset in presets:
            key = f"fb-batch-{fb_seconds:g}s/{preset}"
            out[key] = record(fb, preset, SimConfig(trace=True, max_sim_s=fb_seconds), 0)
            print(key, file=sys.stderr, flush=True)
    return out


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {a!r} ≠ {b!r}"[:300]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = ap.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="write the records here")
    target.add_argument("--against", type=Path, help="compare with the records in this file")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--policy", action="append", dest="presets")
    ap.add_argument("--fb-seconds", type=float, default=120.0)
    args = ap.parse_args(argv)
    now = runs(args.seeds, args.presets or ["stowage", "kube-default"], args.fb_seconds)
    if args.out:
        args.out.write_text(json.dumps(now))
        return 0
    before = json.loads(args.against.read_text())
    bad = [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
    for k in bad:
        print(f"DIFFERENT {k}: {_first_difference(before.get(k), now.get(k))}")
    print(f"{len(now) - len(bad)} of {len(set(before) | set(now))} runs identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
