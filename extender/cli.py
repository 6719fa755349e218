"""``stowage extender``: run the kube-scheduler extender."""

from __future__ import annotations

import logging

import click

from stowage.errors import ConfigError

__all__ = ["extender"]


@click.command("extender", context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    help="Kubeconfig to use (token, client certificate or exec plugin). Default: the in-cluster service account, "
    "then $KUBECONFIG or ~/.kube/config.",
)
@click.option(
    "--prometheus-url",
    default=None,
    metavar="URL",
    help="Prometheus base URL (e.g. http://prometheus:9090) for node utilization. Without it, or while it is "
    "unreachable, no node harvests anything: opportunistic pods wait, regular pods are unaffected.",
)
@click.option(
    "--prometheus-interval",
    type=click.FloatRange(min=0.5),
    default=5.0,
    metavar="SECONDS",
    help="How often utilization is re-read from Prometheus.",
)
@click.option("--host", default="0.0.0.0", help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8888,
    help="Port to listen on (0: any free port; the one bound is logged as 'extender listening on ...').",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Stowage settings YAML (harvest.t_alloc, harvest.ramp_up_s, harvest.utilization_stale_after_s, "
    "packing.remote_penalty, ...). STOWAGE_* environment variables override it.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    help="Log verbosity.",
)
def extender(
    kubeconfig: str | None,
    prometheus_url: str | None,
    prometheus_interval: float,
    host: str,
    port: int,
    config_path: str | None,
    log_level: str,
) -> None:
    """Run the kube-scheduler extender for the stowage-scheduler profile.

    Serves POST /filter, /prioritize and /preempt exactly as kube-scheduler's
    extender protocol defines them (configure it as manifests/scheduler-config.yaml does:
    only opportunistic pods routed to filter/prioritize, ignorable: false, so they wait
    whenever it cannot answer), plus GET /healthz,
    /readyz (ready while the node and pod caches are synced and following the cluster), /metrics and
    /docs (OpenAPI). Pods of other scheduler names pass through unchanged.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from stowage.extender.server import ExtenderRuntime

    from stowage.config import load_settings
    from stowage.kube.api import KubeClient, load_config

    try:
        settings = load_settings(config_path)
        # Lists of thousands of pods: allow more than the default 10 s per request.
        api = KubeClient(load_config(kubeconfig), timeout_s=30.0, user_agent="stowage-extender")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if prometheus_url is None:
        logging.getLogger(__name__).warning("no --prometheus-url: harvesting is off, opportunistic pods will wait")
    runtime = ExtenderRuntime(settings, api, prometheus_url=prometheus_url, prometheus_interval_s=prometheus_interval)
    try:
        runtime.serve(host, port, log_level)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port} (--host/--port): {exc.strerror or exc}") from exc
