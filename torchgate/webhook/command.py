"""``torchgate webhook``: the composition root that wires policies, TLS and the app, then serves.

Policy source, in order: ``--kubeconfig`` (watch the cluster's PlacementPolicies), ``--policy``
files without a kubeconfig (no cluster needed, files reloaded on change), the in-cluster service
account when running in a pod, else the built-in default policy only (said loudly at startup).
On SIGTERM/SIGINT it keeps answering for ``--shutdown-delay-seconds`` (``/readyz`` says 503),
then stops intake and lets in-flight reviews finish. Why the delay: a deleted pod leaves its
Service's endpoints a moment after it is told to stop (the EndpointSlice update, then each
node's kube-proxy), and with ``failurePolicy: Fail`` every review routed to it in that moment would
fail a user's ``kubectl apply`` while the other replica was there to answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from torchgate import jsonlog
from torchgate.kube.client import ConfigError, KubeClient
from torchgate.serving import ReloadingTLS
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


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT."""
    jsonlog.configure(args)
    try:
        tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)
    except (OSError, ValueError) as exc:
        print(f"torchgate webhook: cannot load the TLS certificate: {exc}", file=sys.stderr)
        return 1
    try:
        asyncio.run(_serve(args, tls))
    except OSError as exc:
        print(f"torchgate webhook: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(args: argparse.Namespace, tls: ReloadingTLS) -> None:
    cache = PolicyCache()
    tasks: list[asyncio.Task[None]] = []
    api = await _policy_source(args, cache, tasks)
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
    )
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.bind, args.port, ssl_context=tls.context)
    await site.start()
    log.info("serving on https://%s:%d", args.bind, args.port)
    tasks.append(asyncio.create_task(tls.watch(args.reload_interval)))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
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
    args: argparse.Namespace, cache: PolicyCache, tasks: list[asyncio.Task[None]]
) -> KubeClient | None:
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
        api = await KubeClient.connect(None if args.kubeconfig is None else str(args.kubeconfig))
    except ConfigError as exc:
        raise OSError(str(exc)) from None
    if args.policy:
        log.warning("--policy files are ignored when watching the cluster's PlacementPolicies")
    tasks.append(asyncio.create_task(ClusterQuotas(cache, api).run()))
    tasks.append(asyncio.create_task(ClusterClaims(cache, api).run()))
    tasks.append(asyncio.create_task(ClusterPolicies(cache, api).run()))
    return api
