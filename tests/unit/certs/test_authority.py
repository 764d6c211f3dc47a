"""Certificate making and renewal decisions, with fixed clocks."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchgate.certs.authority import (
    CertificateError,
    KeyPair,
    Material,
    RotationPolicy,
    ca_bundle,
    issue_client_cert,
    issue_serving_cert,
    make_ca,
    needs_renewal,
    plan_rotation,
    service_dns_names,
    validate_dns_name,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
YEAR = timedelta(days=365)
SERVICE_NAMES = ("s", "s.n", "s.n.svc", "s.n.svc.cluster.local")
LOOPBACK = ipaddress.ip_address("127.0.0.1")


def certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def bundle_certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem else []


def public_key_der(key: object) -> bytes:
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def private_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def verify_signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> None:
    """Raises InvalidSignature unless ``ca``'s key signed ``leaf``."""
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    algorithm = leaf.signature_hash_algorithm
    assert algorithm is not None
    ca_key.verify(leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(algorithm))


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return make_ca("test-ca", now=T0, valid_for=10 * YEAR)


@pytest.fixture(scope="module")
def serving(ca: KeyPair) -> KeyPair:
    return issue_serving_cert(
        ca, dns_names=[*SERVICE_NAMES, "extra.example"], ips=[LOOPBACK], now=T0, valid_for=YEAR
    )


def test_service_dns_names_cover_every_in_cluster_form() -> None:
    assert service_dns_names("s", "n") == SERVICE_NAMES
    assert service_dns_names("s", "n", cluster_domain="corp")[-1] == "s.n.svc.corp"


class TestCa:
    def test_is_a_self_signed_ca_that_cannot_sign_further_cas(self, ca: KeyPair) -> None:
        cert = certificate(ca.cert_pem)
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
        assert constraints.critical
        assert constraints.value.ca
        assert constraints.value.path_length == 0
        assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
        assert cert.issuer == cert.subject
        verify_signed_by(cert, cert)

    def test_uses_a_p256_key_that_matches_the_certificate(self, ca: KeyPair) -> None:
        key = private_key(ca.key_pem)
        assert isinstance(key.curve, ec.SECP256R1)
        assert public_key_der(key.public_key()) == public_key_der(
            certificate(ca.cert_pem).public_key()
        )

    def test_is_valid_for_the_requested_time(self, ca: KeyPair) -> None:
        cert = certificate(ca.cert_pem)
        assert cert.not_valid_before_utc <= T0
        assert cert.not_valid_after_utc == T0 + 10 * YEAR

    def test_repr_never_shows_the_key(self, ca: KeyPair) -> None:
        assert ca.key_pem.decode() not in repr(ca)
        assert b"PRIVATE KEY" in ca.key_pem
        assert "PRIVATE KEY" not in repr(Material(ca_key=ca.key_pem, serving_key=ca.key_pem))

    @pytest.mark.parametrize("name", ["", "x" * 65], ids=["empty", "too-long"])
    def test_rejects_unusable_common_names(self, name: str) -> None:
        with pytest.raises(CertificateError):
            make_ca(name, now=T0, valid_for=YEAR)

    def test_rejects_a_naive_clock(self) -> None:
        with pytest.raises(CertificateError):
            make_ca("ca", now=datetime(2026, 1, 1), valid_for=YEAR)


