"""Where ``torchgate dev`` finds what it installs, and where one dev cluster keeps its files.

Two kinds of place, both declared here and nowhere else:

- What ``up`` installs: the CRDs and the dev PlacementPolicy (:func:`crd_files`, :data:`CRD_DIR`,
  :data:`PYTORCHJOB_CRD`, :data:`SAMPLE_POLICY`, package data found through
  :mod:`torchgate_dev.packagedata`, so also in an installed wheel), the ``torchgate`` the
  webhook and the controller run from (:data:`PACKAGE_ROOT`), and the seed manifests the real
  node's images are built from (:data:`SEEDS_DIR`, declared with the image specs beside the
  checkout).
- What one dev cluster writes inside DIR (:class:`DevLayout`); DIR defaults to ``.dev`` at the top
  of the git checkout (:func:`default_dir`).

Pure apart from :func:`default_dir`, which looks for ``.git`` upwards from the current dir.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import torchgate
from torchgate_dev import packagedata
from torchgate_dev.controlplane.layout import Layout
from torchgate_dev.node.imagespecs import SEEDS_DIR as SEEDS_DIR
from torchgate_dev.packagedata import crd_files as crd_files

PACKAGE_ROOT: Final = Path(torchgate.__file__).resolve().parents[1]
"""The folder that holds the ``torchgate`` package (the checkout's top in a source tree)."""
CRD_DIR: Final = packagedata.CRD_DIR
PYTORCHJOB_CRD: Final = packagedata.PYTORCHJOB_CRD
SAMPLE_POLICY: Final = packagedata.SAMPLE_POLICY

STATE_FILE: Final = "dev.json"
DEFAULT_DIR_NAME: Final = ".dev"
# The file names of certs.store (the names of a kubernetes.io/tls Secret's entries).
CA_CERT: Final = "ca.crt"
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"


@dataclass(frozen=True, slots=True)
class DevLayout:
    """Everything of one dev cluster inside DIR."""

    root: Path

    @property
    def control_plane(self) -> Layout:
        """The control plane's part (its work dir is DIR itself)."""
        return Layout(self.root)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users export."""
        return self.control_plane.kubeconfig

    @property
    def state(self) -> Path:
        """PIDs and ports of the webhook and the controller."""
        return self.root / STATE_FILE

    @property
    def tls(self) -> Path:
        """The webhook's CA and serving certificate (``certs`` file names)."""
        return self.root / "tls"

    @property
    def webhook_log(self) -> Path:
        """The webhook's stdout and stderr."""
        return self.root / "webhook.log"

    @property
    def controller_log(self) -> Path:
        """The controller's stdout and stderr."""
        return self.root / "controller.log"

    @property
    def images_log(self) -> Path:
        """Progress of the seed images' build for the real node."""
        return self.root / "images.log"

    def logs(self) -> tuple[Path, ...]:
        """What ``down --keep-logs`` and a failed ``up`` keep."""
        return (self.control_plane.logs, self.webhook_log, self.controller_log, self.images_log)

    def owned(self) -> tuple[Path, ...]:
        """Every path a dev cluster writes; ``down`` removes these and nothing else."""
        return (
            *self.control_plane.generated(),
            self.root / "kubectl-cache",
            self.state,
            self.tls,
            self.webhook_log,
            self.controller_log,
            self.images_log,
        )


def default_dir(start: Path | None = None) -> Path:
    """``.dev`` at the top of the git checkout around ``start`` (the current dir), else there."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate / DEFAULT_DIR_NAME
    return here / DEFAULT_DIR_NAME
