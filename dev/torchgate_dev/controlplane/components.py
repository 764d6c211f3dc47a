"""The components' command lines and configuration files, as pure functions of layout and ports.

Rules kept here: every component listens on loopback only (the apiserver on the node address when
there is a real node, see :func:`apiserver_command`); the controller manager runs only the
controllers torchgate relies on (:data:`CONTROLLERS`, plus :data:`REAL_NODE_CONTROLLERS` with a
real node); nothing elects a leader (one of each per control plane).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    """Run kwok for nodes annotated ``kwok.x-k8s.io/node=fake`` whose heartbeat is not stopped.

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
