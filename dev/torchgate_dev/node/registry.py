"""The loopback image registry the local node pulls from, and a small client for its HTTP API.

Why a registry at all: containerd pulls images by name, and the build machines reach no public
registry. Debian's ``docker-registry`` (distribution v2) serves our hand-built images on
127.0.0.1; containerd is configured to use it as the mirror of ``docker.io`` and of the made-up
``registry.torchgate.local``, so the seed manifests' image names work unchanged. Its storage lives
in the cache folder, so images pushed once survive later runs and are never rebuilt or pushed
again.

The client speaks just enough of the Docker Registry HTTP API v2 to push: HEAD a blob to skip it,
mount it from another repository of the same registry (layers shared by several images are stored
once and never sent twice), monolithic POST+PUT upload, HEAD and PUT of a manifest. It uses
urllib without proxies: every request goes to loopback.
"""

from __future__ import annotations

import io
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final, Self

import yaml

from torchgate_dev.controlplane import processes
from torchgate_dev.controlplane.processes import ManagedProcess
from torchgate_dev.node import oci
from torchgate_dev.ports import free_port

REGISTRY_BINARY: Final = Path("/usr/bin/docker-registry")
_START_TIMEOUT: Final = 30.0
_POLL_SECONDS: Final = 0.05
_STOP_GRACE: Final = 5.0
_MANIFEST_ACCEPT: Final = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)


class RegistryError(RuntimeError):
    """The registry did not start, or answered a request in a way we cannot use."""