class TestServingCertificate:
    def test_names_are_exactly_the_requested_subject_alternative_names(
        self, serving: KeyPair
    ) -> None:
        names = certificate(serving.cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
        assert names.value.get_values_for_type(x509.DNSName) == [
            *SERVICE_NAMES,
            "extra.example",
        ]
        assert names.value.get_values_for_type(x509.IPAddress) == [LOOPBACK]

    def test_is_for_server_authentication_only(self, serving: KeyPair) -> None:
        cert = certificate(serving.cert_pem)
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
        key_usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        assert key_usage.digital_signature
        assert key_usage.key_encipherment
        assert not key_usage.key_cert_sign
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    def test_chain_verifies_against_the_ca(self, ca: KeyPair, serving: KeyPair) -> None:
        leaf, root = certificate(serving.cert_pem), certificate(ca.cert_pem)
        verify_signed_by(leaf, root)
        leaf.verify_directly_issued_by(root)
        assert leaf.issuer == root.subject
        assert root.not_valid_before_utc <= leaf.not_valid_before_utc <= T0
        assert T0 + YEAR == leaf.not_valid_after_utc <= root.not_valid_after_utc

    def test_does_not_verify_against_another_ca(self, serving: KeyPair) -> None:
        other = make_ca("other", now=T0, valid_for=YEAR)
        with pytest.raises(InvalidSignature):
            verify_signed_by(certificate(serving.cert_pem), certificate(other.cert_pem))

    def test_has_its_own_p256_key(self, ca: KeyPair, serving: KeyPair) -> None:
        key = private_key(serving.key_pem)
        assert isinstance(key.curve, ec.SECP256R1)
        assert public_key_der(key.public_key()) == public_key_der(
            certificate(serving.cert_pem).public_key()
        )
        assert serving.key_pem != ca.key_pem

    def test_never_outlives_its_ca(self) -> None:
        short_ca = make_ca("short", now=T0, valid_for=90 * DAY)
        leaf = issue_serving_cert(short_ca, dns_names=["a"], ips=[], now=T0, valid_for=YEAR)
        assert certificate(leaf.cert_pem).not_valid_after_utc == T0 + 90 * DAY

    def test_names_are_normalised_and_deduplicated(self, ca: KeyPair) -> None:
        leaf = issue_serving_cert(
            ca, dns_names=["A.Example", "a.example"], ips=["::1", "::1"], now=T0, valid_for=DAY
        )
        names = certificate(leaf.cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
        assert names.value.get_values_for_type(x509.DNSName) == ["a.example"]
        assert names.value.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("::1")]

    def test_needs_at_least_one_name(self, ca: KeyPair) -> None:
        with pytest.raises(CertificateError):
            issue_serving_cert(ca, dns_names=[], ips=[], now=T0, valid_for=YEAR)

    def test_cannot_be_issued_by_an_expired_ca(self, ca: KeyPair) -> None:
        with pytest.raises(CertificateError):
            issue_serving_cert(ca, dns_names=["a"], ips=[], now=T0 + 11 * YEAR, valid_for=DAY)

    def test_cannot_be_issued_by_a_non_ca(self, serving: KeyPair) -> None:
        with pytest.raises(CertificateError):
            issue_serving_cert(serving, dns_names=["a"], ips=[], now=T0, valid_for=DAY)

    def test_cannot_be_issued_with_a_key_of_another_ca(self, ca: KeyPair) -> None:
        other = make_ca("other", now=T0, valid_for=YEAR)
        mixed = KeyPair(cert_pem=ca.cert_pem, key_pem=other.key_pem)
        with pytest.raises(CertificateError):
            issue_serving_cert(mixed, dns_names=["a"], ips=[], now=T0, valid_for=DAY)

    def test_common_name_is_the_default_or_the_requested_one(self, ca: KeyPair) -> None:
        named = issue_serving_cert(
            ca, dns_names=["a"], ips=[], now=T0, valid_for=DAY, common_name="kube-apiserver"
        )
        default = issue_serving_cert(ca, dns_names=["a"], ips=[], now=T0, valid_for=DAY)
        assert common_names(named) == ["kube-apiserver"]
        assert common_names(default) == ["torchgate-webhook"]


def common_names(pair: KeyPair) -> list[object]:
    attributes = certificate(pair.cert_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return [attribute.value for attribute in attributes]


@pytest.fixture(scope="module")
def client(ca: KeyPair) -> KeyPair:
    return issue_client_cert(
        ca,
        common_name="kube-apiserver-kubelet-client",
        organizations=("system:masters",),
        now=T0,
        valid_for=YEAR,
    )


class TestClientCertificate:
    def test_names_the_user_in_the_cn_and_the_groups_in_o(self, client: KeyPair) -> None:
        subject = certificate(client.cert_pem).subject
        assert common_names(client) == ["kube-apiserver-kubelet-client"]
        organizations = subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        assert [o.value for o in organizations] == ["system:masters"]

    def test_is_for_client_authentication_only_without_alternative_names(
        self, client: KeyPair
    ) -> None:
        cert = certificate(client.cert_pem)
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        with pytest.raises(x509.ExtensionNotFound):
            cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)

    def test_chain_verifies_against_the_ca_and_never_outlives_it(
        self, ca: KeyPair, client: KeyPair
    ) -> None:
        certificate(client.cert_pem).verify_directly_issued_by(certificate(ca.cert_pem))
        short_ca = make_ca("short", now=T0, valid_for=90 * DAY)
        leaf = issue_client_cert(short_ca, common_name="u", now=T0, valid_for=YEAR)
        assert certificate(leaf.cert_pem).not_valid_after_utc == T0 + 90 * DAY
        key = private_key(client.key_pem)
        assert public_key_der(key.public_key()) == public_key_der(
            certificate(client.cert_pem).public_key()
        )

    @pytest.mark.parametrize(
        ("common_name", "now", "valid_for"),
        [
            ("", T0, YEAR),
            ("x" * 65, T0, YEAR),
            ("u", T0, -DAY),
            ("u", T0 + 11 * YEAR, DAY),
            ("u", datetime(2026, 1, 1), DAY),
        ],
        ids=["empty-name", "long-name", "negative-lifetime", "expired-ca", "naive-clock"],
    )
    def test_refuses_unusable_input(
        self, ca: KeyPair, common_name: str, now: datetime, valid_for: timedelta
    ) -> None:
        with pytest.raises(CertificateError):
            issue_client_cert(ca, common_name=common_name, now=now, valid_for=valid_for)

    def test_cannot_be_issued_by_a_non_ca(self, client: KeyPair) -> None:
        with pytest.raises(CertificateError):
            issue_client_cert(client, common_name="u", now=T0, valid_for=DAY)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("s.n.svc", True),
        ("S.N.SVC", True),
        ("*.example.com", True),
        ("localhost", True),
        ("", False),
        ("a..b", False),
        ("-a.b", False),
        ("a_b.c", False),
        ("a.*.c", False),
        ("x" * 64, False),
        ("é.example", False),
    ],
)
def test_validate_dns_name(name: str, valid: bool) -> None:
    if valid:
        assert validate_dns_name(name) == name.lower()
    else:
        with pytest.raises(CertificateError):
            validate_dns_name(name)


