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

Linux only: process identity and memory figures come from ``/proc``.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Final, Self, TypeVar

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchgate.controlplane import kwok, processes
from torchgate.controlplane.binaries import (
    Binaries,
    BinariesUnavailable,
    ensure_binaries,
    ensure_coredns,
)
from torchgate.controlplane.processes import ManagedProcess
from torchgate.node import config as node_config
from torchgate.node import runtime as node_runtime
from torchgate.node.images import node_cache
from torchgate.node.registry import RegistryClient, RegistryError, free_port

ATTACH_ENV: Final = "TORCHGATE_E2E_KUBECONFIG"
REAL_NODE_NAME: Final = "real-0"
KUBECTL_ENV: Final = "TORCHGATE_KUBECTL"
STATE_FILE: Final = "state.json"
ADMIN_USER: Final = "torchgate-admin"
SERVICE_CIDR: Final = "10.96.0.0/16"
POD_CIDR: Final = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
# KCM controllers torchgate relies on; the rest (jobs, deployments, ...) only costs start time.
CONTROLLERS: Final = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    # The TaintNodesByCondition admission plugin gives every new node the
    # node.kubernetes.io/not-ready:NoSchedule taint; only this controller removes it once the
    # node (kwok) reports Ready. Without it nothing ever schedules.
    "node-lifecycle-controller",
)

REAL_NODE_CONTROLLERS: Final = (
    "endpointslice-controller",
    # The apiserver's Service proxy (`kubectl get --raw .../services/<svc>/proxy/...`, a README
    # troubleshooting step) still picks a backend from the v1 Endpoints object.
    "endpoints-controller",
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
)

_STATE_VERSION = 1
_POLL_SECONDS = 0.05
_STOP_GRACE_SECONDS = 5.0
_LOG_TAIL_LINES = 15

