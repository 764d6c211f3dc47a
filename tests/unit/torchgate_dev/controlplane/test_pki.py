"""The control plane's PKI: serving and kubelet client certificates from one CA."""

from __future__ import annotations

import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchgate_dev.controlplane.layout import Layout
from torchgate_dev.controlplane.pki import write_pki
from torchgate_dev.node import config as node_config


def test_pki_serving_certificate_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    layout = Layout(tmp_path)

    write_pki(layout)

    ca = x509.load_pem_x509_certificate(layout.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(layout.serving_cert.read_bytes())
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    assert "kubernetes.default.svc" in names.get_values_for_type(x509.DNSName)
    key = serialization.load_pem_private_key(layout.service_account_key.read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey)
    for path in (layout.serving_key, layout.service_account_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_pki_kubelet_client_certificate_is_a_system_masters_client_of_the_same_ca(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)

    write_pki(layout)

    ca = x509.load_pem_x509_certificate(layout.ca_cert.read_bytes())
    client = x509.load_pem_x509_certificate(layout.kubelet_client_cert.read_bytes())
    client.verify_directly_issued_by(ca)
    subject = {attribute.oid: attribute.value for attribute in client.subject}
    assert subject[NameOID.COMMON_NAME] == node_config.APISERVER_KUBELET_CLIENT
    assert subject[NameOID.ORGANIZATION_NAME] == "system:masters"
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key = serialization.load_pem_private_key(layout.kubelet_client_key.read_bytes(), None)
    assert key.public_key().public_numbers() == client.public_key().public_numbers()  # type: ignore[union-attr]
    assert stat.S_IMODE(layout.kubelet_client_key.stat().st_mode) == 0o600


def test_pki_serving_certificate_names_every_address_the_apiserver_is_reached_by(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)

    write_pki(layout)

    serving = x509.load_pem_x509_certificate(layout.serving_cert.read_bytes())
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    assert ips == {"127.0.0.1", node_config.NodeNetwork().gateway, "10.96.0.1"}
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    }
