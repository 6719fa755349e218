"""``stowage operator``: run the operator (Kopf) — Job lifecycle, Queue status, the dispatcher, the webhooks."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from stowage.errors import ConfigError
from stowage.kube import api
from stowage.kube.records import parse_timestamp

__all__ = ["PEERING_LIFETIME_S", "OperatorOptions", "Peering", "operator", "outranked", "run"]

log = logging.getLogger("stowage.operator")

#: Seconds a peer's record stays alive without renewal (Kopf's ``settings.peering.lifetime``; Kopf renews
#: 5–10 s before it runs out). A stand-by operator takes over this long after the active one died.
PEERING_LIFETIME_S = 30


@dataclass(frozen=True)
class OperatorOptions:
    """The command line, parsed."""

    kubeconfig: str | None = None
    prometheus_url: str | None = None
    config_path: str | None = None
    namespaces: tuple[str, ...] = ()
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 9443
    webhook_cert: str | None = None
    webhook_key: str | None = None
    webhook_url: str | None = None
    webhook_service: tuple[str, str] | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    peering: str | None = None
    dry_run: bool = False
    node_hint: bool = False


def _service(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise click.BadParameter(f"{value!r}: expected NAMESPACE/NAME of the Service in front of the operator",
                                 param_hint="--webhook-service")
    return namespace, name


@click.command("operator", context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="Kubeconfig to use (token, client certificate or exec plugin). Default: the in-cluster service "
                   "account, then $KUBECONFIG or ~/.kube/config.")
@click.option("--prometheus-url", default=None, metavar="URL",
              help="Prometheus base URL (e.g. http://prometheus:9090) for node utilization. Without it no harvested "
                   "capacity is offered: 'auto' tasks run regular, 'true' tasks wait.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Stowage settings YAML (packing.fairness_knob, packing.barrier_knob, "
                   "classifier.short_task_threshold_s, ...). STOWAGE_* environment variables override it.")
@click.option("--namespace", "namespaces", multiple=True, metavar="NS",
              help="Serve Jobs and plain pods of this namespace (repeat for several). Nodes and bound pods are always "
                   "read cluster-wide: free capacity depends on every pod.")
@click.option("--all-namespaces", is_flag=True, default=False,
              help="Serve every namespace (the default when no --namespace is given).")
@click.option("--webhook-host", default="0.0.0.0", help="Address the admission webhook server listens on.")
@click.option("--webhook-port", type=click.IntRange(0, 65535), default=9443,
              help="Port of the admission webhook server (0: any free port; logged as 'webhooks served at ...').")
@click.option("--webhook-cert", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TLS certificate (PEM) of the webhook server. With --webhook-key: serve the admission webhooks.")
@click.option("--webhook-key", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TLS private key (PEM) of the webhook server.")
@click.option("--webhook-url", default=None, metavar="URL",
              help="URL the API server calls the webhooks at (the handler id is appended), e.g. "
                   "https://10.0.0.5:9443; 'auto': the address the server listens on (--webhook-host and the bound "
                   "port). Stowage then writes its Validating/MutatingWebhookConfiguration.")
@click.option("--webhook-service", default=None, metavar="NAMESPACE/NAME",
              help="Service the API server reaches the webhooks through (port 443). Stowage then writes its "
                   "webhook configurations. With neither this nor --webhook-url they are not managed (the chart's).")
@click.option("--metrics-host", default="0.0.0.0",
              help="Address GET /metrics listens on (0.0.0.0: every interface, for Prometheus scraping the pod; "
                   "127.0.0.1: this machine only).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=8080,
              help="Port of GET /metrics (0: any free port; logged as 'metrics on ...').")
@click.option("--peering", default=None, metavar="NAME",
              help="Kopf peering object (ClusterKopfPeering, or KopfPeering per --namespace): of the operators "
                   "sharing it only the newest acts; the others stand by. Without it the operator runs standalone.")
@click.option("--dry-run", is_flag=True, default=False,
              help="Decide and log, but write nothing: no pods, no gates removed, no status, no Queue, no ConfigMap.")
@click.option("--node-hint/--no-node-hint", default=False,
              help="Give each released pod a preferred node affinity for the node the dispatcher packed it on, so "
                   "kube-scheduler follows the dispatcher's placement. Off by default: today's alignment score "
                   "spreads tasks, the scheduler's MostAllocated packs them (docs/operator.md, 'Node hint').")
def operator(kubeconfig: str | None, prometheus_url: str | None, config_path: str | None, namespaces: tuple[str, ...],
             all_namespaces: bool, webhook_host: str, webhook_port: int, webhook_cert: str | None,
             webhook_key: str | None, webhook_url: str | None, webhook_service: str | None, metrics_host: str,
             metrics_port: int, peering: str | None, dry_run: bool, node_hint: bool) -> None:
    """Run the Stowage operator.

    Materialises Stowage Jobs (kubectl get sjob) into pods as the dispatcher releases their tasks,
    releases gated plain pods in fair order, keeps Job and Queue (kubectl get sq) status, learns
    which tasks are short, and serves the admission webhooks when given a certificate. Stop it with
    SIGTERM or Ctrl-C; a restarted operator picks up where this one stopped.
    """
    logging.basicConfig(level=os.environ.get("STOWAGE_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per API request, per handled event and per webhook call drowns what a person acts on.
    for noisy in ("httpx", "kopf.objects", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    service = _service(webhook_service)
    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other: give one")
    if (webhook_cert is None) != (webhook_key is None):
        raise click.UsageError("--webhook-cert and --webhook-key go together: give both to serve the webhooks")
    if webhook_url is not None and webhook_service is not None:
        raise click.UsageError("--webhook-url and --webhook-service exclude each other: give the one the API server "
                               "uses to reach the operator")
    if (webhook_url or webhook_service) and webhook_cert is None:
        raise click.UsageError("--webhook-url/--webhook-service need --webhook-cert and --webhook-key")
    options = OperatorOptions(
        kubeconfig=kubeconfig, prometheus_url=prometheus_url, config_path=config_path, namespaces=tuple(namespaces),
        webhook_host=webhook_host, webhook_port=webhook_port, webhook_cert=webhook_cert, webhook_key=webhook_key,
        webhook_url=webhook_url, webhook_service=service, metrics_host=metrics_host,
        metrics_port=metrics_port,
        peering=peering, dry_run=dry_run, node_hint=node_hint)
    try:
        run(options)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


# --- running -------------------------------------------------------------------------------------


def _connection(config: Any) -> Any:
    """Kopf's ConnectionInfo from our ApiConfig (token, client certificate or exec plugin)."""
    import kopf

    from stowage.kube import credentials

    token, cert, expires = config.bearer(), config.client_cert, None
    if token is None and config.exec is not None:
        answer = credentials.run_exec(config.exec)
        token, cert = answer.token, answer.client_cert or cert
        if answer.expires_at_s is not None:
            import datetime as dt
            expires = dt.datetime.fromtimestamp(answer.expires_at_s, dt.UTC)
    return kopf.ConnectionInfo(
        server=config.server,
        ca_path=str(config.ca_file) if config.ca_file and not config.ca_data else None,
        ca_data=config.ca_data,
        insecure=config.insecure or None,
        scheme="Bearer" if token else None,
        token=token,
        certificate_data=cert.cert_pem if cert else None,
        private_key_data=cert.key_pem if cert else None,
        expiration=expires,
    )


