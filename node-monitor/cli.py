"""``stowage node-monitor``: the DaemonSet's entry point (flags → settings → threads → loop)."""

from __future__ import annotations

import json
import logging
import math
import re
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import click

from stowage.errors import ConfigError, InvalidInput

__all__ = ["node_monitor", "parse_interval"]

log = logging.getLogger("stowage.node_monitor")

_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*$")


def parse_interval(text: str, field: str = "--interval") -> float:
    """``1s``, ``500ms``, ``2`` (seconds), ``0.5s``, ``1m`` → seconds (> 0)."""
    m = _INTERVAL.match(str(text))
    if m is None:
        raise InvalidInput(field, text, "a duration such as 1s, 500ms, 2 or 0.5s")
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if not value > 0 or not math.isfinite(value):
        raise InvalidInput(field, text, "a positive duration")
    return value


class _Interval(click.ParamType):
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_interval(value)
        except InvalidInput as exc:
            self.fail(f"{exc.allowed}, got {value!r}", param, ctx)


class _Regex(click.ParamType):
    name = "REGEX"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            self.fail(f"not a valid regular expression ({exc}): {value!r}", param, ctx)
        return str(value)


@click.command("node-monitor", context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--node-name", envvar="NODE_NAME", show_envvar=True,
              help="This node's name (the DaemonSet sets NODE_NAME from spec.nodeName). Required with Kubernetes; "
                   "without, defaults to the hostname.")
@click.option("--cgroup-root", type=click.Path(path_type=Path, file_okay=False), default=Path("/sys/fs/cgroup"),
              help="Where the cgroup filesystem is mounted (hostPath, read-only). v1 and v2, systemd and cgroupfs "
                   "driver layouts are detected.")
@click.option("--proc-root", type=click.Path(path_type=Path, file_okay=False), default=Path("/proc"),
              help="Where /proc is mounted; <proc-root>/net/dev gives node network bytes (needs hostNetwork), "
                   "<proc-root>/<pid>/net/dev each pod's (needs hostPID).")
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Kubeconfig file (token, client certificate or exec plugin). Default: the in-cluster service "
                   "account, then $KUBECONFIG or ~/.kube/config.")
@click.option("--address", default="0.0.0.0", help="Address for /metrics and /healthz.")
@click.option("--port", type=click.IntRange(0, 65535), default=9808,
              help="Port for /metrics and /healthz (0: any free port, printed at start).")
@click.option("--interval", type=_Interval(), default=None,
              help="Sampling period, e.g. 1s or 500ms. Default: contention.sample_interval_s (1s).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Stowage settings YAML (the contention section: thresholds, sustained count, policy).")
@click.option("--dry-run", is_flag=True, help="Decide and log evictions, count them in stowage_evictions_total, "
                                               "but never call the Eviction API or write Events.")
@click.option("--no-kubernetes", is_flag=True, help="Run without an API server: capacity from --capacity, pods "
                                                     "named by uid, nothing evicted. For tests and trials.")
@click.option("--capacity", default=None, metavar="LIST",
              help="Capacity overrides, e.g. cpu=4,memory=8Gi,disk=200Mi,network=125Mi (bandwidths per second); "
                   "take precedence over the Node's allocatable and bandwidth annotations.")
@click.option("--exclude-interfaces", type=_Regex(), default=r"^lo$",
              help="Interfaces of /proc/net/dev left out of node and pod network usage.")