class TestNeedsRenewal:
    RENEW_BEFORE = 30 * DAY

    @pytest.mark.parametrize(
        ("now", "expected"),
        [
            (T0, False),
            (T0 + YEAR - 30 * DAY - timedelta(seconds=1), False),
            (T0 + YEAR - 30 * DAY, True),
            (T0 + YEAR - DAY, True),
            (T0 + YEAR + DAY, True),
            (T0 - DAY, True),
        ],
        ids=["fresh", "just-outside-window", "window-starts", "last-day", "expired", "not-yet"],
    )
    def test_by_time(self, serving: KeyPair, now: datetime, expected: bool) -> None:
        assert needs_renewal(serving.cert_pem, now=now, renew_before=self.RENEW_BEFORE) is expected

    def test_same_names_in_another_order_and_case_do_not_need_renewal(
        self, serving: KeyPair
    ) -> None:
        names = ["EXTRA.example", *reversed(SERVICE_NAMES)]
        assert not needs_renewal(
            serving.cert_pem,
            now=T0,
            renew_before=self.RENEW_BEFORE,
            dns_names=names,
            ips=["127.0.0.1"],
        )

    @pytest.mark.parametrize(
        ("dns_names", "ips"),
        [
            ([*SERVICE_NAMES, "extra.example", "new.example"], ["127.0.0.1"]),
            (SERVICE_NAMES, ["127.0.0.1"]),
            ([*SERVICE_NAMES, "extra.example"], []),
            ([*SERVICE_NAMES, "extra.example"], ["127.0.0.1", "10.0.0.1"]),
        ],
        ids=["dns-added", "dns-removed", "ip-removed", "ip-added"],
    )
    def test_changed_names_need_renewal(
        self, serving: KeyPair, dns_names: list[str], ips: list[str]
    ) -> None:
        assert needs_renewal(
            serving.cert_pem, now=T0, renew_before=self.RENEW_BEFORE, dns_names=dns_names, ips=ips
        )

    @pytest.mark.parametrize("pem", [b"", b"garbage", b"-----BEGIN CERTIFICATE-----\nAA==\n"])
    def test_unreadable_certificates_need_renewal(self, pem: bytes) -> None:
        assert needs_renewal(pem, now=T0, renew_before=self.RENEW_BEFORE)


