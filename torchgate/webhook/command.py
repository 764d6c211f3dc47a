"""``torchgate webhook``: the composition root that wires policies, TLS and the app, then serves.

Policy source, in order: ``--kubeconfig`` (watch the cluster's PlacementPolicies), ``--policy``
files without a kubeconfig (no cluster needed, files reloaded on change), the in-cluster service
account when running in a pod, else the built-in default policy only (said loudly at startup).
On SIGTERM/SIGINT it keeps answering for ``--shutdown-delay-seconds`` (``/readyz`` says 503),
then stops intake and lets in-flight reviews finish. Stopped before it serves, it exits 0 at
once: the signals are caught from the process's first moment (:mod:`torchgate.stopsignals`, by
the CLI before it imports this module), so one that comes while the modules load, the certificate,
policy files or kubeconfig load, or an exec credential plugin runs ends the start, and it never
binds its port. Why the delay: a deleted pod leaves its
Service's endpoints a moment after it is told to stop (the EndpointSlice update, then each
node's kube-proxy), and with ``failurePolicy: Fail`` every review routed to it in that moment would
fail a user's ``kubectl apply`` while the other replica was there to answer.

Connections are served by ``torchgate.tlslistener.TLSListener``: at most ``--max-connections``
open (each costs about 0.3 MB), a deadline for the handshake and first request head, and an idle
timeout, so connections left open by anyone who reaches the port cannot exhaust its memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path

from aiohttp import web

from torchgate import jsonlog, stopsignals
from torchgate.kube.client import ConfigError, KubeClient
from torchgate.serving import ReloadingTLS
from torchgate.stopsignals import Stopped, unless_stopped
from torchgate.tlslistener import TLSListener
from torchgate.webhook.forecastclient import DEFAULT_TIMEOUT_SECONDS, ForecastClient
from torchgate.webhook.jobsource import StoredJobs
from torchgate.webhook.policysource import (
    ClusterClaims,
    ClusterPolicies,
    ClusterQuotas,
    FilePolicies,
    PolicyCache,
)
from torchgate.webhook.server import DRAINING, MAX_BODY_BYTES, Metrics, create_app

log = logging.getLogger("torchgate.webhook")

MAX_CONNECTIONS_ENV = "TORCHGATE_WEBHOOK_MAX_CONNECTIONS"
# 256 idle TLS connections cost about 70 MB (270 kB each, measured): within the manifests'
# 256 MiB limit beside the process's own 45-60 MB, with room for reviews being read.
DEFAULT_MAX_CONNECTIONS = 256
# The apiserver sends its request as soon as its handshake is done and waits for the answer at
# most 30 s (timeoutSeconds; the manifests set 5); 10 s is the TLS handshake deadline of Go's
# HTTP clients.
DEFAULT_READ_TIMEOUT_SECONDS = 10.0
# The apiserver's webhook client closes a connection idle for 90 s (client-go's transport
# defaults); the server waiting longer never closes one under a request the apiserver is sending.
DEFAULT_IDLE_TIMEOUT_SECONDS = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate webhook`` flags."""
    parser.add_argument("--bind", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8443, help="TLS port (default 8443)")
    parser.add_argument("--tls-cert-file", type=Path, required=True, help="serving certificate")
    parser.add_argument("--tls-private-key-file", type=Path, required=True, help="its key")
    parser.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="PlacementPolicy YAML file (repeatable); without --kubeconfig no cluster is needed",
    )
    parser.add_argument("--kubeconfig", type=Path, help="watch PlacementPolicies in this cluster")
    parser.add_argument(
        "--reload-interval",
        type=float,
        default=10.0,
        help="seconds between checks of the certificate and policy files (default 10)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help="a larger review is answered HTTP 400 (default 7 MiB, as controller-runtime)",
    )
    parser.add_argument(
        "--shutdown-delay-seconds",
        type=float,
        default=0.0,
        help="after SIGTERM keep answering this long (readyz 503) while the pod leaves its "
        "Service's endpoints, then stop (default 0; the manifests set 5)",
    )
    connections = parser.add_argument_group(
        "connections (bounds on what clients that hold connections open can cost)"
    )
    connections.add_argument(
        "--max-connections",
        type=_positive_int,
        default=os.environ.get(MAX_CONNECTIONS_ENV, str(DEFAULT_MAX_CONNECTIONS)),
        help="connections open at once, TLS handshakes included (about 0.3 MB each); at the cap "
        "the oldest one that has sent no request yet is closed for a new one, or the new one is "
        f"refused (default {DEFAULT_MAX_CONNECTIONS}, or ${MAX_CONNECTIONS_ENV})",
    )
    connections.add_argument(
        "--read-timeout-seconds",
        type=_positive_float,
        default=DEFAULT_READ_TIMEOUT_SECONDS,
        help="a new connection's TLS handshake and first request head, and each review's body, "
        "must arrive within this or the connection is closed (default %(default)s)",
    )
    connections.add_argument(
        "--idle-timeout-seconds",
        type=_positive_float,
        default=DEFAULT_IDLE_TIMEOUT_SECONDS,
        help="a kept-alive connection idle this long between requests is closed; longer than "
        "the apiserver's own 90 s, so the apiserver closes first (default %(default)s)",
    )
    forecast = parser.add_argument_group(
        "forecasts (one warning per created job saying what the controller would do with it)"
    )
    forecast.add_argument(
        "--controller-url",
        help="the controller's pool service, e.g. https://torchgate-controller.torchgate-system.svc"
        " (default: no forecasts); asked with this process's cluster credentials",
    )
    forecast.add_argument(
        "--controller-ca-file",
        type=Path,
        help="CA that signed the pool service's certificate (re-read when it changes)",
    )
    forecast.add_argument(
        "--forecast-timeout-seconds",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="admission goes on without a forecast after this long (default %(default)s)",
    )
    jsonlog.add_arguments(parser)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(text)
    return value


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT."""
    jsonlog.configure(args)
    try:
        tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)
    except (OSError, ValueError) as exc:
        print(f"torchgate webhook: cannot load the TLS certificate: {exc}", file=sys.stderr)
        return 1
    try:
        stopsignals.PROCESS.run(lambda stop: _serve(args, tls, stop))
    except OSError as exc:
        print(f"torchgate webhook: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(args: argparse.Namespace, tls: ReloadingTLS, stop: asyncio.Event) -> None:
    cache = PolicyCache()
    tasks: list[asyncio.Task[None]] = []
    try:
        api = await _policy_source(args, cache, tasks, stop)
    except Stopped:
        log.info("stopped while loading the cluster configuration")
        return
    forecasts: ForecastClient | None = None
    runner: web.AppRunner | None = None
    try:
        if stop.is_set():  # never served: nobody to drain for
            log.info("stopped before serving")
            return
        metrics = Metrics()
        forecasts = _forecast_client(args, api, metrics)
        if forecasts is not None:
            tasks.append(asyncio.create_task(forecasts.watch_ca()))
        app = create_app(
            cache,
            metrics=metrics,
            max_body_bytes=args.max_body_bytes,
            # Benchmarks only: X-Torchgate-Server-Time on every review response.
            server_timing=os.environ.get("TORCHGATE_SERVER_TIMING") == "1",
            forecasts=forecasts,
            jobs=None if api is None else StoredJobs(api),
            read_timeout=args.read_timeout_seconds,
        )
        runner = web.AppRunner(
            app, handle_signals=False, access_log=None, keepalive_timeout=args.idle_timeout_seconds
        )
        await runner.setup()
        site = TLSListener(
            runner,
            args.bind,
            args.port,
            ssl_context=tls.context,
            max_connections=args.max_connections,
            read_timeout=args.read_timeout_seconds,
            observe=metrics.observe_connection_closed,
        )
        await site.start()
        log.info("serving on https://%s:%d", args.bind, args.port)
        tasks.append(asyncio.create_task(tls.watch(args.reload_interval)))
        await stop.wait()
        if args.shutdown_delay_seconds > 0:
            log.info("draining: answering for %.0fs more", args.shutdown_delay_seconds)
            app[DRAINING].set()
            await asyncio.sleep(args.shutdown_delay_seconds)
    finally:
        log.info("shutting down")
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if runner is not None:
            await runner.cleanup()
        if forecasts is not None:
            await forecasts.close()
        if api is not None:
            await api.close()


def _forecast_client(
    args: argparse.Namespace, api: KubeClient | None, metrics: Metrics
) -> ForecastClient | None:
    """The client of the controller's pool service, when one is named and credentials exist."""
    if not args.controller_url:
        return None
    if api is None:
        log.warning(
            "no forecasts: --controller-url needs cluster credentials (--kubeconfig, or the "
            "pod's ServiceAccount) to authenticate to the controller"
        )
        return None
    credentials = api.authorize

    async def authorize(headers: dict[str, str]) -> None:
        if credentials is not None:
            await credentials(headers)

    log.info("forecasts from %s", args.controller_url)
    return ForecastClient(
        args.controller_url,
        authorize=authorize,
        ca_file=args.controller_ca_file,
        timeout=args.forecast_timeout_seconds,
        observe=metrics.observe_forecast,
    )


