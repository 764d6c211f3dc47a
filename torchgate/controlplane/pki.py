"""The control plane's certificates and keys, written into its ``pki/`` folder."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchgate.controlplane.components import SERVICE_CIDR
from torchgate.controlplane.layout import Layout
from torchgate.node import config as node_config


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
    write_private(layout.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    write_private(layout.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM))
    write_private(layout.serving_key, _private_key_pem(serving_key))
    write_private(layout.service_account_key, _private_key_pem(service_account_key))
    write_private(
        layout.kubelet_client_cert, kubelet_client_cert.public_bytes(serialization.Encoding.PEM)
    )
    write_private(layout.kubelet_client_key, _private_key_pem(kubelet_client_key))


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


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by the owner only (keys, tokens, kubeconfigs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
