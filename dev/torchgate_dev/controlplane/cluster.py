"""Start, wrap or stop a real control plane: etcd, kube-apiserver, KCM, kube-scheduler and kwok.

Why local processes and not kind: the build machines have no Docker, and a plain-process control
plane starts in seconds with warm binaries. Why these components: the apiserver gives real
admission (webhooks, schema validation and pruning), the scheduler really binds pods by per-node
fit, the controller manager runs garbage collection, namespace deletion and ServiceAccounts (pods
are refused without the ``default`` ServiceAccount), and kwok plays the kubelet for fake GPU
nodes.

Lifecycle rules this module keeps:

- Everything listens on free loopback ports, and all state (certificates, the admin token, etcd
  data, one log file per process) lives in one work dir, so several control planes can run side
  by side and leave nothing elsewhere.
- Each process runs in its own session/process group, so ``stop()`` can end the group
  (SIGTERM, then SIGKILL) even if a process forked helpers. Before signalling, the process start
  time recorded at launch is compared with ``/proc`` so a recycled PID is never hit.
- A state file (``state.json``) records PIDs and endpoints, so a control plane started with
  ``start(detach=True)`` outlives this Python object (``torchgate dev``) and
  ``ControlPlane.from_state(workdir)`` can stop it later. Without ``detach`` the processes are
  stopped by the context manager, by ``atexit``, and on SIGTERM/SIGHUP (turned into
  KeyboardInterrupt). Even SIGKILL of the owner is survivable: the state file names the owner
  process, and the next start sweeps control planes whose owner is gone.
- *Attach* mode wraps an existing cluster (``TORCHGATE_E2E_KUBECONFIG``, e.g. kind) behind the
  same interface and never starts or stops anything.
- The Kubernetes version is chosen when the binaries are (a supported one, see
  :mod:`~torchgate_dev.controlplane.versions`); what counts is what the apiserver reports once
  ready, recorded as :attr:`ControlPlane.kubernetes_version` and in the state file.

Linux only: process identity and memory figures come from ``/proc``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TypeVar

import yaml

from torchgate_dev.controlplane import kwok, processes
from torchgate_dev.controlplane.binaries import Binaries, ensure_binaries
from torchgate_dev.controlplane.components import (
    KUBELET_LEASES,
    ClusterFeatures,
    NodeLeases,
    apiserver_command,
    configuration_files,
    controller_manager_command,
    etcd_command,
    kwok_command,
    scheduler_command,
)
from torchgate_dev.controlplane.errors import ControlPlaneError, KubectlError
from torchgate_dev.controlplane.kubeconfig import read_kubeconfig
from torchgate_dev.controlplane.kubectl import KUBECTL_ENV, run_kubectl
from torchgate_dev.controlplane.layout import Layout, Ports
from torchgate_dev.controlplane.pki import write_pki, write_private
from torchgate_dev.controlplane.processes import ManagedProcess
from torchgate_dev.controlplane.realnode import REAL_NODE_NAME, Hooks, RealNode
from torchgate_dev.controlplane.state import PlaneState, orphaned, read_raw, this_process
from torchgate_dev.controlplane.supervision import (
    TERMINATION_GUARD,
    child_environment,
    http_ok,
    insecure_context,
    server_version,
    stop_tiers,
    tail,
)
from torchgate_dev.node import config as node_config

__all__ = [
    "ATTACH_ENV",
    "KUBECTL_ENV",
    "REAL_NODE_NAME",
    "ClusterFeatures",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
]

ATTACH_ENV: Final = "TORCHGATE_E2E_KUBECONFIG"

_POLL_SECONDS = 0.05
_STOP_GRACE_SECONDS = 5.0

_T = TypeVar("_T")


class ControlPlane:
    """A local control plane (started here or restored from a state file), or an attached one.

    Use as a context manager, or call :meth:`start` and :meth:`stop`::

        with ControlPlane() as cp:
            cp.kubectl("get", "nodes")
    """

    def __init__(
        self,
        *,
        binaries: Binaries | None = None,
        features: ClusterFeatures | None = None,
        workdir: Path | None = None,
        kubectl: str | None = None,
        startup_timeout: float = 120.0,
        audit_log: bool = False,
        real_node: bool = False,
        node_name: str = REAL_NODE_NAME,
        node_labels: Mapping[str, str] | None = None,
        leases: NodeLeases = KUBELET_LEASES,
    ) -> None:
        """Describe a control plane to start; nothing runs until :meth:`start`.

        Args:
            binaries: The executables (their Kubernetes version is the control plane's);
                default: :func:`ensure_binaries` at start, of ``$TORCHGATE_KUBERNETES_VERSION``
                or else the default supported version.
            features: Feature gates, runtime config and KCM controllers beyond the defaults
                (e.g. ``GenericWorkload`` and ``scheduling.k8s.io/v1beta1`` on 1.37).
            workdir: Where state, keys and logs go. Default: a fresh temp dir that
                :meth:`stop` removes. A given dir is kept (logs stay readable) but its
                previous generated content is replaced at start.
            kubectl: kubectl executable; default ``$TORCHGATE_KUBECTL`` or ``kubectl`` on PATH.
            startup_timeout: Seconds :meth:`start` waits for everything to be ready.
            audit_log: Make the apiserver log every request to :attr:`audit_log_path`
                (opt-in: it costs disk and a little latency; RBAC tests read it).
            real_node: Also start a real node (containerd, CoreDNS, a kubelet named
                ``node_name``) where pods really run; see :mod:`torchgate_dev.node.runtime`.
            node_name: The real node's name (and ``kubernetes.io/hostname``).
            node_labels: Extra labels of the real node (it always has
                ``torchgate.io/real-node=true``).
            leases: How long the kwok nodes' Leases last (and so when kube-controller-manager
                marks a silent node ``Unknown``); a scale rig lengthens them.
        """
        self._audit = audit_log
        self._node = RealNode(name=node_name, labels=dict(node_labels or {})) if real_node else None
        self._binaries = binaries
        self._features = features or ClusterFeatures()
        self._leases = leases
        self._kubernetes_version: str | None = None
        self._requested_workdir = workdir
        self._workdir: Path | None = None
        self._owns_workdir = False
        self._kubectl_override = kubectl
        self._startup_timeout = startup_timeout
        self._processes: list[ManagedProcess] = []
        self._server: str | None = None
        self._token: str | None = None
        self._ca_file: Path | None = None
        self._kubeconfig: Path | None = None
        self._startup_seconds: float | None = None
        self._attached = False
        self._commands: dict[str, tuple[str, ...]] = {}
        self._atexit_registered = False
        self._guarding = False

    # ---------------------------------------------------------------- alternative constructors

    @classmethod
    def attach(cls, kubeconfig: Path, *, kubectl: str | None = None) -> Self:
        """Wrap an existing cluster; :meth:`start` only checks it answers, :meth:`stop` no-ops.

        Raises:
            ControlPlaneError: The kubeconfig is unreadable or has no usable current context.
        """
        try:
            raw = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise ControlPlaneError(f"cannot read kubeconfig {kubeconfig}: {error}") from error
        target = read_kubeconfig(raw, base_dir=kubeconfig.parent)
        plane = cls(kubectl=kubectl)
        plane._attached = True
        plane._kubeconfig = kubeconfig
        plane._server = target.server
        plane._token = target.token
        plane._workdir = Path(tempfile.mkdtemp(prefix="torchgate-attach-"))
        plane._owns_workdir = True
        plane._ca_file = target.ca_file
        if target.ca_data is not None:
            plane._ca_file = plane._workdir / "ca.crt"
            plane._ca_file.write_bytes(target.ca_data)
        return plane

    @classmethod
    def attach_from_environment(cls, *, kubectl: str | None = None) -> Self | None:
        """:meth:`attach` to ``$TORCHGATE_E2E_KUBECONFIG`` when it is set, else None."""
        path = os.environ.get(ATTACH_ENV)
        return cls.attach(Path(path), kubectl=kubectl) if path else None

    @classmethod
    def from_state(cls, workdir: Path, *, kubectl: str | None = None) -> Self:
        """The control plane whose state file is in ``workdir`` (e.g. one started detached).

        Raises:
            ControlPlaneError: No state file there, or it is unreadable.
        """
        layout = Layout(workdir)
        try:
            state = PlaneState.from_json(json.loads(layout.state.read_text(encoding="utf-8")))
            node = RealNode.from_json(state.real_node) if state.real_node is not None else None
        except FileNotFoundError as error:
            raise ControlPlaneError(f"no control plane state in {workdir}") from error
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ControlPlaneError(
                f"unreadable control plane state {layout.state}: {error}"
            ) from error
        plane = cls(kubectl=kubectl, workdir=workdir)
        plane._server = state.server
        plane._token = state.token
        plane._ca_file = state.ca_file
        plane._kubeconfig = state.kubeconfig
        plane._startup_seconds = state.startup_seconds
        plane._kubernetes_version = state.kubernetes_version
        plane._features = state.features
        plane._owns_workdir = state.owns_workdir
        plane._node = node
        plane._workdir = workdir
        plane._processes = list(state.processes)
        return plane

    # ---------------------------------------------------------------- properties

    @property
    def attached(self) -> bool:
        """Whether this wraps an existing cluster rather than processes started here."""
        return self._attached

    @property
    def registry(self) -> str | None:
        """``127.0.0.1:<port>`` of the real node's image registry (None without a real node)."""
        return self._node.registry if self._node else None

    @property
    def node_name(self) -> str | None:
        """The real node's name, when this control plane has one."""
        return self._node.name if self._node else None

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig."""
        return self._require(self._kubeconfig, "kubeconfig")

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:<port>`` when local."""
        return self._require(self._server, "server")

    @property
    def token(self) -> str | None:
        """The admin bearer token (None for an attached cluster that uses certificates)."""
        return self._token

    @property
    def ca_file(self) -> Path | None:
        """CA bundle that verifies the apiserver (None if the kubeconfig relies on system CAs)."""
        return self._ca_file

    @property
    def workdir(self) -> Path:
        """Work dir (state, keys, logs; a scratch dir in attach mode)."""
        return self._require(self._workdir, "workdir")

    @property
    def kubernetes_version(self) -> str | None:
        """The version the apiserver reported once ready (``1.37.2``); None before start."""
        return self._kubernetes_version

    @property
    def features(self) -> ClusterFeatures:
        """What this control plane turns on beyond the defaults."""
        return self._features

    @property
    def startup_seconds(self) -> float | None:
        """Wall-clock seconds :meth:`start` took until everything was ready."""
        return self._startup_seconds

    @property
    def audit_log_path(self) -> Path | None:
        """The apiserver's audit log (JSON lines), when started with ``audit_log=True``."""
        if not self._audit or self._workdir is None:
            return None
        return Layout(self._workdir).audit_log

    def _require(self, value: _T | None, what: str) -> _T:
        if value is None:
            raise ControlPlaneError(f"control plane not started: no {what} yet")
        return value

    def is_running(self) -> bool:
        """Whether every process started here is still alive (always True when attached)."""
        if self._attached:
            return True
        return bool(self._processes) and all(
            processes.is_alive(process) for process in self._processes
        )

    def pids(self) -> dict[str, int]:
        """The process id of each live process started here, by name (none when attached)."""
        return {p.name: p.pid for p in self._processes if processes.is_alive(p)}

    def peak_rss(self) -> dict[str, int]:
        """Peak resident memory (bytes, ``VmHWM``) of each live process started here."""
        peaks: dict[str, int] = {}
        for process in self._processes:
            peak = processes.memory_kib(process)[1]
            if peak:
                peaks[process.name] = peak * 1024
        return peaks

    # ---------------------------------------------------------------- kubectl

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; text in and out.

        Raises:
            KubectlError: It exited non-zero and ``check`` is true.
            ControlPlaneError: kubectl is missing or timed out.
        """
        return run_kubectl(
            args,
            kubeconfig=self.kubeconfig,
            cache_dir=self.workdir / "kubectl-cache",
            override=self._kubectl_override,
            input=input,
            check=check,
            timeout=timeout,
        )

    # ---------------------------------------------------------------- start

    def start(self, *, detach: bool = False) -> Self:
        """Start everything and wait until it is ready (attach mode: check it answers).

        Args:
            detach: Let the processes outlive this object and this Python process; stop them
                with ``ControlPlane.from_state(workdir).stop()``.

        Raises:
            ControlPlaneError: Something did not come up; the message names it and quotes its
                log. Whatever had started is stopped again.
        """
        began = time.monotonic()
        if self._attached:
            self.kubectl("get", "--raw=/readyz")
            with contextlib.suppress(KubectlError, ValueError, KeyError, TypeError):
                reported = json.loads(self.kubectl("get", "--raw=/version").stdout)["gitVersion"]
                self._kubernetes_version = str(reported).removeprefix("v")
            self._startup_seconds = time.monotonic() - began
            return self
        if self._processes:
            raise ControlPlaneError("control plane already started")
        binaries = self._binaries or ensure_binaries()
        if self._requested_workdir is None:
            type(self).stop_orphans()
        layout = Layout(self._prepare_workdir())
        TERMINATION_GUARD.acquire()
        self._guarding = True
        try:
            self._launch(binaries, layout, began + self._startup_timeout)
        except BaseException:
            self.stop()
            raise
        if detach:
            self._release_guard()
        self._startup_seconds = time.monotonic() - began
        self._write_state(layout, detached=detach)
        if not detach:
            atexit.register(self._stop_quietly)
            self._atexit_registered = True
        return self

    def _prepare_workdir(self) -> Path:
        if self._requested_workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="torchgate-cp-"))
            self._owns_workdir = True
            return self._workdir
        workdir = self._requested_workdir.resolve()
        layout = Layout(workdir)
        if self._running_in(workdir):
            raise ControlPlaneError(
                f"a control plane is already running in {workdir}; stop it first "
                "(ControlPlane.from_state(workdir).stop())"
            )
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in layout.generated():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        self._workdir = workdir
        return workdir

    @classmethod
    def _running_in(cls, workdir: Path) -> bool:
        """Whether the state file in ``workdir`` names processes that still run."""
        try:
            previous = cls.from_state(workdir)
        except ControlPlaneError:
            return False  # no state, or unreadable: nothing we could stop anyway
        return any(processes.is_alive(process) for process in previous._processes)

    @classmethod
    def _node_owner_running(cls, workdir: Path) -> bool:
        """Whether the control plane in ``workdir`` still runs for someone.

        One whose owning process died (a test run killed half-way) is an orphan: it is stopped
        here, real node included, and counts as not running.
        """
        if not cls._running_in(workdir):
            return False
        if orphaned(read_raw(Layout(workdir).state)):
            with contextlib.suppress(ControlPlaneError):
                cls.from_state(workdir).stop()
            return False
        return True

    def _launch(self, binaries: Binaries, layout: Layout, deadline: float) -> None:
        ports = Ports.pick()
        node = self._node
        node_binaries = RealNode.find_binaries(binaries) if node is not None else None
        address = node_config.NodeNetwork().gateway if node is not None else "127.0.0.1"
        self._server = f"https://{address}:{ports.apiserver}"
        self._token = secrets.token_urlsafe(32)
        self._ca_file = layout.ca_cert
        self._kubeconfig = layout.kubeconfig
        self._write_configuration(binaries, layout)
        layout.logs.mkdir(parents=True, exist_ok=True)
        if node is not None and node_binaries is not None:
            # The apiserver listens on the node address: the bridge first.
            node.claim(
                layout,
                node_binaries,
                owner_running=self._node_owner_running,
                record=lambda: self._write_state(layout, detached=False),
            )

        self._spawn("etcd", etcd_command(binaries, layout, ports), layout)
        self._wait_until(
            {"etcd /health": lambda: http_ok(f"http://127.0.0.1:{ports.etcd_client}/health")},
            deadline,
        )
        self._spawn(
            "kube-apiserver",
            apiserver_command(
                binaries,
                layout,
                ports,
                audit=self._audit,
                real_node=node is not None,
                features=self._features,
            ),
            layout,
        )
        api = ssl.create_default_context(cafile=str(layout.ca_cert))
        self._wait_until(
            {"kube-apiserver /readyz": lambda: http_ok(f"{self.server}/readyz", context=api)},
            deadline,
        )
        self._kubernetes_version = server_version(self.server, api, self._token)
        self._spawn(
            "kube-controller-manager",
            controller_manager_command(
                binaries,
                layout,
                ports,
                real_node=node is not None,
                features=self._features,
                leases=self._leases,
            ),
            layout,
        )
        self._spawn(
            "kube-scheduler",
            scheduler_command(binaries, layout, ports, features=self._features),
            layout,
        )
        self._spawn("kwok", kwok_command(binaries, layout, ports, self._leases), layout)
        insecure = insecure_context()
        default_account = f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait_until(
            {
                "kube-controller-manager /healthz": lambda: http_ok(
                    f"https://127.0.0.1:{ports.controller_manager}/healthz", context=insecure
                ),
                "kube-scheduler /healthz": lambda: http_ok(
                    f"https://127.0.0.1:{ports.scheduler}/healthz", context=insecure
                ),
                "kwok /healthz": lambda: http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"),
                "ServiceAccount default/default": lambda: http_ok(
                    default_account, context=api, token=self._token
                ),
            },
            deadline,
        )
        if node is not None and node_binaries is not None:
            hooks = Hooks(
                spawn=lambda name, argv: self._spawn(name, argv, layout),
                wait_until=lambda checks: self._wait_until(checks, deadline),
                record=lambda: self._write_state(layout, detached=False),
                apply=lambda manifest: self.kubectl("apply", "-f", "-", input=manifest),
            )
            node.start(node_binaries, layout, server=self.server, token=self._token, hooks=hooks)

    def restart_apiserver(self, *, down_seconds: float = 0.0, timeout: float = 300.0) -> list[str]:
        """Stop kube-apiserver (SIGTERM, then SIGKILL), wait ``down_seconds``, start it again.

        etcd keeps the cluster's state; every client must ride through, as through an apiserver
        upgrade. ``timeout`` bounds the wait for ``/readyz`` (its caches refill from etcd). A
        component that exited while the apiserver was away is started again once it is ready
        (:meth:`restart_exited`).

        Returns:
            The components that had exited and were started again (usually none).

        Raises:
            ControlPlaneError: Not a control plane started by this object, or the apiserver
                did not come back within ``timeout`` seconds.
        """
        found = [p for p in self._processes if p.name == "kube-apiserver"]
        if self._attached or len(found) != 1 or "kube-apiserver" not in self._commands:
            raise ControlPlaneError("only a control plane started here can restart its apiserver")
        layout = Layout(self.workdir)
        self._stop_group(found)
        processes.reap(found[0])
        self._processes.remove(found[0])
        time.sleep(down_seconds)
        self._spawn("kube-apiserver", self._commands["kube-apiserver"], layout)
        (apiserver,) = [p for p in self._processes if p.name == "kube-apiserver"]
        api = ssl.create_default_context(cafile=str(layout.ca_cert))
        deadline = time.monotonic() + timeout
        while not http_ok(f"{self.server}/readyz", context=api):
            if processes.exit_status(apiserver) is not None or time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver did not come back; last lines of its log:\n{tail(apiserver)}"
                )
            time.sleep(_POLL_SECONDS)
        return self.restart_exited()

    def restart_exited(self) -> list[str]:
        """Start again, the same way, every component that exited; their names.

        What a real control plane's supervisor does (the kubelet restarts a static pod that
        exits). kube-scheduler, for one, exits on purpose when it finds its cache inconsistent
        with the apiserver, which an apiserver restart in the middle of its binds can cause.
        """
        layout = Layout(self.workdir)
        exited = [p for p in self._processes if processes.exit_status(p) is not None]
        for process in exited:
            processes.reap(process)
            self._processes.remove(process)
            self._spawn(process.name, self._commands[process.name], layout)
        return [process.name for process in exited]

    def _write_configuration(self, binaries: Binaries, layout: Layout) -> None:
        write_pki(layout)
        try:
            stages = kwok.render_stages(binaries.stages_dir)
        except ValueError as error:
            raise ControlPlaneError(f"kwok stages: {error}") from error
        files = configuration_files(
            layout,
            server=self.server,
            admin_token=self._require(self._token, "token"),
            node_tokens=self._node.token_lines() if self._node is not None else (),
            audit=self._audit,
            stages=stages,
        )
        for path, content in files.items():
            write_private(path, content.encode())

    def _spawn(self, name: str, argv: Sequence[str], layout: Layout) -> None:
        log_path = layout.logs / f"{name}.log"
        self._commands[name] = tuple(argv)
        self._processes.append(
            processes.spawn(name, argv, log_path, cwd=layout.root, env=child_environment())
        )
        # Written after every start, so a process killed mid-start-up leaves a trail to clean.
        self._write_state(layout, detached=False)

    def _wait_until(self, checks: Mapping[str, Callable[[], bool]], deadline: float) -> None:
        pending = dict(checks)
        while pending:
            self._raise_if_any_exited()
            for what in [what for what, check in pending.items() if check()]:
                del pending[what]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {self._startup_timeout:.0f}s waiting for "
                    f"{', '.join(pending)}; logs in {self.workdir / 'logs'}\n"
                    + "\n".join(
                        f"  {process.name}:\n{tail(process)}" for process in self._processes
                    )
                )
            time.sleep(_POLL_SECONDS)

    def _raise_if_any_exited(self) -> None:
        for process in self._processes:
            status = processes.exit_status(process)
            if status is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with status {status} during start-up; "
                    f"last lines of {process.log_path}:\n{tail(process)}"
                )

    def _write_state(self, layout: Layout, *, detached: bool) -> None:
        PlaneState(
            server=self.server,
            token=self._token,
            ca_file=self._ca_file,
            kubeconfig=self.kubeconfig,
            startup_seconds=self._startup_seconds,
            detached=detached,
            owner=None if detached else this_process(),
            owns_workdir=self._owns_workdir,
            processes=tuple(self._processes),
            real_node=self._node.to_json() if self._node else None,
            kubernetes_version=self._kubernetes_version,
            features=self._features,
        ).save(layout.state)

    # ---------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop every process group (SIGTERM, then SIGKILL) and remove what this object owns.

        Safe to call more than once, on a failed start, and from ``from_state`` copies. In
        attach mode only the scratch dir is removed; the cluster is left alone.
        """
        if self._atexit_registered:
            atexit.unregister(self._stop_quietly)
            self._atexit_registered = False
        running, self._processes = self._processes, []
        self._release_guard()
        node = self._node.teardown(self._workdir) if self._node and self._workdir else None
        if node is not None:  # the kubelet first, or it restarts what the teardown kills
            kubelets = [p for p in running if p.name == "kubelet"]
            self._stop_group(kubelets)
            node()
        for tier in stop_tiers(running):
            self._stop_group(tier)
            for process in tier:
                processes.reap(process)
        if node is not None:  # what outlives containerd: shims, mounts, netns, the bridge
            node()
            if self._node is not None:
                self._node.release(self.workdir)
        if self._workdir is not None:
            Layout(self._workdir).state.unlink(missing_ok=True)
            if self._owns_workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)

    @staticmethod
    def _stop_group(group: Sequence[ManagedProcess]) -> None:
        for process in group:
            processes.signal_group(process, signal.SIGTERM)
        if not processes.wait_gone(group, _STOP_GRACE_SECONDS, _POLL_SECONDS):
            for process in group:
                processes.signal_group(process, signal.SIGKILL)
            processes.wait_gone(group, _STOP_GRACE_SECONDS, _POLL_SECONDS)

    def _release_guard(self) -> None:
        if self._guarding:
            self._guarding = False
            TERMINATION_GUARD.release()

    @classmethod
    def stop_orphans(cls, root: Path | None = None) -> list[Path]:
        """Stop control planes in temp dirs under ``root`` whose owning process is gone.

        An owner killed with SIGKILL (a CI timeout, an OOM kill) runs no cleanup; its control
        plane would otherwise run forever. Detached control planes have no owner and are never
        touched. Runs automatically when a control plane starts in a temp dir.

        Returns:
            The work dirs whose control planes were stopped.
        """
        stopped: list[Path] = []
        for workdir in sorted((root or Path(tempfile.gettempdir())).glob("torchgate-cp-*")):
            if not orphaned(read_raw(Layout(workdir).state)):
                continue
            with contextlib.suppress(ControlPlaneError):
                cls.from_state(workdir).stop()
                stopped.append(workdir)
        return stopped

    def _stop_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
