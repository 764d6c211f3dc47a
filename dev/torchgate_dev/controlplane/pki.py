"""The control plane's certificates and keys, written into its ``pki/`` folder.

The certificates are made by :mod:`torchgate.certs.issuing`, the same code that makes the
webhook's: one CA per control plane, made at every start (a work dir's generated files are
replaced then), signing

- the apiserver's serving certificate for every name it is reached by (:func:`apiserver_names`):
  loopback, the real node's address (where the apiserver listens when there is a real node), the
  ``kubernetes`` Service's IP and DNS names (what pods use);
- the apiserver's client certificate for kubelets (logs, exec, port-forward), user
  ``kube-apiserver-kubelet-client`` in group ``system:masters``.

The ServiceAccount token signing key is an RSA key, not a certificate. :func:`pki_files` decides
the contents (keys come from the operating system's random source); :func:`write_pki` writes them
owner-only.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from torchgate.certs import issuing
from torchgate_dev.controlplane.components import SERVICE_CIDR
from torchgate_dev.controlplane.layout import Layout
from torchgate_dev.node import config as node_config

CA_COMMON_NAME: Final = "torchgate-local-ca"
APISERVER_COMMON_NAME: Final = "kube-apiserver"
SERVICE_DNS_NAMES: Final = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def apiserver_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The apiserver's DNS and IP subjectAltNames.

    Both addresses it may listen on (loopback; the node address with a real node), the first IP
    of the Service range (the ``kubernetes`` Service's ClusterIP, which kube-proxy sends to it)
    and the Service's DNS names.
    """
    service_ip = next(ipaddress.IPv4Network(SERVICE_CIDR).hosts())
    ips = ("127.0.0.1", node_config.NodeNetwork().gateway, str(service_ip))
    return ("localhost", *SERVICE_DNS_NAMES), ips


def pki_files(layout: Layout, *, now: datetime, valid_for: timedelta) -> dict[Path, bytes]:
    """The CA, the apiserver's serving and kubelet-client certificates and keys, the SA key."""
    ca = issuing.make_ca(CA_COMMON_NAME, now=now, valid_for=valid_for)
    dns_names, ips = apiserver_names()
    serving = issuing.issue_serving_cert(
        ca,
        dns_names=dns_names,
        ips=ips,
        now=now,
        valid_for=valid_for,
        common_name=APISERVER_COMMON_NAME,
    )
    kubelet_client = issuing.issue_client_cert(
        ca,
        common_name=node_config.APISERVER_KUBELET_CLIENT,
        organizations=("system:masters",),
        now=now,
        valid_for=valid_for,
    )
    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        layout.ca_cert: ca.cert_pem,
        layout.serving_cert: serving.cert_pem,
        layout.serving_key: serving.key_pem,
        layout.kubelet_client_cert: kubelet_client.cert_pem,
        layout.kubelet_client_key: kubelet_client.key_pem,
        layout.service_account_key: service_account_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    }


def write_pki(layout: Layout, *, days: int = 365) -> None:
    """Write :func:`pki_files`, valid for ``days`` from now, owner-only."""
    layout.pki.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = pki_files(layout, now=datetime.now(UTC), valid_for=timedelta(days=days))
    for path, content in files.items():
        write_private(path, content)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by the owner only (keys, tokens, kubeconfigs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
