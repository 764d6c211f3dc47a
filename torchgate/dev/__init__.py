"""``torchgate dev up | down | status``: all of torchgate on this machine, in one command.

Why: what users meet is the apiserver calling the webhook (admission order, schema pruning,
``kubectl`` printing the ``torchgate:`` warnings, ``failurePolicy: Fail`` when the webhook is
away), and none of that shows in unit tests. ``up`` gives a newcomer that whole path in seconds,
with no Docker and nothing downloaded at run time:

1. build or reuse the pinned control-plane binaries (build progress on stderr);
2. start etcd, kube-apiserver, KCM, kube-scheduler and kwok *detached* on free loopback ports
   (:class:`~torchgate.controlplane.cluster.ControlPlane`, state in DIR);
3. create fake GPU nodes in pools (default ``a100-0..3`` labelled ``pool=a100`` and ``t4-0..1``
   labelled ``pool=t4``, 8 GPUs each), install both CRDs and the sample PlacementPolicy;
4. make the webhook's CA and serving certificate (IP SAN 127.0.0.1) with the ``certs`` code;
5. start ``torchgate webhook --kubeconfig`` (it watches PlacementPolicies), wait for ``/readyz``,
   register both webhook configurations by URL with the caBundle
   (:func:`torchgate.devcluster.webhook_configurations`), then wait until the apiserver really
   calls both routes (dry-run probes), because a configuration takes effect a moment after it
   is created;
6. start ``torchgate controller --manage-unowned``. If it does not come up, ``up`` says why and
   keeps the rest running: the webhook alone is useful, and a later ``up`` tries again.

Where things live: DIR defaults to ``.dev/`` at the top of the git checkout that contains the
current directory. DIR is the control plane's work dir (``kubeconfig``, ``pki/``, ``etcd/``,
``logs/``, ``state.json``); this module adds ``dev.json`` (PIDs and ports of the webhook and the
controller), ``tls/``, ``webhook.log`` and ``controller.log``.

Process rules: every process runs in its own session, so ``down`` can end its whole group; a PID
is only signalled after its start time (from ``/proc``) matched the recorded one, so a recycled
PID is never hit; state is written after every start, so even an ``up`` killed half-way leaves a
trail that the next ``up`` or ``down`` cleans. A failed ``up`` stops what it started and keeps
only the logs. ``up`` is idempotent: on a healthy cluster it says so; on one whose webhook or
controller died it restarts just those; on one whose control plane died it starts afresh.
``down`` only removes the files it knows, never DIR's other content.

Output: progress and summaries go to stderr; stdout gets only the ``export KUBECONFIG=...``
line, so ``eval "$(torchgate dev up)"`` works. Exit codes: 0 success; 1 failure (a message,
never a traceback); 2 usage error; ``status`` answers 3 when there is no dev cluster and 1 when
part of it is down.

Linux only (process identity and memory figures come from ``/proc``).

Modules: :mod:`~torchgate.dev.paths` (what ``up`` installs from, and DIR's files),
:mod:`~torchgate.dev.state` (``dev.json``), :mod:`~torchgate.dev.launch` (the webhook's and the
controller's processes and certificates), :mod:`~torchgate.dev.apiserver` (HTTP to the cluster
and the probes), :mod:`~torchgate.dev.seeds` (the real node's seed images),
:mod:`~torchgate.dev.cluster` (up, down, status) and :mod:`~torchgate.dev.command` (the command
line). The names below are the package's public interface.
"""

from __future__ import annotations

from torchgate.dev.apiserver import ApiClient, controller_healthy, wait_for_admission, webhook_ready
from torchgate.dev.cluster import DevCluster, Health, UpOptions
from torchgate.dev.command import EXIT_NOT_FOUND, add_arguments, run
from torchgate.dev.launch import (
    controller_command,
    make_certificates,
    spawn,
    stop_process,
    webhook_command,
)
from torchgate.dev.paths import (
    CA_CERT,
    CRD_DIR,
    SAMPLE_POLICY,
    SEEDS_DIR,
    TLS_CERT,
    TLS_KEY,
    DevLayout,
    default_dir,
)
from torchgate.dev.state import DevError, DevState, Product, remove_files
from torchgate.node.registry import free_port

__all__ = [
    "CA_CERT",
    "CRD_DIR",
    "EXIT_NOT_FOUND",
    "SAMPLE_POLICY",
    "SEEDS_DIR",
    "TLS_CERT",
    "TLS_KEY",
    "ApiClient",
    "DevCluster",
    "DevError",
    "DevLayout",
    "DevState",
    "Health",
    "Product",
    "UpOptions",
    "add_arguments",
    "controller_command",
    "controller_healthy",
    "default_dir",
    "free_port",
    "make_certificates",
    "remove_files",
    "run",
    "spawn",
    "stop_process",
    "wait_for_admission",
    "webhook_command",
    "webhook_ready",
]
