"""``torchgate certs`` checks names with the shared checks of ``pytorchjob.names``: edge cases too.

The flags' names (``--service``, ``--namespace``, ``--secret``, ``--webhook-config``) and the DNS
subjectAltNames (``--dns``, ``validate_dns_name``) are accepted exactly when the shared checks
accept them: one declaration of what a Kubernetes name is, not a regex per package.
"""

from __future__ import annotations

import argparse

import pytest

from torchgate.certs.command import add_arguments
from torchgate.certs.issuing import CertificateError, validate_dns_name
from torchgate.pytorchjob.names import dns1035_errors, is_dns1123_label, is_dns1123_subdomain

LABEL_63 = "a" * 63
SUBDOMAIN_253 = ".".join([LABEL_63] * 3 + ["a" * 61])
EDGE_CASES = {
    "": "empty",
    "a": "one letter",
    "0": "one digit",
    "0abc": "starts with a digit",
    "-a": "starts with a dash",
    "a-": "ends with a dash",
    "a--b": "inner dashes",
    "A": "upper case",
    "a_b": "underscore",
    "a\n": "trailing newline",
    "é": "not ASCII",
    LABEL_63: "label of 63",
    LABEL_63 + "a": "label of 64",
    "a.b": "two labels",
    "a..b": "empty label",
    ".a": "leading dot",
    "a.": "trailing dot",
    f"{LABEL_63}.{LABEL_63}a": "second label of 64",
    SUBDOMAIN_253: "subdomain of 253",
    SUBDOMAIN_253 + "a": "subdomain of 254",
    "*.a.b": "wildcard",
    "*": "wildcard alone",
    "a.*.b": "inner wildcard",
}


def parse(flag: str, value: str) -> bool:
    """Whether ``torchgate certs`` accepts ``value`` for ``flag``."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    try:
        parser.parse_args([flag, value])
    except argparse.ArgumentError:
        return False
    return True


def is_san(value: str) -> bool:
    try:
        validate_dns_name(value)
    except CertificateError:
        return False
    return True


@pytest.mark.parametrize("value", list(EDGE_CASES), ids=list(EDGE_CASES.values()))
def test_the_certificate_name_checks_agree_with_the_shared_ones(value: str) -> None:
    assert parse("--service", value) == (not dns1035_errors(value))
    assert parse("--namespace", value) == is_dns1123_label(value)
    assert parse("--webhook-config", value) == is_dns1123_subdomain(value)
    assert parse("--secret", f"ns/{value}") == is_dns1123_subdomain(value)
    wildcarded = value.lower().removeprefix("*.")
    assert is_san(value) == (len(value) <= 253 and is_dns1123_subdomain(wildcarded))


@pytest.mark.parametrize(
    ("value", "service", "namespace", "object_name", "san"),
    [
        ("a", True, True, True, True),
        ("0abc", False, True, True, True),
        ("A", False, False, False, True),  # a DNS name is case-insensitive: lower-cased
        (LABEL_63, True, True, True, True),
        (LABEL_63 + "a", False, False, False, False),
        ("a.b", False, False, True, True),
        (SUBDOMAIN_253, False, False, True, True),
        (SUBDOMAIN_253 + "a", False, False, False, False),
        ("*.a.b", False, False, False, True),
        ("a\n", False, False, False, False),
        ("", False, False, False, False),
    ],
    ids=[
        "letter",
        "digit first",
        "upper",
        "63",
        "64",
        "dotted",
        "253",
        "254",
        "wildcard",
        "nl",
        "",
    ],
)
def test_what_each_certificate_name_accepts(
    value: str, service: bool, namespace: bool, object_name: bool, san: bool
) -> None:
    assert parse("--service", value) == service
    assert parse("--namespace", value) == namespace
    assert parse("--webhook-config", value) == object_name
    assert is_san(value) == san