def registry_config(storage: Path, port: int) -> dict[str, object]:
    """The registry's YAML configuration: filesystem storage, deletes allowed, loopback only."""
    return {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": {"addr": f"127.0.0.1:{port}"},
    }


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Registry:
    """One ``docker-registry`` child process in its own process group, on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``workdir`` holds its
    configuration and log; ``storage`` its blobs (keep that in the cache to keep the images).
    """

    def __init__(
        self,
        storage: Path,
        workdir: Path,
        *,
        port: int | None = None,
        binary: Path = REGISTRY_BINARY,
    ) -> None:
        self.storage = storage
        self.workdir = workdir
        self.port = port if port is not None else free_port()
        self.binary = binary
        self._process: ManagedProcess | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``, the registry part of a push or pull address."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The registry's log (stdout and stderr)."""
        return self.workdir / "registry.log"

    @property
    def process(self) -> ManagedProcess | None:
        """The running process, if started."""
        return self._process

    def start(self, *, timeout: float = _START_TIMEOUT) -> Self:
        """Start the registry and wait until ``GET /v2/`` answers 200."""
        if self._process is not None:
            return self
        if not self.binary.exists():
            raise RegistryError(f"{self.binary} not found: apt-get install docker-registry")
        self.storage.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "registry.yaml"
        config.write_text(
            yaml.safe_dump(registry_config(self.storage, self.port), sort_keys=False),
            encoding="utf-8",
        )
        # REGISTRY_* variables override the configuration file: never inherit any.
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        self._process = processes.spawn(
            "registry",
            [str(self.binary), "serve", str(config)],
            self.log_path,
            cwd=self.workdir,
            env=env,
            banner=True,
        )
        deadline = time.monotonic() + timeout
        client = RegistryClient(self.host, timeout=2)
        while not client.ping():
            if processes.exit_status(self._process) is not None:
                tail = processes.log_tail(self.log_path, 20)
                self.stop()
                raise RegistryError(f"the registry exited during startup:\n{tail}")
            if time.monotonic() > deadline:
                tail = processes.log_tail(self.log_path, 20)
                self.stop()
                raise RegistryError(f"the registry did not answer in {timeout:.0f}s:\n{tail}")
            time.sleep(_POLL_SECONDS)
        return self

    def stop(self) -> None:
        """SIGTERM the registry's process group (SIGKILL after a grace period) and reap it."""
        if self._process is not None:
            processes.stop(self._process, grace=_STOP_GRACE)
            self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class RegistryClient:
    """Push-side Docker Registry HTTP API v2 over plain HTTP (``host`` is ``HOST:PORT``)."""

    def __init__(self, host: str, *, timeout: float = 600.0) -> None:
        self.base = f"http://{host}"
        self.timeout = timeout
        self._opener = _no_proxy_opener()

    def _request(
        self,
        method: str,
        url: str,
        *,
        data: bytes | BinaryIO | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str]]:
        """Status and headers of a request; HTTP errors are answers too, not exceptions."""
        full = url if url.startswith("http") else f"{self.base}{url}"
        request = urllib.request.Request(full, data=data, method=method, headers=headers or {})
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read()
                return int(response.status), dict(response.headers.items())
        except urllib.error.HTTPError as error:
            body = error.read()[:500].decode(errors="replace")
            headers_out = dict(error.headers.items()) if error.headers else {}
            headers_out["x-error-body"] = body
            return int(error.code), headers_out
        except (urllib.error.URLError, OSError) as error:
            raise RegistryError(f"{method} {full}: {error}") from error

    def ping(self) -> bool:
        """Whether ``GET /v2/`` answers 200."""
        try:
            status, _ = self._request("GET", "/v2/")
        except RegistryError:
            return False
        return status == 200

    def has_blob(self, repository: str, digest: str) -> bool:
        """Whether the blob is linked into ``repository``."""
        status, _ = self._request("HEAD", f"/v2/{repository}/blobs/{digest}")
        return status == 200

    def mount_blob(self, repository: str, digest: str, source: str) -> bool:
        """Link a blob that ``source`` (same registry) holds into ``repository`` without upload."""
        query = urllib.parse.urlencode({"mount": digest, "from": source})
        status, headers = self._request("POST", f"/v2/{repository}/blobs/uploads/?{query}")
        if status == 201:
            return True
        if status == 202:  # the registry opened an upload session instead: close it
            self._request("DELETE", self._location(headers))
        return False

    def upload_blob(
        self, repository: str, digest: str, size: int, open_blob: Callable[[], BinaryIO]
    ) -> None:
        """Monolithic upload: POST opens a session, one PUT sends the bytes and the digest."""
        status, headers = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        if status != 202:
            raise RegistryError(f"upload of {digest} to {repository}: POST answered {status}")
        location = self._location(headers)
        parts = urllib.parse.urlsplit(location)
        query = [*urllib.parse.parse_qsl(parts.query), ("digest", digest)]
        url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        with open_blob() as body:
            status, headers = self._request(
                "PUT",
                url,
                data=body,
                headers={
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(size),
                },
            )
        if status != 201:
            detail = headers.get("x-error-body", "")
            raise RegistryError(f"upload of {digest} to {repository}: PUT {status} {detail}")

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """The digest of the manifest stored under a tag (or digest), or None if absent."""
        status, headers = self._request(
            "HEAD",
            f"/v2/{repository}/manifests/{reference}",
            headers={"Accept": _MANIFEST_ACCEPT},
        )
        if status != 200:
            return None
        return _header(headers, "Docker-Content-Digest")

    def _json(self, path: str) -> dict[str, object]:
        request = urllib.request.Request(f"{self.base}{path}")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                body = json.loads(response.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise RegistryError(f"GET {self.base}{path}: {error}") from error
        return body if isinstance(body, dict) else {}

    def tagged_digests(self) -> set[str]:
        """The manifest digests some tag of some repository points at now."""
        found: set[str] = set()
        repositories = self._json("/v2/_catalog?n=1000").get("repositories") or []
        for repository in repositories if isinstance(repositories, list) else []:
            tags = self._json(f"/v2/{repository}/tags/list").get("tags") or []
            for tag in tags if isinstance(tags, list) else []:
                digest = self.manifest_digest(str(repository), str(tag))
                if digest:
                    found.add(digest)
        return found

    def put_manifest(self, repository: str, tag: str, manifest: bytes, media_type: str) -> str:
        """Store a manifest under ``tag``; returns the digest the registry computed."""
        status, headers = self._request(
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            data=manifest,
            headers={"Content-Type": media_type},
        )
        digest = _header(headers, "Docker-Content-Digest")
        if status != 201 or digest is None:
            detail = headers.get("x-error-body", "")
            raise RegistryError(f"manifest {repository}:{tag}: PUT answered {status} {detail}")
        return digest

    def _location(self, headers: dict[str, str]) -> str:
        location = _header(headers, "Location")
        if location is None:
            raise RegistryError("the registry answered an upload without a Location")
        return urllib.parse.urljoin(f"{self.base}/", location)


def _header(headers: dict[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


@dataclass(frozen=True, slots=True)
class PushOutcome:
    """What a push did: whether the manifest was sent, and which blobs were uploaded or mounted.

    ``manifest_pushed`` is False (and both tuples are empty) when the registry already held the
    same manifest under the tag.
    """

    reference: str
    digest: str
    size: int
    manifest_pushed: bool
    uploaded: tuple[str, ...]
    mounted: tuple[str, ...]


def push_image(
    client: RegistryClient,
    reference: oci.ImageReference,
    image: oci.AssembledImage,
    layer_files: Sequence[Path],
    *,
    holders: dict[str, str],
    report: Callable[[str], None],
) -> PushOutcome:
    """Push an image under its repository path and tag, sending only what the registry lacks.

    Nothing is sent when the tag already names the same manifest. Otherwise each blob is
    skipped if the repository has it, mounted if ``holders`` (digest -> repository, updated
    here) names a repository that has it, and uploaded from ``layer_files`` (one per layer, in
    order) or memory (the config) if not.
    """
    repository, name = reference.repository, str(reference)
    blobs = [image.config_descriptor, *image.layers]
    if client.manifest_digest(repository, reference.tag) == image.digest:
        holders.update(dict.fromkeys((blob.digest for blob in blobs), repository))
        report(f"{name}: up to date ({image.digest[:19]})")
        return PushOutcome(name, image.digest, image.size, False, (), ())
    if len(layer_files) != len(image.layers):
        raise ValueError(f"{len(image.layers)} layers but {len(layer_files)} layer files")
    openers: list[Callable[[], BinaryIO]] = [lambda: io.BytesIO(image.config)]
    openers += [_file_opener(path) for path in layer_files]
    uploaded: list[str] = []
    mounted: list[str] = []
    for blob, opener in zip(blobs, openers, strict=True):
        if client.has_blob(repository, blob.digest):
            pass
        elif blob.digest in holders and client.mount_blob(
            repository, blob.digest, holders[blob.digest]
        ):
            mounted.append(blob.digest)
        else:
            started = time.monotonic()
            client.upload_blob(repository, blob.digest, blob.size, opener)
            uploaded.append(blob.digest)
            report(
                f"  uploaded {blob.digest[:19]} ({blob.size / 1e6:.1f} MB) to {repository} "
                f"in {time.monotonic() - started:.1f}s"
            )
        holders[blob.digest] = repository
    stored = client.put_manifest(repository, reference.tag, image.manifest, oci.MANIFEST_MEDIA_TYPE)
    if stored != image.digest:
        raise RegistryError(f"{name}: the registry stored {stored}, not {image.digest}")
    report(
        f"{name}: pushed {image.digest[:19]} ({image.size / 1e6:.1f} MB; "
        f"{len(uploaded)} blobs uploaded, {len(mounted)} mounted)"
    )
    return PushOutcome(name, image.digest, image.size, True, tuple(uploaded), tuple(mounted))


def _file_opener(path: Path) -> Callable[[], BinaryIO]:
    return lambda: open(path, "rb")
