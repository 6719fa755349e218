"""Random workloads benchmark (issue #21 §3): how ``stowage`` does on shapes nobody tuned it for.

Runs ``kube-default`` and ``stowage`` (``--policy`` adds e.g. ``tetris``) on each random workload of
:data:`SEEDS` (:mod:`stowage.sim.traces.random_mix`, the same as ``stowage simulate --workload
random:SEED``), with the simulator's defaults (usage model, the operator's pass delay, estimated
durations), and prints, in Markdown, the distribution over the workloads of:

- makespan ÷ kube-default's, mean JCT ÷ kube-default's, mean JCT ÷ its lower bound (mean critical
  path), and the fraction of jobs slowed > 10 % against fluid weighted fair sharing
  (``slowed_vs_fluid_fraction``): min, median, p90, max and the seed of the max.

Each workload's summaries go to ``--out`` (JSON lines, one per seed and preset; default
``makespan-runs/random-workloads.jsonl``) as they finish; a seed already there is not run again,
so an interrupted benchmark resumes. One workload's run again, as the script ran it:
``stowage simulate --workload random:SEED --seed SEED --policy kube-default --policy stowage``.

    .venv/bin/python scripts/random_workloads.py --jobs 1            # all 50 seeds
    .venv/bin/python scripts/random_workloads.py --seeds 5 --jobs 1  # the first 5
    .venv/bin/python scripts/random_workloads.py --without-bandwidth  # declared disk/network dropped
    .venv/bin/python scripts/random_workloads.py --overcommit-loss 0.5  # over-subscribed disks/links lose throughput
    .venv/bin/python scripts/random_workloads.py --bandwidth-fill 1.1 --out makespan-runs/fill-1.1.jsonl  # a sweep
    .venv/bin/python scripts/random_workloads.py --policy stowage-regular --jobs 2  # + what harvesting adds
    .venv/bin/python scripts/random_workloads.py --start 50 --seeds 20 --out makespan-runs/held-out.jsonl  # held out
    .venv/bin/python scripts/random_workloads.py --policy stowage-regular --from-runs --write-results docs/results.md

``--from-runs`` runs nothing: it prints the tables of the runs kept in ``--out`` (every seed asked for must be
there). ``--write-results PAGE`` also writes them into the page's section (``--section``, default
``random-workloads``; ``scripts/update_results.py``), under the command that makes them and the commit the runs
were made at (each kept run records it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

#: The benchmark's workloads, by seed: fixed so that tables stay comparable across commits.
SEEDS = tuple(range(50))
BASE = "kube-default"
BANDWIDTH = ("disk", "network")  # declared, not Kubernetes resources: --without-bandwidth drops them
PRESETS = (BASE, "stowage")


def without_bandwidth(workload: Any) -> Any:
    """``workload`` with every group's declared disk and network demand dropped: what honouring those declarations
    costs (kube-default never reads them; the packing presets fit them as capacity)."""
    import dataclasses

    from stowage.resources import ResourceVector

    def group(g: Any) -> Any:
        kept = {k: (0.0 if k in BANDWIDTH else v) for k, v in g.demand.items()}
        return dataclasses.replace(g, demand=ResourceVector(kept))

    jobs = [dataclasses.replace(j, groups=[group(g) for g in j.groups]) for j in workload.jobs]
    return dataclasses.replace(workload, jobs=jobs)


def run_seed(seed: int, presets: Sequence[str], drop_bandwidth: bool = False,
             commit: str = "unknown", overcommit_loss: float = 0.0,
             bandwidth_fill: float | None = None) -> list[dict[str, Any]]:
    """Each preset's summary on ``random:seed``, with the workload's drawn parameters, wall time and ``commit``;
    ``overcommit_loss``: the usage model's (``stowage.sim.usage.UsageModel``), 0 its default; ``bandwidth_fill``:
    ``estimates.bandwidth_fill`` (None: its default)."""
    import dataclasses

    from stowage.config import StowageSettings
    from stowage.policy.dispatch import PASS_DELAY_S
    from stowage.sim.engine import SimConfig, simulate
    from stowage.sim.traces.random_mix import random_mix
    from stowage.sim.usage import UsageModel

    workload = random_mix(seed)
    if drop_bandwidth:
        workload = without_bandwidth(workload)
    out = []
    for preset in presets:
        started = time.perf_counter()
        settings = StowageSettings()
        if bandwidth_fill is not None:
            settings = dataclasses.replace(settings, estimates=dataclasses.replace(settings.estimates,
                                                                                   bandwidth_fill=bandwidth_fill))
        config = SimConfig(pass_delay_s=PASS_DELAY_S, usage=UsageModel(overcommit_loss=overcommit_loss),
                           settings=settings)
        result = simulate(workload, preset, config=config, seed=seed)
        out.append({"seed": seed, "preset": preset, "commit": commit, "wall_s": time.perf_counter() - started,
                    "workload": {k: workload.model[k] for k in ("n_nodes", "load", "usage_mean", "queues",
                                                                 "jobs", "tasks")},
                    "summary": result.summary})
    return out


def _load(path: Path) -> dict[tuple[int, str], dict[str, Any]]:
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["seed"], r["preset"]): r for r in rows}


def _stats(values: dict[int, float]) -> str:
    seeds = list(values)
    v = np.array([values[s] for s in seeds])
    worst = seeds[int(np.argmax(v))]
    return (f"{v.min():.3f} | {np.median(v):.3f} | {np.percentile(v, 90):.3f} | {v.max():.3f} | {worst}")


def table(rows: dict[tuple[int, str], dict[str, Any]], seeds: Sequence[int], presets: Sequence[str]) -> str:
    """The Markdown distribution table over ``seeds`` (those with every preset's run)."""
    done = [s for s in seeds if all((s, p) in rows for p in presets)]
    lines = [f"{len(done)} random workloads (seeds {done[0]}–{done[-1]})" if done else "no workloads",
             "", "| figure | preset | min | median | p90 | max | worst seed |", "|---|---|---|---|---|---|---|"]
    for preset in presets:
        s = {seed: rows[(seed, preset)]["summary"] for seed in done}
        b = {seed: rows[(seed, BASE)]["summary"] for seed in done}
        figures = {
            "makespan ÷ kube-default": {k: s[k]["makespan_s"] / b[k]["makespan_s"] for k in done},
            "makespan ÷ its lower bound": {k: s[k]["makespan_s"] / s[k]["makespan_lower_bound_s"] for k in done},
            "mean JCT ÷ kube-default": {k: s[k]["jct_mean_s"] / b[k]["jct_mean_s"] for k in done},
            "mean JCT ÷ its lower bound": {k: s[k]["jct_mean_s"] / s[k]["jct_mean_lower_bound_s"] for k in done},
            "jobs slowed > 10 % vs fluid": {k: s[k]["slowed_vs_fluid_fraction"] for k in done},
        }
        for name, values in figures.items():
            if preset == BASE and "kube-default" in name.split("÷")[-1]:
                continue
            lines.append(f"| {name} | {preset} | {_stats(values)} |")
    if done:
        lines.append("")
        for preset in presets:
            if preset == BASE:
                continue
            wins = sum(rows[(k, preset)]["summary"]["makespan_s"] <= rows[(k, BASE)]["summary"]["makespan_s"]
                       for k in done)
            lost = sum(rows[(k, preset)]["summary"]["lost_tasks"] for k in done)
            # the bar where kube-default is already at the fluid bound: at the bound or ahead of kube-default
            bar = [k for k in done if rows[(k, preset)]["summary"]["makespan_s"] <= max(
                rows[(k, BASE)]["summary"]["makespan_s"], 1.02 * rows[(k, BASE)]["summary"]["makespan_lower_bound_s"])]
            misses = sorted(set(done) - set(bar))
            lines.append(f"- {preset}: makespan ≤ kube-default's in {wins} of {len(done)}; ≤ max(kube-default's, "
                         f"1.02 × the lower bound) in {len(bar)} of {len(done)} (misses: {misses or 'none'}); "
                         f"lost tasks {lost}.")
        walls = [r["wall_s"] for (k, _), r in rows.items() if k in done]
        lines.append(f"- wall time per run: median {np.median(walls):.1f} s, max {max(walls):.1f} s.")
    return "\n".join(lines)


HARVEST_OFF = "stowage-regular"
USAGE_SPLIT = 0.7  # issue #32's targets hold where the workload's mean usage is at most this


def harvest_table(rows: dict[tuple[int, str], dict[str, Any]], seeds: Sequence[int], presets: Sequence[str]) -> str:
    """What harvesting adds and costs (issue #32), for each harvesting preset against ``stowage-regular`` (the same
    decision with harvesting off), split by the workload's mean usage: makespan and mean JCT ÷ the off run, the
    share of task-seconds run on harvested capacity, the opportunistic work evictions lost (÷ those task-seconds),
    the regular tasks' slowdown against running alone (mean, p95)."""
    done = [s for s in seeds if all((s, p) in rows for p in presets)]
    harvesting = [p for p in presets if p.startswith("stowage") and p != HARVEST_OFF]
    if not done or HARVEST_OFF not in presets or not harvesting:
        return ""
    lines = ["", f"Harvesting against `{HARVEST_OFF}` (the same decision, harvesting off):", "",
             "| figure | preset | usage | workloads | min | median | p90 | max | worst seed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for preset in harvesting:
        for label, keep in ((f"≤ {USAGE_SPLIT}", lambda u: u <= USAGE_SPLIT), (f"> {USAGE_SPLIT}",
                                                                                 lambda u: u > USAGE_SPLIT)):
            part = [k for k in done if keep(rows[(k, preset)]["workload"]["usage_mean"])]
            if not part:
                continue
            s = {k: rows[(k, preset)]["summary"] for k in part}
            off = {k: rows[(k, HARVEST_OFF)]["summary"] for k in part}
            figures = {
                "makespan ÷ off": {k: s[k]["makespan_s"] / off[k]["makespan_s"] for k in part},
                "mean JCT ÷ off": {k: s[k]["jct_mean_s"] / off[k]["jct_mean_s"] for k in part},
                "task-seconds harvested": {k: s[k]["harvested_fraction"] for k in part},
                "opportunistic work lost": {k: s[k]["lost_fraction"] for k in part},
                "regular slowdown, mean": {k: s[k]["regular_slowdown_mean"] for k in part},
                "regular slowdown, p95": {k: s[k]["regular_slowdown_p95"] for k in part},
            }
            for name, values in figures.items():
                lines.append(f"| {name} | {preset} | {label} | {len(part)} | {_stats(values)} |")
        over = [k for k in done if rows[(k, preset)]["summary"]["makespan_s"]
                > 1.01 * rows[(k, HARVEST_OFF)]["summary"]["makespan_s"]]
        lines.append(f"| makespan > 1.01 × off | {preset} | all | {len(done)} | seeds: {over or 'none'} |||||")
    return "\n".join(lines)


def commits_of(rows: dict[tuple[int, str], dict[str, Any]], seeds: Sequence[int], presets: Sequence[str]) -> str:
    """The commit(s) the shown runs were made at, as the results page names them."""
    found = sorted({rows[(s, p)].get("commit", "unknown") for s in seeds for p in presets if (s, p) in rows})
    return ", ".join(found) if found else "unknown"


#: Options that choose where the tables go, not what they measure: left out of the command the page shows.
_OUTPUT_FLAGS = {"--from-runs": 0, "--write-results": 1, "--section": 1}


def measuring_command(argv: Sequence[str]) -> str:
    """The command line that makes the tables (``argv`` without the output options), as the page prints it."""
    import shlex

    kept: list[str] = []
    skip = 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        flag = arg.split("=", 1)[0]
        if flag in _OUTPUT_FLAGS:
            skip = _OUTPUT_FLAGS[flag] if "=" not in arg else 0
            continue
        kept.append(arg)
    return shlex.join([".venv/bin/python", "scripts/random_workloads.py", *kept])


def variant(drop_bandwidth: bool, overcommit_loss: float) -> str:
    """The suffix of a variant's kept runs and results section ("" for the defaults; the section's command says β)."""
    return (("-without-bandwidth" if drop_bandwidth else "")
            + ("-overcommit-loss" if overcommit_loss else ""))


def default_section(start: int, drop_bandwidth: bool, overcommit_loss: float = 0.0) -> str:
    return ("random-workloads" + ("-held-out" if start >= len(SEEDS) else "")
            + variant(drop_bandwidth, overcommit_loss))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="run the first N of SEEDS (default: all)")
    parser.add_argument("--start", type=int, default=0,
                        help="first seed (default 0: SEEDS); e.g. --start 50 --seeds 20 runs the held-out seeds 50–69")
    parser.add_argument("--policy", action="append", default=[], help="another preset to run (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="workloads run in parallel (default 1)")
    # Beside makespan_table.py's kept runs: a folder git already ignores.
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON lines of every run's summary, kept to resume (default: "
                             "makespan-runs/random-workloads.jsonl, or random-workloads-without-bandwidth.jsonl)")
    parser.add_argument("--without-bandwidth", action="store_true",
                        help="diagnostic: drop every group's declared disk and network demand (see without_bandwidth)")
    parser.add_argument("--overcommit-loss", type=float, default=0.0, metavar="BETA",
                        help="the usage model's overcommit_loss: an over-subscribed disk or link delivers "
                             "C/(1+BETA(rho-1)) (default 0: fluid sharing)")
    parser.add_argument("--bandwidth-fill", type=float, default=None, metavar="F",
                        help="estimates.bandwidth_fill: the fraction of a node's disk and network estimated use may "
                             "fill (default: the setting's default); give each value its own --out")
    parser.add_argument("--from-runs", action="store_true",
                        help="run nothing: the tables of the runs kept in --out (refused if a seed's run is missing)")
    parser.add_argument("--write-results", type=Path, metavar="PAGE",
                        help="also write the tables into PAGE's section (scripts/update_results.py)")
    parser.add_argument("--section", help="the section of --write-results (default: random-workloads, "
                                          "random-workloads-held-out from --start 50, -without-bandwidth)")
    args = parser.parse_args(argv)
    if args.out is None:
        name = "random-workloads" + variant(args.without_bandwidth, args.overcommit_loss)
        args.out = Path("makespan-runs") / f"{name}.jsonl"
    count = max(args.seeds, 0)
    seeds = SEEDS[:count] if args.start == 0 else tuple(range(args.start, args.start + count))
    presets = tuple(dict.fromkeys((*PRESETS, *args.policy)))
    rows = _load(args.out)
    todo = [s for s in seeds if not all((s, p) in rows for p in presets)]
    missing = {s: [p for p in presets if (s, p) not in rows] for s in todo}
    if args.from_runs and todo:
        shown = ", ".join(f"{s} ({', '.join(missing[s])})" for s in todo[:5]) + (" …" if len(todo) > 5 else "")
        print(f"error: --from-runs: {args.out} lacks {len(todo)} seed(s) of those asked: {shown}; "
              "run without --from-runs to make them", file=sys.stderr)
        return 1
    if todo:
        import update_results  # beside this script, first on sys.path when it runs

        commit = update_results.commit_of()
        started = time.perf_counter()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as sink, ProcessPoolExecutor(max(args.jobs, 1)) as pool:
            for done in pool.map(run_seed, todo, [missing[s] for s in todo], [args.without_bandwidth] * len(todo),
                                 [commit] * len(todo), [args.overcommit_loss] * len(todo),
                                 [args.bandwidth_fill] * len(todo)):
                for r in done:
                    rows[(r["seed"], r["preset"])] = r
                    sink.write(json.dumps(r) + "\n")
                sink.flush()
                s = done[0]["seed"]
                print(f"seed {s}: " + ", ".join(f"{r['preset']} {r['wall_s']:.1f}s" for r in done)
                      + f" ({time.perf_counter() - started:.0f}s so far)", file=sys.stderr)
    body = table(rows, seeds, presets) + "\n" + harvest_table(rows, seeds, presets)
    print(body)
    if args.write_results:
        section = args.section or default_section(args.start, args.without_bandwidth, args.overcommit_loss)
        commits = commits_of(rows, seeds, presets)
        import update_results  # beside this script, first on sys.path when it runs

        try:
            update_results.write_section(args.write_results, section, measuring_command(argv), body, commits)
        except (update_results.SectionError, OSError) as e:
            print(f"error: {args.write_results}: {e}", file=sys.stderr)
            return 1
        print(f"{args.write_results}: section {section} rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
