"""Manifest files read as ``kubectl apply -f`` reads them: a file, a directory's files, or stdin.

``torchgate check`` and ``torchgate simulate`` name their inputs as kubectl's ``-f`` does; this is
the one place that reads them, so both read the same objects (the rules for what a file holds are
``torchgate.pytorchjob.manifests``).

Rules:

1. ``-`` is stdin, named ``<stdin>`` in messages.
2. A directory is its ``.yaml``, ``.yml`` and ``.json`` files in name order, not its
   subdirectories' (``manifests.directory_manifests``); a file is itself, whatever its name.
3. A path that cannot be read, or text that is not UTF-8, is a ``ManifestError`` of one line
   naming it, never a traceback.
4. The PyTorchJob CRD the objects are checked against (``pytorchjob.manifests`` rule 8, and
   ``torchgate check``'s schema step) is the product's package data,
   ``torchgate/pytorchjob/data/kubeflow.org_pytorchjobs.yaml`` (a copy of
   ``manifests/crds/kubeflow.org_pytorchjobs.yaml`` that ``tests/unit/test_manifests.py`` keeps
   equal to it), read through :mod:`importlib.resources` once per process (``crd_version``), so
   an installed wheel reads the same schema as a checkout. It is read here, in the shell, so
   that ``pytorchjob.crdschema`` stays pure.
5. ``-n``'s value must be a name a namespace can have (``manifests`` rule 9), else it is a usage
   error naming the flag (``namespace_flag``); an empty one is kept: to kubectl it is no
   namespace given (each command says which namespace that means).
"""

from __future__ import annotations

import argparse
import functools
import importlib.resources
import sys
from collections.abc import Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

from torchgate.pytorchjob import crdschema
from torchgate.pytorchjob.manifests import (
    Manifest,
    ManifestError,
    directory_manifests,
    namespace_name_problem,
    read_manifests,
)

CRD_PACKAGE: Final = "torchgate.pytorchjob"
CRD_FILE: Final = "kubeflow.org_pytorchjobs.yaml"
"""The PyTorchJob CRD, in ``data/`` of :data:`CRD_PACKAGE` (rule 4)."""


def crd_resource() -> Traversable:
    """Where the product's PyTorchJob CRD is in this installation (rule 4)."""
    return importlib.resources.files(CRD_PACKAGE).joinpath("data", CRD_FILE)


@functools.cache
def crd_version() -> Mapping[str, Any]:
    """The served version of the product's PyTorchJob CRD, read once (rule 4)."""
    return crdschema.served_version(crd_resource().read_text(encoding="utf-8"))


def read_manifest_path(path: str) -> list[Manifest]:
    """Every object of the file, directory or stdin (``-``) named ``path``, in order."""
    if path == "-":
        return read_manifests("<stdin>", sys.stdin.read(), crd_version=crd_version())
    manifests: list[Manifest] = []
    for file in manifest_files(Path(path)):
        manifests.extend(read_manifests(str(file), _read_text(file), crd_version=crd_version()))
    return manifests


def manifest_files(path: Path) -> list[Path]:
    """The files ``path`` stands for: itself, or a directory's manifests (rule 2)."""
    if not path.is_dir():
        return [path]
    try:
        entries = [(entry.name, entry.is_file()) for entry in path.iterdir()]
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    return [path / name for name in directory_manifests(str(path), entries)]


def _read_text(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{file}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{file}: not UTF-8 text") from None


def namespace_flag(value: str) -> str:
    """``-n``'s value, if a namespace can be so named (rule 5); else a usage error."""
    problem = namespace_name_problem(value) if value else None
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value
