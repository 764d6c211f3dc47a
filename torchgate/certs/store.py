"""Where the webhook's certificates live: PEM files, a TLS Secret, and webhook ``caBundle`` fields.

This is the only I/O of the ``certs`` package; what to write is decided in ``certs.authority``.

- Files are named like the entries of a ``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``,
  ``ca.crt``, ``ca.key``) so a mounted Secret and ``--out-dir`` look the same to the webhook. Each
  file is replaced atomically (temp file in the same directory, fsync, rename), keys with mode
  0600, and only when its content changed. Two renames are not one: a reader that loads
  ``tls.crt`` and ``tls.key`` in the instant between them gets a mismatched pair and should retry.
- The Secret also keeps ``ca.key``, so whoever renews next (another run, another replica) signs
  with the same CA. Writes carry the ``resourceVersion`` that was read, so a concurrent writer
  makes the apiserver answer 409 Conflict instead of one write silently replacing the other.
- ``caBundle`` is patched with a strategic merge patch keyed by webhook name (the
  ``patchMergeKey`` of ``webhooks``), so no other field of the configuration is sent back and
  fields this client does not know are never dropped.

Every failure becomes a :class:`CertsError` with a one-line message. Messages never contain key
material (the access layer, :mod:`torchgate.kube`, never logs response bodies).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from torchgate.certs.authority import Material
from torchgate.kube import errors
from torchgate.kube.client import STRATEGIC_MERGE_PATCH, ConfigError, KubeApi, KubeClient
from torchgate.kube.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    SECRETS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
)

CA_CERT: Final = "ca.crt"
CA_KEY: Final = "ca.key"
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"
PRIVATE_ENTRIES: Final = frozenset({CA_KEY, TLS_KEY})
# CA first: a serving certificate is never stored ahead of the CA that signed it.
_WRITE_ORDER: Final = (CA_CERT, CA_KEY, TLS_KEY, TLS_CERT)
_KEY_FILE_MODE: Final = 0o600
_CERT_FILE_MODE: Final = 0o644

SECRET_TYPE: Final = "kubernetes.io/tls"
MANAGED_BY_LABEL: Final = {"app.kubernetes.io/managed-by": "torchgate-certs"}
REQUEST_TIMEOUT_SECONDS: Final = 30.0
_MESSAGE_LIMIT: Final = 300

WebhookKind = Literal["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
_KINDS: Final[dict[str, WebhookKind]] = {
    MUTATING_WEBHOOK_CONFIGURATIONS.plural: "MutatingWebhookConfiguration",
    VALIDATING_WEBHOOK_CONFIGURATIONS.plural: "ValidatingWebhookConfiguration",
}


class CertsError(Exception):
    """A failure with a one-line message fit for a user (never contains key material)."""


class NotFound(CertsError):
    """The object does not exist (HTTP 404)."""


class Conflict(CertsError):
    """Someone else wrote the object since it was read (HTTP 409); re-read and retry."""


class Forbidden(CertsError):
    """The identity lacks an RBAC permission (HTTP 403); the message names it."""


class MissingWebhookConfiguration(CertsError):
    """A named webhook configuration exists neither as mutating nor as validating."""


@dataclass(frozen=True)
class SecretRef:
    """Namespace and name of the Secret that holds the material."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class StoredSecret:
    """What a Secret holds, and the ``resourceVersion`` to write it back (None: absent)."""

    material: Material
    resource_version: str | None


@dataclass(frozen=True)
class WebhookConfiguration:
    """The part of a Mutating/ValidatingWebhookConfiguration that caBundle patching needs.

    Attributes:
        kind: which of the two configuration kinds.
        name: object name.
        resource_version: the version that was read.
        ca_bundles: ``(webhook name, current caBundle as PEM bytes)`` per webhook, in order.
    """

    kind: WebhookKind
    name: str
    resource_version: str
    ca_bundles: tuple[tuple[str, bytes], ...]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    def outdated_webhooks(self, bundle: bytes) -> tuple[str, ...]:
        """Names of the webhooks whose caBundle is not ``bundle``."""
        return tuple(name for name, current in self.ca_bundles if current != bundle)


def material_entries(material: Material) -> dict[str, bytes]:
    """The Secret entries / file names and contents for ``material``."""
    return {
        CA_CERT: material.ca_cert,
        CA_KEY: material.ca_key,
        TLS_CERT: material.serving_cert,
        TLS_KEY: material.serving_key,
    }


def material_from_entries(entries: Mapping[str, bytes]) -> Material:
    """Inverse of :func:`material_entries`; missing entries become empty."""
    return Material(
        ca_cert=entries.get(CA_CERT, b""),
        ca_key=entries.get(CA_KEY, b""),
        serving_cert=entries.get(TLS_CERT, b""),
        serving_key=entries.get(TLS_KEY, b""),
    )


# ------------------------------------------------------------------------------------------ files


