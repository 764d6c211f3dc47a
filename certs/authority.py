"""The webhook's private certificate authority, as pure functions of (stored material, clock).

Why pure: the expensive mistakes here are decisions, not I/O. Renewing too late takes every
PyTorchJob admission down (``failurePolicy: Fail``); renewing the CA the naive way (new CA, new
serving certificate, new caBundle, all at once) leaves a window in which the apiserver trusts one
CA while the webhook still presents a certificate from the other. Keeping the decisions free of
file, network and clock access lets tests walk through years of rotation with fixed ``now`` values.
Keys and serial numbers still come from the operating system's random source.

Rotation model (what :func:`plan_rotation` decides):

- ``ca.crt`` is a bundle: the signing CA first, then older CAs that are still trusted. It is what
  goes into every webhook's ``caBundle``. ``ca.key`` is the key of the signing CA only.
- The serving certificate (default 1 year) is re-issued by the same CA when it is within
  ``serving_renew_before`` (default 30 days) of expiry, when the requested names change, when it
  was not issued by the signing CA, or when its key does not match.
- The CA (default 10 years) is replaced ``ca_renew_before`` (default 1 year) before it expires by
  a NEW CA; the old one stays in ``ca.crt`` until it expires. The caller publishes the bundle to
  the webhook configurations before it stores the new serving certificate, so both the old and the
  new serving certificate are trusted while the new one rolls out.
- A serving certificate never outlives its CA (its expiry is capped at the CA's).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

CA_COMMON_NAME: Final = "torchgate-webhook-ca"
SERVING_COMMON_NAME: Final = "torchgate-webhook"
# Certificates start this long before "now", so a verifier whose clock is slightly behind ours
# does not see a certificate that is not valid yet.
CLOCK_SKEW_ALLOWANCE: Final = timedelta(minutes=5)
DEFAULT_SERVING_VALID_FOR: Final = timedelta(days=365)
DEFAULT_SERVING_RENEW_BEFORE: Final = timedelta(days=30)
DEFAULT_CA_VALID_FOR: Final = timedelta(days=3650)
DEFAULT_CA_RENEW_BEFORE: Final = timedelta(days=365)

_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_COMMON_NAME_MAX_LENGTH: Final = 64


class CertificateError(ValueError):
    """Input that cannot be turned into, or read as, usable certificate material."""


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and the PEM (PKCS#8, unencrypted) private key of its public key."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)


@dataclass(frozen=True)
class Material:
    """Everything torchgate keeps, named after the entries of a ``kubernetes.io/tls`` Secret.

    Empty bytes mean "absent". ``ca_cert`` (``ca.crt``) is a bundle: the signing CA first, then
    older CAs that are still trusted; ``ca_key`` (``ca.key``) belongs to the first one.
    """

    ca_cert: bytes = b""
    ca_key: bytes = field(default=b"", repr=False)
    serving_cert: bytes = b""
    serving_key: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class RotationPolicy:
    """How long certificates live and how early they are replaced.

    Raises:
        ValueError: when a duration is not positive, a certificate would be renewed as soon as it
            is issued, or the serving renewal window is not shorter than the CA's (a serving
            certificate is capped at its CA's expiry, so right after a CA renewal it has at least
            ``ca_renew_before`` left, which must be more than ``serving_renew_before``).
    """

    serving_valid_for: timedelta = DEFAULT_SERVING_VALID_FOR
    serving_renew_before: timedelta = DEFAULT_SERVING_RENEW_BEFORE
    ca_valid_for: timedelta = DEFAULT_CA_VALID_FOR
    ca_renew_before: timedelta = DEFAULT_CA_RENEW_BEFORE

    def __post_init__(self) -> None:
        durations = {
            "serving validity": self.serving_valid_for,
            "serving renew-before": self.serving_renew_before,
            "CA validity": self.ca_valid_for,
            "CA renew-before": self.ca_renew_before,
        }
        for what, duration in durations.items():
            if duration <= timedelta(0):
                raise ValueError(f"{what} must be positive, got {_days(duration)}")
        if self.serving_renew_before >= self.serving_valid_for:
            raise ValueError(
                f"serving renew-before ({_days(self.serving_renew_before)}) must be shorter than "
                f"the serving validity ({_days(self.serving_valid_for)})"
            )
        if self.ca_renew_before >= self.ca_valid_for:
            raise ValueError(
                f"CA renew-before ({_days(self.ca_renew_before)}) must be shorter than "
                f"the CA validity ({_days(self.ca_valid_for)})"
            )
        if self.serving_renew_before >= self.ca_renew_before:
            raise ValueError(
                f"serving renew-before ({_days(self.serving_renew_before)}) must be shorter than "
                f"the CA renew-before ({_days(self.ca_renew_before)})"
            )


@dataclass(frozen=True)
class Plan:
    """What :func:`plan_rotation` decided.

    Attributes:
        material: what should be stored (equal to the input when nothing needs to change).
        changes: why the material differs from the input, one short phrase per change.
        ca_rotated: a new signing CA was made (publish ``material.ca_cert`` before storing).
        serving_issued: a new serving certificate was issued.
        serving_not_after: expiry of the serving certificate in ``material``.
        ca_not_after: expiry of the signing CA in ``material``.
        renew_at: the earliest moment at which the clock alone makes the plan change again.
    """

    material: Material
    changes: tuple[str, ...]
    ca_rotated: bool
    serving_issued: bool
    serving_not_after: datetime
    ca_not_after: datetime
    renew_at: datetime

    @property
    def changed(self) -> bool:
        """Whether anything needs to be stored."""
        return bool(self.changes)


def service_dns_names(
    service: str, namespace: str, *, cluster_domain: str = "cluster.local"
) -> tuple[str, ...]:
    """The names under which in-cluster clients reach a Service.

    The apiserver dials ``<service>.<namespace>.svc`` for a ``clientConfig.service`` reference;
    the shorter and longer forms cover clients that use search domains or the full name.
    """
    base = f"{service}.{namespace}"
    return (service, base, f"{base}.svc", f"{base}.svc.{cluster_domain}")


def validate_dns_name(name: str) -> str:
    """Return ``name`` lower-cased if it can be a DNS subjectAltName.

    A leading ``*.`` wildcard label is allowed.

    Raises:
        CertificateError: when it is not a valid DNS name.
    """
    normalised = name.lower()
    labels = normalised.split(".")
    if labels and labels[0] == "*":
        labels = labels[1:]
    if (
        not normalised
        or len(normalised) > 253
        or not labels
        or not all(_DNS_LABEL.fullmatch(label) for label in labels)
    ):
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
    _require_aware(now)
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
    return KeyPair(cert_pem=_certificate_pem(certificate), key_pem=_key_pem(key))


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
    _require_aware(now)
    dns = _normalised_dns_names(dns_names)
    addresses = _normalised_ips(ips)
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
    _require_aware(now)
    if valid_for <= timedelta(0):
        raise CertificateError("a certificate must be valid for a positive duration")
    ca_certificate = _first_certificate(ca.cert_pem, what="the CA certificate")
    ca_key = _load_key(ca.key_pem, what="the CA key")
    if not _is_ca(ca_certificate) or not _key_matches(ca_certificate, ca_key):
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
    return KeyPair(cert_pem=_certificate_pem(certificate), key_pem=_key_pem(key))


def needs_renewal(
    cert_pem: bytes,
    *,
    now: datetime,
    renew_before: timedelta,
    dns_names: Iterable[str] | None = None,
    ips: Iterable[IPAddress | str] | None = None,
) -> bool:
    """Whether the (first) certificate in ``cert_pem`` should be replaced at ``now``.

    True when it cannot be parsed, is not valid yet, is within ``renew_before`` of expiry (or
    past it), or, when ``dns_names`` / ``ips`` are given, its DNS / IP subjectAltNames are not
    exactly those (order and case do not matter).
    """
    _require_aware(now)
    try:
        certificate = _first_certificate(cert_pem, what="the certificate")
    except CertificateError:
        return True
    wanted_dns = None if dns_names is None else frozenset(_normalised_dns_names(dns_names))
    wanted_ips = None if ips is None else frozenset(_normalised_ips(ips))
    reason = _renewal_reason(
        certificate, now=now, renew_before=renew_before, dns_names=wanted_dns, ips=wanted_ips
    )
    return reason is not None


def ca_bundle(*ca_pems: bytes, now: datetime) -> bytes:
    """Concatenate CA certificates for ``caBundle``: in order, without duplicates or expired ones.

    Each argument may hold several PEM certificates (an existing bundle, for example); empty
    arguments are ignored.

    Raises:
        CertificateError: when an argument holds something that is not PEM certificates.
    """
    _require_aware(now)
    seen: set[bytes] = set()
    kept: list[bytes] = []
    for pem in ca_pems:
        if not pem.strip():
            continue
        for certificate in _load_certificates(pem, what="a CA bundle entry"):
            fingerprint = certificate.fingerprint(hashes.SHA256())
            if fingerprint in seen or certificate.not_valid_after_utc <= now:
                continue
            seen.add(fingerprint)
            kept.append(_certificate_pem(certificate))
    return b"".join(kept)


def plan_rotation(
    stored: Material,
    *,
    dns_names: Iterable[str],
    ips: Iterable[IPAddress | str],
    now: datetime,
    policy: RotationPolicy | None = None,
    force: bool = False,
) -> Plan:
    """Decide what material should be stored at ``now``, given what is stored.

    Unreadable, missing or mismatched parts are replaced rather than reported, so that any state
    (first run, a hand-edited Secret, a half-written directory) converges. ``force`` re-issues the
    serving certificate even if it is fine; the CA is kept.

    Raises:
        CertificateError: when no DNS name or IP is given, or ``now`` is naive.
    """
    _require_aware(now)
    policy = policy or RotationPolicy()
    dns = _normalised_dns_names(dns_names)
    addresses = _normalised_ips(ips)
    if not dns and not addresses:
        raise CertificateError("a serving certificate needs at least one DNS name or IP address")
    changes: list[str] = []
    trusted = _lenient_certificates(stored.ca_cert)
    signing, ca_problem = _current_ca(stored, trusted, now=now, policy=policy)
    if signing is None:
        stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        signing = make_ca(f"{CA_COMMON_NAME}@{stamp}", now=now, valid_for=policy.ca_valid_for)
        changes.append(f"new CA ({ca_problem})")
    signing_certificate = _first_certificate(signing.cert_pem, what="the CA certificate")
    # The signing CA goes first; older CAs stay trusted until they expire.
    bundle = ca_bundle(signing.cert_pem, *(_certificate_pem(c) for c in trusted), now=now)
    if ca_problem is None and bundle != stored.ca_cert:
        changes.append("rewrote ca.crt without expired or duplicate CAs")

    serving_problem = (
        "forced"
        if force
        else _serving_problem(
            stored,
            signing_certificate,
            now=now,
            renew_before=policy.serving_renew_before,
            dns_names=frozenset(dns),
            ips=frozenset(addresses),
        )
    )
    if serving_problem is None:
        serving = KeyPair(cert_pem=stored.serving_cert, key_pem=stored.serving_key)
    else:
        serving = issue_serving_cert(
            signing, dns_names=dns, ips=addresses, now=now, valid_for=policy.serving_valid_for
        )
        changes.append(f"new serving certificate ({serving_problem})")
    serving_certificate = _first_certificate(serving.cert_pem, what="the serving certificate")

    material = Material(
        ca_cert=bundle,
        ca_key=signing.key_pem,
        serving_cert=serving.cert_pem,
        serving_key=serving.key_pem,
    )
    serving_not_after = serving_certificate.not_valid_after_utc
    ca_not_after = signing_certificate.not_valid_after_utc
    return Plan(
        material=material,
        changes=tuple(changes),
        ca_rotated=ca_problem is not None,
        serving_issued=serving_problem is not None,
        serving_not_after=serving_not_after,
        ca_not_after=ca_not_after,
        renew_at=min(
            serving_not_after - policy.serving_renew_before,
            ca_not_after - policy.ca_renew_before,
        ),
    )


def _current_ca(
    stored: Material,
    trusted: Sequence[x509.Certificate],
    *,
    now: datetime,
    policy: RotationPolicy,
) -> tuple[KeyPair | None, str | None]:
    """The stored signing CA if it can stay, else ``(None, why it cannot)``."""
    if not stored.ca_cert.strip():
        return None, "no CA yet"
    if not trusted:
        return None, "ca.crt is unreadable"
    if not stored.ca_key.strip():
        return None, "ca.key is missing"
    try:
        key = _load_key(stored.ca_key, what="ca.key")
    except CertificateError:
        return None, "ca.key is unreadable"
    certificate = next((c for c in trusted if _is_ca(c) and _key_matches(c, key)), None)
    if certificate is None:
        return None, "ca.key matches no CA in ca.crt"
    reason = _renewal_reason(certificate, now=now, renew_before=policy.ca_renew_before)
    if reason is not None:
        return None, f"the current CA {reason}"
    return KeyPair(cert_pem=_certificate_pem(certificate), key_pem=stored.ca_key), None


def _serving_problem(
    stored: Material,
    ca_certificate: x509.Certificate,
    *,
    now: datetime,
    renew_before: timedelta,
    dns_names: frozenset[str],
    ips: frozenset[IPAddress],
) -> str | None:
    """Why the stored serving pair cannot stay, or None."""
    if not stored.serving_cert.strip():
        return "no serving certificate yet"
    try:
        certificate = _first_certificate(stored.serving_cert, what="tls.crt")
    except CertificateError:
        return "tls.crt is unreadable"
    try:
        key = _load_key(stored.serving_key, what="tls.key")
    except CertificateError:
        return "tls.key is missing or unreadable"
    if not _key_matches(certificate, key):
        return "tls.key does not match tls.crt"
    if not _issued_by(certificate, ca_certificate):
        return "tls.crt was not issued by the current CA"
    return _renewal_reason(
        certificate, now=now, renew_before=renew_before, dns_names=dns_names, ips=ips
    )


def _renewal_reason(
    certificate: x509.Certificate,
    *,
    now: datetime,
    renew_before: timedelta,
    dns_names: frozenset[str] | None = None,
    ips: frozenset[IPAddress] | None = None,
) -> str | None:
    not_before = certificate.not_valid_before_utc
    not_after = certificate.not_valid_after_utc
    if now < not_before:
        return f"is not valid before {_timestamp(not_before)}"
    if now >= not_after:
        return f"expired {_timestamp(not_after)}"
    if now >= not_after - renew_before:
        return f"expires {_timestamp(not_after)}, within {_days(renew_before)}"
    if dns_names is None and ips is None:
        return None
    present_dns, present_ips = _subject_alternative_names(certificate)
    if dns_names is not None and present_dns != dns_names:
        return "the DNS names changed"
    if ips is not None and present_ips != ips:
        return "the IP addresses changed"
    return None


def _subject_alternative_names(
    certificate: x509.Certificate,
) -> tuple[frozenset[str], frozenset[IPAddress]]:
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return frozenset(), frozenset()
    dns = frozenset(name.lower() for name in extension.value.get_values_for_type(x509.DNSName))
    addresses = frozenset(
        address
        for address in extension.value.get_values_for_type(x509.IPAddress)
        if isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)
    )
    return dns, addresses


def _issued_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    return constraints.value.ca


def _key_matches(certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
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


def _normalised_dns_names(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(validate_dns_name(name) for name in names))


def _normalised_ips(addresses: Iterable[IPAddress | str]) -> list[IPAddress]:
    return list(dict.fromkeys(parse_ip(address) for address in addresses))


def _load_certificates(pem: bytes, *, what: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise CertificateError(f"{what} is not PEM-encoded X.509 certificates") from None


def _lenient_certificates(pem: bytes) -> list[x509.Certificate]:
    if not pem.strip():
        return []
    try:
        return _load_certificates(pem, what="ca.crt")
    except CertificateError:
        return []


def _first_certificate(pem: bytes, *, what: str) -> x509.Certificate:
    return _load_certificates(pem, what=what)[0]


def _load_key(pem: bytes, *, what: str) -> ec.EllipticCurvePrivateKey:
    # The messages never include the input: it is key material.
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CertificateError(f"{what} is not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{what} is not an ECDSA key")
    return key


def _certificate_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise CertificateError("now must be a timezone-aware datetime")


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _days(duration: timedelta) -> str:
    days = duration / timedelta(days=1)
    return f"{days:g} days" if days != 1 else "1 day"