async def _policy_source(
    args: argparse.Namespace,
    cache: PolicyCache,
    tasks: list[asyncio.Task[None]],
    stop: asyncio.Event,
) -> KubeClient | None:
    """Where the policies come from (module docstring); ``Stopped`` when stopped connecting."""
    if args.kubeconfig is None and args.policy:
        files = FilePolicies(cache, args.policy)
        files.load()
        if not cache.synced.is_set():
            raise OSError("no policy file could be loaded")
        tasks.append(asyncio.create_task(files.watch(args.reload_interval)))
        return None
    if args.kubeconfig is None and "KUBERNETES_SERVICE_HOST" not in os.environ:
        log.warning("no --policy and no cluster: using the built-in default policy only")
        cache.synced.set()
        return None
    try:
        kubeconfig = None if args.kubeconfig is None else str(args.kubeconfig)
        api = await unless_stopped(KubeClient.connect(kubeconfig), stop)
    except ConfigError as exc:
        raise OSError(str(exc)) from None
    if args.policy:
        log.warning("--policy files are ignored when watching the cluster's PlacementPolicies")
    tasks.append(asyncio.create_task(ClusterQuotas(cache, api).run()))
    tasks.append(asyncio.create_task(ClusterClaims(cache, api).run()))
    tasks.append(asyncio.create_task(ClusterPolicies(cache, api).run()))
    return api