@click.option("--once", is_flag=True, help="Take two samples one interval apart, print the usage as JSON, exit.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def node_monitor(
    node_name: str | None,
    cgroup_root: Path,
    proc_root: Path,
    kubeconfig: Path | None,
    address: str,
    port: int,
    interval: float | None,
    config_path: Path | None,
    dry_run: bool,
    no_kubernetes: bool,
    capacity: str | None,
    exclude_interfaces: str,
    once: bool,
    log_level: str,
) -> None:
    """Measure what pods really use on this node, publish it for Prometheus, and evict
    opportunistic pods (newest first) when usage stays above the preemption threshold.

    Runs as a DaemonSet, one per node. Metrics: stowage_node_usage, stowage_node_capacity,
    stowage_node_contention, stowage_node_blocked, stowage_pod_usage, stowage_evictions_total,
    stowage_node_sample_seconds on http://ADDRESS:PORT/metrics; liveness on /healthz.

    Without a cluster: stowage node-monitor --no-kubernetes --capacity cpu=4,memory=8Gi
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    from stowage.node_monitor.capacity import parse_capacity

    from stowage.config import load_settings

    try:
        overrides = {"contention": {"sample_interval_s": interval}} if interval is not None else None
        settings = load_settings(config_path, overrides)
        capacity_flags = parse_capacity(capacity)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    except InvalidInput as exc:
        raise click.BadParameter(f"{exc.allowed}, got {exc.value!r}", param_hint=exc.field) from exc
    if not cgroup_root.is_dir():
        raise click.BadParameter(f"{cgroup_root} is not a directory (mount the host's /sys/fs/cgroup there)",
                                 param_hint="--cgroup-root")
    if not node_name:
        if not no_kubernetes:
            raise click.BadParameter("required: pass --node-name or set NODE_NAME (downward API spec.nodeName)",
                                     param_hint="--node-name")
        node_name = socket.gethostname()

    from stowage.node_monitor import sampling

    sampler = sampling.Sampler(cgroup_root, proc_root, exclude_interfaces)
    if once:
        _print_once(sampler, settings.contention.sample_interval_s)
        return
    _serve(node_name, sampler, settings, capacity_flags, kubeconfig, address, port, dry_run, no_kubernetes)


def _print_once(sampler: Any, interval_s: float) -> None:
    import time

    from stowage.node_monitor.summary import RESOURCES, summarise

    first = sampler.sample()
    time.sleep(interval_s)
    usage = summarise(first, sampler.sample())

    def clean(row: Any) -> dict[str, float | None]:
        return {r: (None if math.isnan(v) else float(v)) for r, v in zip(RESOURCES, row, strict=True)}

    click.echo(json.dumps({
        "layout": usage.layout,
        "interval_s": usage.interval_s,
        "node": clean(usage.node),
        "pods": {uid: clean(row) for uid, row in zip(usage.pod_uids, usage.pods, strict=True)},
    }, indent=2))


def _serve(
    node: str,
    sampler: Any,
    settings: Any,
    capacity_flags: Any,
    kubeconfig: Path | None,
    address: str,
    port: int,
    dry_run: bool,
    no_kubernetes: bool,
) -> None:
    from stowage.node_monitor.capacity import node_capacity
    from stowage.node_monitor.eviction import Evictor
    from stowage.node_monitor.metrics import MetricsServer, NodeMetrics
    from stowage.node_monitor.monitor import NodeMonitor
    from stowage.node_monitor.pods import PodStore, PodWatcher

    stop = threading.Event()
    metrics = NodeMetrics(node)
    client = None
    store = evictor = None
    if not no_kubernetes:
        from stowage.kube.api import ApiError, KubeClient, load_config

        try:
            client = KubeClient(load_config(kubeconfig), user_agent="stowage-node-monitor")
        except ConfigError as exc:
            raise click.UsageError(f"{exc}\n  or run without a cluster: --no-kubernetes --capacity LIST") from exc
        log.info("Kubernetes API at %s from %s", client.config.server, client.config.source)
        store = PodStore(node)
        evictor = Evictor(client, node, dry_run=dry_run)
    elif not capacity_flags:
        log.warning("--no-kubernetes without --capacity: capacity unknown, so no contention can be detected")
    monitor = NodeMonitor(node, sampler, settings.contention, metrics, store, evictor, capacity_flags)

    watcher = None
    if client is not None:
        assert store is not None and evictor is not None

        def refresh_node() -> None:
            obj = client.get_node(node)
            monitor.set_node_capacity(node_capacity(obj))
            evictor.node_uid = (obj.get("metadata") or {}).get("uid")

        try:
            refresh_node()
        except ApiError as exc:
            if exc.status == 404:
                raise click.BadParameter(f"node {node!r} not found by the API server",
                                         param_hint="--node-name") from exc
            if exc.status in (401, 403):
                raise click.UsageError(f"cannot read node {node!r}: {exc} (RBAC needs nodes get)") from exc
            log.warning("cannot read node %s yet (%s); will retry", node, exc)
        except ConfigError as exc:  # an exec credential plugin that cannot run or answers nonsense
            raise click.UsageError(str(exc)) from exc
        except Exception as exc:
            log.warning("API server not reachable yet (%s); will retry", exc)
        watcher = PodWatcher(client, store, on_resync=refresh_node).start()

    try:
        stale_after_s = max(10.0, 5 * settings.contention.sample_interval_s)
        server = MetricsServer(metrics, address, port, stale_after_s=stale_after_s)
    except OSError as exc:
        raise click.BadParameter(f"cannot listen on {address}:{port} ({exc.strerror})", param_hint="--port") from exc
    server.start()
    mode = "no kubernetes (measure only)" if no_kubernetes else ("dry run" if dry_run else "evicting")
    log.info("node-monitor for %s: metrics on http://%s:%d/metrics, every %.3gs, policy %s, %s",
             node, address, server.port, settings.contention.sample_interval_s, settings.contention.policy, mode)

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        monitor.run(stop)
    finally:
        server.stop()
        if watcher is not None:
            watcher.stop()
        if client is not None:
            client.close()
        log.info("node-monitor stopped")