_T = TypeVar("_T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, reached, or read back; the message says where."""


class KubectlError(subprocess.CalledProcessError):
    """``kubectl`` exited non-zero; ``cmd`` is ``["kubectl", *args]``, ``str()`` adds stderr."""

    def __str__(self) -> str:
        command = " ".join(str(part) for part in self.cmd)
        stderr = (self.stderr or "").strip()
        return f"{command} exited with {self.returncode}: {stderr or '(no stderr)'}"


# --------------------------------------------------------------------------- layout and records


@dataclass(frozen=True, slots=True)
class Layout:
    """Where everything of one control plane lives inside its work dir."""

    root: Path

    @property
    def pki(self) -> Path:
        """Certificates and keys."""
        return self.root / "pki"

    @property
    def ca_cert(self) -> Path:
        """The CA that signed the apiserver's serving certificate (clients trust this)."""
        return self.pki / "ca.crt"

    @property
    def serving_cert(self) -> Path:
        """The apiserver's serving certificate."""
        return self.pki / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        """The apiserver's serving key."""
        return self.pki / "apiserver.key"

    @property
    def service_account_key(self) -> Path:
        """Signs and verifies ServiceAccount tokens (apiserver and KCM)."""
        return self.pki / "sa.key"

    @property
    def tokens(self) -> Path:
        """Static token file with the admin user."""
        return self.pki / "tokens.csv"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (token auth); used by KCM, the scheduler, kwok and tests."""
        return self.root / "kubeconfig"

    @property
    def scheduler_config(self) -> Path:
        """KubeSchedulerConfiguration."""
        return self.root / "scheduler.yaml"

    @property
    def kwok_config(self) -> Path:
        """The Stage set kwok plays."""
        return self.root / "kwok-stages.yaml"

    @property
    def etcd_data(self) -> Path:
        """The data dir of etcd."""
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        """One log file per process."""
        return self.root / "logs"

    @property
    def state(self) -> Path:
        """PIDs and endpoints, for ``from_state``."""
        return self.root / STATE_FILE

    @property
    def audit_policy(self) -> Path:
        """The apiserver's audit policy (written only with ``ControlPlane(audit_log=True)``)."""
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log, one JSON event per line (with ``audit_log=True``)."""
        return self.logs / "audit.log"

    @property
    def kubelet_client_cert(self) -> Path:
        """The apiserver's client certificate for kubelets (logs, exec, port-forward)."""
        return self.pki / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        """Its key."""
        return self.pki / "apiserver-kubelet-client.key"

    @property
    def node(self) -> Path:
        """The real node's per-run files (configuration, kubelet root, container state)."""
        return self.root / "node"

    def generated(self) -> tuple[Path, ...]:
        """Everything ``start()`` writes (and wipes before writing again)."""
        return (
            self.pki,
            self.kubeconfig,
            self.scheduler_config,
            self.kwok_config,
            self.audit_policy,
            self.etcd_data,
            self.logs,
            self.state,
            self.node,
        )


@dataclass(frozen=True, slots=True)
class Ports:
    """Loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def pick(cls) -> Self:
        """Six distinct ports that were free a moment ago (the OS hands them out)."""
        with contextlib.ExitStack() as stack:
            sockets = [stack.enter_context(socket.socket()) for _ in range(6)]
            for sock in sockets:
                sock.bind(("127.0.0.1", 0))
            numbers = [int(sock.getsockname()[1]) for sock in sockets]
        return cls(*numbers)


# --------------------------------------------------------------------------- pure: commands


def etcd_command(binaries: Binaries, layout: Layout, ports: Ports) -> list[str]:
    """Run etcd on loopback; ``--unsafe-no-fsync`` because the data is thrown away."""
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=default",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_command(
    binaries: Binaries,
    layout: Layout,
    ports: Ports,
    *,
    audit: bool = False,
    real_node: bool = False,
) -> list[str]:
    """kube-apiserver with token auth, Node+RBAC authorization and the default admission set.

    With ``audit``, every request is logged (at the Metadata level, see :func:`audit_policy`) to
    ``layout.audit_log``; tests read it to see which calls an identity made and their status.
    """
    audit_flags = (
        [
            f"--audit-policy-file={layout.audit_policy}",
            f"--audit-log-path={layout.audit_log}",
            "--audit-log-format=json",
            # Written before the response is sent, so a test reads what it just caused.
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]
        if audit
        else []
    )
    # With a real node the apiserver listens on the node address (the pod bridge's own address),
    # so pods reach it through the "kubernetes" Service (kube-proxy), and only this machine does;
    # its endpoint is reconciled as usual. Without one it listens on loopback, and the Service
    # would get a loopback endpoint, which endpoint validation refuses: no reconciler then.
    # The real node's kubelet serves logs and exec on its node address; kwok nodes' Hostname
    # addresses resolve nowhere, so the address types the apiserver tries start with InternalIP.
    address = node_config.NodeNetwork().gateway if real_node else "127.0.0.1"
    node_flags = (
        [
            f"--kubelet-client-certificate={layout.kubelet_client_cert}",
            f"--kubelet-client-key={layout.kubelet_client_key}",
            "--kubelet-preferred-address-types=InternalIP,Hostname,ExternalIP",
        ]
        if real_node
        else ["--endpoint-reconciler-type=none"]
    )
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--bind-address={address}",
        f"--advertise-address={address}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={layout.serving_cert}",
        f"--tls-private-key-file={layout.serving_key}",
        f"--token-auth-file={layout.tokens}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={layout.service_account_key}",
        f"--service-account-signing-key-file={layout.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Privileged pods are the webhook's decision (PlacementPolicy.allowPrivileged).
        "--allow-privileged=true",
        *audit_flags,
        *node_flags,
    ]


def audit_policy() -> dict[str, Any]:
    """Log who did what to which object and the response code, never a request/response body.

    One event per request at ResponseComplete (ResponseStarted too for watches, which may never
    complete); RequestReceived would only duplicate each event.
    """
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata"}],
    }


def controller_manager_command(
    binaries: Binaries, layout: Layout, ports: Ports, *, real_node: bool = False
) -> list[str]:
    """kube-controller-manager with the controllers in :data:`CONTROLLERS`.

    With a real node also the controllers of what can run there: EndpointSlices (cluster DNS
    answers a headless Service's name, the rendezvous master, from them; kube-proxy routes
    Services by them) and Endpoints (the apiserver's Service proxy), Deployments, ReplicaSets
    and PodDisruptionBudgets (torchgate installed in the cluster). Without a real node nothing
    reads slices, and every pod change of a wave would cost a slice write.
    """
    controllers = [*CONTROLLERS, *(REAL_NODE_CONTROLLERS if real_node else ())]
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={layout.kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        "--leader-elect=false",
        # The defaults (20 QPS) throttle garbage collection of thousands of pods on the scale rig.
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
        f"--controllers={','.join(controllers)}",
        f"--root-ca-file={layout.ca_cert}",
        f"--service-account-private-key-file={layout.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def scheduler_command(binaries: Binaries, layout: Layout, ports: Ports) -> list[str]:
    """kube-scheduler; its kubeconfig and ``leaderElect: false`` are in the config file."""
    return [
        str(binaries.kube_scheduler),
        f"--config={layout.scheduler_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
    ]


def kwok_command(binaries: Binaries, layout: Layout, ports: Ports) -> list[str]:
    """Run kwok for nodes annotated ``kwok.x-k8s.io/node=fake`` only."""
    return [
        str(binaries.kwok),
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={layout.kwok_config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={kwok.NODE_SELECTOR_FLAG}",
        "--manage-nodes-with-label-selector=",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
        f"--server-address=127.0.0.1:{ports.kwok}",
    ]


def scheduler_configuration(kubeconfig: Path) -> dict[str, Any]:
    """KubeSchedulerConfiguration (the ``--kubeconfig`` flag is deprecated)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        # The default 50 QPS would cap binding at 50 pods/s on the scale rig (thousands of pods).
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False},
    }


