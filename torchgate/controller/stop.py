"""``torchgate controller stop``: scale the controller to zero and wait for its shutdown.

The I/O around :mod:`torchgate.controller.stopping` (which says why and decides): the chart's
``pre-delete`` hook runs it as the controller's ServiceAccount before ``helm uninstall`` deletes
anything. It prints what it did and always exits 0 once it ran (a usage error is 2): an
uninstall must never hang or fail on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from torchgate.controller.stopping import (
    Observed,
    Verdict,
    held_finalizers,
    judge,
    pod_selector,
    replicas_to_stop,
    summary,
)
from torchgate.kube.client import MERGE_PATCH, ConfigError, KubeApi, KubeClient
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.resources import DEPLOYMENTS, PODS, TEAM_QUOTAS

POLL_SECONDS = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate controller stop`` flags."""
    parser.add_argument(
        "--deployment",
        dest="stop_deployment",
        default="torchgate-controller",
        metavar="NAME",
        help="the controller's Deployment (default torchgate-controller)",
    )
    parser.add_argument(
        "--namespace",
        dest="stop_namespace",
        default=os.environ.get("POD_NAMESPACE", "torchgate-system"),
        metavar="NS",
        help="its namespace (default $POD_NAMESPACE or torchgate-system)",
    )
    parser.add_argument(
        "--timeout",
        dest="stop_timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds to wait for its pods to go; then it exits 0 all the same (default 60)",
    )


def run(args: argparse.Namespace) -> int:
    """Scale the Deployment to zero, wait (bounded) for its pods to go, say how it ended."""
    if args.stop_timeout < 0:
        print("torchgate controller stop: --timeout must be at least 0", file=sys.stderr)
        return 2
    try:
        asyncio.run(_main(args))
    except (OSError, ConfigError) as exc:
        print(f"torchgate controller stop: could not stop the controller: {exc}", flush=True)
    except Exception as exc:  # the uninstall goes on whatever went wrong here
        print(f"torchgate controller stop: failed: {exc!r}", flush=True)
    return 0


async def _main(args: argparse.Namespace) -> None:
    api = await KubeClient.connect(args.kubeconfig)
    try:
        await stop_controller(
            api,
            namespace=args.stop_namespace,
            name=args.stop_deployment,
            wait_seconds=args.stop_timeout,
        )
    finally:
        await api.close()


async def stop_controller(
    api: KubeApi,
    *,
    namespace: str,
    name: str,
    wait_seconds: float,
    poll: float = POLL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> Verdict:
    """Scale Deployment ``namespace/name`` to zero and wait for its pods (stopping rules 1-5)."""
    started = clock()
    where = f"Deployment {namespace}/{name}"
    deployment = await _read_deployment(api, namespace, name, say)
    replicas = replicas_to_stop(deployment)
    if deployment is not None and replicas is None:
        say(f"{where} asks for no replica already")
    elif replicas is not None:
        try:
            await api.request(
                "PATCH",
                DEPLOYMENTS.path(namespace, name, "scale"),
                body={"spec": {"replicas": 0}},
                content_type=MERGE_PATCH,
            )
            say(f"scaled {where} from {replicas} to 0 replicas")
        except ApiError as exc:
            say(f"could not scale {where} to zero: {exc}")
            wait_seconds = 0  # its pods are not going: only say what is left
    selector = pod_selector(deployment)
    last = Observed(pods_left=None, held=())
    while True:
        try:
            observed: Observed | None = await _observe(api, namespace, selector)
        except ApiError as exc:
            say(f"could not see whether the controller stopped: {exc}")
            observed = None
        elapsed = clock() - started
        if observed is None:  # nothing learned: only the timeout ends the wait
            verdict = Verdict.GAVE_UP if elapsed >= wait_seconds else Verdict.WAIT
        else:
            last = observed
            verdict = judge(observed, elapsed=elapsed, timeout=wait_seconds)
        if verdict is not Verdict.WAIT:
            say(summary(last, verdict, elapsed=elapsed))
            return verdict
        await asyncio.sleep(poll)


async def _read_deployment(
    api: KubeApi, namespace: str, name: str, say: Callable[[str], None]
) -> Mapping[str, Any] | None:
    try:
        found: Mapping[str, Any] = await api.request("GET", DEPLOYMENTS.path(namespace, name))
    except NotFound:
        say(f"Deployment {namespace}/{name} not found: nothing to scale")
        return None
    except ApiError as exc:
        say(f"could not read Deployment {namespace}/{name}: {exc}")
        return None
    return found


async def _observe(api: KubeApi, namespace: str, selector: str | None) -> Observed:
    """The controller's pods left and the TeamQuotas holding the finalizer (rules 2, 3).

    No selector: its pods are not counted; no TeamQuota CRD: none is held. Raises ``ApiError``
    when a read fails.
    """
    pods_left: int | None = None
    if selector is not None:
        pods = await api.request("GET", PODS.path(namespace), query={"labelSelector": selector})
        pods_left = len(pods.get("items") or [])
    try:
        quotas = await api.request("GET", TEAM_QUOTAS.path())
    except NotFound:
        return Observed(pods_left=pods_left, held=())
    return Observed(pods_left=pods_left, held=held_finalizers(quotas.get("items") or []))
