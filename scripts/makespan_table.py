"""Makespan, mean JCT and wasted work of every preset, per bundled workload and usage fraction.

Runs ``stowage simulate`` once per (workload, usage fraction) with ``--jobs`` for parallel presets,
keeps each ``report.json`` under ``--out`` (default ``makespan-runs/``, with the commit it was made at), and
writes the tables, in Markdown, into the sections of the results page ``--doc`` (default ``docs/results.md``;
``makespan-targets`` and ``makespan-<workload>``, through ``scripts/update_results.py``) or to stdout
(``--doc -``). Runs whose JSON is already there are not repeated (``--rerun`` repeats them), so
the tables can be rebuilt from kept reports, one workload at a time (``--only NAME``).

``tetris`` and ``stowage`` estimate task durations as a cluster would; each cell also gets a run of
the two with ``--oracle-durations`` (the true durations, an upper bound), kept in
``<case>-<usage>-oracle/`` and shown beside the estimated rows (``--no-oracle`` skips it). A kept
report counts only if its ``engine.oracle_durations`` says which it is: one made before the simulator
recorded it (or the other kind) is run again.

    .venv/bin/python scripts/makespan_table.py --jobs 2            # every workload, 0.5/0.7/0.9
    .venv/bin/python scripts/makespan_table.py --only embedded --doc -
    .venv/bin/python scripts/makespan_table.py --rerun --policy tetris --policy stowage   # after a change to them
    .venv/bin/python scripts/makespan_table.py --no-oracle --only synthetic      # estimated durations only

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


ORACLE_PRESETS = ("tetris", "stowage")  # the presets that read durations; the others ignore --oracle-durations


def command(case: Case, usage: float, out: Path, jobs: int, policies: Sequence[str] = (),
            oracle: bool = False) -> list[str]:
    """The ``stowage simulate`` command line of one table block (printed in the doc as run)."""
    return ["stowage", "simulate", *case.args, "--usage", f"mean_fraction={usage}", "--no-plots",
            "--jobs", str(jobs), "--progress-every", "0", "--force", "--report", str(out),
            *(["--oracle-durations"] if oracle else []),
            *(arg for name in policies for arg in ("--policy", name))]


def folder_of(case: Case, usage: float, out: Path, oracle: bool) -> Path:
    return out / (f"{case.name}-{usage}" + ("-oracle" if oracle else ""))


def kept(case: Case, usage: float, out: Path, oracle: bool) -> dict | None:
    """The kept report of one cell if it is there and of the kind asked (estimated or oracle durations)."""
    report = folder_of(case, usage, out, oracle) / "report.json"
    if not report.exists():
        return None
    doc = json.loads(report.read_text())
    # Reports from before the estimates have no engine.oracle_durations: their tetris and stowage
    # read true durations, so they are neither kind.
    if (doc.get("engine") or {}).get("oracle_durations") is not oracle:
        return None
    return doc


def run(case: Case, usage: float, out: Path, jobs: int, rerun: bool, policies: Sequence[str] = (),
        oracle: bool = False) -> dict:
    """The kept report of one cell; run first when missing, stale or ``rerun`` (only ``policies``, merged, if given).

    ``oracle``: the cell's ``--oracle-durations`` run of ``tetris`` and ``stowage`` (plus the references
    ``stowage simulate`` adds), in its own folder.
    """
    folder = folder_of(case, usage, out, oracle)
    report = folder / "report.json"
    doc = kept(case, usage, out, oracle)
    if report.exists() and doc is None:
        print(f"{report}: not a report of {'oracle' if oracle else 'estimated'} durations "
              "(engine.oracle_durations); running it again", file=sys.stderr, flush=True)
    if oracle:
        policies = [p for p in policies if p in ORACLE_PRESETS] if policies else list(ORACLE_PRESETS)
        if not policies:
            return doc if doc is not None else run(case, usage, out, jobs, False, (), oracle)
    if rerun or doc is None:
        partial = doc is not None and bool(policies) and set(policies) != set(doc["policies"])
        target = folder / "partial" if partial else folder
        cmd = command(case, usage, target, jobs, policies if partial or oracle else (), oracle)
        started = time.monotonic()
        print(f"running: {' '.join(cmd)}", file=sys.stderr, flush=True)
        done = subprocess.run([str(ROOT / ".venv/bin/stowage"), *cmd[1:]], cwd=ROOT, check=False,
                              stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            raise SystemExit(f"{case.name} at usage {usage}: stowage simulate exited {done.returncode}")
        print(f"  {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        if partial:
            assert doc is not None
            new = json.loads((target / "report.json").read_text())
            for name in policies:
                doc["policies"][name] = new["policies"][name]
            doc["engine"] = new.get("engine")
            doc.setdefault("provenance", []).append(f"{', '.join(policies)}: {' '.join(cmd)}")
            report.write_text(json.dumps(doc, indent=2))
        doc = kept(case, usage, out, oracle)
        if doc is None:
            raise SystemExit(f"{report}: engine.oracle_durations is not {oracle} after the run")
        import update_results  # beside this script, first on sys.path when it runs

        doc["commit"] = update_results.commit_of(ROOT)
        report.write_text(json.dumps(doc, indent=2))
    return doc


def commits(docs: Sequence[dict | None]) -> str:
    """The commit(s) the kept reports were made at (``unknown`` for reports kept before they recorded it)."""
    return ", ".join(sorted({d.get("commit", "unknown") for d in docs if d})) or "unknown"


def runs_of(doc: dict) -> dict[str, dict]:
    return {**doc["policies"], **doc.get("reference_runs", {})}


def block(case: Case, reports: dict[float, dict], oracles: dict[float, dict | None], jobs: int) -> list[str]:
    """One workload's table: a row per usage fraction and preset, tetris and stowage also with the oracle."""
    def generic(line: list[str]) -> str:
        return "`" + " ".join(line).replace(f"mean_fraction={USAGES[0]}", "mean_fraction=U") + "`"

    oracle_line = generic(command(case, USAGES[0], Path("DIR"), jobs, ORACLE_PRESETS, True))
    header = "| usage | preset | makespan | ×kube | ÷LB | mean JCT | ×kube | wasted task-s | evictions + OOM | slowed |"
    lines = [generic(command(case, USAGES[0], Path("DIR"), jobs)) + "; the "
             f"\"(oracle)\" rows: {oracle_line}", "", header, "|---|---|---|---|---|---|---|---|---|---|"]
    for usage, doc in reports.items():
        runs = runs_of(doc)
        oracle = runs_of(oracles[usage]) if oracles.get(usage) else {}
        kube = runs["kube-default"]
        rows = [(name, runs.get(name), kube) for name in PRESETS]
        for name in ORACLE_PRESETS:
            # The oracle run's own kube-default (the same numbers: it reads no durations) is its reference.
            at = next(i for i, (n, _, _) in enumerate(rows) if n == name) + 1
            rows.insert(at, (f"{name} (oracle)", oracle.get(name), oracle.get("kube-default", kube)))
        for name, p, ref in rows:
            if p is None:
                continue
            mk = p["makespan_s"] / ref["makespan_s"] if ref["makespan_s"] else float("nan")
            jct = p["jct_mean_s"] / ref["jct_mean_s"] if ref["jct_mean_s"] else float("nan")
            bold = "**" if name == "stowage" else ""
            lines.append(
                f"| {usage} | {bold}{name}{bold} | {format_duration(p['makespan_s'])} | {bold}{mk:.3f}{bold} | "
                f"{p['makespan_to_lower_bound']:.2f} | {format_duration(p['jct_mean_s'])} | {jct:.2f} | "
                f"{p['wasted_work_s']:,.0f} | {p['evictions'] + p['oom_kills']:,} | "
                f"{100 * p['slowed_jobs_fraction']:.0f} % |")
    return [*lines, ""]


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def kept_gain(estimated: float, oracle: float) -> str:
    """How much of the oracle's gain over kube-default (1 − ratio) the estimated run keeps (over 100 %: more)."""
    if 1 - oracle < 0.005:  # no gain to keep (or a loss): a share of it means nothing
        return "—"
    if estimated > 1:
        return "none (a loss)"
    return f"{100 * (1 - estimated) / (1 - oracle):.0f} %"