def admin_kubeconfig(server: str, ca_file: Path, token: str) -> dict[str, Any]:
    """A kubeconfig for the admin token user, trusting ``ca_file``."""
    name = "torchgate-local"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": ADMIN_USER}}],
        "current-context": name,
    }


@dataclass(frozen=True, slots=True)
class KubeconfigTarget:
    """What the current context of a kubeconfig points at."""

    server: str
    ca_file: Path | None
    ca_data: bytes | None
    token: str | None


def read_kubeconfig(raw: object, *, base_dir: Path) -> KubeconfigTarget:
    """The server, CA and token of the current context of a parsed kubeconfig.

    Raises:
        ControlPlaneError: The kubeconfig lacks a usable current context.
    """

    def section(kind: str, name: object) -> Mapping[str, Any]:
        entries = raw.get(kind + "s") if isinstance(raw, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping) and entry.get("name") == name:
                body = entry.get(kind)
                if isinstance(body, Mapping):
                    return body
        raise ControlPlaneError(f"kubeconfig: no {kind} named {name!r} (in {kind}s[])")

    current = raw.get("current-context") if isinstance(raw, Mapping) else None
    if not isinstance(current, str) or not current:
        raise ControlPlaneError("kubeconfig: current-context is not set")
    context = section("context", current)
    cluster = section("cluster", context.get("cluster"))
    user = section("user", context.get("user")) if context.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise ControlPlaneError(
            f"kubeconfig: cluster {context.get('cluster')!r} has no https server"
        )
    ca_path = cluster.get("certificate-authority")
    ca_data = cluster.get("certificate-authority-data")
    token = user.get("token")
    return KubeconfigTarget(
        server=server,
        ca_file=(base_dir / ca_path) if isinstance(ca_path, str) and ca_path else None,
        ca_data=base64.b64decode(ca_data) if isinstance(ca_data, str) and ca_data else None,
        token=token if isinstance(token, str) and token else None,
    )


# --------------------------------------------------------------------------- key material


def _private_key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
    days: int,
    *,
    organization: str | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, subject)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    name = x509.Name(attributes)
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer else (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256())


