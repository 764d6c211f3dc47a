"""``torchgate dev`` on the command line: flags, actions, exit codes and what goes to stdout.

Progress and summaries go to stderr; stdout gets only the ``export KUBECONFIG=...`` line (with
``TORCHGATE_CONTROLLER`` and its CA for ``torchgate explain`` and ``simulate``). Exit
codes: 0 success; 1 failure (a message, never a traceback); 2 usage error; ``status`` answers
:data:`EXIT_NOT_FOUND` when there is no dev cluster and 1 when part of it is down.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Final

from torchgate_dev import devcluster
from torchgate_dev.cluster import DevCluster, UpOptions, report_to_stderr
from torchgate_dev.controlplane import components, versions
from torchgate_dev.paths import default_dir
from torchgate_dev.state import DevError, DevState

EXIT_NOT_FOUND: Final = 3


def _pool(value: str) -> devcluster.NodePool:
    try:
        return devcluster.parse_pool(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (0 = any free port)")
    return int(value)


def _kubernetes_version(value: str) -> str:
    try:
        return versions.supported().select(value)
    except versions.UnsupportedVersion as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _feature_gates(value: str) -> dict[str, bool]:
    try:
        return components.parse_feature_gates(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _runtime_config(value: str) -> dict[str, str]:
    try:
        return components.parse_runtime_config(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _controllers(value: str) -> tuple[str, ...]:
    names = tuple(filter(None, (name.strip() for name in value.split(","))))
    try:
        components.ClusterFeatures(controllers=names)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return names


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 1 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r} is not between 1 and 3600 seconds")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate dev`` actions and flags."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the dev cluster keeps its state (default: .dev at the top of this checkout)",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up",
        parents=[common],
        help="start the local cluster, webhook and controller (idempotent)",
        description="Start a local control plane with fake GPU nodes, the torchgate webhook "
        "(registered with the apiserver) and the controller. Prints the KUBECONFIG export line "
        "on stdout; everything else goes to stderr.",
    )
    up.add_argument(
        "--pool",
        dest="pools",
        metavar="NAME=COUNT[xGPUS][:dra]",
        action="append",
        type=_pool,
        help="a pool of fake GPU nodes NAME-0.. labelled pool=NAME, ':dra' for GPUs published "
        "in ResourceSlices (repeatable; default: a100=4x8, t4=2x8 and dra=2x8:dra)",
    )
    supported = versions.supported()
    up.add_argument(
        "--kubernetes-version",
        metavar="VERSION",
        type=_kubernetes_version,
        default=None,
        help=f"the control plane's Kubernetes version, one of {supported.describe()}; default "
        f"${versions.VERSION_ENV}, else {supported.default} (built on first use, then cached)",
    )
    up.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        type=_feature_gates,
        default={},
        help="feature gates for kube-apiserver, kube-controller-manager and kube-scheduler "
        "(e.g. GenericWorkload=true)",
    )
    up.add_argument(
        "--runtime-config",
        metavar="GROUP/VERSION=BOOL,...",
        type=_runtime_config,
        default={},
        help="API versions the apiserver serves beyond its defaults "
        "(e.g. scheduling.k8s.io/v1beta1=true)",
    )
    up.add_argument(
        "--kcm-controllers",
        metavar="NAME,...",
        type=_controllers,
        default=(),
        help="kube-controller-manager controllers to run beyond torchgate's set "
        "(e.g. resourceclaim-controller)",
    )
    up.add_argument(
        "--no-controller", action="store_true", help="do not start torchgate controller"
    )
    up.add_argument(
        "--no-sample-policy",
        action="store_true",
        help="do not install the dev PlacementPolicies and TeamQuotas "
        "(dev-placementpolicy.yaml: dev-a100, dev-dra, 2 TeamQuotas)",
    )
    up.add_argument(
        "--webhook-port", type=_port, default=0, help="the webhook's port (default: a free one)"
    )
    up.add_argument(
        "--no-real-node",
        action="store_true",
        help="no real node (containerd + kubelet): only fake GPU nodes, nothing really runs",
    )
    up.add_argument(
        "--no-seed-images",
        action="store_true",
        help="do not build the seeds' images for the real node in the background",
    )
    up.add_argument(
        "--timeout",
        type=_seconds,
        default=120.0,
        help="seconds to wait for each part to be ready (default 120)",
    )
    down = actions.add_parser(
        "down",
        parents=[common],
        help="stop everything and remove the state",
        description="Stop the controller, the webhook and the control plane; remove the state.",
    )
    down.add_argument(
        "--keep-logs", action="store_true", help="keep logs/, webhook.log and controller.log"
    )
    actions.add_parser(
        "images",
        parents=[common],
        help="build the seeds' images for the real node (waits for a build in progress)",
        description="Build pytorch-demo and kubeflowkatib/pytorch-mnist from the seeds, and "
        "kubeflow/pytorch-dist-mnist (the upstream examples' image seeds 000 and 001 follow), "
        "and push them to the real node's registry; cached on their inputs, so a second run "
        "takes seconds. Progress goes to stderr.",
    )
    actions.add_parser(
        "status",
        parents=[common],
        help="show what runs",
        description="Show PIDs, endpoints and readiness; exit 0 when up, 1 when partly "
        "down, 3 when there is no dev cluster.",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``torchgate dev ACTION``."""
    root = args.dir if args.dir is not None else default_dir()
    dev = DevCluster(root)
    try:
        with _interruptible():
            if args.action == "up":
                return _run_up(dev, args)
            if args.action == "down":
                return _run_down(dev, keep_logs=args.keep_logs)
            if args.action == "images":
                return _run_images(dev)
            return _run_status(dev)
    except DevError as error:
        report_to_stderr(f"error: {error}")
        return 1
    except KeyboardInterrupt:
        report_to_stderr("interrupted")
        return 130
    except Exception as error:  # the command-line boundary: one line, never a traceback
        report_to_stderr(f"unexpected {type(error).__name__}: {' '.join(str(error).split())}")
        return 1


