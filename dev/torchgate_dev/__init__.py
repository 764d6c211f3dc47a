"""torchgate-dev: ``torchgate dev up | down | status | images``, all of torchgate on this machine.

Why a distribution of its own: the local cluster's harness (a real control plane, a real node
with containerd and a registry, images built without Docker, the product image's builder) is as
large as the product and never runs where the product runs. Inside ``torchgate`` it would put Go
module files and build scripts in the product's wheel and image, where they cannot work, and
nothing would keep the core from importing it. So ``torchgate-dev`` (``dev/pyproject.toml``)
holds it, with its data, and depends on ``torchgate``, never the other way round:

- the ``torchgate`` command finds ``dev`` through the ``torchgate.commands`` entry point this
  distribution registers (:mod:`torchgate_dev.command`); without it installed, ``torchgate dev``
  says how to get it;
- ``lint-imports`` forbids every ``torchgate`` module to import ``torchgate_dev``;
- the product's wheel and its image (``Dockerfile``) are built from ``torchgate/`` alone.

It is a second distribution rather than an extra (``torchgate[dev]``) because an extra adds
dependencies, not modules: the modules would still be in the product's wheel. It is installed
beside the product in a checkout (``pip install -e . -e ./dev``, which ``scripts/test`` and
``scripts/dev-up`` do) and from its own wheel elsewhere.

Why ``torchgate dev``: what users meet is the apiserver calling the webhook (admission order,
schema pruning, ``kubectl`` printing the ``torchgate:`` warnings, ``failurePolicy: Fail`` when the
webhook is away), and none of that shows in unit tests. ``up`` gives a newcomer that whole path
in seconds, with no Docker and nothing downloaded at run time:

1. build or reuse the pinned control-plane binaries (build progress on stderr);
2. start etcd, kube-apiserver, KCM, kube-scheduler and kwok *detached* on free loopback ports
   (:class:`~torchgate_dev.controlplane.cluster.ControlPlane`, state in DIR);
3. create fake GPU nodes in pools (default ``a100-0..3`` labelled ``pool=a100`` and ``t4-0..1``
   labelled ``pool=t4``, 8 GPUs each), install the CRDs and the dev PlacementPolicy (with two
   teams' TeamQuotas);
4. make the webhook's CA and serving certificate (IP SAN 127.0.0.1) with the ``certs`` code;
5. start ``torchgate webhook --kubeconfig`` (it watches PlacementPolicies), wait for ``/readyz``,
   register both webhook configurations by URL with the caBundle
   (:func:`torchgate_dev.devcluster.webhook_configurations`), then wait until the apiserver really
   calls both routes (dry-run probes), because a configuration takes effect a moment after it
   is created;
6. start ``torchgate controller --manage-unowned``. If it does not come up, ``up`` says why and
   keeps the rest running: the webhook alone is useful, and a later ``up`` tries again.

Where things live: DIR defaults to ``.dev/`` at the top of the git checkout that contains the
current directory. DIR is the control plane's work dir (``kubeconfig``, ``pki/``, ``etcd/``,
``logs/``, ``state.json``); ``dev`` adds ``dev.json`` (PIDs and ports of the webhook and the
controller), ``tls/``, ``webhook.log`` and ``controller.log``.

Process rules: every process runs in its own session, so ``down`` can end its whole group; a PID
is only signalled after its start time (from ``/proc``) matched the recorded one, so a recycled
PID is never hit; state is written after every start, so even an ``up`` killed half-way leaves a
trail that the next ``up`` or ``down`` cleans. A failed ``up`` stops what it started and keeps
only the logs. ``up`` is idempotent: on a healthy cluster it says so; on one whose webhook or
controller died it restarts just those; on one whose webhook runs but is not what the apiserver's
configurations call (an ``up`` stopped before registering it, a configuration deleted) it
registers it again; on one whose control plane died it starts afresh (its objects are lost).
``status`` reads the registrations from the apiserver, and when something is down it ends with the
command that starts it again.
``down`` only removes the files it knows, never DIR's other content.

Output: progress and summaries go to stderr; stdout gets only the ``export KUBECONFIG=...``
line, so ``eval "$(torchgate dev up)"`` works; paths in it and in the commands ``dev`` suggests
are shell-quoted, so a DIR with spaces pastes as well. Exit codes: 0 success; 1 failure (a message,
never a traceback); 2 usage error; ``status`` answers 3 when there is no dev cluster and 1 when
part of it is down.

Linux only (process identity and memory figures come from ``/proc``).

Modules, top down (``lint-imports`` keeps these layers): :mod:`~torchgate_dev.command` (the
command line), :mod:`~torchgate_dev.cluster` (up, down, status), :mod:`~torchgate_dev.seeds` (the
real node's seed images), :mod:`~torchgate_dev.apiserver` (HTTP to the cluster and the probes),
:mod:`~torchgate_dev.launch` (the webhook's and the controller's processes and certificates),
:mod:`~torchgate_dev.state` (``dev.json``), :mod:`~torchgate_dev.paths` (what ``up`` installs
from, and DIR's files), :mod:`~torchgate_dev.devcluster` (the objects ``up`` registers and
creates, pure); below them the harness, :mod:`torchgate_dev.controlplane` (the local control
plane) and :mod:`torchgate_dev.node` (the real node and its images), and
:mod:`~torchgate_dev.packagedata` (the data files). Import from the modules; this package imports
none of them.
"""
