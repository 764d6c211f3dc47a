"""The webhook's private certificate authority, as pure functions of (stored material, clock).

Why pure: the expensive mistakes here are decisions, not I/O. Renewing too late takes every
PyTorchJob admission down (``failurePolicy: Fail``); renewing the CA the naive way (new CA, new
serving certificate, new caBundle, all at once) leaves a window in which the apiserver trusts one
CA while the webhook still presents a certificate from the other. Keeping the decisions free of
file, network and clock access lets tests walk through years of rotation with fixed ``now`` values.
Keys and serial numbers still come from the operating system's random source. Making
certificates is :mod:`torchgate.certs.issuing`'s; its names are part of this module's interface.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes

from torchgate.certs.issuing import (
    CLOCK_SKEW_ALLOWANCE,
    SERVING_COMMON_NAME,
    CertificateError,
    IPAddress,
    KeyPair,
    certificate_pem,
    first_certificate,
    is_ca,
    issue_client_cert,
    issue_serving_cert,
    key_matches,
    load_certificates,
    load_key,
    make_ca,
    normalised_dns_names,
    normalised_ips,
    parse_ip,
    require_aware,
    validate_dns_name,
)

__all__ = [
    "CA_COMMON_NAME",
    "CLOCK_SKEW_ALLOWANCE",
    "DEFAULT_CA_RENEW_BEFORE",
    "DEFAULT_CA_VALID_FOR",
    "DEFAULT_SERVING_RENEW_BEFORE",
    "DEFAULT_SERVING_VALID_FOR",
    "SERVING_COMMON_NAME",
    "CertificateError",
    "IPAddress",
    "KeyPair",
    "Material",
    "Plan",
    "RotationPolicy",
    "ca_bundle",
    "issue_client_cert",
    "issue_serving_cert",
    "make_ca",
    "needs_renewal",
    "parse_ip",
    "plan_rotation",
    "service_dns_names",
    "validate_dns_name",
]

CA_COMMON_NAME: Final = "torchgate-webhook-ca"
DEFAULT_SERVING_VALID_FOR: Final = timedelta(days=365)
DEFAULT_SERVING_RENEW_BEFORE: Final = timedelta(days=30)
DEFAULT_CA_VALID_FOR: Final = timedelta(days=3650)
DEFAULT_CA_RENEW_BEFORE: Final = timedelta(days=365)


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
    require_aware(now)
    try:
        certificate = first_certificate(cert_pem, what="the certificate")
    except CertificateError:
        return True
    wanted_dns = None if dns_names is None else frozenset(normalised_dns_names(dns_names))
    wanted_ips = None if ips is None else frozenset(normalised_ips(ips))
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
    require_aware(now)
    seen: set[bytes] = set()
    kept: list[bytes] = []
    for pem in ca_pems:
        if not pem.strip():
            continue
        for certificate in load_certificates(pem, what="a CA bundle entry"):
            fingerprint = certificate.fingerprint(hashes.SHA256())
            if fingerprint in seen or certificate.not_valid_after_utc <= now:
                continue
            seen.add(fingerprint)
            kept.append(certificate_pem(certificate))
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
    require_aware(now)
    policy = policy or RotationPolicy()
    dns = normalised_dns_names(dns_names)
    addresses = normalised_ips(ips)
    if not dns and not addresses:
        raise CertificateError("a serving certificate needs at least one DNS name or IP address")
    signing, bundle, ca_problem = _plan_ca(stored, now=now, policy=policy)
    changes: list[str] = []
    if ca_problem is not None:
        changes.append(f"new CA ({ca_problem})")
    elif bundle != stored.ca_cert:
        changes.append("rewrote ca.crt without expired or duplicate CAs")
    signing_certificate = first_certificate(signing.cert_pem, what="the CA certificate")
    serving, serving_problem = _plan_serving(
        stored,
        signing,
        signing_certificate,
        dns_names=dns,
        ips=addresses,
        now=now,
        policy=policy,
        force=force,
    )
    if serving_problem is not None:
        changes.append(f"new serving certificate ({serving_problem})")
    serving_certificate = first_certificate(serving.cert_pem, what="the serving certificate")

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


def _plan_ca(
    stored: Material, *, now: datetime, policy: RotationPolicy
) -> tuple[KeyPair, bytes, str | None]:
    """The signing CA, ``ca.crt``, and why the CA was replaced (``None``: the stored one stays).

    The signing CA goes first in ``ca.crt``; older CAs stay trusted until they expire.
    """
    trusted = _lenient_certificates(stored.ca_cert)
    signing, problem = _current_ca(stored, trusted, now=now, policy=policy)
    if signing is None:
        stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        signing = make_ca(f"{CA_COMMON_NAME}@{stamp}", now=now, valid_for=policy.ca_valid_for)
    bundle = ca_bundle(signing.cert_pem, *(certificate_pem(c) for c in trusted), now=now)
    return signing, bundle, problem


def _plan_serving(
    stored: Material,
    signing: KeyPair,
    signing_certificate: x509.Certificate,
    *,
    dns_names: list[str],
    ips: list[IPAddress],
    now: datetime,
    policy: RotationPolicy,
    force: bool,
) -> tuple[KeyPair, str | None]:
    """The serving certificate, and why it was issued anew (``None``: the stored one stays)."""
    problem = (
        "forced"
        if force
        else _serving_problem(
            stored,
            signing_certificate,
            now=now,
            renew_before=policy.serving_renew_before,
            dns_names=frozenset(dns_names),
            ips=frozenset(ips),
        )
    )
    if problem is None:
        return KeyPair(cert_pem=stored.serving_cert, key_pem=stored.serving_key), None
    serving = issue_serving_cert(
        signing, dns_names=dns_names, ips=ips, now=now, valid_for=policy.serving_valid_for
    )
    return serving, problem


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
        key = load_key(stored.ca_key, what="ca.key")
    except CertificateError:
        return None, "ca.key is unreadable"
    certificate = next((c for c in trusted if is_ca(c) and key_matches(c, key)), None)
    if certificate is None:
        return None, "ca.key matches no CA in ca.crt"
    reason = _renewal_reason(certificate, now=now, renew_before=policy.ca_renew_before)
    if reason is not None:
        return None, f"the current CA {reason}"
    return KeyPair(cert_pem=certificate_pem(certificate), key_pem=stored.ca_key), None


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
        certificate = first_certificate(stored.serving_cert, what="tls.crt")
    except CertificateError:
        return "tls.crt is unreadable"
    try:
        key = load_key(stored.serving_key, what="tls.key")
    except CertificateError:
        return "tls.key is missing or unreadable"
    if not key_matches(certificate, key):
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


def _lenient_certificates(pem: bytes) -> list[x509.Certificate]:
    if not pem.strip():
        return []
    try:
        return load_certificates(pem, what="ca.crt")
    except CertificateError:
        return []


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _days(duration: timedelta) -> str:
    days = duration / timedelta(days=1)
    return f"{days:g} days" if days != 1 else "1 day"