class TestCaBundle:
    def test_two_cas_stay_in_order(self) -> None:
        first = make_ca("first", now=T0, valid_for=YEAR)
        second = make_ca("second", now=T0, valid_for=YEAR)
        bundle = bundle_certificates(ca_bundle(first.cert_pem, second.cert_pem, now=T0))
        assert [c.subject for c in bundle] == [
            certificate(first.cert_pem).subject,
            certificate(second.cert_pem).subject,
        ]

    def test_duplicates_are_dropped_even_inside_an_existing_bundle(self) -> None:
        first = make_ca("first", now=T0, valid_for=YEAR)
        second = make_ca("second", now=T0, valid_for=YEAR)
        existing = ca_bundle(first.cert_pem, second.cert_pem, now=T0)
        bundle = ca_bundle(second.cert_pem, existing, b"", now=T0)
        assert [c.subject for c in bundle_certificates(bundle)] == [
            certificate(second.cert_pem).subject,
            certificate(first.cert_pem).subject,
        ]

    def test_an_expired_ca_is_dropped(self) -> None:
        old = make_ca("old", now=T0 - 2 * YEAR, valid_for=YEAR)
        new = make_ca("new", now=T0, valid_for=YEAR)
        bundle = bundle_certificates(ca_bundle(new.cert_pem, old.cert_pem, now=T0))
        assert [c.subject for c in bundle] == [certificate(new.cert_pem).subject]

    def test_garbage_is_rejected(self) -> None:
        with pytest.raises(CertificateError):
            ca_bundle(b"not a certificate", now=T0)


class TestRotationPolicy:
    @pytest.mark.parametrize(
        "changes",
        [
            {"serving_valid_for": timedelta(0)},
            {"serving_renew_before": -DAY},
            {"serving_valid_for": 30 * DAY, "serving_renew_before": 30 * DAY},
            {"ca_valid_for": YEAR, "ca_renew_before": YEAR},
            {"serving_renew_before": YEAR, "serving_valid_for": 2 * YEAR},
        ],
        ids=["zero-validity", "negative-window", "renew-at-issue", "ca-renew-at-issue",
             "serving-window-not-inside-ca-window"],
    )  # fmt: skip
    def test_rejects_policies_that_would_renew_forever(self, changes: dict[str, timedelta]) -> None:
        with pytest.raises(ValueError, match="must be"):
            RotationPolicy(**changes)


@pytest.fixture(scope="module")
def fresh() -> Material:
    """What a first run stores at T0."""
    return plan_rotation(Material(), dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0).material


