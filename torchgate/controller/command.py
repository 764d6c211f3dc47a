"""``torchgate controller``: parse flags, connect, elect a leader, run until SIGTERM.

``torchgate controller stop`` instead scales a running controller to zero and waits for it
(:mod:`torchgate.controller.stop`; the chart's pre-delete hook).

SIGTERM and SIGINT stop it cleanly from the process's first moment (:mod:`torchgate.stopsignals`,
caught by the CLI before it imports this module): one that comes while the modules load, while the
kubeconfig or the in-cluster configuration loads, or while an exec credential plugin runs, ends
the start at once with exit code 0, as one that comes later ends the run.

Exit codes: 0 after a clean SIGTERM/SIGINT, 1 when the leader Lease was lost (the process must
restart rather than risk acting beside a new leader) or the cluster cannot be reached, 2 when a
numeric flag is outside its bounds (``FLAG_BOUNDS``, which the Helm chart's schema repeats for its
``controller.tuning`` and ``controller.admissionPacing`` values).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from torchgate import jsonlog, stopsignals
from torchgate.controller import stop as stopping_command
from torchgate.controller.job.disruption import DEFAULT_FAILURE_WINDOW_SECONDS
from torchgate.controller.job.reconciler import Options
from torchgate.controller.leader import LeaderElector
from torchgate.controller.manager import ManagerOptions, run_as_leader
from torchgate.controller.poolservice import PoolServiceOptions
from torchgate.kube.client import KubeClient
from torchgate.stopsignals import Stopped, unless_stopped

log = logging.getLogger("torchgate.controller")

# The controller's objects are decoded JSON (trees, no reference cycles): reference counting frees
# them, and CPython's cycle collector can only re-walk the caches to find nothing. At its default
# first-generation threshold (700 allocations) it ran about a hundred times a second while a wave
# of pods was created (~100 objects per decoded pod event), and its full collections walked every
# cached pod and job.
GC_THRESHOLDS = (50_000, 20, 20)


def tune_garbage_collector() -> None:
    """Collect cycles rarely: the few there are (tracebacks, closed sessions) can wait."""
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass(frozen=True)
class Bounds:
    """The values a numeric flag accepts: ``minimum <= value`` and, when set, ``<= maximum``."""

    minimum: float
    maximum: float | None = None

    def describe(self) -> str:
        """The rule in words, as the refusal says it."""
        if self.maximum is None:
            return f"must be at least {self.minimum:g}"
        return f"must be between {self.minimum:g} and {self.maximum:g}"


# What each numeric flag accepts (argparse dest -> bounds). The Helm chart's controller.tuning and
# controller.admissionPacing values carry the same bounds in values.schema.json
# (tests/unit/test_chart_tuning.py compares them),
# so a value the controller would refuse at start is refused by `helm install` already.
FLAG_BOUNDS: Final[Mapping[str, Bounds]] = {
    "workers": Bounds(1),
    "write_concurrency": Bounds(1),
    "finish_grace_seconds": Bounds(0, 3600),
    "resync_seconds": Bounds(1),
    "starvation_seconds": Bounds(0),
    "stuck_termination_seconds": Bounds(0),
    "node_lost_seconds": Bounds(0, 3600),
    "failure_window_seconds": Bounds(0, 3600),
    "gang_backoff_seconds": Bounds(0),
    "arrival_settle_seconds": Bounds(0),
    "wave_hold_seconds": Bounds(0),
}


def flag_problems(args: argparse.Namespace) -> list[str]:
    """Why the parsed numeric flags cannot be run with (:data:`FLAG_BOUNDS`); empty when fine."""
    problems = []
    for flag, bounds in FLAG_BOUNDS.items():
        value = getattr(args, flag)
        too_large = bounds.maximum is not None and value > bounds.maximum
        if value < bounds.minimum or too_large:
            problems.append(f"--{flag.replace('_', '-')} {bounds.describe()}")
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate controller`` flags."""
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster service account)"
    )
    parser.add_argument("--namespace", help="only run PyTorchJobs of this namespace (default: all)")
    parser.add_argument(
        "--manage-unowned",
        action="store_true",
        help="also run jobs with no runPolicy.managedBy (instead of the training-operator)",
    )
    parser.add_argument(
        "--workers", type=int, default=32, help="concurrent reconciles (default 32)"
    )
    parser.add_argument(
        "--write-concurrency",
        type=int,
        default=32,
        help="pod and Service creates (and, separately, deletes) sent at once (default 32)",
    )
    parser.add_argument(
        "--finish-grace-seconds",
        type=float,
        default=5.0,
        help="when a job succeeds, its still-running pods get this long to end on their own "
        "(and stay Completed, with their logs) before they are deleted; pending pods and the "
        "pods of a failed job go at once (default 5)",
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=300.0,
        help="every job is reconciled again this often, events or not (default 300)",
    )
    parser.add_argument(
        "--starvation-seconds",
        type=float,
        default=300.0,
        help="after waiting this long, a gang blocks smaller jobs queued behind it (default 300)",
    )
    parser.add_argument(
        "--arrival-settle-seconds",
        type=float,
        default=0.25,
        help="an admission cycle woken by newly queued jobs waits until none has been queued "
        "for this long (at most 4 times as long), so jobs submitted together are decided "
        "together; 0: decide at once (default 0.25)",
    )
    parser.add_argument(
        "--wave-hold-seconds",
        type=float,
        default=2.0,
        help="when the first waiting gangs share one shape and one run limit "
        "(activeDeadlineSeconds) and gangs are due to end within half of it, admission waits "
        "up to this long for that wave to free whole, so it is packed whole and not on its "
        "first nodes; the head gang starts that much later at most; 0: off (default 2)",
    )
    parser.add_argument(
        "--stuck-termination-seconds",
        type=float,
        default=60.0,
        help="a preemptor stops waiting for victims whose pods are still there this long after "
        "their grace period ended (a lost node) and is decided again without them (default 60)",
    )
    parser.add_argument(
        "--node-lost-seconds",
        type=float,
        default=30.0,
        help="a node holding a gang's pods that stays NotReady or Unknown this long (on top of "
        "the node-monitor grace period after which Kubernetes marks it Unknown), or is deleted, "
        "is lost: the whole gang is placed again on healthy nodes and the lost node's pods are "
        "force-deleted (default 30)",
    )
    parser.add_argument(
        "--failure-window-seconds",
        type=float,
        default=DEFAULT_FAILURE_WINDOW_SECONDS,
        help="a pod whose training container fails is judged this long later: if its node is "
        "meanwhile tainted NoExecute (untolerated), deleted or lost (a GPU fault kills the "
        "program first, the node's health checker taints the node a moment later), the restart "
        "is the node's fault (not counted against backoffLimit, the node charged for "
        "quarantine); else it is the program's failure, that much later; 0: a failure is the "
        f"program's at once (default {DEFAULT_FAILURE_WINDOW_SECONDS:g})",
    )
    parser.add_argument(
        "--gang-backoff-seconds",
        type=float,
        default=10.0,
        help="first wait before re-admitting a gang that was not bound in time, or placing again "
        "elastic Workers the apiserver refused to create (a ResourceQuota); doubles, max 600 "
        "(default 10)",
    )
    parser.add_argument(
        "--gang-objects",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="where the cluster serves scheduling.k8s.io/v1beta1 Workload and PodGroup "
        "(GenericWorkload), create a Workload per job and a PodGroup per gang attempt and name it "
        "in each pod's schedulingGroup, so kube-scheduler binds a gang all at once (default on)",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold a coordination.k8s.io Lease before acting (default on)",
    )
    parser.add_argument(
        "--leader-election-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the Lease (default $POD_NAMESPACE or 'default')",
    )
    parser.add_argument(
        "--deployment",
        default=None,
        help="this controller's Deployment, in $POD_NAMESPACE or --leader-election-namespace: "
        "read when the leader stops, which takes its finalizer off the TeamQuotas only when the "
        "Deployment is gone, being deleted or scaled to zero (default: none, always take it off)",
    )
    parser.add_argument(
        "--leader-election-id",
        default="torchgate-controller",
        help="name of the Lease (default torchgate-controller)",
    )
    pool = parser.add_argument_group(
        "pool service (forecasts for the webhook, explain, simulate and top; TLS, leader only)"
    )
    pool.add_argument(
        "--pool-service-port",
        type=int,
        default=0,
        help="HTTPS port of the pool service (default 0: not served)",
    )
    pool.add_argument(
        "--pool-service-bind-address", default="0.0.0.0", help="address to listen on (default all)"
    )
    pool.add_argument("--tls-cert-file", type=Path, help="the pool service's certificate")
    pool.add_argument("--tls-private-key-file", type=Path, help="its key")
    pool.add_argument(
        "--pod-name",
        default=os.environ.get("POD_NAME") or None,
        help="this controller's pod (default $POD_NAME), labelled torchgate.io/leader=true while "
        "it leads, so the Service torchgate-controller routes to the leader; needs "
        "$POD_NAMESPACE or --leader-election-namespace",
    )
    parser.add_argument(
        "--metrics-bind-address", default="0.0.0.0", help="address of --metrics-port (default all)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        help="plain HTTP /metrics /healthz /readyz; 0 disables (default 8080)",
    )
    jsonlog.add_arguments(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    stop_help = (
        "scale the controller's Deployment to zero and wait (bounded) until its pods are gone, "
        "so its leader takes the finalizer off every TeamQuota; exits 0 (Helm's pre-delete hook)"
    )
    stopping = actions.add_parser("stop", help=stop_help, description=stop_help)
    stopping.add_argument(
        "--kubeconfig",
        default=argparse.SUPPRESS,
        help="kubeconfig file (default: in-cluster service account)",
    )
    stopping_command.add_arguments(stopping)


def run(args: argparse.Namespace) -> int:
    """Run the controller (or, with the ``stop`` action, stop a running one)."""
    if getattr(args, "action", None) == "stop":
        stopsignals.PROCESS.release()  # a one-shot command: the signals end it as they would
        return stopping_command.run(args)
    jsonlog.configure(args)
    for problem in flag_problems(args):
        print(f"torchgate controller: {problem}", file=sys.stderr)
        return 2
    if args.pool_service_port and (args.tls_cert_file is None or args.tls_private_key_file is None):
        print(
            "torchgate controller: --pool-service-port needs --tls-cert-file and "
            "--tls-private-key-file",
            file=sys.stderr,
        )
        return 2
    tune_garbage_collector()
    try:
        return stopsignals.PROCESS.run(lambda stop: _main(args, stop))
    except (OSError, ValueError) as exc:
        print(f"torchgate controller: {exc}", file=sys.stderr)
        return 1


def manager_settings(args: argparse.Namespace) -> ManagerOptions:
    """What the parsed flags ask of the manager and the reconciler."""
    return ManagerOptions(
        namespace=args.namespace,
        workers=args.workers,
        resync_seconds=args.resync_seconds,
        starvation_seconds=args.starvation_seconds,
        arrival_settle_seconds=args.arrival_settle_seconds,
        wave_hold_seconds=args.wave_hold_seconds,
        stuck_termination_seconds=args.stuck_termination_seconds,
        gang_backoff_seconds=args.gang_backoff_seconds,
        deployment=(args.leader_election_namespace, args.deployment) if args.deployment else None,
        options=Options(
            manage_unowned=args.manage_unowned,
            write_concurrency=args.write_concurrency,
            finish_grace_seconds=args.finish_grace_seconds,
            node_lost_seconds=args.node_lost_seconds,
            failure_window_seconds=args.failure_window_seconds,
            gang_objects=args.gang_objects,
        ),
    )


async def _main(args: argparse.Namespace, stop: asyncio.Event) -> int:
    try:
        api = await unless_stopped(KubeClient.connect(args.kubeconfig), stop)
    except Stopped:
        log.info("stopped while loading the cluster configuration")
        return 0
    except Exception as exc:
        raise OSError(f"cannot load the cluster configuration: {exc}") from exc
    elector = None
    if args.leader_elect:
        elector = LeaderElector(
            api,
            namespace=args.leader_election_namespace,
            name=args.leader_election_id,
            identity=f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        )
    settings = manager_settings(args)
    pool_service = None
    if args.pool_service_port:
        pod = (args.leader_election_namespace, args.pod_name) if args.pod_name else None
        pool_service = PoolServiceOptions(
            bind=args.pool_service_bind_address,
            port=args.pool_service_port,
            cert_file=args.tls_cert_file,
            key_file=args.tls_private_key_file,
            pod=pod,
        )
    try:
        return await run_as_leader(
            api,
            settings,
            elector=elector,
            metrics_bind=args.metrics_bind_address,
            metrics_port=args.metrics_port or None,
            stop=stop,
            pool_service=pool_service,
        )
    finally:
        await api.close()
