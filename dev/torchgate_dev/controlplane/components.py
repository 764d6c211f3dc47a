"""The components' command lines and configuration files, as pure functions of layout and ports.

Rules kept here: every component listens on loopback only (the apiserver on the node address when
there is a real node, see :func:`apiserver_command`); the controller manager runs only the
controllers torchgate relies on (:data:`CONTROLLERS`, plus :data:`REAL_NODE_CONTROLLERS` with a
real node); nothing elects a leader (one of each per control plane). The same command lines serve
every supported Kubernetes version (:mod:`~torchgate_dev.controlplane.versions`): none of the flags
and controller names used here differs between them. What a caller turns on beyond that (feature
gates, API versions, more KCM controllers, e.g. for DRA or ``GenericWorkload``) is a
:class:`ClusterFeatures` parameter, never hard-coded here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from torchgate_dev.controlplane import kwok
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.kubeconfig import ADMIN_USER, admin_kubeconfig
from torchgate_dev.controlplane.layout import Layout, Ports
from torchgate_dev.node import config as node_config

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
    # node (kwok) reports Ready. Without it nothing ever schedules. It also turns a node that
    # stops heartbeating Unknown and taints it node.kubernetes.io/unreachable:NoExecute.
    "node-lifecycle-controller",
    # What a real cluster does to pods on sick and gone nodes, so torchgate meets it here too:
    # evicting pods from nodes with NoExecute taints they do not tolerate (a health taint, or
    # unreachable after the pods' default 300 s), and force-deleting the pods of deleted nodes
    # and terminating pods on out-of-service nodes.
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    # Dynamic Resource Allocation: creates a pod's ResourceClaims from the ResourceClaimTemplates
    # it names (and removes them with the pod); without it a pod claiming GPUs through a template
    # never schedules. Its name in kube-controller-manager is "resourceclaim-controller".
    "resourceclaim-controller",
    # ... and deletes the pods whose allocated devices get a NoExecute device taint (in their
    # ResourceSlice or from a DeviceTaintRule), as a real 1.36+ cluster does: torchgate meets that
    # eviction (``DeletionByDeviceTaintManager``) and restarts the gang whole.
    "device-taint-eviction-controller",
)

REAL_NODE_CONTROLLERS: Final = (
    "endpointslice-controller",
    # The apiserver's Service proxy (`kubectl get --raw .../services/<svc>/proxy/...`, a README
    # troubleshooting step) still picks a backend from the v1 Endpoints object.
    "endpoints-controller",
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    # The chart's pre-delete hook is a Job (`torchgate controller stop`): without this controller
    # it never gets a pod and `helm uninstall` waits out its timeout on it.
    "job-controller",
)


_FEATURE_GATE: Final = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_API_VERSION: Final = re.compile(r"[a-z0-9.-]+(/[a-z0-9.-]+)?")
_CONTROLLER: Final = re.compile(r"-?[a-z0-9-]+|\*")


@dataclass(frozen=True, slots=True)
class NodeLeases:
    """How long a kwok node's Lease lasts, and so when kube-controller-manager calls it lost.

    kwok renews each node's Lease every quarter of its duration, as a kubelet does, so the rig's
    lease writes grow with its nodes: 500 a second at 5,000 nodes with the kubelet's 40 s. On a
    2-core machine simulating thousands of nodes, kwok falls behind under a burst of pods and
    nodes go ``NotReady`` though nothing failed (then torchgate rightly restarts the gangs on
    them). A scale rig gives them a longer lease; every other plane keeps the kubelet's 40 s,
    which the node-loss tests and the goodput benchmark time against.

    kube-controller-manager's node-monitor grace period keeps the kubelet default's ratio to the
    lease, 1.25 (50 s for 40 s, its default since Kubernetes 1.32).

    Raises:
        ValueError: A duration under 4 s (kwok renews every quarter: at least once a second).
    """

    duration_seconds: int = 40

    def __post_init__(self) -> None:
        if self.duration_seconds < 4:
            raise ValueError(f"a node lease of {self.duration_seconds} s is under 4 s")

    @property
    def grace_seconds(self) -> int:
        """kube-controller-manager's ``--node-monitor-grace-period``, in seconds."""
        return self.duration_seconds * 5 // 4


KUBELET_LEASES: Final = NodeLeases()
"""The kubelet's defaults: a 40 s Lease, Unknown after 50 s (every plane but a scale rig's)."""