def whoami(client: Any) -> str | None:
    """The API username of our credentials (SelfSubjectReview), None when the server does not say."""
    try:
        review = client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    except (api.ApiError, OSError) as exc:
        log.warning("cannot tell which user this operator is (SelfSubjectReview: %s)", exc)
        return None
    return ((review.get("status") or {}).get("userInfo") or {}).get("username")


def _official_client(kubeconfig: str | None) -> Any:
    """A ``kubernetes.client.ApiClient`` (the webhook helpers use the official client)."""
    from kubernetes import client, config

    if kubeconfig is None:
        with contextlib.suppress(config.ConfigException):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
    return config.new_client_from_config(config_file=kubeconfig)


# --- peering -------------------------------------------------------------------------------------


def peer_alive(info: Mapping[str, Any], now: float) -> bool:
    """Kopf's rule for a peer record ``{priority, lifetime, lastseen}``: alive until lastseen + lifetime."""
    seen = parse_timestamp(str(info.get("lastseen") or "").replace("+00:00", "Z"))
    if seen is None:
        return True  # a record without a time is taken as alive, as Kopf does (lastseen defaults to now)
    try:
        lifetime = float(info.get("lifetime", 60))
    except (TypeError, ValueError):
        lifetime = 60.0
    return seen + lifetime > now


