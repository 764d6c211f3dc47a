"""Files torchgate-dev carries beside its code, found the same way in a checkout and when installed.

``torchgate dev up`` needs files that are not part of its Python: the CRDs it applies, the
PlacementPolicy it installs for the fake pools, the build scripts and Go module files from which
the control plane (kube-apiserver, controller-manager, scheduler, etcd, kwok, kubelet, kube-proxy)
and the real node's own programs (CoreDNS, pause) are built, and the training script its
rebuild of the upstream examples' image runs. kwok's Stage YAMLs come out of that build.

Where they live: in ``torchgate_dev/data/``, real files (no links), so a checkout, an editable
install and an installed wheel read the same paths through :mod:`importlib.resources`; the wheel
carries them as package data (``dev/pyproject.toml`` lists them). The CRDs are the one exception to
"the file lives here": torchgate's own two (PlacementPolicy, TeamQuota) are copies of
``manifests/crds``, where the kustomize base and the Helm chart take theirs from, and
``tests/unit/test_manifests.py`` keeps them equal to it; the PyTorchJob CRD is not copied here at
all: it is the product's package data (``torchgate check`` validates against it), found where the
product says it is (``torchgate.kube.manifestfiles.crd_resource``), since torchgate-dev always
runs beside the torchgate it depends on.

Rule: the build scripts need real files on disk (``bash`` runs them and ``go`` builds in their
folders), so a torchgate-dev (or a torchgate) imported from somewhere that is not a folder (a zip)
has no data, and :func:`data_path` says so instead of returning a path that does not work.
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

from torchgate.kube import manifestfiles

PACKAGE: Final = "torchgate_dev"
DATA: Final = "data"


class ResourceUnavailable(Exception):
    """torchgate-dev's data files are not on disk (imported from a zip)."""


def data_path(*parts: str) -> Path:
    """The path of ``torchgate_dev/data/<parts...>`` in this installation (it may not exist).

    Raises:
        ResourceUnavailable: torchgate-dev is not imported from a folder.
    """
    return _on_disk(importlib.resources.files(PACKAGE).joinpath(DATA, *parts), PACKAGE)


def _on_disk(located: Traversable, package: str) -> Path:
    if not isinstance(located, Path):
        raise ResourceUnavailable(
            f"{package} is imported from {located!r}, not from a folder; its data files "
            "(CRDs, build scripts) need an installation on disk"
        )
    return located


CRD_DIR: Final = data_path("crds")
"""torchgate's own CRDs ``torchgate dev up`` applies (PlacementPolicy and TeamQuota)."""

PYTORCHJOB_CRD: Final = _on_disk(manifestfiles.crd_resource(), "torchgate")
"""The PyTorchJob CRD ``torchgate dev up`` applies: the product's package data, not a copy."""


def crd_files() -> list[Path]:
    """Every CRD ``torchgate dev up`` applies: the PyTorchJob CRD, then torchgate's own by name."""
    return [PYTORCHJOB_CRD, *sorted(CRD_DIR.glob("*.yaml"))]


SAMPLE_POLICY: Final = data_path("dev-placementpolicy.yaml")
"""The PlacementPolicy and TeamQuotas ``torchgate dev up`` installs unless told not to."""

CONTROLPLANE_BUILD_SCRIPT: Final = data_path("controlplane", "build.sh")
"""Builds (or finds cached) the control-plane binaries and kwok's Stage YAMLs."""

CONTROLPLANE_VERSIONS: Final = data_path("controlplane", "versions.env")
"""The pinned versions: the supported Kubernetes versions (the default first), etcd and kwok."""

NODE_BUILD_SCRIPT: Final = data_path("node", "build.sh")
"""Builds (or finds cached) the real node's own binaries (CoreDNS)."""

PAUSE_SOURCE: Final = data_path("node", "pause")
"""The Go module of the pause program the real node's sandbox image is made of."""

DIST_MNIST_SCRIPT: Final = data_path("node", "pytorch-dist-mnist", "mnist.py")
"""The training script of the upstream examples' image ``kubeflow/pytorch-dist-mnist``."""