class TestPlanRotation:
    def test_first_run_makes_a_ca_and_a_serving_certificate_signed_by_it(
        self, fresh: Material
    ) -> None:
        (root,) = bundle_certificates(fresh.ca_cert)
        leaf = certificate(fresh.serving_cert)
        verify_signed_by(leaf, root)
        assert root.not_valid_after_utc == T0 + 10 * YEAR
        assert leaf.not_valid_after_utc == T0 + YEAR
        assert public_key_der(private_key(fresh.ca_key).public_key()) == public_key_der(
            root.public_key()
        )

    def test_valid_material_is_kept_as_is(self, fresh: Material) -> None:
        plan = plan_rotation(fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + 300 * DAY)
        assert plan.material == fresh
        assert not plan.changed
        assert plan.renew_at == T0 + YEAR - 30 * DAY

    def test_serving_certificate_is_renewed_by_the_same_ca_30_days_before_expiry(
        self, fresh: Material
    ) -> None:
        now = T0 + YEAR - 30 * DAY
        plan = plan_rotation(fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=now)
        assert plan.serving_issued
        assert not plan.ca_rotated
        assert plan.material.ca_cert == fresh.ca_cert
        assert plan.material.ca_key == fresh.ca_key
        assert plan.material.serving_key != fresh.serving_key
        leaf = certificate(plan.material.serving_cert)
        verify_signed_by(leaf, certificate(fresh.ca_cert))
        assert leaf.not_valid_after_utc == now + YEAR

    def test_changed_names_reissue_only_the_serving_certificate(self, fresh: Material) -> None:
        plan = plan_rotation(fresh, dns_names=["other.n.svc"], ips=[], now=T0 + DAY)
        assert plan.serving_issued
        assert not plan.ca_rotated
        names = certificate(plan.material.serving_cert).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
        assert names.value.get_values_for_type(x509.DNSName) == ["other.n.svc"]
        assert names.value.get_values_for_type(x509.IPAddress) == []

    def test_force_reissues_the_serving_certificate_and_keeps_the_ca(self, fresh: Material) -> None:
        plan = plan_rotation(
            fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + DAY, force=True
        )
        assert plan.material.serving_cert != fresh.serving_cert
        assert (plan.material.ca_cert, plan.material.ca_key) == (fresh.ca_cert, fresh.ca_key)

    def test_ca_is_replaced_a_year_before_expiry_and_both_cas_are_trusted(
        self, fresh: Material
    ) -> None:
        now = T0 + 9 * YEAR + DAY
        plan = plan_rotation(fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=now)
        assert plan.ca_rotated
        assert plan.serving_issued
        new_root, old_root = bundle_certificates(plan.material.ca_cert)
        assert old_root == certificate(fresh.ca_cert)
        assert new_root.not_valid_after_utc == now + 10 * YEAR
        leaf = certificate(plan.material.serving_cert)
        verify_signed_by(leaf, new_root)
        # A webhook still presenting the old serving certificate stays trusted meanwhile.
        verify_signed_by(certificate(fresh.serving_cert), old_root)
        assert public_key_der(private_key(plan.material.ca_key).public_key()) == public_key_der(
            new_root.public_key()
        )

    def test_old_ca_leaves_the_bundle_once_expired(self, fresh: Material) -> None:
        rotated = plan_rotation(
            fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + 9 * YEAR + DAY
        ).material
        later = plan_rotation(
            rotated, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + 10 * YEAR + DAY
        )
        assert not later.ca_rotated
        assert (
            bundle_certificates(later.material.ca_cert) == bundle_certificates(rotated.ca_cert)[:1]
        )
        assert later.changed

    def test_rotation_is_stable_over_years(self, fresh: Material) -> None:
        material, now = fresh, T0
        for _ in range(25 * 12):
            now += 30 * DAY
            plan = plan_rotation(material, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=now)
            material = plan.material
            leaf = certificate(material.serving_cert)
            roots = bundle_certificates(material.ca_cert)
            assert leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc - 30 * DAY
            verify_signed_by(leaf, roots[0])
            assert all(root.not_valid_after_utc > now for root in roots)
            assert len(roots) <= 2

    @pytest.mark.parametrize(
        "damage",
        [
            {"ca_key": b""},
            {"ca_key": b"garbage"},
            {"ca_cert": b"garbage"},
            {"ca_cert": b""},
        ],
        ids=["ca-key-missing", "ca-key-garbage", "ca-cert-garbage", "ca-cert-missing"],
    )
    def test_unusable_ca_material_gets_a_new_ca(
        self, fresh: Material, damage: dict[str, bytes]
    ) -> None:
        stored = Material(**{**fresh.__dict__, **damage})
        plan = plan_rotation(stored, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + DAY)
        assert plan.ca_rotated
        assert plan.serving_issued
        verify_signed_by(
            certificate(plan.material.serving_cert),
            bundle_certificates(plan.material.ca_cert)[0],
        )

    def test_a_ca_key_of_another_ca_gets_a_new_ca_and_keeps_trusting_the_old(
        self, fresh: Material
    ) -> None:
        other = make_ca("other", now=T0, valid_for=YEAR)
        stored = Material(**{**fresh.__dict__, "ca_key": other.key_pem})
        plan = plan_rotation(stored, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + DAY)
        assert plan.ca_rotated
        assert certificate(fresh.ca_cert) in bundle_certificates(plan.material.ca_cert)

    @pytest.mark.parametrize(
        "damage",
        [
            {"serving_cert": b""},
            {"serving_cert": b"garbage"},
            {"serving_key": b""},
            {"serving_key": b"garbage"},
        ],
        ids=["cert-missing", "cert-garbage", "key-missing", "key-garbage"],
    )
    def test_unusable_serving_material_is_reissued_by_the_same_ca(
        self, fresh: Material, damage: dict[str, bytes]
    ) -> None:
        stored = Material(**{**fresh.__dict__, **damage})
        plan = plan_rotation(stored, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + DAY)
        assert plan.serving_issued
        assert not plan.ca_rotated
        verify_signed_by(certificate(plan.material.serving_cert), certificate(fresh.ca_cert))

    def test_a_serving_key_that_does_not_match_is_reissued(self, fresh: Material) -> None:
        other = issue_serving_cert(
            KeyPair(fresh.ca_cert, fresh.ca_key), dns_names=["a"], ips=[], now=T0, valid_for=YEAR
        )
        stored = Material(**{**fresh.__dict__, "serving_key": other.key_pem})
        plan = plan_rotation(stored, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + DAY)
        assert plan.serving_issued

    def test_a_serving_certificate_from_a_foreign_ca_is_reissued(self, fresh: Material) -> None:
        foreign_ca = make_ca("foreign", now=T0, valid_for=YEAR)
        foreign = issue_serving_cert(
            foreign_ca, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0, valid_for=YEAR
        )
        stored = Material(
            ca_cert=fresh.ca_cert,
            ca_key=fresh.ca_key,
            serving_cert=foreign.cert_pem,
            serving_key=foreign.key_pem,
        )
        plan = plan_rotation(stored, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0 + DAY)
        assert plan.serving_issued
        verify_signed_by(certificate(plan.material.serving_cert), certificate(fresh.ca_cert))

    def test_needs_a_name(self) -> None:
        with pytest.raises(CertificateError):
            plan_rotation(Material(), dns_names=[], ips=[], now=T0)

    def test_checking_with_the_planned_time_does_not_change_anything_again(
        self, fresh: Material
    ) -> None:
        plan = plan_rotation(fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=T0)
        just_before = plan_rotation(
            fresh,
            dns_names=SERVICE_NAMES,
            ips=["127.0.0.1"],
            now=plan.renew_at - timedelta(seconds=1),
        )
        at = plan_rotation(fresh, dns_names=SERVICE_NAMES, ips=["127.0.0.1"], now=plan.renew_at)
        assert not just_before.changed
        assert at.changed


def test_hash_is_sha256(serving: KeyPair) -> None:
    assert isinstance(certificate(serving.cert_pem).signature_hash_algorithm, hashes.SHA256)