def up_options(args: argparse.Namespace) -> UpOptions:
    """What ``up``'s parsed flags ask for.

    Raises:
        DevError: The pools cannot be made (a name given twice).
    """
    pools = tuple(args.pools) if args.pools else devcluster.DEFAULT_POOLS
    try:
        devcluster.pool_nodes(pools)
    except ValueError as error:
        raise DevError(str(error)) from None
    return UpOptions(
        pools=pools,
        kubernetes_version=args.kubernetes_version,
        features=components.ClusterFeatures(
            feature_gates=args.feature_gates,
            runtime_config=args.runtime_config,
            controllers=args.kcm_controllers,
        ),
        controller=not args.no_controller,
        sample_policy=not args.no_sample_policy,
        webhook_port=args.webhook_port,
        timeout=args.timeout,
        real_node=not args.no_real_node,
        seed_images=not args.no_seed_images,
    )


def _run_up(dev: DevCluster, args: argparse.Namespace) -> int:
    options = up_options(args)
    dev.up(options)
    health = dev.health()
    for line in dev.describe(health):
        print(line, file=sys.stderr)
    print(f"  stop it with: {dev.command('down')}", file=sys.stderr)
    print(dev.exports(health), flush=True)
    return 0


def _run_images(dev: DevCluster) -> int:
    built = dev.build_images()
    for reference, digest in sorted(built.items()):
        report_to_stderr(f"{reference} {digest}")
    return 0


def _run_down(dev: DevCluster, *, keep_logs: bool) -> int:
    if dev.down(keep_logs=keep_logs):
        kept = f"; logs kept in {dev.layout.root}" if keep_logs else ""
        report_to_stderr(f"stopped and removed the dev cluster in {dev.layout.root}{kept}")
    else:
        report_to_stderr(f"no dev cluster in {dev.layout.root}; nothing to stop")
    return 0


def _run_status(dev: DevCluster) -> int:
    health = dev.health()
    if not health.exists:
        report_to_stderr(
            f"no dev cluster in {dev.layout.root} (start one with: {dev.command('up')})"
        )
        return EXIT_NOT_FOUND
    state = health.state or DevState()
    controller_started = state.controller is not None
    up = (
        health.control_plane_running
        and health.apiserver_ready
        and health.webhook_ok
        and (health.controller_ok or not controller_started)
    )
    report_to_stderr(f"{'up' if up else 'PARTLY DOWN'} in {dev.layout.root}")
    for line in dev.describe(health):
        print(line, file=sys.stderr)
    if not health.control_plane_running:
        report_to_stderr(
            f"start it afresh with: {dev.command('up')} (its objects are lost), "
            f"or stop it: {dev.command('down')}"
        )
    elif not up:
        report_to_stderr(f"start what is down with: {dev.command('up')}")
    if health.control_plane_running:
        print(dev.exports(health), flush=True)
    return 0 if up else 1


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so a killed ``up`` still stops what it started."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        del frame
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    for signum, handler in previous.items():
        if handler in (signal.SIG_DFL, None):
            signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler in (signal.SIG_DFL, None):
                signal.signal(signum, handler or signal.SIG_DFL)