def outranked(status: Mapping[str, Any], identity: str, priority: int, now: float) -> list[str]:
    """Live peers other than ``identity`` with a priority ≥ ``priority``: Kopf pauses this operator for them."""
    out = []
    for peer, info in (status or {}).items():
        if peer == identity or not isinstance(info, Mapping) or not peer_alive(info, now):
            continue
        try:
            their = int(info.get("priority", 0))
        except (TypeError, ValueError):
            their = 0
        if their >= priority:
            out.append(peer)
    return out


class Peering:
    """Whether this operator acts, by the same rule Kopf applies to its handlers (Kopf's ``ClusterKopfPeering``).

    Kopf pauses an operator while another live operator of the same peering has a higher or the same
    priority. The dispatch loop is not a Kopf handler, so it reads the same peering object and
    pauses with it. ``priority`` defaults to the start time in milliseconds: the newest operator acts,
    an older one stands by and takes over when the newest stops renewing its record (Kopf's lifetime).
    """

    def __init__(self, client: api.KubeClient, name: str, *, identity: str | None = None,
                 priority: int | None = None, namespaces: Sequence[str] | None = None,
                 clock: Callable[[], float] = time.time, refresh_s: float = 2.0) -> None:
        self._client = client
        self.name = name
        self.identity = identity or f"stowage-operator@{socket.gethostname()}/{os.getpid()}/{int(time.time())}"
        self.priority = int(priority if priority is not None else time.time() * 1000)
        self._namespaces = list(namespaces or [])
        self._clock = clock
        self._refresh_s = refresh_s
        self._checked = -1e18
        self._acting = True
        self.reason = ""

    def _paths(self) -> list[str]:
        if self._namespaces:
            return [f"/apis/kopf.dev/v1/namespaces/{ns}/kopfpeerings/{self.name}" for ns in self._namespaces]
        return [f"/apis/kopf.dev/v1/clusterkopfpeerings/{self.name}"]

    def ensure(self) -> None:
        """Create the peering object(s) if missing (Kopf does not); a missing CRD is logged with what to install."""
        for path in self._paths():
            collection, _, name = path.rpartition("/")
            kind = "KopfPeering" if self._namespaces else "ClusterKopfPeering"
            meta: dict[str, Any] = {"name": name}
            if self._namespaces:
                meta["namespace"] = path.split("/")[5]
            try:
                self._client.create(collection, {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": meta})
            except api.ApiError as exc:
                if exc.status == 404:
                    log.error("peering %r: the %s CRD (kopf.dev/v1) is not installed; install it (the chart "
                              "does; or https://github.com/nolar/kopf/blob/main/peering.yaml)", self.name, kind)
                elif exc.status != 409:
                    log.warning("peering %r: could not create %s: %s", self.name, path, exc)

    def acting(self) -> bool:
        now = self._clock()
        if now - self._checked < self._refresh_s:
            return self._acting
        self._checked = now
        blockers: list[str] = []
        for path in self._paths():
            try:
                obj = self._client.get(path)
            except api.ApiError as exc:
                if exc.status == 404:
                    continue  # no peering object: Kopf does not pause either
                log.warning("peering %r: cannot read %s (%s); keeping the last decision", self.name, path, exc)
                return self._acting
            except OSError as exc:
                log.warning("peering %r: cannot read %s (%s); keeping the last decision", self.name, path, exc)
                return self._acting
            blockers += outranked(obj.get("status") or {}, self.identity, self.priority, now)
        acting = not blockers
        if acting != self._acting:
            self.reason = "" if acting else f"outranked by {', '.join(sorted(blockers))}"
            log.warning("peering %r: %s", self.name, "acting again: no other operator outranks this one"
                        if acting else f"pausing the dispatcher: {self.reason} (same peering, priority ≥ "
                        f"{self.priority})")
        self._acting = acting
        return acting


def _listening(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port`` (a wildcard host: this machine's loopback)."""
    target = "localhost" if host in ("", "0.0.0.0", "::") else host
    try:
        with socket.create_connection((target, port), timeout=1.0):
            return True
    except OSError:
        return False


class _UrlServer:
    """Wraps a Kopf webhook server: logs where it serves, and reports ``url`` (if given) as its client config."""

    def __init__(self, server: Any, url: str | None) -> None:
        self.server, self.url = server, url

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for client_config in self.server(fn):
            if self.url:
                client_config = {**client_config, "url": self.url}
            log.info("webhooks served at %s", client_config.get("url"))
            yield client_config


def run(options: OperatorOptions, *, stop_flag: Any = None, ready: Callable[[Any], None] | None = None) -> None:
    """Start everything and run Kopf until SIGTERM/SIGINT (or ``stop_flag``). Raises ConfigError for bad settings."""
    import kopf
    from stowage.operator import jobs, queues, runtime, webhooks
    from stowage.operator.dispatcher import Dispatcher
    from stowage.operator.metrics import OperatorMetrics, serve

    from stowage.config import load_settings
    from stowage.kube.credentials import load_config

    settings = load_settings(options.config_path)
    config = load_config(options.kubeconfig)
    client = api.KubeClient(config, timeout_s=30.0, user_agent="stowage-operator")
    metrics = OperatorMetrics()
    runtime_: runtime.OperatorRuntime | None = None  # made below; readiness says "starting" until then
    webhook_port = options.webhook_port if options.webhook_cert else None

    def readiness() -> tuple[bool, str]:
        if runtime_ is None:
            return False, "not ready: starting\n"
        ok, text = runtime_.readiness()
        if ok and webhook_port and not _listening(options.webhook_host, webhook_port):
            return False, f"not ready: the webhook server does not listen on port {webhook_port} yet\n"
        return ok, text

    metrics_server = serve(metrics, options.metrics_host, options.metrics_port, ready=readiness)
    shown = f"[{options.metrics_host}]" if ":" in options.metrics_host else options.metrics_host
    log.info("metrics on http://%s:%d/metrics (probes /healthz, /readyz)", shown, metrics_server.port)

    namespaces = list(options.namespaces)
    peering = None
    if options.peering:
        peering = Peering(client, options.peering, namespaces=namespaces)
    runtime_ = runtime.OperatorRuntime(
        settings, client, dispatcher=Dispatcher(settings), prometheus_url=options.prometheus_url,
        namespaces=namespaces, metrics=metrics, acting=peering.acting if peering else None,
        dry_run=options.dry_run, node_hint=options.node_hint)

    registry = kopf.OperatorRegistry()
    jobs.register(registry, lambda: runtime_.jobs)
    queues.register(registry, lambda: runtime_.queues)
    server = None
    username = whoami(client)
    if options.webhook_cert:
        official = _official_client(options.kubeconfig)
        if not username:
            # Unrecognised, the operator's own task pods would be gated and relabelled by its own webhook.
            raise click.ClickException(
                "the pod webhook must know this operator's API user to leave its task pods alone, and the "
                "SelfSubjectReview failed (see the warning above): allow 'create selfsubjectreviews' "
                "(authentication.k8s.io; the default system:basic-user role does) and check the API server is up")
        trusted = (username,)
        webhooks.register(registry, webhooks.kubernetes_queue_lookup(official), trusted_users=trusted,
                          namespace_queue=webhooks.kubernetes_namespace_queue(official),
                          queue_names=webhooks.kubernetes_queue_names(official), namespaces=namespaces,
                          queue_spec=webhooks.kubernetes_queue_spec(official),
                          namespace_labels=webhooks.kubernetes_namespace_labels(official))
        port = options.webhook_port or None
        host = None if options.webhook_host in ("0.0.0.0", "::") else options.webhook_host
        server = webhooks.webhook_server(certfile=options.webhook_cert, pkeyfile=options.webhook_key,
                                         addr=options.webhook_host, port=port, host=host)
        url = None if options.webhook_url in (None, "auto") else options.webhook_url
        server = _UrlServer(server, url)
        if (options.webhook_url or options.webhook_service) and not options.dry_run:
            service = (*options.webhook_service, 443) if options.webhook_service else None
            server = webhooks.ConfiguringServer(server, webhooks.kubernetes_applier(official), service=service,
                                                trusted_users=trusted)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> Any:
        return _connection(config)

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.lifetime = PEERING_LIFETIME_S
        if peering is not None:
            settings.peering.name = peering.name
            settings.peering.priority = peering.priority
            settings.peering.mandatory = True
            settings.peering.standalone = False
        else:
            settings.peering.standalone = True
        settings.watching.server_timeout = 300
        # Every API call Kopf makes has a bound: a dead keep-alive connection costs one retry, never a stuck watch or
        # handler (Kopf's defaults: 5 min per request, no bound on a watch that goes silent).
        settings.watching.client_timeout = 300 + 30
        settings.watching.connect_timeout = settings.networking.connect_timeout = 10
        settings.networking.request_timeout = 30
        settings.posting.enabled = False  # our Events are written by the runtime, with reasons a user can act on
        if server is not None:
            webhooks.configure(settings, server)
        if not options.dry_run:
            if peering is not None:
                peering.ensure()
            try:
                queues.ensure_default_queue(client)
            except (api.ApiError, OSError) as exc:
                raise kopf.TemporaryError(f"cannot create the default Queue ({exc}); is the Queue CRD installed? "
                                          "(charts/stowage/files/crds/)", delay=5) from exc
        runtime_.start()
        log.info(
            "stowage operator started: API server %s (%s) as %s; namespaces: %s; prometheus: %s; webhooks: %s; "
            "peering: %s; state in configmap %s/%s%s",
            config.server, config.source, username or "an unknown user", ", ".join(namespaces) or "all",
            options.prometheus_url or "none (no harvested capacity offered)",
            "served" if server is not None else "not served (no --webhook-cert)",
            f"{peering.name} as {peering.identity} (priority {peering.priority})" if peering else "standalone",
            runtime_.state_namespace, runtime.STATE_CONFIGMAP, "; DRY RUN: nothing is written" if options.dry_run
            else "")
        if ready is not None:
            ready(runtime_)

    @kopf.on.cleanup(registry=registry)
    def cleanup(**_: Any) -> None:
        runtime_.stop()
        log.info("stowage operator stopped after %d dispatch passes", runtime_.passes)

    try:
        kopf.run(
            registry=registry,
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=peering is None,
            peering_name=peering.name if peering else None,
            priority=peering.priority if peering else None,
            identity=peering.identity if peering else None,
            stop_flag=stop_flag,
            memo=kopf.Memo(runtime=runtime_),
        )
    finally:
        runtime_.stop()
        metrics_server.stop()
        client.close()

