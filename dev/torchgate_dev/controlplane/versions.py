"""Which Kubernetes version a local control plane runs: the supported ones and the choice.

Why a choice at all: torchgate supports a range of Kubernetes minors (README's table) and tests
each one on a real control plane, built from Go modules per version. The supported versions are
declared once, in ``torchgate_dev/data/controlplane/versions.env`` (``KUBERNETES_VERSIONS``, the
default first), which ``build.sh`` reads too; each has its own wrapper Go module there.

Rules (each a function below, each a unit test):

1. :func:`parse_versions_env`: the declaration lists at least one version, each ``X.Y.Z`` with an
   optional leading ``v``, one per minor; versions are kept without the ``v``.
2. :func:`normalise`: a requested version is written ``X.Y.Z`` or ``vX.Y.Z``.
3. :meth:`SupportedVersions.select`: the version asked for (an argument, else
   ``$TORCHGATE_KUBERNETES_VERSION``, else the default) must be a supported one; anything else is
   refused with a message that names the supported ones.

Pure apart from :func:`supported`, which reads the packaged declaration.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from torchgate_dev import packagedata

VERSION_ENV: Final = "TORCHGATE_KUBERNETES_VERSION"
"""The Kubernetes version to run when none is given (the e2e tests' and the harness's choice)."""

_DECLARATION_KEY: Final = "KUBERNETES_VERSIONS"
_VERSION: Final = re.compile(r"v?(?P<version>[0-9]+\.[0-9]+\.[0-9]+)")


class UnsupportedVersion(ValueError):
    """A Kubernetes version that is not one of the supported ones; the message names them."""


@dataclass(frozen=True, slots=True)
class SupportedVersions:
    """The supported Kubernetes versions, ``X.Y.Z``, the default first."""

    versions: tuple[str, ...]

    @property
    def default(self) -> str:
        """The version used when none is asked for."""
        return self.versions[0]

    def describe(self) -> str:
        """``1.37.2 (default), 1.36.3``."""
        return ", ".join(
            f"{version} (default)" if version == self.default else version
            for version in self.versions
        )

    def select(
        self, requested: str | None = None, *, environ: Mapping[str, str] | None = None
    ) -> str:
        """The version to run: ``requested``, else ``environ[VERSION_ENV]``, else the default.

        An empty value counts as not given.

        Raises:
            UnsupportedVersion: The version chosen is malformed or not supported.
        """
        from_environment = (environ or {}).get(VERSION_ENV)
        chosen = requested or from_environment or self.default
        where = f" (from ${VERSION_ENV})" if not requested and from_environment else ""
        try:
            version = normalise(chosen)
        except ValueError:
            version = None
        if version not in self.versions:
            raise UnsupportedVersion(
                f"Kubernetes {chosen!r}{where} is not supported; supported: {self.describe()}"
            )
        return version


def normalise(text: str) -> str:
    """``X.Y.Z`` from ``X.Y.Z`` or ``vX.Y.Z`` (surrounding blanks ignored).

    Raises:
        ValueError: Not of that form.
    """
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes version X.Y.Z")
    return match.group("version")


def parse_versions_env(text: str) -> SupportedVersions:
    """The supported versions declared by ``versions.env`` (shell ``KEY=value`` lines).

    Raises:
        ValueError: ``KUBERNETES_VERSIONS`` is missing, empty, malformed, or lists a minor twice.
    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 1 and "=" in words[0]:
            key, _, value = words[0].partition("=")
            values[key] = value
    declared = values.get(_DECLARATION_KEY, "").split()
    if not declared:
        raise ValueError(f"{_DECLARATION_KEY} lists no Kubernetes version")
    versions = tuple(normalise(version) for version in declared)
    minors = [version.rpartition(".")[0] for version in versions]
    if len(set(minors)) != len(minors):
        raise ValueError(
            f"{_DECLARATION_KEY} lists a minor twice ({' '.join(declared)}); each minor has one "
            "wrapper module, so one version"
        )
    return SupportedVersions(versions)


def wrapper_module(version: str) -> str:
    """The folder of a version's wrapper Go module, beside ``build.sh``: ``k8s-1.37``."""
    return f"k8s-{normalise(version).rpartition('.')[0]}"


@functools.cache
def supported() -> SupportedVersions:
    """The versions torchgate-dev declares (``data/controlplane/versions.env``).

    Raises:
        ValueError: The declaration is malformed (a broken installation).
        OSError: It cannot be read.
    """
    return parse_versions_env(packagedata.CONTROLPLANE_VERSIONS.read_text(encoding="utf-8"))
