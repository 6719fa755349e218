"""``stowage bench node-monitor``: sample cost, resident memory, reaction time. Targets from the issue:

* one sample of 110 pods (the kubelet's default pod limit) on a kubelet-shaped cgroup tree: ≤ 5 ms;
* resident memory of a running ``stowage node-monitor`` process: ≤ 60 MB;
* from the first over-threshold sample to the eviction request: ≤ sustained_count × interval + 1 s,
  measured with the real loop, pod watcher and HTTP client against the kmock emulator.

kmock (a test dependency) is imported only for the last two.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.synthetic import SyntheticNode

__all__ = ["bench_node_monitor", "build_tree", "measure_reaction", "measure_rss", "measure_sample"]

_WAIT_S = 60.0  # how long setup steps may take on a loaded machine before the benchmark gives up

TARGET_SAMPLE_MS = 5.0
TARGET_RSS_MB = 60.0
_QOS_CYCLE = (QoS.BURSTABLE, QoS.BURSTABLE, QoS.BESTEFFORT, QoS.GUARANTEED)


def build_tree(
    workdir: Path, pods: int, version: int = 2, driver: Driver = Driver.SYSTEMD
) -> tuple[SyntheticNode, list[str]]:
    """A synthetic node with ``pods`` pods of mixed QoS classes and non-zero counters."""
    tree = SyntheticNode(workdir / "cgroup", version, driver, workdir / "proc")
    uids = []
    for i in range(pods):
        uid = str(uuid.UUID(int=i + 1))
        tree.add_pod(uid, _QOS_CYCLE[i % len(_QOS_CYCLE)], cpu_usec=1_000_000 * i, memory_current=(64 + i) << 20,
                     inactive_file=8 << 20, rbytes=i << 20, wbytes=i << 19)
        uids.append(uid)
    return tree, uids


def measure_sample(pods: int = 110, repeat: int = 300, version: int = 2,
                   driver: Driver = Driver.SYSTEMD) -> dict[str, Any]:
    """Time ``Sampler.sample()`` and ``summarise()`` on a generated tree (ms, median and p95)."""
    from stowage.node_monitor.sampling import Sampler
    from stowage.node_monitor.summary import summarise

    with tempfile.TemporaryDirectory() as tmp:
        tree, _ = build_tree(Path(tmp), pods, version, driver)
        sampler = Sampler(tree.root, tree.proc_root)
        prev = sampler.sample()
        assert len(prev.pods) == pods, f"expected {pods} pods in the generated tree, found {len(prev.pods)}"
        sample_ms, cpu_ms, summarise_ms = [], [], []
        for _ in range(repeat):
            c0 = time.thread_time()
            t0 = time.perf_counter()
            cur = sampler.sample()
            t1 = time.perf_counter()
            c1 = time.thread_time()
            summarise(prev, cur)
            t2 = time.perf_counter()
            sample_ms.append((t1 - t0) * 1e3)
            cpu_ms.append((c1 - c0) * 1e3)
            summarise_ms.append((t2 - t1) * 1e3)
            prev = cur
    return {
        "pods": pods,
        "layout": f"v{version}-{driver}",
        "sample_ms_median": statistics.median(sample_ms),
        "sample_ms_p95": _p95(sample_ms),
        "sample_ms_min": min(sample_ms),
        # CPU time excludes waiting for a core: the cost itself, even on a machine shared with other work.
        "sample_cpu_ms_median": statistics.median(cpu_ms),
        "summarise_ms_median": statistics.median(summarise_ms),
    }


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


# --- a kmock emulator on a thread (bench only; tests use tests/support/kube.py) -------------------


@contextlib.contextmanager
def _emulator(evictions: list[float]) -> Iterator[tuple[Any, str, asyncio.AbstractEventLoop]]:
    try:
        import kmock
    except ImportError as exc:  # pragma: no cover - kmock ships with the test extra
        raise click.ClickException("this benchmark needs kmock: pip install 'stowage[test]'") from exc
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def on_eviction(request: Any) -> dict[str, Any]:
        evictions.append(time.monotonic())  # the moment the request reached the "API server"
        return {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}

    async def main() -> None:
        async with kmock.KubernetesEmulator() as emu, kmock.Server(emu) as server:
            for resource in ("v1/pods", "v1/nodes", "v1/events"):
                emu.resources[resource] = {}
            # kmock 0.8 has no Eviction subresource: answer it here and record when it arrived.
            emu["post", re.compile(r"^/api/v1/namespaces/[^/]+/pods/[^/]+/eviction$")] << on_eviction
            holder.update(emu=emu, url=str(server.url).rstrip("/"), stop=asyncio.Event())
            ready.set()
            await holder["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(30):
        raise click.ClickException("kmock emulator did not start")
    try:
        yield holder["emu"], holder["url"], loop
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(10)


def _put(emu: Any, loop: asyncio.AbstractEventLoop, resource: str, obj: dict[str, Any]) -> None:
    async def store() -> None:
        emu.objects[resource, obj["metadata"].get("namespace"), obj["metadata"]["name"]] = obj

    asyncio.run_coroutine_threadsafe(store(), loop).result(10)


def _pod(uid: str, name: str, node: str, opportunistic: bool, started: str) -> dict[str, Any]:
    from stowage.labels import LABEL_CLASS, PodClass

    cls = PodClass.OPPORTUNISTIC if opportunistic else PodClass.REGULAR
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "uid": uid, "labels": {LABEL_CLASS: str(cls)}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running", "startTime": started},
    }


def _kubeconfig(path: Path, url: str) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "bench"}}],
    }))
    return path


def _populate(emu: Any, loop: asyncio.AbstractEventLoop, node: str, uids: list[str], opportunistic: set[str]) -> None:
    _put(emu, loop, "v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": "n-uid"},
                                 "status": {"allocatable": {"cpu": "64", "memory": "64Gi"}}})
    for i, uid in enumerate(uids):
        started = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"  # pod i started i seconds after the first
        _put(emu, loop, "v1/pods", _pod(uid, f"pod-{i}", node, uid in opportunistic, started))


def measure_rss(pods: int = 110, settle_s: float = 5.0) -> dict[str, Any]:
    """Resident memory (VmRSS, VmHWM) of a ``stowage node-monitor`` process watching kmock, after ``settle_s``."""
    with tempfile.TemporaryDirectory() as tmp, _emulator([]) as (emu, url, loop):
        tree, uids = build_tree(Path(tmp), pods)
        _populate(emu, loop, "bench-node", uids, set(uids[::2]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "stowage", "node-monitor", "--node-name", "bench-node",
             "--kubeconfig", str(_kubeconfig(Path(tmp) / "kubeconfig", url)), "--cgroup-root", str(tree.root),
             "--proc-root", str(tree.proc_root), "--address", "127.0.0.1", "--port", "0", "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(settle_s)
            if proc.poll() is not None:
                raise click.ClickException(f"node-monitor exited early with {proc.returncode}")
            status = Path(f"/proc/{proc.pid}/status").read_text()
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def kb(key: str) -> float:
        m = re.search(rf"^{key}:\s+(\d+) kB", status, re.M)
        return float(m.group(1)) / 1024 if m else float("nan")

    return {"pods": pods, "rss_mb": kb("VmRSS"), "peak_rss_mb": kb("VmHWM"), "settle_s": settle_s}


def measure_reaction(interval_s: float = 1.0, sustained_count: int = 3, pods: int = 110,
                     runs: int = 2) -> dict[str, Any]:
    """Seconds from the first over-threshold sample to the eviction request reaching the emulator.

    The real loop (``NodeMonitor.run``), pod watcher (list+watch over HTTP) and evictor run in this
    process; memory of the newest opportunistic pod is raised over ``T_preempt·C`` between two samples.
    """
    from stowage.node_monitor.capacity import node_capacity
    from stowage.node_monitor.eviction import Evictor
    from stowage.node_monitor.kubeapi import KubeClient, load_config
    from stowage.node_monitor.metrics import NodeMetrics
    from stowage.node_monitor.monitor import NodeMonitor, TickReport
    from stowage.node_monitor.pods import PodStore, PodWatcher
    from stowage.node_monitor.sampling import Sampler
    from stowage.node_monitor.summary import RESOURCES

    from stowage.config import ContentionPolicy, ContentionSettings

    mem = RESOURCES.index("memory")
    results = []
    for run in range(runs):
        evictions: list[float] = []
        with tempfile.TemporaryDirectory() as tmp, _emulator(evictions) as (emu, url, loop):
            node = f"bench-node-{run}"
            tree, uids = build_tree(Path(tmp), pods)
            newest = uids[-1]
            _populate(emu, loop, node, uids, {newest})
            client = KubeClient(load_config(_kubeconfig(Path(tmp) / "kubeconfig", url)))
            settings = ContentionSettings(sample_interval_s=interval_s, sustained_count=sustained_count,
                                          policy=ContentionPolicy.NEUTRAL)
            store, stop = PodStore(node), threading.Event()
            monitor = NodeMonitor(node, Sampler(tree.root, tree.proc_root), settings, NodeMetrics(node), store,
                                  Evictor(client, node))
            monitor.set_node_capacity(node_capacity(client.get_node(node)))
            watcher = PodWatcher(client, store, stop)
            watcher.start()
            if not store.synced.wait(_WAIT_S):
                raise click.ClickException(f"the pod watch did not sync within {_WAIT_S:.0f}s")
            first_over: list[float] = []
            ticked = threading.Event()

            def on_tick(
                report: TickReport, first_over: list[float] = first_over, ticked: threading.Event = ticked
            ) -> None:
                ticked.set()
                if not first_over and report.decision.over[mem]:
                    first_over.append(report.usage.at_s)

            loop_thread = threading.Thread(target=monitor.run, args=(stop,), kwargs={"on_tick": on_tick}, daemon=True)
            loop_thread.start()
            if not ticked.wait(_WAIT_S):  # the first sample is the baseline the rates start from
                raise click.ClickException(f"the node monitor did not sample within {_WAIT_S:.0f}s")
            capacity = float(monitor.capacity()[mem])
            total = sum(p.memory_current for _, p in tree.pods.values())
            tree.advance_pod(newest, memory_current=int(capacity - total + 0.05 * capacity))  # now ~105 % of C
            # Generous: a loaded machine only makes the measurement longer, never missing.
            deadline = time.monotonic() + (sustained_count + 3) * interval_s + _WAIT_S
            while not evictions and time.monotonic() < deadline:
                time.sleep(0.01)
            stop.set()
            loop_thread.join(interval_s + 5)
            client.close()  # ends the watch stream
            watcher.join(5)
        if evictions and first_over:
            results.append(evictions[0] - first_over[0])
    target = sustained_count * interval_s + 1.0
    return {
        "interval_s": interval_s, "sustained_count": sustained_count, "runs": runs,
        "reaction_s": results, "reaction_s_max": max(results) if results else float("nan"), "target_s": target,
    }


@click.command("node-monitor")
@click.option("--pods", type=click.IntRange(1, 2000), default=110, show_default=True,
              help="Pods on the generated node (110: the kubelet's default maximum).")
@click.option("--repeat", type=click.IntRange(10, 100000), default=300, show_default=True,
              help="Samples timed for the sample-cost measurement.")
@click.option("--interval", type=click.FloatRange(0.05, 10), default=1.0, show_default=True,
              help="Sampling interval (s) for the reaction-time measurement.")
@click.option("--runs", type=click.IntRange(1, 20), default=2, show_default=True, help="Reaction-time repetitions.")
@click.option("--skip", type=click.Choice(["rss", "reaction"]), multiple=True, help="Leave a measurement out.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the results as JSON here.")
def bench_node_monitor(pods: int, repeat: int, interval: float, runs: int, skip: tuple[str, ...],
                       json_path: Path | None) -> None:
    """Cost of one sample, resident memory of a running monitor, and reaction time to contention."""
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    rows: list[tuple[str, str, str, bool]] = []
    for version, driver in ((2, Driver.SYSTEMD), (2, Driver.CGROUPFS), (1, Driver.CGROUPFS)):
        r = measure_sample(pods, repeat, version, driver)
        results[f"sample_{r['layout']}"] = r
        rows.append((f"one sample, {pods} pods, {r['layout']}: CPU median (wall median / p95)",
                     f"{r['sample_cpu_ms_median']:.2f} ({r['sample_ms_median']:.2f} / {r['sample_ms_p95']:.2f}) ms",
                     f"≤ {TARGET_SAMPLE_MS:g} ms", r["sample_cpu_ms_median"] <= TARGET_SAMPLE_MS))
    rows.append(("summarise (pure), median", f"{results['sample_v2-systemd']['summarise_ms_median']:.3f} ms", "", True))
    if "rss" not in skip:
        r = measure_rss(pods)
        results["rss"] = r
        rows.append((f"resident memory, running monitor, {pods} pods (peak)",
                     f"{r['rss_mb']:.1f} MB ({r['peak_rss_mb']:.1f})", f"≤ {TARGET_RSS_MB:g} MB",
                     r["rss_mb"] <= TARGET_RSS_MB))
    if "reaction" not in skip:
        r = measure_reaction(interval, 3, pods, runs)
        results["reaction"] = r
        shown = ", ".join(f"{x:.2f}" for x in r["reaction_s"]) or "no eviction seen"
        ok = bool(r["reaction_s"]) and r["reaction_s_max"] <= r["target_s"]
        rows.append((f"first over-threshold sample → eviction request (interval {interval:g}s, count 3)",
                     f"{shown} s", f"≤ {r['target_s']:g} s", ok))
    width = max(len(r[0]) for r in rows)
    for name, value, target, ok in rows:
        mark = "" if not target else ("  ok" if ok else "  OVER TARGET")
        click.echo(f"{name:<{width}}  {value:>26}  {target:<10}{mark}")
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2))
