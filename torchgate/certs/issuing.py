"""Making certificates: CAs, serving and client certificates, and reading PEM material (pure).

What :mod:`torchgate.certs.authority` decides (when to renew what) is built on these, and so is
the local control plane's PKI (:mod:`torchgate_dev.controlplane.pki`): one implementation of
"make a CA" and "issue a certificate" for everything torchgate needs.

Rules every certificate made here keeps:

- ECDSA P-256 keys, SHA-256 signatures, PKCS#8 PEM keys without encryption.
- A CA can sign leaf certificates but no further CAs (pathlen 0).
- A leaf certificate never outlives its CA, starts :data:`CLOCK_SKEW_ALLOWANCE` before ``now``
  (never before its CA), and has exactly one extended key usage (serverAuth or clientAuth).
- The clock is always an argument (timezone-aware); keys and serial numbers come from the
  operating system's random source.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchgate.pytorchjob.names import DNS_SUBDOMAIN_MAX, is_dns1123_subdomain

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SERVING_COMMON_NAME: Final = "torchgate-webhook"
# Certificates start this long before "now", so a verifier whose clock is slightly behind ours
# does not see a certificate that is not valid yet.
CLOCK_SKEW_ALLOWANCE: Final = timedelta(minutes=5)

_COMMON_NAME_MAX_LENGTH: Final = 64


class CertificateError(ValueError):
    """Input that cannot be turned into, or read as, usable certificate material."""


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and the PEM (PKCS#8, unencrypted) private key of its public key."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)


def validate_dns_name(name: str) -> str:
    """Return ``name`` lower-cased if it can be a DNS subjectAltName.

    A DNS-1123 subdomain (``is_dns1123_subdomain``, the shared check), of at most 253
    characters with a leading ``*.`` wildcard label, which is allowed.

    Raises:
        CertificateError: when it is not a valid DNS name.
    """
    normalised = name.lower()
    wildcarded = normalised.removeprefix("*.")
    if len(normalised) > DNS_SUBDOMAIN_MAX or not is_dns1123_subdomain(wildcarded):
        raise CertificateError(f"{name!r} is not a valid DNS name")
    return normalised


def parse_ip(address: IPAddress | str) -> IPAddress:
    """Return ``address`` as an IP address object.

    Raises:
        CertificateError: when it is not an IPv4 or IPv6 address.
    """
    if isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return address
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        raise CertificateError(f"{address!r} is not an IP address") from None


def make_ca(common_name: str, *, now: datetime, valid_for: timedelta) -> KeyPair:
    """Make a self-signed CA that can sign serving certificates but no further CAs.

    Args:
        common_name: subject CN, 1 to 64 characters.
        now: the current time (timezone-aware).
        valid_for: how long the CA is valid from ``now``.

    Returns:
        The CA certificate (basicConstraints CA=true, pathlen 0) and its ECDSA P-256 key.

    Raises:
        CertificateError: when the common name or a duration is unusable.
    """
    require_aware(now)
    if not 1 <= len(common_name) <= _COMMON_NAME_MAX_LENGTH:
        raise CertificateError(f"a common name must have 1 to 64 characters: {common_name!r}")
    if valid_for <= timedelta(0):
        raise CertificateError("a CA must be valid for a positive duration")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    key_id = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW_ALLOWANCE)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(key_id, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(key_id), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert_pem=certificate_pem(certificate), key_pem=_key_pem(key))


def issue_serving_cert(
    ca: KeyPair,
    *,
    dns_names: Iterable[str],
    ips: Iterable[IPAddress | str],
    now: datetime,
    valid_for: timedelta,
    common_name: str = SERVING_COMMON_NAME,
) -> KeyPair:
    """Issue a TLS server certificate for the given names, signed by ``ca``.

    Args:
        ca: the signing CA (its certificate must be the first one in ``ca.cert_pem``).
        dns_names: DNS subjectAltNames (validated, lower-cased, de-duplicated).
        ips: IP subjectAltNames (Go clients such as the apiserver ignore the CN, so a webhook
            reached by IP needs the IP as a SAN).
        now: the current time (timezone-aware).
        valid_for: wanted lifetime; the certificate never outlives the CA.
        common_name: subject CN (clients verify the SANs, never this).

    Returns:
        The certificate (EKU serverAuth; key usage digitalSignature and keyEncipherment) and its
        ECDSA P-256 key.

    Raises:
        CertificateError: when there is no name, the CA material is unusable or the CA has expired.
    """
    require_aware(now)
    dns = normalised_dns_names(dns_names)
    addresses = normalised_ips(ips)
    if not dns and not addresses:
        raise CertificateError("a serving certificate needs at least one DNS name or IP address")
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    names += [x509.IPAddress(address) for address in addresses]
    return _issue_leaf(
        ca,
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        alternative_names=names,
        now=now,
        valid_for=valid_for,
    )


def issue_client_cert(
    ca: KeyPair,
    *,
    common_name: str,
    organizations: Iterable[str] = (),
    now: datetime,
    valid_for: timedelta,
) -> KeyPair:
    """Issue a TLS client certificate signed by ``ca``.

    Kubernetes reads the user name from the CN and the groups from the O attributes (the
    apiserver's client certificate for kubelets, for example, is in ``system:masters``).

    Returns:
        The certificate (EKU clientAuth; key usage digitalSignature and keyEncipherment) and its
        ECDSA P-256 key.

    Raises:
        CertificateError: when the common name is unusable, the CA material is unusable or the
            CA has expired.
    """
    if not 1 <= len(common_name) <= _COMMON_NAME_MAX_LENGTH:
        raise CertificateError(f"a common name must have 1 to 64 characters: {common_name!r}")
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
        ]
    )
    return _issue_leaf(
        ca,
        subject=subject,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        alternative_names=[],
        now=now,
        valid_for=valid_for,
    )


def _issue_leaf(
    ca: KeyPair,
    *,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    alternative_names: Sequence[x509.GeneralName],
    now: datetime,
    valid_for: timedelta,
) -> KeyPair:
    """A non-CA certificate for one extended key usage, signed by ``ca``, capped at its expiry."""
    require_aware(now)
    if valid_for <= timedelta(0):
        raise CertificateError("a certificate must be valid for a positive duration")
    ca_certificate = first_certificate(ca.cert_pem, what="the CA certificate")
    ca_key = load_key(ca.key_pem, what="the CA key")
    if not is_ca(ca_certificate) or not key_matches(ca_certificate, ca_key):
        raise CertificateError("the CA key does not belong to a CA certificate")
    not_before = max(now - CLOCK_SKEW_ALLOWANCE, ca_certificate.not_valid_before_utc)
    not_after = min(now + valid_for, ca_certificate.not_valid_after_utc)
    if not_after <= now:
        raise CertificateError("the CA has expired")
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if alternative_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(list(alternative_names)), critical=False
        )
    certificate = (
        builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
        .add_extension(_authority_key_identifier(ca_certificate), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert_pem=certificate_pem(certificate), key_pem=_key_pem(key))


def is_ca(certificate: x509.Certificate) -> bool:
    """Whether the certificate's basicConstraints say it is a CA."""
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    return constraints.value.ca


def key_matches(certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    """Whether ``key`` is the private key of the certificate's public key."""
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    try:
        from_certificate = certificate.public_key().public_bytes(der, spki)
    except (ValueError, UnsupportedAlgorithm):
        return False
    return from_certificate == key.public_key().public_bytes(der, spki)


def _authority_key_identifier(ca_certificate: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    try:
        key_id = ca_certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(_ec_public_key(ca_certificate))
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(key_id.value)


def _ec_public_key(certificate: x509.Certificate) -> ec.EllipticCurvePublicKey:
    key = certificate.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise CertificateError("the CA certificate does not hold an ECDSA key")
    return key


def normalised_dns_names(names: Iterable[str]) -> list[str]:
    """Validated, lower-cased DNS names without duplicates, in order."""
    return list(dict.fromkeys(validate_dns_name(name) for name in names))


def normalised_ips(addresses: Iterable[IPAddress | str]) -> list[IPAddress]:
    """Parsed IP addresses without duplicates, in order."""
    return list(dict.fromkeys(parse_ip(address) for address in addresses))


def load_certificates(pem: bytes, *, what: str) -> list[x509.Certificate]:
    """Every PEM certificate in ``pem``; CertificateError (naming ``what``) if none parse."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise CertificateError(f"{what} is not PEM-encoded X.509 certificates") from None


def first_certificate(pem: bytes, *, what: str) -> x509.Certificate:
    """The first PEM certificate in ``pem`` (a bundle's signing CA, a leaf before its chain)."""
    return load_certificates(pem, what=what)[0]


def load_key(pem: bytes, *, what: str) -> ec.EllipticCurvePrivateKey:
    """The ECDSA private key in ``pem``; CertificateError (naming ``what``, never the key) else."""
    # The messages never include the input: it is key material.
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CertificateError(f"{what} is not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{what} is not an ECDSA key")
    return key


def certificate_pem(certificate: x509.Certificate) -> bytes:
    """The certificate in PEM."""
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def require_aware(now: datetime) -> None:
    """Raise CertificateError when ``now`` has no timezone (a naive clock is a bug)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise CertificateError("now must be a timezone-aware datetime")