@dataclass(frozen=True, slots=True)
class ClusterFeatures:
    """What a control plane turns on beyond its defaults; empty by default.

    ``feature_gates`` go to kube-apiserver, kube-controller-manager and kube-scheduler alike (a
    gate such as ``GenericWorkload`` must agree among them); ``runtime_config`` enables API
    versions on the apiserver (``{"scheduling.k8s.io/v1beta1": "true"}``); ``controllers`` adds
    KCM controllers to :data:`CONTROLLERS` (``resourceclaim-controller`` for DRA claims made from
    templates, ``podgroup-protection-controller`` for PodGroups).

    Raises:
        ValueError: A name the components would refuse (checked here so the message comes
            before any process starts).
    """

    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Mapping[str, str] = field(default_factory=dict)
    controllers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for gate in self.feature_gates:
            if not _FEATURE_GATE.fullmatch(gate):
                raise ValueError(f"{gate!r} is not a feature gate name (e.g. GenericWorkload)")
        for api, value in self.runtime_config.items():
            if not _API_VERSION.fullmatch(api) or not value or "," in value:
                raise ValueError(
                    f"{api}={value} is not a runtime-config entry "
                    "(e.g. scheduling.k8s.io/v1beta1=true)"
                )
        for controller in self.controllers:
            if not _CONTROLLER.fullmatch(controller):
                raise ValueError(f"{controller!r} is not a KCM controller name")

    def __bool__(self) -> bool:
        """Whether anything is turned on beyond the defaults."""
        return bool(self.feature_gates or self.runtime_config or self.controllers)

    def describe(self) -> str:
        """``feature gates A=true; runtime config g/v=true; controllers c`` (what is set)."""
        parts = [
            (
                "feature gates",
                ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items())),
            ),
            (
                "runtime config",
                ",".join(f"{k}={v}" for k, v in sorted(self.runtime_config.items())),
            ),
            ("KCM controllers", ",".join(self.controllers)),
        ]
        return "; ".join(f"{what} {value}" for what, value in parts if value) or "none"

    def to_json(self) -> dict[str, Any]:
        """JSON form (for a state file)."""
        return {
            "feature_gates": dict(self.feature_gates),
            "runtime_config": dict(self.runtime_config),
            "controllers": list(self.controllers),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ClusterFeatures:
        """Inverse of :meth:`to_json`; raises ValueError/TypeError/AttributeError on bad input."""
        return cls(
            feature_gates={str(k): bool(v) for k, v in raw.get("feature_gates", {}).items()},
            runtime_config={str(k): str(v) for k, v in raw.get("runtime_config", {}).items()},
            controllers=tuple(str(c) for c in raw.get("controllers", [])),
        )

    def feature_gate_flags(self) -> list[str]:
        """``--feature-gates=A=true,B=false`` (sorted), or nothing."""
        if not self.feature_gates:
            return []
        gates = ",".join(
            f"{gate}={str(on).lower()}" for gate, on in sorted(self.feature_gates.items())
        )
        return [f"--feature-gates={gates}"]

    def runtime_config_flags(self) -> list[str]:
        """``--runtime-config=group/version=true,...`` (sorted), or nothing."""
        if not self.runtime_config:
            return []
        entries = ",".join(f"{api}={value}" for api, value in sorted(self.runtime_config.items()))
        return [f"--runtime-config={entries}"]


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``A=true,B=false`` (the components' own flag syntax) as a mapping; blank: none.

    Raises:
        ValueError: An entry is not ``Name=true`` or ``Name=false``.
    """
    gates: dict[str, bool] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        gate, _, value = entry.partition("=")
        if value.lower() not in ("true", "false") or not _FEATURE_GATE.fullmatch(gate):
            raise ValueError(
                f"{entry!r} is not Name=true or Name=false (e.g. GenericWorkload=true)"
            )
        gates[gate] = value.lower() == "true"
    return gates


def parse_runtime_config(text: str) -> dict[str, str]:
    """``group/version=true,...`` (kube-apiserver's ``--runtime-config`` syntax); blank: none.

    An entry without ``=`` means ``=true``, as for the apiserver.

    Raises:
        ValueError: An entry is not ``group/version[=value]``.
    """
    config: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        api, equals, value = entry.partition("=")
        value = value if equals else "true"
        if not _API_VERSION.fullmatch(api) or not value:
            raise ValueError(
                f"{entry!r} is not group/version[=value] (e.g. scheduling.k8s.io/v1beta1=true)"
            )
        config[api] = value
    return config


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
    features: ClusterFeatures = ClusterFeatures(),
) -> list[str]:
    """kube-apiserver with token auth, Node+RBAC authorization and the default admission set.

    With ``audit``, every request is logged (at the Metadata level, see :func:`audit_policy`) to
    ``layout.audit_log``; tests read it to see which calls an identity made and their status.
    ``features`` adds its feature gates and runtime config.
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
        *features.feature_gate_flags(),
        *features.runtime_config_flags(),
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
    binaries: Binaries,
    layout: Layout,
    ports: Ports,
    *,
    real_node: bool = False,
    features: ClusterFeatures = ClusterFeatures(),
    leases: NodeLeases = KUBELET_LEASES,
) -> list[str]:
    """kube-controller-manager with the controllers in :data:`CONTROLLERS`.

    ``features`` adds its controllers (each once) and feature gates; ``leases`` sets the
    node-monitor grace period after which a node that stopped renewing is ``Unknown``.

    With a real node also the controllers of what can run there: EndpointSlices (cluster DNS
    answers a headless Service's name, the rendezvous master, from them; kube-proxy routes
    Services by them) and Endpoints (the apiserver's Service proxy), Deployments, ReplicaSets
    and PodDisruptionBudgets (torchgate installed in the cluster), and Jobs (the chart's
    pre-delete hook). Without a real node nothing
    reads slices, and every pod change of a wave would cost a slice write.
    """
    controllers = list(
        dict.fromkeys(
            [*CONTROLLERS, *(REAL_NODE_CONTROLLERS if real_node else ()), *features.controllers]
        )
    )
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
        f"--node-monitor-grace-period={leases.grace_seconds}s",
        f"--root-ca-file={layout.ca_cert}",
        f"--service-account-private-key-file={layout.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        *features.feature_gate_flags(),
    ]


def scheduler_command(
    binaries: Binaries,
    layout: Layout,
    ports: Ports,
    *,
    features: ClusterFeatures = ClusterFeatures(),
) -> list[str]:
    """kube-scheduler; its kubeconfig and ``leaderElect: false`` are in the config file.

    ``features`` adds its feature gates (the scheduler serves no API, so no runtime config).
    """
    return [
        str(binaries.kube_scheduler),
        f"--config={layout.scheduler_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        *features.feature_gate_flags(),
    ]


def kwok_command(
    binaries: Binaries, layout: Layout, ports: Ports, leases: NodeLeases = KUBELET_LEASES
) -> list[str]:
    """Run kwok for nodes annotated ``kwok.x-k8s.io/node=fake`` whose heartbeat is not stopped.

    Its nodes' Leases last ``leases.duration_seconds``.

    The label selector (:data:`kwok.NODE_LABEL_SELECTOR`) is applied by the apiserver to kwok's
    node watch, so a node that gets the label leaves kwok's view as if deleted.
    """
    return [
        str(binaries.kwok),
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={layout.kwok_config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={kwok.NODE_SELECTOR_FLAG}",
        f"--manage-nodes-with-label-selector={kwok.NODE_LABEL_SELECTOR}",
        f"--node-lease-duration-seconds={leases.duration_seconds}",
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


def configuration_files(
    layout: Layout,
    *,
    server: str,
    admin_token: str,
    node_tokens: Sequence[str] = (),
    audit: bool = False,
    stages: str,
) -> dict[Path, str]:
    """Every configuration file of a control plane but its keys, by path.

    Args:
        layout: Where the files go.
        server: The apiserver URL (for the admin kubeconfig).
        admin_token: The admin user's bearer token (group ``system:masters``).
        node_tokens: Further lines of the static token file (the real node's identities).
        audit: Include the audit policy.
        stages: kwok's Stage set (YAML documents, see :func:`kwok.render_stages`).
    """
    tokens = [f'{admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"', *node_tokens]
    files = {
        layout.tokens: "".join(line + "\n" for line in tokens),
        layout.kubeconfig: _yaml(admin_kubeconfig(server, layout.ca_cert, admin_token)),
        layout.scheduler_config: _yaml(scheduler_configuration(layout.kubeconfig)),
        layout.kwok_config: stages + "---\n" + _yaml(kwok.controller_configuration()),
    }
    if audit:
        files[layout.audit_policy] = _yaml(audit_policy())
    return files


def _yaml(document: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(document), sort_keys=False)