def write_pki(layout: Layout, *, days: int = 365) -> None:
    """A CA, the apiserver's serving certificate (loopback + in-cluster names), an SA key."""
    layout.pki.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate(
        "torchgate-local-ca",
        ca_key,
        None,
        [
            (x509.BasicConstraints(ca=True, path_length=0), True),
            (_key_usage(cert_sign=True), True),
        ],
        days,
    )
    serving_key = ec.generate_private_key(ec.SECP256R1())
    service_ip = next(ipaddress.IPv4Network(SERVICE_CIDR).hosts())
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        x509.IPAddress(ipaddress.IPv4Address(node_config.NodeNetwork().gateway)),
        x509.IPAddress(service_ip),
        x509.DNSName("localhost"),
        *(
            x509.DNSName(dns)
            for dns in (
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    serving_cert = _certificate(
        "kube-apiserver",
        serving_key,
        (ca_cert, ca_key),
        [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (_key_usage(cert_sign=False), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
            (x509.SubjectAlternativeName(names), False),
        ],
        days,
    )
    kubelet_client_key = ec.generate_private_key(ec.SECP256R1())
    kubelet_client_cert = _certificate(
        node_config.APISERVER_KUBELET_CLIENT,
        kubelet_client_key,
        (ca_cert, ca_key),
        [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (_key_usage(cert_sign=False), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
        days,
        organization="system:masters",
    )
    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(layout.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(layout.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(layout.serving_key, _private_key_pem(serving_key))
    _write_private(layout.service_account_key, _private_key_pem(service_account_key))
    _write_private(
        layout.kubelet_client_cert, kubelet_client_cert.public_bytes(serialization.Encoding.PEM)
    )
    _write_private(layout.kubelet_client_key, _private_key_pem(kubelet_client_key))


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


# --------------------------------------------------------------------------- process handling


def _stop_tiers(processes: Sequence[ManagedProcess]) -> list[list[ManagedProcess]]:
    """Stop order: clients, then the apiserver, then etcd.

    An apiserver whose etcd vanished first spends its whole grace period retrying it.
    """
    last = ("kube-apiserver", "etcd")
    tiers = [[p for p in processes if p.name not in last]]
    tiers += [[p for p in processes if p.name == name] for name in last]
    return [tier for tier in tiers if tier]


def _tail(process: ManagedProcess) -> str:
    return processes.log_tail(process.log_path, _LOG_TAIL_LINES)


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return env


def _interrupt(signum: int, frame: FrameType | None) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


class _TerminationGuard:
    """Turns SIGTERM/SIGHUP into KeyboardInterrupt while a control plane runs here.

    The default action of those signals kills Python without running ``finally`` blocks or
    atexit hooks, which would leave the processes behind. KeyboardInterrupt unwinds the stack,
    and pytest answers it by stopping the session and tearing fixtures down. Only default
    handlers are replaced (never someone else's), only from the main thread (Python's rule),
    and they come back when the last control plane here stops.
    """

    _SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._replaced: list[signal.Signals] = []

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1 and threading.current_thread() is threading.main_thread():
                for signum in self._SIGNALS:
                    if signal.getsignal(signum) is signal.SIG_DFL:
                        signal.signal(signum, _interrupt)
                        self._replaced.append(signum)

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or threading.current_thread() is not threading.main_thread():
                return
            for signum in self._replaced:
                if signal.getsignal(signum) is _interrupt:
                    signal.signal(signum, signal.SIG_DFL)
            self._replaced.clear()


_TERMINATION_GUARD = _TerminationGuard()


def _owner_is_alive(owner: object) -> bool:
    """Whether the process recorded as a control plane's owner still runs (unsure: True)."""
    if not isinstance(owner, Mapping):
        return True
    try:
        pid, ticks = int(owner["pid"]), int(owner["start_ticks"])
    except (KeyError, TypeError, ValueError):
        return True
    stat = processes.proc_stat(pid)
    return stat is not None and stat[1] == ticks and stat[0] != "Z"


def _this_process() -> dict[str, int]:
    stat = processes.proc_stat(os.getpid())
    return {"pid": os.getpid(), "start_ticks": stat[1] if stat else 0}


# --------------------------------------------------------------------------- HTTP probes


def _insecure_context() -> ssl.SSLContext:
    # KCM and the scheduler serve /healthz with self-signed certificates made at start-up.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _node_ready(url: str, context: ssl.SSLContext, token: str | None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            node = json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# --------------------------------------------------------------------------- the control plane


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
        workdir: Path | None = None,
        kubectl: str | None = None,
        startup_timeout: float = 120.0,
        audit_log: bool = False,
        real_node: bool = False,
        node_name: str = REAL_NODE_NAME,
        node_labels: Mapping[str, str] | None = None,
    ) -> None:
        """Describe a control plane to start; nothing runs until :meth:`start`.

        Args:
            binaries: The executables; default: :func:`ensure_binaries` at start.
            workdir: Where state, keys and logs go. Default: a fresh temp dir that
                :meth:`stop` removes. A given dir is kept (logs stay readable) but its
                previous generated content is replaced at start.
            kubectl: kubectl executable; default ``$TORCHGATE_KUBECTL`` or ``kubectl`` on PATH.
            startup_timeout: Seconds :meth:`start` waits for everything to be ready.
            audit_log: Make the apiserver log every request to :attr:`audit_log_path`
                (opt-in: it costs disk and a little latency; RBAC tests read it).
            real_node: Also start a real node (containerd, CoreDNS, a kubelet named
                ``node_name``) where pods really run; see :mod:`torchgate.node.runtime`.
            node_name: The real node's name (and ``kubernetes.io/hostname``).
            node_labels: Extra labels of the real node (it always has
                ``torchgate.io/real-node=true``).
        """
        self._audit = audit_log
        self._real_node = real_node
        self._node_name = node_name
        self._node_labels = dict(node_labels or {})
        self._node_since: float | None = None
        self._registry: str | None = None
        self._kube_proxy: Path | None = None
        self._node_tokens = tuple(secrets.token_urlsafe(32) for _ in range(3))
        self._binaries = binaries
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
            raw = json.loads(layout.state.read_text(encoding="utf-8"))
            if raw.get("version") != _STATE_VERSION:
                raise ValueError(f"unsupported state version {raw.get('version')!r}")
            recorded = [ManagedProcess.from_json(item) for item in raw["processes"]]
            plane = cls(kubectl=kubectl, workdir=workdir)
            plane._server = str(raw["server"])
            plane._token = str(raw["token"])
            plane._ca_file = Path(raw["ca_file"])
            plane._kubeconfig = Path(raw["kubeconfig"])
            seconds = raw["startup_seconds"]
            plane._startup_seconds = None if seconds is None else float(seconds)
            plane._owns_workdir = bool(raw.get("owns_workdir", False))
            node = raw.get("real_node")
            if isinstance(node, Mapping):
                plane._real_node = True
                plane._node_name = str(node["name"])
                plane._node_since = float(node["since"])
                plane._registry = str(node["registry"]) if node.get("registry") else None
                plane._kube_proxy = Path(node["kube_proxy"]) if node.get("kube_proxy") else None
        except FileNotFoundError as error:
            raise ControlPlaneError(f"no control plane state in {workdir}") from error
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ControlPlaneError(
                f"unreadable control plane state {layout.state}: {error}"
            ) from error
        plane._workdir = workdir
        plane._processes = recorded
        return plane

    # ---------------------------------------------------------------- properties

    @property
    def attached(self) -> bool:
        """Whether this wraps an existing cluster rather than processes started here."""
        return self._attached

    @property
    def registry(self) -> str | None:
        """``127.0.0.1:<port>`` of the real node's image registry (None without a real node)."""
        return self._registry

    @property
    def node_name(self) -> str | None:
        """The real node's name, when this control plane has one."""
        return self._node_name if self._real_node else None

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
        argv = [
            self._kubectl_executable(),
            f"--kubeconfig={self.kubeconfig}",
            # Discovery cache per cluster: random ports would litter ~/.kube/cache otherwise.
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        try:
            result = subprocess.run(
                argv,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=_child_environment(),
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} timed out after {timeout}s"
            ) from error
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, ["kubectl", *args], result.stdout, result.stderr)
        return result

    def _kubectl_executable(self) -> str:
        candidate = self._kubectl_override or os.environ.get(KUBECTL_ENV) or "kubectl"
        found = shutil.which(candidate)
        if found is None:
            raise ControlPlaneError(
                f"kubectl not found ({candidate!r}); put it on PATH or set {KUBECTL_ENV}"
            )
        return found

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
            self._startup_seconds = time.monotonic() - began
            return self
        if self._processes:
            raise ControlPlaneError("control plane already started")
        binaries = self._binaries or ensure_binaries()
        if self._requested_workdir is None:
            type(self).stop_orphans()
        layout = Layout(self._prepare_workdir())
        _TERMINATION_GUARD.acquire()
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
        try:
            raw = json.loads(Layout(workdir).state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return True
        if (
            isinstance(raw, Mapping)
            and not raw.get("detached")
            and not _owner_is_alive(raw.get("owner"))
        ):
            with contextlib.suppress(ControlPlaneError):
                cls.from_state(workdir).stop()
            return False
        return True

    def _launch(self, binaries: Binaries, layout: Layout, deadline: float) -> None:
        ports = Ports.pick()
        node_binaries: node_runtime.NodeBinaries | None = None
        if self._real_node:
            try:
                node_binaries = node_runtime.find_binaries(
                    binaries.kubelet, binaries.kube_proxy, ensure_coredns()
                )
            except (node_runtime.NodeUnavailable, BinariesUnavailable) as error:
                raise ControlPlaneError(f"real node: {error}") from error
        address = node_config.NodeNetwork().gateway if self._real_node else "127.0.0.1"
        self._server = f"https://{address}:{ports.apiserver}"
        self._token = secrets.token_urlsafe(32)
        self._ca_file = layout.ca_cert
        self._kubeconfig = layout.kubeconfig
        self._write_configuration(binaries, layout)
        layout.logs.mkdir(parents=True, exist_ok=True)
        if node_binaries is not None:  # the apiserver listens on the node address: bridge first
            self._claim_node(layout, node_binaries)

        self._spawn("etcd", etcd_command(binaries, layout, ports), layout)
        self._wait_until(
            {"etcd /health": lambda: _http_ok(f"http://127.0.0.1:{ports.etcd_client}/health")},
            deadline,
        )
        self._spawn(
            "kube-apiserver",
            apiserver_command(
                binaries, layout, ports, audit=self._audit, real_node=self._real_node
            ),
            layout,
        )
        api = ssl.create_default_context(cafile=str(layout.ca_cert))
        self._wait_until(
            {"kube-apiserver /readyz": lambda: _http_ok(f"{self.server}/readyz", context=api)},
            deadline,
        )
        self._spawn(
            "kube-controller-manager",
            controller_manager_command(binaries, layout, ports, real_node=self._real_node),
            layout,
        )
        self._spawn("kube-scheduler", scheduler_command(binaries, layout, ports), layout)
        self._spawn("kwok", kwok_command(binaries, layout, ports), layout)
        insecure = _insecure_context()
        default_account = f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait_until(
            {
                "kube-controller-manager /healthz": lambda: _http_ok(
                    f"https://127.0.0.1:{ports.controller_manager}/healthz", context=insecure
                ),
                "kube-scheduler /healthz": lambda: _http_ok(
                    f"https://127.0.0.1:{ports.scheduler}/healthz", context=insecure
                ),
                "kwok /healthz": lambda: _http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"),
                "ServiceAccount default/default": lambda: _http_ok(
                    default_account, context=api, token=self._token
                ),
            },
            deadline,
        )
        if node_binaries is not None:
            self._start_node(node_binaries, layout, deadline)

    def _claim_node(self, layout: Layout, node_binaries: node_runtime.NodeBinaries) -> None:
        """Take this machine's real node, clear what a dead earlier owner left, make the bridge."""
        cache = node_cache()
        network = node_config.NodeNetwork()
        since = time.time()
        try:
            stale = node_runtime.claim(cache, layout.root, since, self._node_owner_running)
        except node_runtime.NodeUnavailable as error:
            raise ControlPlaneError(f"real node: {error}") from error
        self._node_since = since
        self._kube_proxy = node_binaries.kube_proxy
        self._write_state(layout, detached=False)
        if stale is not None:  # its owner is gone; what its node left must go first
            node_runtime.teardown(
                node_config.NodePaths(work=Layout(stale.workdir).node, cache=cache),
                network,
                since=stale.since,
                ctr=node_binaries.ctr,
                kube_proxy=node_binaries.kube_proxy,
            )
        try:
            node_runtime.ensure_bridge(network)
        except node_runtime.NodeUnavailable as error:
            raise ControlPlaneError(f"real node: {error}") from error

    def _start_node(
        self, node_binaries: node_runtime.NodeBinaries, layout: Layout, deadline: float
    ) -> None:
        """Start the real node's processes in order and wait until the node is Ready."""
        cache = node_cache()
        paths = node_config.NodePaths(work=layout.node, cache=cache)
        network = node_config.NodeNetwork()
        ports = node_runtime.NodePorts(
            registry=free_port(),
            kubelet=free_port(),
            kube_proxy_healthz=free_port(),
            kube_proxy_metrics=free_port(),
            kubelet_healthz=free_port(),
            dns_health=free_port(),
            dns_ready=free_port(),
        )
        self._registry = f"127.0.0.1:{ports.registry}"
        self._write_state(layout, detached=False)
        endpoints = node_runtime.NodeEndpoints(
            server=self.server,
            ca_file=layout.ca_cert,
            node_token=self._node_tokens[0],
            dns_token=self._node_tokens[1],
            proxy_token=self._node_tokens[2],
        )
        try:
            node_runtime.prepare(
                paths,
                network,
                node_binaries,
                endpoints,
                ports,
                node_name=self._node_name,
                registry_storage=cache / "registry",
            )
        except node_runtime.NodeUnavailable as error:
            raise ControlPlaneError(f"real node: {error}") from error
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(node_config.dns_cluster_role()))
        node_runtime.collect_registry_garbage(node_binaries, paths)
        self._spawn("registry", node_runtime.registry_command(node_binaries, paths), layout)
        self._spawn("containerd", node_runtime.containerd_command(node_binaries, paths), layout)
        self._wait_until(
            {
                "registry /v2/": lambda: _http_ok(f"http://127.0.0.1:{ports.registry}/v2/"),
                "containerd": lambda: node_runtime.containerd_ready(node_binaries, paths),
            },
            deadline,
        )
        node_runtime.ensure_sandbox_image(node_binaries, paths, f"127.0.0.1:{ports.registry}")
        with contextlib.suppress(RegistryError):
            node_runtime.prune_images(
                node_binaries, paths, RegistryClient(self._registry).tagged_digests()
            )
        self._spawn("coredns", node_runtime.coredns_command(node_binaries, paths), layout)
        self._wait_until(
            {"coredns /ready": lambda: _http_ok(f"http://127.0.0.1:{ports.dns_ready}/ready")},
            deadline,
        )
        self._spawn(
            "kubelet",
            node_runtime.kubelet_command(
                node_binaries, paths, network, self._node_name, self._node_labels
            ),
            layout,
        )
        self._spawn("kube-proxy", node_runtime.kube_proxy_command(node_binaries, paths), layout)
        node_url = f"{self.server}/api/v1/nodes/{self._node_name}"
        api = ssl.create_default_context(cafile=str(layout.ca_cert))
        self._wait_until(
            {
                f"node {self._node_name} Ready": lambda: _node_ready(node_url, api, self._token),
                "kube-proxy /healthz": lambda: _http_ok(
                    f"http://127.0.0.1:{ports.kube_proxy_healthz}/healthz"
                ),
            },
            deadline,
        )

    def _write_configuration(self, binaries: Binaries, layout: Layout) -> None:
        token = self._require(self._token, "token")
        write_pki(layout)
        tokens = [f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"']
        if self._real_node:
            node_token, dns_token, proxy_token = self._node_tokens
            user = node_config.node_user(self._node_name)
            proxy = node_config.KUBE_PROXY_USER
            tokens.append(f'{node_token},{user},{user},"system:nodes"')
            tokens.append(f"{dns_token},{node_config.DNS_USER},{node_config.DNS_USER}")
            tokens.append(f"{proxy_token},{proxy},{proxy}")
        _write_private(layout.tokens, "".join(line + "\n" for line in tokens).encode())
        config = admin_kubeconfig(self.server, layout.ca_cert, token)
        _write_private(layout.kubeconfig, yaml.safe_dump(config, sort_keys=False).encode())
        layout.scheduler_config.write_text(
            yaml.safe_dump(scheduler_configuration(layout.kubeconfig), sort_keys=False),
            encoding="utf-8",
        )
        if self._audit:
            layout.audit_policy.write_text(
                yaml.safe_dump(audit_policy(), sort_keys=False), encoding="utf-8"
            )
        try:
            stages = kwok.render_stages(binaries.stages_dir)
        except ValueError as error:
            raise ControlPlaneError(f"kwok stages: {error}") from error
        layout.kwok_config.write_text(
            stages + "---\n" + yaml.safe_dump(kwok.controller_configuration(), sort_keys=False),
            encoding="utf-8",
        )

    def _spawn(self, name: str, argv: Sequence[str], layout: Layout) -> None:
        log_path = layout.logs / f"{name}.log"
        self._processes.append(
            processes.spawn(name, argv, log_path, cwd=layout.root, env=_child_environment())
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
                        f"  {process.name}:\n{_tail(process)}" for process in self._processes
                    )
                )
            time.sleep(_POLL_SECONDS)

    def _raise_if_any_exited(self) -> None:
        for process in self._processes:
            status = processes.exit_status(process)
            if status is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with status {status} during start-up; "
                    f"last lines of {process.log_path}:\n{_tail(process)}"
                )

    def _write_state(self, layout: Layout, *, detached: bool) -> None:
        state = {
            "version": _STATE_VERSION,
            "server": self.server,
            "token": self._token,
            "ca_file": str(self._ca_file),
            "kubeconfig": str(self.kubeconfig),
            "startup_seconds": self._startup_seconds,
            "detached": detached,
            # Whose lifetime bounds the processes; a dead owner makes them orphans.
            "owner": None if detached else _this_process(),
            "owns_workdir": self._owns_workdir,
            "processes": [process.to_json() for process in self._processes],
            "real_node": (
                {
                    "name": self._node_name,
                    "since": self._node_since,
                    "registry": self._registry,
                    "kube_proxy": str(self._kube_proxy) if self._kube_proxy else None,
                }
                if self._node_since is not None
                else None
            ),
        }
        _write_private(layout.state, json.dumps(state, indent=2).encode())

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
        node = self._node_teardown()
        if node is not None:  # the kubelet first, or it restarts what the teardown kills
            kubelets = [p for p in running if p.name == "kubelet"]
            self._stop_group(kubelets)
            node()
        for tier in _stop_tiers(running):
            self._stop_group(tier)
            for process in tier:
                processes.reap(process)
        if node is not None:  # what outlives containerd: shims, mounts, netns, the bridge
            node()
            node_runtime.release_claim(node_cache(), self.workdir)
            self._node_since = None
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

    def _node_teardown(self) -> Callable[[], None] | None:
        """The real node's teardown, if one was started (or its start was attempted)."""
        if self._node_since is None or self._workdir is None:
            return None
        paths = node_config.NodePaths(work=Layout(self._workdir).node, cache=node_cache())
        since = self._node_since
        ctr = shutil.which("ctr")
        kube_proxy = self._kube_proxy

        def teardown() -> None:
            node_runtime.teardown(
                paths,
                node_config.NodeNetwork(),
                since=since,
                ctr=Path(ctr) if ctr else None,
                kube_proxy=kube_proxy,
            )

        return teardown

    def _release_guard(self) -> None:
        if self._guarding:
            self._guarding = False
            _TERMINATION_GUARD.release()

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
            try:
                raw = json.loads(Layout(workdir).state.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(raw, Mapping) or _owner_is_alive(raw.get("owner")):
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