def read_directory(directory: Path) -> Material:
    """Read the PEM files from ``directory``; missing files (or directory) read as empty.

    Raises:
        CertsError: when a file exists but cannot be read.
    """
    entries: dict[str, bytes] = {}
    for name in _WRITE_ORDER:
        path = directory / name
        try:
            entries[name] = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise CertsError(f"cannot read {path}: {_os_reason(error)}") from None
    return material_from_entries(entries)


def write_directory(directory: Path, material: Material) -> tuple[str, ...]:
    """Write ``material`` into ``directory`` (created if missing), changing only what differs.

    A file counts as different when its bytes differ or, for a key, when group or others may
    access it.

    Returns:
        The names of the files written, in the order written.

    Raises:
        CertsError: when a file cannot be written (nothing half-written is left behind).
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CertsError(f"cannot create directory {directory}: {_os_reason(error)}") from None
    entries = material_entries(material)
    written: list[str] = []
    for name in _WRITE_ORDER:
        path = directory / name
        private = name in PRIVATE_ENTRIES
        if _file_is_current(path, entries[name], private=private):
            continue
        _replace_file(path, entries[name], mode=_KEY_FILE_MODE if private else _CERT_FILE_MODE)
        written.append(name)
    if written:
        _sync_directory(directory)
    return tuple(written)


def _file_is_current(path: Path, content: bytes, *, private: bool) -> bool:
    try:
        if path.read_bytes() != content:
            return False
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return False
    return not (private and mode & 0o077)


def _replace_file(path: Path, content: bytes, *, mode: int) -> None:
    try:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as error:
        raise CertsError(f"cannot write {path}: {_os_reason(error)}") from None
    try:
        # mkstemp creates the file 0600, so a key is never readable by others, not even briefly.
        with os.fdopen(descriptor, "wb") as stream:
            os.fchmod(stream.fileno(), mode)
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise CertsError(f"cannot write {path}: {_os_reason(error)}") from None


def _sync_directory(directory: Path) -> None:
    # Makes the renames durable; some filesystems cannot open a directory, which is fine.
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _os_reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


# ------------------------------------------------------------------------------------- Kubernetes


@contextlib.asynccontextmanager
async def kubernetes_client(kubeconfig: str | None = None) -> AsyncIterator[KubeClient]:
    """An API client from ``kubeconfig``; without one, in-cluster config, then ``$KUBECONFIG``.

    ``$KUBECONFIG`` may list several files (merged like kubectl does); when it is unset,
    ``~/.kube/config`` is used.

    Raises:
        CertsError: when no usable configuration is found.
    """
    try:
        api = await KubeClient.connect(
            kubeconfig, pool_size=4, request_timeout=REQUEST_TIMEOUT_SECONDS
        )
    except ConfigError as error:
        raise CertsError(str(error)) from None
    async with api:
        yield api


async def read_secret(api: KubeApi, ref: SecretRef) -> StoredSecret:
    """Read the material from a Secret; an absent Secret reads as empty material.

    Raises:
        CertsError: Forbidden without ``get`` on secrets, or on any other failure.
    """
    try:
        with _api_errors("get", SECRETS, ref.name, namespace=ref.namespace):
            secret = await api.request("GET", SECRETS.path(ref.namespace, ref.name))
    except NotFound:
        return StoredSecret(material=Material(), resource_version=None)
    data = secret.get("data") or {}
    entries: dict[str, bytes] = {}
    for name in _WRITE_ORDER:
        encoded = data.get(name)
        if not encoded:
            continue
        try:
            entries[name] = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise CertsError(f"Secret {ref}: entry {name} is not valid base64") from None
    return StoredSecret(
        material=material_from_entries(entries),
        resource_version=str(secret["metadata"]["resourceVersion"]),
    )


async def write_secret(
    api: KubeApi, ref: SecretRef, material: Material, *, resource_version: str | None
) -> None:
    """Create the Secret (``resource_version`` None) or update our entries in it.

    An existing Secret keeps its type, labels and other entries.

    Raises:
        Conflict: when the Secret changed, appeared or disappeared since it was read.
        CertsError: Forbidden without ``create``/``patch`` on secrets, or on any other failure.
    """
    data = {
        name: base64.b64encode(content).decode("ascii")
        for name, content in material_entries(material).items()
    }
    if resource_version is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "labels": dict(MANAGED_BY_LABEL),
            },
            "type": SECRET_TYPE,
            "data": data,
        }
        with _api_errors("create", SECRETS, ref.name, namespace=ref.namespace):
            await api.request("POST", SECRETS.path(ref.namespace), body=body)
        return
    # A strategic merge patch keeps every other entry; resourceVersion in it is a precondition
    # (the apiserver answers 409 if the Secret changed since it was read).
    patch = {"metadata": {"resourceVersion": resource_version}, "data": data}
    with _api_errors("patch", SECRETS, ref.name, namespace=ref.namespace):
        await api.request(
            "PATCH",
            SECRETS.path(ref.namespace, ref.name),
            body=patch,
            content_type=STRATEGIC_MERGE_PATCH,
        )


async def read_webhook_configurations(api: KubeApi, name: str) -> tuple[WebhookConfiguration, ...]:
    """The mutating and/or validating configurations called ``name`` that exist (0, 1 or 2).

    Raises:
        CertsError: Forbidden without ``get`` on the configuration kind, or on any other failure.
    """
    found = (
        await _read_configuration(api, MUTATING_WEBHOOK_CONFIGURATIONS, name),
        await _read_configuration(api, VALIDATING_WEBHOOK_CONFIGURATIONS, name),
    )
    return tuple(configuration for configuration in found if configuration is not None)


async def _read_configuration(
    api: KubeApi, resource: Resource, name: str
) -> WebhookConfiguration | None:
    try:
        with _api_errors("get", resource, name):
            configuration = await api.request("GET", resource.path(None, name))
    except NotFound:
        return None
    bundles = tuple(
        (str(webhook.get("name")), _decode_ca_bundle(_ca_bundle_of(webhook)))
        for webhook in configuration.get("webhooks") or ()
    )
    return WebhookConfiguration(
        kind=_KINDS[resource.plural],
        name=name,
        resource_version=str(configuration["metadata"]["resourceVersion"]),
        ca_bundles=bundles,
    )


def _ca_bundle_of(webhook: Mapping[str, Any]) -> str | None:
    client_config = webhook.get("clientConfig") or {}
    bundle = client_config.get("caBundle")
    return bundle if isinstance(bundle, str) else None


async def patch_ca_bundle(api: KubeApi, configuration: WebhookConfiguration, bundle: bytes) -> bool:
    """Set ``caBundle`` of every webhook in ``configuration`` to ``bundle`` where it differs.

    Returns:
        Whether a patch was sent.

    Raises:
        Conflict: when the configuration changed or disappeared since it was read.
        CertsError: Forbidden without ``patch`` on the configuration kind, or another failure.
    """
    outdated = configuration.outdated_webhooks(bundle)
    if not outdated:
        return False
    encoded = base64.b64encode(bundle).decode("ascii")
    # A strategic merge patch: ``webhooks`` entries merge by name, and resourceVersion makes it
    # conditional (409 if the configuration changed since it was read).
    patch = {
        "metadata": {"resourceVersion": configuration.resource_version},
        "webhooks": [{"name": name, "clientConfig": {"caBundle": encoded}} for name in outdated],
    }
    if configuration.kind == "MutatingWebhookConfiguration":
        await _patch_configuration(api, MUTATING_WEBHOOK_CONFIGURATIONS, configuration.name, patch)
    else:
        await _patch_configuration(
            api, VALIDATING_WEBHOOK_CONFIGURATIONS, configuration.name, patch
        )
    return True


async def _patch_configuration(
    api: KubeApi, resource: Resource, name: str, patch: Mapping[str, Any]
) -> None:
    with _api_errors("patch", resource, name):
        await api.request(
            "PATCH", resource.path(None, name), body=patch, content_type=STRATEGIC_MERGE_PATCH
        )


def _decode_ca_bundle(encoded: str | None) -> bytes:
    if not encoded:
        return b""
    try:
        return base64.b64decode(encoded)
    except (binascii.Error, ValueError):
        return b""


@contextlib.contextmanager
def _api_errors(
    verb: str, resource: Resource, name: str, *, namespace: str | None = None
) -> Iterator[None]:
    """Turn the access layer's errors raised inside into :class:`CertsError` subclasses."""
    plural = resource.plural + (f".{resource.group}" if resource.group else "")
    where = f'{plural} "{name}"' + (f' in namespace "{namespace}"' if namespace else "")
    try:
        yield
    except errors.ApiError as error:
        raise _status_error(error, verb=verb, resource=plural, where=where) from None


def _status_error(error: errors.ApiError, *, verb: str, resource: str, where: str) -> CertsError:
    status = error.status
    message = _one_line(error.message)[:_MESSAGE_LIMIT]
    if status == 0:
        return CertsError(f"cannot {verb} {where}: apiserver unreachable: {message}")
    if status == 404 and verb == "patch":
        # Deleted since it was read: like a conflict, a fresh read decides what to do.
        return Conflict(f"{where} was deleted while being updated")
    if status == 404:
        # On create, 404 means the namespace is missing; the apiserver's message says so.
        return NotFound(
            f"{where} not found" if verb == "get" else f"cannot {verb} {where}: {message}"
        )
    if status == 409:
        return Conflict(f"{where} was changed by someone else (409 Conflict)")
    if status == 403:
        return Forbidden(
            f'forbidden: cannot {verb} {where}; grant the verb "{verb}" on {resource} '
            "to this identity (RBAC)"
        )
    if status == 401:
        return CertsError("unauthorized: the apiserver rejected the client credentials")
    detail = f": {message}" if message else ""
    return CertsError(f"cannot {verb} {where}: HTTP {status} {error.reason}".rstrip() + detail)


def _one_line(value: object) -> str:
    return " ".join(str(value).split())
