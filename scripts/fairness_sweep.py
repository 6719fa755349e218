"""The half-life sweep (issue #21 §1): mean JCT against fairness between queues, per usage half-life.

Runs ``stowage`` with ``packing.queue_usage_half_life_s`` at each of :data:`HALF_LIVES` (and once as strict
weighted DRF at every slot: half-life 0, tolerance 0) and ``kube-default`` once, on each workload of
:data:`WORKLOADS` that has two queues or more: the embedded default (two hours, the tenant queues) and the
random workloads among the first 12 of ``scripts/random_workloads.py``'s seeds that have several queues. The simulator's
defaults otherwise (estimated durations, the operator's 0.2 s pass delay). Prints, in Markdown, per setting:

- mean JCT ÷ kube-default's (median over the workloads, and the embedded default's own);
- makespan ÷ kube-default's (worst);
- the largest deviation of a backlogged queue's decayed usage from its weights' share, and the fraction
  of samples more than 15 % off (``metrics.fairness_over_time``), measured for every setting with one
  yardstick, usage decayed with :data:`YARDSTICK_S` (each run's own half-life would judge a setting by itself);
- the longest a backlogged queue held less than half its fair share (s, worst).

Every run's summary goes to ``--out`` (JSON lines, with the commit it was made at) as it finishes; runs already
there are not run again. ``--from-runs`` runs nothing and prints the table of the kept runs; ``--write-results
PAGE`` also writes it into the page's ``fairness-sweep`` section (``scripts/update_results.py``).

    .venv/bin/python scripts/fairness_sweep.py --jobs 2
    .venv/bin/python scripts/fairness_sweep.py --from-runs --write-results docs/results.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

#: Usage half-lives swept (s); None: strict weighted DRF at every slot (half-life 0 and tolerance 0).
HALF_LIVES: tuple[float | None, ...] = (None, 0.0, 60.0, 300.0, 600.0, 1800.0, 3600.0)
#: The half-life the deviation is measured with, for every setting alike (s).
YARDSTICK_S = 300.0
#: The random workloads: those with two queues or more among scripts/random_workloads.py's first seeds.
RANDOM_SEEDS = 12


def workloads() -> list[str]:
    from stowage.sim.traces.random_mix import random_mix

    return ["embedded"] + [f"random:{s}" for s in range(RANDOM_SEEDS) if len(random_mix(s).queues) > 1]


def _name(half_life: float | None) -> str:
    return "strict" if half_life is None else f"{half_life:g}"


def run(spec: str, setting: str, commit: str = "unknown") -> dict[str, Any]:
    """One run: ``setting`` is ``kube-default`` or a half-life name (``_name``)."""
    from stowage.config import StowageSettings
    from stowage.policy.dispatch import PASS_DELAY_S
    from stowage.sim import metrics
    from stowage.sim.engine import SimConfig, simulate
    from stowage.sim.traces import resolve_workload

    workload = resolve_workload(spec, nodes=None, node_shape=None, seed=0)
    base = StowageSettings()
    packing = base.packing
    if setting == "strict":
        packing = dataclasses.replace(packing, queue_usage_half_life_s=0.0, queue_usage_tolerance=0.0)
    elif setting != "kube-default":
        packing = dataclasses.replace(packing, queue_usage_half_life_s=float(setting))
    preset = "kube-default" if setting == "kube-default" else "stowage"
    started = time.perf_counter()
    result = simulate(workload, preset, config=SimConfig(settings=dataclasses.replace(base, packing=packing),
                                                         pass_delay_s=PASS_DELAY_S), seed=0)
    series = result.series
    yardstick = metrics.fairness_over_time(series["t"], series["shares"], series["backlogged"],
                                           np.array([q.weight for q in workload.queues]), YARDSTICK_S,
                                           base.packing.queue_share_floor)
    return {"workload": spec, "setting": setting, "commit": commit, "wall_s": time.perf_counter() - started,
            "summary": result.summary, "yardstick": yardstick}


def table(rows: dict[tuple[str, str], dict[str, Any]], specs: Sequence[str]) -> str:
    done = [w for w in specs if all((w, s) in rows for s in ("kube-default", *map(_name, HALF_LIVES)))]
    lines = [f"{len(done)} workloads with several queues: {', '.join(done)}", "",
             f"| half-life | mean JCT ÷ kube (median) | embedded | makespan ÷ kube (worst) | usage deviation "
             f"at {YARDSTICK_S:g} s (median / worst) | samples > 15 % off (median) | below ½ fair share, longest (s) |",
             "|---|---|---|---|---|---|---|"]
    for setting in map(_name, HALF_LIVES):
        s = {w: rows[(w, setting)]["summary"] for w in done}
        k = {w: rows[(w, "kube-default")]["summary"] for w in done}
        jct = np.array([s[w]["jct_mean_s"] / k[w]["jct_mean_s"] for w in done])
        span = np.array([s[w]["makespan_s"] / k[w]["makespan_s"] for w in done])
        over = [rows[(w, setting)]["yardstick"] for w in done]
        dev = np.array([o["usage_deviation_max"] for o in over])
        frac = np.array([o["over_tolerance_fraction"] for o in over if o["usage_samples"]])
        floor = max(o["below_floor_longest_s"] for o in over)
        emb = s["embedded"]["jct_mean_s"] / k["embedded"]["jct_mean_s"] if "embedded" in s else float("nan")
        off = np.median(frac) if frac.size else 0.0
        lines.append(f"| {setting} | {np.median(jct):.3f} | {emb:.3f} | {span.max():.3f} | "
                     f"{np.median(dev):.0%} / {dev.max():.0%} | {off:.0%} | {floor:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (default 1)")
    parser.add_argument("--out", type=Path, default=Path("makespan-runs/fairness-sweep.jsonl"),
                        help="JSON lines of every run's summary, kept to resume (default: %(default)s)")
    parser.add_argument("--from-runs", action="store_true",
                        help="run nothing: the table of the runs kept in --out (refused if one is missing)")
    parser.add_argument("--write-results", type=Path, metavar="PAGE",
                        help="also write the table into PAGE's fairness-sweep section (scripts/update_results.py)")
    args = parser.parse_args(argv)
    specs = workloads()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[(r["workload"], r["setting"])] = r
    todo = [(w, s) for w in specs for s in ("kube-default", *map(_name, HALF_LIVES)) if (w, s) not in rows]
    if args.from_runs and todo:
        print(f"error: --from-runs: {args.out} lacks {len(todo)} run(s), e.g. {todo[0][0]} {todo[0][1]}; "
              "run without --from-runs to make them", file=sys.stderr)
        return 1
    if todo:
        import update_results  # beside this script, first on sys.path when it runs

        commit = update_results.commit_of()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with args.out.open("a") as sink, ProcessPoolExecutor(max(args.jobs, 1)) as pool:
            for r in pool.map(run, [w for w, _ in todo], [s for _, s in todo], [commit] * len(todo)):
                rows[(r["workload"], r["setting"])] = r
                sink.write(json.dumps(r) + "\n")
                sink.flush()
                print(f"{r['workload']} {r['setting']}: {r['wall_s']:.1f}s "
                      f"({time.perf_counter() - started:.0f}s so far)", file=sys.stderr)
    body = table(rows, specs)
    print(body)
    if args.write_results:
        shown = [r for (w, _), r in rows.items() if w in specs]
        commits = ", ".join(sorted({r.get("commit", "unknown") for r in shown})) or "unknown"
        line = ".venv/bin/python scripts/fairness_sweep.py --jobs 2" + (
            f" --out {args.out}" if args.out != Path("makespan-runs/fairness-sweep.jsonl") else "")
        import update_results  # beside this script, first on sys.path when it runs

        try:
            update_results.write_section(args.write_results, "fairness-sweep", line, body, commits)
        except (update_results.SectionError, OSError) as e:
            print(f"error: {args.write_results}: {e}", file=sys.stderr)
            return 1
        print(f"{args.write_results}: section fairness-sweep rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
