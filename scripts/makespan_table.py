"""Makespan, mean JCT and wasted work of every preset, per bundled workload and usage fraction.

Runs ``stowage simulate`` once per (workload, usage fraction) with ``--jobs`` for parallel presets,
keeps each ``report.json`` under ``--out`` (default ``makespan-runs/``), and writes the tables, in
Markdown, between the ``makespan-table`` markers of ``--doc`` (default ``docs/simulator.md``) or to
stdout (``--doc -``). Runs whose JSON is already there are not repeated (``--rerun`` repeats them), so
the tables can be rebuilt from kept reports, one workload at a time (``--only NAME``).

    .venv/bin/python scripts/makespan_table.py --jobs 2            # every workload, 0.5/0.7/0.9
    .venv/bin/python scripts/makespan_table.py --only embedded --doc -
    .venv/bin/python scripts/makespan_table.py --rerun --policy tetris --policy stowage   # after a change to them

``--policy`` runs only the named presets (``stowage simulate`` adds its references) and replaces their
entries in the kept ``report.json``; the other presets' numbers stay as kept, and the report's
``provenance`` list says which entries came from which command.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stowage.sim.report import format_duration

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- makespan-table:start -->", "<!-- makespan-table:end -->"
USAGES = (0.5, 0.7, 0.9)
PRESETS = ("kube-default", "binpack", "drf", "load-aware", "tetris", "ubis", "stowage")


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    args: tuple[str, ...]


CASES = (
    Case("embedded", "Embedded default (FB-2009 first 2 h + Tetris mix, 50 nodes)", ()),
    Case("embedded-batch", "Embedded default, batch arrivals", ("--arrivals", "batch")),
    Case("synthetic", "Synthetic Tetris mix, load 1, 100 nodes", ("--workload", "synthetic", "--nodes", "100")),
    Case("synthetic-batch", "Synthetic Tetris mix, 100 nodes, batch arrivals",
         ("--workload", "synthetic", "--nodes", "100", "--arrivals", "batch")),
    Case("swim", "FB-2009 day (SWIM), 600 nodes", ("--workload", "swim")),
)


def command(case: Case, usage: float, out: Path, jobs: int, policies: Sequence[str] = ()) -> list[str]:
    """The ``stowage simulate`` command line of one table block (printed in the doc as run)."""
    return ["stowage", "simulate", *case.args, "--usage", f"mean_fraction={usage}", "--no-plots",
            "--jobs", str(jobs), "--progress-every", "0", "--force", "--report", str(out),
            *(arg for name in policies for arg in ("--policy", name))]


def run(case: Case, usage: float, out: Path, jobs: int, rerun: bool, policies: Sequence[str] = ()) -> dict:
    """The kept report of one cell; run first when missing or ``rerun`` (only ``policies``, merged, if given)."""
    folder = out / f"{case.name}-{usage}"
    report = folder / "report.json"
    if rerun or not report.exists():
        partial = bool(policies) and report.exists()
        target = folder / "partial" if partial else folder
        cmd = command(case, usage, target, jobs, policies if partial else ())
        started = time.monotonic()
        print(f"running: {' '.join(cmd)}", file=sys.stderr, flush=True)
        done = subprocess.run([str(ROOT / ".venv/bin/stowage"), *cmd[1:]], cwd=ROOT, check=False,
                              stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            raise SystemExit(f"{case.name} at usage {usage}: stowage simulate exited {done.returncode}")
        print(f"  {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        if partial:
            doc, new = json.loads(report.read_text()), json.loads((target / "report.json").read_text())
            for name in policies:
                doc["policies"][name] = new["policies"][name]
            doc["engine"] = new.get("engine")
            doc.setdefault("provenance", []).append(f"{', '.join(policies)}: {' '.join(cmd)}")
            report.write_text(json.dumps(doc, indent=2))
    return json.loads(report.read_text())


def block(case: Case, reports: dict[float, dict], jobs: int) -> list[str]:
    """One workload's table: a row per usage fraction and preset."""
    lines = [f"#### {case.title}", "", "`" + " ".join(command(case, USAGES[0], Path("DIR"), jobs)).replace(
        f"mean_fraction={USAGES[0]}", "mean_fraction=U") + "`", "",
        "| usage | preset | makespan | ×kube | ÷LB | mean JCT | ×kube | wasted task-s | evictions + OOM | slowed |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for usage, doc in reports.items():
        runs = {**doc["policies"], **doc.get("reference_runs", {})}
        kube = runs["kube-default"]
        for name in PRESETS:
            p = runs.get(name)
            if p is None:
                continue
            mk = p["makespan_s"] / kube["makespan_s"] if kube["makespan_s"] else float("nan")
            jct = p["jct_mean_s"] / kube["jct_mean_s"] if kube["jct_mean_s"] else float("nan")
            bold = "**" if name == "stowage" else ""
            lines.append(
                f"| {usage} | {bold}{name}{bold} | {format_duration(p['makespan_s'])} | {bold}{mk:.3f}{bold} | "
                f"{p['makespan_to_lower_bound']:.2f} | {format_duration(p['jct_mean_s'])} | {jct:.2f} | "
                f"{p['wasted_work_s']:,.0f} | {p['evictions'] + p['oom_kills']:,} | "
                f"{100 * p['slowed_jobs_fraction']:.0f} % |")
    return [*lines, ""]


def targets(reports: dict[str, dict[float, dict]]) -> list[str]:
    """The issue's targets for ``stowage`` in every cell, measured."""
    lines = ["| workload | usage | makespan ×kube ≤ 1.00 | mean JCT ×kube ≤ 0.50 | best possible mean JCT ×kube | "
             "slowed < 5 % | waste < ubis |",
             "|---|---|---|---|---|---|---|"]
    for name, by_usage in reports.items():
        for usage, doc in by_usage.items():
            runs = {**doc["policies"], **doc.get("reference_runs", {})}
            s, k, u = runs["stowage"], runs["kube-default"], runs["ubis"]
            mk = s["makespan_s"] / k["makespan_s"]
            jct = s["jct_mean_s"] / k["jct_mean_s"]
            slowed = s["slowed_jobs_fraction"]
            # The mean-JCT lower bound is the workload's (critical paths); reports older than it lack the key.
            bound = s.get("jct_mean_lower_bound_s")
            best = f"{bound / k['jct_mean_s']:.2f}" if bound is not None and k["jct_mean_s"] else "—"

            def mark(ok: bool) -> str:
                return "✓" if ok else "✗"

            lines.append(
                f"| {name} | {usage} | {mk:.3f} {mark(mk <= 1.0)} | {jct:.2f} {mark(jct <= 0.5)} | {best} | "
                f"{100 * slowed:.1f} % {mark(slowed < 0.05)} | {s['wasted_work_s']:,.0f} vs {u['wasted_work_s']:,.0f} "
                f"{mark(s['wasted_work_s'] < u['wasted_work_s'] or s['wasted_work_s'] == u['wasted_work_s'] == 0)} |")
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="presets in parallel per run (stowage simulate --jobs)")
    ap.add_argument("--out", type=Path, default=ROOT / "makespan-runs", help="where the report.json files go")
    ap.add_argument("--doc", default=str(ROOT / "docs/simulator.md"), help="Markdown file to update, '-': stdout")
    ap.add_argument("--only", action="append", choices=[c.name for c in CASES], help="run only these workloads")
    ap.add_argument("--rerun", action="store_true", help="run again even where a report.json is kept")
    ap.add_argument("--policy", action="append", choices=PRESETS, default=[],
                    help="with --rerun: run only these presets and replace them in the kept reports")
    args = ap.parse_args(argv)
    chosen = [c for c in CASES if not args.only or c.name in args.only]
    for case in chosen:
        for usage in USAGES:
            run(case, usage, args.out, args.jobs, args.rerun, args.policy)
    # The tables cover every workload whose reports are all kept, run now or before.
    kept = [c for c in CASES if all((args.out / f"{c.name}-{u}" / "report.json").exists() for u in USAGES)]
    reports = {c.name: {u: run(c, u, args.out, args.jobs, False) for u in USAGES} for c in kept}
    lines = [START, "", *targets(reports)]
    for case in kept:
        lines += block(case, reports[case.name], args.jobs)
    lines.append(END)
    text = "\n".join(lines)
    if args.doc == "-":
        print(text)
        return 0
    doc = Path(args.doc)
    body = doc.read_text() if doc.exists() else ""
    if START in body and END in body:
        body = body[: body.index(START)] + text + body[body.index(END) + len(END):]
    else:
        body = body.rstrip("\n") + "\n\n" + text + "\n"
    doc.write_text(body)
    print(f"tables for {', '.join(c.name for c in kept)} written to {doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