def waste_ok(p: dict, ubis: dict) -> str:
    """``p``'s wasted task-seconds below ``ubis``'s (or both none)."""
    w, wu = p["wasted_work_s"], ubis["wasted_work_s"]
    return mark(w < wu or w == wu == 0)


def targets(reports: dict[str, dict[float, dict]], oracles: dict[str, dict[float, dict | None]]) -> list[str]:
    """The issue's targets for ``stowage`` in every cell, measured, estimated durations beside the oracle's."""
    lines = ["| workload | usage | makespan ×kube ≤ 1.00 | (oracle) | gain kept | mean JCT ×kube ≤ 0.50 | (oracle) | "
             "gain kept | best possible mean JCT ×kube | slowed < 5 % | (oracle) | waste < ubis | (oracle) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, by_usage in reports.items():
        for usage, doc in by_usage.items():
            runs = runs_of(doc)
            s, k, u = runs["stowage"], runs["kube-default"], runs["ubis"]
            mk, jct = s["makespan_s"] / k["makespan_s"], s["jct_mean_s"] / k["jct_mean_s"]
            # The mean-JCT lower bound is the workload's (critical paths); reports older than it lack the key.
            bound = s.get("jct_mean_lower_bound_s")
            best = f"{bound / k['jct_mean_s']:.2f}" if bound is not None and k["jct_mean_s"] else "—"

            cells = [f"{mk:.3f} {mark(mk <= 1.0)}", "—", "—", f"{jct:.2f} {mark(jct <= 0.5)}", "—", "—", best,
                     f"{100 * s['slowed_jobs_fraction']:.1f} % {mark(s['slowed_jobs_fraction'] < 0.05)}", "—",
                     f"{s['wasted_work_s']:,.0f} vs {u['wasted_work_s']:,.0f} {waste_ok(s, u)}", "—"]
            if oracles[name].get(usage):
                o_runs = runs_of(oracles[name][usage])
                o, ok = o_runs["stowage"], o_runs["kube-default"]
                omk, ojct = o["makespan_s"] / ok["makespan_s"], o["jct_mean_s"] / ok["jct_mean_s"]
                cells[1], cells[2] = f"{omk:.3f} {mark(omk <= 1.0)}", kept_gain(mk, omk)
                cells[4], cells[5] = f"{ojct:.2f} {mark(ojct <= 0.5)}", kept_gain(jct, ojct)
                cells[8] = f"{100 * o['slowed_jobs_fraction']:.1f} % {mark(o['slowed_jobs_fraction'] < 0.05)}"
                cells[10] = f"{o['wasted_work_s']:,.0f} {waste_ok(o, u)}"
            lines.append(f"| {name} | {usage} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="presets in parallel per run (stowage simulate --jobs)")
    ap.add_argument("--out", type=Path, default=ROOT / "makespan-runs", help="where the report.json files go")
    ap.add_argument("--doc", default=str(ROOT / "docs/results.md"),
                    help="the results page to update (its makespan-* sections), '-': stdout")
    ap.add_argument("--only", action="append", choices=[c.name for c in CASES], help="run only these workloads")
    ap.add_argument("--rerun", action="store_true", help="run again even where a report.json is kept")
    ap.add_argument("--policy", action="append", choices=PRESETS, default=[],
                    help="with --rerun: run only these presets and replace them in the kept reports")
    ap.add_argument("--no-oracle", action="store_true",
                    help="do not run tetris and stowage with --oracle-durations (the tables show '—' where missing)")
    args = ap.parse_args(argv)
    chosen = [c for c in CASES if not args.only or c.name in args.only]
    for case in chosen:
        for usage in USAGES:
            run(case, usage, args.out, args.jobs, args.rerun, args.policy)
            if not args.no_oracle:
                run(case, usage, args.out, args.jobs, args.rerun, args.policy, oracle=True)
    # The tables cover every workload whose estimated reports are all kept, run now or before; the
    # oracle's columns are filled where its report is kept.
    shown = [c for c in CASES if all(kept(c, u, args.out, False) for u in USAGES)]
    reports = {c.name: {u: kept(c, u, args.out, False) for u in USAGES} for c in shown}
    oracles = {c.name: {u: kept(c, u, args.out, True) for u in USAGES} for c in shown}
    bodies = {"makespan-targets": "\n".join(targets(reports, oracles))}  # type: ignore[arg-type]
    used = {"makespan-targets": [d for c in shown for u in USAGES
                                 for d in (reports[c.name][u], oracles[c.name][u])]}
    for case in shown:
        name = f"makespan-{case.name}"
        bodies[name] = "\n".join(block(case, reports[case.name], oracles[case.name], args.jobs))  # type: ignore
        used[name] = [d for u in USAGES for d in (reports[case.name][u], oracles[case.name][u])]
    if args.doc == "-":
        print("\n\n".join(f"{name}:\n{body}" for name, body in bodies.items()))
        return 0
    import update_results  # beside this script, first on sys.path when it runs

    for name, body in bodies.items():
        only = [case.name for case in shown] if name == "makespan-targets" else [name.removeprefix("makespan-")]
        line = " ".join([".venv/bin/python", "scripts/makespan_table.py", "--jobs", str(args.jobs),
                         *(a for o in only for a in ("--only", o))])
        update_results.write_section(Path(args.doc), name, line, body, commits(used[name]))
    print(f"tables for {', '.join(c.name for c in shown)} written to {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
